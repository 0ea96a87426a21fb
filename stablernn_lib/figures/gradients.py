"""Figures of Chapter 2 (backpropagation through time); each ``*_widget`` wraps a ``*_figure``."""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

import matplotlib.pyplot as plt
import torch
from matplotlib.figure import Figure

from stablernn_lib.core.gradients import MATRIX_KINDS, lag_bound, lag_norm_curve
from stablernn_lib.core.style import (
    BOUND_COLOR,
    FLOOR,
    FULL_COLOR,
    TRUNCATED_COLOR,
    apply_style,
    finish,
)
from stablernn_lib.figures.widgets import InteractivePlot, interactive_plot
from stablernn_lib.theory import one_unit

KIND_COLORS = {"gaussian": FULL_COLOR, "orthogonal": TRUNCATED_COLOR, "low_rank": "#2a9d8f"}
KIND_LABELS = {
    "gaussian": "Gaussian W",
    "orthogonal": "orthogonal W (scaled)",
    "low_rank": "trained-looking W (few kept directions)",
}


def lag_norm_figure(weight_norm: float, activation: str, steps: int = 40) -> Figure:
    """Median ``||d h_T / d h_{T-lag}||_2`` versus lag for the three kinds of ``W``,
    with the bound ``(L_rho ||W||_2)^lag`` (log scale)."""
    apply_style()
    fig, ax = plt.subplots(figsize=(7.0, 3.4))
    lags = torch.arange(steps + 1)
    for kind in MATRIX_KINDS:
        curve = lag_norm_curve(kind, weight_norm, activation, hidden_size=16, steps=steps, batch=16)
        ax.semilogy(lags, curve.clamp_min(FLOOR), color=KIND_COLORS[kind], label=KIND_LABELS[kind])
    bound = lag_bound(weight_norm, activation, steps)
    ax.semilogy(
        lags,
        bound.clamp(FLOOR, 1e30),
        "--",
        color=BOUND_COLOR,
        label=r"bound $(\gamma\,\|W\|_2)^{\mathrm{lag}}$",
    )
    ax.set_ylim(1e-16, 1e16)
    ax.set_xlabel("lag T - s")
    ax.set_ylabel(r"$\|\partial h_T / \partial h_s\|_2$")
    ax.set_title(f"{activation}, $\\|W\\|_2$ = {weight_norm:g}")
    ax.legend(loc="lower left")
    return finish(fig)


def lag_norm_widget(
    weight_norms: Sequence[float] = (0.5, 1.0, 1.5, 2.0, 3.0, 5.0),
    activations: Sequence[str] = ("identity", "tanh", "relu", "sigmoid"),
) -> InteractivePlot:
    """Slider over ``||W||_2`` and the activation for :func:`lag_norm_figure`."""
    return interactive_plot(
        lag_norm_figure,
        {"weight_norm": list(weight_norms), "activation": list(activations)},
        description="Jacobian-product norm versus lag; dashed: the bound.",
        alt=(
            "Line plot of the median Jacobian-product norm against the lag (log scale) for "
            "three kinds of W, the bound (γ‖W‖₂)^lag dashed: every curve stays under the "
            "bound, and all fall geometrically when γ‖W‖₂ < 1."
        ),
    )


def nilpotent_figure(results: dict[str, dict]) -> Figure:
    """The curves of :func:`stablernn_lib.core.gradients.nilpotent_check` (log scale)."""
    apply_style()
    fig, ax = plt.subplots(figsize=(7.0, 3.4))
    for name, result in results.items():
        norms = result["norms"]
        ax.semilogy(torch.arange(len(norms)), norms.clamp_min(FLOOR), marker=".", label=name)
    lags = torch.arange(len(next(iter(results.values()))["norms"]))
    ax.semilogy(
        lags,
        (16.0 ** lags.double()).clamp_max(1e60),
        "--",
        color=BOUND_COLOR,
        label=r"bound $\|W\|_2^{\mathrm{lag}} = 16^{\mathrm{lag}}$",
    )
    ax.set_ylim(1e-17, 1e60)
    ax.set_xlabel("lag T - s")
    ax.set_ylabel(r"$\|\partial h_T / \partial h_s\|_2$")
    ax.set_title("tanh RNN with W = [[8, 8], [-8, -8]] (both eigenvalues 0)")
    ax.legend(loc="upper left")
    return finish(fig)


@lru_cache(maxsize=16)
def _sweep(w: float, b_range: tuple[float, float], x0: float) -> tuple[torch.Tensor, ...]:
    """The hysteresis sweep of one value of ``w`` (shared by all frames with that ``w``)."""
    sweep_b = torch.linspace(*b_range, 41)
    return (sweep_b, *one_unit.hysteresis_sweep(w, sweep_b, x0=x0))


