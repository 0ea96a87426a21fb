"""Plotting helpers of every layer: an axis finished in the course style, metric-against-context
curves of the tasks' analyses, and legends moved below the axes, where no curve can cover them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from stablernn_lib.core.style import finish, model_color


def finish_axis(
    figure: Figure,
    axis: Axes,
    xlabel: str,
    ylabel: str,
    title: str,
    legend_size: float | None = None,
) -> Figure:
    """Label ``axis``, add its legend (font size ``legend_size``; None: the course style's),
    lay ``figure`` out and apply :func:`stablernn_lib.core.style.finish`; returns ``figure``."""
    axis.set_xlabel(xlabel)
    axis.set_ylabel(ylabel)
    axis.set_title(title)
    axis.legend(fontsize=legend_size)
    figure.tight_layout()
    return finish(figure)


def plot_truncated_curves(
    analysis: dict[str, Any],
    metric: str,
    label: Callable[[str], str],
    xlabel: str,
    ylabel: str,
    title: str,
    width: float,
    curve_key: str = "truncated_eval",
) -> Figure:
    """``<curve_key>[metric]`` of every model of ``analysis`` against the context ``k``
    (log axis), with the recurrent model's ``recurrent_<metric>`` dashed in the same color
    (each model in its course colour, :func:`stablernn_lib.core.style.model_color`)."""
    figure, axis = plt.subplots(figsize=(width, 3.6))
    for name, entry in analysis.items():
        if not (isinstance(entry, dict) and curve_key in entry):
            continue
        curve, color = entry[curve_key], model_color(name)
        axis.semilogx(curve["k"], curve[metric], "o-", ms=3, color=color, label=label(name))
        axis.axhline(curve[f"recurrent_{metric}"], ls="--", lw=0.8, color=color)
    return finish_axis(figure, axis, xlabel, ylabel, title)


# Figure-legend slots below the axes, in the order the distinct legends are met.
_BELOW = ("outside lower left", "outside lower right", "outside lower center")


def legends_below(figure: Figure, columns: int = 2) -> Figure:
    """Move the axes' legends below all axes (at most three distinct ones, with ``columns``
    columns; same entries share one); a constrained-layout figure grows 0.35 in per row."""
    if (
        figure.get_layout_engine() is None
        or "Constrained" not in type(figure.get_layout_engine()).__name__
    ):
        raise ValueError(
            "legends_below needs a figure with layout='constrained' (it makes room for the "
            "legends below the axes); create the figure with Figure(layout='constrained')"
        )
    found: dict[tuple[str, ...], tuple[list, str]] = {}
    for axis in figure.get_axes():
        legend = axis.get_legend()
        if legend is None:
            continue
        handles, labels = axis.get_legend_handles_labels()
        found.setdefault(tuple(labels), (handles, legend.get_title().get_text()))
        legend.remove()
    if len(found) > len(_BELOW):
        raise ValueError(
            f"{len(found)} distinct legends do not fit below one figure (at most "
            f"{len(_BELOW)}); merge them or draw fewer panels"
        )
    rows = 0
    for slot, (labels, (handles, title)) in zip(_BELOW, found.items(), strict=False):
        figure.legend(handles, labels, loc=slot, ncols=columns, title=title or None)
        rows = max(rows, -(-len(labels) // columns) + len(title.splitlines()))
    width, height = figure.get_size_inches()
    figure.set_size_inches(width, height + 0.35 * rows)
    return finish(figure)
