"""Lemmas 2 and 3 for a general contractive map (Chapter 6): the constants assembled by
sympy from the solved recursions, their vanilla-RNN instance, and the LSTM's L_w."""

from __future__ import annotations

import math

import pytest
import sympy as sp
import torch

from stablernn_lib import general_lemmas as gl
from stablernn_lib import lemma_algebra as la
from stablernn_lib import lstm_stability as ls
from stablernn_lib.models import LSTMMap


def test_rsolve_solutions_match_iterating_the_recursions():
    solved = gl.solved_recursions()
    values = {
        gl.lam: 0.83,
        gl.L_w: 1.7,
        gl.delta: 0.3,
        gl.K_ss: 0.4,
        gl.K_sw: 1.1,
        gl.B_s: 2.5,
        la.Lp: 1.3,
        la.Sp: 0.9,
        gl.k: 6,
    }
    forcing = {
        "forward": lambda m: 1.7 * 0.3,
        "backward_lemma2": lambda m: 0.4 * 2.5 * 1.3 * 0.83**5,
    }
    c = 1.3 * (0.4 * 1.7 / (1 - 0.83) + 1.1)
    forcing["backward_lemma3"] = lambda m: c * 0.3 * 0.83**m
    for name, force in forcing.items():
        value = float(solved[name].subs(values).subs(gl.n, 0))
        for m in range(40):
            expected = float(solved[name].subs(values).subs(gl.n, m + 1))
            value = 0.83 * value + force(m)
            assert value == pytest.approx(expected, rel=1e-10)


def test_assembled_constants_equal_the_printed_ones():
    assert sp.simplify(gl.general_gamma() - gl.stated_gamma()) == 0
    assert sp.simplify(gl.general_beta() - gl.stated_beta()) == 0


def test_vanilla_rnn_instance_recovers_chapter6_constants_exactly():
    gamma, beta = gl.rnn_gamma_beta()
    assert sp.simplify(gamma - la.lemma2_gamma_expression()) == 0
    assert sp.simplify(beta - la.lemma3_beta_expression()) == 0


def test_constants_grow_in_every_second_order_bound():
    """A worse map never gets a smaller constant: all partial derivatives are >= 0."""
    for expression in (gl.general_gamma(), gl.general_beta()):
        for symbol in (gl.L_w, gl.K_ss, gl.K_sw, gl.K_ws, gl.K_ww, gl.B_s, la.Lp, la.Sp):
            derivative = sp.diff(expression, symbol)
            for lam_value in (0.1, 0.5, 0.95):
                point = {s: 1.3 for s in expression.free_symbols}
                point[gl.lam] = lam_value
                assert float(derivative.subs(point)) >= 0


def test_lstm_weight_lipschitz_bound_holds_on_random_instances(generator):
    constraint = ls.course_lstm_constraint(input_radius=3.0, bias_bound=4.0)
    uniform = constraint.uniform_certificate(1.0)
    hidden, inputs = 4, 3
    bound = gl.lstm_weight_lipschitz(uniform.cell_bound, uniform.weights, hidden, inputs, 1.0)
    worst = 0.0
    for _ in range(20):
        models = []
        for _ in range(2):
            model = LSTMMap(inputs, hidden, bias=True, dtype=torch.float64)
            with torch.no_grad():
                for param in (model.weight_hh, model.weight_ih, model.bias):
                    param.copy_(3 * torch.randn(param.shape, generator=generator).double())
            ls.project_lstm_(model, constraint=constraint)
            models.append(model)
        n = 300
        states = 2 * torch.rand(n, 2 * hidden, generator=generator, dtype=torch.float64) - 1
        states[:, :hidden] *= uniform.cell_bound
        x = 2 * torch.rand(n, inputs, generator=generator, dtype=torch.float64) - 1
        with torch.no_grad():
            gap = ls.weighted_state_norm(
                models[0].step(states, x) - models[1].step(states, x),
                hidden,
                uniform.weights,
                math.inf,
            )
            distance = math.sqrt(
                sum(
                    float(((a - b) ** 2).sum())
                    for a, b in zip(models[0].parameters(), models[1].parameters(), strict=True)
                )
            )
        worst = max(worst, float(gap.max()) / distance)
    assert 0 < worst <= bound


def test_proposition2_exact_rate_is_the_gamma_function_form():
    from stablernn_lib import weights_close

    t, c, d = sp.symbols("t c d", positive=True)
    closed = d / c * (sp.gamma(t + c) / (sp.gamma(1 + c) * sp.gamma(t)) - 1)
    assert sp.simplify(weights_close.symbolic_recurrence_solution() - closed) == 0
    # numerically: iterating the recurrence gives the closed form, below alpha g N^(c+1)
    for alpha, beta, g in ((1.0, 0.3, 1e-2), (0.5, 2.0, 1.0), (2.0, 0.05, 3.0)):
        cc, dd, e = alpha * beta, alpha * g, 0.0
        for step in range(1, 500):
            e = (1 + cc / step) * e + dd / step
            n_steps = step  # e is e_{N+1} after N = step steps
            exact = (
                g
                / beta
                * math.exp(
                    math.lgamma(n_steps + 1 + cc) - math.lgamma(1 + cc) - math.lgamma(n_steps + 1)
                )
                - g / beta
            )
            assert e == pytest.approx(exact, rel=1e-9)
            assert exact <= alpha * g * n_steps ** (cc + 1) * (1 + 1e-12)
