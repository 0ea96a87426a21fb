"""Shared by the Colab tests: the numbered figures of a built page and of a Colab notebook."""

from __future__ import annotations

import html
import re
from pathlib import Path

import nbformat
from stablernn_tools import colab_conversion as colab

SITE_FIGURE = re.compile(
    r'<span class="caption-number">Fig\. (?P<number>[\d.]+) </span>'
    r'<span class="caption-text">(?P<caption>.*?)</span><a class="headerlink"',
    re.S,
)
COLAB_CAPTION = re.compile(r"^\*\*Figure (?P<number>[\d.]+)\.\*\* (?P<caption>.*)", re.S)


def caption_words(text: str) -> list[str]:
    """The words of a caption outside its math and markup (the site's MathJax source and
    the notebook's expanded macros differ; the prose must not)."""
    text = re.sub(r"\\\(.*?\\\)|\$[^$]*\$|<[^>]+>", " ", text, flags=re.S)
    text = html.unescape(text).replace("\u2019", "'")
    return re.findall(r"[A-Za-z0-9]+", text)


def site_figures(page: Path) -> list[tuple[str, list[str]]]:
    """``(number, caption words)`` of every numbered figure of a built page, in order."""
    return [
        (match["number"], caption_words(match["caption"]))
        for match in SITE_FIGURE.finditer(page.read_text(encoding="utf-8"))
    ]


def colab_figures(
    notebook: nbformat.NotebookNode, run: nbformat.NotebookNode
) -> list[tuple[str, list[str]]]:
    """The figures of a Colab notebook given the outputs of ``run`` (the same notebook run in
    the default mode): each caption cell must follow a code cell that displayed something."""
    outputs = {cell.id: cell.outputs for cell in run.cells if cell.cell_type == "code"}
    figures, previous = [], None
    for cell in notebook.cells:
        match = COLAB_CAPTION.match(cell.source) if cell.cell_type == "markdown" else None
        if match:
            shown = outputs.get(previous.id, []) if previous is not None else []
            drawn = any(o.output_type in colab.DISPLAYED_OUTPUTS for o in shown)
            assert drawn, f"Figure {match['number']}: a caption under a cell that draws nothing"
            figures.append((match["number"], caption_words(match["caption"])))
        if cell.cell_type == "code":
            previous = cell
    return figures
