"""The package's folders are its architecture: each layer imports only the layers below it.

The import graph is read with ``ast`` from every module of ``stablernn_lib`` (imports inside
functions included), so the test needs none of the optional dependencies.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "stablernn_lib"
LAYERS = ("core", "symbolic", "theory", "tasks", "figures", "book", "homework")


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imported(name: str, path: Path) -> set[str]:
    """The modules of the package that ``name`` imports (a package stands for its ``__init__``)."""
    found = set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            targets = [f"{base}.{alias.name}" for alias in node.names] + [base]
        else:
            continue
        for target in targets:
            while target and target not in MODULES:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


GRAPH = {name: imported(name, path) for name, path in MODULES.items()}


def layer(name: str) -> int | None:
    """The floor of a module (0 = ``core``); None for the package's top (``__init__``, CLI)."""
    parts = name.split(".")
    return LAYERS.index(parts[1]) if len(parts) > 1 and parts[1] in LAYERS else None


def test_the_graph_is_read():
    """Not vacuous: the graph holds every layer and the ties everyone knows of."""
    assert {layer(name) for name in MODULES} >= set(range(len(LAYERS)))
    assert "stablernn_lib.core.models" in GRAPH["stablernn_lib.core.contraction"]
    assert "stablernn_lib.core.norms" in GRAPH["stablernn_lib.core.models"]
    assert "stablernn_lib.book.tools" in GRAPH["stablernn_lib.homework.notebooks"]


def test_every_module_lives_in_a_layer():
    loose = [n for n in MODULES if layer(n) is None and n.count(".") > 0]
    assert loose == ["stablernn_lib.__main__"], f"modules outside the layer folders: {loose}"


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


def test_the_plain_install_runs_the_cli_without_the_book_extra(tmp_path):
    """``--help``, ``train`` and ``paper-run`` need no ``book`` extra; the book and homework
    commands name it."""
    commands = [
        ["--help"],
        ["train", "--help"],
        ["paper-run", "--help"],
        ["book", "check-toc"],
        ["homework", "student-edition", "--out", str(tmp_path)],
    ]
    run = subprocess.run(
        [sys.executable, "-c", WITHOUT_BOOK, json.dumps(BOOK_PACKAGES), json.dumps(commands)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=PACKAGE.parent,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    parts = run.stdout.split("EXIT ")  # output 1, "status 1\noutput 2", ..., "status 4\n"
    assert [part.split()[0] for part in parts[1:]] == ["0", "0", "0", "2", "2"], run.stdout[-2000:]
    outputs = [parts[0]] + [part.partition("\n")[2] for part in parts[1:3]]
    assert all(output.startswith("usage: python -m stablernn_lib") for output in outputs)
    assert "train-music" in outputs[0] and "--model" in outputs[1] and "--budget-s" in outputs[2]
    assert run.stderr.count("install the 'book' extra") == 2, run.stderr[-2000:]
