"""Values of the bounds of Chapters 4-7 not pinned in ``test_bound_values.py``.

Theorem 1's prediction bound, Proposition 2 and its recurrence, Lemma 1 under eventual
stability, the one-unit folds, the diagonal certificate and the WikiText-2 spectral-norm
certificate, each against an independent computation (the sympy expression of the
proof, exact rational arithmetic, brute force or a number worked by hand) at points that
include the edges (lambda near 0 and near 1, kappa > 1, k = 0 and k large, L_rho != 1).
A bound made smaller than the proof's fails here, not only one made larger.  The formula
mutants of ``tools/stablernn_tools/formula_mutants.py`` are run against this file.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
import sympy as sp
import torch

from stablernn_lib.core import bounds
from stablernn_lib.core import gradients as gr
from stablernn_lib.core.contraction import contraction_constant, empirical_lipschitz
from stablernn_lib.core.iterative_projection import (
    spectral_norms_float64,
)
from stablernn_lib.core.models import LinearRNN, LSTMMap, VanillaRNN, random_vanilla_rnn
from stablernn_lib.symbolic import lemma_algebra as la
from stablernn_lib.tasks.wikitext2 import model as lm
from stablernn_lib.tasks.wikitext2.model import spectral_norm_upper_bounds
from stablernn_lib.theory import diagonal_scaling as ds
from stablernn_lib.theory import eventual_stability as ev
from stablernn_lib.theory import general_lemmas as gl
from stablernn_lib.theory import lstm_certificate as ls
from stablernn_lib.theory import one_unit
from stablernn_lib.theory import weights_close as wc

REL = 1e-12

# ----------------------------------------------------------------------------- Theorem 1

# (lam, L_x, B_x, ||w - w'||, k, L_rho): lambda near 0 and near 1, k = 0 and large, L_rho != 1
THEOREM1_POINTS = [
    (0.01, 1.0, 1.0, 0.3, 0, 1.0),
    (0.5, 1.0, 1.0, 0.1, 2, 1.0),
    (0.7, 1.7, 0.8, 0.05, 5, 2.0),
    (0.99, 0.4, 2.5, 1e-3, 200, 0.25),
    (0.9, 1.3, 0.6, 0.0, 1, 0.5),
]


def _theorem1_sympy(lam, lx, bx, distance, k, l_rho) -> float:
    """The proof's two terms: weights moved (``L_rho B_h d / (1 - lam)``) plus Lemma 1."""
    Lam, Lx, Bx, D, K, Lr = sp.symbols("lambda L_x B_x d k L_rho", positive=True)
    bh = Lx * Bx / (1 - Lam)
    expression = Lr * bh * D / (1 - Lam) + Lam**K * bh
    values = {Lam: lam, Lx: lx, Bx: bx, D: distance, K: k, Lr: l_rho}
    return float(expression.subs({s: sp.Float(v, 30) for s, v in values.items()}))


@pytest.mark.parametrize("point", THEOREM1_POINTS)
def test_theorem1_prediction_bound_is_the_proofs_expression(point):
    lam, lx, bx, distance, k, l_rho = point
    value = wc.theorem1_prediction_bound(lam, lx, bx, distance, k, l_rho=l_rho)
    assert value == pytest.approx(_theorem1_sympy(*point), rel=REL)


def test_theorem1_prediction_bound_by_hand():
    # lam = 1/2, L_x = B_x = 1: B_h = 2; weights part 1 * 2 * 0.1 / 0.5 = 0.4; Lemma 1 0.25 * 2
    assert wc.theorem1_prediction_bound(0.5, 1.0, 1.0, 0.1, 2) == pytest.approx(0.9, rel=REL)
    # the default L_rho is 1, and L_rho scales only the weights part
    assert wc.theorem1_prediction_bound(0.5, 1.0, 1.0, 0.1, 2, l_rho=3.0) == pytest.approx(
        1.7, rel=REL
    )
    with pytest.raises(ValueError, match="weight_distance must be non-negative"):
        wc.theorem1_prediction_bound(0.5, 1.0, 1.0, -0.1, 2)


def test_theorem1_is_attained_by_the_one_unit_linear_rnn_without_training():
    """``w = w'``: the bound is Lemma 1's, reached as ``T -> oo`` by ``W = lam``, ``x_t = B_x``."""
    lam, lx, bx, k, steps = 0.8, 1.0, 1.5, 3, 400
    h = h_k = 0.0
    for step in range(steps):
        h = lam * h + lx * bx
        h_k = lam * h_k + lx * bx if step >= steps - k else 0.0
    ratio = (h - h_k) / wc.theorem1_prediction_bound(lam, lx, bx, 0.0, k)
    assert ratio == pytest.approx(1 - lam ** (steps - k), rel=REL)


def _weights_part_witness(lam: float, distance: float, steps: int) -> float:
    """One unit, identity activation, ``x_t = 1``, ``U = 1``: ``h_T(lam) - h_T(lam - d)``."""
    h = h_moved = 0.0
    for _ in range(steps):
        h, h_moved = lam * h + 1.0, (lam - distance) * h_moved + 1.0
    return h - h_moved


def test_theorem1_weights_part_is_of_the_right_order_on_a_worst_case():
    """The weights part ``B_h d / (1 - lam)`` against ``h_T(lam) - h_T(lam - d)`` as ``d -> 0``:
    ``d/d lam (1 / (1 - lam)) = 1 / (1 - lam)^2 = B_h / (1 - lam)`` with ``B_h = 1 / (1 - lam)``,
    so the ratio tends to 1 (the bound's first term is tight to first order)."""
    for lam in (0.1, 0.5, 0.9):
        distance = 1e-7
        measured = _weights_part_witness(lam, distance, 2000)
        bound = wc.theorem1_prediction_bound(lam, 1.0, 1.0, distance, 10_000)  # Lemma 1 term ~ 0
        assert measured / bound == pytest.approx(1.0, rel=1e-5)


# ----------------------------------------------------------------------------- Proposition 2

PROP2_POINTS = [  # (alpha, gamma, beta, k, lam, N)
    (0.5, 2.0, 1.0, 3, 0.5, 4),
    (1.0, 3.0, 0.0, 1, 0.01, 1),
    (0.1, 7.0, 2.5, 300, 0.99, 1000),
    (2.0, 0.3, 0.4, 10, 0.2, 57),
]


@pytest.mark.parametrize("point", PROP2_POINTS)
def test_proposition2_bound_is_its_closed_form(point):
    alpha, gamma, beta, k, lam, n = point
    a, g, b, K, L, N = (sp.Rational(str(v)) for v in point)
    exact = a * g * K * L**K * N ** (a * b + 1)
    log10 = wc.proposition2_bound_log10(*point)
    assert log10 == pytest.approx(float(sp.log(exact, 10).evalf(30)), rel=REL, abs=1e-12)
    assert wc.proposition2_bound(*point) == pytest.approx(float(exact), rel=1e-11)
    assert wc.proposition2_bound(1.0, 0.0, 1.0, 2, 0.5, 10) == 0.0  # gamma = 0: log10 = -inf
    # 10^308.5 overflows a float: the bound is inf, not an OverflowError
    assert wc.proposition2_bound(1.0, 10**300.5, 0.0, 1, 0.1, 10**9) == math.inf


@pytest.mark.parametrize(
    "bad",
    [
        {"alpha": -0.1}, {"gamma": -0.1}, {"beta": -0.1}, {"k": 0}, {"num_steps": 0},
        {"lam": 0.0}, {"lam": 1.0},
    ],
)  # fmt: skip
def test_proposition2_rejects_each_bad_argument(bad):
    arguments = {"alpha": 0.5, "gamma": 2.0, "beta": 1.0, "k": 3, "lam": 0.5, "num_steps": 4}
    wc.proposition2_bound_log10(**arguments)  # the good point passes
    with pytest.raises(ValueError, match="^Proposition 2 needs alpha, gamma, beta >= 0, k >= 1"):
        wc.proposition2_bound_log10(**(arguments | bad))


