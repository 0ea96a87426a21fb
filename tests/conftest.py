"""Shared fixtures: seeded generators and the real-data location."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch

# The unit tests run many tiny float64 operations: one thread is faster than two there.
torch.set_num_threads(1)


@pytest.fixture
def generator() -> torch.Generator:
    """A seeded CPU generator, so every random instance is reproducible."""
    return torch.Generator().manual_seed(20190506)


@pytest.fixture
def real_data_dir() -> Path:
    """The directory of the real corpora (STABLERNN_DATA), or skip with the reason."""
    value = os.environ.get("STABLERNN_DATA")
    if not value:
        pytest.skip(
            "needs the real WikiText-2 corpus: set STABLERNN_DATA to the folder holding "
            "wikitext-2/ (CI sets it to ../shared/data)"
        )
    return Path(value)


@pytest.fixture(autouse=True)
def no_open_figures():
    """Start every test with no open matplotlib figure and close what it leaves open."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.close("all")
    yield
    plt.close("all")


@pytest.fixture(autouse=True, scope="session")
def fresh_caches_under_mutmut() -> None:
    """Under mutmut, clear every ``functools`` cache of ``stablernn_lib`` once per run.

    mutmut 3 forks each mutant's test run from a process that has already run the
    unmutated code, so a cached result (``general_lemmas.solved_recursions``) would hide
    the mutant; only a name holding ``__mutmut_`` (a mutant, not mutmut's own passes)
    triggers this.
    """
    if "__mutmut_" not in os.environ.get("MUTANT_UNDER_TEST", ""):
        return
    for name, module in list(sys.modules.items()):
        if name.startswith("stablernn_lib") and module is not None:
            for value in vars(module).values():
                if callable(getattr(value, "cache_clear", None)):
                    value.cache_clear()
