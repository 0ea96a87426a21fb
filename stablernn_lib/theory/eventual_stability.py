"""Eventual stability, and what rules out stability in every norm (Chapter 4).

``(kappa, lambda)``-eventually stable on ``D``: ``||Phi_k(h) - Phi_k(h')|| <= kappa lambda^k
||h - h'||`` for ``h, h'`` in ``D``, ``k >= 0``; a contraction in a norm with
``a ||v|| <= ||v||_* <= b ||v||`` has ``kappa = b / a``.  A fixed point of ``phi(., x)`` with
Jacobian spectral radius ``>= 1``, or two distinct fixed points, rule it out in every norm.
"""

from __future__ import annotations

import sympy as sp
import torch
from torch import Tensor

from stablernn_lib.core import bounds
from stablernn_lib.core.contraction import state_jacobians
from stablernn_lib.core.models import RecurrentMap


def eventual_truncation_bound(kappa: float, lam: float, lx: float, bx: float, k: int) -> float:
    """Lemma 1 under eventual stability: ``kappa lambda^k L_x B_x / (1 - lambda)``."""
    if kappa < 1:
        raise ValueError(f"kappa must be at least 1 (k = 0 gives kappa >= 1), got {kappa}")
    return kappa * bounds.lemma1_truncation_bound(lam, lx, bx, k)


def telescoping_sum_identity() -> tuple[sp.Expr, sp.Expr]:
    """``(sum, closed form)``: ``sum_{i=k}^{t-1} kappa lambda^i L_x B_x =
    kappa lambda^k L_x B_x (1 - lambda^(t-k)) / (1 - lambda)``, ``lambda = 1 / (1 + r)``."""
    kappa, L, B, r = sp.symbols("kappa L_x B_x r", positive=True)
    i, t, k = sp.symbols("i t k", integer=True, nonnegative=True)
    lam = 1 / (1 + r)
    total = sp.summation(kappa * lam**i * L * B, (i, k, t - 1))
    closed = kappa * lam**k * L * B * (1 - lam ** (t - k)) / (1 - lam)
    return total, closed


def fixed_point_spectral_radius(
    model: RecurrentMap, state: Tensor, x: Tensor
) -> tuple[float, float]:
    """``(||phi(s, x) - s||, spectral radius of d phi / d s at s)`` for one state ``(S,)``."""
    states, inputs = state[None].to(model.weight_hh.dtype), x[None].to(model.weight_hh.dtype)
    with torch.no_grad():
        residual = float((model.step(states, inputs) - states).norm())
    jacobian = state_jacobians(model, states, inputs)[0].detach()
    return residual, float(torch.linalg.eigvals(jacobian).abs().max())


@torch.no_grad()
def settled_states(model: RecurrentMap, x: Tensor, starts: Tensor, steps: int = 3000) -> Tensor:
    """``phi(., x)^steps (s)`` for each start ``(N, S)``: the states a constant input settles in."""
    states = starts.to(model.weight_hh.dtype)
    inputs = x.to(states.dtype).expand(len(states), -1)
    for _ in range(steps):
        states = model.step(states, inputs)
    return states


def distinct_limits(states: Tensor, tolerance: float = 1e-6) -> Tensor:
    """The distinct rows of ``states`` (rows closer than ``tolerance`` are merged): ``(M, S)``."""
    limits: list[Tensor] = []
    for row in states:
        if all(float((row - seen).norm()) > tolerance for seen in limits):
            limits.append(row)
    return torch.stack(limits)
