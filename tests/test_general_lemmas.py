"""Lemmas 2 and 3 for a general contractive map (Chapter 6): the constants assembled by
sympy from the solved recursions, their vanilla-RNN instance, and the LSTM's L_w."""

from __future__ import annotations

import math

import numpy as np
import pytest
import sympy as sp
import torch

from stablernn_lib.core.models import LSTMMap
from stablernn_lib.symbolic import lemma_algebra as la
from stablernn_lib.theory import general_lemmas as gl
from stablernn_lib.theory import lstm_certificate as ls


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
    from stablernn_lib.theory import weights_close

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


def _lstm_step(params, state, x, hidden, inputs):
    """The LSTM map with flat parameters ``(W_hh, W_ih, b)``; gates (i, f, z, o)."""
    n_hh, n_ih = 4 * hidden * hidden, 4 * hidden * inputs
    w_hh = params[:n_hh].reshape(4 * hidden, hidden)
    w_ih = params[n_hh : n_hh + n_ih].reshape(4 * hidden, inputs)
    bias = params[n_hh + n_ih :]
    c, h = state[:hidden], state[hidden:]
    a = w_hh @ h + w_ih @ x + bias
    i, f, z, o = (
        torch.sigmoid(a[:hidden]),
        torch.sigmoid(a[hidden : 2 * hidden]),
        torch.tanh(a[2 * hidden : 3 * hidden]),
        torch.sigmoid(a[3 * hidden :]),
    )
    c_next = i * z + f * c
    return torch.cat([c_next, o * torch.tanh(c_next)])


def test_lstm_second_order_constants_hold_on_random_pairs(generator):
    from torch.autograd.functional import jacobian

    hidden, inputs = 3, 2
    constraint = ls.course_lstm_constraint(input_radius=3.0, bias_bound=4.0)
    uniform = constraint.uniform_certificate(1.0)
    forget = float(constraint.matrix(1.0)[0, 0])
    K = gl.lstm_second_order_constants(
        constraint.recurrent_radius,
        forget,
        uniform.cell_bound,
        uniform.weights,
        hidden,
        inputs,
        1.0,
    )
    v_c, v_h = uniform.weights
    w = torch.cat([torch.full((hidden,), v_c), torch.full((hidden,), v_h)]).double()

    def state_norm(s):
        return float((s.abs() / w).max())

    def random_params(scale):
        model = LSTMMap(inputs, hidden, bias=True, dtype=torch.float64)
        with torch.no_grad():
            for param in (model.weight_hh, model.weight_ih, model.bias):
                param.copy_(scale * torch.randn(param.shape, generator=generator).double())
        ls.project_lstm_(model, constraint=constraint)
        flat = [model.weight_hh.flatten(), model.weight_ih.flatten(), model.bias]
        return torch.cat(flat).detach()

    def random_state():
        s = 2 * torch.rand(2 * hidden, generator=generator, dtype=torch.float64) - 1
        s[:hidden] *= uniform.cell_bound
        return s

    limit = torch.cat([torch.full((hidden,), uniform.cell_bound), torch.ones(hidden)]).double()
    worst = {"J": 0.0, "G": 0.0}
    for trial in range(60):
        p1 = random_params([0.3, 3.0][trial % 2])
        s1, x = random_state(), 2 * torch.rand(inputs, generator=generator).double() - 1
        kind = trial % 3  # 0: independent points; 1: nearby states; 2: nearby states and weights
        if kind == 0:
            p2, s2 = random_params(3.0), random_state()
        else:
            nudge = 1e-3 * torch.randn(s1.shape, generator=generator).double()
            s2 = torch.maximum(torch.minimum(s1 + nudge, limit), -limit)
            p2 = p1 + 1e-3 * (kind == 2) * torch.randn(p1.shape, generator=generator).double()
        points = ((s1, p1), (s2, p2))
        jac_s = [
            jacobian(lambda s, p=p, x=x: _lstm_step(p, s, x, hidden, inputs), s) for s, p in points
        ]
        jac_w = [
            jacobian(lambda p, s=s, x=x: _lstm_step(p, s, x, hidden, inputs), p) for s, p in points
        ]
        ds, dw = state_norm(s1 - s2), float((p1 - p2).norm())
        diff_j = ((jac_s[0] - jac_s[1]).abs() * w[None, :]).sum(1) / w
        diff_g = (jac_w[0] - jac_w[1]).norm(dim=1) / w
        worst["J"] = max(worst["J"], float(diff_j.max()) / (K["K_ss"] * ds + K["K_sw"] * dw))
        worst["G"] = max(worst["G"], float(diff_g.max()) / (K["K_ws"] * ds + K["K_ww"] * dw))
    assert 0 < worst["J"] <= 1 and 0 < worst["G"] <= 1, worst