@pytest.mark.parametrize(
    ("alpha", "beta", "gap", "n"), [(1.0, 2.0, 3.0, 4), (0.5, 0.0, 1.0, 6), (3.0, 10.0, 0.5, 5)]
)
def test_decay_recurrence_solution_is_the_exact_iteration(alpha, beta, gap, n):
    """``e_{t+1} = (1 + alpha beta / t) e_t + alpha g / t`` iterated in exact rationals."""
    a, b, g = Fraction(str(alpha)), Fraction(str(beta)), Fraction(str(gap))
    e = Fraction(0)
    for t in range(1, n + 1):
        e = (1 + a * b / t) * e + a * g / t
    assert wc.decay_recurrence_solution_log10(alpha, beta, gap, n) == pytest.approx(
        math.log10(e), rel=1e-11
    )
    assert wc.decay_recurrence_solution_log10(alpha, beta, 0.0, n) == -math.inf


def test_recurrence_iteration_with_per_step_constants_is_a_plain_loop():
    steps = np.array([0.5, 0.25, 1.0, 0.1])
    beta, gap = np.array([2.0, 0.0, 3.0, 1.5]), np.array([1.0, 4.0, 0.5, 2.0])
    e, expected = 0.0, [0.0]
    for a, b, g in zip(steps, beta, gap, strict=True):
        e = (1 + a * b) * e + a * g
        expected.append(e)
    log_e = wc.recurrence_bound_log10(steps, beta, gap)
    assert log_e[0] == -np.inf
    assert 10 ** log_e[1:] == pytest.approx(expected[1:], rel=REL)


@pytest.mark.parametrize(("c", "n"), [(0.0, 5), (0.7, 9), (12.0, 30)])
def test_product_bound_slack_by_brute_force(c, n):
    expected = [
        sum(math.log(1 + c / j) for j in range(t + 1, n + 1)) - c * math.log(n / t)
        for t in range(1, n + 1)
    ]
    assert wc.product_bound_slack(c, n) == pytest.approx(expected, rel=1e-12, abs=1e-12)


def test_product_bound_slack_checks_its_arguments():
    assert wc.product_bound_slack(0.5, 1).tolist() == [0.0]  # one step: the empty product
    with pytest.raises(
        ValueError, match=r"need c >= 0 and num_steps >= 1, got c=-0.1, num_steps=3$"
    ):
        wc.product_bound_slack(-0.1, 3)
    with pytest.raises(ValueError, match="num_steps=0"):
        wc.product_bound_slack(0.5, 0)


def test_symbolic_unrolling_is_in_the_positive_symbols_c_and_d():
    iterated, unrolled = wc.symbolic_unrolling(2)
    c, d = sp.symbols("c d", positive=True)
    # e_3 = (1 + c/2) d + d/2, in the symbols of the recurrence's solution
    assert sp.expand(iterated - ((1 + c / 2) * d + d / 2)) == 0
    assert sp.expand(unrolled - ((1 + c / 2) * d + d / 2)) == 0
    assert iterated.free_symbols == unrolled.free_symbols == {c, d}


def test_step_sizes_by_hand():
    assert wc.step_sizes("decay", 0.6, 4) == pytest.approx([0.6, 0.3, 0.2, 0.15], rel=REL)
    assert wc.step_sizes("constant", 0.6, 3) == pytest.approx([0.6] * 3, rel=REL)
    assert wc.step_sizes("decay", 0.6, 1).tolist() == [0.6]
    with pytest.raises(ValueError, match=r"^num_steps must be at least 1, got 0$"):
        wc.step_sizes("decay", 0.6, 0)
    with pytest.raises(ValueError, match=r"^the step size alpha must be positive, got -1.0$"):
        wc.step_sizes("constant", -1.0, 3)
    with pytest.raises(ValueError, match=r"^unknown step schedule 'cosine': use one of \("):
        wc.step_sizes("cosine", 0.6, 3)


def test_recurrence_takes_zero_steps_and_gaps_silently():
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # log(0) = -inf is expected, not a warning
        log_e = wc.recurrence_bound_log10(np.array([0.0, 0.5]), 1.0, np.array([2.0, 0.0]))
    assert log_e.tolist() == [-np.inf, -np.inf, -np.inf]  # step 0, then gap 0: e stays 0


@pytest.mark.parametrize("negative", ["steps", "beta", "gap"])
def test_recurrence_rejects_each_negative_argument(negative):
    values = {"steps": np.array([0.5, 0.5]), "beta": np.array([1.0, 0.0]), "gap": 2.0}
    wc.recurrence_bound_log10(values["steps"], values["beta"], values["gap"])
    values[negative] = -np.ones(2)
    with pytest.raises(ValueError, match="^steps, beta and gradient_gap must be non-negative$"):
        wc.recurrence_bound_log10(values["steps"], values["beta"], values["gap"])


@pytest.mark.parametrize("activation", ["tanh", "identity"])
def test_theory_constants_of_an_instance_recomputed(monkeypatch, activation):
    """``L_x = L_rho ||U||_2``, ``B_x = max ||x_t||``, ``B_h``, ``L_p = B_h + max ||y||``,
    ``S_p = 1`` and Lemmas 2-3's constants through the sympy expressions of the proofs;
    ``L_rho = 0.5`` (patched) so that no power of it can be dropped."""
    monkeypatch.setattr(wc, "activation_lipschitz", lambda name: 0.5)
    instance = wc.make_instance(wc.CONFIGS["smoke"], activation, seed=5, lam=0.8)
    got = wc.theory_constants(instance)
    u = instance.start.weight_ih.detach().double().numpy()
    lx = 0.5 * float(np.linalg.svd(u, compute_uv=False)[0])
    inputs = instance.train_inputs.double().numpy()
    bx = float(np.sqrt((inputs**2).sum(-1)).max())
    bh = lx * bx / (1 - 0.8)
    lp = bh + float(np.sqrt((instance.train_targets.double().numpy() ** 2).sum(-1)).max())
    values = {
        la.lam: 0.8, la.Lx: lx, la.Bx: bx, la.Lp: lp, la.Sp: 1.0, la.L_rho: 0.5,
        la.L2_rho: bounds.ACTIVATION_SECOND_DERIVATIVE[activation], la.Bh: bh,
        la.Bz: math.hypot(bh, bx),
    }  # fmt: skip
    expected = {
        "lx": lx, "bx": bx, "bh": bh, "lp": lp, "sp": 1.0,
        "gamma": float(la.lemma2_gamma_expression().subs(values)),
        "beta": float(la.lemma3_beta_expression().subs(values)),
    }  # fmt: skip
    assert got == pytest.approx(expected, rel=1e-10)


def test_theorem1_row_of_a_unit_uses_the_test_inputs_and_the_final_distance(monkeypatch):
    monkeypatch.setattr(wc, "activation_lipschitz", lambda name: 0.5)
    instance = wc.make_instance(wc.CONFIGS["smoke"], "tanh", seed=2, lam=0.6)
    model = instance.start
    run = wc.TruncatedRun(model, np.array([0.0, 0.3, 0.07]), np.zeros(2), np.zeros(2), np.zeros(2))
    row = wc._theorem1(instance, 4, model.weight_hh.detach().clone(), run)
    u = model.weight_ih.detach().double().numpy()
    lx = 0.5 * float(np.linalg.svd(u, compute_uv=False)[0])
    bx = float(np.sqrt((instance.test_inputs.double().numpy() ** 2).sum(-1)).max())
    expected = _theorem1_sympy(0.6, lx, bx, 0.07, 4, 0.5)
    assert row["bound_from_measured_distance"] == pytest.approx(expected, rel=1e-10)
    assert row["weights_part_max"] == 0.0  # the same weights: only truncation separates them
    assert row["prediction_gap_max"] == pytest.approx(row["truncation_part_max"], rel=REL)


