"""The Colab notebooks: every notebook page of the book, rendered as Colab renders Markdown.

Colab, Jupyter and GitHub know neither MyST nor the book's MathJax macros. The generated
notebooks (``stablernn_tools.colab_conversion``) are rendered here with a plain CommonMark parser
(markdown-it-py, no MyST plugins) after taking the math out, as those front ends do; a
directive fence, a role (``{paper}`` included), a MyST target or a book macro left in
them fails the test. The
browser test then typesets every formula with the site's MathJax and *no* macro
definitions, and fails on any MathJax error (an undefined control sequence).
"""

from __future__ import annotations

import copy
import json
import re
import shutil
import subprocess
from pathlib import Path

import nbformat
import pytest
from browser_support import CHROMIUM, chromium, visit_pages
from colab_figures import COLAB_CAPTION
from stablernn_tools import colab_conversion as colab
from stablernn_tools import notebook_checks as book
from stablernn_tools import paper_claims_check, sphinx_extension
from stablernn_tools.student_notebooks import student_notebook

from stablernn_lib.core import paper_claims
from stablernn_lib.homework.cells import ANSWER_PLACEHOLDER

ROOT = Path(__file__).resolve().parents[1]
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
            for key in paper_claims_check.ROLE.findall(markdown):
                assert paper_claims.marked(key.strip()) in text, f"{path.name}: {key}"
                rendered += 1
    assert rendered >= 4  # not vacuous: Chapters 1, 8 and 9 quote the paper's numbers


def test_the_site_hands_out_the_generated_notebooks():
    """The build hook replaces _sources/*.ipynb; the launch buttons point at them."""
    from stablernn_tools.book_config import read_book_config
    from stablernn_tools.student_edition import STUDENT_SITE_BRANCH

    assert read_book_config()["sphinx"]["config"]["colab_notebooks_branch"]
    assert STUDENT_SITE_BRANCH == "gh-pages"


# Every formula of a page (loaded with ``startup.typeset`` off) read by MathJax's TeX input
# into MathML, which is where an undefined macro or a TeX error shows, as an ``merror`` node;
# drawing the formulas (CHTML) would add nothing to that. Returns the number of formulas and
# each error's message.
COMPILE_SCRIPT = """() => {
  const doc = MathJax.startup.document;
  doc.findMath().compile();
  const items = Array.from(doc.math);
  const errors = items.map(item => MathJax.startup.toMML(item.root))
    .filter(mml => mml.includes("<merror"))
    .map(mml => (mml.match(/data-mjx-error="([^"]*)"/) || [null, mml.slice(0, 200)])[1]);
  return {formulas: items.length, errors};
}"""


@pytest.mark.browser
@pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium (make browser-deps)")
def test_mathjax_without_the_book_macros_reads_every_formula(editions, tmp_path):
    """Each generated notebook as one plain HTML page, every formula read by MathJax's TeX
    input with no macros (:data:`COMPILE_SCRIPT`).

    A student notebook's page holds only the Markdown cells that its instructor notebook
    does not have word for word (those are read on the instructor's page)."""
    pages = []
    typeset: dict[str, set[str]] = {}  # notebook name -> Markdown already on a page
    for edition in ("instructor", "student"):
        for path in generated(editions[edition]):
            cells = nbformat.read(path, as_version=4).cells
            texts = [colab.render_plain(c.source)[0] for c in cells if c.cell_type == "markdown"]
            seen = typeset.setdefault(path.relative_to(editions[edition]).as_posix(), set())
            texts = [text for text in texts if text not in seen]
            seen.update(texts)
            if edition == "student" and not any("$" in t or "\\begin" in t for t in texts):
                continue  # no formula the instructor's page did not typeset
            body = "\n".join(texts)
            page = tmp_path / f"{edition}-{path.stem}.html"
            page.write_text(
                "<!DOCTYPE html><html><head><meta charset='utf-8'><script>"
                "MathJax = {startup: {typeset: false},"
                " tex: {inlineMath: [['$', '$']], displayMath: [['$$', '$$']],"
                " processEnvironments: true,"
                # without noundefined, an unknown macro is an error node, not red text
                " packages: {'[-]': ['noundefined']}}};</script>"
                f"<script src='{MATHJAX.as_uri()}'></script></head><body>{body}</body></html>",
                encoding="utf-8",
            )
            pages.append(page)

    def measure(name: str, page) -> dict:
        return page.evaluate(COMPILE_SCRIPT)

    jobs = [(page.name, page.as_uri(), 1280) for page in pages]
    with chromium(["--no-sandbox", "--disable-gpu"]) as browser:
        # a navigation starts MathJax afresh: no macro defined by one page reaches another
        results = visit_pages(browser, jobs, measure, allowed=lambda url: True)
    failures = {}
    for name, (found, _) in results.items():
        if found["errors"] or found["formulas"] == 0:
            failures[name] = {"formulas": found["formulas"], "errors": found["errors"][:5]}
    assert not failures, json.dumps(failures, indent=1)


