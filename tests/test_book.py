"""The book: configuration, table of contents, bibliography, and the full -W build."""

import re
from pathlib import Path

import nbformat
import pytest
import yaml
from book_support import HTML_DIR, ROOT, build_book
from stablernn_tools.book_config import read_book_config, repository, toc_files
from stablernn_tools.notebook_checks import (
    COLAB_SETUP_TAG,
    chapter_layout_problems,
    colab_setup_source,
    fix_layout,
    forget_stale_build,
    strip_notebook,
    stripping_problems,
    toc_problems,
)
from stablernn_tools.notebook_checks import main as book_main

CONTRACT_KEYS = {
    "miller2019stable",
    "pascanu2013difficulty",
    "hochreiter1997lstm",
    "elman1990finding",
    "werbos1990bptt",
    "bengio1994learning",
    "dauphin2017gated",
    "oord2016wavenet",
    "bai2018empirical",
    "vaswani2017attention",
    "merity2016pointer",
    "zaremba2014recurrent",
    "williams1990efficient",
    "bottou2018optimization",
    "hardt2016train",
    "boyd2004convex",
    "jozefowicz2015empirical",
    "laurent2017recurrent",
    "strogatz2015nonlinear",
}
VENDORED = (
    "vendor/require.js",
    "vendor/jupyter-widgets/embed-amd.js",
    "vendor/jupyter-widgets/require-paths.js",
    "vendor/mathjax/tex-mml-chtml.js",
    "vendor/mathjax/output/chtml/fonts/woff-v2/MathJax_Main-Regular.woff",
)


def bib_entries() -> list[tuple[str, str]]:
    text = (ROOT / "references.bib").read_text(encoding="utf-8")
    return re.findall(r"@(\w+)\s*\{\s*([^,\s]+)\s*,", text)


def test_config_has_what_the_course_needs():
    config = read_book_config()
    assert config["execute"]["execute_notebooks"] == "cache"
    assert config["execute"]["allow_errors"] is False and config["execute"]["timeout"] > 0
    assert {"sphinx_proof", "sphinx_exercise"} <= set(config["sphinx"]["extra_extensions"])
    assert config["bibtex_bibfiles"] == ["references.bib"]
    macros = config["sphinx"]["config"]["mathjax3_config"]["tex"]["macros"]
    assert {"R", "norm", "ip", "E"} <= set(macros)
    assert config["launch_buttons"]["colab_url"] == "https://colab.research.google.com"
    assert {".venv", "_build"} <= set(config["exclude_patterns"])


def test_config_serves_math_and_widgets_from_the_site():
    sphinx = read_book_config()["sphinx"]["config"]
    assert not sphinx["mathjax_path"].startswith(("http:", "https:", "//"))
    assert all(not url.startswith(("http:", "https:", "//")) for url in sphinx["nb_ipywidgets_js"])
    static = [ROOT / path for path in sphinx["html_static_path"]]
    for asset in VENDORED:
        assert any((folder / asset).is_file() for folder in static), f"missing {asset}"
    assert not (ROOT / "_static").exists(), "a _static/ folder injects every .js into every page"
    size = sum(f.stat().st_size for f in (ROOT / "book" / "vendor").rglob("*") if f.is_file())
    assert size < 8_000_000


def test_toc_lists_existing_files_and_every_notebook():
    problems = toc_problems(ROOT)
    assert not problems, "\n".join(problems)
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    assert toc["root"] == "intro"


def test_references_cover_the_contract_keys_once():
    keys = [key for _, key in bib_entries()]
    assert len(keys) == len(set(keys)), "duplicate keys in references.bib"
    assert set(keys) >= CONTRACT_KEYS
    text = (ROOT / "references.bib").read_text(encoding="utf-8")
    titles_with_math = [t for t in re.findall(r"title\s*=\s*\{(.*)\},", text) if "$" in t]
    assert not titles_with_math, f"the bibliography shows $...$ as raw TeX: {titles_with_math}"


def test_every_cited_key_exists():
    keys = {key for _, key in bib_entries()}
    sources = [*ROOT.glob("*.md"), *ROOT.glob("chapters/**/*.ipynb")]
    cited = set()
    for path in sources:
        for group in re.findall(r"\{cite(?::\w+)?\}`([^`]+)`", path.read_text(encoding="utf-8")):
            cited |= {key.strip() for key in group.split(",")}
    assert cited, "no citations found"
    assert cited <= keys, f"cited but not in references.bib: {sorted(cited - keys)}"