def _numpy_final_states(W: np.ndarray, U: np.ndarray, inputs: np.ndarray) -> np.ndarray:
    """``h_T`` of ``h_t = tanh(W h_{t-1} + U x_t)``, ``h_0 = 0``, for inputs ``(T, n, D)``."""
    h = np.zeros((inputs.shape[1], W.shape[0]))
    for x in inputs:
        h = np.tanh(h @ W.T + x @ U.T)
    return h


def test_theorem1_row_of_a_unit_recomputed_field_by_field(monkeypatch):
    """Two different recurrent matrices (the recurrent run's and the truncated run's), the
    predictions, their gaps, the losses and the bound, all recomputed with numpy loops."""
    import copy

    monkeypatch.setattr(wc, "activation_lipschitz", lambda name: 0.5)
    instance = wc.make_instance(wc.CONFIGS["smoke"], "tanh", seed=4, lam=0.7)
    assert instance.start.bias is None
    truncated_model = copy.deepcopy(instance.start)
    generator = torch.Generator().manual_seed(0)
    shape = truncated_model.weight_hh.shape
    with torch.no_grad():
        truncated_model.weight_hh.add_(0.05 * torch.randn(shape, generator=generator))
    recurrent_weights = instance.start.weight_hh.detach() + 0.03 * torch.randn(
        shape, generator=generator
    )
    run = wc.TruncatedRun(truncated_model, np.array([0.0, 0.12]), *[np.zeros(1)] * 3)
    k = 3
    row = wc._theorem1(instance, k, recurrent_weights.clone(), run)

    U = instance.start.weight_ih.detach().double().numpy()
    W_rec = recurrent_weights.double().numpy()
    W_trunc = truncated_model.weight_hh.detach().double().numpy()
    inputs = instance.test_inputs.double().numpy()
    targets = instance.test_targets.double().numpy()
    y_rec = _numpy_final_states(W_rec, U, inputs)
    y_trunc = _numpy_final_states(W_trunc, U, inputs[-k:])
    y_between = _numpy_final_states(W_trunc, U, inputs)
    gaps = np.linalg.norm(y_rec - y_trunc, axis=-1)
    lx = 0.5 * float(np.linalg.svd(U, compute_uv=False)[0])
    bx = float(np.linalg.norm(inputs, axis=-1).max())
    expected = {
        "prediction_gap_mean": gaps.mean(),
        "prediction_gap_max": gaps.max(),
        "weights_part_max": np.linalg.norm(y_rec - y_between, axis=-1).max(),
        "truncation_part_max": np.linalg.norm(y_between - y_trunc, axis=-1).max(),
        "bound_from_measured_distance": _theorem1_sympy(0.7, lx, bx, 0.12, k, 0.5),
        "target_norm_mean": np.linalg.norm(targets, axis=-1).mean(),
        "test_loss_recurrent": 0.5 * ((y_rec - targets) ** 2).sum(-1).mean(),
        "test_loss_truncated": 0.5 * ((y_trunc - targets) ** 2).sum(-1).mean(),
    }
    assert row == pytest.approx(expected, rel=1e-9)
    assert row["weights_part_max"] > 0 and row["truncation_part_max"] > 0


# ----------------------------------------------------------------------------- eventual stability

EVENTUAL_POINTS = [  # (kappa, lam, L_x, B_x, k)
    (1.0, 0.01, 1.0, 1.0, 0),
    (1.5, 0.5, 2.0, 0.5, 0),
    (3.7, 0.99, 0.4, 2.5, 500),
    (12.0, 0.3, 1.3, 0.7, 6),
]


@pytest.mark.parametrize("point", EVENTUAL_POINTS)
def test_eventual_truncation_bound_is_the_proofs_series(point):
    """``sum_{i >= k} kappa lam^i L_x B_x``, summed by sympy in exact rationals."""
    kappa, lam, lx, bx, k = (sp.Rational(str(v)) for v in point)
    i = sp.Symbol("i", integer=True, nonnegative=True)
    series = sp.summation(kappa * lam**i * lx * bx, (i, k, sp.oo))
    assert ev.eventual_truncation_bound(*point) == pytest.approx(float(series), rel=REL)


@pytest.mark.parametrize(("lam", "kappa"), [(0.2, 1.0), (0.5, 2.0), (0.9, 5.0)])
def test_telescoping_identity_at_more_points(lam, kappa):
    total, closed = ev.telescoping_sum_identity()
    names = {str(s): s for s in total.free_symbols | closed.free_symbols}
    r = 1 / sp.Rational(str(lam)) - 1  # lambda = 1 / (1 + r)
    values = {
        names["kappa"]: sp.Rational(str(kappa)), names["L_x"]: sp.Rational(3, 2),
        names["B_x"]: sp.Rational(2, 3), names["r"]: r, names["k"]: 3, names["t"]: 11,
    }  # fmt: skip
    lam_exact = 1 / (1 + r)
    brute = sum(values[names["kappa"]] * lam_exact**j for j in range(3, 11))  # L_x B_x = 1
    assert total.subs(values).doit() == brute
    assert sp.simplify(closed.subs(values) - brute) == 0


def _oblique_projection(kappa: float) -> np.ndarray:
    """``P = [[1, c], [0, 0]]``, ``P^2 = P``, ``||P||_2 = sqrt(1 + c^2) = kappa``."""
    return np.array([[1.0, math.sqrt(kappa**2 - 1)], [0.0, 0.0]])


def eventual_witness_ratio(kappa: float, lam: float, k: int, angle: float, steps: int) -> float:
    """``||h_T - h^k_T|| / (kappa lam^k L_x B_x / (1 - lam))`` for ``h' = lam P h + x``.

    ``W = lam P`` has ``||W^i|| = kappa lam^i`` for ``i >= 1`` (and ``1 <= kappa`` at
    ``i = 0``), so it is ``(kappa, lam)``-eventually stable; ``U = I`` (``L_x = 1``),
    ``x_t = (cos angle, sin angle)`` (``B_x = 1``)."""
    W = lam * _oblique_projection(kappa)
    x = np.array([math.cos(angle), math.sin(angle)])
    h, h_k = np.zeros(2), np.zeros(2)
    for step in range(steps):
        h = W @ h + x
        h_k = W @ h_k + x if step >= steps - k else np.zeros(2)
    return float(np.linalg.norm(h - h_k)) / ev.eventual_truncation_bound(kappa, lam, 1.0, 1.0, k)


@pytest.mark.parametrize(("kappa", "lam", "k"), [(2.0, 0.5, 1), (5.0, 0.9, 4), (1.5, 0.2, 10)])
def test_eventual_lemma1_is_tight_for_kappa_above_one(kappa, lam, k):
    """The worst input direction, found by a bounded search over the angle, reaches the
    bound up to ``1 - lam^(T - k)``: the factor kappa cannot be dropped or lowered."""
    from scipy.optimize import minimize_scalar

    steps = 300
    search = minimize_scalar(
        lambda a: -eventual_witness_ratio(kappa, lam, k, a, steps),
        bounds=(0.0, math.pi), method="bounded", options={"xatol": 1e-10},
    )  # fmt: skip
    ratio = -search.fun
    assert ratio == pytest.approx(1 - lam ** (steps - k), rel=1e-6)
    P = _oblique_projection(kappa)
    for i in range(1, 6):  # the hypothesis: ||W^i|| = kappa lam^i
        assert np.linalg.norm(np.linalg.matrix_power(lam * P, i), 2) == pytest.approx(
            kappa * lam**i, rel=1e-12
        )


# ----------------------------------------------------------------------------- one unit


@pytest.mark.parametrize("w", [4.0001, 5.0, 20.0])
def test_saddle_nodes_solve_the_fold_equations(w):
    """Folds: ``w s (1 - s) = 1`` with ``s = sigmoid(x)`` and ``b = x - w s``, by sympy."""
    s = sp.Symbol("s", positive=True)
    roots = sorted(float(r) for r in sp.solve(sp.Rational(str(w)) * s * (1 - s) - 1, s))
    expected = [(math.log(r / (1 - r)), math.log(r / (1 - r)) - w * r) for r in roots]
    got = one_unit.saddle_nodes(w)
    assert len(got) == 2
    for (x, b), (x_e, b_e) in zip(got, expected, strict=True):
        assert x == pytest.approx(x_e, rel=1e-9, abs=1e-9)
        assert b == pytest.approx(b_e, rel=1e-9)
    assert one_unit.saddle_nodes(4.0) == []


