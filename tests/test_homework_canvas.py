"""Canvas: a bulk-download folder graded by user id, and the gradebook CSV checked field by field.

The folder is what Canvas's *Download Submissions* gives for hw01: files named
``<name>_<user id>_<submission id>_<original name>``, one of them ``LATE``, one student who
submitted twice (the older file and the resubmission Canvas renamed ``...-1.ipynb``), and
a file that is not a notebook.  One grading run through the command line writes the
reports, ``scores.csv`` and the Canvas CSV; the round trip with the points given by hand
then runs ``homework canvas-csv`` on a filled-in copy of ``scores.csv``, without regrading.
"""

from __future__ import annotations

import csv
import io
import json
import os
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import nbformat
import pytest
from stablernn_grader.__main__ import main
from stablernn_grader.canvas import (
    CANVAS_COLUMNS,
    canvas_files,
    canvas_pairs,
    canvas_strays,
    parse_canvas_name,
    read_manual_sheet,
)
from stablernn_grader.submissions import find_submissions, report_names
from stablernn_tools.student_notebooks import student_notebook

from stablernn_lib.homework import get_homework
from stablernn_lib.homework.cells import is_solution_cell, question_of

ROOT = Path(__file__).resolve().parents[1]
HOMEWORK = get_homework("hw01")
HEADER = [*CANVAS_COLUMNS, "hw01: Recurrent models"]


def answered(questions: set[str]) -> str:
    """hw01's student edition with the instructor's solutions of ``questions`` (others stubs)."""
    instructor = nbformat.read(ROOT / HOMEWORK.notebook, as_version=4)
    solutions = {question_of(c): c.source for c in instructor.cells if is_solution_cell(c)}
    nb = student_notebook(instructor)
    for cell in nb.cells:
        if is_solution_cell(cell) and question_of(cell) in questions:
            cell.source = solutions[question_of(cell)]
    return nbformat.writes(nb)


ALL = {"hw01.q1", "hw01.q2", "hw01.q3"}
# file name -> the questions answered (hw01.q1 is worth 2 points, q2 and q3 3 each)
FILES = {
    "doejane_1001_5001_hw01_recurrent_models.ipynb": ALL,
    "roesmith_LATE_1002_5002_hw01_recurrent_models.ipynb": {"hw01.q1"},
    "leechris_1003_5003_hw01_recurrent_models.ipynb": set(),  # superseded
    "leechris_1003_5010_hw01_recurrent_models-1.ipynb": ALL,  # the resubmission
    "kimalex_1004_5004_Copy of hw01_recurrent_models.ipynb": {"hw01.q1", "hw01.q2"},
}


def rows(path: Path) -> list[list[str]]:
    return list(csv.reader(io.StringIO(path.read_text(encoding="utf-8"))))


@pytest.fixture(scope="module")
def graded(tmp_path_factory: pytest.TempPathFactory) -> dict:
    folder = tmp_path_factory.mktemp("canvas")
    out = tmp_path_factory.mktemp("canvas-grades") / "grades"
    for name, questions in FILES.items():
        (folder / name).write_text(answered(questions))
    (folder / "doejane_1001_5001_notes.pdf").write_bytes(b"%PDF-1.4 not a notebook")
    gradebook = out.parent / "gradebook.csv"
    capture = io.StringIO()
    with redirect_stdout(capture):
        code = main(
            [
                "grade",
                str(folder),
                "--out",
                str(out),
                "--seed",
                "3",
                "--homework",
                "hw01",
                "--canvas-csv",
                str(gradebook),
                "--jobs",
                "2",
            ]
        )
    assert code == 0, capture.getvalue()
    with open(out / "scores.csv") as handle:
        scores = {row["student"]: row for row in csv.DictReader(handle)}
    reports = {p.name.split("__")[0]: p.read_text() for p in (out / "reports").iterdir()}
    return {
        "folder": folder,
        "out": out,
        "gradebook": gradebook,
        "scores": scores,
        "reports": reports,
        "console": capture.getvalue(),
    }


