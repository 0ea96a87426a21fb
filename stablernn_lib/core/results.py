"""Where the committed result files are: the checkout's ``data/results``, or the copy that
``setup.py`` packs into an installed library as ``stablernn_lib/_results/`` (JSON and CSV)."""

from __future__ import annotations

from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parents[1]
CHECKOUT_RESULTS = PACKAGE_DIR.parent / "data" / "results"
PACKAGED_RESULTS = PACKAGE_DIR / "_results"


def results_root() -> Path:
    """The folder of ``figure1/``, ``wikitext2/``, ...: the checkout's ``data/results`` when
    imported from a checkout, else the package's copy, else ``data/results`` of the working
    directory (where a run of an installed library writes its own results)."""
    if (PACKAGE_DIR.parent / "pyproject.toml").is_file() and CHECKOUT_RESULTS.is_dir():
        return CHECKOUT_RESULTS
    if PACKAGED_RESULTS.is_dir():
        return PACKAGED_RESULTS
    return Path.cwd() / "data" / "results"


def results_path(*parts: str) -> Path:
    """``results_root() / parts``, e.g. ``results_path("figure1", "full")``."""
    return results_root().joinpath(*parts)
