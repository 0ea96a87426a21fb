"""Reading single-source notebooks: which cells are solutions, and their student stubs.

Cell conventions (the instructor edition is the single source):

- code cell tagged ``solution`` with metadata ``{"homework": {"question": "hw04.q1"}}``:
  defines the question's function; the student edition keeps its imports, signature
  and docstring and replaces the body by ``raise NotImplementedError(<task>)``;
- code cell tagged ``solution`` without that metadata (an exercise's code in a chapter):
  replaced by a placeholder comment, so later cells must not depend on it;
- code cell tagged ``check``: ``check("hw04.q1", spectral_projection)``; kept;
- markdown cell tagged ``answer`` (same metadata): the model answer of a proof
  question; the student edition replaces it by a placeholder for the student's proof;
- cells tagged ``rubric`` or ``instructor``: removed from the student edition;
- markdown ``{solution}`` directives (sphinx-exercise), and everything from a
  ``{solution-start}`` to its ``{solution-end}``: removed from the student edition.
"""

from __future__ import annotations

import argparse
import ast
import copy
import io
import re
import textwrap
import tokenize
from pathlib import Path
from typing import Any

import nbformat

from stablernn_lib.core.io import atomic_write_text
from stablernn_lib.homework.cells import (
    ANSWER_PLACEHOLDER,
    COLAB_TAG,
    REMOVED_TAGS,
    is_answer_cell,
    is_solution_cell,
    question_of,
    tags,
)
from stablernn_lib.homework.registry import Question, get_question, homeworks
from stablernn_tools.notebook_checks import colab_setup_cell

EXERCISE_PLACEHOLDER = "# Your solution to the exercise here."

_FENCE_OPEN = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|:{3,})\{(?P<name>[\w-]+)\}")


def remove_solution_directives(text: str) -> tuple[str, bool]:
    """Drop every ``{solution}`` directive block from MyST text.

    Returns the remaining text and whether anything was removed.  A block runs from
    its opening fence (backticks or colons) to the first line that is the same fence
    again; a ``{solution-start}`` block runs to the matching ``{solution-end}`` block.
    """
    lines = text.split("\n")
    kept: list[str] = []
    removed = False
    index = 0
    while index < len(lines):
        match = _FENCE_OPEN.match(lines[index])
        if not match or match["name"] not in ("solution", "solution-start"):
            kept.append(lines[index])
            index += 1
            continue
        removed = True
        index = _end_of_block(lines, index, match["fence"], match["name"])
    return "\n".join(kept), removed


def _end_of_block(lines: list[str], start: int, fence: str, name: str) -> int:
    """Index just after the block opened at ``start`` (after ``{solution-end}`` for gated)."""
    index = start + 1
    while index < len(lines):
        stripped = lines[index].strip()
        if name == "solution-start":
            end = _FENCE_OPEN.match(lines[index])
            if end and end["name"] == "solution-end":
                return _end_of_block(lines, index, end["fence"], "solution-end")
        elif stripped.startswith(fence[0] * len(fence)) and set(stripped) == {fence[0]}:
            return index + 1
        index += 1
    return index


def opens_gated_solution(cell: dict[str, Any]) -> bool:
    """Whether a markdown cell opens a ``{solution-start}`` that it does not close."""
    if cell["cell_type"] != "markdown":
        return False
    names = [m["name"] for line in cell["source"].split("\n") if (m := _FENCE_OPEN.match(line))]
    return "solution-start" in names and "solution-end" not in names


def closes_gated_solution(cell: dict[str, Any]) -> bool:
    names = [m["name"] for line in cell["source"].split("\n") if (m := _FENCE_OPEN.match(line))]
    return cell["cell_type"] == "markdown" and "solution-end" in names