def test_canvas_file_names_are_read_field_by_field(tmp_path: Path) -> None:
    late = parse_canvas_name(Path("roesmith_LATE_1002_5002_hw01_recurrent_models.ipynb"))
    assert late is not None
    assert (late.name, late.user_id, late.submission_id, late.late) == (
        "roesmith",
        "1002",
        5002,
        True,
    )
    assert (late.original, late.attempt) == ("hw01_recurrent_models.ipynb", 0)
    again = parse_canvas_name(Path("leechris_1003_5010_hw01_recurrent_models-1.ipynb"))
    assert again is not None and (again.original, again.attempt, again.late) == (
        "hw01_recurrent_models.ipynb",
        1,
        False,
    )
    assert parse_canvas_name(Path("alice.ipynb")) is None
    assert parse_canvas_name(Path("hw01_recurrent_models.ipynb")) is None
    (tmp_path / "alice").mkdir()  # a folder per student: not a Canvas download
    (tmp_path / "alice" / "hw01.ipynb").write_text("{}")
    assert canvas_files(tmp_path) is None and canvas_pairs(tmp_path) is None
    flat = tmp_path / "flat"
    flat.mkdir()
    (flat / "doejane_1001_5001_hw01.ipynb").write_text("{}")
    (flat / "bob.ipynb").write_text("{}")  # not named by Canvas: graded under its file name
    assert [f.user_id for f in canvas_files(flat) or []] == ["1001"]
    assert canvas_strays(flat) == [flat / "bob.ipynb"]
    assert canvas_pairs(flat) == [
        ("bob", flat / "bob.ipynb"),
        ("1001", flat / "doejane_1001_5001_hw01.ipynb"),
    ]
    (flat / "carol.ipynb").write_text("{}")  # most files not named by Canvas: not a download
    assert canvas_files(flat) is None and canvas_strays(flat) == []
    for odd in ("ann_7_8_.ipynb", "ann_7_8_hw\n01.ipynb", "ann_7_8_a.ipynb\n.ipynb"):
        parsed = parse_canvas_name(Path(odd))  # an empty stem, newlines: Canvas keeps them
        assert parsed is not None and parsed.user_id == "7", odd


def test_the_student_is_the_user_id_and_the_resubmission_is_graded(graded) -> None:
    scores = graded["scores"]
    assert sorted(scores) == ["1001", "1002", "1003", "1004"]
    expected = {"1001": 8.0, "1002": 2.0, "1003": 8.0, "1004": 5.0}
    assert {s: float(r["total"]) for s, r in scores.items()} == expected
    assert scores["1003"]["notebook"] == "leechris_1003_5010_hw01_recurrent_models-1.ipynb"
    assert all(r["homework"] == "hw01" for r in scores.values())


def test_the_report_keeps_the_name_and_the_late_mark(graded) -> None:
    reports = graded["reports"]
    assert "- Canvas: doejane, user id 1001, submission 5001; on time" in reports["1001"]
    assert "- Canvas: roesmith, user id 1002, submission 5002; **LATE**" in reports["1002"]
    assert "submission 5010, upload 2 of that file; on time" in reports["1003"]
    console = graded["console"]
    assert "LATE (Canvas): 1002 roesmith" in console
    assert "not graded, submitted again later: leechris_1003_5003_" in console
    assert "wrote the Canvas gradebook" in console and "autograded points only" in console


def test_the_canvas_gradebook_field_by_field(graded) -> None:
    table = rows(graded["gradebook"])
    assert table[0] == HEADER
    assert table[1] == ["    Points Possible", "", "", "", "", "8"]
    assert sorted(table[2:]) == [
        ["doejane", "1001", "", "", "", "8"],
        ["kimalex", "1004", "", "", "", "5"],
        ["leechris", "1003", "", "", "", "8"],
        ["roesmith", "1002", "", "", "", "2"],
    ]


def fill_sheet(scores: Path, sheet: Path, points: dict[str, str]) -> None:
    """A copy of scores.csv with the proof column filled in, as a TA would."""
    with open(scores) as handle:
        table = list(csv.DictReader(handle))
    for row in table:
        row["hw01.q4"] = points[row["student"]]
    with open(sheet, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(table[0]))
        writer.writeheader()
        writer.writerows(table)


