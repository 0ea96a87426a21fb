"""``python -m stablernn_grader COMMAND``: the instructor's commands.

``grade`` (a folder, or a Canvas download with ``--canvas-csv``), ``canvas-csv``,
``gradescope`` (an autograder zip), ``questions`` (the table of questions).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from stablernn_lib.homework.registry import homeworks


def homework_summary_markdown() -> str:
    """The instructor page's first table: each homework's time, points and how they are graded."""
    lines = [
        "| homework | chapter | student time | autograded | graded by hand (rubric) | total |",
        "|---|---|---|---|---|---|",
    ]
    for homework in homeworks():
        auto = sum(q.points for q in homework.questions if q.kind == "code")
        proofs = [q for q in homework.questions if q.kind == "proof"]
        by_hand = " + ".join(f"{q.points:g} ({q.id})" for q in proofs) or "none"
        lines.append(
            f"| {homework.id} | {homework.title} | {homework.minutes} min | {auto:g} points "
            f"| {by_hand} | {homework.points:g} |"
        )
    return "\n".join(lines) + "\n"


def questions_markdown() -> str:
    """The instructor page's table: every homework, its time, its questions and what they test."""
    lines = [
        "| homework | question | points | graded | what it tests |",
        "|---|---|---|---|---|",
    ]
    for homework in homeworks():
        for question in homework.questions:
            graded = "auto" if question.kind == "code" else "by hand (rubric)"
            name = f" `{question.function}`:" if question.function else ""
            lines.append(
                f"| {homework.id} ({homework.minutes} min) | {question.id}{name} "
                f"{question.title} | {question.points:g} | {graded} | {question.tests} |"
            )
    return "\n".join(lines) + "\n"


def _check_canvas_options(args: argparse.Namespace) -> None:
    """Refuse a Canvas gradebook that cannot be written before grading, not after."""
    from stablernn_grader.canvas import canvas_files, canvas_strays, read_manual_sheet
    from stablernn_grader.submissions import one_line
    from stablernn_lib.homework.registry import get_homework

    if args.canvas_csv is None:
        raise ValueError("--include-manual needs --canvas-csv FILE (the gradebook it fills)")
    if args.homework is None:
        raise ValueError("--canvas-csv needs --homework hwNN: the assignment of its column")
    if canvas_files(args.submissions) is None:
        raise ValueError(
            f"{args.submissions} is not a Canvas bulk download (a folder of files named "
            "<name>_<user id>_<submission id>_<file>.ipynb): --canvas-csv needs one"
        )
    strays = canvas_strays(args.submissions)
    if strays:
        listed = ", ".join(repr(one_line(p.name)) for p in strays[:5])
        raise ValueError(
            f"{len(strays)} notebooks in {args.submissions} are not named as Canvas names "
            f"its downloads (<name>_<user id>_<submission id>_<file>.ipynb): {listed}. "
            "Rename each so (with the student's Canvas user id), or move it out of the "
            "folder and grade it apart, then run again: --canvas-csv needs every notebook "
            "matched to a Canvas user"
        )
    if args.include_manual is not None:
        read_manual_sheet(args.include_manual, get_homework(args.homework))


def _write_canvas_csv(args: argparse.Namespace, scores: Path) -> None:
    from stablernn_grader.canvas import write_gradebook

    rows = write_gradebook(
        args.submissions,
        scores,
        args.canvas_csv,
        args.homework,
        column=args.canvas_assignment,
        manual_sheet=args.include_manual,
    )
    kind = "all points" if args.include_manual else "autograded points only"
    print(f"wrote the Canvas gradebook {args.canvas_csv} ({rows} students, {kind})")


def _canvas_csv(args: argparse.Namespace) -> int:
    _check_canvas_options(args)
    _write_canvas_csv(args, args.scores)
    return 0


def _grade(args: argparse.Namespace) -> int:
    from stablernn_grader.grading import Limits, grade_submissions, one_line

    if args.canvas_csv is not None or args.include_manual is not None:
        _check_canvas_options(args)
    limits = Limits(
        notebook_s=args.timeout,
        time_scale=args.time_scale,
        memory_mb=args.memory_mb,
        processes=args.processes,
    )
    submissions = grade_submissions(
        args.submissions,
        args.out,
        seed=args.seed,
        limits=limits,
        homework=args.homework,
        jobs=args.jobs,
    )
    for s in submissions:
        student, name, status = one_line(s.student), one_line(s.path.name), one_line(s.status)
        print(f"{student:20s} {name:40s} {s.auto_points:6g}  {status}")  # no control characters
    print(f"wrote {Path(args.out) / 'scores.csv'} and {len(submissions)} reports")
    from stablernn_grader.canvas import console_notes

    for note in console_notes(args.submissions):  # a Canvas download's late and odd files
        print(note)
    if args.canvas_csv is not None:
        _write_canvas_csv(args, Path(args.out) / "scores.csv")
    return 0