def stub_source(source: str, question: Question) -> str:
    """The student stub of a solution cell: imports, signature, docstring, ``raise``.

    Raises ValueError when the cell does not define ``question.function``.
    """
    tree = ast.parse(source)
    lines = source.split("\n")
    parts: list[str] = []
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            parts.append(ast.get_source_segment(source, node) or "")
    function = next(
        (
            node
            for node in tree.body
            if isinstance(node, ast.FunctionDef) and node.name == question.function
        ),
        None,
    )
    if function is None:
        raise ValueError(
            f"the solution cell of {question.id} must define {question.function}(); "
            "fix the cell or the question's function name in the registry"
        )
    first = min([function.lineno] + [d.lineno for d in function.decorator_list])
    header = lines[first - 1 : _signature_end(source, function)]
    body = function.body
    if (
        isinstance(body[0], ast.Expr)
        and isinstance(body[0].value, ast.Constant)
        and isinstance(body[0].value.value, str)
    ):
        header += lines[body[0].lineno - 1 : body[0].end_lineno]
    header = "\n".join(header).rstrip()
    indent = " " * (body[0].col_offset)
    message = textwrap.wrap(f"{question.id}: {question.task}", width=80 - len(indent))
    quoted = "\n".join(f'{indent}    "{line} "' for line in message[:-1])
    quoted += ("\n" if quoted else "") + f'{indent}    "{message[-1]}"'
    raise_lines = f"{indent}raise NotImplementedError(\n{quoted}\n{indent})"
    imports = "\n".join(parts) + "\n\n\n" if parts else ""
    return imports + header + "\n" + raise_lines + "\n"


def _signature_end(source: str, function: ast.FunctionDef) -> int:
    """The (1-based) line holding the colon that ends the ``def`` of ``function``."""
    depth = 0
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    for token in tokens:
        if token.start[0] < function.lineno or token.type != tokenize.OP:
            continue
        if token.string in "([{":
            depth += 1
        elif token.string in ")]}":
            depth -= 1
        elif token.string == ":" and depth == 0:
            return token.start[0]
    return function.lineno


def student_cells(nb: nbformat.NotebookNode) -> list[nbformat.NotebookNode]:
    """The cells of the student edition of ``nb`` (outputs cleared, solutions removed)."""
    cells = []
    in_gated_solution = False
    for cell in nb.cells:
        if in_gated_solution:
            in_gated_solution = not closes_gated_solution(cell)
            continue
        if opens_gated_solution(cell):
            in_gated_solution = True
            continue
        if REMOVED_TAGS & set(tags(cell)):
            continue
        cell = copy.deepcopy(cell)
        if cell["cell_type"] == "code":
            cell.outputs = []
            cell.execution_count = None
            cell.metadata.pop("execution", None)
            if is_solution_cell(cell) and question_of(cell):
                cell.source = stub_source(cell.source, get_question(question_of(cell)))
            elif is_solution_cell(cell):  # an exercise's code in a chapter
                cell.source = EXERCISE_PLACEHOLDER
        elif is_answer_cell(cell):
            cell.source = ANSWER_PLACEHOLDER
        elif cell["cell_type"] == "markdown":
            text, removed = remove_solution_directives(cell.source)
            if removed and not text.strip():
                continue
            cell.source = text
        cells.append(cell)
    return cells


def student_notebook(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """A copy of ``nb`` as the student edition (see :func:`student_cells`)."""
    edition = copy.deepcopy(nb)
    edition.cells = student_cells(nb)
    edition.metadata.pop("widgets", None)
    return edition


def sync_colab_cells(root: Path) -> list[Path]:
    """Make the first cell of every homework notebook the book's Colab setup cell.

    The cell comes from :func:`stablernn_tools.notebook_checks.colab_setup_cell` (built from
    ``_config.yml``'s repository), as in the chapters.  Returns the notebooks changed.
    """
    colab = colab_setup_cell()
    changed = []
    for homework in homeworks():
        path = root / homework.notebook
        nb = nbformat.read(path, as_version=4)
        first = nb.cells[0] if nb.cells else None
        if first is not None and COLAB_TAG in tags(first):
            if first.source == colab.source and tags(first) == tags(colab):
                continue
            first.source, first.metadata["tags"] = colab.source, tags(colab)
        else:
            nb.cells.insert(0, colab)
        atomic_write_text(path, nbformat.writes(nb) + "\n")
        changed.append(path)
    return changed


def _sync_colab(args: argparse.Namespace) -> int:
    changed = sync_colab_cells(args.root)
    print(f"updated the Colab cell of {len(changed)} homework notebooks")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``sync-colab`` to ``python -m stablernn_tools``."""
    sync = subparsers.add_parser(
        "sync-colab", help="copy Chapter 1's Colab setup cell into every homework notebook"
    )
    sync.add_argument("--root", type=Path, default=Path("."), help="the book's source folder")
    sync.set_defaults(func=_sync_colab)