def test_the_round_trip_with_the_points_given_by_hand(graded, tmp_path: Path) -> None:
    sheet, gradebook = tmp_path / "sheet.csv", tmp_path / "all.csv"
    fill_sheet(
        graded["out"] / "scores.csv", sheet, {"1001": "3", "1002": "1.5", "1003": "0", "1004": "2"}
    )
    command = ["canvas-csv", str(graded["folder"]), "--scores"]
    command += [str(graded["out"] / "scores.csv"), "--homework", "hw01"]
    command += ["--canvas-csv", str(gradebook), "--include-manual", str(sheet)]
    command += ["--canvas-assignment", "Homework 1 (4711)"]
    assert main(command) == 0
    table = rows(gradebook)
    assert table[0] == [*CANVAS_COLUMNS, "Homework 1 (4711)"]
    assert table[1] == ["    Points Possible", "", "", "", "", "11"]
    assert sorted(table[2:]) == [
        ["doejane", "1001", "", "", "", "11"],
        ["kimalex", "1004", "", "", "", "7"],
        ["leechris", "1003", "", "", "", "8"],
        ["roesmith", "1002", "", "", "", "3.5"],
    ]


def test_a_sheet_without_points_or_with_too_many_is_refused(graded, tmp_path: Path) -> None:
    sheet = tmp_path / "sheet.csv"
    fill_sheet(
        graded["out"] / "scores.csv", sheet, {"1001": "3", "1002": "", "1003": "0", "1004": "2"}
    )
    with pytest.raises(ValueError, match="no points for hw01.q4 of student 1002"):
        read_manual_sheet(sheet, HOMEWORK)
    fill_sheet(
        graded["out"] / "scores.csv", sheet, {"1001": "4", "1002": "1", "1003": "0", "1004": "2"}
    )
    with pytest.raises(
        ValueError, match="hw01.q4 of student 1001 has 4 points; it is worth 0 to 3"
    ):
        read_manual_sheet(sheet, HOMEWORK)


def test_canvas_options_are_checked_before_grading(tmp_path: Path, capsys) -> None:
    (tmp_path / "alice.ipynb").write_text(answered(set()))
    out = tmp_path / "grades"
    command = ["grade", str(tmp_path), "--out", str(out), "--homework", "hw01"]
    assert main([*command, "--canvas-csv", str(tmp_path / "g.csv")]) == 1
    assert "is not a Canvas bulk download" in capsys.readouterr().err
    assert main([*command, "--include-manual", str(tmp_path / "s.csv")]) == 1
    assert "--include-manual needs --canvas-csv" in capsys.readouterr().err
    assert not out.exists()  # refused before grading anyone


# Names that broke the report files: 250 bytes, differing only after byte 200, bytes that
# are not UTF-8; in a folder of student files and in a Canvas download (with a file not
# named by Canvas among them).  One file, of the Canvas download, is a notebook (graded:
# q1, 2 points); the others are read, refused and reported, with no process.
LONG = "hw01_" + "a" * 239 + ".ipynb"  # 250 bytes
TWINS = ["hw01_" + "b" * 200 + end + "c" * 38 + ".ipynb" for end in "xy"]
NOT_UTF8 = os.fsdecode(b"hw01_\xff\xfe.ipynb")
CANVAS_LONG = "ann_101_9001_" + "a" * 231 + ".ipynb"  # 250 bytes
CANVAS_OTHERS = {
    "bob_102_9002_" + "b" * 200 + "x" + "c" * 29 + ".ipynb": "102",
    "bob_103_9003_" + "b" * 200 + "y" + "c" * 29 + ".ipynb": "103",
    os.fsdecode(b"caf\xe9_104_9004_hw01.ipynb"): "104",
}
STRAY = "notes.ipynb"


def grade_folder(folder: Path, out: Path, *options: str) -> tuple[int, str, str]:
    stdout, stderr = io.StringIO(), io.StringIO()
    command = ["grade", str(folder), "--out", str(out), "--seed", "3"]
    with redirect_stdout(stdout), redirect_stderr(stderr):
        code = main([*command, "--homework", "hw01", *options])
    return code, stdout.getvalue(), stderr.getvalue()


