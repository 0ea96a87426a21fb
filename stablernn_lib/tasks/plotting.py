"""Plot pieces that both tasks' analyses draw with (matplotlib, nothing trained here)."""

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
