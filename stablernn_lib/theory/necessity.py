"""The necessity direction: what a truncated model cannot approximate is not stable.

If ``||h_t - h^k_t|| > eps`` for every ``k`` (states bounded by ``B``), then (1) ``phi_w`` is
``lambda``-contractive for no ``lambda < 1`` in no norm; (2) for every ``k`` some ``g`` on
``[0, h_{t-k}]`` has ``||d Phi_k(g) / d g|| >= eps / B``; (3) for the vanilla RNN
``L_rho ||W||_2 >= 1``.  The proof: ``h_t - h^k_t = Phi_k(h_{t-k}) - Phi_k(0) =
int_0^1 DPhi_k(theta h_{t-k}) h_{t-k} dtheta``, ``Phi_k`` the map over the last ``k`` inputs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import sympy as sp
import torch
from torch import Tensor

from stablernn_lib.core.models import LinearRNN, RecurrentMap, VanillaRNN
from stablernn_lib.core.truncation import truncated_states


def window_map(model: RecurrentMap, window: Tensor, state: Tensor) -> Tensor:
    """``Phi_k(state)``: the map over the inputs ``window (k, D)`` from ``state (S,)``."""
    current = state.unsqueeze(0)
    for x in window:
        current = model.step(current, x.unsqueeze(0))
    return current.squeeze(0)


def window_jacobians(model: RecurrentMap, window: Tensor, states: Tensor) -> Tensor:
    """``D Phi_k`` at ``N`` states ``(N, S)``: ``(N, S, S)``.  State ``n`` of the output depends
    only on state ``n`` of the input, so ``S`` backward passes of one batch give all ``N``."""
    with torch.enable_grad():
        current = start = states.detach().clone().requires_grad_(True)
        for x in window:
            current = model.step(current, x.unsqueeze(0).expand(states.shape[0], -1))
        rows = [
            torch.autograd.grad(current[:, i].sum(), start, retain_graph=True)[0]
            for i in range(states.shape[1])
        ]
    return torch.stack(rows, dim=1)


@dataclass(frozen=True)
class SegmentProfile:
    """On the segment ``theta * start``: ``gap = ||Phi_k(start) - Phi_k(0)||``,
    ``jacobian_norms[i] = ||D Phi_k(theta_i start)||_2`` and ``integral``, the trapezoid rule for
    ``int_0^1 ||D Phi_k(theta start) start|| dtheta >= gap``."""

    thetas: Tensor
    jacobian_norms: Tensor
    integrand: Tensor
    gap: float
    integral: float
    start_norm: float

    @property
    def largest_jacobian_norm(self) -> float:
        return float(self.jacobian_norms.max())

    @property
    def jacobian_at_start(self) -> float:
        """``||D Phi_k||`` along the trajectory the full model actually follows."""
        return float(self.jacobian_norms[-1])


def segment_profile(
    model: RecurrentMap, window: Tensor, start: Tensor, num_points: int = 201
) -> SegmentProfile:
    """The :class:`SegmentProfile` of ``num_points`` points from ``0`` to ``start``."""
    if num_points < 2:
        raise ValueError(f"num_points must be at least 2 (both ends), got {num_points}")
    thetas = torch.linspace(0.0, 1.0, num_points, dtype=start.dtype)
    jacobians = window_jacobians(model, window, thetas[:, None] * start)  # (num_points, S, S)
    norms_t = torch.linalg.matrix_norm(jacobians, ord=2)
    integrand_t = torch.linalg.vector_norm(jacobians @ start, dim=-1)
    with torch.no_grad():
        gap = window_map(model, window, start) - window_map(model, window, torch.zeros_like(start))
    return SegmentProfile(
        thetas=thetas,
        jacobian_norms=norms_t.detach(),
        integrand=integrand_t.detach(),
        gap=float(torch.linalg.vector_norm(gap)),
        integral=float(torch.trapezoid(integrand_t, thetas)),
        start_norm=float(torch.linalg.vector_norm(start)),
    )


@dataclass(frozen=True)
class NecessityRow:
    """One context ``k`` at the last time ``T`` of one sequence."""

    k: int
    gap: float  # ||h_T - h^k_T||, the truncated state from truncation.truncated_states
    state_norm: float  # ||h_{T-k}||
    largest_jacobian_norm: float  # max over the segment [0, h_{T-k}] of ||D Phi_k||
    jacobian_on_trajectory: float  # ||D Phi_k(h_{T-k})||, along the visited states
    mean_value_bound: float  # int_0^1 ||D Phi_k(theta h_{T-k}) h_{T-k}|| dtheta


def necessity_table(
    model: RecurrentMap, inputs: Tensor, ks: list[int], num_points: int = 201
) -> list[NecessityRow]:
    """Per ``k < T``: the truncation gap at the last time and the Jacobians the theorem
    relates to it; ``inputs`` is one sequence ``(T, 1, D)``."""
    model.check_inputs(inputs)
    if inputs.shape[1] != 1:
        raise ValueError(
            f"inputs must hold one sequence, shape (T, 1, D); got {tuple(inputs.shape)}"
        )
    T = inputs.shape[0]
    if any(k < 1 or k >= T for k in ks):
        raise ValueError(f"every context must satisfy 1 <= k < T = {T}; got {ks}")
    with torch.no_grad():
        states = model.run(inputs)[:, 0]
    rows = []
    for k in ks:
        with torch.no_grad():
            truncated = truncated_states(model, inputs, k)[-1, 0]
        start = states[T - k - 1]  # h_{T-k}
        profile = segment_profile(model, inputs[T - k :, 0], start, num_points)
        rows.append(
            NecessityRow(
                k=k,
                gap=float(torch.linalg.vector_norm(states[-1] - truncated)),
                state_norm=profile.start_norm,
                largest_jacobian_norm=profile.largest_jacobian_norm,
                jacobian_on_trajectory=profile.jacobian_at_start,
                mean_value_bound=profile.integral,
            )
        )
    return rows


def table_markdown(rows: list[NecessityRow]) -> str:
    """Markdown: the gap, ``gap / ||h_{T-k}||`` (part 2's lower bound on the largest
    Jacobian on the segment), that largest Jacobian, and the Jacobian along the trajectory."""
    lines = [
        "| k | gap at T | gap / state norm | largest Jacobian on the segment "
        "| Jacobian on the trajectory |",
        "| ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in rows:
        lines.append(
            f"| {row.k} | {row.gap:.4f} | {row.gap / max(row.state_norm, 1e-300):.4f} | "
            f"{row.largest_jacobian_norm:.3g} | {row.jacobian_on_trajectory:.3g} |"
        )
    return "\n".join(lines)


def bistable_rnn(weight: float = 2.0, dtype: torch.dtype = torch.float64) -> VanillaRNN:
    """The one-unit RNN ``h' = tanh(weight * h + x)``.  For ``weight > 1`` it has three
    fixed points at ``x = 0``: ``0`` (unstable, slope ``weight``) and ``+-h*`` (attracting)."""
    model = VanillaRNN(1, 1, activation="tanh", dtype=dtype)
    with torch.no_grad():
        model.weight_hh.fill_(weight)
        model.weight_ih.fill_(1.0)
    return model


def memory_line(dtype: torch.dtype = torch.float64) -> LinearRNN:
    """``h' = h + x``: the state keeps every input; every Jacobian product is exactly 1."""
    model = LinearRNN(1, 1, dtype=dtype)
    with torch.no_grad():
        model.weight_hh.fill_(1.0)
        model.weight_ih.fill_(1.0)
    return model


