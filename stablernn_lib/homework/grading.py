"""Grading a folder of submitted homework notebooks, treating every submission as hostile.

Two processes per submission, and the student's code runs in only one of them:

1. the *student process* (:mod:`stablernn_lib.homework.sandbox`) runs the submission's
   code cells (not its Colab setup or check cells), then calls the student's function
   from every check and sends back, as JSON, what each call returned, raised or changed
   in its arguments.  It runs under limits it cannot lift (:class:`Limits`: wall time,
   CPU time, memory, processes, file size), in a fresh folder holding only a copy of
   the submission, with no output but the event pipe; when the grader runs as root it
   also runs under a user id of its own, which can neither read the grader's folders
   and the other submissions (mode 700) nor signal the grader, and whose every process
   is killed when grading of the submission ends;
2. the *grading process* (this one, which never runs student code) replays each check
   with a :class:`~stablernn_lib.homework.sandbox.Replayer` of those records, draws the
   hidden instances itself, decides the score and writes every result file.

A process that loops, sleeps, exits or crashes during a cell or a check is killed and
started again without that cell (or past that check); whatever happens to one
submission is recorded and grading goes on.

Writes ``scores.csv`` (one row per submission, one column per question), one Markdown
report per submission, and ``grading.json`` (seed, limits, statuses).
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import re
import secrets
import select
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import nbformat
from tqdm.auto import tqdm

from stablernn_lib.core.io import atomic_write_json, atomic_write_text
from stablernn_lib.homework.notebooks import (
    is_answer_cell,
    is_check_cell,
    question_of,
    tags,
)
from stablernn_lib.homework.registry import Homework, Question, get_homework
from stablernn_lib.homework.runner import (
    CheckOutcome,
    QuestionResult,
    rubric_markdown,
    run_check,
    score,
)
from stablernn_lib.homework.sandbox import ProtocolError, Replayer

SKIPPED_TAGS = frozenset({"colab-setup"})
_HOMEWORK_IN_NAME = re.compile(r"hw\d\d")
MAX_EVENT_BYTES = 64 * 2**20  # one event (a check's records) from the student process
MAX_EVENTS_BYTES = 256 * 2**20  # all events of one student process
SANDBOX_UIDS = (2_000_000_000, 2_100_000_000)  # user ids no account uses
STARTUP_S = 60.0  # importing torch in a fresh process on a loaded machine


@dataclass(frozen=True)
class Limits:
    """What one submission may use.

    ``notebook_s``: wall seconds for all of the notebook's own cells; ``time_scale``
    multiplies every check's time limit; ``memory_mb`` bounds the address space
    (``RLIMIT_AS``) of every student process; ``processes`` bounds the processes and
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
            raise ValueError("--memory-mb must be at least 1024 (importing torch needs it)")

    def checks_s(self, homework: Homework) -> float:
        return self.time_scale * sum(c.time_limit for q in homework.questions for c in q.all_checks)

    def cpu_s(self, homework: Homework) -> int:
        return int(STARTUP_S + self.notebook_s + self.checks_s(homework)) + 1

    def total_s(self, homework: Homework) -> float:
        """Wall time of a whole submission, restarts included."""
        return 2 * (STARTUP_S + self.notebook_s + self.checks_s(homework))


def sandbox_user() -> int | None:
    """A fresh user id for one submission's processes, or None when not running as root."""
    if os.geteuid() != 0:
        return None
    low, high = SANDBOX_UIDS
    while True:
        uid = low + secrets.randbelow(high - low)
        if not any(_processes_of(uid)):
            return uid


def _processes_of(uid: int) -> Iterator[int]:
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
        except OSError:
            continue
        line = next((x for x in status.splitlines() if x.startswith("Uid:")), "")
        if line.split()[1:2] == [str(uid)]:
            yield int(entry.name)