def _gradescope(args: argparse.Namespace) -> int:
    from stablernn_grader.gradescope import build_autograder, uncommitted_library_changes

    out = build_autograder(
        args.homework, args.out, repository=args.repository_url, commit=args.commit
    )
    changed = [] if args.commit else uncommitted_library_changes()
    if changed:
        print(
            f"WARNING: {len(changed)} files of stablernn_lib or grader/ differ from the commit "
            f"the zip installs (e.g. {changed[0]}): Gradescope grades with the committed library"
        )
    print(f"wrote {out}: upload it in Gradescope's Configure Autograder (instructor.md)")
    return 0


def _questions(args: argparse.Namespace) -> int:
    print(homework_summary_markdown())
    print(questions_markdown(), end="")
    return 0


def _canvas_arguments(parser: argparse.ArgumentParser, required: bool = False) -> None:
    parser.add_argument(
        "--canvas-csv",
        type=Path,
        required=required,
        metavar="FILE",
        help="write a gradebook CSV for Canvas's Gradebook > Import (a Canvas download only)",
    )
    parser.add_argument(
        "--canvas-assignment",
        metavar="HEADER",
        help="its column's header: your assignment's, as in Canvas's export, e.g. 'HW 4 (1234)'",
    )
    parser.add_argument(
        "--include-manual",
        type=Path,
        metavar="SHEET",
        help="add the points given by hand: scores.csv with its proof columns filled in",
    )


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``grade``, ``canvas-csv``, ``gradescope`` and ``questions`` to ``subparsers``."""
    commands = subparsers
    grade = commands.add_parser("grade", help="grade a folder of submitted notebooks")
    grade.add_argument("submissions", type=Path, help="folder of STUDENT/*.ipynb or STUDENT.ipynb")
    grade.add_argument("--out", type=Path, required=True, help="folder for scores.csv and reports")
    grade.add_argument(
        "--timeout", type=float, default=300.0, help="seconds for each notebook's own cells"
    )
    grade.add_argument("--seed", type=int, help="seed of the hidden checks (default: random)")
    grade.add_argument(
        "--time-scale", type=float, default=1.0, help="multiply every check's time limit"
    )
    grade.add_argument(
        "--memory-mb",
        type=int,
        default=4096,
        help="address space a submission's process may map beyond its start (torch, harness)",
    )
    grade.add_argument(
        "--processes", type=int, default=64, help="processes and threads a submission may run"
    )
    grade.add_argument(
        "--homework", help="the assignment, e.g. hw04 (a notebook saying otherwise is flagged)"
    )
    grade.add_argument(
        "--jobs", type=int, default=1, help="submissions graded at a time, each in its own sandbox"
    )
    _canvas_arguments(grade)
    grade.set_defaults(func=_grade)

    canvas = commands.add_parser(
        "canvas-csv", help="the Canvas gradebook CSV of a graded Canvas download (no regrading)"
    )
    canvas.add_argument("submissions", type=Path, help="the Canvas bulk-download folder")
    canvas.add_argument(
        "--scores", type=Path, required=True, help="the scores.csv that grading it wrote"
    )
    canvas.add_argument("--homework", required=True, help="the assignment, e.g. hw04")
    _canvas_arguments(canvas, required=True)
    canvas.set_defaults(func=_canvas_csv)

    gradescope = commands.add_parser(
        "gradescope", help="build a Gradescope autograder zip that grades one homework"
    )
    gradescope.add_argument("homework", help="the homework, e.g. hw04")
    gradescope.add_argument("--out", type=Path, required=True, help="the zip to write")
    gradescope.add_argument(
        "--repository-url", help="where setup.sh installs the library from (default: _config.yml)"
    )
    gradescope.add_argument(
        "--commit", help="the commit it installs (default: the checked-out one; push it first)"
    )
    gradescope.set_defaults(func=_gradescope)

    table = commands.add_parser("questions", help="print the table of questions (Markdown)")
    table.set_defaults(func=_questions)
