"""Chapter 9's figures: JSB Chorales test NLL per seed, learning curves, NLL against the context,
and a chorale's piano roll beside a model's predictions."""

from __future__ import annotations

from typing import Any

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import ScalarFormatter

from stablernn_lib.core import paper_claims
from stablernn_lib.core.plot_helpers import finish_axis, legends_below, plot_truncated_curves
from stablernn_lib.core.style import BOUND_COLOR, PHONE_WIDTH_IN, finish, model_color
from stablernn_lib.tasks.jsb.results import (
    LABELS,
    PAPER_KEYS,
    TABLE_VARIANTS,
    Runs,
    seed_summary,
)

MARKERS = ("o", "s", "^")


def seed_results_figure(
    runs_by_label: dict[str, dict[str, dict[int, dict[str, Any]]]], baseline: float
) -> Figure:
    """Test NLL per step of every seed (dots) and the mean (bar), a column per model and
    ``{label: load_seed_results(config)}`` entry; star: the paper; dashed: ``baseline``."""
    figure, axis = plt.subplots(figsize=(PHONE_WIDTH_IN, 3.6), layout="constrained")
    width = 0.8 / max(len(runs_by_label), 1)
    for group, (cell, variant) in enumerate(TABLE_VARIANTS):
        name = f"{cell}-{variant}"
        color = model_color(name)
        for column, (label, runs) in enumerate(runs_by_label.items()):
            if name not in runs:
                continue
            x = group - 0.4 + width * (column + 0.5)
            values = [run["test_nll"] for _, run in sorted(runs[name].items())]
            spread = [
                x + width * 0.5 * (i / max(len(values) - 1, 1) - 0.5) for i in range(len(values))
            ]
            axis.scatter(spread, values, color=color, marker=MARKERS[column % len(MARKERS)],
                         s=22, zorder=3, label=label if group == 0 else None)  # fmt: skip
            mean = seed_summary(runs[name]).mean
            axis.hlines(mean, x - width * 0.4, x + width * 0.4, color=color, lw=2.2, zorder=2)
        paper = float(paper_claims.value(PAPER_KEYS[(cell, variant)]))
        axis.scatter([group + 0.45], [paper], marker="*", s=90, color="black", zorder=3,
                     label="the paper (†)" if group == 0 else None)  # fmt: skip
    axis.axhline(baseline, color=BOUND_COLOR, ls="--", lw=1.2, label="no-memory baseline")
    axis.set_xticks(range(len(TABLE_VARIANTS)))
    axis.set_xticklabels([LABELS[f"{c}-{v}"] for c, v in TABLE_VARIANTS])
    axis.set_ylabel("test NLL per step (nats)")
    axis.legend()
    return legends_below(figure, columns=2)


def plot_learning_curves(results: Runs, title: str = "") -> Figure:
    """Validation NLL per epoch of every run (log epochs)."""
    figure, axis = plt.subplots(figsize=(6.5, 3.6))
    for name, result in results.items():
        epochs = [m["epoch"] for m in result["epochs"]]
        axis.semilogx(
            epochs, [m["val_nll"] for m in result["epochs"]], color=model_color(name),
            label=LABELS[name],
        )  # fmt: skip
    return finish_axis(figure, axis, "epoch", "validation NLL per step", title)


def plot_truncated_nll(
    analysis: dict[str, Any], title: str = "", curve_key: str = "truncated_eval"
) -> Figure:
    """Test NLL of the context-``k`` model against ``k`` (log axes); dashed: the recurrent
    model. ``curve_key``: ``"truncated_eval"`` or ``"truncated_eval_after"``."""
    figure = plot_truncated_curves(
        analysis,
        "loss",
        lambda name: LABELS[name],
        "context k (frames)",
        "test NLL per step (log axis)",
        title,
        6.5,
        curve_key,
    )
    axis = figure.axes[0]
    axis.set_yscale("log")  # a 1% band has the same height at every NLL
    axis.yaxis.set_major_formatter(ScalarFormatter())
    axis.yaxis.set_minor_formatter(ScalarFormatter())
    return finish(figure)


def draw_piano_roll(entry: dict[str, Any], k: int, name: str = "") -> Figure:
    """The chorale (black: keys that sound) and the context-``k`` model's probabilities."""
    roll = np.array(entry["roll"], dtype=float)
    probs = np.array(entry["probs"][str(k)], dtype=float)
    low, high = entry["keys"]
    figure, axes = plt.subplots(1, 2, figsize=(9, 3.2), sharey=True)
    extent = (0.5, roll.shape[0] + 0.5, low - 0.5, high - 0.5)
    axes[0].imshow(roll.T, origin="lower", aspect="auto", cmap="Greys", extent=extent)
    axes[0].set_title("the chorale")
    axes[0].set_ylabel("piano key")
    image = axes[1].imshow(
        probs.T, origin="lower", aspect="auto", cmap="magma", vmin=0, vmax=1,
        extent=(1.5, probs.shape[0] + 1.5, low - 0.5, high - 0.5),
    )  # fmt: skip
    frames, keys = roll[1:].nonzero()
    axes[1].scatter(  # outlined, so the probability under each note stays visible
        frames + 2, keys + low, s=14, marker="s", facecolors="none", edgecolors="cyan", lw=0.8
    )
    axes[1].set_title(f"{LABELS.get(name, name)}: predicted, context k = {k}", fontsize=9)
    for axis in axes:
        axis.set_xlabel("frame (time step of the score)")
    figure.colorbar(image, ax=axes[1], fraction=0.05, label="P(key sounds)")
    figure.tight_layout()
    return finish(figure)