@lru_cache(maxsize=16)
def _final_gradient(
    w: float, b_range: tuple[float, float], x0: float, steps: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """``b`` grid and ``d x_T / d b`` on it for one value of ``w``."""
    b_grid = torch.linspace(*b_range, 801)
    return b_grid, one_unit.final_state_gradient(w, b_grid, x0, steps)[1]


def one_unit_figure(w: float, b: float, x0: float = -5.0, steps: int = 50) -> Figure:
    """Three panels for ``x_t = w sigmoid(x_{t-1}) + b``: the fixed points over ``b``
    (with the hysteresis sweep), the trajectory from ``x0``, and ``|d x_T / d b|``."""
    apply_style()
    fig, (left, middle, right) = plt.subplots(1, 3, figsize=(11.0, 3.3))
    b_range = (-w - 1.0, 1.0)
    curve = one_unit.fixed_point_curve(w, torch.linspace(-w - 3.0, w + 3.0, 2001))
    for stable, style in ((True, "-"), (False, ":")):
        x = torch.where(curve["stable"] == stable, curve["x"], torch.nan)
        left.plot(
            curve["b"],
            x,
            style,
            color=FULL_COLOR,
            label="stable fixed points" if stable else "unstable",
        )
    sweep_b, up, down = _sweep(w, b_range, x0)
    left.plot(sweep_b, up, ">", ms=3, color=TRUNCATED_COLOR, label="sweep up")
    left.plot(sweep_b, down, "<", ms=3, color="#2a9d8f", label="sweep down")
    left.axvline(b, color=BOUND_COLOR, lw=1)
    left.set_xlim(*b_range)
    left.set_ylim(-w - 2.0, w + 2.0)
    left.set_xlabel("b")
    left.set_ylabel("x")
    left.set_title(f"fixed points, w = {w:g}")
    left.legend(loc="upper left")
    trajectory = one_unit.iterate(w, b, x0, steps)
    middle.plot(trajectory, ".-", color=FULL_COLOR, ms=3)
    middle.set_xlabel("t")
    middle.set_ylabel("$x_t$")
    middle.set_ylim(-w - 2.0, w + 2.0)
    middle.set_title(f"trajectory, b = {b:g}, $x_0$ = {x0:g}")
    b_grid, gradient = _final_gradient(w, b_range, x0, steps)
    right.semilogy(b_grid, gradient.abs().clamp_min(FLOOR), color=FULL_COLOR)
    right.axvline(b, color=BOUND_COLOR, lw=1)
    right.set_xlabel("b")
    right.set_ylabel(f"$|d x_T / d b|$, T = {steps}")
    right.set_title("gradient of the final state")
    fig.tight_layout()
    return finish(fig)


def one_unit_widget(
    ws: Sequence[float] = (3.0, 5.0, 8.0),
    bs: Sequence[float] = (-6.0, -4.0, -3.0, -2.5, -2.0, -1.0),
) -> InteractivePlot:
    """Sliders over ``w`` and ``b`` for :func:`one_unit_figure`."""
    return interactive_plot(
        one_unit_figure,
        {"w": list(ws), "b": list(bs)},
        description=(
            "<i>x</i><sub>t</sub> = <i>w</i>&thinsp;σ(<i>x</i><sub>t−1</sub>) + <i>b</i>: "
            "fixed points, a trajectory, and ∂<i>x</i><sub>T</sub>&thinsp;/&thinsp;∂<i>b</i>."
        ),
        alt=(
            "Three panels of the one-unit system: its fixed points against b for the upward "
            "and downward sweeps, the trajectory from x₀ = −5, and |dx_T/db| against b, "
            "which spikes where a fixed point appears or vanishes."
        ),
    )


def gradient_spike_figure(
    w: float = 5.0, steps: Sequence[int] = (10, 30, 100), x0: float = -5.0
) -> Figure:
    """``|d x_T / d b|`` versus ``b`` for several horizons ``T``, with the two folds."""
    apply_style()
    fig, ax = plt.subplots(figsize=(7.0, 3.2))
    b_grid = torch.linspace(-3.2, -1.8, 1401)
    for horizon in steps:
        _, gradient = one_unit.final_state_gradient(w, b_grid, x0, horizon)
        ax.semilogy(b_grid, gradient.abs().clamp_min(FLOOR), label=f"T = {horizon}")
    for _, b_fold in one_unit.saddle_nodes(w):
        ax.axvline(b_fold, color=BOUND_COLOR, ls="--", lw=1)
    ax.set_xlabel("b")
    ax.set_ylabel(r"$|d x_T / d b|$")
    ax.set_title(f"w = {w:g}, $x_0$ = {x0:g}; dashed: the saddle-node bifurcations")
    ax.legend()
    return finish(fig)


def clipping_figure(runs: dict[str, dict[str, list[float]]]) -> Figure:
    """Loss and gradient norm per iteration for runs of ``clipping_experiment``."""
    apply_style()
    fig, (loss_ax, norm_ax) = plt.subplots(1, 2, figsize=(10.0, 3.2))
    for name, history in runs.items():
        loss_ax.semilogy(history["loss"], ".-", label=name)
        norm_ax.semilogy(history["grad_norm"], ".-", label=name)
    loss_ax.set_xlabel("iteration")
    loss_ax.set_ylabel("training loss")
    norm_ax.set_xlabel("iteration")
    norm_ax.set_ylabel("gradient norm before clipping")
    loss_ax.legend()
    fig.tight_layout()
    return finish(fig)


def bias_training_figure(runs: dict[str, dict[str, list[float]]], w: float) -> Figure:
    """``b`` and ``|dL/db|`` per iteration for runs of :func:`one_unit.train_bias`."""
    apply_style()
    fig, (b_ax, grad_ax) = plt.subplots(1, 2, figsize=(10.0, 3.2))
    for name, history in runs.items():
        b_ax.plot(history["b"], ".-", label=name)
        grad_ax.semilogy(history["grad_norm"], ".-", label=name)
    for _, b_fold in one_unit.saddle_nodes(w):
        b_ax.axhline(b_fold, color=BOUND_COLOR, ls="--", lw=1)
    b_ax.set_xlabel("iteration")
    b_ax.set_ylabel("b (dashed: the folds)")
    grad_ax.set_xlabel("iteration")
    grad_ax.set_ylabel(r"$|dL/db|$ before clipping")
    b_ax.legend()
    fig.tight_layout()
    return finish(fig)
