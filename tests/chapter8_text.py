"""Chapter 8's prose and glued numbers, for the tests that check one against the other."""

from __future__ import annotations

import json
from pathlib import Path

PAGES = ("08_wikitext2_experiments", "08b_wikitext2_evidence")


def chapter8_prose() -> str:
    """The Markdown of Chapter 8 and of its evidence page, whitespace collapsed."""
    folder = Path(__file__).resolve().parents[1] / "chapters"
    text = []
    for name in PAGES:
        cells = json.loads((folder / f"{name}.ipynb").read_text(encoding="utf8"))["cells"]
        text += ["".join(c["source"]) for c in cells if c["cell_type"] == "markdown"]
    return " ".join(" ".join(text).split())


def chapter8_numbers() -> dict:
    """Every number the two pages glue (``results.chapter8_numbers``)."""
    from stablernn_lib.tasks.wikitext2.results import chapter8_numbers as numbers

    return numbers()