@pytest.mark.book
@pytest.mark.slow
def test_book_builds_with_warnings_as_errors():
    result = build_book()
    log = result.stdout + result.stderr
    # Sphinx reports "path:line: WARNING: ..."; a kernel's "WARNING |" log line is not one
    warnings = [line for line in log.splitlines() if re.search(r"(WARNING|ERROR|CRITICAL):", line)]
    details = "\n".join(warnings) or log[-5000:]
    assert result.returncode == 0, f"book build failed:\n{details}"
    assert not warnings, "\n".join(warnings)
    # the session already ran every notebook of the student edition (book_support), the
    # homework stubs included: the build finds each in the cache and runs none again
    again = [line for line in log.splitlines() if "Executing notebook" in line]
    assert not again, f"executed a second time: {again}"
    assert (HTML_DIR / "intro.html").is_file()
    chapter = (HTML_DIR / "chapters" / "01_recurrent_models.html").read_text(encoding="utf-8")
    assert "application/vnd.jupyter.widget-state+json" in chapter
    # Colab opens the plain student notebook that the published site holds in _sources/
    colab = "colab.research.google.com/github/stable-rnn-course/stable-rnn-course/blob/gh-pages/"
    assert colab + "_sources/chapters/01_recurrent_models.ipynb" in chapter
    downloaded = nbformat.read(HTML_DIR / "_sources/chapters/01_recurrent_models.ipynb", 4)
    assert any(cell.get("id") == "colab-edition-note" for cell in downloaded.cells)
    assert "cdn.jsdelivr" not in chapter and "cdnjs" not in chapter


# --- stablernn_tools.notebook_checks: notebook tools -------------------------------------


def make_notebook(*cells):
    notebook = nbformat.v4.new_notebook()
    notebook.cells = list(cells)
    return notebook


def executed_code_cell(source):
    cell = nbformat.v4.new_code_cell(source)
    cell.execution_count = 3
    cell.outputs = [nbformat.v4.new_output("stream", text="hi\n")]
    cell.metadata["execution"] = {"iopub.execute_input": "2026-01-01"}
    return cell


def test_strip_removes_outputs_counts_and_widget_state():
    title = nbformat.v4.new_markdown_cell("# T")
    notebook = make_notebook(executed_code_cell("print('hi')"), title)
    notebook.metadata["widgets"] = {"state": {}}
    assert stripping_problems(notebook)
    assert strip_notebook(notebook) is True
    assert stripping_problems(notebook) == []
    assert notebook.cells[0].outputs == [] and notebook.cells[0].execution_count is None
    assert strip_notebook(notebook) is False


def test_strip_and_check_commands(tmp_path, capsys):
    path = tmp_path / "nb.ipynb"
    nbformat.write(make_notebook(executed_code_cell("1 + 1")), path)
    assert book_main(["check-stripped", str(path)]) == 1
    assert "cell 0 has outputs" in capsys.readouterr().out
    assert book_main(["strip", str(path)]) == 0
    assert capsys.readouterr().out == f"stripped {path}\n"
    assert book_main(["check-stripped", str(path)]) == 0
    assert book_main(["strip", str(path)]) == 0
    assert capsys.readouterr().out == ""  # nothing left to strip: not rewritten
    with pytest.raises(FileNotFoundError, match="no such notebook"):
        book_main(["strip", str(tmp_path / "missing.ipynb")])


def test_fix_layout_puts_colab_then_parameters_first():
    title = nbformat.v4.new_markdown_cell("# Chapter")
    old_colab = nbformat.v4.new_code_cell("# old colab cell")
    old_colab.metadata["tags"] = [COLAB_SETUP_TAG]
    parameters = nbformat.v4.new_code_cell('MODE = "smoke"  # "smoke": CPU')
    parameters.metadata["tags"] = ["parameters"]
    body = nbformat.v4.new_code_cell("x = 1")
    notebook = make_notebook(title, old_colab, parameters, body)
    assert chapter_layout_problems(notebook, colab_setup_source())
    assert fix_layout(notebook) is True
    assert chapter_layout_problems(notebook, colab_setup_source()) == []
    assert [cell.source for cell in notebook.cells[2:]] == ["# Chapter", "x = 1"]
    assert "remove-cell" in notebook.cells[1].metadata["tags"]
    assert fix_layout(notebook) is False
    with pytest.raises(ValueError, match="tagged 'parameters'"):
        fix_layout(make_notebook(title, body))


