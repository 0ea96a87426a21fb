"""Where the committed result files are: the checkout's ``data/results``, or the package's copy.

The chapters plot result files committed under ``data/results/`` (full runs, benchmarks,
tightness searches). In a checkout of the course they are read from there. An installed
library (``pip install git+...`` on Colab, or a wheel) carries a copy of every JSON and
CSV file of ``data/results/`` inside the package, as ``stablernn_lib/_results/``
(``setup.py`` copies them when the package is built), so a chapter run from any folder
finds the same files.
"""

from __future__ import annotations

from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parents[1]
CHECKOUT_RESULTS = PACKAGE_DIR.parent / "data" / "results"
PACKAGED_RESULTS = PACKAGE_DIR / "_results"
RESULT_SUFFIXES = (".json", ".csv")


def results_root() -> Path:
    """The folder that holds ``figure1/``, ``wikitext2/``, ``tightness.json``, ...

    The checkout's ``data/results`` when the library is imported from a checkout (editable
    install or ``PYTHONPATH``); otherwise the copy installed with the package; otherwise
    ``data/results`` of the working directory (where a run of an installed library
    writes its own results).
    """
    if (PACKAGE_DIR.parent / "pyproject.toml").is_file() and CHECKOUT_RESULTS.is_dir():
        return CHECKOUT_RESULTS
    if PACKAGED_RESULTS.is_dir():
        return PACKAGED_RESULTS
    return Path.cwd() / "data" / "results"


def results_path(*parts: str) -> Path:
    """``results_root() / parts``, e.g. ``results_path("figure1", "full")``."""
    return results_root().joinpath(*parts)
