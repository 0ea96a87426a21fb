"""The bounds' VALUES against independent computations, and their tightness on worst cases.

The other test files check that each bound *holds*; a bound made too large by a constant
factor passes those.  Here every constant is recomputed another way (the sympy
expressions of the proofs, float64 brute force, closed forms) and compared to the library
at ``rel = 1e-12``, and worst-case instances reach the bounds, so a bound made smaller
fails too.  Mutation testing (``make mutants``) showed which checks were missing.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import sympy as sp
import torch

from stablernn_lib import bounds
from stablernn_lib import general_lemmas as gl
from stablernn_lib import lemma_algebra as la
from stablernn_lib import lstm_stability as ls
from stablernn_lib.models import LSTMMap

# (lam, lx, bx, lp, sp, l_rho, l2_rho): l_rho != 1 so that no power of it can be dropped
POINTS = [
    (0.3, 1.7, 0.8, 2.1, 0.6, 0.9, 0.35),
    (0.9, 0.4, 2.5, 0.7, 1.3, 0.25, 0.1),
    (0.55, 1.0, 1.0, 1.0, 1.0, 1.0, bounds.ACTIVATION_SECOND_DERIVATIVE["tanh"]),
]


def _symbolic(expression: sp.Expr, lam, lx, bx, lp, sp_, l_rho, l2_rho) -> float:
    bh = lx * bx / (1 - lam)
    values = {
        la.lam: lam, la.Lx: lx, la.Bx: bx, la.Lp: lp, la.Sp: sp_, la.L_rho: l_rho,
        la.L2_rho: l2_rho, la.Bh: bh, la.Bz: math.hypot(bh, bx),
    }  # fmt: skip
    return float(expression.subs(values))


@pytest.mark.parametrize("point", POINTS)
def test_gamma_and_beta_equal_the_sympy_expressions_of_the_proofs(point):
    lam, lx, bx, lp, sp_, l_rho, l2_rho = point
    kwargs = {"l_rho": l_rho, "l2_rho": l2_rho}
    gamma = bounds.lemma2_gamma(lam, lx, bx, lp, sp_, **kwargs)
    beta = bounds.lemma3_beta(lam, lx, bx, lp, sp_, **kwargs)
    assert gamma == pytest.approx(_symbolic(la.lemma2_gamma_expression(), *point), rel=1e-12)
    assert beta == pytest.approx(_symbolic(la.lemma3_beta_expression(), *point), rel=1e-12)
    # and both equal the general lemma's constants instantiated for the RNN (rsolve)
    derived_gamma, derived_beta = gl.rnn_gamma_beta()
    assert gamma == pytest.approx(_symbolic(derived_gamma, *point), rel=1e-12)
    assert beta == pytest.approx(_symbolic(derived_beta, *point), rel=1e-12)


@pytest.mark.parametrize(("lam", "lx", "bx"), [(0.0, 2.0, 0.5), (0.6, 1.5, 2.0), (0.95, 0.3, 1.0)])
def test_state_bound_is_the_limit_of_the_worst_trajectory(lam, lx, bx):
    """``h_s = lam h_{s-1} + L_x B_x`` (one unit, aligned input) converges to the bound."""
    h = 0.0
    for _ in range(2000):
        h = lam * h + lx * bx
    assert bounds.state_norm_bound(lam, lx, bx) == pytest.approx(h, rel=1e-12)
    assert bounds.gradient_input_bound(lam, lx, bx) == pytest.approx(math.sqrt(h**2 + bx**2))


@pytest.mark.parametrize(("lam", "k"), [(0.2, 1), (0.5, 3), (0.9, 7)])
def test_lemma1_bound_is_attained_in_the_limit(lam, k):
    """The exercise of the tightness page: ``W = lam``, ``U = L_x``, ``x_t = B_x``.

    The gap at time ``t`` is ``(1 - lam^(t-k))`` times the bound, by float64 iteration."""
    lx, bx, t = 1.3, 0.7, 400
    h = h_k = 0.0
    for step in range(t):
        h = lam * h + lx * bx
        h_k = lam * h_k + lx * bx if step >= t - k else 0.0
    bound = bounds.lemma1_truncation_bound(lam, lx, bx, k)
    assert (h - h_k) / bound == pytest.approx(1 - lam ** (t - k), rel=1e-12)


@pytest.mark.parametrize(
    ("lam", "lx", "bx", "eps"),
    [(0.5, 1.0, 1.0, 1e-3), (0.9, 2.0, 3.0, 0.1), (0.99, 0.5, 1.0, 1e-6), (0.5, 1.0, 1.0, 5.0)],
)
def test_lemma1_context_is_the_smallest_sufficient_k(lam, lx, bx, eps):
    k = bounds.lemma1_context(lam, lx, bx, eps)
    smallest = next(j for j in range(10_000) if lam**j * lx * bx / (1 - lam) <= eps)
    assert k == smallest


def test_squared_loss_constants_are_attained_on_the_ball():
    """``sup ||h - y||`` over ``||h|| <= B`` is ``B + ||y||`` at ``h = -B y / ||y||``."""
    y = np.array([0.3, -1.2, 0.4])
    radius = 2.5
    lp, sp_ = bounds.squared_loss_constants(radius, float(np.linalg.norm(y)))
    attained = float(np.linalg.norm(-radius * y / np.linalg.norm(y) - y))
    assert lp == pytest.approx(attained, rel=1e-12) and sp_ == 1.0


def test_tanh_second_derivative_bound_is_its_maximum():
    u = np.linspace(0, 3, 300_001)
    second = np.abs(-2 * np.tanh(u) * (1 - np.tanh(u) ** 2))
    assert bounds.activation_smoothness("tanh") == pytest.approx(second.max(), rel=1e-9)


def test_lemma2_right_side_value():
    assert bounds.lemma2_gradient_bound(2.5, 3, 0.4) == pytest.approx(2.5 * 3 * 0.4**3, rel=1e-15)


# ----------------------------------------------------------------------------- LSTM


def _worst_lw_model(hidden: int, inputs: int, constraint: ls.LSTMConstraint) -> LSTMMap:
    """No weights; input gate saturated (bias at its top), forget and candidate at 0.

    Then ``d c'_j / d a_f = sigma'(0) c_j = C / 4`` and ``d c'_j / d a_z = i_j -> 1``: the
    two largest terms of ``kappa_c`` are attained together."""
    model = LSTMMap(inputs, hidden, bias=True, dtype=torch.float64)
    with torch.no_grad():
        model.weight_hh.zero_()
        model.weight_ih.zero_()
        model.bias.zero_()
        model.bias[:hidden] = constraint.bias_max["i"]
    return model


def test_lstm_weight_lipschitz_is_nearly_attained_at_a_corner_of_the_box():
    """``L_w`` against the autograd Jacobian in the weights, at ``|h| = 1``, ``|x| = B``,
    ``c = C``: the ratio is above 0.9, so dropping the ``C^2 / 16`` terms (or scaling
    ``L_w`` by 0.9) breaks it."""
    hidden, inputs, bound = 3, 2, 1.0
    constraint = ls.course_lstm_constraint()
    uniform = constraint.uniform_certificate(bound)
    v_c, v_h = uniform.weights
    model = _worst_lw_model(hidden, inputs, constraint)
    state = torch.cat([torch.full((hidden,), uniform.cell_bound), torch.ones(hidden)]).double()
    x = torch.full((inputs,), bound, dtype=torch.float64)
    out = model.step(state[None], x[None])[0]
    rows = torch.stack([
        torch.cat([g.reshape(-1) for g in torch.autograd.grad(out[r], list(model.parameters()),
                                                              retain_graph=True)]).norm()
        for r in range(2 * hidden)
    ])  # fmt: skip
    weights = torch.cat([torch.full((hidden,), v_c), torch.full((hidden,), v_h)]).double()
    measured = float((rows / weights).max())
    bound_lw = gl.lstm_weight_lipschitz(uniform.cell_bound, uniform.weights, hidden, inputs, bound)
    assert 0.9 < measured / bound_lw <= 1 + 1e-12


def test_cell_box_is_attained_when_every_gate_is_at_its_maximum():
    """``C = i_max z_max / (1 - F)``: with positive weights, ``h = 1``, ``x = B`` and
    ``c = C`` every gate sits at its maximum and ``c' = i_max z_max + F C = C`` exactly."""
    g = torch.Generator().manual_seed(3)
    hidden, inputs, bound = 3, 2, 1.0
    model = LSTMMap(inputs, hidden, bias=True, dtype=torch.float64)
    with torch.no_grad():
        model.weight_hh.copy_(0.2 * torch.rand(model.weight_hh.shape, generator=g))
        model.weight_ih.copy_(0.2 * torch.rand(model.weight_ih.shape, generator=g))
        model.bias.copy_(torch.rand(model.bias.shape, generator=g))  # b_z > 0: z_max > 0
    certificate = ls.lstm_certificate(model, bound)
    state = torch.cat([certificate.cell_bound, torch.ones(hidden, dtype=torch.float64)])
    x = torch.full((inputs,), bound, dtype=torch.float64)
    with torch.no_grad():
        c, h = model.split_state(model.step(state[None], x[None]))
    assert torch.allclose(c[0], certificate.cell_bound, rtol=1e-12)
    assert (h.abs() <= 1).all()
