"""Chapter 3: recurrent models, truncated BPTT, truncated models, and models of context k."""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import sympy as sp
import torch
from matplotlib.figure import Figure
from torch import Tensor
from torch.autograd.functional import jacobian

from stablernn_lib.core.models import RecurrentMap, random_vanilla_rnn
from stablernn_lib.core.style import FLOOR, FULL_COLOR, TRUNCATED_COLOR, apply_style, finish
from stablernn_lib.figures.widgets import InteractivePlot, interactive_plot


def input_influence(
    lam: float, k: int | None, steps: int = 40, hidden_size: int = 16, seed: int = 0
) -> Tensor:
    """``||d h_T / d x_{T - lag}||_2``, ``lag = 0..steps-1``, of ``h_T`` (``k=None``) or ``h^k_T``
    for a random tanh RNN with ``lambda = lam`` on one Gaussian input sequence."""
    generator = torch.Generator().manual_seed(seed)
    model = random_vanilla_rnn(1, hidden_size, lam, generator=generator)
    inputs = torch.randn(steps, 1, 1, generator=generator, dtype=torch.float64)

    def last_state(x: Tensor) -> Tensor:
        window = x if k is None else x[-k:]  # h^k_T: the map run on the last k inputs
        return model.run(window)[-1, 0]

    with torch.no_grad():
        sensitivity = jacobian(last_state, inputs, vectorize=True)  # (H, T, 1, 1)
    return torch.linalg.vector_norm(sensitivity.flatten(2), dim=(0, 2)).flip(0)


def influence_figure(k: int, lam: float, steps: int = 40) -> Figure:
    """How much the last state depends on each past input: recurrent versus truncated."""
    apply_style()
    fig, ax = plt.subplots(figsize=(7.0, 3.3))
    lags = torch.arange(steps)
    ax.axvspan(
        -0.5,
        k - 0.5,
        color=TRUNCATED_COLOR,
        alpha=0.12,
        label=f"context of any model of context k = {k}",
    )
    for context, style, color, label in (
        (None, "o-", FULL_COLOR, "recurrent model"),
        (k, "s--", TRUNCATED_COLOR, f"truncated model, k = {k}"),
    ):
        influence = input_influence(lam, context, steps).clamp_min(FLOOR)
        ax.semilogy(lags, influence, style, ms=3, color=color, label=label)
    ax.set_ylim(1e-17, 1e3)
    ax.set_xlabel("lag T - t")
    ax.set_ylabel(r"$\|\partial h_T / \partial x_t\|_2$")
    ax.set_title(rf"tanh RNN, $\lambda = L_\rho \|W\|_2$ = {lam:g}")
    ax.legend(loc="lower left")
    fig.tight_layout()
    return finish(fig)


def influence_widget(
    ks: Sequence[int] = (2, 5, 10, 20, 30), lams: Sequence[float] = (0.5, 0.9, 1.5)
) -> InteractivePlot:
    """Sliders over the context ``k`` and ``lambda`` for :func:`influence_figure`."""
    return interactive_plot(
        influence_figure,
        {"k": list(ks), "lam": list(lams)},
        description="Which inputs the last state depends on, and how strongly.",
        alt=(
            "Line plot of the influence of each past input on the last state against the lag "
            "(log scale): recurrent model solid, truncated model dashed and zero beyond k. "
            "For λ < 1 both fall geometrically and agree inside the window."
        ),
    )


def last_step_gradients(
    model: RecurrentMap, inputs: Tensor, target: Tensor, k: int
) -> dict[str, dict[str, Tensor]]:
    """Gradients of ``l = ||h_T - target||^2 / 2`` (inputs ``(T, B, D)``, target ``(B, S)``):
    ``{"full" | "truncated_bptt" | "truncated_model": {parameter name: gradient}}`` (through all
    ``T`` steps; stopped at a detached ``h_{T-k}``; the last ``k`` steps from zero)."""
    if not 1 <= k <= inputs.shape[0]:
        raise ValueError(f"the context k must be between 1 and T = {inputs.shape[0]}, got {k}")
    names = [name for name, _ in model.named_parameters()]
    params = [p for _, p in model.named_parameters()]
    with torch.no_grad():
        carried = model.run(inputs[:-k])[-1] if k < inputs.shape[0] else None
    starts = {
        "full": None,
        "truncated_bptt": carried,
        "truncated_model": model.zero_state(inputs.shape[1]),
    }
    results = {}
    for name, start in starts.items():
        window = inputs if start is None else inputs[-k:]
        last = model.run(window, initial_state=start)[-1]
        loss = 0.5 * ((last - target) ** 2).sum()
        grads = torch.autograd.grad(loss, params)
        results[name] = dict(zip(names, grads, strict=True))
    return results


