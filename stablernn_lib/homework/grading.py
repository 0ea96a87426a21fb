"""Grading a folder of submitted homework notebooks.

Each submission runs in a clean kernel (nbclient): the student's cells (without the
Colab setup and check cells) under one time budget, then one grading cell per code
question that looks the student's function up and runs the visible and hidden checks
(:func:`grade_in_kernel`), each under its own time limit.  Results come back through
JSON files in a private temporary folder.  Whatever happens to one submission
(unreadable file, exception, endless loop, dead kernel) is recorded and grading goes on.

Writes ``scores.csv`` (one row per submission, one column per question), one Markdown
report per submission, and ``grading.json`` (seed, options, statuses).
"""

from __future__ import annotations

import csv
import io
import json
import re
import secrets
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import DeadKernelError
from tqdm.auto import tqdm

from stablernn_lib.homework.notebooks import (
    is_answer_cell,
    is_check_cell,
    question_of,
    tags,
)
from stablernn_lib.homework.registry import Homework, Question, get_homework, get_question
from stablernn_lib.homework.runner import rubric_markdown, run_question
from stablernn_lib.io import atomic_write_json, atomic_write_text

SKIPPED_TAGS = frozenset({"colab-setup"})
_HOMEWORK_IN_NAME = re.compile(r"hw\d\d")


def grade_in_kernel(
    question_id: str,
    namespace: dict[str, Any],
    *,
    seed: int,
    out: str,
    cell_source: str = "",
    time_scale: float = 1.0,
) -> None:
    """Run inside the student's kernel: grade one question, write the result to ``out``."""
    import inspect

    question = get_question(question_id)
    answer = namespace.get(question.function or "")
    if answer is None:
        result: dict[str, Any] = {"question_id": question_id, "missing": True}
    else:
        try:
            source = inspect.getsource(answer) + "\n" + cell_source
        except (OSError, TypeError):
            source = cell_source
        outcome = run_question(
            question, answer, hidden=True, seed=seed, source=source, time_scale=time_scale
        )
        result = outcome.to_dict()
    atomic_write_json(out, result)


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


def _grading_notebook(
    nb: nbformat.NotebookNode, homework: Homework, seed: int, results: Path, time_scale: float
) -> tuple[nbformat.NotebookNode, list[str]]:
    """The cells to run and a label for each: the student's code cells (labelled by their
    place in the submitted notebook), then one grading cell per code question."""
    cells, labels = [], []
    for number, cell in enumerate(nb.cells, start=1):
        if (
            cell.cell_type == "code"
            and not is_check_cell(cell)
            and not SKIPPED_TAGS & set(tags(cell))
        ):
            first_line = (cell.source.strip().split("\n") or [""])[0][:60]
            cells.append(nbformat.v4.new_code_cell(cell.source))
            labels.append(f"cell {number} (`{first_line}`)")
    for question in homework.questions:
        if question.kind != "code":
            continue
        cell_source = "\n".join(
            c.source
            for c in nb.cells
            if c.cell_type == "code" and not is_check_cell(c) and question_of(c) == question.id
        )
        cells.append(
            nbformat.v4.new_code_cell(
                "from stablernn_lib.homework.grading import grade_in_kernel\n"
                f"grade_in_kernel({question.id!r}, globals(), seed={seed}, "
                f"out={str(results / (question.id + '.json'))!r}, "
                f"cell_source={cell_source!r}, time_scale={time_scale})"
            )
        )
        labels.append(f"the grading of {question.id}")
    graded = nbformat.v4.new_notebook(cells=cells)
    graded.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3"}
    return graded, labels


def _errors(cell: nbformat.NotebookNode, label: str) -> list[str]:
    """The errors a cell raised; an interrupt is the grader stopping it at its time limit."""
    found = []
    for output in cell.get("outputs", []):
        if output.get("output_type") != "error":
            continue
        name, value = output.get("ename"), str(output.get("evalue"))[:300]
        if name == "KeyboardInterrupt":
            value = "stopped by the grader at the time limit"
        found.append(f"{label}: {name}: {value}")
    return found


