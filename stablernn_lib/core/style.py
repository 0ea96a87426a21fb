"""The figure style: one colour per model; :func:`finish` (every plot ends with it) fits the site's
column at :data:`DPI`, raises texts to :data:`MIN_PT` and marks lines told apart by colour alone."""

from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.colors import to_hex
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.text import Text

# Colours of the Okabe-Ito palette (distinguishable with the common colour-vision deficiencies).
FULL_COLOR = "#0b4f8a"  # the recurrent (full) model of the theory chapters
TRUNCATED_COLOR = "#d55e00"  # its truncation
BOUND_COLOR = "#6b6b6b"  # proved bounds and reference lines
# The trained models of Chapters 8 and 9, by their result names ("rnn-stable-adam" is drawn
# as "rnn-stable": a variant of a model keeps the model's colour).
MODEL_COLORS = {
    "rnn-unconstrained": "#0072b2",
    "rnn-stable": "#56b4e9",
    "lstm-unconstrained": "#d55e00",
    "lstm-stable": "#e69f00",
    "lstm-authors-bug": "#cc79a7",
}
FLOOR = 1e-16  # log-scale plots show exact zeros at this height

DPI = 96  # CSS pixels per inch: a figure point is a page point
COLUMN_PX = 800  # the site's text column at a 1400 px window: 848 px, less its margins (Chromium)
MAX_WIDTH_IN = COLUMN_PX / DPI
MIN_PT = 9.0
# inches: a figure this wide, its legend below the axes (which adds about 33 px when the
# inline backend crops to the drawn artists), is shown at 3/4 of its size or more in a
# 400 px window's 368 px column, so its smallest text stays at 9 px or more
PHONE_WIDTH_IN = 4.5
# Markers that tell apart lines of one style whose colours differ (the first colour of such
# a group keeps its plain line); at most about MARKS_PER_LINE markers on a long line.
SERIES_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
MARKS_PER_LINE = 8

STYLE = {
    "figure.figsize": (7.5, 3.2),
    "figure.dpi": DPI,
    "savefig.dpi": DPI,
    "font.size": 10,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.titlesize": 10,
    "axes.labelsize": 10,
    "xtick.labelsize": 9,
    "ytick.labelsize": 9,
    "legend.fontsize": 9,
    "legend.title_fontsize": 9,
    "figure.titlesize": 11,
    "legend.frameon": False,
}


def apply_style() -> None:
    """Use the course's plotting style for every later figure."""
    plt.rcParams.update(STYLE)


def model_color(name: str) -> str:
    """The colour of the trained model ``name`` ("rnn-stable", "lstm-unconstrained-adam", ...):
    that of the longest key of :data:`MODEL_COLORS` starting ``name`` ("rnn", "lstm": the
    unconstrained model); ``KeyError`` for an unknown name."""
    name = name.strip().lower()
    if name in ("rnn", "lstm"):
        name += "-unconstrained"
    matches = [key for key in MODEL_COLORS if name == key or name.startswith(key + "-")]
    if not matches:
        raise KeyError(f"no course colour for the model {name!r}; add it to style.MODEL_COLORS")
    return MODEL_COLORS[max(matches, key=len)]


def _texts(fig: Figure) -> list[Text]:
    """Every visible, non-empty text of ``fig`` (tick labels only once it is drawn)."""
    return [
        text
        for text in fig.findobj(Text)
        if text.get_visible() and text.get_text().strip() and text.get_figure() is fig
    ]


def finish(fig: Figure) -> Figure:
    """Fit ``fig`` to the column at :data:`DPI` and raise every smaller text to :data:`MIN_PT`;
    no drawing (cheap for every widget frame), a new layout only when something changed."""
    changed = fig.get_dpi() != DPI
    fig.set_dpi(DPI)
    width, height = fig.get_size_inches()
    if width > MAX_WIDTH_IN + 1e-9:  # the height shrinks less (to 3/4 at most): labels keep room
        fig.set_size_inches(MAX_WIDTH_IN, height * max(MAX_WIDTH_IN / width, 0.75))
        changed = True
    for axis in fig.get_axes():
        for tick in axis.get_xticklabels() + axis.get_yticklabels():
            changed |= tick.get_fontsize() < MIN_PT
        axis.tick_params(which="both", labelsize=max(MIN_PT, STYLE["xtick.labelsize"]))
        for offset in (axis.xaxis.get_offset_text(), axis.yaxis.get_offset_text()):
            offset.set_fontsize(max(offset.get_fontsize(), MIN_PT))
    for text in _texts(fig):
        if text.get_fontsize() < MIN_PT:
            text.set_fontsize(MIN_PT)
            changed = True
    distinguish_series(fig)
    if changed and fig.get_layout_engine() is None:
        fig.tight_layout()
    return fig


def _series(axis) -> list[Line2D]:
    """The labelled (legend) lines of ``axis`` that are drawn."""
    return [
        line
        for line in axis.get_lines()
        if line.get_visible() and not line.get_label().startswith("_")
    ]


def _marker(line: Line2D) -> str:
    marker = line.get_marker()
    return "" if marker in (None, "None", "none", "", " ") else str(marker)


def _look(line: Line2D) -> tuple[str, str]:
    """What tells a line apart besides its colour: its line style and marker."""
    style = line.get_linestyle()
    return ("" if style in ("None", "none", "", " ") else str(style)), _marker(line)


def distinguish_series(fig: Figure) -> Figure:
    """In each group of labelled lines of one style and marker, give each colour after the first
    the next of :data:`SERIES_MARKERS` (legend too); idempotent."""
    for axis in fig.get_axes():
        groups: dict[tuple[str, str], list[Line2D]] = {}
        for line in _series(axis):
            groups.setdefault(_look(line), []).append(line)
        for (_, marker), lines in groups.items():
            colours = list(dict.fromkeys(to_hex(line.get_color()) for line in lines))
            if len(colours) < 2:
                continue
            free = [m for m in SERIES_MARKERS if m != marker]
            for line in lines:
                position = colours.index(to_hex(line.get_color()))
                if position == 0:
                    continue
                line.set_marker(free[(position - 1) % len(free)])
                line.set_markersize(5)
                points = len(line.get_xdata())
                if points > MARKS_PER_LINE:
                    line.set_markevery(max(1, points // MARKS_PER_LINE))
        _refresh_legend(axis)
    return fig


def _refresh_legend(axis) -> None:
    """Copy the markers of the axes' lines to its legend's entries (matched by label)."""
    legend = axis.get_legend()
    if legend is None:
        return
    lines = {line.get_label(): line for line in _series(axis)}
    for handle, text in zip(legend.legend_handles, legend.get_texts(), strict=False):
        line = lines.get(text.get_text())
        if isinstance(handle, Line2D) and line is not None and _marker(line):
            handle.set_marker(line.get_marker())
            handle.set_markersize(line.get_markersize())
