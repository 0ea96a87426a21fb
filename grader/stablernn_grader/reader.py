"""Reading a submission's untrusted bytes and source in a limited process of its own.

Parsing is work an attacker controls: a 32 MB notebook of ``{}`` takes gigabytes as
Python objects, and IPython's transformer takes minutes on a 75 KB cell built for it.
So the grading process never parses a submission itself.  It hands the notebook's
bytes to a *reader process* (started like a student process, in the sandbox, under
limits on memory and CPU, :func:`read_submission`), which sends back the cleaned
notebook (:func:`stablernn_grader.submissions.parse_notebook`: cell types,
sources and the metadata the grader uses) and, for each cell the grader asks about, a
*scan* of its source (:func:`stablernn_lib.homework.sources.scan_tree`).  Every step has
a budget: each cell :data:`CELL_S` of the reader's CPU time (so that a loaded machine
does not cut an honest cell) and :data:`CELL_WALL_S` on the grading process's clock, the
notebook :data:`NOTEBOOK_S` and the whole submission :data:`TOTAL_S`.  A cell over its budget is
reported, never run and never waited on again (the reader is killed and restarted
after it); so is a cell whose scan holds more than :data:`MAX_CELL_NAMES` names, or
beyond :data:`MAX_NAMES` in all; a notebook over its budget is refused.  Every line
the reader sends is capped in size before the grading process parses it.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

NOTEBOOK_S = 60.0  # wall seconds to start and parse the notebook's JSON (32 MB at most)
CELL_S = 10.0  # CPU seconds to read one cell (1 MB at most); an honest one takes ms
CELL_WALL_S = 40.0  # wall seconds for one cell, however loaded the machine
TOTAL_S = 120.0  # wall seconds for all the reading of one submission, restarts included
MEMORY_BYTES = 2 * 2**30  # address space beyond the reader's start
MAX_CELLS = 2000  # code, Markdown and raw cells of one notebook
MAX_NOTEBOOK_LINE = 64 * 2**20  # the cleaned notebook as JSON (UTF-8: about the file's size)
MAX_SCAN_LINE = 2**20  # one cell's scan
MAX_CELL_NAMES = 20_000  # names in one cell's scan (an honest cell has a few dozen)
MAX_NAMES = 200_000  # names in all the scans of one submission


class LineReader:
    """JSON lines from a pipe, each capped, read with deadlines (no quadratic buffering)."""

    def __init__(self, fd: int) -> None:
        self.fd, self.buffer, self.closed = fd, bytearray(), False
        self.over: str | None = None  # why reading stopped: a line over its cap

    def line(self, deadline: float, cap: int) -> bytes | None:
        """The next line; None at the deadline, at the end of the pipe or over ``cap``."""
        searched = 0
        while (end := self.buffer.find(b"\n", searched)) < 0:
            searched = len(self.buffer)
            if searched > cap:
                self.over, self.closed = f"a line over {cap // 2**20} MB", True
                return None
            remaining = deadline - time.monotonic()
            if self.closed or remaining <= 0:
                return None
            ready, _, _ = select.select([self.fd], [], [], remaining)
            if not ready:
                return None
            chunk = os.read(self.fd, 1 << 20)
            if not chunk:
                self.closed = True
                return None
            self.buffer += chunk
        line = bytes(self.buffer[:end])
        del self.buffer[: end + 1]
        return line

    def event(self, deadline: float, cap: int) -> dict[str, Any] | None:
        """The next line as a JSON object (``{"event": "garbled"}`` if it is not one)."""
        line = self.line(deadline, cap)
        if line is None:
            return None
        try:
            event = json.loads(line)
        except (ValueError, RecursionError):
            return {"event": "garbled"}
        return event if isinstance(event, dict) else {"event": "garbled"}


@dataclass
class Reading:
    """What the reader found: the cleaned notebook (or why not), and each asked cell's scan."""

    notebook: dict[str, Any] | None = None
    error: str = ""
    scans: dict[int, dict[str, Any]] = field(default_factory=dict)
    unreadable: dict[int, str] = field(default_factory=dict)  # cells that do not parse
    over_budget: dict[int, str] = field(default_factory=dict)  # cells never read to the end


# start(payload) -> (events reader, request writer, stop); see grading._read
Starter = Callable[[bytes], tuple[LineReader, Callable[[dict[str, Any]], None], Callable[[], None]]]


def read_submission(
    data: bytes | None,
    sources: list[str] | None,
    choose: Callable[[dict[str, Any]], list[int]],
    start: Starter,
) -> Reading:
    """Read ``data`` (notebook bytes) or ``sources`` (texts, numbered from 1) in reader
    processes; ``choose(notebook)`` says which cells to scan (numbers from 1)."""
    reading = Reading()
    payload = data if data is not None else json.dumps(sources).encode()
    end_of_all = time.monotonic() + TOTAL_S
    todo: list[int] | None = None
    while todo is None or todo:
        events, send, stop = start(payload)
        try:
            first = events.event(min(end_of_all, time.monotonic() + NOTEBOOK_S), MAX_NOTEBOOK_LINE)
            if (first is None or "error" in first) and todo is not None:
                for rest in todo:  # a fresh reader could not start again within the budget
                    reading.over_budget[rest] = f"not read within the grader's {TOTAL_S:g} s budget"
                return reading
            if first is None or "error" in first:
                reading.error = _refusal(first, events)
                return reading
            if todo is None:
                reading.notebook = first.get("notebook")
                texts = first.get("count")
                todo = choose(reading.notebook) if data is not None else list(range(1, texts + 1))
            send({"scan": todo})
            while todo:
                cell = todo[0]
                deadline = min(end_of_all, time.monotonic() + CELL_WALL_S)
                event = events.event(deadline, MAX_SCAN_LINE)
                if event is None:
                    seconds = TOTAL_S if time.monotonic() >= end_of_all else CELL_WALL_S
                    why = events.over or f"not read within the grader's {seconds:g} s budget"
                    reading.over_budget[todo.pop(0)] = why
                    if time.monotonic() >= end_of_all:
                        for rest in todo:
                            reading.over_budget[rest] = f"not read: {TOTAL_S:g} s budget spent"
                        todo = []
                    break  # start a fresh reader for the cells after it
                if event.get("cell") != cell:
                    continue
                todo.pop(0)
                if "over" in event:
                    reading.over_budget[cell] = str(event["over"])[:200]
                elif isinstance(event.get("scan"), dict) and _is_scan(event["scan"]):
                    names = _count(event["scan"])
                    kept = sum(map(_count, reading.scans.values()))
                    if names > MAX_CELL_NAMES or kept + names > MAX_NAMES:
                        limit = MAX_CELL_NAMES if names > MAX_CELL_NAMES else MAX_NAMES
                        reading.over_budget[cell] = f"more than {limit} names to follow"
                    else:
                        reading.scans[cell] = event["scan"]
                else:
                    reading.unreadable[cell] = str(event.get("unreadable", "unreadable"))[:200]
        finally:
            stop()
    return reading


