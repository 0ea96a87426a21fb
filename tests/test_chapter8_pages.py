"""Chapter 8 as built: the lesson and its evidence page glue every number their text
quotes, and the lesson reads as a lesson (no commands, the evidence page linked)."""

from __future__ import annotations

import re

import nbformat
import pytest
from book_support import BUILD_DIR, HTML_DIR, ROOT, build_book

from stablernn_lib.book.colab import glued_values

PAGES = ("chapters/08_wikitext2_experiments", "chapters/08b_wikitext2_evidence")


def _roles(page: str) -> set[str]:
    """The keys of every ``{glue:text}`` role in a page's Markdown."""
    cells = nbformat.read(ROOT / f"{page}.ipynb", as_version=4).cells
    text = "\n".join(c.source for c in cells if c.cell_type == "markdown")
    return {role.partition(":")[0] for role in re.findall(r"\{glue:text\}`([^`]+)`", text)}


def test_the_pages_glue_every_number_in_one_cell_from_the_library() -> None:
    """The numbers come from ``chapter8_numbers`` (tested against the result files), glued by
    one hidden cell of each page, before any Markdown that quotes them."""
    for page in PAGES:
        cells = nbformat.read(ROOT / f"{page}.ipynb", as_version=4).cells
        (glue,) = [c for c in cells if c.cell_type == "code" and "glue(" in c.source]
        assert "chapter8_numbers()" in glue.source and "remove-cell" in glue.metadata["tags"]
        first_role = next(i for i, c in enumerate(cells) if "{glue:text}" in c.source)
        assert cells.index(glue) < first_role and _roles(page)


def test_the_lesson_shows_no_command_and_links_its_evidence_page() -> None:
    cells = nbformat.read(ROOT / f"{PAGES[0]}.ipynb", as_version=4).cells
    text = "\n".join(c.source for c in cells if c.cell_type == "markdown")
    assert "python -m" not in text and "```bash" not in text
    assert text.count("</chapters/08b_wikitext2_evidence>") >= 2  # intro and result table
    for word in ("lease", "session", "tracker", "17 jobs"):
        assert word not in text, word


@pytest.mark.book
@pytest.mark.slow
def test_the_executed_pages_glued_every_key_their_text_quotes() -> None:
    assert build_book().returncode == 0
    for page in PAGES:
        executed = BUILD_DIR / "jupyter_execute" / f"{page}.ipynb"
        glued = glued_values(nbformat.read(executed, as_version=4))
        missing = _roles(page) - set(glued)
        assert not missing, (page, sorted(missing))
    html = (HTML_DIR / f"{PAGES[0]}.html").read_text(encoding="utf-8")
    assert "python -m" not in html and "08b_wikitext2_evidence.html" in html