@pytest.fixture(scope="module")
def odd_names(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Both folders graded; in the plain one, one report's path is taken by a folder."""
    plain = tmp_path_factory.mktemp("names")
    for name in (LONG, *TWINS, NOT_UTF8):
        (plain / name).write_text("not a notebook")
    out = tmp_path_factory.mktemp("names-grades")
    pairs = find_submissions(plain)
    blocked = report_names(pairs)[[p.name for _, p in pairs].index(TWINS[0])]
    (out / "reports" / blocked).mkdir(parents=True)  # the report cannot be written there
    canvas = tmp_path_factory.mktemp("canvas-names")
    (canvas / CANVAS_LONG).write_text(answered({"hw01.q1"}))
    (canvas / "ann_101_8000_older.ipynb").write_text("an older submission: not graded")
    for name in (*CANVAS_OTHERS, STRAY):
        (canvas / name).write_text("not a notebook")
    canvas_out = tmp_path_factory.mktemp("canvas-names-grades")
    return {
        "plain": grade_folder(plain, out),
        "plain_out": out,
        "blocked": blocked,
        "canvas": grade_folder(canvas, canvas_out),
        "canvas_folder": canvas,
        "canvas_out": canvas_out,
    }


def _written(out: Path) -> tuple[list[dict], dict]:
    with open(out / "scores.csv", encoding="utf-8") as handle:
        scores = list(csv.DictReader(handle))
    return scores, json.loads((out / "grading.json").read_text())


def test_long_and_undecodable_names_get_bounded_distinct_reports(odd_names) -> None:
    """Every submission has its row, and a report whose name is at most 118 bytes and
    unlike the others' (names differing only after byte 200 included); the one report
    that could not be written is that submission's error, in its row."""
    for layout in ("plain", "canvas"):
        code, console, errors = odd_names[layout]
        assert code == 0, console + errors
        scores, record = _written(odd_names[f"{layout}_out"])
        assert len(scores) == (4 if layout == "plain" else 5), scores
        reports = [s["report"] for s in record["submissions"] if s["report"]]
        on_disk = sorted(p.name for p in (odd_names[f"{layout}_out"] / "reports").iterdir())
        assert sorted(reports) == [r for r in on_disk if r != odd_names["blocked"]]
        assert len(set(reports)) == len(reports)
        assert all(len(os.fsencode(r)) <= 118 for r in on_disk), on_disk
    scores, _ = _written(odd_names["canvas_out"])
    graded = [s for s in scores if s["total"] == "2"]
    assert len(graded) == 1 and graded[0]["status"] == "graded", scores
    assert graded[0]["notebook"] == CANVAS_LONG
    scores, record = _written(odd_names["plain_out"])
    blocked = [s for s in record["submissions"] if s["report"] is None]
    assert len(blocked) == 1 and blocked[0]["notebook"].endswith(TWINS[0]), blocked
    row = next(s for s in scores if s["notebook"] == TWINS[0])
    assert "its report could not be written" in row["status"], row


def test_a_file_not_named_by_canvas_is_graded_under_its_name(odd_names) -> None:
    """The Canvas download with one file Canvas did not name: the others are graded by
    user id (the older submission of 101 is not), that one under its file name, and the
    warning names it."""
    scores, record = _written(odd_names["canvas_out"])
    students = sorted(s["student"] for s in scores)
    assert students == ["101", "102", "103", "104", "notes"], students
    assert not any(s["notebook"].startswith("ann_101_8000") for s in scores)
    assert any(STRAY in w and "graded under their file names" in w for w in record["warnings"])
    console = odd_names["canvas"][1]
    assert f"not named as Canvas names its files, graded under its file name: {STRAY}" in console


def test_a_canvas_gradebook_names_the_file_that_stops_it(odd_names, tmp_path: Path) -> None:
    """``--canvas-csv`` refuses the download with a file Canvas did not name, before
    grading, naming it and the remedy; without it the gradebook is written, every name
    on one line of valid UTF-8."""
    folder = odd_names["canvas_folder"]
    gradebook = tmp_path / "gradebook.csv"
    code, console, errors = grade_folder(
        folder, tmp_path / "grades", "--canvas-csv", str(gradebook)
    )
    assert code == 1 and f"'{STRAY}'" in errors and "Rename each so" in errors, errors
    assert not (tmp_path / "grades").exists() and not gradebook.exists()
    (folder / STRAY).rename(tmp_path / STRAY)  # moved out, as the message says
    command = ["canvas-csv", str(folder), "--homework", "hw01"]
    command += ["--scores", str(odd_names["canvas_out"] / "scores.csv")]
    assert main([*command, "--canvas-csv", str(gradebook)]) == 0
    table = rows(gradebook)
    assert sorted(r[1] for r in table[2:]) == ["101", "102", "103", "104"]
    assert [r[5] for r in table[2:] if r[1] == "101"] == ["2"]
    assert all(len(r) == 6 for r in table)
