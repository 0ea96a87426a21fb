"""Every Colab notebook says what its page on the student site says.

The figures, their numbers and captions are compared at the end of this file; first
the prose: each Markdown cell of a Colab notebook (``_sources/*.ipynb`` of the built site,
the notebook the Colab and download buttons hand out), read as Colab renders it, must
appear word for word, in one piece, in the text of its page (the section numbers of the
site's headings left out). So a glued number, a figure
or theorem number in a cross-reference, a citation or a sentence that differs between the
two fails, and so does a page whose notebook lost a paragraph. Math is left out on both
sides (the site typesets its MathJax source, Colab its own), and so is punctuation.
"""

from __future__ import annotations

import html
import re
from pathlib import Path

import nbformat
import pytest
from colab_figures import colab_figures, site_figures
from markdown_it import MarkdownIt
from stablernn_tools import colab_conversion as colab

# cells the conversion adds for Colab only: the edition note, the paper numbers' marks,
# the reference list (the site has its own bibliography page)
COLAB_ONLY = ("colab-edition-note", "colab-paper-numbers", "colab-references")
SITE_MATH = re.compile(
    r'<(span|div) class="math[^"]*"[^>]*>.*?</\1>|<mjx-container.*?</mjx-container>', re.S
)
# hidden markup, and the section numbers of headings (Colab numbers no sections)
HIDDEN = re.compile(
    r"<(script|style|template)\b.*?</\1>|<a class=\"headerlink\".*?</a>"
    r'|<span class="section-number">[^<]*</span>',
    re.S,
)
ARTICLE = re.compile(r'<article class="bd-article"[^>]*>(?P<body>.*?)</article>', re.S)
LINK_TARGET = re.compile(r"\]\([^)\s]*\)")


# inline markup: taken out without a space, so "0.99<span>x</span>" stays one word as read
INLINE_TAG = re.compile(r"</?(?:span|a|em|strong|code|sup|sub|abbr|b|i)\b[^>]*>")


def words(text: str) -> list[str]:
    """The words of HTML-free text, without punctuation (quotes and dashes differ)."""
    text = html.unescape(text).replace("\u2019", "'")
    return re.findall(r"[^\W_]+", text)


def site_words(page: Path) -> list[str]:
    """The words of a built page's article, math and hidden markup removed."""
    source = page.read_text(encoding="utf-8")
    found = ARTICLE.search(source)
    body = found["body"] if found else source
    body = INLINE_TAG.sub("", HIDDEN.sub(" ", SITE_MATH.sub(" ", body)))
    return words(re.sub(r"<[^>]+>", " ", body))


def colab_cell_words(source: str) -> list[str]:
    """The words of one Colab Markdown cell as CommonMark renders it, math removed."""
    rest, _ = colab.split_math(LINK_TARGET.sub("]", source))
    rest = re.sub(r"MATHPLACEHOLDER\d+X", " ", rest)
    rendered = MarkdownIt("commonmark").render(rest)
    rendered = re.sub(r"<details>.*?</details>", " ", rendered, flags=re.S)
    return words(re.sub(r"<[^>]+>", " ", INLINE_TAG.sub("", rendered)))


def missing_cells(notebook: nbformat.NotebookNode, page_words: list[str]) -> list[str]:
    """The start of every Colab Markdown cell whose words the page does not hold in order."""
    text = f" {' '.join(page_words)} "
    missing = []
    for cell in notebook.cells:
        if cell.cell_type != "markdown" or cell.get("id") in COLAB_ONLY:
            continue
        if cell.get("id", "").endswith(("-caption", "-description")):
            continue  # a figure's caption and description: test_colab_notebooks.py compares
            # them (the site carries the description as the image's alt, not as text)
        cell_words = colab_cell_words(cell.source)
        if cell_words and f" {' '.join(cell_words)} " not in text:
            missing.append(" ".join(cell_words[:25]))
    return missing


