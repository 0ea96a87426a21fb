"""Reading submitted notebooks as untrusted input, and writing what may reach a spreadsheet.

The grading process opens every submission itself, so nothing here follows a link,
reads a device or a FIFO, parses an unbounded file or cell, or trusts the notebook's
structure: :func:`read_notebook` returns a notebook whose cells and metadata have the
types the grader uses, or raises :class:`SubmissionError` with a message that names
the problem and never quotes the file's bytes.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import unicodedata
from collections import Counter
from pathlib import Path
from typing import Any

import nbformat

MAX_NOTEBOOK_BYTES = 32 * 2**20  # a notebook with plots in its outputs stays far below
MAX_SOURCE_CHARS = 2**20  # one cell's source; the solutions are a few kB
CELL_TYPES = frozenset({"code", "markdown", "raw"})
_HOMEWORK_ID = re.compile(r"hw\d\d")
FORMULA_PREFIXES = ("=", "+", "-", "@", "\t", "\r")


class SubmissionError(ValueError):
    """A submission the grader refuses to read; the message is safe to publish."""


def find_submissions(folder: Path) -> list[tuple[str, Path]]:
    """``(student, notebook)`` pairs: ``folder/STUDENT/*.ipynb`` or ``folder/STUDENT.ipynb``.

    Links are listed (and refused when read) but never followed into folders.
    """
    found = []
    for here, folders, files in os.walk(folder, followlinks=False):
        folders[:] = sorted(f for f in folders if f != ".ipynb_checkpoints")
        for name in sorted(files):
            if not name.endswith(".ipynb"):
                continue
            path = Path(here) / name
            relative = path.relative_to(folder)
            student = relative.parts[0] if len(relative.parts) > 1 else path.stem
            found.append((student, path))
    return sorted(found, key=lambda pair: str(pair[1]))


def read_bytes(path: Path, root: Path, limit: int = MAX_NOTEBOOK_BYTES) -> bytes:
    """The bytes of a regular file under ``root``, reached without following any link."""
    relative = path.relative_to(root)
    for depth in range(1, len(relative.parts)):
        if (root / Path(*relative.parts[:depth])).is_symlink():
            raise SubmissionError("refused: its folder is a symbolic link")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as error:
        if os.path.islink(path):
            raise SubmissionError("refused: a symbolic link, not a notebook file") from None
        raise SubmissionError(f"unreadable file ({type(error).__name__})") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise SubmissionError("refused: not a regular file")
        if info.st_size > limit:
            raise SubmissionError(f"refused: larger than {limit // 2**20} MB")
        chunks, total = [], 0
        while chunk := os.read(fd, 1 << 20):
            total += len(chunk)
            if total > limit:
                raise SubmissionError(f"refused: larger than {limit // 2**20} MB")
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _text(value: Any, where: str) -> str:
    """A cell's source (a string or a list of strings) as one capped string."""
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        value = "".join(value)
    if not isinstance(value, str):
        raise SubmissionError(f"{where}: its source must be text")
    if len(value) > MAX_SOURCE_CHARS:
        raise SubmissionError(f"{where}: larger than {MAX_SOURCE_CHARS // 2**20} MB of source")
    return value


def _metadata(cell: dict[str, Any], where: str) -> dict[str, Any]:
    """Only the metadata the grader reads, each with the type it expects."""
    metadata = cell.get("metadata", {})
    if not isinstance(metadata, dict):
        raise SubmissionError(f"{where}: metadata must be an object")
    clean: dict[str, Any] = {}
    tags = metadata.get("tags", [])
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        raise SubmissionError(f"{where}: metadata.tags must be a list of strings")
    clean["tags"] = [t[:100] for t in tags[:100]]
    homework = metadata.get("homework", {})
    if not isinstance(homework, dict):
        raise SubmissionError(f"{where}: metadata.homework must be an object")
    question = homework.get("question")
    if question is not None:
        if not isinstance(question, str) or len(question) > 20:
            raise SubmissionError(f"{where}: metadata.homework.question must be a short string")
        clean["homework"] = {"question": question}
    return clean


def parse_notebook(data: bytes) -> nbformat.NotebookNode:
    """A notebook from untrusted bytes: its cells' type, source and the metadata the grader uses."""
    try:
        raw = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise SubmissionError("unreadable notebook: not UTF-8 text") from None
    except json.JSONDecodeError as error:
        raise SubmissionError(
            f"unreadable notebook: not JSON (line {error.lineno}, column {error.colno})"
        ) from None
    except RecursionError:
        raise SubmissionError("unreadable notebook: nested too deeply") from None
    if not isinstance(raw, dict) or not isinstance(raw.get("cells"), list):
        raise SubmissionError("unreadable notebook: no list of cells")
    metadata = raw.get("metadata", {})
    if not isinstance(metadata, dict):
        raise SubmissionError("notebook metadata must be an object")
    homework = metadata.get("homework", {})
    if not isinstance(homework, dict):
        raise SubmissionError("notebook metadata.homework must be an object")
    homework_id = homework.get("id")
    if homework_id is not None and not (isinstance(homework_id, str) and len(homework_id) < 20):
        raise SubmissionError("notebook metadata.homework.id must be a short string")
    cells = []
    for number, cell in enumerate(raw["cells"], start=1):
        where = f"cell {number}"
        if not isinstance(cell, dict) or cell.get("cell_type") not in CELL_TYPES:
            raise SubmissionError(f"{where}: not a code, markdown or raw cell")
        source = _text(cell.get("source", ""), where)
        node = {"cell_type": cell["cell_type"], "source": source}
        node["metadata"] = _metadata(cell, where)
        if cell["cell_type"] == "code":
            node.update(outputs=[], execution_count=None)
        cells.append(node)
    clean = {"homework": {"id": homework_id}} if homework_id else {}
    return nbformat.from_dict(
        {"nbformat": 4, "nbformat_minor": 5, "metadata": clean, "cells": cells}
    )


def stated_homework(nb: nbformat.NotebookNode | None, path: Path) -> tuple[str | None, str | None]:
    """The homework id in the notebook's metadata and the ``hwNN`` in its file name."""
    in_metadata = ((nb or {}).get("metadata", {}).get("homework") or {}).get("id")
    match = _HOMEWORK_ID.search(path.name)
    return in_metadata, match.group() if match else None


_LINE_BREAK = re.compile(r"(\r\n|[\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029])")


def spreadsheet_safe(value: str) -> str:
    """``value`` as a CSV field no spreadsheet runs as a formula: a ``'`` before every line
    of it (any line break counts, ``\\r`` and ``\\u2028`` too) that starts with = + - @."""
    parts = _LINE_BREAK.split(value)  # lines at even places, the breaks between them
    return "".join(
        "'" + part if i % 2 == 0 and part.startswith(FORMULA_PREFIXES) else part
        for i, part in enumerate(parts)
    )


HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Co", "Cs", "Zl", "Zp"})  # control, format, separators


def one_line(text: str) -> str:
    """Untrusted text on one line: every line break, control or format character (and a
    file name's undecodable byte) a space."""
    return "".join(" " if unicodedata.category(c) in HIDDEN_CATEGORIES else c for c in str(text))


REPORT_NAME_BYTES = 100  # the readable part of a report's file name, at most


def report_names(pairs: list[tuple[str, Path]]) -> list[str]:
    """A file name for the report of each ``(student, notebook)``: ``student__stem.md``
    in ASCII letters, digits, ``.``, ``_`` and ``-``, its readable part cut at 100 bytes;
    a hash of the student and the notebook's path (12 hex digits) is added when the
    name had to change (cut, characters replaced) or when two submissions would share it,
    and a counter if they still would.  At most 118 bytes whatever the names."""
    readable = []
    for student, path in pairs:
        wanted = f"{student}__{path.stem}"
        safe = re.sub(r"[^A-Za-z0-9._-]", "_", wanted).lstrip(".") or "_"
        readable.append((safe[:REPORT_NAME_BYTES], safe[:REPORT_NAME_BYTES] != wanted))
    counts = Counter(name for name, _ in readable)
    names: list[str] = []
    for (student, path), (name, changed) in zip(pairs, readable, strict=True):
        if changed or counts[name] > 1:
            key = os.fsencode(student) + b"\0" + os.fsencode(str(path))
            name = f"{name}-{hashlib.sha256(key).hexdigest()[:12]}"
        names.append(name)
    taken: Counter[str] = Counter()
    unique = []
    for name in names:
        taken[name] += 1
        unique.append(f"{name}.md" if taken[name] == 1 else f"{name}-{taken[name]}.md")
    return unique
