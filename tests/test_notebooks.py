"""Notebooks: stored without outputs, the chapter layout, and a smoke run of each.

The smoke runs happen once per session (tests/book_support.py) and feed the book
build, so `make test` executes every notebook exactly once. Times are written to
_build/notebook_times.json and printed (run pytest with -s to see them live). They are
benchmarks, not tests: a loaded machine stretches them, so no test fails on a time.
"""

import json
from pathlib import Path

import nbformat
import pytest
from book_support import ROOT, TIMES_PATH, book_notebooks, execute_book_notebooks
from stablernn_tools.notebook_checks import (
    CHAPTER_GLOB,
    COLAB_SETUP_TAG,
    NOTEBOOK_GLOB,
    chapter_layout_problems,
    colab_setup_source,
    repository,
    stripping_problems,
)

ALL_NOTEBOOKS = sorted(
    p.relative_to(ROOT).as_posix()
    for p in ROOT.glob(NOTEBOOK_GLOB)
    if ".ipynb_checkpoints" not in p.parts
)
CHAPTERS = sorted(p.relative_to(ROOT).as_posix() for p in ROOT.glob(CHAPTER_GLOB))


def read(name: str) -> nbformat.NotebookNode:
    return nbformat.read(ROOT / name, as_version=4)


def test_there_are_chapters():
    assert "chapters/01_recurrent_models.ipynb" in CHAPTERS


@pytest.mark.parametrize("name", ALL_NOTEBOOKS)
def test_notebook_is_stored_without_outputs(name):
    problems = stripping_problems(read(name))
    assert not problems, f"{name}: {problems}; run `python -m stablernn_tools book strip {name}`"


@pytest.mark.parametrize("name", ALL_NOTEBOOKS)
def test_notebook_is_valid_with_unique_cell_ids(name):
    raw = json.loads((ROOT / name).read_text(encoding="utf8"))
    ids = [cell.get("id") for cell in raw["cells"]]
    assert None not in ids, f"{name}: cell {ids.index(None)} has no id (nbformat 4.5 needs one)"
    assert len(set(ids)) == len(ids), f"{name}: duplicate cell ids"
    nbformat.validate(raw)


@pytest.mark.parametrize("name", ALL_NOTEBOOKS)
def test_notebook_uses_python3_kernel(name):
    assert read(name).metadata.get("kernelspec", {}).get("name") == "python3"


@pytest.mark.parametrize("name", CHAPTERS)
def test_chapter_starts_with_colab_and_parameters_cells(name):
    problems = chapter_layout_problems(read(name), colab_setup_source())
    assert not problems, f"{name}: {problems}"


def test_colab_cell_installs_from_the_repository_in_config():
    url, branch = repository(ROOT / "_config.yml")
    assert f"git+{url}@{branch}" in colab_setup_source()
    assert url == "https://github.com/stable-rnn-course/stable-rnn-course" and branch == "main"


@pytest.mark.parametrize("name", ALL_NOTEBOOKS)
def test_every_colab_cell_agrees_with_config(name):
    expected = colab_setup_source().strip()
    for cell in read(name).cells:
        if COLAB_SETUP_TAG in cell.metadata.get("tags", []):
            assert cell.source.strip() == expected, (
                f"{name}: its colab-setup cell differs from _config.yml's repository; "
                "run `python -m stablernn_tools book fix-layout` on it (chapters) or paste "
                "`python -m stablernn_tools book colab-cell` (other notebooks)"
            )


@pytest.mark.notebooks
@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in book_notebooks() if n in CHAPTERS])
def test_chapter_runs_in_smoke_mode(name):
    record = execute_book_notebooks()[name]
    assert record["error"] is None, f"{name} failed:\n{record['error']}"
    # its CPU and wall times are recorded in _build/notebook_times.json, not judged
    assert record["cpu_s"] >= 0 and record["wall_s"] >= 0


@pytest.mark.notebooks
@pytest.mark.slow
def test_every_book_notebook_executes_and_times_are_recorded():
    times = execute_book_notebooks()
    failed = {name: record["error"] for name, record in times.items() if record["error"]}
    assert not failed, "notebooks failed:\n" + "\n\n".join(f"{k}:\n{v}" for k, v in failed.items())
    assert Path(TIMES_PATH).is_file()
    print("\nnotebook CPU / wall times (s):")
    for name, record in times.items():
        print(f"  {name:60s} {record['cpu_s']:7.1f} {record['wall_s']:7.1f}")