def test_a_changed_sentence_or_number_is_found(tmp_path):
    """The comparison itself: a cell that says something else than the page is reported."""
    page = tmp_path / "page.html"
    page.write_text(
        '<article class="bd-article"><p>The gap is 27.4% (see <a href="#f">Figure 8.2</a>)'
        ' and <span class="math notranslate">\\(\\lambda &lt; 1\\)</span> holds.</p></article>'
    )
    same = "The gap is 27.4% (see **Figure 8.2**) and $\\lambda < 1$ holds."
    other_number = "The gap is 27.5% (see **Figure 8.2**) and $\\lambda < 1$ holds."
    other_figure = "The gap is 27.4% (see **Figure 8.3**) and $\\lambda < 1$ holds."
    cells = [nbformat.v4.new_markdown_cell(text) for text in (same, other_number, other_figure)]
    notebook = nbformat.v4.new_notebook(cells=cells)
    missing = missing_cells(notebook, site_words(page))
    assert [m.split()[3] for m in missing] == ["27", "27"] and len(missing) == 2
    assert "8 3" in missing[1]


@pytest.mark.slow
@pytest.mark.book
def test_every_colab_notebook_holds_the_text_of_its_page():
    from book_support import HTML_DIR, STUDENT_DIR, build_book

    assert build_book().returncode == 0
    problems, compared = {}, 0
    for docname in colab.notebook_docnames(STUDENT_DIR):
        notebook = nbformat.read(HTML_DIR / "_sources" / f"{docname}.ipynb", as_version=4)
        missing = missing_cells(notebook, site_words(HTML_DIR / f"{docname}.html"))
        compared += sum(cell.cell_type == "markdown" for cell in notebook.cells)
        if missing:
            problems[docname] = missing[:3]
    assert not problems, "\n".join(f"{doc}: {cells}" for doc, cells in problems.items())
    assert compared >= 200  # not vacuous: every chapter has dozens of Markdown cells


# --- figures: the Colab notebooks number and caption them as the site does -----------------


@pytest.mark.slow
@pytest.mark.book
def test_colab_figures_match_the_site_after_a_default_mode_run():
    """Chapter by chapter, the figure numbers and captions of the student site and of the Colab
    notebooks it hands out (``_sources/``), with the outputs of the site's own default-mode
    run (the Colab notebooks hold the same code cells, so a run gives the same outputs)."""
    from book_support import BUILD_DIR, CACHE_DIR, HTML_DIR, STUDENT_DIR, build_book
    from jupyter_cache import get_cache

    assert build_book().returncode == 0
    executed = BUILD_DIR / "jupyter_execute"
    cache = get_cache(str(CACHE_DIR))
    macros = colab.book_macros(colab.read_config(BUILD_DIR.parent))
    compared = 0
    for docname in colab.notebook_docnames(STUDENT_DIR):
        notebook = nbformat.read(HTML_DIR / "_sources" / f"{docname}.ipynb", as_version=4)
        # the run's outputs: from the notebook cache the build read (a chapter), else from the
        # build's own executed copy (a homework notebook, run by the build itself)
        try:
            _, run = cache.merge_match_into_notebook(
                nbformat.read(STUDENT_DIR / f"{docname}.ipynb", as_version=4)
            )
        except KeyError:
            run = nbformat.read(executed / f"{docname}.ipynb", as_version=4)
        sources = {cell.id: cell.source for cell in run.cells}
        for cell in notebook.cells:
            if cell.cell_type == "code" and "colab-setup" not in cell.metadata.get("tags", []):
                assert sources.get(cell.id) == cell.source, f"{docname}: cell {cell.id} differs"
        site = site_figures(HTML_DIR / f"{docname}.html")
        assert colab_figures(notebook, run) == site, docname
        compared += len(site)
        # outputs reach Colab too (a student's own run): no book macro in them
        shown = [
            text
            for cell in run.cells
            if cell.cell_type == "code"
            for output in cell.outputs
            for kind, text in output.get("data", {}).items()
            if kind in ("text/markdown", "text/latex", "text/html")
        ]
        with_macros = [t for t in map(str, shown) if colab.expand_macros(t, macros) != t]
        assert not with_macros, f"{docname}: a book macro in an output: {with_macros[:1]}"
    assert compared >= 20  # not vacuous: Chapters 1 to 9 draw figures