def test_fixed_points_are_every_root_found_by_a_fine_grid():
    w = 8.0
    (_, b_low), (_, b_high) = one_unit.saddle_nodes(w)
    for b in (b_high - 1.0, 0.3 * b_low + 0.7 * b_high, b_low + 1.0):
        grid = np.linspace(b - 1, b + w + 1, 400_001)
        gap = w / (1 + np.exp(-grid)) + b - grid
        count = int(((gap[:-1] > 0) != (gap[1:] > 0)).sum())
        roots = one_unit.fixed_points(w, b)
        assert len(roots) == count
        for x in roots:
            assert w / (1 + math.exp(-x)) + b - x == pytest.approx(0.0, abs=1e-12)


def test_one_unit_iteration_and_fixed_point_curve_by_hand():
    x0 = torch.tensor([0.3], dtype=torch.float32)
    assert one_unit.iterate(2.0, 0.5, x0, 0).tolist() == [[pytest.approx(0.3)]]  # steps = 0
    trajectory = one_unit.iterate(torch.tensor(2.0, dtype=torch.float32), 0.5, x0, 2)
    assert trajectory.dtype == torch.float64  # float32 arguments are computed in float64
    x1 = 2.0 / (1 + math.exp(-float(x0))) + 0.5  # the float32 start, exactly
    assert trajectory[2].item() == pytest.approx(2.0 / (1 + math.exp(-x1)) + 0.5, rel=REL)
    with pytest.raises(ValueError, match="steps must be non-negative, got -1"):
        one_unit.iterate(2.0, 0.5, 0.0, -1)
    grid = torch.linspace(-6, 6, 25, dtype=torch.float64)
    curve = one_unit.fixed_point_curve(6.0, grid)
    s = 1 / (1 + np.exp(-grid.numpy()))
    assert curve["b"].numpy() == pytest.approx(grid.numpy() - 6.0 * s, rel=REL)
    assert curve["stable"].tolist() == (np.abs(6.0 * s * (1 - s)) < 1).tolist()
    assert not curve["stable"].all() and curve["stable"].any()
    # w = 4 at x = 0: w sigmoid'(0) = 1 exactly, the fold itself, not stable
    assert one_unit.fixed_point_curve(4.0, torch.zeros(1))["stable"].tolist() == [False]


def test_fixed_points_search_interval_and_negative_weight():
    # w < 0: the fixed point of x = 1 - 6 sigmoid(x) lies in [b + w, b] = [-5, 1]
    (root,) = one_unit.fixed_points(-6.0, 1.0)
    assert root == pytest.approx(1.0 - 6.0 / (1 + math.exp(-root)), abs=1e-12)
    assert -5.0 < root < 0.0
    w = 8.0
    (_, b_low), (_, b_high) = one_unit.saddle_nodes(w)
    b = 0.3 * b_low + 0.7 * b_high
    low, middle, high = one_unit.fixed_points(w, b)
    assert one_unit.fixed_points(w, b, lo=middle + 0.5) == [pytest.approx(high, abs=1e-12)]
    assert one_unit.fixed_points(w, b, hi=middle - 0.5) == [pytest.approx(low, abs=1e-12)]


def test_one_unit_sweep_gradient_and_training_defaults_and_checks():
    b_values = torch.tensor([-4.0, -2.0], dtype=torch.float32)
    assert [t.tolist() for t in one_unit.hysteresis_sweep(6.0, b_values)] == [
        t.tolist() for t in one_unit.hysteresis_sweep(6.0, b_values, -5.0, 200)
    ]  # the defaults: start at -5, 200 steps per value
    final, gradient = one_unit.final_state_gradient(6.0, b_values, -5.0, 3)
    assert final.dtype == gradient.dtype == torch.float64
    history = one_unit.train_bias(6.0, -2.0, 1.0)
    assert len(history["b"]) == 40  # the default number of iterations
    assert len(one_unit.train_bias(6.0, -2.0, 1.0, iterations=1)["loss"]) == 1
    for bad in ({"iterations": 0}, {"learning_rate": 0.0}):
        with pytest.raises(ValueError, match="iterations must be >= 1 and learning_rate > 0"):
            one_unit.train_bias(6.0, -2.0, 1.0, **bad)


# ----------------------------------------------------------------------------- certificates


def _best_two_by_two_scaling(matrix: np.ndarray, cap: float) -> float:
    """``min_{1/cap <= s <= cap} ||[[a, b s], [c / s, d]]||_2`` by a fine grid and a refinement."""
    from scipy.optimize import minimize_scalar

    (a, b), (c, d) = matrix

    def norm(log_s: float) -> float:
        s = math.exp(log_s)
        return float(np.linalg.norm(np.array([[a, b * s], [c / s, d]]), 2))

    grid = np.linspace(-math.log(cap), math.log(cap), 4001)
    start = grid[int(np.argmin([norm(t) for t in grid]))]
    step = grid[1] - grid[0]
    low, high = max(start - step, grid[0]), min(start + step, grid[-1])
    refined = minimize_scalar(norm, bounds=(low, high), method="bounded", options={"xatol": 1e-12})
    return min(refined.fun, norm(start))


@pytest.mark.parametrize(
    ("matrix", "l_rho"),
    [
        ([[0.3, 2.0], [0.1, -0.4]], 1.0),
        ([[0.9, 0.05], [3.0, 0.2]], 0.5),
        ([[0.5, 4.0], [0.0, 0.3]], 2.0),
    ],
)
def test_diagonal_certificate_equals_the_brute_force_best_scaling(matrix, l_rho):
    W = torch.tensor(matrix, dtype=torch.float64)
    certificate = ds.diagonal_certificate(W, l_rho=l_rho, max_condition=100.0)
    best = _best_two_by_two_scaling(np.array(matrix), 100.0)
    assert certificate.lam == pytest.approx(l_rho * best, rel=1e-6)
    assert certificate.lam >= l_rho * best * (1 - 1e-12)  # recomputed from D: never below
    assert certificate.spectral_lam == pytest.approx(l_rho * np.linalg.norm(matrix, 2), rel=REL)
    eigenvalues = np.abs(np.linalg.eigvals(np.array(matrix)))
    assert certificate.spectral_radius == pytest.approx(l_rho * eigenvalues.max(), rel=1e-12)
    d = certificate.scales.numpy()
    assert d.max() == 1.0
    assert certificate.condition == pytest.approx(d.max() / d.min(), rel=REL)
    scaled = d[:, None] * np.array(matrix) / d[None, :]
    assert certificate.lam == pytest.approx(l_rho * np.linalg.norm(scaled, 2), rel=1e-12)


def test_triangular_certificate_reaches_the_condition_cap_by_hand():
    """``W = [[0.5, 4], [0, 0.3]]``: the best ``D`` with ``max d / min d <= C`` is
    ``diag(1/C, 1)``, giving ``||[[0.5, 4/C], [0, 0.3]]||_2``."""
    W = torch.tensor([[0.5, 4.0], [0.0, 0.3]], dtype=torch.float64)
    certificate = ds.diagonal_certificate(W, max_condition=50.0)
    expected = np.linalg.norm(np.array([[0.5, 4.0 / 50.0], [0.0, 0.3]]), 2)
    assert certificate.lam == pytest.approx(expected, rel=1e-6)
    assert certificate.condition == pytest.approx(50.0, rel=1e-6)