def _refusal(first: dict[str, Any] | None, events: LineReader) -> str:
    if first is not None:
        return str(first["error"])[:300]
    if events.over:
        return f"refused: the notebook is too large to read ({events.over})"
    return (
        f"refused: the notebook could not be read within the grader's budget "
        f"({NOTEBOOK_S:g} s, {MEMORY_BYTES // 2**30} GB)"
    )


def _count(scan: dict[str, Any]) -> int:
    return len(scan["names"]) + len(scan["loaded"]) + sum(map(len, scan["aliases"].values()))


def _is_scan(scan: dict[str, Any]) -> bool:
    lists = (scan.get("names"), scan.get("loaded"))
    aliases = scan.get("aliases")
    return (
        all(isinstance(x, list) and all(isinstance(n, str) for n in x) for x in lists)
        and isinstance(aliases, dict)
        and all(
            isinstance(v, list) and all(isinstance(n, str) for n in v) for v in aliases.values()
        )
    )


# ----------------------------------------------------------------------------- the reader


def _clean(nb: Any) -> dict[str, Any]:
    cells = [
        {"cell_type": c.cell_type, "source": c.source, "metadata": dict(c.metadata)}
        for c in nb.cells
    ]
    return {"metadata": dict(nb.metadata), "cells": cells}


def main() -> None:
    """The reader process: a plan line, the payload, then a line naming the cells to scan."""
    from stablernn_grader.confine import apply_limits, drop_privileges

    plan = json.loads(_read_line(0))
    apply_limits({"memory_bytes": MEMORY_BYTES, "cpu_s": int(TOTAL_S) + 5, "file_bytes": 1})
    if plan.get("uid") is not None:
        drop_privileges(int(plan["uid"]))
    payload = _read_exactly(0, int(plan["size"]))
    out = int(plan["events_fd"])
    from stablernn_grader.submissions import SubmissionError, parse_notebook
    from stablernn_lib.homework.sources import parse_cells, scan_tree

    with contextlib.suppress(ImportError):  # imported now, not on a cell's budget
        from IPython.core.inputtransformer2 import TransformerManager  # noqa: F401

    try:
        if plan.get("mode") == "sources":
            texts = [str(s) for s in json.loads(payload)]
            first: dict[str, Any] = {"count": len(texts)}
        else:
            nb = parse_notebook(payload)
            if len(nb.cells) > MAX_CELLS:
                raise SubmissionError(f"refused: more than {MAX_CELLS} cells")
            texts = [c.source for c in nb.cells]
            first = {"notebook": _clean(nb)}
    except SubmissionError as error:
        first = {"error": str(error)}
    except MemoryError:
        first = {"error": "refused: the notebook is too large to read"}
    del payload
    _send(out, first)
    if "error" in first:
        os._exit(0)
    request = json.loads(_read_line(0))
    signal.signal(signal.SIGPROF, _over_budget)
    for number in request["scan"]:
        try:
            signal.setitimer(signal.ITIMER_PROF, CELL_S)
            (tree,) = parse_cells(texts[number - 1])
            reply = {"cell": number, "scan": scan_tree(tree)}
        except _OverBudget:
            reply = {"cell": number, "over": f"more than {CELL_S:g} s of CPU time to read"}
        except SyntaxError as error:
            reply = {"cell": number, "unreadable": f"SyntaxError: {error}"[:200]}
        except (MemoryError, RecursionError) as error:
            reply = {"cell": number, "unreadable": type(error).__name__}
        finally:
            signal.setitimer(signal.ITIMER_PROF, 0)
        _send(out, reply)
    os._exit(0)


class _OverBudget(BaseException):
    """A cell took more than :data:`CELL_S` of CPU time to read."""


def _over_budget(signum: int, frame: Any) -> None:
    raise _OverBudget


def _send(fd: int, message: dict[str, Any]) -> None:
    data = (json.dumps(message, ensure_ascii=False) + "\n").encode()
    while data:
        data = data[os.write(fd, data) :]


def _read_line(fd: int) -> bytes:
    line = bytearray()
    while not line.endswith(b"\n"):
        byte = os.read(fd, 1)
        if not byte:
            break
        line += byte
    return bytes(line)


def _read_exactly(fd: int, size: int) -> bytes:
    data = bytearray()
    while len(data) < size:
        chunk = os.read(fd, min(1 << 20, size - len(data)))
        if not chunk:
            break
        data += chunk
    return bytes(data)


if __name__ == "__main__":
    main()
