"""The introduction's map of the course numbers each page as the site does.

Sphinx numbers a chapter's own sections (its ``##`` headings) 1, 2, ... and then the
pages nested under it in ``_toc.yml``, in order: Section 4b is page 4.9 when Chapter 4
has eight sections. The map's numbers are computed here from the notebooks' headings."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml
from markdown_it import MarkdownIt
from mdit_py_plugins.colon_fence import colon_fence_plugin

ROOT = Path(__file__).resolve().parents[1]
PARSER = MarkdownIt("commonmark").use(colon_fence_plugin)


def _sections(notebook: Path) -> int:
    """How many ``##`` sections the page has (headings inside a directive are not sections)."""
    cells = json.loads(notebook.read_text(encoding="utf8"))["cells"]
    text = "\n\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    return sum(t.type == "heading_open" and t.tag == "h2" for t in PARSER.parse(text))


def site_numbers() -> dict[str, str]:
    """``{file: number}`` for every chapter and every page nested under one."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text(encoding="utf8"))
    numbers = {}
    chapters = next(p for p in toc["parts"] if p.get("numbered"))["chapters"]
    for index, chapter in enumerate(chapters, start=1):
        numbers[chapter["file"]] = str(index)
        first = _sections(ROOT / f"{chapter['file']}.ipynb") + 1
        for offset, section in enumerate(chapter.get("sections", [])):
            numbers[section["file"]] = f"{index}.{first + offset}"
    return numbers


def test_the_map_names_every_chapter_and_companion_page_as_the_site_numbers_it() -> None:
    numbers = site_numbers()
    assert numbers["chapters/04b_lstm_certificate"] == "4.9"  # as the built site shows it
    intro = (ROOT / "intro.md").read_text(encoding="utf8")
    table = intro.split("## The path through the chapters", 1)[1].split("\n\n")[1]
    rows = re.findall(r"^\| ([\d.]+) \|", table, re.M)
    expected = [n for f, n in numbers.items() if "/homework/" not in f]
    assert rows == expected