# --- figures: the Colab notebooks number and caption them as the site does -----------------


def test_a_figure_that_draws_nothing_gets_no_number_and_no_caption(tmp_path):
    """Numbers follow the figures a run drew (``drawn_figures``), as Sphinx numbers them."""
    chapter = "chapters/08_wikitext2_experiments"
    source = nbformat.read(ROOT / f"{chapter}.ipynb", as_version=4)
    labels = [
        cell.metadata["mystnb"]["figure"]["name"]
        for cell in source.cells
        if cell.metadata.get("mystnb", {}).get("figure", {}).get("name")
    ]
    assert len(labels) >= 5
    skipped = {labels[1], labels[3]}  # a run where these cells display nothing
    run = copy.deepcopy(source)
    for cell in run.cells:
        name = cell.metadata.get("mystnb", {}).get("figure", {}).get("name", "")
        if name and name not in skipped:
            cell.outputs = [nbformat.v4.new_output("display_data", data={"image/png": "AA=="})]
    (tmp_path / "chapters").mkdir()
    nbformat.write(run, tmp_path / f"{chapter}.ipynb")
    drawn = colab.drawn_figures(tmp_path, [chapter])
    assert colab.drawn_figures(tmp_path, [chapter, "chapters/missing"]) is None
    index = colab.book_index(ROOT, {chapter: drawn[chapter]})
    numbers = [index.numbers.get(label) for label in labels]
    drawn_labels = [label for label in labels if label not in skipped]
    assert [index.numbers[label] for label in drawn_labels] == [
        f"Figure 8.{n}" for n in range(1, len(drawn_labels) + 1)
    ]
    assert numbers.count(None) == len(labels) - len(drawn_labels)
    config = colab.read_config(ROOT)
    plain = colab.colab_notebook(
        source, edition="student", index=index, macros=colab.book_macros(config),
        bibliography=colab.Bibliography(ROOT / "references.bib"),
    )  # fmt: skip
    captions = [c.source for c in plain.cells if COLAB_CAPTION.match(c.source)]
    assert len(captions) == len(drawn_labels)
    assert captions[-1].startswith(f"**Figure 8.{len(drawn_labels)}.**")


def test_the_install_cell_pins_the_commit_the_book_was_built_from(tmp_path, monkeypatch):
    monkeypatch.delenv("STABLERNN_INSTALL_REF", raising=False)
    url, branch = book.repository()
    commit = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    cell = nbformat.v4.new_code_cell(book.colab_setup_source())
    cell.metadata["tags"] = [book.COLAB_SETUP_TAG]
    pinned = copy.deepcopy(cell)
    colab._pinned_setup_cell(pinned, ROOT)
    if commit:  # a git checkout (a source archive has none)
        assert f"git+{url}@{commit}" in pinned.source and f'@{branch}"' not in pinned.source
        assert "the commit this notebook was built from" in pinned.source
    # outside a git checkout: the branch, and a comment that says so
    shutil.copy(ROOT / "_config.yml", tmp_path / "_config.yml")
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
    outside = copy.deepcopy(cell)
    colab._pinned_setup_cell(outside, tmp_path)
    assert f"git+{url}@{branch}" in outside.source
    assert "Not built from a git checkout" in outside.source
    monkeypatch.setenv("STABLERNN_INSTALL_REF", "v1.0")
    released = copy.deepcopy(cell)
    colab._pinned_setup_cell(released, tmp_path)
    assert f"git+{url}@v1.0" in released.source


def test_the_paper_marks_are_explained_in_the_notebook(editions):
    notebook = nbformat.read(editions["student"] / "chapters/01_recurrent_models.ipynb", 4)
    notes = [c.source for c in notebook.cells if c.get("id") == "colab-paper-numbers"]
    assert len(notes) == 1 and "† recalled, not checked" in notes[0]
    assert paper_claims.marked("wt2-rnn-unconstrained-ppl") in notes[0]  # its table row
    text = "\n".join(c.source for c in notebook.cells if c.cell_type == "markdown")
    assert "hover" not in text.replace(notes[0], "")  # no prose asks to hover on Colab