def test_diagonal_certificate_edge_cases_and_checks():
    zero = ds.diagonal_certificate(torch.zeros(3, 3, dtype=torch.float64))
    assert (zero.lam, zero.spectral_lam, zero.spectral_radius) == (0.0, 0.0, 0.0)
    # rank one u v^T: inf_D ||D u|| ||D^-1 v|| = sum |u_i v_i| = rho(W), reached in the limit
    u, v = np.array([1.0, 0.5]), np.array([0.25, 2.0])
    rank_one = ds.diagonal_certificate(torch.tensor(np.outer(u, v)), max_condition=1e8)
    assert rank_one.lam == pytest.approx(abs(u @ v), rel=1e-6)
    W = torch.tensor([[0.3, 2.0], [0.1, -0.4]], dtype=torch.float64)
    single = ds.diagonal_certificate(W.float(), l_rho=0.5)  # computed in float64 all the same
    same = ds.diagonal_certificate(W.float().double(), l_rho=0.5)
    assert single.lam == pytest.approx(same.lam, rel=1e-13)
    with pytest.raises(
        ValueError, match=r"^weight_hh must be a square matrix \(H, H\), got \(2, 3\)$"
    ):
        ds.diagonal_certificate(torch.ones(2, 3, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"^l_rho must be positive, got 0.0$"):
        ds.diagonal_certificate(W, l_rho=0.0)


def test_scaled_pair_ratios_by_brute_force():
    from stablernn_lib.core.models import random_vanilla_rnn

    generator = torch.Generator().manual_seed(3)
    model = random_vanilla_rnn(2, 3, 0.9, "tanh", generator=generator)
    states, others = torch.randn(4, 3, dtype=torch.float64), torch.randn(4, 3, dtype=torch.float64)
    inputs = torch.randn(4, 2, dtype=torch.float64)
    scales = torch.tensor([1.0, 0.5, 0.25], dtype=torch.float64)
    got = ds.scaled_pair_ratios(model, scales, states, others, inputs)
    W, U = model.weight_hh.detach().numpy(), model.weight_ih.detach().numpy()
    d = scales.numpy()
    for n in range(4):
        step = np.tanh(W @ states[n].numpy() + U @ inputs[n].numpy())
        step_other = np.tanh(W @ others[n].numpy() + U @ inputs[n].numpy())
        expected = np.linalg.norm(d * (step - step_other)) / np.linalg.norm(
            d * (states[n] - others[n]).numpy()
        )
        assert got[n].item() == pytest.approx(expected, rel=1e-12)


def test_certificate_rows_and_table_of_language_models():
    class Stub:
        def __init__(self, rnn):
            self.rnn = rnn

    torch.manual_seed(0)
    rnn = torch.nn.RNN(3, 4, num_layers=2).double()
    models = {"lstm": Stub(torch.nn.LSTM(3, 4)), "rnn": Stub(rnn)}  # the LSTM is skipped
    rows = ds.certificate_rows(models)
    assert [(row["model"], row["layer"]) for row in rows] == [("rnn", 0), ("rnn", 1)]
    for row in rows:
        W = getattr(rnn, f"weight_hh_l{row['layer']}").detach()
        certificate = ds.diagonal_certificate(W)
        assert row == {
            "model": "rnn", "layer": row["layer"],
            "spectral_lam": pytest.approx(float(np.linalg.norm(W.numpy(), 2)), rel=1e-12),
            "diagonal_lam": certificate.lam, "spectral_radius": certificate.spectral_radius,
            "condition": certificate.condition,
        }  # fmt: skip
    table = ds.certificate_table(
        [{"model": "m", "layer": 1, "spectral_lam": 0.95, "diagonal_lam": 1.25,
          "spectral_radius": 0.5, "condition": 12.0},
         {"model": "m", "layer": 2, "spectral_lam": 1.0, "diagonal_lam": 1.0,
          "spectral_radius": 1.0, "condition": 1.0}]
    )  # fmt: skip
    assert table.splitlines() == [
        "| model | layer | $\\lVert W \\rVert_2$ | best $\\lVert DWD^{-1} \\rVert_2$ "
        "| $\\rho(W)$ | $\\max d / \\min d$ | certified by $\\lVert W \\rVert_2$ "
        "| certified by $D$ |",
        "|---|---:|---:|---:|---:|---:|---|---|",
        "| m | 1 | 0.950 | 1.250 | 0.500 | 12.0 | yes | no |",
        "| m | 2 | 1.000 | 1.000 | 1.000 | 1.0 | no | no |",  # lambda = 1 certifies nothing
    ]


@pytest.mark.parametrize("squarings", [0, 1, 2, 6])
def test_spectral_norm_upper_bound_by_hand(squarings):
    """``W = diag(3, 1)`` (and a 3 x 2 matrix with the same singular values):
    ``G = diag(9, 1)``, ``||G^q||_F = sqrt(81^q + 1)``, bound ``||G^q||_F^(1/2q) (1 + 1e-6)``."""
    q = 2**squarings
    expected = math.exp(0.5 * math.log(81.0**q + 1.0) / (2 * q)) * (1 + 1e-6)
    square = torch.diag(torch.tensor([3.0, 1.0], dtype=torch.float64))
    tall = torch.tensor([[0.0, 1.0], [3.0, 0.0], [0.0, 0.0]], dtype=torch.float64)
    got = spectral_norm_upper_bounds(torch.stack([square, square.T]), squarings=squarings)
    assert got.tolist() == pytest.approx([expected, expected], rel=1e-12)
    assert spectral_norm_upper_bounds(tall[None], squarings=squarings).item() == pytest.approx(
        expected, rel=1e-12
    )
    scaled = spectral_norm_upper_bounds(1e-3 * square[None], squarings=squarings).item()
    assert scaled == pytest.approx(1e-3 * expected, rel=1e-12)  # the rescaling is exact


def test_spectral_norm_upper_bound_defaults_and_batch_shapes():
    generator = torch.Generator().manual_seed(7)
    batch = torch.randn(2, 3, 5, 4, generator=generator, dtype=torch.float64)
    got = spectral_norm_upper_bounds(batch)
    assert got.shape == (2, 3)
    assert torch.equal(got, spectral_norm_upper_bounds(batch, squarings=6))  # the default: 6
    for i in range(2):
        for j in range(3):
            single = spectral_norm_upper_bounds(batch[i, j], squarings=6)
            assert got[i, j].item() == pytest.approx(single.item(), rel=1e-12)


def test_jacobian_product_and_lag_bounds_by_hand():
    lags = torch.tensor([0, 1, 3])
    got = gr.jacobian_product_bound(0.5, 1.6, lags)
    assert got.tolist() == pytest.approx([1.0, 0.8, 0.512], rel=REL)
    assert gr.jacobian_product_bound(0.0, 1.6, lags).tolist() == [1.0, 0.0, 0.0]
    assert gr.jacobian_product_bound(0.5, 0.0, lags).tolist() == [1.0, 0.0, 0.0]
    for gamma, norm in ((-0.1, 1.0), (1.0, -0.1)):
        with pytest.raises(ValueError, match="^gamma and the weight norm must be non-negative$"):
            gr.jacobian_product_bound(gamma, norm, lags)
    assert gr.lag_bound(1.6, "sigmoid", 4).tolist() == pytest.approx(
        [0.4**j for j in range(5)], rel=REL
    )


def test_state_norm_and_lemma1_bounds_at_the_edges():
    """``B_h = L_x B_x / (1 - lam)`` and ``lam^k B_h`` at lambda near 0 and 1, k = 0 and 500."""
    for lam, lx, bx, k in [(1e-3, 2.0, 0.5, 0), (0.999, 0.5, 2.0, 500), (0.5, 3.0, 1.0, 1)]:
        L = sp.Rational(str(lam))
        bh = sp.Rational(str(lx)) * sp.Rational(str(bx)) / (1 - L)
        assert bounds.state_norm_bound(lam, lx, bx) == pytest.approx(float(bh), rel=REL)
        assert bounds.lemma1_truncation_bound(lam, lx, bx, k) == pytest.approx(
            float(L**k * bh), rel=REL
        )


# ----------------------------------------------------------------------------- Lemmas 2-3


# (lam, L_x, B_x, L_p, S_p, L_rho, L2_rho) at the edges: lambda near 0 and near 1, L_rho != 1
EDGE_CONSTANTS = [
    (1e-3, 1.7, 0.8, 2.1, 0.6, 0.9, 0.35),
    (0.999, 0.4, 2.5, 0.7, 1.3, 0.25, 0.1),
    (0.5, 2.0, 1.0, 1.5, 1.0, 3.0, 0.0),  # identity-like: L2_rho = 0 keeps only first order
]


def _lemma_expression_at(expression: sp.Expr, lam, lx, bx, lp, sp_, l_rho, l2_rho) -> float:
    """A sympy expression of Lemmas 2-3 at a point, in 30-digit arithmetic."""
    bh = sp.Float(lx, 30) * sp.Float(bx, 30) / (1 - sp.Float(lam, 30))
    values = {
        la.lam: lam, la.Lx: lx, la.Bx: bx, la.Lp: lp, la.Sp: sp_, la.L_rho: l_rho,
        la.L2_rho: l2_rho, la.Bh: bh, la.Bz: sp.sqrt(bh**2 + sp.Float(bx, 30) ** 2),
    }  # fmt: skip
    return float(expression.subs({s: sp.Float(v, 30) for s, v in values.items()}).evalf(30))


@pytest.mark.parametrize("point", EDGE_CONSTANTS)
def test_gamma_beta_and_the_state_bounds_at_the_edges(point):
    """``gamma``, ``beta``, ``B_z`` and Lemma 2's right side at lambda = 1e-3 and 0.999 against
    the sympy expressions of the proofs (the other points are in ``test_bound_values.py``)."""
    lam, lx, bx, lp, sp_, l_rho, l2_rho = point
    constants = bounds.GradientConstants(*point)
    gamma = bounds.lemma2_gamma(constants)
    assert gamma == pytest.approx(
        _lemma_expression_at(la.lemma2_gamma_expression(), *point), rel=1e-10
    )
    assert bounds.lemma3_beta(constants) == pytest.approx(
        _lemma_expression_at(la.lemma3_beta_expression(), *point), rel=1e-10
    )
    bh = Fraction(str(lx)) * Fraction(str(bx)) / (1 - Fraction(str(lam)))
    assert bounds.gradient_input_bound(lam, lx, bx) == pytest.approx(
        math.sqrt(bh**2 + Fraction(str(bx)) ** 2), rel=1e-13
    )
    for k in (1, 2, 40, 5000):  # gamma k lambda^k in exact rationals
        exact = Fraction(gamma) * k * Fraction(str(lam)) ** k
        assert bounds.lemma2_gradient_bound(gamma, k, lam) == pytest.approx(
            float(exact), rel=1e-11, abs=1e-300
        )


def test_beta_at_lambda_zero_is_the_proofs_expression():
    """Lemma 3 allows lambda = 0 (``W = 0``): ``beta = (L2 L_p + L_rho^2 S_p) B_z^2 +
    2 L_rho^2 L_p B_z`` with ``B_z = sqrt((L_x B_x)^2 + B_x^2)``, by hand."""
    lx, bx, lp, sp_, l_rho, l2_rho = 1.5, 2.0, 0.7, 1.3, 0.5, 0.2
    bz = math.hypot(lx * bx, bx)
    expected = (l2_rho * lp + l_rho**2 * sp_) * bz**2 + 2 * l_rho**2 * lp * bz
    constants = bounds.GradientConstants(0.0, lx, bx, lp, sp_, l_rho, l2_rho)
    assert bounds.lemma3_beta(constants) == pytest.approx(expected, rel=1e-13)
    point = (0.0, lx, bx, lp, sp_, l_rho, l2_rho)
    assert expected == pytest.approx(
        _lemma_expression_at(la.lemma3_beta_expression(), *point), rel=1e-13
    )


# (lambda, L_w, B_s, L_p, S_p, K_ss, K_sw, K_ws, K_ww): distinct values, lambda at the edges
GENERAL_POINTS = [
    (0.02, 1.7, 2.5, 1.3, 0.9, 0.4, 1.1, 0.6, 0.3),
    (0.5, 0.8, 1.2, 0.7, 2.0, 1.5, 0.2, 0.9, 1.4),
    (0.98, 1.1, 0.6, 2.2, 0.3, 0.7, 0.5, 1.9, 0.8),
]


def _general_constants_by_iteration(point, k: int, steps: int = 6000) -> tuple[float, float]:
    """``gamma`` and ``beta`` of the general lemmas from the proofs' recursions, iterated in
    float64 (no sympy): Lemma 2's tail, forward gap and backward gap ``e(0) + e_inf``
    divided by ``k lambda^k``; Lemma 3's ``L_w sum_n e(n) + L_p (K_ws sup d + K_ww Delta) /
    (1 - lambda)`` divided by ``Delta``."""
    lam, lw, bs, lp, sp_, kss, ksw, kws, kww = point
    tail = lw * lp * sum(lam**i for i in range(k, steps))
    forward = kws * bs * lp * sum(lam ** (j - 1) * lam ** (k - j) for j in range(1, k + 1))
    forcing, e_inf = kss * bs * lp * lam ** (k - 1), 0.0
    for _ in range(steps):  # the fixed point of e -> lambda e + forcing, from 0
        e_inf = lam * e_inf + forcing
    backward = lw * k * (sp_ * bs * lam**k + e_inf)
    gamma = tail / lam**k + (forward + backward) / (k * lam**k)
    delta, d = 0.3, 0.0
    for _ in range(steps):  # sup of the forward gap d(n + 1) = lambda d(n) + L_w Delta
        d = lam * d + lw * delta
    c = lp * (kss * d / delta + ksw)
    e, total = sp_ * d, 0.0
    for n in range(steps):
        total += e
        e = lam * e + c * delta * lam**n
    beta = (lw * total + lp * (kws * d + kww * delta) / (1 - lam)) / delta
    return gamma, beta


@pytest.mark.parametrize("point", GENERAL_POINTS)
@pytest.mark.parametrize("k", [1, 6])
def test_general_gamma_and_beta_are_the_iterated_recursions_of_the_proofs(point, k):
    """The rsolve-assembled constants, Chapter 6's printed ones and the numeric evaluation
    all equal the recursions iterated by hand; Lemma 2's tail is divided by ``lambda^k``
    only (the proof uses ``1 <= k``), so gamma does not depend on ``k``."""
    gamma, beta = _general_constants_by_iteration(point, k)
    names = ("lambda", "L_w", "B_s", "L_p", "S_p", "K_ss", "K_sw", "K_ws", "K_ww")
    values = dict(zip(names, point, strict=True))
    numeric = gl.general_constants_numeric(values)
    assert numeric == pytest.approx((gamma, beta), rel=1e-9)
    symbols = {str(s): s for s in gl.stated_gamma().free_symbols | gl.stated_beta().free_symbols}
    substitution = {symbols[name]: value for name, value in values.items()}
    assert float(gl.stated_gamma().subs(substitution)) == pytest.approx(gamma, rel=1e-9)
    assert float(gl.stated_beta().subs(substitution)) == pytest.approx(beta, rel=1e-9)
    derived = {str(s): s for s in gl.general_gamma().free_symbols | gl.general_beta().free_symbols}
    assert set(derived) == set(names)
    at = {derived[name]: value for name, value in values.items()}
    assert float(gl.general_gamma().subs(at)) == pytest.approx(gamma, rel=1e-9)
    assert float(gl.general_beta().subs(at)) == pytest.approx(beta, rel=1e-9)


def test_rnn_constants_are_the_sups_of_a_scaled_tanh_units_derivatives():
    """``rnn_constants`` for ``rho = s tanh`` (``L_rho = s = 0.5``, ``L2_rho = s max|tanh''|``)
    and ``w = lambda / L_rho``, against the sups over a grid of pre-activations ``a`` and
    directions of ``z = (h, x)`` (``||z|| = B_z``) of the derivatives of
    ``phi = rho(w h + u x)``: ``|d2 phi / dh2| = |rho''| w^2`` (K_ss), ``||d_w phi|| =
    |rho'| ||z||`` (L_w), ``||d2 phi / dw2|| = |rho''| ||z||^2`` (K_ww), and
    ``||d/dw (rho' w)|| = ||rho'' w z + rho' e_1||`` (K_sw = K_ws, below its bound by the
    triangle inequality, reached to 90 %)."""
    s, lam, bh, bx = 0.5, 0.7, 2.0, 1.5
    a = np.linspace(-4.0, 4.0, 40_001)
    first = s * (1 - np.tanh(a) ** 2)
    second = s * np.abs(-2 * np.tanh(a) * (1 - np.tanh(a) ** 2))
    l2 = float(second.max())
    w, bz = lam / s, math.hypot(bh, bx)
    values = {la.L_rho: s, la.L2_rho: l2, la.lam: lam, la.Bh: bh, la.Bz: bz}
    constants = {name: float(value.subs(values)) for name, value in gl.rnn_constants().items()}
    assert constants[gl.B_s] == pytest.approx(bh, rel=1e-14)
    assert constants[gl.K_ss] == pytest.approx(l2 * w**2, rel=1e-12)
    assert constants[gl.L_w] == pytest.approx(float(first.max()) * bz, rel=1e-12)
    assert constants[gl.K_ww] == pytest.approx(l2 * bz**2, rel=1e-12)
    assert constants[gl.K_sw] == constants[gl.K_ws]
    angles = np.linspace(0.0, 2 * math.pi, 181)[:, None]
    rho2 = -2 * s * np.tanh(a) * (1 - np.tanh(a) ** 2)
    mixed = np.hypot(rho2 * w * bz * np.cos(angles) + first, rho2 * w * bz * np.sin(angles))
    ratio = float(mixed.max()) / constants[gl.K_sw]
    assert 0.9 < ratio <= 1 + 1e-12
    assert constants[gl.K_sw] == pytest.approx(s + l2 * lam * bz / s, rel=1e-12)


# ----------------------------------------------------------------------------- stability


@pytest.mark.parametrize(
    ("activation", "l_rho"), [("tanh", 1.0), ("sigmoid", 0.25), ("relu", 1.0), ("identity", 1.0)]
)
def test_contraction_constant_by_hand(activation, l_rho):
    """``W = [[0, 2], [0.5, 0]]`` has singular values 2 and 0.5: ``lambda = 2 L_rho``."""
    if activation == "identity":
        model = LinearRNN(1, 2, dtype=torch.float64)
    else:
        model = VanillaRNN(1, 2, activation=activation, dtype=torch.float64)
    with torch.no_grad():
        model.weight_hh.copy_(torch.tensor([[0.0, 2.0], [0.5, 0.0]], dtype=torch.float64))
    assert contraction_constant(model) == pytest.approx(2.0 * l_rho, rel=1e-14)


def _vanilla_step(model: VanillaRNN, h: np.ndarray, x: np.ndarray) -> np.ndarray:
    """``rho(W h + U x)`` in numpy for a bias-free tanh or linear RNN."""
    a = h @ model.weight_hh.detach().numpy().T + x @ model.weight_ih.detach().numpy().T
    return np.tanh(a) if model.activation == "tanh" else a


@pytest.mark.parametrize(("num_pairs", "scale"), [(40, 1.0), (3, 0.2), (1, 2.0)])
def test_empirical_lipschitz_is_the_largest_ratio_of_its_draws(num_pairs, scale):
    """The same draws (``num_pairs // N`` pairs per input row, ``N(0, scale^2)`` states)
    redone with numpy; on ``W = diag(0.5, 0.2)`` (linear) every ratio is in [0.2, 0.5]."""
    model = random_vanilla_rnn(2, 3, 0.8, "tanh", generator=torch.Generator().manual_seed(1))
    inputs = torch.randn(4, 2, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    got = empirical_lipschitz(
        model, inputs, num_pairs, scale, generator=torch.Generator().manual_seed(3)
    )
    g = torch.Generator().manual_seed(3)
    x = inputs.repeat(max(1, num_pairs // 4), 1).numpy()
    h = (torch.randn(x.shape[0], 3, generator=g, dtype=torch.float64) * scale).numpy()
    h2 = (torch.randn(x.shape[0], 3, generator=g, dtype=torch.float64) * scale).numpy()
    gaps = np.linalg.norm(_vanilla_step(model, h, x) - _vanilla_step(model, h2, x), axis=1)
    assert got == pytest.approx(float((gaps / np.linalg.norm(h - h2, axis=1)).max()), rel=1e-12)
    assert 0 < got <= 0.8 + 1e-12
    linear = LinearRNN(2, 2, dtype=torch.float64)
    with torch.no_grad():
        linear.weight_hh.copy_(torch.diag(torch.tensor([0.5, 0.2], dtype=torch.float64)))
    ratio = empirical_lipschitz(linear, inputs, 400, generator=torch.Generator().manual_seed(4))
    assert 0.45 < ratio <= 0.5 + 1e-12


def _numpy_lstm_step(model: LSTMMap, state: np.ndarray, x: np.ndarray) -> np.ndarray:
    """``c' = i z + f c``, ``h' = o tanh(c')`` in numpy, gates stacked ``(i, f, z, o)``."""
    H = model.hidden_size
    c, h = state[:, :H], state[:, H:]
    pre = (
        h @ model.weight_hh.detach().numpy().T
        + x @ model.weight_ih.detach().numpy().T
        + model.bias.detach().numpy()
    )
    i, f, z, o = (pre[:, n * H : (n + 1) * H] for n in range(4))
    sigmoid = 1 / (1 + np.exp(-np.stack([i, f, o])))
    c_next = sigmoid[0] * np.tanh(z) + sigmoid[1] * c
    return np.concatenate([c_next, sigmoid[2] * np.tanh(c_next)], axis=1)


@pytest.mark.parametrize("norm", ["certificate", "euclidean"])
def test_pair_lipschitz_is_the_largest_ratio_of_its_pairs(norm):
    """The pairs (independent points of the box, then nudged copies clipped to it) drawn
    again from the same seed; the steps and the norms ``max(||c||_inf / v_c,
    ||h||_inf / v_h)`` (or Euclidean) in numpy."""
    model = ls.random_stable_lstm(2, 3, 0.8, 1.0, generator=torch.Generator().manual_seed(5))
    got = ls.pair_lipschitz(
        model, 1.0, 30, torch.Generator().manual_seed(6), norm=norm, relative_step=0.01
    )
    g = torch.Generator().manual_seed(6)
    states, x = ls.sample_box_states(model, 1.0, 30, g)
    others, _ = ls.sample_box_states(model, 1.0, 30, g)
    n = min(len(states), len(others))
    states, x, others = states[:n].numpy(), x[:n].numpy(), others[:n].numpy().copy()
    certificate = ls.lstm_certificate(model, 1.0)
    limit = np.concatenate([np.minimum(certificate.cell_bound.numpy(), 50.0), np.ones(3)])
    noise = 2 * torch.rand(states[n // 2 :].shape, generator=g, dtype=torch.float64) - 1
    others[n // 2 :] = np.clip(states[n // 2 :] + 0.01 * limit * noise.numpy(), -limit, limit)
    v_c, v_h = certificate.weights

    def measure(s: np.ndarray) -> np.ndarray:
        if norm == "euclidean":
            return np.linalg.norm(s, axis=1)
        return np.maximum(np.abs(s[:, :3]).max(1) / v_c, np.abs(s[:, 3:]).max(1) / v_h)

    gaps = measure(_numpy_lstm_step(model, states, x) - _numpy_lstm_step(model, others, x))
    expected = float((gaps / measure(states - others)).max())
    assert got == pytest.approx(expected, rel=1e-10)
    if norm == "certificate":
        assert 0 < got <= certificate.lam + 1e-12


def test_authors_constants_constraint_is_the_papers_constants_with_its_hand_lambda():
    """Row sums ``(0.395, 0.155, 0.099, 0.395)``, ``||U_f||_inf <= 0.25``, forget bias
    ``<= 0`` and every other part free; with ``||x||_inf <= 1`` the free gates reach 1,
    ``F = sigmoid(0.155 + 0.25)``, ``C = 1 / (1 - F)``,
    ``a = 0.395 / 4 + 0.099 + 0.155 C / 4``, ``g = a + 0.395 tanh(C) / 4`` and
    ``lambda = rho([[F, a], [F, g]]) = 0.9290`` (the number Chapters 6-7 quote)."""
    constraint = ls.authors_constants_constraint()
    assert constraint.recurrent_radius == {"i": 0.395, "f": 0.155, "z": 0.099, "o": 0.395}
    assert constraint.input_radius == {"i": math.inf, "f": 0.25, "z": math.inf, "o": math.inf}
    assert constraint.bias_max == {"i": math.inf, "f": 0.0, "z": math.inf, "o": math.inf}
    for forget_bias, bound in ((0.0, 1.0), (-1.5, 0.5), (0.7, 2.0)):
        forget = 1 / (1 + math.exp(-(forget_bias + 0.155 + 0.25 * bound)))
        cell = 1 / (1 - forget)
        a = 0.395 / 4 + 0.099 + 0.155 * cell / 4
        g = a + 0.395 * math.tanh(cell) / 4
        rho = (forget + g + math.sqrt((forget - g) ** 2 + 4 * a * forget)) / 2
        got = ls.authors_constants_constraint(forget_bias).contraction_bound(bound)
        assert got == pytest.approx(rho, rel=1e-12)
    assert ls.authors_constants_constraint().contraction_bound(1.0) == pytest.approx(
        0.9290, abs=5e-5
    )


@pytest.mark.parametrize(
    "sums",
    [dict(ls.AUTHORS_RECURRENT_SCALES), {"i": 0.2, "f": 0.3, "z": 0.1, "o": 0.6}],
)
def test_forget_gate_threshold_solves_the_characteristic_equation(sums):
    """``rho([[F, a], [F, g]]) = 1`` iff ``(1 - F)(1 - g) = a F`` (with ``F, g < 1``), where
    ``C = 1 / (1 - F)``, ``a = ||W_i|| / 4 + ||W_z|| + C ||W_f|| / 4``,
    ``g = a + ||W_o|| tanh(C) / 4``: the returned ``F`` is a root, by hand (to 1e-7: the
    library builds ``M`` with ``torch.tensor``'s default float32)."""

    def residual(forget: float) -> float:
        cell = 1 / (1 - forget)
        a = sums["i"] / 4 + sums["z"] + cell * sums["f"] / 4
        g = a + sums["o"] * math.tanh(cell) / 4
        return (1 - forget) * (1 - g) - a * forget

    threshold = ls.forget_gate_threshold(sums)
    assert 0 < threshold < 1
    assert residual(threshold) == pytest.approx(0.0, abs=1e-7)
    assert residual(threshold - 1e-5) > 0 > residual(threshold + 1e-5)


def test_diagonal_certificate_certifies_exactly_below_one():
    def certificate(lam: float) -> ds.DiagonalCertificate:
        return ds.DiagonalCertificate(torch.ones(2), lam, 2.0, 0.5, 1.0)

    assert certificate(1 - 1e-12).certifies
    assert not certificate(1.0).certifies
    assert not certificate(1.5).certifies


# ----------------------------------------------------------------------------- WikiText-2


def test_end_of_epoch_certificate_against_a_numpy_svd():
    """Layer 0 moved by half the slack stays; layer 1 moved by 1e-3 is re-projected: the
    norms before and after are numpy's largest singular values in float64."""
    torch.manual_seed(0)
    model = lm.WordLanguageModel("rnn", 30, 8, 8, num_layers=2, stable=True)
    lm.project_stable_(model)
    with torch.no_grad():
        model.rnn.weight_hh_l0.mul_(1 + 0.5 * lm.CERTIFICATE_SLACK)
        model.rnn.weight_hh_l1.mul_(1.001)
    before = [
        float(np.linalg.norm(getattr(model.rnn, f"weight_hh_l{n}").detach().double().numpy(), 2))
        for n in range(2)
    ]
    kept = model.rnn.weight_hh_l0.detach().clone()
    certificate = lm.certify_stable_rnn_(model)
    assert certificate["norms"] == pytest.approx(before, rel=1e-12)
    assert before[0] <= 1 + lm.CERTIFICATE_SLACK < before[1]
    assert certificate["reprojected_layers"] == [1]
    after = float(np.linalg.norm(model.rnn.weight_hh_l1.detach().double().numpy(), 2))
    assert certificate["norms_after"] == pytest.approx([before[0], after], rel=1e-12)
    assert after == pytest.approx(1.0, abs=1e-6)
    assert torch.equal(model.rnn.weight_hh_l0.detach(), kept)


def test_float64_spectral_norms_by_hand():
    """The float64 norms are numpy's."""
    batch = torch.randn(3, 4, 5, generator=torch.Generator().manual_seed(8))
    expected = [np.linalg.norm(m.double().numpy(), 2) for m in batch]
    assert spectral_norms_float64(batch).tolist() == pytest.approx(expected, rel=1e-12)
    assert spectral_norms_float64(batch).dtype == torch.float64


def test_fixed_point_spectral_radius_of_the_bistable_unit_by_hand():
    """``h' = tanh(2 h + x)``, ``x = 0``: at ``h* = tanh(2 h*)`` the residual is 0 and the
    radius is ``2 (1 - h*^2)`` (below 1: attracting); at 0 it is 2 (repelling); away from a
    fixed point the residual is ``|tanh(2 h) - h|``."""
    from stablernn_lib.theory.necessity import attracting_fixed_point, bistable_rnn

    model = bistable_rnn()
    point = attracting_fixed_point(2.0)
    zero = torch.zeros(1, dtype=torch.float64)
    residual, radius = ev.fixed_point_spectral_radius(model, zero + point, zero)
    assert residual == pytest.approx(0.0, abs=1e-12)
    assert radius == pytest.approx(2.0 * (1 - point**2), rel=1e-10)
    assert ev.fixed_point_spectral_radius(model, zero, zero) == (0.0, pytest.approx(2.0))
    residual, radius = ev.fixed_point_spectral_radius(model, zero + 0.3, zero)
    assert residual == pytest.approx(abs(math.tanh(0.6) - 0.3), rel=1e-12)
    assert radius == pytest.approx(2.0 * (1 - math.tanh(0.6) ** 2), rel=1e-12)


@pytest.mark.parametrize(("lam", "bound"), [(0.8, 1.0), (0.95, 0.5)])
def test_stable_lstm_constraint_solves_the_hand_equation(lam, bound):
    """The authors' shape scaled by ``t``: free gates at 1, ``F = sigmoid(0.155 t + 0.25 B)``,
    ``C = 1 / (1 - F)``, ``a = t (0.395 / 4 + 0.099 + 0.155 C / 4)``,
    ``g = a + 0.395 t tanh(C) / 4``; the returned radii are ``t`` times the authors' and
    ``rho([[F, a], [F, g]]) = lam`` by hand."""
    constraint = ls.stable_lstm_constraint(lam, bound)
    t = constraint.recurrent_radius["f"] / 0.155
    for gate, scale in ls.AUTHORS_RECURRENT_SCALES.items():
        assert constraint.recurrent_radius[gate] == pytest.approx(t * scale, rel=1e-12)
    forget = 1 / (1 + math.exp(-(0.155 * t + 0.25 * bound)))
    cell = 1 / (1 - forget)
    a = t * (0.395 / 4 + 0.099 + 0.155 * cell / 4)
    g = a + 0.395 * t * math.tanh(cell) / 4
    rho = (forget + g + math.sqrt((forget - g) ** 2 + 4 * a * forget)) / 2
    assert rho == pytest.approx(lam, rel=1e-9)
