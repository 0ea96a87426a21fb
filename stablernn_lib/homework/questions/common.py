"""Independent reference computations (oracles) shared by the homework checks."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from stablernn_lib.homework.expect import expect_close
from stablernn_lib.homework.registry import CheckContext, CheckFunction


def fixed_instance(match: Callable[..., str], *instance: Any) -> CheckFunction:
    """The check ``(function, ctx) -> match(function, ctx, *instance)`` (a visible check)."""
    return lambda function, ctx: match(function, ctx, *instance)


def scaled_matrix(ctx: CheckContext, m: int, n: int, norm: float) -> torch.Tensor:
    """A Gaussian ``(m, n)`` matrix rescaled to spectral norm ``norm``."""
    W = ctx.randn(m, n)
    return W * norm / torch.linalg.matrix_norm(W, 2)


def svd_clip(W: torch.Tensor, radius: float) -> torch.Tensor:
    """``U min(S, radius) V^T``: the Frobenius projection onto ``{||W||_2 <= radius}``."""
    U, s, Vh = torch.linalg.svd(W, full_matrices=False)
    return U @ torch.diag(s.clamp(max=radius)) @ Vh


def tanh_rnn_states(W: torch.Tensor, U: torch.Tensor, inputs: torch.Tensor) -> torch.Tensor:
    """States ``h_1..h_T`` ``(T, B, H)`` of ``h_t = tanh(W h_{t-1} + U x_t)``, ``h_0 = 0``."""
    h = inputs.new_zeros(inputs.shape[1], W.shape[0])
    states = []
    for x in inputs:
        h = torch.tanh(h @ W.T + x @ U.T)
        states.append(h)
    return torch.stack(states)


def tanh_truncated_states(
    W: torch.Tensor, U: torch.Tensor, inputs: torch.Tensor, k: int
) -> torch.Tensor:
    """``h^k_t`` for every ``t`` ``(T, B, H)``: the RNN run on ``x_{t-k+1..t}`` from zero."""
    return torch.stack(
        [tanh_rnn_states(W, U, inputs[max(0, t - k + 1) : t + 1])[-1] for t in range(len(inputs))]
    )


def rnn_instance(ctx: CheckContext, T: int, B: int, D: int, H: int, lam: float):
    """A tanh RNN with ``||W||_2 = lam`` and Gaussian inputs ``(T, B, D)``."""
    return scaled_matrix(ctx, H, H, lam), ctx.randn(H, D), ctx.randn(T, B, D)


def truncated_states_match(function, ctx: CheckContext, T: int, k: int, B: int = 2) -> str:
    """Check ``function(W, U, inputs, k)`` against ``h^k_1..h^k_T`` of a random tanh RNN
    (``||W||_2`` drawn in ``[0.5, 1.5]``, ``D = 3``, ``H = 4``)."""
    W, U, inputs = rnn_instance(ctx, T, B, 3, 4, ctx.uniform(0.5, 1.5))
    given = f"T = {T}, k = {k}, B = {B}, D = 3, H = 4"
    got = ctx.call(function, W, U, inputs.clone(), k, given=given)
    return expect_close(got, tanh_truncated_states(W, U, inputs, k), "h^k_1..h^k_T", given)