def test_lstm_lemma_constants_are_finite_and_assembled_from_the_general_formulas():
    values = gl.lstm_lemma_constants(ls.course_lstm_constraint(), 1.0, 8, 5, 1.0)
    assert all(math.isfinite(v) and v > 0 for v in values.values())
    lam, theta = values["lambda"], 1 - values["lambda"]
    gamma = (
        values["L_w"] * values["L_p"] / theta
        + values["K_ws"] * values["B_s"] * values["L_p"] / lam
        + values["L_w"]
        * values["B_s"]
        * (values["S_p"] + values["K_ss"] * values["L_p"] / (lam * theta))
    )
    assert values["gamma"] == pytest.approx(gamma, rel=1e-12)
    # the constants do not use the bias box or the input-row radius of the set
    loose = gl.lstm_lemma_constants(
        ls.course_lstm_constraint(input_radius=1e3, bias_bound=1e3), 1.0, 8, 5, 1.0
    )
    assert loose["gamma"] == pytest.approx(values["gamma"], rel=1e-9)


def test_two_bias_training_is_projected_descent_on_a_compact_set_with_b_zeta_plus_one():
    """Chapter 6's remark on PyTorch's two bias vectors, in sympy and in float64.

    With ``b = b1 + b2`` both vectors get the gradient ``g = p'(b)``; in the orthonormal
    coordinates ``bt = (b1 + b2) / sqrt 2``, ``d = (b1 - b2) / sqrt 2`` a step of size
    ``alpha`` is a gradient step of size ``alpha`` on ``bt`` and leaves ``d`` alone; the
    pre-activation's derivative in ``bt`` is ``sqrt 2``, so ``B_zeta^2`` gains 1."""
    b1, b2, alpha, bt = sp.symbols("b1 b2 alpha bt", real=True)
    p = sp.Function("p")
    loss = p(b1 + b2)
    new1, new2 = b1 - alpha * sp.diff(loss, b1), b2 - alpha * sp.diff(loss, b2)
    # d is unchanged, and bt moves by -alpha times the gradient of p(sqrt 2 bt) in bt
    assert sp.simplify((new1 - new2) - (b1 - b2)) == 0
    in_bt = sp.diff(p(sp.sqrt(2) * bt), bt).subs(bt, (b1 + b2) / sp.sqrt(2))
    assert sp.simplify((new1 + new2) / sp.sqrt(2) - ((b1 + b2) / sp.sqrt(2) - alpha * in_bt)) == 0
    # B_zeta^2 = max ||(h, x, d a / d bias)||^2 over |h_j| <= 1, |x_j| <= B
    H, D, B = sp.symbols("H D B", positive=True)
    assert sp.diff(sp.sqrt(2) * bt, bt) ** 2 == 2  # one bias coordinate: 1; two: 2
    assert sp.expand(H * 1**2 + D * B**2 + sp.diff(sp.sqrt(2) * bt, bt) ** 2) == H + D * B**2 + 2
    # the projection onto the slab of the sum moves both vectors equally: d is unchanged
    g = torch.Generator().manual_seed(0)
    first, second = (
        5 * torch.randn(8, generator=g).double(),
        5 * torch.randn(8, generator=g).double(),
    )
    difference = first - second
    ls.project_bias_sum_([first, second], upper=1.0, lower=-1.0)
    assert torch.allclose(first - second, difference, rtol=0, atol=1e-12)
    assert ((first + second).abs() <= 1 + 1e-12).all()


