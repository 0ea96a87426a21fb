"""The library installed from a wheel (as on Colab) finds the committed results.

A wheel is built from the checkout, installed without dependencies into a fresh virtual
environment (which borrows the test environment's torch and Jupyter through a path file
to links of them, so nothing is downloaded: ``install_support``), and Chapter 7 runs in
a folder outside the checkout. Its
full-run section must show the committed run: the provenance line, the figure and the
bound table. The wheel holds the course library only: no module of the grader or the tools.
"""

from __future__ import annotations

import json
import os
import subprocess
import zipfile
from pathlib import Path

import nbformat
import pytest
from install_support import (
    build_source,
    build_wheel,
    dependencies_folder,
    fresh_environment,
    install_wheel,
)

ROOT = Path(__file__).resolve().parents[1]
CHAPTER = ROOT / "chapters" / "07_training_gives_the_same_model.ipynb"

pytestmark = [pytest.mark.slow, pytest.mark.notebooks]


def run(command: list[str], **kwargs) -> subprocess.CompletedProcess:
    result = subprocess.run(command, capture_output=True, text=True, timeout=900, **kwargs)
    assert result.returncode == 0, f"{command}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The course library's wheel, built from this working tree."""
    work = tmp_path_factory.mktemp("wheel")
    return build_wheel(build_source(work / "source"), work / "wheel")


@pytest.fixture(scope="module")
def installed_python(tmp_path_factory: pytest.TempPathFactory, wheel: Path) -> Path:
    """A fresh environment with the built wheel installed and the test environment's
    packages (torch, Jupyter, ...; never the checkout's library) reached through links."""
    work = tmp_path_factory.mktemp("installed")
    python = fresh_environment(work / "venv", dependencies_folder(work / "dependencies"))
    install_wheel(python, wheel)
    return python


def grader_or_tools_modules(names: list[str]) -> list[str]:
    """The files of a wheel (``names``) that are modules of the grader or the tools: their
    packages, or a module of the library named as one of theirs."""
    theirs = {
        p.name
        for folder in (ROOT / "grader" / "stablernn_grader", ROOT / "tools" / "stablernn_tools")
        for p in folder.glob("*.py")
        if p.stem not in ("__init__", "__main__")
    }
    return sorted(
        name
        for name in names
        if name.startswith(("stablernn_grader/", "stablernn_tools/"))
        or (
            name.startswith("stablernn_lib/")
            and name.endswith(".py")
            and name.rpartition("/")[2] in theirs
        )
    )


def test_the_wheel_holds_the_course_library_only(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    assert "stablernn_lib/homework/checks.py" in names and "stablernn_lib/book/glue.py" in names
    assert grader_or_tools_modules(names) == [], "the grader's or the tools' modules are in it"
    planted = [*names, "stablernn_lib/homework/grading.py", "stablernn_tools/colab_conversion.py"]
    assert grader_or_tools_modules(planted) == [
        "stablernn_lib/homework/grading.py",
        "stablernn_tools/colab_conversion.py",
    ]


def test_the_installed_library_is_not_the_checkout(installed_python, tmp_path):
    code = (
        "import json, stablernn_lib, stablernn_lib.core.results as r; "
        "print(json.dumps([stablernn_lib.__file__, str(r.results_root())]))"
    )
    found = json.loads(run([str(installed_python), "-c", code], cwd=tmp_path).stdout)
    module, results = map(Path, found)
    assert not module.is_relative_to(ROOT), module
    assert results.name == "_results" and (results / "figure1" / "full" / "summary.json").is_file()


def test_chapter7_shows_the_committed_full_run_outside_the_checkout(installed_python, tmp_path):
    notebook = tmp_path / CHAPTER.name
    chapter = nbformat.read(CHAPTER, as_version=4)
    # the whole chapter runs in the book's notebook test; here only what reads the committed
    # full run: the parameters, the imports and the cells of `full` (not those of smoke runs)
    code = [cell for cell in chapter.cells if cell.cell_type == "code"]
    imports = next(cell for cell in code if not cell.metadata.get("tags"))
    shown = [c for c in code if "full" in c.source and "smoke" not in c.source]
    parameters = [c for c in code if "parameters" in c.metadata.get("tags", [])]
    probe = nbformat.v4.new_code_cell(
        "import stablernn_lib\nprint('LIBRARY', stablernn_lib.__file__)"
    )
    chapter.cells = [*parameters, imports, *shown, probe]
    assert len(shown) >= 3, "chapter 7 no longer shows the committed full run"
    nbformat.write(chapter, notebook)
    script = (
        "import sys, nbformat; from nbclient import NotebookClient; "
        "nb = nbformat.read(sys.argv[1], 4); "
        "NotebookClient(nb, timeout=1200, kernel_name='python3', "
        "resources={'metadata': {'path': sys.argv[2]}}).execute(); "
        "nbformat.write(nb, sys.argv[1])"
    )
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONNOUSERSITE": "1"}
    env.pop("PYTHONPATH", None)
    run([str(installed_python), "-c", script, str(notebook), str(tmp_path)], cwd=tmp_path, env=env)
    cells = nbformat.read(notebook, as_version=4).cells
    outputs = [
        (cell.source, output)
        for cell in cells
        if cell.cell_type == "code"
        for output in cell.get("outputs", [])
    ]
    text = "\n".join(
        output.get("text", "") + output.get("data", {}).get("text/plain", "")
        for _, output in outputs
    )
    assert "no results" not in text.lower() and "does not exist" not in text
    assert "wall time" in text  # the provenance of the committed run
    figure = [o for source, o in outputs if "plot_figure1(full)" in source]
    assert figure and "image/png" in figure[0].get("data", {}), "the full-run figure is missing"
    table = [o for source, o in outputs if "bound_report(full" in source]
    assert table and "|" in table[0]["data"]["text/markdown"], "the bound table is missing"
    library = next(line for line in text.splitlines() if line.startswith("LIBRARY"))
    assert str(ROOT) not in library and "site-packages" in library, library  # not the checkout