def test_the_instructor_site_links_only_to_a_private_fork():
    """No Colab button of the instructor site leads to the public repository."""
    from types import SimpleNamespace

    def theme(hide_solutions: bool, private: str) -> dict:
        config = SimpleNamespace(
            colab_notebooks_branch="instructor-site", instructor_repository_url=private,
            hide_solutions=hide_solutions,
            html_theme_options={"repository_url": "https://github.com/public/course",
                                "launch_buttons": {"colab_url": "https://colab.research.google.com"}},
        )  # fmt: skip
        sphinx_extension._colab_launch_target(None, config)
        return config.html_theme_options

    public = theme(False, "")
    assert public["launch_buttons"]["colab_url"] == ""  # no Colab button at all
    private = theme(False, "https://github.com/me/course-private")
    assert private["repository_url"] == "https://github.com/me/course-private"
    assert private["repository_branch"] == "instructor-site"
    student = theme(True, "")
    assert student["repository_url"] == "https://github.com/public/course"
    assert student["launch_buttons"]["colab_url"]
    from stablernn_tools.book_config import read_book_config

    assert read_book_config()["sphinx"]["config"]["instructor_repository_url"] == ""


def test_chapter8_figures_draw_in_every_mode_and_carry_the_sites_numbers(editions):
    """Chapter 8 and its evidence page: every numbered figure draws the committed results
    whatever ``MODE`` (no condition in its cell), so each caption of the Colab notebook stands
    under its figure, numbered 8.1, 8.2, ... across the two pages as on the site, and every
    figure the text mentions is one of them."""
    pages = ("chapters/08_wikitext2_experiments", "chapters/08b_wikitext2_evidence")
    expected: dict[str, list[str]] = {}
    number = 0
    for page in pages:
        for cell in nbformat.read(ROOT / f"{page}.ipynb", as_version=4).cells:
            name = cell.metadata.get("mystnb", {}).get("figure", {}).get("name")
            if name:
                assert "MODE" not in cell.source and not cell.source.startswith("if "), name
                number += 1
                assert colab.book_index(ROOT).numbers[name] == f"Figure 8.{number}", name
                expected.setdefault(page, []).append(f"8.{number}")
    assert number >= 7
    every = {n for numbers in expected.values() for n in numbers}
    for page in pages:
        cells = nbformat.read(editions["student"] / f"{page}.ipynb", as_version=4).cells
        captions = [(i, COLAB_CAPTION.match(c.source)) for i, c in enumerate(cells)]
        captions = [(i, match) for i, match in captions if match]
        assert [match["number"] for _, match in captions] == expected[page], page
        assert all(cells[i - 1].cell_type == "code" for i, _ in captions), page
        text = "\n".join(c.source for c in cells if c.cell_type == "markdown")
        for mentioned in re.findall(r"Figure (8\.\d+)", text):
            assert mentioned in every, (page, mentioned)


def test_each_figure_carries_its_description_under_its_caption(editions):
    """The text alternative of a numbered figure (MyST-NB's image alt in the chapter) follows
    the figure's caption in the Colab notebook, as "*Description of Figure N:* ..."."""
    found = 0
    for path in generated(editions["student"]):
        source = ROOT / path.relative_to(editions["student"])
        alts = {
            cell.get("id"): " ".join(cell.metadata["mystnb"]["image"]["alt"].split())
            for cell in nbformat.read(source, as_version=4).cells
            if cell.metadata.get("mystnb", {}).get("image", {}).get("alt")
            and cell.metadata["mystnb"].get("figure", {}).get("caption")  # a numbered figure
        }
        cells, here = nbformat.read(path, as_version=4).cells, 0
        for before, cell in zip(cells, cells[1:], strict=False):
            if not cell.get("id", "").endswith("-description"):
                continue
            anchor = cell.id.removesuffix("-description")
            assert before.id == f"{anchor}-caption", (path.name, cell.id)
            number = COLAB_CAPTION.match(before.source)["number"]
            assert cell.source == f"*Description of Figure {number}:* {alts[anchor]}"
            here += 1
        assert here == len(alts), f"{path.name}: {here} descriptions for {len(alts)} figures"
        found += here
    assert found >= 30