def _constant_forcing_solution(forcing: sp.Expr, initial: sp.Expr, m: sp.Symbol) -> sp.Expr:
    """``e(m) = lambda^m e(0) + (1 - lambda^m) forcing / (1 - lambda)``, written by hand."""
    return gl.lam**m * initial + (1 - gl.lam**m) * forcing / (1 - gl.lam)


@pytest.mark.parametrize(
    ("error", "message"),
    [
        # adds 1 / (1 - lambda) to e(m): the residual is exactly 1 (and e(0) is off too)
        (lambda m: 1 / (1 - gl.lam), "does not satisfy the recursion"),
        # adds lambda^m: a solution of the recursion, but e(0) is off by exactly 1
        (lambda m: gl.lam**m, "misses the initial condition"),
    ],
)
def test_solve_rejects_a_wrong_rsolve_answer(monkeypatch, error, message):
    """``_solve`` checks rsolve's answer: a wrong one raises instead of being returned."""
    forcing, initial = gl.L_w * gl.delta, la.Sp

    def wrong_rsolve(equation, function, conditions):
        m = function.args[0]
        return _constant_forcing_solution(forcing, initial, m) + error(m)

    monkeypatch.setattr(gl.sp, "rsolve", wrong_rsolve)
    with pytest.raises(ArithmeticError, match=message):
        gl._solve(forcing, initial)


def test_solve_reports_when_rsolve_finds_nothing(monkeypatch):
    monkeypatch.setattr(gl.sp, "rsolve", lambda *args: None)
    with pytest.raises(ArithmeticError, match="rsolve found no solution"):
        gl._solve(gl.L_w * gl.delta, la.Sp)


@pytest.mark.parametrize("initial", [sp.Integer(0), la.Sp])
def test_solve_constant_forcing_is_the_closed_form(initial):
    """The non-resonant case against the convex-combination form, for e(0) = 0 and e(0) != 0."""
    forcing = gl.K_ss * gl.B_s
    solution = gl._solve(forcing, initial)
    expected = _constant_forcing_solution(forcing, initial, gl.n)
    assert sp.simplify(sp.powsimp(sp.expand(solution - expected), force=True)) == 0


def test_lstm_weight_lipschitz_closed_form_and_argument_checks():
    # C = 0: both rows give sqrt(1/16 + 1); B_zeta = sqrt(H + D B^2 + 1) = sqrt(3 + 2 * 4 + 1)
    value = gl.lstm_weight_lipschitz(0.0, (1.0, 2.0), 3, 2, 2.0)
    assert value == pytest.approx(math.sqrt(12) * math.sqrt(17 / 16), rel=1e-14)
    # C = 4 with v_c = 10, v_h = 1: the hidden row wins, sqrt(tanh(4)^2/16 + 1/16 + 1 + 1)
    value = gl.lstm_weight_lipschitz(4.0, (10.0, 1.0), 1, 0, 0.0)
    hidden = math.sqrt(math.tanh(4.0) ** 2 / 16 + 1 / 16 + 2)
    assert value == pytest.approx(math.sqrt(2) * hidden, rel=1e-14)
    # v_h = 100: the cell row wins, sqrt(1/16 + 1 + 1) / v_c
    value = gl.lstm_weight_lipschitz(4.0, (0.5, 100.0), 1, 0, 0.0)
    assert value == pytest.approx(math.sqrt(2) * math.sqrt(33 / 16) / 0.5, rel=1e-14)
    for bad in ((-0.1, 1, 0, 0.0), (1.0, 0, 0, 0.0), (1.0, 1, -1, 0.0), (1.0, 1, 0, -0.1)):
        cell_bound, hidden_size, input_size, input_bound = bad
        with pytest.raises(ValueError, match="need cell_bound >= 0"):
            gl.lstm_weight_lipschitz(cell_bound, (1.0, 1.0), hidden_size, input_size, input_bound)


