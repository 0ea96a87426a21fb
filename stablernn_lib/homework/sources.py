"""Reading the source of an answer: names it uses, aliases, the homework's reference code.

Each cell is read once into a *scan* of plain lists (:func:`scan_tree`), which the grader
reads in a limited process; this module imports neither torch nor the rest of the package.
"""

from __future__ import annotations

import ast
import re
from typing import Any

REFERENCE_CODE = "the homework's reference code"  # what a use of it reads as in the gate
_REFERENCE_TEXT = re.compile(r"homework[./\\]+questions|questions[./\\]+(common|hw\d\d)")


CELL_BREAK = "\n# ---- next cell ----\n"  # joins cells that are parsed one by one


def parse_cells(source: str) -> list[ast.Module]:
    """Every cell of ``source`` (joined by :data:`CELL_BREAK`) as a syntax tree, through
    IPython's input transformer when needed; SyntaxError if it still does not parse."""
    trees = []
    for cell in source.split(CELL_BREAK):
        try:
            trees.append(ast.parse(cell))
            continue
        except SyntaxError:
            pass
        except (ValueError, RecursionError, MemoryError) as error:
            raise SyntaxError(f"unreadable source ({type(error).__name__})") from None
        try:
            from IPython.core.inputtransformer2 import TransformerManager
        except ImportError:
            raise SyntaxError("not Python, and IPython is not installed") from None
        try:
            trees.append(ast.parse(TransformerManager().transform_cell(cell)))
        except (SyntaxError, ValueError, RecursionError, MemoryError) as error:
            raise SyntaxError(f"unreadable source ({type(error).__name__})") from None
    return trees


def _is_reference_module(name: str) -> bool:
    parts = name.split(".")
    return "questions" in parts and ("homework" in parts or parts[0] == "questions")


def _mentions_reference(node: ast.AST) -> bool:
    """Whether ``node``'s subtree names the reference code (a module path, an attribute
    ``homework.questions``, or a string such as ``"homework/questions/common.py"``)."""
    for child in ast.walk(node):
        if isinstance(child, ast.Constant) and isinstance(child.value, str):
            if _REFERENCE_TEXT.search(child.value):
                return True
        elif (
            isinstance(child, ast.Attribute)
            and child.attr == "questions"
            and isinstance(child.value, (ast.Name, ast.Attribute))
        ):
            inner = child.value.id if isinstance(child.value, ast.Name) else child.value.attr
            if inner == "homework":
                return True
    return False


def scan_tree(tree: ast.Module) -> dict[str, Any]:
    """What one cell uses, as JSON-able lists: ``names`` it imports, calls or reads as
    attributes, ``loaded`` names, the ``aliases`` it defines (``g = m.f``, ...); the reference
    code counts as the name :data:`REFERENCE_CODE`."""
    names: set[str] = set()
    loaded: set[str] = set()
    aliases: dict[str, set[str]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            names.add(node.func.id)
        elif isinstance(node, ast.Attribute):
            names.add(node.attr)
        elif isinstance(node, ast.alias):
            names.add(node.name.rsplit(".", 1)[-1])
            if node.asname:
                names.add(node.asname)
                aliases.setdefault(node.asname, set()).add(node.name.rsplit(".", 1)[-1])
        elif isinstance(node, ast.Assign) and isinstance(node.value, (ast.Name, ast.Attribute)):
            value = {n.id for n in ast.walk(node.value) if isinstance(n, ast.Name)}
            value |= {n.attr for n in ast.walk(node.value) if isinstance(n, ast.Attribute)}
            for target in node.targets:
                if isinstance(target, ast.Name):
                    aliases.setdefault(target.id, set()).update(value)
        if isinstance(node, ast.Name):
            loaded.add(node.id)
        reference = False
        if isinstance(node, ast.Import):
            reference = any(_is_reference_module(a.name) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            reference = _is_reference_module(module) or (
                module.split(".")[-1] == "homework"
                and any(a.name == "questions" for a in node.names)
            )
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.Expr, ast.Return, ast.Call)):
            reference = _mentions_reference(node)
        if reference:
            names.add(REFERENCE_CODE)
            bound = []
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                bound = [(a.asname or a.name).split(".")[0] for a in node.names]
            elif isinstance(node, ast.Assign):
                bound = [t.id for t in node.targets if isinstance(t, ast.Name)]
            for name in bound:
                aliases.setdefault(name, set()).add(REFERENCE_CODE)
    return {
        "names": sorted(names),
        "loaded": sorted(loaded),
        "aliases": {k: sorted(v) for k, v in aliases.items()},
    }


def resolve_names(answer: list[dict[str, Any]], context: list[dict[str, Any]]) -> set[str]:
    """The names the answer's cells use (scans of :func:`scan_tree`), aliases defined in
    any cell of ``answer + context`` resolved."""
    names = {n for scan in answer for n in scan["names"]}
    loaded = {n for scan in answer for n in scan["loaded"]}
    aliases: dict[str, set[str]] = {}
    for scan in answer + context:
        for key, values in scan["aliases"].items():
            aliases.setdefault(key, set()).update(values)
    todo = list((names | loaded) & aliases.keys())
    while todo:
        for target in aliases[todo.pop()] - names:
            names.add(target)
            if target in aliases:
                todo.append(target)
    return names


def names_used(source: str, notebook: str = "") -> set[str]:
    """Names that ``source`` imports, calls, or reads as attributes, aliases in any cell of
    ``notebook`` resolved (``g(...)`` after ``g = torch.autograd.grad`` counts ``grad``; a
    local ``grad = ...`` does not); SyntaxError when a cell of ``source`` does not parse."""
    answer = [scan_tree(tree) for tree in parse_cells(source)]
    try:
        context = [scan_tree(tree) for tree in parse_cells(notebook)] if notebook else []
    except SyntaxError:
        context = []  # another cell's syntax error hides no alias the answer's cells use
    return resolve_names(answer, context)