def gradient_gap(first: dict[str, Tensor], second: dict[str, Tensor]) -> float:
    """Euclidean norm of the difference of two gradients (all parameters together)."""
    return float(torch.sqrt(sum(((first[n] - second[n]) ** 2).sum() for n in first)))


def dilated_receptive_field(kernel_size: int, dilations: Sequence[int]) -> int:
    """Inputs seen by one output of stacked causal convolutions: ``1 + (K - 1) sum_l d_l``."""
    if kernel_size < 1 or any(d < 1 for d in dilations):
        raise ValueError("the kernel size and every dilation must be positive integers")
    return 1 + (kernel_size - 1) * sum(dilations)


def symbolic_doubling_receptive_field() -> tuple[sp.Symbol, sp.Symbol, sp.Expr]:
    """``(K, L, field)``: the receptive field of ``L`` causal convolutions of kernel size
    ``K`` with dilations ``1, 2, 4, ..., 2^(L-1)`` (WaveNet's pattern), summed by sympy."""
    K, L, layer = sp.symbols("K L l", positive=True, integer=True)
    field = 1 + (K - 1) * sp.summation(2**layer, (layer, 0, L - 1))
    return K, L, sp.simplify(field)


def _dilated_tree(length: int, dilations: Sequence[int]) -> list[list[tuple[int, int]]]:
    """Edges ``(source, target)`` per layer that feed the last output of a causal
    convolution stack with kernel size 2 (positions ``0..length-1``)."""
    needed = {length - 1}
    layers = []
    for dilation in reversed(dilations):
        edges = [(t - shift, t) for t in sorted(needed) for shift in (0, dilation) if t >= shift]
        layers.append(edges)
        needed = {source for source, _ in edges}
    return layers[::-1]


def context_diagram_figure(k: int = 8, length: int = 16) -> Figure:
    """Which inputs the last output depends on in the recurrent model, the truncated RNN of
    context ``k`` (a power of two, at most ``length``), dilated causal convolutions (kernel 2,
    dilations ``1, 2, ..., k/2``) and one attention layer over a window of ``k``."""
    if k < 2 or k & (k - 1) or k > length:
        raise ValueError(f"k must be a power of two between 2 and length = {length}, got {k}")
    apply_style()
    fig, axes = plt.subplots(4, 1, figsize=(8.0, 7.2))
    positions = list(range(length))
    used, unused = TRUNCATED_COLOR, "#c8c8c8"
    dilations = [2**i for i in range(k.bit_length() - 1)]
    panels = (
        ("recurrent model: all inputs, T dependent steps", 1),
        (f"truncated RNN: last k = {k} inputs, k dependent steps", 1),
        (
            f"dilated causal convolutions: {k} inputs, {len(dilations)} dependent layers",
            len(dilations),
        ),
        (f"attention over a window of k = {k}: {k} inputs, one layer", 1),
    )
    for ax, (title, depth) in zip(axes, panels, strict=True):
        ax.set_title(title, fontsize=9, loc="left")
        ax.set_xlim(-1.0, length)
        ax.set_ylim(-0.5, depth + 0.5)
        ax.axis("off")
    window = positions[length - k :]

    def inputs(ax, active):
        for t in positions:
            ax.plot(t, 0, "o", ms=6, color=used if t in active else unused)

    def chain(ax, active, states):  # the active inputs feed a chain of states
        inputs(ax, active)
        ax.plot(states, [1] * len(states), "-o", ms=5, color=FULL_COLOR)
        for t in active:
            ax.plot([t, t], [0, 1], color=FULL_COLOR, lw=0.8)

    chain(axes[0], positions, positions)  # recurrent: every input feeds the last state
    chain(axes[1], window, [window[0] - 1, *window])  # truncated: k states from zero
    axes[1].annotate("0", (window[0] - 1, 1), xytext=(-12, 4), textcoords="offset points")
    # dilated convolutions: the tree of connections behind the last output
    tree = _dilated_tree(length, dilations)
    inputs(axes[2], {source for source, _ in tree[0]})
    for layer, edges in enumerate(tree):
        for t in positions:
            axes[2].plot(t, layer + 1, "o", ms=3, color=unused)
        for source, target in edges:
            axes[2].plot([source, target], [layer, layer + 1], color=FULL_COLOR, lw=0.8)
            axes[2].plot(target, layer + 1, "o", ms=5, color=FULL_COLOR)
    # attention: the last output reads every input of the window directly
    inputs(axes[3], window)
    for t in window:
        axes[3].plot([t, length - 1], [0, 1], color=FULL_COLOR, lw=0.8)
    axes[3].plot(length - 1, 1, "o", ms=6, color=FULL_COLOR)
    axes[3].set_xlabel("input position")
    fig.tight_layout()
    return finish(fig)