def test_lstm_second_order_constants_in_matrix_form():
    """The constants against the docstring's recipe written with 5 x 5 matrices in numpy.

    Order u = (c, i, f, z, o).  The Hessian bound of c' = sigma(a_i) tanh(a_z) + sigma(a_f) c
    has |d2/dc da_f| <= 1/4, |d2/da_i^2| <= max|sigma''|, |d2/da_i da_z| <= 1/4,
    |d2/da_f^2| <= max|sigma''| C, |d2/da_z^2| <= max|tanh''|; that of h' = sigma(a_o) tanh(c')
    follows by the chain rule.
    """
    s2, t2 = 1 / (6 * math.sqrt(3)), 4 / (3 * math.sqrt(3))
    radius = {"i": 0.3, "f": 0.2, "z": 0.7, "o": 0.5}
    F, C, (v_c, v_h), H, D, B = 0.6, 2.5, (0.8, 1.3), 3, 2, 1.5
    c, i, f, z, o = range(5)
    hc = np.zeros((5, 5))
    hc[c, f] = hc[f, c] = 0.25
    hc[i, i] = s2
    hc[i, z] = hc[z, i] = 0.25
    hc[f, f] = s2 * C
    hc[z, z] = t2
    grad_c = np.array([F, 0.25, C / 4, 1.0, 0.0])
    e_o = np.eye(5)[o]
    hh = t2 * np.outer(grad_c, grad_c) + hc + 0.25 * (np.outer(e_o, grad_c) + np.outer(grad_c, e_o))
    hh += s2 * np.outer(e_o, e_o)
    grad_h = grad_c + 0.25 * e_o
    m = np.array([v_c, *(radius[g] * v_h for g in "ifzo")])
    b_zeta = math.sqrt(H + D * B**2 + 1)
    gates = [i, f, z, o]

    def mixed(table, grad):
        return np.linalg.norm(b_zeta * table[:, gates].T @ m + math.sqrt(H) * v_h * grad[gates])

    def weight_weight(table):
        return b_zeta**2 * np.linalg.norm(table[np.ix_(gates, gates)], 2)

    expected = {
        "K_ss": max(m @ hc @ m / v_c, m @ hh @ m / v_h),
        "K_sw": max(mixed(hc, grad_c) / v_c, mixed(hh, grad_h) / v_h),
        "K_ww": max(weight_weight(hc) / v_c, weight_weight(hh) / v_h),
    }
    expected["K_ws"] = expected["K_sw"]
    K = gl.lstm_second_order_constants(radius, F, C, (v_c, v_h), H, D, B)
    assert K.keys() == expected.keys()
    for name, value in expected.items():
        assert K[name] == pytest.approx(value, rel=1e-12), name
    # with v_c large the h' rows decide, with v_h large the c' rows: both branches are used
    for weights in ((50.0, 1.0), (2.0, 50.0)):
        v_c, v_h = weights
        m = np.array([v_c, *(radius[g] * v_h for g in "ifzo")])
        K = gl.lstm_second_order_constants(radius, F, C, weights, H, D, B)
        assert K["K_ss"] == pytest.approx(max(m @ hc @ m / v_c, m @ hh @ m / v_h), rel=1e-12)
        assert K["K_sw"] == pytest.approx(
            max(mixed(hc, grad_c) / v_c, mixed(hh, grad_h) / v_h), rel=1e-12
        )
        assert K["K_ww"] == pytest.approx(
            max(weight_weight(hc) / v_c, weight_weight(hh) / v_h), rel=1e-12
        )


