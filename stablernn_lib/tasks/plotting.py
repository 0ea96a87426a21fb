"""Plot pieces that both tasks' analyses draw with (matplotlib, nothing trained here)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.figure import Figure


def finish_axis(
    figure: Figure, axis: Axes, xlabel: str, ylabel: str, title: str, legend_size: float | None = 8
) -> Figure:
    """Label ``axis``, add its legend (font size ``legend_size``; None: matplotlib's) and
    lay ``figure`` out; returns ``figure``."""
    axis.set_xlabel(xlabel)
    axis.set_ylabel(ylabel)
    axis.set_title(title)
    axis.legend(fontsize=legend_size)
    figure.tight_layout()
    return figure


def plot_truncated_curves(
    analysis: dict[str, Any],
    metric: str,
    label: Callable[[str], str],
    xlabel: str,
    ylabel: str,
    title: str,
    width: float,
) -> Figure:
    """``truncated_eval[metric]`` of every model of ``analysis`` against the context ``k``
    (log axis), with the recurrent model's ``recurrent_<metric>`` dashed in the same color."""
    figure, axis = plt.subplots(figsize=(width, 3.6))
    for index, (name, entry) in enumerate(
        (n, e) for n, e in analysis.items() if isinstance(e, dict) and "truncated_eval" in e
    ):
        curve = entry["truncated_eval"]
        color = f"C{index}"
        axis.semilogx(curve["k"], curve[metric], "o-", ms=3, color=color, label=label(name))
        axis.axhline(curve[f"recurrent_{metric}"], ls="--", lw=0.8, color=color)
    return finish_axis(figure, axis, xlabel, ylabel, title)
