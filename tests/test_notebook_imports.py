"""Every chapter and homework notebook imports only what a Colab runtime has once the setup
cell has run: the standard library, the course library, and the modules of the library's
base dependencies (``pyproject.toml``) or of Colab's preinstalled packages
(``tests/colab_runtime/pip-freeze.gpu.txt``). Never a module of an extra (MyST-NB is the
``book`` extra's). The modules of ``stablernn_lib`` a notebook imports are followed through
their own module-level imports. ``make colab-test`` runs the notebooks there; this check is
the cheap one, in ``make test``.
"""

from __future__ import annotations

import ast
import functools
import importlib.metadata
import re
import sys
from pathlib import Path

import nbformat
import pytest
import tomllib
from colab_support import canonical, colab_versions

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted([*ROOT.glob("chapters/*.ipynb"), *ROOT.glob("chapters/homework/*.ipynb")])


def base_dependencies() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    return {canonical(re.split(r"[<>=!~;\[ ]", d, maxsplit=1)[0]) for d in project["dependencies"]}


def imported_modules(source: str, module_level_only: bool = False) -> set[str]:
    """The absolute module names ``source`` imports (IPython magics and shell lines skipped)."""
    lines = [line for line in source.splitlines() if not line.lstrip().startswith(("%", "!"))]
    tree = ast.parse("\n".join(lines))
    nodes = tree.body if module_level_only else ast.walk(tree)
    found = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
    return found


def library_file(module: str) -> Path | None:
    """The source file of a module of ``stablernn_lib`` (None for a name that is not one)."""
    path = ROOT.joinpath(*module.split("."))
    for candidate in (path.with_suffix(".py"), path / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def outside_modules(sources: list[str]) -> set[str]:
    """The top-level names of the modules outside the course library that ``sources`` import,
    following the module-level imports of the library's own modules."""
    pending = [m for source in sources for m in imported_modules(source)]
    seen, outside = set(), set()
    while pending:
        module = pending.pop()
        if module in seen:
            continue
        seen.add(module)
        top = module.split(".")[0]
        if top != "stablernn_lib":
            outside.add(top)
            continue
        path = library_file(module)
        if path is not None:
            text = path.read_text(encoding="utf-8")
            pending += imported_modules(text, module_level_only=True)
    return outside


@functools.cache
def owners() -> dict[str, list[str]]:
    """Top-level module -> the installed distributions that provide it."""
    return importlib.metadata.packages_distributions()


def unavailable(modules: set[str], allowed: set[str]) -> list[str]:
    """The modules of ``modules`` neither in the standard library nor installed by a
    distribution of ``allowed`` (canonical names)."""
    return sorted(
        module
        for module in modules
        if module not in sys.stdlib_module_names
        and not {canonical(d) for d in owners().get(module, [])} & allowed
    )


ALLOWED = base_dependencies() | set(colab_versions())


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_a_notebook_imports_only_what_colab_has_after_its_setup_cell(path):
    cells = nbformat.read(path, as_version=4).cells
    modules = outside_modules([c.source for c in cells if c.cell_type == "code"])
    assert "torch" in modules or "IPython" in modules or "sympy" in modules, modules
    missing = unavailable(modules, ALLOWED)
    assert not missing, (
        f"{path.name} imports {missing}, which neither the base dependencies nor Colab "
        "provide; add them to pyproject's dependencies or use the library instead"
    )


def test_the_check_finds_an_extras_module_and_follows_the_library():
    assert len(NOTEBOOKS) >= 22
    assert {"torch", "numpy", "ipywidgets", "ipython"} <= base_dependencies()
    notebook = ["import torch\nfrom myst_nb import glue\nfrom stablernn_lib.figures import widgets"]
    modules = outside_modules(notebook)
    assert {"torch", "myst_nb", "ipywidgets", "matplotlib"} <= modules
    assert unavailable(modules, ALLOWED) == ["myst_nb"]
    assert unavailable({"yaml"}, base_dependencies()) == ["yaml"]  # PyYAML: Colab's, not ours


NOT_FOR_STUDENTS = ("stablernn_grader", "stablernn_tools")  # the instructors' and maintainers'


def grader_or_tools_imports(sources: list[str]) -> list[str]:
    """The modules of the grader or the tools that ``sources`` import, directly or through
    the module-level imports of the course library's modules."""
    return sorted(m for m in outside_modules(sources) if m in NOT_FOR_STUDENTS)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_a_notebook_imports_neither_the_grader_nor_the_tools(path):
    cells = nbformat.read(path, as_version=4).cells
    found = grader_or_tools_imports([c.source for c in cells if c.cell_type == "code"])
    assert not found, (
        f"{path.name} imports {found}, which a student's setup cell does not install; "
        "move what it needs into stablernn_lib"
    )


def test_the_check_finds_the_grader_and_the_tools_in_a_planted_notebook():
    planted = ["import torch\nfrom stablernn_tools.notebook_checks import strip_notebook"]
    assert grader_or_tools_imports(planted) == ["stablernn_tools"]
    planted = ["def f():\n    import stablernn_grader.grading\n", "from stablernn_lib import book"]
    assert grader_or_tools_imports(planted) == ["stablernn_grader"]
    assert grader_or_tools_imports(["from stablernn_lib.homework import check"]) == []