# v_h = 1 and the c' rows decide the K's for the course's set; this one has v_h = 0.90 and
# a K_ss from the h' rows (which use the forget gate's maximum F)
_SMALL_RECURRENT_SET = ls.LSTMConstraint(
    recurrent_radius={"i": 0.2, "f": 0.1, "z": 0.3, "o": 0.2},
    input_radius=dict.fromkeys("ifzo", 0.5),
    bias_max={"i": 1.0, "f": -1.0, "z": 1.0, "o": 1.0},
    bias_min={"i": -1.0, "f": -4.0, "z": -1.0, "o": -1.0},
)


@pytest.mark.parametrize("constraint", [ls.course_lstm_constraint(), _SMALL_RECURRENT_SET])
def test_lstm_lemma_constants_are_the_certificate_and_loss_constants(constraint):
    hidden, inputs, target = 8, 5, 0.5
    values = gl.lstm_lemma_constants(constraint, 1.0, hidden, inputs, target)
    uniform = constraint.uniform_certificate(1.0)
    v_c, v_h = uniform.weights
    forget = float(constraint.matrix(1.0)[0, 0])
    expected = {
        "lambda": uniform.lam,
        "B_s": uniform.state_bound,
        "L_w": gl.lstm_weight_lipschitz(uniform.cell_bound, uniform.weights, hidden, inputs, 1.0),
        "L_p": v_h * hidden * (1 + target),
        "S_p": v_h**2 * hidden,
        **gl.lstm_second_order_constants(
            constraint.recurrent_radius, forget, uniform.cell_bound, uniform.weights, hidden,
            inputs, 1.0,
        ),
    }  # fmt: skip
    assert values.keys() == {*expected, "gamma", "beta"}
    for name, value in expected.items():
        assert values[name] == pytest.approx(value, rel=1e-12), name
    theta = 1 - values["lambda"]
    beta = (
        values["L_w"] ** 2 * values["S_p"] / theta**2
        + values["L_w"]
        * values["L_p"]
        * (values["K_ss"] * values["L_w"] / theta + values["K_sw"])
        / theta**2
        + values["L_p"] * (values["K_ws"] * values["L_w"] / theta + values["K_ww"]) / theta
    )
    assert values["beta"] == pytest.approx(beta, rel=1e-12)


def test_lstm_lemma_constants_name_rho_of_m_bar_when_it_is_not_below_one():
    """The error says which condition failed: rho(M-bar) >= 1 with F < 1, or F = 1."""
    too_large = (
        "the general lemmas need rho(M-bar) < 1, but this set has rho(M-bar) = {lam} (with "
        "F = {forget} < 1): its recurrent radii are too large for its forget-gate bound; "
        "shrink them (constraint.scaled) or lower the forget bias bound"
    )
    # forget gate up to sigmoid(1.5 + 0.155 + 0.25) = 0.8705 < 1, but rho(M-bar) = 1.4049
    unstable = ls.course_lstm_constraint(bias_bound=4.0, forget_bias_max=1.5)
    lam = unstable.uniform_certificate(1.0).lam
    forget = 1 / (1 + math.exp(-(1.5 + 0.155 + 0.25)))
    assert float(unstable.matrix(1.0)[0, 0]) == pytest.approx(forget, rel=1e-12)
    assert 1.40 < lam < 1.41
    with pytest.raises(ValueError) as error:
        gl.lstm_lemma_constants(unstable, 1.0, 8, 5, 0.5)
    assert str(error.value) == too_large.format(lam=f"{lam:.6g}", forget="0.8705")
    # the course's set with three times its radii: F = sigmoid(0.405 + 2 * 0.155) < 1
    wide = ls.course_lstm_constraint().scaled(3.0)
    lam = wide.uniform_certificate(1.0).lam
    assert lam > 1
    with pytest.raises(ValueError) as error:
        gl.lstm_lemma_constants(wide, 1.0, 8, 5, 0.5)
    assert str(error.value) == too_large.format(lam=f"{lam:.6g}", forget="0.6715")
    # a free forget bias: the forget gate reaches 1 and rho(M-bar) is infinite
    free = ls.authors_constants_constraint(forget_bias_max=math.inf)
    with pytest.raises(ValueError) as error:
        gl.lstm_lemma_constants(free, 1.0, 8, 5, 0.5)
    assert str(error.value) == (
        "the general lemmas need rho(M-bar) < 1, but this set's forget gate can reach 1 "
        "(F = 1 in floating point), so rho(M-bar) is infinite: bound the forget bias "
        "(bias_max['f']) and the rows of U_f"
    )


