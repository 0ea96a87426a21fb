"""The factor k of Lemma 2 (Chapter 7b): on the one-unit linear RNN W = lambda, U = 1,
x_t = 1, target -1, the gradient gap contains (L_p B_h / lambda) k lambda^k, so the ratio
gap / (gamma k lambda^k) tends to (L_p B_h / lambda) / gamma > 0 and not to 0."""

from __future__ import annotations

import math

import pytest
import torch

from stablernn_lib.core import bounds
from stablernn_lib.theory import tightness

TARGET = -1.0


def witness(lam: float, steps: int) -> tuple[torch.Tensor, ...]:
    W = torch.tensor([[lam]], dtype=torch.float64)
    U = torch.tensor([[1.0]], dtype=torch.float64)
    inputs = torch.ones(steps, 1, dtype=torch.float64)
    return W, U, inputs, torch.tensor([TARGET], dtype=torch.float64)


def gamma(lam: float) -> float:
    bh = bounds.state_norm_bound(lam, 1.0, 1.0)
    lp, sp = bounds.squared_loss_constants(bh, abs(TARGET))
    return bounds.lemma2_gamma(bounds.GradientConstants(lam, 1.0, 1.0, lp, sp, 1.0, 0.0))


def closed_form_gap(lam: float, steps: int, k: int) -> float:
    """grad p_T - grad p^k_T in (W, U) by hand: (h_T - y) (dh_T - dh^k_T) + (h_T - h^k_T) dh^k_T."""
    h_full = sum(lam**j for j in range(steps))
    h_trunc = sum(lam**j for j in range(k))
    d_full = (sum(j * lam ** (j - 1) for j in range(1, steps)), h_full)
    d_trunc = (sum(j * lam ** (j - 1) for j in range(1, k)), h_trunc)
    gap = [
        (h_full - TARGET) * (f - t) + (h_full - h_trunc) * t
        for f, t in zip(d_full, d_trunc, strict=True)
    ]
    return math.hypot(*gap)


@pytest.mark.parametrize("lam", [0.1, 0.5, 0.9])
@pytest.mark.parametrize("k", [1, 3, 8])
def test_the_library_ratio_is_the_hand_computed_gap_over_gamma_k_lambda_k(lam, k):
    steps = 60 if lam < 0.5 else 400
    ratio = tightness.lemma2_ratio(*witness(lam, steps), "identity", k)
    expected = closed_form_gap(lam, steps, k) / (gamma(lam) * k * lam**k)
    assert ratio == pytest.approx(expected, rel=1e-6)
    assert ratio <= 1.0


def test_the_ratio_falls_towards_a_positive_limit_so_the_factor_k_is_needed():
    lam, steps = 0.5, 200
    bh = bounds.state_norm_bound(lam, 1.0, 1.0)
    limit = (bh + abs(TARGET)) * bh / lam / gamma(lam)
    ratios = [tightness.lemma2_ratio(*witness(lam, steps), "identity", k) for k in (1, 5, 20, 40)]
    assert all(a > b for a, b in zip(ratios, ratios[1:], strict=False))  # falls with k ...
    assert all(r > limit for r in ratios)  # ... but stays above the limit
    assert ratios[-1] < 1.06 * limit  # and approaches it: a bound C lambda^k would fail
    assert limit == pytest.approx(0.401, abs=1e-3)
