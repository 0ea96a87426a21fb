"""Explicit constants of the bounds.  Lemma 1: if ``phi_w`` is ``lambda``-contractive,
``L_x``-Lipschitz in ``x``, ``phi_w(0, 0) = 0`` and ``||x_t|| <= B_x``, then
``||h_t - h^k_t|| <= lambda^k L_x B_x / (1 - lambda)``."""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass


def _check_contraction(lam: float) -> None:
    if not 0 <= lam < 1:
        raise ValueError(
            f"the bound needs a contractive model, 0 <= lambda < 1, got lambda = {lam}; "
            "project the weights onto the stable set first"
        )


def _check_nonnegative(**values: float) -> None:
    for name, value in values.items():
        if value < 0:
            raise ValueError(f"{name} must be non-negative, got {value}")


def state_norm_bound(lam: float, lx: float, bx: float) -> float:
    """``sup_s ||h_s|| <= L_x B_x / (1 - lambda)`` (the geometric series of Lemma 1)."""
    _check_contraction(lam)
    _check_nonnegative(lx=lx, bx=bx)
    return lx * bx / (1 - lam)


def lemma1_truncation_bound(lam: float, lx: float, bx: float, k: int) -> float:
    """``||h_t - h^k_t|| <= lambda^k L_x B_x / (1 - lambda)`` for every ``t``."""
    if k < 0:
        raise ValueError(f"the context k must be non-negative, got {k}")
    return lam**k * state_norm_bound(lam, lx, bx)


def lemma1_context(lam: float, lx: float, bx: float, eps: float) -> int:
    """Smallest ``k`` with ``lambda^k L_x B_x / (1 - lambda) <= eps`` (0 when ``k = 0`` does)."""
    if eps <= 0:
        raise ValueError(f"eps must be positive, got {eps}")
    radius = state_norm_bound(lam, lx, bx)
    if radius <= eps:
        return 0
    if lam == 0:
        return 1
    k = math.ceil(math.log(radius / eps) / math.log(1 / lam))
    # guard against rounding: the returned k must satisfy the bound
    while lemma1_truncation_bound(lam, lx, bx, k) > eps:
        k += 1
    return k


# Lemmas 2 and 3 for the vanilla RNN ``h_t = rho(W h_{t-1} + U x_t)``, ``h_0 = 0``,
# with the loss ``p_T = l(h_T)`` of the last state, parameters ``w = (W, U)`` measured
# in the Frobenius norm ``||w||^2 = ||W||_F^2 + ||U||_F^2``.  Assumptions (Chapter 6):
# ``|rho'| <= L_rho``, ``|rho''| <= L2_rho``, ``rho(0) = 0``; ``L_rho ||W||_2 <= lambda < 1``;
# ``L_rho ||U||_2 <= L_x``; ``||x_t|| <= B_x``; on the ball ``||h|| <= B_h`` the loss has
# ``||grad l(h)|| <= L_p`` and ``grad l`` is ``S_p``-Lipschitz.  With
# ``B_h = L_x B_x / (1 - lambda)`` and ``B_z = sqrt(B_h^2 + B_x^2)`` (the norm of the
# pair ``(h_{t-1}, x_t)`` that multiplies the back-propagated error in the gradient).

ACTIVATION_SECOND_DERIVATIVE: dict[str, float] = {
    "tanh": 4 / (3 * math.sqrt(3)),  # max |tanh''| at tanh = 1/sqrt(3)
    "identity": 0.0,
}


def activation_smoothness(name: str) -> float:
    """``L2_rho = sup |rho''|`` of a smooth activation with ``rho(0) = 0`` (not ReLU, sigmoid)."""
    if name not in ACTIVATION_SECOND_DERIVATIVE:
        raise ValueError(
            f"Lemmas 2 and 3 need a smooth activation with rho(0) = 0, got {name!r}; "
            f"use one of {sorted(ACTIVATION_SECOND_DERIVATIVE)}"
        )
    return ACTIVATION_SECOND_DERIVATIVE[name]