def kill_user_processes(uid: int) -> None:
    """Kill every process of ``uid``: ``kill -9 -1`` run as that user, then any stragglers."""
    for _ in range(20):
        subprocess.run(
            ["kill", "-9", "-1"],
            user=uid,
            group=uid,
            extra_groups=[],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            check=False,
        )
        left = list(_processes_of(uid))
        if not left:
            return
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.05)


def _remove_files_of(uid: int) -> None:
    """Remove what the user id left in the shared temporary folders."""
    for folder in (Path(tempfile.gettempdir()), Path("/var/tmp"), Path("/dev/shm")):
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            try:
                if entry.stat(follow_symlinks=False).st_uid != uid:
                    continue
                if entry.is_dir(follow_symlinks=False):
                    shutil.rmtree(entry.path, ignore_errors=True)
                else:
                    os.unlink(entry.path)
            except OSError:
                pass


@dataclass
class QuestionGrade:
    """The grade of one question in one submission."""

    question: Question
    status: str
    points: float | None
    outcomes: list[dict[str, Any]] = field(default_factory=list)
    answer: str = ""


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


def homework_of(nb: nbformat.NotebookNode | None, path: Path) -> Homework:
    """The homework a notebook answers: its ``homework.id`` metadata, else ``hwNN`` in its name."""
    homework_id = ((nb or {}).get("metadata", {}).get("homework") or {}).get("id")
    if not homework_id:
        match = _HOMEWORK_IN_NAME.search(path.name)
        if not match:
            raise ValueError(
                f"cannot tell which homework {path.name} answers: name the file hwNN_... "
                "or keep the notebook metadata of the student edition"
            )
        homework_id = match.group()
    return get_homework(homework_id)


def find_submissions(folder: Path) -> list[tuple[str, Path]]:
    """``(student, notebook)`` pairs: ``folder/STUDENT/*.ipynb`` or ``folder/STUDENT.ipynb``."""
    found = []
    for path in sorted(folder.rglob("*.ipynb")):
        relative = path.relative_to(folder)
        if ".ipynb_checkpoints" in relative.parts:
            continue
        student = relative.parts[0] if len(relative.parts) > 1 else path.stem
        found.append((student, path))
    return found


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


def _sandbox_environment(folder: Path) -> dict[str, str]:
    package_root = str(Path(__file__).resolve().parents[2])
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(folder),
        "TMPDIR": str(folder),
        "IPYTHONDIR": str(folder / ".ipython"),
        "MPLCONFIGDIR": str(folder / ".matplotlib"),
        "MPLBACKEND": "Agg",
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONPATH": package_root,
        "LANG": "C.UTF-8",
    }


