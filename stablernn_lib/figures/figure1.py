"""Figure 1b (Chapter 7): recurrent against truncated weights with the Proposition 2 bound, from
:func:`stablernn_lib.theory.weights_close.run_figure1`; the ``figure1`` command."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import matplotlib
import numpy as np
from matplotlib.figure import Figure

from stablernn_lib.core.style import finish
from stablernn_lib.theory.weights_close import (
    CONFIGS,
    DEFAULT_OUT,
    SCHEDULES,
    run_figure1,
    select_units,
)


def _mean_curve(units: Sequence[dict[str, Any]], key: str) -> np.ndarray:
    """Mean over the units of the measured distances, max of a bound's ``log10`` values."""
    values = np.array([[np.nan if v is None else v for v in u[key]] for u in units], float)
    return np.nanmean(values, axis=0) if key == "distance" else np.nanmax(values, axis=0)


def draw_distance_panel(axis: Any, units: Sequence[dict[str, Any]], ks: Sequence[int]) -> None:
    """Measured ``||w_recurr - w_trunc||`` after ``n`` steps (mean over seeds, solid) and the
    Proposition 2 bound with the constants measured along the run (max over seeds, dashed)."""
    colors = matplotlib.colormaps["viridis"](np.linspace(0, 0.9, max(len(ks), 1)))
    for color, k in zip(colors, ks, strict=False):
        chosen = [u for u in units if u["k"] == k]
        if not chosen:
            continue
        steps = np.array(chosen[0]["steps"])
        distance = _mean_curve(chosen, "distance")
        if np.all(distance == 0):
            continue
        axis.loglog(steps, distance, color=color, label=f"k = {k}")
        axis.loglog(steps, 10 ** _mean_curve(chosen, "prop2_empirical_log10"), "--", color=color)
        axis.loglog(steps, 10 ** _mean_curve(chosen, "stepwise_log10"), ":", color=color)
    measured = [d for u in units if u["k"] in ks for d in u["distance"] if d]
    if measured:  # keep the measurements readable; exploding bounds leave the top
        axis.set_ylim(min(measured) / 10, max(measured) * 1e3)
    axis.set_xlabel("gradient steps n")
    axis.set_ylabel(r"$\|w_{\mathrm{recurr}} - w_{\mathrm{trunc}}\|$")
    axis.grid(True, which="major", alpha=0.3)


def _draw_figure1_row(axes: Sequence[Any], units: Sequence[dict[str, Any]]) -> None:
    """One row of Figure 1 for one activation: two schedules and the summary over ``k``."""
    activation = units[0]["activation"]
    ks = sorted({u["k"] for u in units})
    for axis, schedule in zip(axes[:2], SCHEDULES, strict=True):
        draw_distance_panel(axis, select_units(units, schedule=schedule), ks)
        step = r"$\alpha_t = \alpha / t$" if schedule == "decay" else r"$\alpha_t = \alpha$"
        axis.set_title(f"{activation} RNN, {step}")
    axes[0].legend(
        title="solid: measured\ndashed: Prop. 2\ndotted: recurrence",
    )
    lam = units[0]["lam"]
    for schedule, marker in zip(SCHEDULES, "os", strict=True):
        chosen = select_units(units, schedule=schedule)
        final = [np.mean([u["final_distance"] for u in chosen if u["k"] == k]) for k in ks]
        gap = [
            np.mean([u["theorem1"]["prediction_gap_max"] for u in chosen if u["k"] == k])
            for k in ks
        ]
        axes[2].semilogy(ks, final, marker + "-", label=f"weights, {schedule}")
        axes[2].semilogy(ks, gap, marker + ":", label=f"max prediction gap, {schedule}")
    ks_array = np.array(ks, float)
    first = np.mean([u["final_distance"] for u in units if u["k"] == ks[0]])
    shape = ks_array * lam**ks_array * first / (ks[0] * lam ** ks[0])
    axes[2].semilogy(ks, shape, "k--", lw=1, label=r"$k\lambda^k$ (through the first point)")
    axes[2].set_xlabel("context k")
    axes[2].set_title(f"after N = {units[0]['num_steps']} steps")
    axes[2].legend()


def plot_figure1(results: dict[str, Any], activation: str | None = None) -> Figure:
    """Figure 1b, a row per activation: distance against steps per ``k`` for both schedules,
    and the final distance and prediction gap against ``k``."""
    units = results["units"]
    activations = [activation] if activation else sorted({u["activation"] for u in units})
    figure = Figure(figsize=(13, 3.8 * len(activations)), layout="constrained")
    axes = figure.subplots(len(activations), 3, squeeze=False)
    for row, name in zip(axes, activations, strict=True):
        _draw_figure1_row(row, select_units(units, activation=name))
    return finish(figure)


def save_figure1_png(results: dict[str, Any], path: str | Path) -> Path:
    """Write :func:`plot_figure1` (every activation, one row each) to a PNG, atomically."""
    path = Path(path)
    partial = path.with_name(f".{path.name}.partial.png")
    plot_figure1(results).savefig(partial, dpi=80)
    os.replace(partial, path)
    return path


def widget_draw(grid: dict[tuple[float, str], list[dict[str, Any]]]) -> Callable[..., Figure]:
    """``draw(k, lam, schedule)`` for :func:`stablernn_lib.figures.widgets.interactive_plot`."""

    def draw(k: int, lam: float, schedule: str) -> Figure:
        figure = Figure(figsize=(5.5, 3.6), layout="constrained")
        axis = figure.subplots()
        draw_distance_panel(axis, grid[(lam, schedule)], [k])
        axis.set_ylim(1e-8, 1e2)
        axis.set_title(f"lambda = {lam}, {schedule} step, k = {k}")
        axis.legend(loc="lower right")
        return finish(figure)

    return draw


# ----------------------------------------------------------------------------- command line


def _command(args: argparse.Namespace) -> int:
    results = run_figure1(args.config, args.out, resume=not args.no_resume)
    save_figure1_png(results, Path(args.out) / args.config / "figure1.png")
    summary = results["summary"]
    print(
        f"figure1 {args.config}: {summary['units_computed']} runs computed, "
        f"{summary['units_resumed']} resumed, wall time {summary['wall_time_s']:.1f} s; "
        f"results in {Path(args.out) / args.config}"
    )
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``figure1``: projected GD on recurrent vs truncated models (Proposition 2)."""
    parser = subparsers.add_parser(
        "figure1",
        help="weights of recurrent and truncated models under projected GD (Figure 1b)",
    )
    parser.add_argument(
        "--config",
        choices=sorted(CONFIGS),
        default="smoke",
        help="smoke: seconds on a CPU; full: the committed Figure 1 run",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=DEFAULT_OUT,
        help="results folder (a subfolder per config is created)",
    )
    parser.add_argument(
        "--no-resume",
        action="store_true",
        help="recompute every run even if its result file exists",
    )
    parser.set_defaults(func=_command)