def pulse(length: int, amplitude: float = 3.0, dtype: torch.dtype = torch.float64) -> Tensor:
    """One input sequence ``(length, 1, 1)``: ``amplitude`` at ``t = 1``, then zeros."""
    inputs = torch.zeros(length, 1, 1, dtype=dtype)
    inputs[0] = amplitude
    return inputs


def attracting_fixed_point(weight: float) -> float:
    """The positive solution of ``h = tanh(weight * h)`` for ``weight > 1`` (bisection)."""
    if weight <= 1:
        raise ValueError(f"tanh(w h) has a nonzero fixed point only for w > 1; got w = {weight}")
    low, high = 1e-12, 1.0
    for _ in range(200):
        middle = (low + high) / 2
        low, high = (middle, high) if math.tanh(weight * middle) > middle else (low, middle)
    return (low + high) / 2


def rnn_norm_lower_bound(gap: float, state_bound: float, k: int) -> float:
    """``(gap / B)^(1/k)``: part 3 of the theorem says ``L_rho ||W||_2`` is at least this."""
    return (gap / state_bound) ** (1.0 / k)


def contraction_context_solution() -> tuple[sp.Expr, sp.Expr]:
    """``k`` solving ``c lambda^k B = eps``: (sympy's solution,
    ``log(c B / eps) / log(1/lambda)``)."""
    c, lam, B, eps, k = sp.symbols("c lambda B varepsilon k", positive=True)
    (solution,) = sp.solve(sp.Eq(c * lam**k * B, eps), k)
    return solution, sp.log(c * B / eps) / sp.log(1 / lam)


def root_limit() -> sp.Expr:
    """``lim_{k -> oo} (eps / B)^(1/k)`` for ``0 < eps <= B``: equals 1 (part 3)."""
    eps, B, k = sp.symbols("varepsilon B k", positive=True)
    return sp.limit((eps / B) ** (1 / k), k, sp.oo)


def chain_rule_on_segment() -> sp.Expr:
    """``d/dtheta Phi(theta h) - Phi'(theta h) h`` for a two-step tanh map; simplifies to 0."""
    theta, h, w, a, b = sp.symbols("theta h w a b", real=True)
    g = sp.Symbol("g", real=True)
    two_steps = sp.tanh(w * sp.tanh(w * g + a) + b)
    along = two_steps.subs(g, theta * h)
    return sp.simplify(sp.diff(along, theta) - sp.diff(two_steps, g).subs(g, theta * h) * h)


def fixed_point_slope(weight: float = 2.0) -> tuple[float, float]:
    """``(h*, slope)`` of ``h -> tanh(weight h)`` at its positive fixed point, with sympy:
    the slope ``weight (1 - tanh(weight h*)^2) = weight (1 - h*^2)`` is below 1."""
    h = sp.Symbol("h", positive=True)
    w = sp.Float(weight)
    point = sp.nsolve(sp.tanh(w * h) - h, h, 0.9)
    slope = sp.diff(sp.tanh(w * h), h).subs(h, point)
    return float(point), float(slope)
