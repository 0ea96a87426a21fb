"""instructor.md says what an instructor does, with its tables current and their math rendered.

The two tables come from the registry (``python -m stablernn_grader questions``);
this checks that the page holds the current ones, that the question table writes its
math between dollar signs (MyST renders it) and names no raw label, and that the page
covers each step of the work: assign, collect, grade, proofs, publish, Canvas, Gradescope.
"""

from __future__ import annotations

import re
from pathlib import Path

from stablernn_grader.cli import homework_summary_markdown, questions_markdown

from stablernn_lib.homework import homeworks

ROOT = Path(__file__).resolve().parents[1]
PAGE = (ROOT / "instructor.md").read_text()
RAW_MATH = re.compile(r"[_^]\{?\w|\\[a-z]+|>=|<=|\b(phi|lambda|alpha|eps)\b")


def outside_math_and_code(text: str) -> str:
    return re.sub(r"\$[^$]+\$|`[^`]+`", " ", text)


def test_the_summary_table_is_current_and_adds_up() -> None:
    summary = homework_summary_markdown()
    assert summary in PAGE
    rows = summary.strip().split("\n")[2:]
    assert [row.split(" | ")[0].strip("| ") for row in rows] == [h.id for h in homeworks()]
    for row, homework in zip(rows, homeworks(), strict=True):
        cells = [c.strip() for c in row.strip("|").split("|")]
        auto = float(cells[3].removesuffix(" points"))
        by_hand = (
            sum(float(p.split(" ")[0]) for p in cells[4].split(" + ")) if cells[4] != "none" else 0
        )
        assert auto + by_hand == float(cells[5]) == homework.points
        assert cells[2] == f"{homework.minutes} min"


def test_the_question_table_renders_its_math_and_names_no_raw_label() -> None:
    table = questions_markdown()
    assert table in PAGE
    what_it_tests = [row.rsplit(" | ", 1)[1].rstrip(" |") for row in table.strip().split("\n")[2:]]
    assert len(what_it_tests) == sum(len(h.questions) for h in homeworks())
    for text in what_it_tests:
        assert not RAW_MATH.search(outside_math_and_code(text)), text
        assert not re.search(r"\b(ex|eq|fig|thm)-[\w-]+", text), text  # a raw label
    assert r"$h_t = \phi_w(h_{t-1}, x_t)$" in table and r"$\lambda^k$" in table
    for raw in (r"(?<!\\)phi_w\(", r"(?<!\\)lambda\^k", r"\(Exercise ex-ch09-marginal\)"):
        assert not re.search(raw, PAGE), raw


def test_the_page_says_what_an_instructor_does() -> None:
    steps = PAGE.split("## What an instructor does", 1)[1].split("\n## ", 1)[0]
    for step in ("**Assign.**", "**Collect**", "**Grade.**", "**Grade the proofs by hand.**"):
        assert step in steps
    assert "**Publish the grades**" in steps
    minutes = {h.minutes for h in homeworks()}
    assert f"{min(minutes)} to {max(minutes)} minutes" in steps
    for heading in ("### Proofs, graded by hand", "### Canvas", "### Gradescope"):
        assert heading in PAGE
    for command in (
        "--canvas-csv",
        "stablernn_grader canvas-csv",
        "--include-manual",
        "stablernn_grader gradescope",
    ):
        assert command in PAGE
    assert "(grader_security.md)" in PAGE
    assert ".github/workflows/pages.yml" in PAGE and "Source* to *GitHub Actions*" in PAGE


def _chapter_of(path: Path) -> int:
    """The chapter a notebook belongs to (``04b_...`` is part of Chapter 4)."""
    return int(re.match(r"\d+", path.name)[0])


def _prerequisites() -> dict[int, set[int]]:
    """For each chapter, the earlier chapters whose labelled statements it cites
    (``{prf:ref}`` and ``{ref}`` targets defined in another chapter's notebook)."""
    import json

    notebooks = sorted((ROOT / "chapters").glob("[0-9]*.ipynb"))
    text = {
        path: " ".join(
            "".join(c["source"])
            for c in json.loads(path.read_text(encoding="utf8"))["cells"]
            if c["cell_type"] == "markdown"
        )
        for path in notebooks
    }
    defined = {
        label: _chapter_of(path)
        for path, body in text.items()
        for label in re.findall(r":label: ([\w-]+)|^\(([\w-]+)\)=", body, re.M)
        for label in label
        if label
    }
    needs: dict[int, set[int]] = {}
    for path, body in text.items():
        cited = re.findall(r"\{(?:prf:ref|ref|numref)\}`(?:[^`<]*<)?([\w-]+)>?`", body)
        chapter = _chapter_of(path)
        needs.setdefault(chapter, set()).update(
            defined[c] for c in cited if c in defined and defined[c] < chapter
        )
    return needs


def _plan(heading: str) -> list[set[int]]:
    """The chapters read each week in the schedule table that follows ``heading``."""
    rest = PAGE[PAGE.index(heading) :]
    rows = re.findall(r"^\| (\d+) \| ([^|]+) \|", rest[rest.index("| week |") :], re.M)
    weeks = []
    for week, read in rows:
        if int(week) != len(weeks) + 1:
            break
        found = re.findall(r"Chapters? ([\d, and]+)|Section (\d+)b", read)
        weeks.append({int(n) for a, b in found for n in re.findall(r"\d+", a + " " + b)})
    return weeks


def test_every_schedule_keeps_each_chapters_prerequisites_before_it() -> None:
    """In the ten-week and the six-week plan, a chapter is read no earlier than every
    chapter whose statements it cites, and the chapters come in the order of _toc.yml."""
    needs = _prerequisites()
    assert needs[7] >= {5, 6} and needs[8] >= {4, 5, 7}  # the references the check rests on
    toc = (ROOT / "_toc.yml").read_text(encoding="utf8")
    order = [int(n) for n in re.findall(r"file: chapters/(\d+)_", toc)]
    assert order == sorted(order)
    plans = {"ten weeks": _plan("## A suggested schedule"),
             "six weeks": _plan("A shorter course (six weeks)")}  # fmt: skip
    assert len(plans["ten weeks"]) == 10 and len(plans["six weeks"]) == 6
    for name, weeks in plans.items():
        read = [c for week in weeks for c in sorted(week)]
        assert read == sorted(read), (name, read)
        first = {c: i for i, week in reversed(list(enumerate(weeks))) for c in week}
        for chapter, week in first.items():
            missing = {p for p in needs.get(chapter, set()) if first.get(p, week + 1) > week}
            assert not missing, f"{name}: Chapter {chapter} needs Chapters {missing} first"
