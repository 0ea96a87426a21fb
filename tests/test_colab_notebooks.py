"""The Colab notebooks: every notebook page of the book, rendered as Colab renders Markdown.

Colab, Jupyter and GitHub know neither MyST nor the book's MathJax macros. The generated
notebooks (``stablernn_lib.book.colab``) are rendered here with a plain CommonMark parser
(markdown-it-py, no MyST plugins) after taking the math out, as those front ends do; a
directive fence, a role (``{paper}`` included), a MyST target or a book macro left in
them fails the test. The
browser test then typesets every formula with the site's MathJax and *no* macro
definitions, and fails on any MathJax error (an undefined control sequence).
"""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest

from stablernn_lib.book import colab
from stablernn_lib.core import paper_claims
from stablernn_lib.homework.notebooks import ANSWER_PLACEHOLDER, student_notebook

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = Path("/usr/bin/chromium")
MATHJAX = ROOT / "book" / "vendor" / "mathjax" / "tex-mml-chtml.js"


@pytest.fixture(scope="module")
def editions(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("colab")
    for edition in ("student", "instructor"):
        colab.write_colab_notebooks(ROOT, out / edition, edition, student_notebook)
    return {edition: out / edition for edition in ("student", "instructor")}


def generated(folder: Path) -> list[Path]:
    return sorted(folder.rglob("*.ipynb"))


def test_every_notebook_page_of_the_toc_is_generated(editions):
    pages = colab.notebook_docnames(ROOT)
    assert len(pages) >= 16 and "chapters/04_stability" in pages
    for folder in editions.values():
        names = [p.relative_to(folder).with_suffix("").as_posix() for p in generated(folder)]
        assert sorted(names) == sorted(pages)


@pytest.mark.parametrize("edition", ["student", "instructor"])
def test_plain_commonmark_shows_no_myst_and_no_book_macro(editions, edition):
    macros = colab.book_macros(colab.read_config(ROOT))
    problems = []
    for path in generated(editions[edition]):
        notebook = nbformat.read(path, as_version=4)
        problems += [f"{path.name}: {p}" for p in colab.notebook_problems(notebook, macros)]
    assert not problems, "\n".join(problems[:20])


def test_solutions_follow_the_edition(editions):
    student = editions["student"] / "chapters/04_stability.ipynb"
    instructor = editions["instructor"] / "chapters/04_stability.ipynb"
    student_text = "\n".join(c.source for c in nbformat.read(student, as_version=4).cells)
    instructor_text = "\n".join(c.source for c in nbformat.read(instructor, as_version=4).cells)
    assert "<details>" not in student_text and "Solution to" not in student_text
    assert instructor_text.count("<summary>Solution to Exercise 4.") >= 3
    homework = nbformat.read(editions["student"] / "chapters/homework/hw04_stability.ipynb", 4)
    assert any("raise NotImplementedError(" in c.source for c in homework.cells)
    answers = [c for c in homework.cells if "answer" in c.metadata.get("tags", [])]
    assert answers and all(c.source == ANSWER_PLACEHOLDER for c in answers)


def test_headings_citations_and_references_read_as_on_the_site(editions):
    notebook = nbformat.read(editions["student"] / "chapters/04_stability.ipynb", 4)
    text = "\n".join(c.source for c in notebook.cells if c.cell_type == "markdown")
    assert "**Definition 4.1 (Contractive map, stable model).**" in text
    assert "(Miller and Hardt, 2019)" in text
    assert notebook.cells[-1].source.startswith("## References")
    assert "Stable recurrent models" in notebook.cells[-1].source
    assert "Definition 4.1 allows any norm" in text  # {prf:ref} became its number
    first_code = next(c for c in notebook.cells if c.cell_type == "code")
    assert "colab-setup" in first_code.metadata["tags"]  # the install cell stays first


def test_converter_pieces():
    macros = {"norm": ("\\left\\lVert #1 \\right\\rVert", 1), "R": ("\\mathbb{R}", 0)}
    assert colab.expand_macros(r"\norm{x_{t}}_2 \in \R^n, \Rightarrow", macros) == (
        r"\left\lVert x_{t} \right\rVert _2 \in \mathbb{R}^n, \Rightarrow"
    )
    assert colab.expand_macros(r"\norm{\norm{a}}", macros).count("lVert") == 2
    bibliography = colab.Bibliography(ROOT / "references.bib")
    assert bibliography.cite(["miller2019stable"], textual=True) == "Miller and Hardt (2019)"
    index = colab.BookIndex(numbers={"lem-x": "Lemma 2.1"}, titles={"sec-y": "Gradients"})
    converter = colab.Converter("student", index, bibliography, macros)
    text = converter.markdown(
        "```{prf:lemma} Name\n:label: lem-x\nBody $\\R$.\n```\n\n"
        "See {prf:ref}`lem-x`, {ref}`sec-y` and {cite:t}`miller2019stable`.\n\n"
        ":::{solution} lem-x\nsecret\n:::\n"
    )
    assert "**Lemma 2.1 (Name).**" in text and "Body $\\mathbb{R}$." in text
    assert "See Lemma 2.1, Gradients and Miller and Hardt (2019)." in text
    assert "secret" not in text
    with pytest.raises(ValueError, match="no Colab rendering for the directive"):
        converter.markdown("```{unknown-thing}\nx\n```")
    with pytest.raises(KeyError, match="no target"):
        converter.markdown("{ref}`missing-label`")
    assert colab.plain_markdown_problems("{cite:t}`x` and :::{note}", macros)
    assert colab.plain_markdown_problems("$\\norm{x}$", macros)
    marked = paper_claims.marked("wt2-rnn-stable-ppl")  # the site's number and mark
    assert converter.markdown("RNN {paper}`wt2-rnn-stable-ppl`.") == f"RNN {marked}."
    with pytest.raises(KeyError, match="no paper claim"):
        converter.markdown("{paper}`no-such-claim`")
    assert colab.plain_markdown_problems("RNN {paper}`wt2-rnn-stable-ppl`.", macros)


def test_paper_numbers_carry_their_mark_and_no_paper_role_is_left(editions):
    """Every {paper}`KEY` of a page reads as on the site, "143.5 †", in its notebook."""
    rendered = 0
    for edition, folder in editions.items():
        for path in generated(folder):
            text = "\n".join(c.source for c in nbformat.read(path, as_version=4).cells)
            assert "{paper}" not in text, f"{edition} {path.name}: a raw {{paper}} role"
            if edition == "student":  # may have dropped a solution that quoted the paper
                continue
            source = ROOT / path.relative_to(folder)
            cells = nbformat.read(source, as_version=4).cells
            markdown = "\n".join(c.source for c in cells if c.cell_type == "markdown")
            for key in paper_claims.ROLE.findall(markdown):
                assert paper_claims.marked(key.strip()) in text, f"{path.name}: {key}"
                rendered += 1
    assert rendered >= 4  # not vacuous: Chapters 1, 8 and 9 quote the paper's numbers


def test_the_site_hands_out_the_generated_notebooks():
    """The build hook replaces _sources/*.ipynb; the launch buttons point at them."""
    from stablernn_lib.book.config import read_book_config
    from stablernn_lib.homework.student_edition import STUDENT_SITE_BRANCH

    assert read_book_config()["sphinx"]["config"]["colab_notebooks_branch"]
    assert STUDENT_SITE_BRANCH == "gh-pages"


@pytest.mark.browser
@pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium (make browser-deps)")
def test_mathjax_without_the_book_macros_typesets_every_formula(editions, tmp_path):
    """Each generated notebook as one plain HTML page, typeset by MathJax with no macros."""
    playwright_api = pytest.importorskip("playwright.sync_api")
    pages = []
    for edition, folder in editions.items():
        for path in generated(folder):
            cells = nbformat.read(path, as_version=4).cells
            body = "\n".join(
                colab.render_plain(c.source)[0] for c in cells if c.cell_type == "markdown"
            )
            page = tmp_path / f"{edition}-{path.stem}.html"
            page.write_text(
                "<!DOCTYPE html><html><head><meta charset='utf-8'><script>"
                "MathJax = {tex: {inlineMath: [['$', '$']], displayMath: [['$$', '$$']],"
                " processEnvironments: true,"
                # without noundefined, an unknown macro is an error node, not red text
                " packages: {'[-]': ['noundefined']}}};</script>"
                f"<script src='{MATHJAX.as_uri()}'></script></head><body>{body}</body></html>",
                encoding="utf-8",
            )
            pages.append(page)
    failures = {}
    with playwright_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=["--no-sandbox", "--disable-gpu"]
        )
        for page_path in pages:
            page = browser.new_page()
            page.goto(page_path.as_uri(), wait_until="load")
            page.wait_for_function("() => window.MathJax && MathJax.startup", timeout=60_000)
            page.evaluate("() => MathJax.startup.promise")
            count = page.locator("mjx-container").count()
            errors = page.eval_on_selector_all(
                "mjx-merror, [data-mjx-error]",
                "nodes => nodes.map(n => n.getAttribute('data-mjx-error') || n.textContent)",
            )
            page.close()
            if errors or count == 0:
                failures[page_path.name] = {"formulas": count, "errors": errors[:5]}
        browser.close()
    assert not failures, json.dumps(failures, indent=1)