def test_fix_layout_command_rewrites_only_the_notebooks_it_changes(tmp_path, capsys):
    parameters = nbformat.v4.new_code_cell('MODE = "smoke"')
    parameters.metadata["tags"] = ["parameters"]
    path = tmp_path / "chapter.ipynb"
    nbformat.write(make_notebook(nbformat.v4.new_markdown_cell("# Chapter"), parameters), path)
    assert book_main(["fix-layout", str(path)]) == 0
    assert capsys.readouterr().out == f"{path}: Colab cell first, parameters cell second\n"
    fixed = nbformat.read(path, as_version=4)
    assert chapter_layout_problems(fixed, colab_setup_source()) == []
    assert book_main(["fix-layout", str(path)]) == 0
    assert capsys.readouterr().out == ""


def test_colab_cell_text_follows_the_config(tmp_path):
    config = tmp_path / "_config.yml"
    config.write_text("repository:\n  url: https://github.com/someone/fork/\n  branch: dev\n")
    assert repository(config) == ("https://github.com/someone/fork", "dev")
    source = colab_setup_source("https://github.com/someone/fork", "dev")
    assert "git+https://github.com/someone/fork@dev" in source
    assert "describe_runtime()" in source
    compile(source, "colab-cell", "exec")
    config.write_text("title: x\n")
    with pytest.raises(ValueError, match="repository.url"):
        repository(config)


def test_toc_problems_report_missing_and_unlisted_files(tmp_path):
    (tmp_path / "_toc.yml").write_text(
        "format: jb-book\nroot: intro\nchapters:\n  - file: chapters/01_a\n"
        "    sections:\n      - file: chapters/homework/hw01_a\n"
    )
    (tmp_path / "intro.md").write_text("# Intro\n")
    (tmp_path / "chapters" / "homework").mkdir(parents=True)
    nbformat.write(make_notebook(), tmp_path / "chapters" / "01_a.ipynb")
    nbformat.write(make_notebook(), tmp_path / "chapters" / "02_b.ipynb")
    expected = ["intro", "chapters/01_a", "chapters/homework/hw01_a"]
    assert toc_files(tmp_path / "_toc.yml") == expected
    problems = toc_problems(tmp_path)
    assert any("hw01_a" in p and "exists" in p for p in problems)
    assert any("02_b.ipynb is not listed" in p for p in problems)


def test_sphinx_extension_removes_duplicate_scripts():
    from sphinx.builders.html._assets import _JavaScript
    from stablernn_tools.sphinx_extension import _deduplicate_scripts

    inline = [_JavaScript(None, body="const A = 1"), _JavaScript("", body="const A = 1")]
    context = {"script_files": [*inline, _JavaScript("a.js"), _JavaScript("a.js", defer="defer")]}
    _deduplicate_scripts(None, "page", "page.html", context, None)
    assert len(context["script_files"]) == 3


def test_a_library_or_results_change_drops_the_cached_outputs(tmp_path):
    (tmp_path / "stablernn_lib").mkdir()
    (tmp_path / "data" / "results").mkdir(parents=True)
    module, result = tmp_path / "stablernn_lib" / "plots.py", tmp_path / "data/results/r.json"
    module.write_text("A = 1\n")
    result.write_text("{}")
    cache = tmp_path / "_build" / ".jupyter_cache"
    assert not forget_stale_build(tmp_path)  # first build: nothing to drop, stamp written
    cache.mkdir()
    assert not forget_stale_build(tmp_path) and cache.is_dir()  # nothing changed: kept
    module.write_text("A = 2\n")
    assert forget_stale_build(tmp_path) and not cache.exists()  # library edited: dropped
    cache.mkdir()
    result.write_text('{"ppl": 92.3}')
    assert forget_stale_build(tmp_path) and not cache.exists()  # results changed: dropped
    assert not forget_stale_build(tmp_path)


# --- the command line, spelling, scratch folders, full-scale cells ----------------------------


def test_a_command_error_prints_its_message_and_debug_shows_the_traceback(capsys):
    from stablernn_tools.__main__ import main as cli

    assert cli(["book", "fix-layout", "no/such/notebook.ipynb"]) == 1
    err = capsys.readouterr().err
    assert "no such notebook(s): no/such/notebook.ipynb" in err and "Traceback" not in err
    assert "--debug" in err
    with pytest.raises(FileNotFoundError, match="no such notebook"):
        cli(["--debug", "book", "fix-layout", "no/such/notebook.ipynb"])
    with pytest.raises(FileNotFoundError):  # --debug may follow the command too
        cli(["book", "fix-layout", "no/such/notebook.ipynb", "--debug"])