def test_growth_exponents_with_fixed_constants_are_the_papers_orders():
    """sympy's limits against log-slopes of the stated constants at two values near 1."""
    assert gl.growth_exponents() == (2, 3)
    assert gl.growth_exponents(state_dependent_jacobian=False) == (1, 2)
    fixed = {"L_w": 1.7, "L_p": 1.3, "S_p": 0.9, "K_sw": 1.1, "K_ws": 0.6, "K_ww": 0.8}

    def constants(theta: float, k_ss: float) -> tuple[float, float]:
        lam, b_s = 1 - theta, 0.7 * 2.0 / theta  # L_x B_x = 1.4
        return gl.general_constants_numeric({"lambda": lam, "B_s": b_s, "K_ss": k_ss, **fixed})

    for k_ss, orders in ((0.4, (2, 3)), (0.0, (1, 2))):
        near, nearer = constants(1e-4, k_ss), constants(1e-5, k_ss)
        slopes = [math.log10(b / a) for a, b in zip(near, nearer, strict=True)]
        assert slopes == pytest.approx(orders, abs=0.01)


def test_fixed_point_split_is_initial_plus_fixed_point_and_checks_the_solution():
    forcing, initial = gl.K_ss * gl.B_s, la.Sp
    solution = _constant_forcing_solution(forcing, initial, gl.n)
    split = gl.fixed_point_split(solution, forcing, initial)
    assert sp.simplify(split - (la.Sp + gl.K_ss * gl.B_s / (1 - gl.lam))) == 0
    # e(n) <= e(0) + e_inf at every n, with equality approached as n grows when e(0) = 0
    values = {gl.lam: 0.7, gl.K_ss: 0.4, gl.B_s: 2.0, la.Sp: 1.1}
    sup = float(split.subs(values))
    assert all(float(solution.subs(values).subs(gl.n, m)) <= sup for m in range(60))
    # a solution off by exactly 1 is not the convex combination
    with pytest.raises(ArithmeticError, match="not the convex combination"):
        gl.fixed_point_split(solution + 1, forcing, initial)


def test_general_constants_numeric_names_the_missing_values():
    values = {"lambda": 0.5, "L_w": 1.0, "B_s": 1.0, "L_p": 1.0, "K_ss": 1.0, "K_sw": 1.0}
    values |= {"K_ws": 1.0, "K_ww": 1.0, "unused": 3.0}
    with pytest.raises(ValueError, match=r"missing values for \['S_p'\]"):
        gl.general_constants_numeric(values)
    gamma, beta = gl.general_constants_numeric(values | {"S_p": 2.0})
    point = {gl.lam: 0.5, la.Sp: 2.0} | {s: 1.0 for s in (gl.L_w, gl.B_s, la.Lp)}
    point |= {s: 1.0 for s in (gl.K_ss, gl.K_sw, gl.K_ws, gl.K_ww)}
    assert gamma == pytest.approx(float(gl.stated_gamma().subs(point)), rel=1e-12)
    assert beta == pytest.approx(float(gl.stated_beta().subs(point)), rel=1e-12)