def _check_open_contraction(lam: float) -> None:
    if not 0 < lam < 1:
        raise ValueError(
            f"Lemmas 2 and 3 need 0 < lambda < 1, got lambda = {lam}; project the weights "
            "onto the stable set (any lambda >= L_rho ||W||_2 may be used, so take lambda > 0)"
        )


def squared_loss_constants(state_bound: float, target_norm: float) -> tuple[float, float]:
    """``(L_p, S_p) = (B_h + ||y||, 1)`` of ``l(h) = ||h - y||^2 / 2`` on ``||h|| <= B_h``."""
    _check_nonnegative(state_bound=state_bound, target_norm=target_norm)
    return state_bound + target_norm, 1.0


def gradient_input_bound(lam: float, lx: float, bx: float) -> float:
    """``B_z = sqrt(B_h^2 + B_x^2)`` with ``B_h = L_x B_x / (1 - lambda)``."""
    return math.hypot(state_norm_bound(lam, lx, bx), bx)


@dataclass(frozen=True)
class GradientConstants:
    """``lambda, L_x, B_x, L_p, S_p, L_rho, L2_rho`` of the comment above (default: tanh's)."""

    lam: float
    lx: float
    bx: float
    lp: float
    sp: float
    l_rho: float = 1.0
    l2_rho: float = ACTIVATION_SECOND_DERIVATIVE["tanh"]

    def __post_init__(self) -> None:
        _check_nonnegative(lx=self.lx, bx=self.bx, lp=self.lp, sp=self.sp)
        if not self.l_rho > 0:
            raise ValueError(f"l_rho = sup |rho'| must be positive, got {self.l_rho}")
        _check_nonnegative(l2_rho=self.l2_rho)


def lemma2_gamma(c: GradientConstants) -> float:
    """Lemma 2's ``gamma`` (``0 < lambda < 1``)::

        gamma = B_z * (L2_rho L_p B_h / (L_rho (1 - lambda)) + L_rho S_p B_h
                       + L_rho L_p / (1 - lambda))
                + L_rho L_p B_h / lambda

    in ``||grad_w p_T - grad_w p^k_T|| <= gamma k lambda^k``."""
    _check_open_contraction(c.lam)
    bh = state_norm_bound(c.lam, c.lx, c.bx)
    bz = math.hypot(bh, c.bx)
    error_terms = c.l2_rho * c.lp * bh / (c.l_rho * (1 - c.lam)) + c.l_rho * c.sp * bh
    tail = c.l_rho * c.lp / (1 - c.lam)
    return bz * (error_terms + tail) + c.l_rho * c.lp * bh / c.lam


def lemma3_beta(c: GradientConstants) -> float:
    """Lemma 3's ``beta`` (``0 <= lambda < 1``)::

        beta = (L2_rho L_p + L_rho^2 S_p) B_z^2 / (1 - lambda)^2
               + lambda L2_rho L_p B_z^2 / (1 - lambda)^3
               + 2 L_rho^2 L_p B_z / (1 - lambda)^2

    in ``||grad p_T(w) - grad p_T(w')|| <= beta ||w - w'||``."""
    _check_contraction(c.lam)
    bz = gradient_input_bound(c.lam, c.lx, c.bx)
    gap = 1 - c.lam
    return (
        (c.l2_rho * c.lp + c.l_rho**2 * c.sp) * bz**2 / gap**2
        + c.lam * c.l2_rho * c.lp * bz**2 / gap**3
        + 2 * c.l_rho**2 * c.lp * bz / gap**2
    )


def lemma2_gradient_bound(gamma: float, k: int, lam: float) -> float:
    """The right side ``gamma k lambda^k`` of Lemma 2 for context ``k >= 1``."""
    _check_open_contraction(lam)
    _check_nonnegative(gamma=gamma)
    if isinstance(k, bool) or not isinstance(k, numbers.Integral) or k < 1:
        raise ValueError(f"the context k must be an int >= 1, got {k!r}")
    return gamma * k * lam**k
