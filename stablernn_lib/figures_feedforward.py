"""Figures and the widget of Chapter 3 (recurrent versus feed-forward models)."""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import torch
from matplotlib.figure import Figure
from torch import Tensor
from torch.autograd.functional import jacobian

from stablernn_lib.models import random_vanilla_rnn
from stablernn_lib.plots import FLOOR, FULL_COLOR, TRUNCATED_COLOR, apply_style
from stablernn_lib.truncation import truncated_states
from stablernn_lib.widgets import interactive_plot


def input_influence(lam: float, k: int | None, steps: int = 40, hidden_size: int = 16,
                    seed: int = 0) -> Tensor:
    """``||d h_T / d x_{T - lag}||_2`` for ``lag = 0..steps-1`` (a random tanh RNN with
    contraction constant ``lam``, one Gaussian input sequence of length ``steps``).

    ``k=None`` differentiates the recurrent model's last state ``h_T``; an integer ``k``
    the truncated model's ``h^k_T``, which ignores every input older than ``k`` steps.
    """
    generator = torch.Generator().manual_seed(seed)
    model = random_vanilla_rnn(1, hidden_size, lam, generator=generator)
    inputs = torch.randn(steps, 1, 1, generator=generator, dtype=torch.float64)

    def last_state(x: Tensor) -> Tensor:
        states = model.run(x) if k is None else truncated_states(model, x, k)
        return states[-1, 0]

    with torch.no_grad():
        sensitivity = jacobian(last_state, inputs, vectorize=True)  # (H, T, 1, 1)
    return torch.linalg.vector_norm(sensitivity.flatten(2), dim=(0, 2)).flip(0)


def influence_figure(k: int, lam: float, steps: int = 40) -> Figure:
    """How much the last state depends on each past input: recurrent versus truncated."""
    apply_style()
    fig, ax = plt.subplots(figsize=(7.0, 3.3))
    lags = torch.arange(steps)
    ax.axvspan(-0.5, k - 0.5, color=TRUNCATED_COLOR, alpha=0.12,
               label=f"context of any model of context k = {k}")
    ax.semilogy(lags, input_influence(lam, None, steps).clamp_min(FLOOR), "o-", ms=3,
                color=FULL_COLOR, label="recurrent model")
    ax.semilogy(lags, input_influence(lam, k, steps).clamp_min(FLOOR), "s--", ms=3,
                color=TRUNCATED_COLOR, label=f"truncated model, k = {k}")
    ax.set_ylim(1e-17, 1e3)
    ax.set_xlabel("lag T - t")
    ax.set_ylabel(r"$\|\partial h_T / \partial x_t\|_2$")
    ax.set_title(rf"tanh RNN, $\lambda = L_\rho \|W\|_2$ = {lam:g}")
    ax.legend(loc="lower left", fontsize=8)
    fig.tight_layout()
    return fig


def influence_widget(ks: Sequence[int] = (2, 5, 10, 20, 30), lams: Sequence[float] = (0.5, 0.9, 1.5)):
    """Sliders over the context ``k`` and ``lambda`` for :func:`influence_figure`."""
    return interactive_plot(
        lambda k, lam: influence_figure(k, lam),
        {"k": list(ks), "lam": list(lams)},
        description="Which inputs the last state depends on, and how strongly.",
    )