def _execute(
    graded: nbformat.NotebookNode,
    labels: list[str],
    *,
    timeout: float,
    check_budget: float,
    workdir: Path,
) -> tuple[str, list[str]]:
    """Run the cells; returns the notebook status and the errors raised.

    The student's cells share ``timeout`` seconds; each grading cell has ``check_budget``.
    """
    client = NotebookClient(
        graded,
        kernel_name="python3",
        allow_errors=True,
        interrupt_on_timeout=True,
        error_on_timeout={"ename": "Timeout", "evalue": "the cell ran past its time limit"},
        resources={"metadata": {"path": str(workdir)}},
    )
    status, errors = "graded", []
    deadline = time.monotonic() + timeout
    with client.setup_kernel():
        for index, (cell, label) in enumerate(zip(graded.cells, labels, strict=True)):
            if not label.startswith("the grading"):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    status = f"ran past its {timeout:g} s limit; later cells were not run"
                    continue
                client.timeout = max(1, int(remaining))
            else:
                client.timeout = int(check_budget)
            try:
                client.execute_cell(cell, index)
            except DeadKernelError:
                return f"the kernel died in {label}", errors
            errors += _errors(cell, label)
    return status, errors


def grade_notebook(
    student: str,
    path: Path,
    *,
    seed: int,
    timeout: float = 300.0,
    time_scale: float = 1.0,
) -> Submission:
    """Grade one submitted notebook; never raises for a bad submission."""
    start = time.perf_counter()
    read_error = ""
    try:
        nb = nbformat.read(path, as_version=4)
    except Exception as error:  # any unreadable file is a grade, not a crash
        nb = None
        read_error = f"unreadable notebook ({type(error).__name__}: {error})"
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
    with tempfile.TemporaryDirectory(prefix="grading-") as tmp:
        results = Path(tmp) / secrets.token_hex(8)
        results.mkdir()
        graded, labels = _grading_notebook(nb, homework, seed, results, time_scale)
        budget = 60 + 1.5 * time_scale * max(
            sum(c.time_limit for c in q.all_checks) for q in homework.questions
        )
        try:
            submission.status, submission.cell_errors = _execute(
                graded, labels, timeout=timeout, check_budget=budget, workdir=Path(tmp)
            )
        except Exception as error:  # a kernel that cannot start, a broken notebook...
            submission.status = f"could not be run ({type(error).__name__}: {error})"
        for question in homework.questions:
            submission.grades.append(_question_grade(question, nb, results))
    submission.seconds = round(time.perf_counter() - start, 1)
    return submission


def _question_grade(question: Question, nb: nbformat.NotebookNode, results: Path) -> QuestionGrade:
    if question.kind == "proof":
        answer = "\n\n".join(
            c.source for c in nb.cells if is_answer_cell(c) and question_of(c) == question.id
        )
        return QuestionGrade(question, "graded by hand", None, answer=answer)
    result_file = results / f"{question.id}.json"
    if not result_file.exists():
        return QuestionGrade(question, "timed out or not run", 0.0)
    result = json.loads(result_file.read_text())
    if result.get("missing"):
        return QuestionGrade(question, f"missing: no function {question.function}()", 0.0)
    return QuestionGrade(question, result["status"], result["points"], result["outcomes"])


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


def grade_submissions(
    folder: str | Path,
    out: str | Path,
    *,
    seed: int | None = None,
    timeout: float = 300.0,
    time_scale: float = 1.0,
) -> list[Submission]:
    """Grade every notebook under ``folder``; write scores.csv and reports to ``out``.

    ``seed`` seeds the hidden checks (a fresh random one when None; it is recorded);
    ``timeout`` limits the run time of each notebook's own cells (seconds);
    ``time_scale`` multiplies every check's time limit (slow grading machines).
    """
    folder, out = Path(folder), Path(out)
    if not folder.is_dir():
        raise ValueError(f"{folder} is not a folder of submissions; give the folder's path")
    if timeout <= 0 or time_scale <= 0:
        raise ValueError("--timeout and --time-scale must be positive")
    seed = secrets.randbelow(2**31) if seed is None else seed
    pairs = find_submissions(folder)
    if not pairs:
        raise ValueError(f"no .ipynb files under {folder}")
    submissions = []
    for student, path in tqdm(pairs, desc="grading", unit="notebook"):
        submission = grade_notebook(
            student, path, seed=seed, timeout=timeout, time_scale=time_scale
        )
        submissions.append(submission)
        name = f"{student}__{path.stem}.md"
        atomic_write_text(out / "reports" / name, _report(submission, seed))
    atomic_write_text(out / "scores.csv", _scores_csv(submissions))
    atomic_write_json(
        out / "grading.json",
        {
            "seed": seed,
            "timeout": timeout,
            "time_scale": time_scale,
            "submissions": [
                {
                    "student": s.student,
                    "notebook": str(s.path),
                    "status": s.status,
                    "points": s.auto_points,
                }
                for s in submissions
            ],
        },
    )
    return submissions
