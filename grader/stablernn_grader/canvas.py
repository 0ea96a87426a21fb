"""Canvas: grading its bulk download of submissions, and a gradebook file it imports.

Canvas's *Download Submissions* gives one folder of files named
``<student name>_<user id>_<submission id>_<original name>`` (``<name>_LATE_<user id>_...``
for a late submission; a file uploaded again under the same name becomes
``<original stem>-1.ipynb``).  In a flat folder where at least half of the notebooks
are named so (:func:`canvas_download`), the student of each is the Canvas user id, the
name is kept for the report, and of several files of one student the newest submission
is graded (:func:`canvas_pairs`); a notebook not named so (:func:`canvas_strays`) is
graded under its file name and named in the warnings, and a gradebook for Canvas is
refused until it is renamed or moved out.

:func:`gradebook_csv` turns the grader's ``scores.csv`` into the CSV that Canvas's
*Gradebook → Import* reads: the columns ``Student, ID, SIS User ID, SIS Login ID,
Section`` and one column for the homework, with a ``Points Possible`` row.  It holds the
autograded points, or all points when a sheet of the points given by hand is passed
(:func:`read_manual_sheet`: ``scores.csv`` with its proof columns filled in).
"""

from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass
from pathlib import Path

from stablernn_grader.submissions import one_line
from stablernn_lib.core.io import atomic_write_text
from stablernn_lib.homework.registry import Homework, get_homework

CANVAS_COLUMNS = ("Student", "ID", "SIS User ID", "SIS Login ID", "Section")
POINTS_POSSIBLE = "    Points Possible"  # the second row of Canvas's own export
_NAME = re.compile(
    r"(?P<name>[^_]+)_(?P<late>LATE_)?(?P<user>\d+)_(?P<submission>\d+)_(?P<original>.*)\.ipynb",
    re.DOTALL,  # the student's own upload name may hold any character, a newline too
)
_AGAIN = re.compile(r"(?P<stem>.+)-(?P<attempt>\d+)", re.DOTALL)
_FORMULA = ("=", "+", "-", "@", "\t", "\r")


@dataclass(frozen=True)
class CanvasFile:
    """One file of a Canvas bulk download, as its name describes it."""

    path: Path
    name: str
    user_id: str
    submission_id: int
    original: str  # the file name the student uploaded (Canvas's ``-N`` removed)
    attempt: int  # the N of a ``-N`` Canvas added to a file uploaded again; 0 otherwise
    late: bool

    @property
    def newness(self) -> tuple[int, int]:
        return (self.submission_id, self.attempt)


def parse_canvas_name(path: Path) -> CanvasFile | None:
    """The Canvas fields of ``path``'s file name; None when it is not named as Canvas names."""
    match = _NAME.fullmatch(path.name)
    if match is None:
        return None
    stem, attempt = match["original"], 0
    if again := _AGAIN.fullmatch(stem):
        stem, attempt = again["stem"], int(again["attempt"])
    return CanvasFile(
        path=path,
        name=match["name"],
        user_id=match["user"],
        submission_id=int(match["submission"]),
        original=f"{stem}.ipynb",
        attempt=attempt,
        late=match["late"] is not None,
    )


@dataclass(frozen=True)
class CanvasDownload:
    """A Canvas bulk download: its Canvas-named notebooks, and those not named so."""

    files: list[CanvasFile]
    strays: list[Path]


def canvas_download(folder: Path) -> CanvasDownload | None:
    """The notebooks of a Canvas bulk download in ``folder``; None if it is not one.

    A Canvas download is flat (notebooks only at its top) and at least half of its
    notebooks, one at least, are named ``<name>_<user id>_<submission id>_<original
    name>``; links are left to the reader, which refuses them.
    """
    if not folder.is_dir():
        return None
    notebooks = sorted(p for p in folder.iterdir() if p.name.endswith(".ipynb"))
    nested = any(
        p.is_dir() and not p.is_symlink() and p.name != ".ipynb_checkpoints"
        for p in folder.iterdir()
    )
    parsed = [parse_canvas_name(p) for p in notebooks]
    files = [p for p in parsed if p is not None]
    if nested or not files or 2 * len(files) < len(notebooks):
        return None
    strays = [path for path, file in zip(notebooks, parsed, strict=True) if file is None]
    return CanvasDownload(files, strays)


def canvas_files(folder: Path) -> list[CanvasFile] | None:
    """The Canvas-named notebooks of a Canvas bulk download; None if it is not one."""
    download = canvas_download(folder)
    return download.files if download is not None else None


def canvas_strays(folder: Path) -> list[Path]:
    """The notebooks of a Canvas download not named as Canvas names them (none elsewhere)."""
    download = canvas_download(folder)
    return download.strays if download is not None else []


def newest(files: list[CanvasFile]) -> tuple[dict[str, CanvasFile], list[CanvasFile]]:
    """The newest file of each user id, and the older ones (superseded)."""
    kept: dict[str, CanvasFile] = {}
    for file in sorted(files, key=lambda f: f.newness):
        kept[file.user_id] = file
    superseded = [f for f in files if kept[f.user_id] is not f]
    return kept, superseded


