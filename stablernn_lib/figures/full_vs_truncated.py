"""Chapter 1's figure: the states of a recurrent model beside those of its truncation."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.figure import Figure

from stablernn_lib.core.models import random_vanilla_rnn
from stablernn_lib.core.style import (
    BOUND_COLOR,
    FLOOR,
    FULL_COLOR,
    STYLE,
    TRUNCATED_COLOR,
    finish,
)
from stablernn_lib.core.truncation import truncated_states


@dataclass(frozen=True)
class TruncationExample:
    """States ``full`` ``h_t`` and ``truncated`` ``h^k_t`` ``(T, H)`` of one random tanh RNN,
    ``gap`` ``||h_t - h^k_t||`` ``(T,)``, and ``bound`` ``lam^k ||h_{t-k}||`` ``(T,)`` (NaN for
    ``t <= k``, where the two models agree, and everywhere when ``lam >= 1``)."""

    lam: float
    k: int
    full: np.ndarray
    truncated: np.ndarray
    gap: np.ndarray
    bound: np.ndarray


@lru_cache(maxsize=16)
def _example_model_and_inputs(
    lam: float, input_size: int, hidden_size: int, steps: int, seed: int
) -> tuple[torch.nn.Module, torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    model = random_vanilla_rnn(input_size, hidden_size, lam, "tanh", generator=generator)
    inputs = torch.randn(steps, 1, input_size, generator=generator, dtype=torch.float64)
    with torch.no_grad():
        full = model.run(inputs)
    return model, inputs, full


def truncation_example(
    lam: float,
    k: int,
    *,
    input_size: int = 4,
    hidden_size: int = 32,
    steps: int = 80,
    seed: int = 0,
) -> TruncationExample:
    """A random tanh RNN (``||W||_2 = lam``) and its truncation ``k`` on Gaussian inputs (one
    model and sequence per ``seed``, for every ``k``)."""
    model, inputs, full = _example_model_and_inputs(lam, input_size, hidden_size, steps, seed)
    with torch.no_grad():
        truncated = truncated_states(model, inputs, k)
    full_np, truncated_np = full[:, 0].numpy(), truncated[:, 0].numpy()
    gap = np.linalg.norm(full_np - truncated_np, axis=-1)
    bound = np.full_like(gap, np.nan)
    if lam < 1 and k < steps:
        # h_t and h^k_t start the last k steps from h_{t-k} and 0 (times are 1-based)
        bound[k:] = lam**k * np.linalg.norm(full_np[: steps - k], axis=-1)
    return TruncationExample(lam, k, full_np, truncated_np, gap, bound)


def full_vs_truncated_figure(lam: float, k: int, *, unit: int = 0, **example_kwargs) -> Figure:
    """Left: one coordinate of ``h_t`` and ``h^k_t``; right: ``||h_t - h^k_t||`` (log scale)."""
    example = truncation_example(lam, k, **example_kwargs)
    times = np.arange(1, len(example.gap) + 1)
    fig, (left, right) = plt.subplots(1, 2, figsize=STYLE["figure.figsize"], layout="constrained")
    left.plot(times, example.full[:, unit], color=FULL_COLOR, lw=1.6, label="$h_t$ (full)")
    left.plot(
        times,
        example.truncated[:, unit],
        color=TRUNCATED_COLOR,
        lw=1.4,
        ls="--",
        label=f"$h^{{{k}}}_t$ (truncated)",
    )
    left.set(xlabel="time $t$", ylabel=f"coordinate {unit + 1} of the state", ylim=(-1.1, 1.6))
    left.legend(loc="upper center", ncols=2)
    right.semilogy(
        times, np.maximum(example.gap, FLOOR), color=TRUNCATED_COLOR, lw=1.6, label="gap"
    )
    if not np.isnan(example.bound).all():
        right.semilogy(
            times,
            example.bound,
            color=BOUND_COLOR,
            lw=1.2,
            ls=":",
            label=r"$\lambda^k \|h_{t-k}\|$",
        )
    right.axvspan(0.5, min(k, len(times)) + 0.5, color=BOUND_COLOR, alpha=0.12, lw=0)
    right.text(1.5, 1e-11, "$t \\leq k$:\nsame model", fontsize=9, color=BOUND_COLOR)
    right.legend(loc="upper right", ncols=2)
    right.set(
        xlabel="time $t$",
        ylabel=r"$\|h_t - h^k_t\|$",
        ylim=(1e-17, 1e5),
        title=rf"$\lambda = {lam:g}$, $k = {k}$",
    )
    left.set_title(r"tanh RNN with $\|W\|_2 = \lambda$")
    return finish(fig)
