"""Figures of Chapters 5 and 6: the measured quantities of Lemmas 1-3 against their bounds."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from stablernn_lib.core.style import STYLE, finish
from stablernn_lib.theory.lemmas import (
    GradientGapResult,
    SmoothnessResult,
    TruncationResult,
    gradient_gap_experiment,
    truncation_experiment,
)

FLOOR = 1e-17  # exact zeros are drawn at this height on log scales


def _colors(count: int) -> list:
    return [plt.cm.viridis(x) for x in np.linspace(0.0, 0.85, max(count, 1))]


def _gaps_against_bound(
    ax: Axes, ks: np.ndarray, lams: np.ndarray, measured: np.ndarray, bound: np.ndarray
) -> None:
    """Solid: every instance's measured curve; dashed: every instance's bound (same color)."""
    for lam, color, gaps, bounds in zip(lams, _colors(len(lams)), measured, bound, strict=True):
        for j, (gap, instance_bound) in enumerate(zip(gaps, bounds, strict=True)):
            label = rf"$\lambda = {lam:g}$" if j == 0 else None
            ax.semilogy(ks, np.maximum(gap, FLOOR), color=color, lw=1.3, alpha=0.8, label=label)
            if np.isfinite(instance_bound).all():
                ax.semilogy(ks, instance_bound, color=color, lw=1.1, ls="--", alpha=0.8)
    ax.set_xlabel("context $k$")


def _ratios_panel(ax: Axes, ks: np.ndarray, lams: np.ndarray, ratios: np.ndarray) -> None:
    for lam, color, rows in zip(lams, _colors(len(lams)), ratios, strict=True):
        if np.isfinite(rows).any():
            best = np.nanmax(np.where(np.isfinite(rows), rows, -np.inf), axis=0)
            best = np.where(np.isfinite(best), best, np.nan)
            ax.semilogy(ks, best, color=color, lw=1.5, marker=".", label=rf"$\lambda = {lam:g}$")
    ax.axhline(1.0, color="black", lw=0.8)
    ax.set(xlabel="context $k$", ylabel="measured / bound (largest instance)")


def _lemma_figure(
    result: TruncationResult | GradientGapResult, ylabel: str, title: str, lemma: int
) -> Figure:
    """Left: measured gaps (solid) and bounds (dashed) versus ``k``; right: their ratio."""
    fig, (left, right) = plt.subplots(1, 2, figsize=STYLE["figure.figsize"], layout="constrained")
    _gaps_against_bound(left, result.ks, result.lams, result.measured, result.bound)
    left.set_ylabel(ylabel)
    left.legend(loc="lower left")
    left.set_title(title)
    _ratios_panel(right, result.ks, result.lams, result.ratios())
    right.set_title(f"tightness of Lemma {lemma}")
    return finish(fig)


def truncation_figure(result: TruncationResult, title: str | None = None) -> Figure:
    """Lemma 1: ``max_t ||h_t - h^k_t||`` (solid) and ``lambda^k B_h`` (dashed) versus ``k``,
    and ``measured / bound`` (at most 1 where the lemma applies)."""
    ylabel = r"$\max_t \|h_t - h^k_t\|$" + ("" if result.model != "lstm" else " (cert. norm)")
    default = f"{result.model} model, {result.family} inputs, $B_x = {result.input_bound:g}$"
    return _lemma_figure(result, ylabel, title or default, 1)


def unstable_truncation_figure(result: TruncationResult, title: str | None = None) -> Figure:
    """``max_t ||h_t - h^k_t||`` versus ``k``, with and without a proved ``lambda < 1``."""
    fig, ax = plt.subplots(
        figsize=(STYLE["figure.figsize"][0] * 0.6, STYLE["figure.figsize"][1]), layout="constrained"
    )
    _gaps_against_bound(ax, result.ks, result.lams, result.measured, result.bound)
    ax.set_ylabel(r"$\max_t \|h_t - h^k_t\|$")
    ax.set_title(title or rf"{result.model} RNN, $L_\rho \|W\|_2 = \lambda$")
    ax.legend(loc="lower left")
    return finish(fig)


def truncation_frame(
    lam: float, input_bound: float, *, model: str = "tanh", family: str = "gaussian", **kwargs
) -> Figure:
    """One widget frame: Lemma 1 for three random models at ``(lam, input_bound)``."""
    ks = kwargs.pop("ks", [1, 2, 4, 6, 8, 12, 16, 24, 32])
    kwargs.setdefault("num_instances", 3)
    result = truncation_experiment(
        [lam], ks, model=model, family=family, input_bound=input_bound, progress=False, **kwargs
    )
    fig = truncation_figure(
        result, title=rf"{model} RNN, $\lambda = {lam:g}$, $B_x = {input_bound:g}$"
    )
    return _fix_frame_limits(fig, (1e-14, 1e3), (1e-8, 2.0))


def _fix_frame_limits(
    fig: Figure, gap_limits: tuple[float, float], ratio_limits: tuple[float, float]
) -> Figure:
    """Fixed y-ranges for a two-panel widget frame, so that frames compare by eye."""
    fig.axes[0].set_ylim(*gap_limits)
    fig.axes[1].set_ylim(*ratio_limits)
    return finish(fig)


def gradient_gap_figure(result: GradientGapResult, title: str | None = None) -> Figure:
    """Lemma 2 (the paper's Figure 1a): ``||grad p_T - grad p^k_T||`` and ``gamma k lambda^k``."""
    ylabel = r"$\|\nabla_w p_T - \nabla_w p^k_T\|$"
    default = f"{result.activation} RNN, {result.family} instances, H = {result.hidden_size}"
    return _lemma_figure(result, ylabel, title or default, 2)


def gradient_gap_frame(
    lam: float,
    input_bound: float,
    *,
    activation: str = "tanh",
    family: str = "gaussian",
    ks: tuple[int, ...] = (1, 2, 3, 5, 8, 12, 20, 30, 45),
    num_instances: int = 2,
    **kwargs,
) -> Figure:
    """One widget frame: Lemma 2 for ``num_instances`` random RNNs at ``(lam, input_bound)``
    (other keyword arguments go to :func:`stablernn_lib.theory.lemmas.gradient_gap_experiment`)."""
    result = gradient_gap_experiment(
        [lam],
        list(ks),
        activation=activation,
        family=family,
        num_instances=num_instances,
        input_bound=input_bound,
        progress=False,
        **kwargs,
    )
    fig = gradient_gap_figure(
        result, title=rf"{activation} RNN, $\lambda = {lam:g}$, $B_x = {input_bound:g}$"
    )
    return _fix_frame_limits(fig, (1e-17, 1e10), (1e-12, 2.0))


def smoothness_figure(results: list[SmoothnessResult], labels: list[str]) -> Figure:
    """Lemma 3: largest measured Lipschitz ratio of ``grad p_T`` (solid), ``beta`` (dashed) and
    ``c (1 - lambda)^-3`` (dotted) against ``1 / (1 - lambda)``."""
    fig, ax = plt.subplots(figsize=STYLE["figure.figsize"], layout="constrained")
    for result, label, color in zip(results, labels, _colors(len(results)), strict=True):
        x = 1 / (1 - result.lams)
        measured = result.ratios.max(axis=1)
        ax.loglog(x, measured, color=color, marker="o", lw=1.6, label=f"{label}: measured")
        ax.loglog(
            x, result.betas.max(axis=1), color=color, ls="--", lw=1.4, label=rf"{label}: $\beta$"
        )
        ax.loglog(
            x,
            measured[0] * (x / x[0]) ** 3,
            color=color,
            ls=":",
            lw=1.2,
            label=r"$\propto (1-\lambda)^{-3}$",
        )
    ax.set(
        xlabel=r"$1 / (1 - \lambda)$",
        ylabel=r"$\|\nabla p_T(w) - \nabla p_T(w')\| \,/\, \|w - w'\|$",
    )
    ax.legend(loc="upper left", ncols=2)
    return finish(fig)