def canvas_pairs(folder: Path) -> list[tuple[str, Path]] | None:
    """``(student, notebook)`` to grade in a Canvas download, the student a user id (or,
    for a notebook not named as Canvas names them, its file name); None if ``folder`` is
    not one."""
    download = canvas_download(folder)
    if download is None:
        return None
    kept, _ = newest(download.files)
    pairs = [(user, file.path) for user, file in kept.items()]
    pairs += [(path.stem, path) for path in download.strays]
    return sorted(pairs, key=lambda p: str(p[1]))


def superseded(folder: Path) -> list[CanvasFile]:
    """Files of a Canvas download left ungraded because the student submitted again."""
    files = canvas_files(folder)
    return newest(files)[1] if files else []


def report_lines(student: str, path: Path) -> list[str]:
    """The report's Canvas lines: name, ids, late mark (none outside a Canvas download)."""
    file = parse_canvas_name(path)
    if file is None or file.user_id != student:
        return []
    late = "**LATE** (Canvas marked it late)" if file.late else "on time"
    again = f", upload {file.attempt + 1} of that file" if file.attempt else ""
    return [
        f"- Canvas: {_plain(file.name)}, user id {file.user_id}, submission "
        f"{file.submission_id}{again}; {late}",
    ]


def _plain(text: str) -> str:
    return re.sub(r"[^\w .-]", "", text)[:80]


def _cell(value: str) -> str:
    """A CSV field on one line that no spreadsheet runs as a formula."""
    value = one_line(value)
    return "'" + value if value.startswith(_FORMULA) else value


def read_scores(path: Path) -> list[dict[str, str]]:
    """The rows of a grader's ``scores.csv`` (or of a sheet made from it)."""
    with open(path, newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    if not rows or "student" not in rows[0]:
        raise ValueError(f"{path} is not a grader's scores.csv (no 'student' column)")
    return rows


def read_manual_sheet(path: Path, homework: Homework) -> dict[str, float]:
    """The points given by hand to each student: the proof columns of a filled-in scores.csv.

    Every proof question of ``homework`` needs a number from 0 to its points in every
    row; ValueError names the first cell that has none.
    """
    proofs = [q for q in homework.questions if q.kind == "proof"]
    totals: dict[str, float] = {}
    for row in read_scores(path):
        student = row["student"].removeprefix("'")
        total = 0.0
        for question in proofs:
            value = (row.get(question.id) or "").strip()
            try:
                points = float(value)
            except ValueError:
                raise ValueError(
                    f"{path}: no points for {question.id} of student {student} (found "
                    f"{value[:20]!r}); write the points given by hand, 0 to {question.points:g}"
                ) from None
            if not 0 <= points <= question.points:
                raise ValueError(
                    f"{path}: {question.id} of student {student} has {points:g} points; "
                    f"it is worth 0 to {question.points:g}"
                )
            total += points
        totals[student] = total
    return totals


def gradebook_csv(
    scores: list[dict[str, str]],
    homework: Homework,
    folder: Path,
    *,
    column: str | None = None,
    manual: dict[str, float] | None = None,
) -> str:
    """The Canvas gradebook CSV of the ``scores`` rows graded from the Canvas ``folder``.

    ``column``: the header of the homework's column; give the one of your Canvas
    assignment (``Name (id)`` as in Canvas's export) so that the import fills it;
    ``manual``: points given by hand per user id (:func:`read_manual_sheet`), added to
    the autograded points; without it the column holds the autograded points only.
    """
    files = canvas_files(folder)
    if files is None:
        raise ValueError(
            f"{folder} is not a Canvas bulk download (files named "
            "<name>_<user id>_<submission id>_<file>.ipynb): no gradebook for Canvas"
        )
    kept, _ = newest(files)
    auto = sum(q.points for q in homework.questions if q.kind == "code")
    possible = homework.points if manual is not None else auto
    header = column or f"{homework.id}: {homework.title}"
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow([*CANVAS_COLUMNS, _cell(header)])
    writer.writerow([POINTS_POSSIBLE, "", "", "", "", f"{possible:g}"])
    for row in scores:
        user = row["student"]
        if user not in kept or row.get("homework") not in (homework.id, ""):
            continue
        points = float(row["total"] or 0)
        if manual is not None:
            if user not in manual:
                raise ValueError(f"the sheet of points given by hand has no row for {user}")
            points += manual[user]
        writer.writerow([_cell(kept[user].name), user, "", "", "", f"{round(points, 2):g}"])
    return buffer.getvalue()


def write_gradebook(
    submissions: Path,
    scores: Path,
    out: Path,
    homework_id: str,
    *,
    column: str | None = None,
    manual_sheet: Path | None = None,
) -> int:
    """Write the Canvas gradebook CSV of a graded Canvas download; returns its student rows."""
    homework = get_homework(homework_id)
    manual = read_manual_sheet(manual_sheet, homework) if manual_sheet else None
    text = gradebook_csv(read_scores(scores), homework, submissions, column=column, manual=manual)
    atomic_write_text(out, text)
    return text.count("\n") - 2


def console_notes(folder: Path) -> list[str]:
    """Lines for the console: the late submissions and the files left for newer ones."""
    files = canvas_files(folder) or []
    kept, older = newest(files)
    notes = [f"LATE (Canvas): {f.user_id} {_plain(f.name)}" for f in kept.values() if f.late]
    notes += [f"not graded, submitted again later: {one_line(f.path.name)}" for f in older]
    notes += [
        f"not named as Canvas names its files, graded under its file name: {one_line(p.name)}"
        for p in canvas_strays(folder)
    ]
    return notes