def _start(run: _Run, folder: Path, uid: int | None, seed: int, limits: Limits, homework: Homework):
    read_fd, write_fd = os.pipe()
    plan_limits: dict[str, int] = {
        "cpu_s": limits.cpu_s(homework),
        "memory_bytes": limits.memory_mb * 2**20,
        "file_bytes": limits.file_mb * 2**20,
        "open_files": 256,
    }
    if uid is not None:  # RLIMIT_NPROC counts the processes of a user id: only its own
        plan_limits["processes"] = limits.processes
    plan = {
        "uid": uid,
        "cells": [[i, c.source] for i, c in run.cells_to_run()],
        "checks": [list(key) for key in run.todo()],
        "seed": seed,
        "limits": plan_limits,
        "events_fd": write_fd,
    }
    try:
        process = subprocess.Popen(
            [sys.executable, "-m", "stablernn_lib.homework.sandbox"],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            cwd=folder,
            env=_sandbox_environment(folder),
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
    return process, read_fd


def _stop(process: subprocess.Popen, uid: int | None) -> None:
    """Kill the student process, its process group and (own user id) every process of it."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    process.kill()
    process.wait()
    if uid is not None:
        kill_user_processes(uid)


def _one_process(
    run: _Run,
    folder: Path,
    uid: int | None,
    seed: int,
    limits: Limits,
    homework: Homework,
    deadline: float,
) -> bool:
    """Run one student process until it is done, stuck or dead; returns whether it progressed."""
    process, read_fd = _start(run, folder, uid, seed, limits, homework)
    reader = _EventReader(read_fd)
    positions = dict(run.cells_to_run())
    current: tuple[str, Any] | None = None
    progressed = False
    limit_at = min(deadline, time.monotonic() + STARTUP_S + limits.notebook_s)
    notebook_end: float | None = None
    try:
        while True:
            event = reader.next(limit_at)
            now = time.monotonic()
            if event is None:
                break
            kind, phase, index = event.get("event"), event.get("phase"), event.get("index")
            if not isinstance(index, int):
                index = None
            if kind == "cell" and phase == "start" and index in positions:
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
                if len(key) != 2 or key not in run.todo():
                    continue
                question_id, name = key
                if phase == "start":
                    current = ("check", key)
                    check = _find_check(homework, question_id, name)
                    limit_at = min(deadline, now + limits.time_scale * check.time_limit + 2)
                elif phase == "end" and current == ("check", key):
                    run.results[key] = event
                    progressed, current = True, None
                    limit_at = min(deadline, now + STARTUP_S)  # until the next check starts
            elif kind == "done":
                break
        timed_out = time.monotonic() >= limit_at and not reader.closed
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
            if timed_out:
                run.results[current[1]] = {"timeout": True}
            else:
                run.results[current[1]] = {"ended": True}
            progressed = True
    finally:
        _stop(process, uid)
        os.close(read_fd)
    return progressed


def _find_check(homework: Homework, question_id: str, name: str):
    question = next(q for q in homework.questions if q.id == question_id)
    return next(c for c in question.all_checks if c.name == name)


def run_student_code(
    nb: nbformat.NotebookNode, homework: Homework, *, seed: int, limits: Limits, workdir: Path
) -> _Run:
    """Run the submission in student processes until every check has a record (or none can)."""
    run = _Run(
        _student_cells(nb),
        [(q.id, c.name) for q in homework.questions if q.kind == "code" for c in q.all_checks],
    )
    uid = sandbox_user()
    deadline = time.monotonic() + limits.total_s(homework)
    try:
        if uid is not None:
            os.chown(workdir, uid, uid)
        while run.todo():
            if time.monotonic() >= deadline:
                run.status = "stopped at the submission's total time limit"
                break
            if not _one_process(run, workdir, uid, seed, limits, homework, deadline):
                run.status = "the notebook's process stopped without running the checks"
                break
    finally:
        if uid is not None:
            kill_user_processes(uid)
            _remove_files_of(uid)
    return run


def _outcome(
    question: Question, check, record: dict[str, Any] | None, seed: int, source: str, scale: float
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
            source=source,
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
    source = "\n".join(sources)
    outcomes = [
        _outcome(question, check, record, seed, source, scale)
        for check, record in zip(question.all_checks, records, strict=True)
    ]
    result = QuestionResult(question.id, score(question, outcomes), question.points, outcomes)
    return QuestionGrade(question, result.status, result.points, [asdict(o) for o in outcomes])


def grade_notebook(
    student: str, path: Path, *, seed: int, limits: Limits | None = None
) -> Submission:
    """Grade one submitted notebook; never raises for a bad submission."""
    limits = limits or Limits()
    start = time.perf_counter()
    read_error = ""
    try:
        nb = nbformat.read(path, as_version=4)
    except Exception as error:  # any unreadable file is a grade, not a crash
        nb = None
        read_error = f"unreadable notebook ({type(error).__name__}: {str(error)[:200]})"
    try:
        homework = homework_of(nb, path)
    except ValueError as error:
        return Submission(student, path, None, status=read_error if nb is None else str(error))
    if nb is None:
        submission = Submission(student, path, homework, status=read_error)
        submission.grades = [
            QuestionGrade(q, "not run", 0.0 if q.kind == "code" else None)
            for q in homework.questions
        ]
        return submission
    submission = Submission(student, path, homework)
    with tempfile.TemporaryDirectory(prefix="stablernn-grading-") as tmp:
        workdir = Path(tmp)
        shutil.copyfile(path, workdir / "submission.ipynb")  # the only file it can see
        try:
            run = run_student_code(nb, homework, seed=seed, limits=limits, workdir=workdir)
        except Exception as error:  # a process that cannot start...
            run = _Run(_student_cells(nb), [])
            run.status = f"could not be run ({type(error).__name__}: {error})"
    submission.status = run.status
    submission.cell_errors = [
        f"{run.cells[i].label}: {_inline(text)}" for i, text in sorted(run.cell_errors.items())
    ]
    for question in homework.questions:
        if question.kind == "proof":
            answer = "\n\n".join(
                c.source for c in nb.cells if is_answer_cell(c) and question_of(c) == question.id
            )
            submission.grades.append(QuestionGrade(question, "graded by hand", None, answer=answer))
        else:
            submission.grades.append(_question_result(question, nb, run, seed, limits.time_scale))
    submission.seconds = round(time.perf_counter() - start, 1)
    return submission


def _report(submission: Submission, seed: int) -> str:
    homework = submission.homework
    lines = [f"# {submission.student}: {homework.id if homework else 'unknown homework'}", ""]
    lines.append(f"- notebook: `{submission.path.name}`")
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
            answer = grade.answer.strip() or "_(no answer cell found)_"
            lines += ["", "Answer:", "", *(f"> {line}" for line in answer.split("\n"))]
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
        writer.writerow([*row, f"{s.auto_points:g}", s.status])
    return buffer.getvalue()


def readable_by_others(folder: Path) -> bool:
    """Whether users other than the owner can read or enter ``folder``."""
    return bool(folder.stat().st_mode & (stat.S_IROTH | stat.S_IXOTH))


def grade_submissions(
    folder: str | Path,
    out: str | Path,
    *,
    seed: int | None = None,
    limits: Limits | None = None,
) -> list[Submission]:
    """Grade every notebook under ``folder``; write scores.csv and reports to ``out``.

    ``seed`` seeds the hidden checks (a fresh random one when None; it is recorded);
    ``limits`` bounds what each submission may use (:class:`Limits`).  ``out`` is
    created readable by its owner only.
    """
    folder, out = Path(folder), Path(out)
    limits = limits or Limits()
    if not folder.is_dir():
        raise ValueError(f"{folder} is not a folder of submissions; give the folder's path")
    seed = secrets.randbelow(2**31) if seed is None else seed
    pairs = find_submissions(folder)
    if not pairs:
        raise ValueError(f"no .ipynb files under {folder}")
    warnings = []
    if os.geteuid() != 0:
        warnings.append(
            "not running as root: student code runs under your own user id, so file "
            "permissions do not keep it from your files (run the grader as root in a "
            "container or virtual machine; see the instructor page)"
        )
    elif readable_by_others(folder.resolve()):
        warnings.append(
            f"{folder} can be read by other users, so a submission could read the others: "
            f"`chmod 700 {folder}` before grading"
        )
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr)
    out.mkdir(parents=True, exist_ok=True, mode=0o700)
    submissions = []
    for student, path in tqdm(pairs, desc="grading", unit="notebook"):
        submission = grade_notebook(student, path, seed=seed, limits=limits)
        submissions.append(submission)
        name = f"{student}__{path.stem}.md"
        atomic_write_text(out / "reports" / name, _report(submission, seed))
    atomic_write_text(out / "scores.csv", _scores_csv(submissions))
    atomic_write_json(
        out / "grading.json",
        {
            "seed": seed,
            "limits": asdict(limits),
            "isolation": "own user id" if os.geteuid() == 0 else "same user id (not root)",
            "warnings": warnings,
            "submissions": [
                {
                    "student": s.student,
                    "notebook": str(s.path),
                    "status": s.status,
                    "points": s.auto_points,
                    "seconds": s.seconds,
                }
                for s in submissions
            ],
        },
    )
    return submissions