# The corpus is "WikiText-2" in prose: no lower-case t, no space before the 2. The folder's
# name wikitext-2 (a path) and identifiers such as wikitext2 are not prose.
CORPUS_SPELLINGS = re.compile(r"\b[Ww]iki[Tt]ext[- ]2\b")
ALLOWED_SPELLINGS = {"WikiText-2", "wikitext-2"}


def test_the_corpus_is_spelled_wikitext_2_everywhere():
    found = []
    for pattern in ("*.md", "chapters/**/*.ipynb", "stablernn_lib/**/*.py", "tests/*.py"):
        for path in sorted(ROOT.glob(pattern)):
            text = path.read_text(encoding="utf-8")
            for match in CORPUS_SPELLINGS.finditer(text):
                if match.group(0) not in ALLOWED_SPELLINGS:
                    found.append(f"{path.relative_to(ROOT)}: {match.group(0)!r}")
    assert not found, found


def test_a_smoke_runs_scratch_folder_is_gone_after_the_kernel_exits(tmp_path):
    """What Chapters 8 and 9 write to a temporary folder is removed at the kernel's shutdown."""
    from nbclient import NotebookClient

    notebook = nbformat.v4.new_notebook(
        cells=[
            nbformat.v4.new_code_cell(
                "import stablernn_lib.core.runtime\n"
                "runs = stablernn_lib.core.runtime.scratch_dir('chapter-test-')\n"
                "(runs / 'model.pt').write_text('weights')\n"
                "print(runs)"
            )
        ]
    )
    NotebookClient(notebook, timeout=300, kernel_name="python3").execute(cwd=str(ROOT))
    folder = Path(notebook.cells[0].outputs[0]["text"].strip())
    assert folder.name.startswith("chapter-test-")
    assert not folder.exists(), f"{folder} survived the kernel"


def test_the_student_site_drops_empty_full_scale_cells_only():
    from types import SimpleNamespace

    from docutils import nodes
    from stablernn_tools.notebook_checks import FULL_SCALE_TAG
    from stablernn_tools.sphinx_extension import _drop_empty_full_scale_cells

    def cell(tag: str, output: bool) -> nodes.container:
        node = nodes.container(nb_element="cell_code", classes=["cell", f"tag_{tag}"])
        node += nodes.container(nb_element="cell_code_source")
        if output:
            node += nodes.container(nb_element="cell_code_output")
        return node

    def run(hide_solutions: bool) -> int:
        document = nodes.section()
        for tag, output in ((FULL_SCALE_TAG, False), (FULL_SCALE_TAG, True), ("other", False)):
            document += cell(tag, output)
        app = SimpleNamespace(config=SimpleNamespace(hide_solutions=hide_solutions))
        _drop_empty_full_scale_cells(app, document)
        return len(document.children)

    assert run(True) == 2  # the student site: only the empty full-scale cell goes
    assert run(False) == 3  # the instructor site keeps the scaffolding
    tagged = [
        c
        for name in ("08_wikitext2_experiments", "09_polyphonic_music")
        for c in nbformat.read(ROOT / "chapters" / f"{name}.ipynb", as_version=4).cells
        if FULL_SCALE_TAG in c.metadata.get("tags", [])
    ]
    assert len(tagged) >= 5 and all(c.cell_type == "code" for c in tagged)


@pytest.mark.book
@pytest.mark.slow
def test_the_built_site_has_one_search_field():
    """The sidebar's search field, and no header bar with a second one (see _one_search_field)."""
    assert build_book().returncode == 0
    page = (HTML_DIR / "intro.html").read_text(encoding="utf-8")
    assert page.count('class="btn search-button-field') == 1
    assert "navbar-persistent--container" not in page


@pytest.mark.book
@pytest.mark.slow
def test_the_built_student_site_shows_no_empty_full_scale_cell():
    assert build_book().returncode == 0
    page = (HTML_DIR / "chapters" / "08_wikitext2_experiments.html").read_text(encoding="utf-8")
    assert "tag_full-scale" not in page  # in the default mode no full-scale result exists
    assert 'if "full" in shown' not in page


def test_the_site_theme_is_pinned_to_the_checked_version():
    """A floating theme changed the page (two search fields): the book extra pins it."""
    from importlib.metadata import version

    text = (ROOT / "pyproject.toml").read_text()  # (tomllib needs Python 3.11)
    pins = dict(re.findall(r'^\s*"([\w-]+)==([\w.]+)",', text, re.M))
    for package in ("sphinx-book-theme", "pydata-sphinx-theme"):
        assert package in pins, f"pin {package} in pyproject.toml's book extra"
        assert version(package) == pins[package], f"installed {package} differs from the pin"
