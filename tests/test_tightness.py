"""Adversarial searches against every bound: none may be broken, and they must bite.

Each search runs gradient ascent (seconds) on measured / bound; a ratio above
``1 + TOL`` would be a counterexample to the lemma and fails the suite.  The lower
thresholds show that the searches find instances close to the bound, so a bound
that became wrong by a constant factor would be caught.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from stablernn_lib.core.norms import spectral_norm
from stablernn_lib.theory import tightness
from stablernn_lib.theory.weights_close import decay_recurrence_solution_log10, proposition2_bound

# float64 rounding in a ratio of two computed norms (sequences of a few dozen steps)
TOL = 1e-9
CONFIG = replace(tightness.CONFIGS["smoke"], restarts=1, steps=80)
COMMITTED = Path(__file__).resolve().parents[1] / tightness.DEFAULT_OUT


def generator(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@pytest.mark.parametrize(
    ("activation", "lam", "floor"), [("identity", 0.5, 0.9), ("tanh", 0.9, 0.9)]
)
def test_lemma1_search_is_tight_and_never_breaks_the_bound(activation, lam, floor):
    best = tightness.lemma1_search(CONFIG, lam, 2, activation, generator())
    assert best["ratio"] <= 1 + TOL
    assert best["ratio"] > floor


@pytest.mark.parametrize(
    ("activation", "lam", "floor"), [("identity", 0.5, 0.6), ("tanh", 0.1, 0.8)]
)
def test_lemma2_search_never_breaks_gamma_and_gets_close(activation, lam, floor):
    best = tightness.lemma2_search(CONFIG, lam, 1, activation, 1.0, generator(), input_norm=0.1)
    assert best["ratio"] <= 1 + TOL
    assert best["ratio"] > floor


@pytest.mark.parametrize(
    ("activation", "input_norm", "floor"), [("identity", 1.0, 0.5), ("tanh", 0.1, 0.4)]
)
def test_lemma3_search_never_breaks_beta(activation, input_norm, floor):
    best = tightness.lemma3_search(CONFIG, 0.1, activation, 0.0, generator(), input_norm)
    assert best["ratio"] <= 1 + TOL
    assert best["ratio"] > floor
    assert 0 < best["instance_lam"] <= 0.1 * (1 + 1e-9)


@pytest.mark.parametrize(("lam", "floor"), [(0.5, 0.95), (0.9, 0.997)])
def test_beta_is_asymptotically_exact_on_the_one_unit_linear_rnn(lam, floor):
    """Hessian / beta on h_t = lam h_{t-1} + 1: both ~ 3 / (1 - lam)^4, so the ratio -> 1.

    A beta smaller by 1 % anywhere in its dominant terms (halving its last term makes it
    2/3 as large) breaks this test."""
    ratio = tightness.lemma3_linear_unit_ratio(lam)
    assert floor < ratio <= 1 + 1e-5  # the 1e-6 step gives O(1e-6) relative error


def test_lstm_search_never_breaks_the_certificate_and_gets_close():
    best = tightness.lstm_search(replace(CONFIG, lstm_climb_steps=20), 1, 0.5, generator())
    assert best["final_lam"] < 1
    assert best["ratio"] <= 1 + TOL
    assert best["ratio"] > 0.9


def test_proposition2_worst_case_attains_the_recurrence_and_the_bound_at_one_step():
    alpha, beta, gap = 0.1, 5.0, 1.0
    for n in (1, 7, 50):
        exact = 10 ** decay_recurrence_solution_log10(alpha, beta, gap, n)
        assert math.isclose(
            tightness.proposition2_worst_case(alpha, beta, gap, n), exact, rel_tol=1e-9
        )
    rows = tightness.proposition2_search()
    assert all(row["ratio"] <= 1 + TOL for row in rows)
    assert max(row["ratio"] for row in rows if row["num_steps"] == 1) == pytest.approx(1.0)
    # the one-step equality is the only place the closed form is attained
    assert max(row["ratio"] for row in rows if row["num_steps"] >= 10) < 0.5
    assert proposition2_bound(alpha, 2.0, beta, 1, 0.5, 1) == pytest.approx(alpha * gap)


def test_command_writes_results_with_provenance(tmp_path):
    out = tmp_path / "tightness.json"
    from stablernn_lib.__main__ import main

    tiny = replace(tightness.CONFIGS["smoke"], steps=5, lstm_climb_steps=1)
    original = tightness.CONFIGS["smoke"]
    tightness.CONFIGS["smoke"] = tiny
    try:
        assert main(["tightness", "--config", "smoke", "--out", str(out)]) == 0
    finally:
        tightness.CONFIGS["smoke"] = original
    results = json.loads(out.read_text())
    assert {"git_commit", "device"} <= results["provenance"].keys()
    assert results["config"]["name"] == "smoke" and results["duration_s"] > 0
    assert "| Lemma 1" in tightness.tightness_table(results)


def test_committed_table_is_reproduced_by_the_code():
    """Recompute a cheap subset of the committed run with today's code and compare."""
    if not COMMITTED.exists():
        pytest.skip(f"no committed tightness run at {COMMITTED}")
    results = json.loads(COMMITTED.read_text())
    config = tightness.TightnessConfig(
        **{
            name: tuple(value) if isinstance(value, list) else value
            for name, value in results["config"].items()
        }
    )
    assert config == tightness.CONFIGS[config.name]
    searches = results["searches"]
    # one whole search, from its own generator.  Gradient ascent amplifies rounding, so on
    # another CPU (AVX-512 vs AVX2 kernels) it ends at another near-worst instance: measured
    # 0.9958 (committed) and 0.9778 (an AVX-512 machine).  Both must be near-tight and hold.
    again = tightness.rerun_search(config, "lemma1", 0)
    committed = searches["lemma1"][0]
    same = ("lam", "k", "activation")
    assert {k: again[k] for k in same} == {k: committed[k] for k in same}
    assert 0.95 < again["ratio"] <= 1 + TOL and 0.95 < committed["ratio"] <= 1 + TOL
    assert again["instance_lam"] <= again["lam"] * (1 + 1e-9)
    # the deterministic rows: Proposition 2's worst problem and the one-unit beta instance
    for row, fresh in zip(searches["proposition2"], tightness.proposition2_search(), strict=True):
        assert row["ratio"] == pytest.approx(fresh["ratio"], rel=1e-9)
    linear = {row["lam"]: row["ratio"] for row in searches["lemma3_linear_unit"]}
    assert linear[0.5] == pytest.approx(tightness.lemma3_linear_unit_ratio(0.5), rel=1e-6)
    # what the chapter says about the table
    worst = results["worst_adversarial"]
    assert all(value <= 1 + TOL for value in worst.values())
    assert worst["lemma1"] > 0.99 and worst["proposition2"] == pytest.approx(1.0)
    assert linear[0.99] > 0.999 and worst["lemma3_linear_unit"] > worst["lemma3_beta"]
    assert all(r["instance_lam"] <= r["lam"] * (1 + 1e-9) for r in searches["lemma1"])


def test_beta_and_the_one_unit_hessian_share_their_leading_order_in_sympy():
    """``p = U^2 / (2 (1 - W)^2)`` (the limit ``T -> oo`` of ``h_T^2 / 2``) has
    ``d^2 p / dW^2 = 3 / (1 - lam)^4`` at ``(lam, 1)``, and ``beta`` of the linear RNN with
    ``L_x = B_x = 1``, ``L_p = B_h``, ``S_p = 1`` is ``3 / (1 - lam)^4`` to leading order."""
    import sympy as sp

    from stablernn_lib.symbolic import lemma_algebra as la

    W, U, lam = sp.symbols("W U lambda", positive=True)
    p = U**2 / (2 * (1 - W) ** 2)
    curvature = sp.diff(p, W, 2).subs({W: lam, U: 1})
    assert sp.simplify(curvature - 3 / (1 - lam) ** 4) == 0
    bh = 1 / (1 - lam)
    beta = la.lemma3_beta_expression().subs(
        {la.L_rho: 1, la.L2_rho: 0, la.Sp: 1, la.Lp: bh, la.Bz: sp.sqrt(bh**2 + 1), la.lam: lam}
    )
    gap = sp.Symbol("epsilon", positive=True)  # lam = 1 - gap
    ratio = sp.simplify((curvature / beta).subs(lam, 1 - gap))
    assert sp.limit(ratio, gap, 0, "+") == 1


# ----------------------------------------------------------------------------- values by hand
# The tests below check each ratio, table and job of the module against an independent
# computation (sympy on a one-unit RNN, float64 loops, hand-written tables).


def _one_unit_loss(w, u, xs, y, activation, k=None):
    """``(h_T - y)^2 / 2`` of ``h_t = rho(w h_{t-1} + u x_t)`` in sympy (last ``k`` inputs)."""
    import sympy as sp

    rho = sp.tanh if activation == "tanh" else (lambda a: a)
    h = sp.Integer(0)
    for x in xs if k is None else xs[-k:]:
        h = rho(w * h + u * x)
    return (h - y) ** 2 / 2


def _one_unit_gradient(point, xs, y, activation, k=None):
    import sympy as sp

    w, u = sp.symbols("w u")
    loss = _one_unit_loss(w, u, xs, y, activation, k)
    gradient = sp.lambdify((w, u), [sp.diff(loss, v) for v in (w, u)], "math")
    return [float(g) for g in gradient(*point)]


def _unit(value: float) -> torch.Tensor:
    return torch.tensor([[value]], dtype=torch.float64)


def test_lemma1_ratio_is_one_minus_lam_to_the_t_minus_k_on_the_linear_unit():
    """``h_t = lam h_{t-1} + u``: the gap at ``T`` is ``u lam^k (1 - lam^(T-k)) / (1 - lam)``."""
    lam, T, k = 0.5, 6, 2
    inputs = torch.full((T, 1), 0.5, dtype=torch.float64)
    ratio = tightness.lemma1_ratio(_unit(lam), _unit(2.0), inputs, "identity", k)
    assert ratio == pytest.approx(1 - lam ** (T - k), rel=1e-12)


@pytest.mark.parametrize("activation", ["identity", "tanh"])
def test_lemma1_ratio_equals_a_float64_loop(activation):
    """Two units, inputs of different norms: max_t ||h_t - h^k_t|| by loops over t."""
    g = generator(3)
    W = torch.randn(2, 2, generator=g, dtype=torch.float64) * 0.4
    U = torch.randn(2, 3, generator=g, dtype=torch.float64)
    inputs = (
        torch.randn(7, 3, generator=g, dtype=torch.float64) * torch.linspace(0.2, 2, 7)[:, None]
    )
    k = 3
    rho = np.tanh if activation == "tanh" else (lambda a: a)
    w, u, xs = W.numpy(), U.numpy(), inputs.numpy()

    def run(window):
        h = np.zeros(2)
        for x in window:
            h = rho(w @ h + u @ x)
        return h

    measured = max(np.linalg.norm(run(xs[: t + 1]) - run(xs[max(0, t - k + 1) : t + 1]))
                   for t in range(len(xs)))  # fmt: skip
    lam, lx = np.linalg.norm(w, 2), np.linalg.norm(u, 2)
    bx = np.linalg.norm(xs, axis=1).max()
    bound = lam**k * lx * bx / (1 - lam)
    assert tightness.lemma1_ratio(W, U, inputs, activation, k) == pytest.approx(
        measured / bound, rel=1e-10
    )


@pytest.mark.parametrize("activation", ["identity", "tanh"])
def test_lemma2_ratio_equals_the_sympy_gradient_gap_over_gamma(activation):
    from stablernn_lib.core import bounds

    w, u, xs, y, k = 0.6, -0.8, [0.3, -1.0, 0.5, 0.9, -0.2], 0.4, 2
    full = _one_unit_gradient((w, u), xs, y, activation)
    cut = _one_unit_gradient((w, u), xs, y, activation, k)
    gap = math.hypot(full[0] - cut[0], full[1] - cut[1])
    lam, lx, bx = abs(w), abs(u), 1.0
    lp = lx * bx / (1 - lam) + abs(y)
    l2 = 0.0 if activation == "identity" else bounds.activation_smoothness("tanh")
    gamma = bounds.lemma2_gamma(
        bounds.GradientConstants(lam, lx, bx, lp, 1.0, l_rho=1.0, l2_rho=l2)
    )
    inputs = torch.tensor(xs, dtype=torch.float64)[:, None]
    target = torch.tensor([y], dtype=torch.float64)
    ratio = tightness.lemma2_ratio(_unit(w), _unit(u), inputs, target, activation, k)
    assert ratio == pytest.approx(gap / (gamma * k * lam**k), rel=1e-9)


@pytest.mark.parametrize("activation", ["identity", "tanh"])
def test_lemma3_ratio_equals_the_sympy_gradient_difference_over_beta(activation):
    """The two points are ordered differently in ``|W|`` and ``|U|``: beta takes both maxima."""
    from stablernn_lib.core import bounds

    first, second = (0.7, 0.5), (0.4, -0.9)
    xs, y = [0.3, -1.5, 0.5, 0.9], 0.4
    g1 = _one_unit_gradient(first, xs, y, activation)
    g2 = _one_unit_gradient(second, xs, y, activation)
    distance = math.hypot(first[0] - second[0], first[1] - second[1])
    lam, lx, bx = 0.7, 0.9, 1.5
    lp = lx * bx / (1 - lam) + abs(y)
    l2 = 0.0 if activation == "identity" else bounds.activation_smoothness("tanh")
    beta = bounds.lemma3_beta(bounds.GradientConstants(lam, lx, bx, lp, 1.0, l_rho=1.0, l2_rho=l2))
    inputs = torch.tensor(xs, dtype=torch.float64)[:, None]
    target = torch.tensor([y], dtype=torch.float64)
    ratio = tightness.lemma3_ratio(
        (_unit(first[0]), _unit(first[1])),
        (_unit(second[0]), _unit(second[1])),
        inputs,
        target,
        activation,
    )
    expected = math.hypot(g1[0] - g2[0], g1[1] - g2[1]) / (beta * distance)
    assert ratio == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("lam", [0.3, 0.8])
def test_linear_unit_ratio_is_the_sympy_hessian_norm_over_beta(lam):
    """``h_T = u (1 - w^T) / (1 - w)``, ``T = ceil(log 1e-12 / log lam)``: ``||H||_2 / beta``."""
    import sympy as sp

    from stablernn_lib.core import bounds

    T = math.ceil(math.log(1e-12) / math.log(lam))
    w, u = sp.symbols("w u")
    loss = (u * (1 - w**T) / (1 - w)) ** 2 / 2
    at = {w: sp.nsimplify(lam), u: 1}
    hessian = np.array([[float(sp.diff(loss, a, b).subs(at)) for b in (w, u)] for a in (w, u)])
    bh = 1 / (1 - lam)
    beta = bounds.lemma3_beta(
        bounds.GradientConstants(lam, 1.0, 1.0, bh, 1.0, l_rho=1.0, l2_rho=0.0)
    )
    expected = np.linalg.norm(hessian, 2) / beta
    assert tightness.lemma3_linear_unit_ratio(lam) == pytest.approx(expected, rel=1e-5)
    for bad in (0.0, 1.0):
        with pytest.raises(ValueError, match="lam must lie in"):
            tightness.lemma3_linear_unit_ratio(bad)


def test_final_state_and_gradient_match_the_one_unit_closed_forms():
    xs, y = [0.3, -1.0, 0.5], 0.2
    inputs = torch.tensor(xs, dtype=torch.float64)[:, None]
    w, u = 0.6, -0.8
    for activation in ("identity", "tanh"):
        rho = math.tanh if activation == "tanh" else (lambda a: a)
        h = 0.0
        for x in xs:
            h = rho(w * h + u * x)
        state = tightness._final_state(_unit(w), _unit(u), inputs, activation)
        assert float(state[0]) == pytest.approx(h, rel=1e-14)
        W = _unit(w).requires_grad_()
        U = _unit(u).requires_grad_()
        target = torch.tensor([y], dtype=torch.float64)
        grad = tightness._gradient(W, U, inputs, target, activation)
        assert grad.tolist() == pytest.approx(_one_unit_gradient((w, u), xs, y, activation))
        assert grad.requires_grad  # differentiable, for the Lemma 3 search


def test_project_rows_scales_only_the_rows_outside_the_ball():
    rows = torch.tensor([[3.0, 4.0], [0.3, 0.4], [0.0, 0.0]], dtype=torch.float64)
    tightness._project_rows_(rows, 2.0)
    expected = torch.tensor([[1.2, 1.6], [0.3, 0.4], [0.0, 0.0]], dtype=torch.float64)
    torch.testing.assert_close(rows, expected, rtol=1e-12, atol=0)


def test_variables_are_projected_onto_every_constraint():
    config = replace(CONFIG, hidden_size=3, input_size=2, seq_len=5)
    v = tightness._RNNVariables.draw(config, 0.4, "tanh", generator(), 0.5, 0.2)
    assert [t.shape for t in v.tensors()] == [(3, 3), (3, 2), (5, 2), (3,)]
    assert all(t.requires_grad and t.dtype == torch.float64 for t in v.tensors())
    assert spectral_norm(v.W.detach()) == pytest.approx(0.4, rel=1e-9)  # l_rho = 1
    assert v.contraction() == pytest.approx(0.4, rel=1e-9)
    assert spectral_norm(v.U.detach()) <= 1 + 1e-9
    assert float(v.inputs.detach().norm(dim=-1).max()) == pytest.approx(0.2, rel=1e-9)
    assert float(v.target.detach().norm()) == pytest.approx(0.5, rel=1e-9)
    free = tightness._RNNVariables.draw(config, 0.4, "identity", generator())
    assert float(free.target.detach().norm()) == 0 and free.input_norm == 1.0


def test_best_skips_non_finite_ratios():
    rows = [{"ratio": 0.5, "a": 1}, {"ratio": math.nan}, {"ratio": 0.7, "a": 2}, {"ratio": 0.6}]
    assert tightness._best(rows) == {"ratio": 0.7, "a": 2}
    assert math.isnan(tightness._best([{"ratio": math.inf}])["ratio"])
    assert tightness._record(np.float64(0.25), k=3) == {"ratio": 0.25, "k": 3}


@pytest.mark.parametrize(
    "changes",
    [
        {"restarts": 0},
        {"steps": 0},
        {"seq_len": 1, "ks": (1,)},
        {"lams": (0.5, 1.0)},
        {"lams": (0.0,)},
        {"lstm_lams": (1.0,)},
        {"beta_lams": (0.0,)},
        {"ks": (20,)},
    ],
)
def test_config_rejects_what_the_searches_cannot_run(changes):
    with pytest.raises(ValueError, match="need restarts|lambda must lie|shorter than seq_len"):
        replace(CONFIG, **changes)


def test_config_accepts_its_smallest_values_and_rejects_unknown_activations():
    replace(CONFIG, restarts=1, steps=1, seq_len=2, ks=(1,))
    with pytest.raises(ValueError, match=r"unknown activations \['relu'\]"):
        replace(CONFIG, activations=("tanh", "relu"))


def _fake_results() -> dict:
    """A results dict in the shape of ``run_tightness``, with round numbers."""
    searches = {
        "lemma1": [
            {"lam": 0.5, "k": 2, "activation": "tanh", "ratio": 0.25, "instance_lam": 0.5},
            {"lam": 0.1, "k": 2, "activation": "tanh", "ratio": 0.75, "instance_lam": 0.06251234},
            {"lam": 0.5, "k": 3, "activation": "tanh", "ratio": 0.5, "instance_lam": 0.375},
        ],
        "lemma2_gamma": [
            {"lam": 0.5, "k": 1, "input_norm": 1.0, "ratio": 0.125, "instance_lam": 0.5},
            {"lam": 0.1, "k": 1, "input_norm": 0.25, "ratio": 0.0625, "instance_lam": 0.1},
        ],
        "lemma3_beta": [{"lam": 0.5, "ratio": math.nan}, {"lam": 0.9, "ratio": 0.5}],
        "lemma3_linear_unit": [{"lam": 0.5, "ratio": 0.96}, {"lam": 0.9, "ratio": 0.998}],
        "proposition2": [
            {"alpha_beta": 0.5, "num_steps": 1, "ratio": 1.0},
            {"alpha_beta": 0.5, "num_steps": 10, "ratio": 0.25},
            {"alpha_beta": 0.0, "num_steps": 1, "ratio": 1.0},
            {"alpha_beta": 0.0, "num_steps": 10, "ratio": 0.5},
        ],
        "lstm_lambda": [{"hidden_size": 2, "final_lam": 0.75, "ratio": 0.875}],
    }
    return {
        "searches": searches,
        "worst_adversarial": {
            name: tightness._best(rows)["ratio"] for name, rows in searches.items()
        },
        "worst_random": {
            "lemma1": 0.8641,
            "lemma2_gamma": 0.5,
            "lemma3_beta": 0.25,
            "proposition2_log10": -4892.6,
            "lstm_lambda": 0.96539,
        },
    }


def test_tightness_table_by_hand():
    results = _fake_results()
    assert tightness.tightness_table(results).splitlines() == [
        "| bound | worst ratio, adversarial search | worst ratio, random instances |",
        "|---|---|---|",
        "| Lemma 1: $\\lambda^k L_x B_x / (1 - \\lambda)$ | 0.75 | 0.864 |",
        "| Lemma 2: $\\gamma k \\lambda^k$ | 0.125 | 0.5 |",
        "| Lemma 3: $\\beta \\Vert w - w'\\Vert$ | 0.5 | 0.25 |",
        "| Lemma 3, one-unit linear RNN, $\\lambda \\le 0.99$ (no search) | 0.998 | n/a |",
        "| Proposition 2: $\\alpha\\gamma k\\lambda^k N^{\\alpha\\beta+1}$ | 1 | "
        "$10^{-4893}$ (Figure 1 run) |",
        "| Chapter 4 LSTM theorem: $\\lambda = \\rho(M)$ | 0.875 | 0.965 |",
    ]
    results["worst_random"]["proposition2_log10"] = None
    assert "| 1 | n/a |" in tightness.tightness_table(results)


def test_worst_settings_table_by_hand():
    lines = tightness.worst_settings_table(_fake_results()).splitlines()
    assert lines[:3] == [
        "| bound | worst ratio | found at |",
        "|---|---:|---|",
        "| Lemma 1: $\\lambda^k L_x B_x / (1 - \\lambda)$ | 0.75 | "
        "lam = 0.1, k = 2, activation = tanh, instance_lam = 0.0625 |",
    ]
    assert lines[4] == "| Lemma 3: $\\beta \\Vert w - w'\\Vert$ | 0.5 | lam = 0.9 |"
    assert lines[6].endswith("| 1 | alpha_beta = 0.5, num_steps = 1 |")
    assert lines[7].endswith("| 0.875 | hidden_size = 2, final_lam = 0.75 |")
    assert len(lines) == 8


def test_per_setting_table_by_hand():
    assert tightness.per_setting_table(_fake_results(), "lemma1").splitlines() == [
        "| setting | radius 0.1 | radius 0.5 |",
        "|---|---:|---:|",
        "| activation = tanh, k = 2 | 0.75 ($\\lambda$ = 0.0625) | 0.25 ($\\lambda$ = 0.5) |",
        "| activation = tanh, k = 3 |  | 0.5 ($\\lambda$ = 0.375) |",
    ]


def test_per_setting_table_formats_float_settings_with_g():
    assert tightness.per_setting_table(_fake_results(), "lemma2_gamma").splitlines()[2:] == [
        "| input_norm = 1, k = 1 |  | 0.125 ($\\lambda$ = 0.5) |",
        "| input_norm = 0.25, k = 1 | 0.0625 ($\\lambda$ = 0.1) |  |",
    ]


def test_proposition2_table_by_hand():
    assert tightness.proposition2_table(_fake_results()).splitlines() == [
        "| $\\alpha\\beta$ | $N = 1$ | $N = 10$ |",
        "|---:|---:|---:|",
        "| 0 | 1 | 0.5 |",
        "| 0.5 | 1 | 0.25 |",
    ]


def _recording_searches(monkeypatch) -> list:
    """Replace every search by one that records its arguments and returns them."""
    calls = []

    def recorder(name):
        def search(*args, **kwargs):
            calls.append((name, args, kwargs))
            return {"ratio": float(len(calls)), "call": (name, args[1:], kwargs)}

        return search

    for name in ("lemma1_search", "lemma2_search", "lemma3_search", "lstm_search"):
        monkeypatch.setattr(tightness, name, recorder(name))
    return calls


def test_search_jobs_cover_every_setting_in_order(monkeypatch):
    calls = _recording_searches(monkeypatch)
    config = replace(
        CONFIG,
        activations=("identity", "tanh"),
        lams=(0.3, 0.6),
        ks=(1, 3),
        target_norms=(0.0, 1.0),
        input_norms=(1.0, 0.1),
        lstm_hidden_sizes=(1, 2),
        lstm_lams=(0.5, 0.9),
    )
    g = generator()
    expected = []
    for act in ("identity", "tanh"):
        for lam in (0.3, 0.6):
            for k in (1, 3):
                expected.append(("lemma1_search", (config, lam, k, act, g)))
                for y in (0.0, 1.0):
                    for b in (1.0, 0.1):
                        expected.append(("lemma2_search", (config, lam, k, act, y, g, b)))
            for y in (0.0, 1.0):
                for b in (1.0, 0.1):
                    expected.append(("lemma3_search", (config, lam, act, y, g, b)))
    for hidden in (1, 2):
        for lam in (0.5, 0.9):
            expected.append(("lstm_search", (config, hidden, lam, g)))
    jobs = tightness.search_jobs(config)
    names = {"lemma1": "lemma1_search", "lemma2_gamma": "lemma2_search"}
    names |= {"lemma3_beta": "lemma3_search", "lstm_lambda": "lstm_search"}
    assert [names[name] for name, _ in jobs] == [name for name, _ in expected]
    for _, job in jobs:
        job(g)
    assert [(name, args) for name, args, _ in calls] == expected


def test_job_generators_are_seeded_by_index_and_rerun_picks_the_right_job(monkeypatch):
    calls = _recording_searches(monkeypatch)
    config = replace(CONFIG, seed=7, lams=(0.3, 0.6), ks=(1, 3))
    assert tightness.job_generator(config, 5).initial_seed() == 1_000_003 * 7 + 5
    jobs = tightness.search_jobs(config)
    index = [i for i, (name, _) in enumerate(jobs) if name == "lemma2_gamma"][2]
    result = tightness.rerun_search(config, "lemma2_gamma", 2)
    (name, args, _), *rest = calls
    assert name == "lemma2_search" and not rest
    assert args[4] == CONFIG.target_norms[0] and args[2] == 3  # third lemma 2 job: k = 3
    assert args[5].initial_seed() == 1_000_003 * 7 + index
    assert result["ratio"] == 1.0


def test_run_tightness_collects_every_search_and_its_worst_ratio(monkeypatch):
    _recording_searches(monkeypatch)
    monkeypatch.setattr(tightness, "proposition2_search", lambda: [{"ratio": 0.5}, {"ratio": 1}])
    monkeypatch.setattr(
        tightness, "beta_asymptotic", lambda lams: [{"lam": x, "ratio": x} for x in lams]
    )
    monkeypatch.setattr(tightness, "random_baselines", lambda config: {"seed": config.seed})
    config = replace(CONFIG, seed=3, beta_lams=(0.2, 0.4))
    results = tightness.run_tightness(config, progress=False)
    jobs = tightness.search_jobs(config)
    counts = {name: sum(1 for n, _ in jobs if n == name) for name, _ in jobs}
    assert {name: len(results["searches"][name]) for name in counts} == counts
    # the recording searches return the running call count as the ratio
    assert results["worst_adversarial"] == {
        "lemma1": 1.0,
        "lemma2_gamma": 3.0,
        "lemma3_beta": 5.0,
        "lstm_lambda": 6.0,
        "proposition2": 1.0,
        "lemma3_linear_unit": 0.4,
    }
    assert results["worst_random"] == {"seed": 3} and results["seed"] == 3
    assert results["config"]["beta_lams"] == (0.2, 0.4) and results["duration_s"] >= 0
    assert "git_commit" in results["provenance"]


def test_proposition2_search_grid_and_values():
    rows = tightness.proposition2_search()
    assert [(row["alpha_beta"], row["num_steps"]) for row in rows] == [
        (c, n) for c in (0.0, 0.1, 0.5, 1.0, 2.0) for n in (1, 2, 10, 100)
    ]
    for row in tightness.proposition2_search((0.0, 1.5), (1, 3, 20)):
        c, n = row["alpha_beta"], row["num_steps"]
        # gamma = 2, k = 1, lambda = 0.5, alpha = 0.1: the gap is 1
        exact = 10 ** decay_recurrence_solution_log10(0.1, c / 0.1, 1.0, n)
        bound = proposition2_bound(0.1, 2.0, c / 0.1, 1, 0.5, n)
        assert row["ratio"] == pytest.approx(exact / bound, rel=1e-9)


def test_proposition2_worst_case_by_hand():
    # beta = 0: both runs stay apart by alpha gap H_N; beta = 10, alpha = 0.1, N = 2:
    # e_2 = 0.1 gap, e_3 = (1 + 0.05 * 10) e_2 + 0.05 gap
    assert tightness.proposition2_worst_case(0.1, 0.0, 2.0, 3) == pytest.approx(0.2 * 11 / 6)
    assert tightness.proposition2_worst_case(0.1, 10.0, 1.0, 2) == pytest.approx(0.2)


def test_proposition2_random_log10_reads_the_decay_runs(tmp_path):
    folder = tmp_path / "full"
    (folder / "runs").mkdir(parents=True)
    (folder / "summary.json").write_text("{}")
    units = [
        {"schedule": "constant", "distance": [1.0, 10.0], "prop2_theory_log10": [0.0, 0.0]},
        # the first recorded step is skipped; a zero distance or a missing bound too
        {
            "schedule": "decay",
            "distance": [1e9, 1e-3, 0.0, 1e-2],
            "prop2_theory_log10": [0, 1, 2, None],
        },
        {"schedule": "decay", "distance": [1.0, 1e-4], "prop2_theory_log10": [5.0, -2.5]},
    ]
    for index, unit in enumerate(units):
        (folder / "runs" / f"{index}.json").write_text(json.dumps(unit))
    assert tightness.proposition2_random_log10(tmp_path) == pytest.approx(-1.5)
    assert tightness.proposition2_random_log10(tmp_path / "missing") is None
    (folder / "runs" / "1.json").unlink()
    (folder / "runs" / "2.json").unlink()
    assert tightness.proposition2_random_log10(tmp_path) is None
    corrupt = {"schedule": "decay", "distance": [1.0, 1.0], "prop2_theory_log10": [0.0]}
    (folder / "runs" / "1.json").write_text(json.dumps(corrupt))
    with pytest.raises(ValueError):  # one bound per recorded distance, or the run is broken
        tightness.proposition2_random_log10(tmp_path)


def test_load_committed_reads_the_file_or_says_how_to_make_it(tmp_path):
    path = tmp_path / "t.json"
    with pytest.raises(FileNotFoundError, match="python -m stablernn_lib tightness"):
        tightness.load_committed(path)
    path.write_text('{"seed": 4}')
    assert tightness.load_committed(path) == {"seed": 4}


def test_command_passes_the_config_and_seed(monkeypatch, tmp_path, capsys):
    from stablernn_lib.__main__ import main

    seen = []

    def fake_run(config):
        seen.append(config)
        return {**_fake_results(), "duration_s": 2.0}

    monkeypatch.setattr(tightness, "run_tightness", fake_run)
    out = tmp_path / "t.json"
    assert main(["tightness", "--config", "smoke", "--seed", "5", "--out", str(out)]) == 0
    assert seen[-1] == replace(tightness.CONFIGS["smoke"], seed=5)
    assert json.loads(out.read_text())["duration_s"] == 2.0
    printed = capsys.readouterr().out.splitlines()
    assert printed == [*tightness.tightness_table(_fake_results()).splitlines(),
                       f"tightness smoke: 2 s; written to {out}"]  # fmt: skip
    with pytest.raises(SystemExit):
        main(["tightness", "--config", "huge", "--out", str(out)])
    assert main(["tightness", "--out", str(out)]) == 0
    assert seen[-1] == tightness.CONFIGS["full"]


def test_beta_asymptotic_evaluates_the_grid(monkeypatch):
    monkeypatch.setattr(tightness, "lemma3_linear_unit_ratio", lambda lam: 1 - lam)
    assert tightness.beta_asymptotic((0.5, 0.75)) == [
        {"lam": 0.5, "ratio": 0.5},
        {"lam": 0.75, "ratio": 0.25},
    ]
    assert [row["lam"] for row in tightness.beta_asymptotic()] == list(
        tightness.BETA_ASYMPTOTIC_LAMS
    )


def _small_lstm():
    """A float64 LSTM (2 inputs, 3 units) with weights N(0, 0.3^2): certified contractive."""
    from stablernn_lib.core.models import LSTMMap

    model = LSTMMap(2, 3, dtype=torch.float64)
    g = generator(1)
    with torch.no_grad():
        for param in model.parameters():
            param.copy_(0.3 * torch.randn(param.shape, generator=g, dtype=torch.float64))
    return model


def test_lstm_box_and_jacobian_norm_match_the_certificate():
    from stablernn_lib.theory.lstm_certificate import jacobian_certificate_norms, lstm_certificate

    model = _small_lstm()
    certificate = lstm_certificate(model, 0.5)
    limit, weights = tightness._lstm_box(model, 0.5)
    v_c, v_h = certificate.weights
    torch.testing.assert_close(limit, torch.cat([certificate.cell_bound, torch.ones(3)]).double())
    expected_weights = torch.tensor([v_c] * 3 + [v_h] * 3, dtype=torch.float64)
    # exact: float64 weights (float32 ones would be off by ~1e-8)
    torch.testing.assert_close(weights, expected_weights, rtol=1e-15, atol=0)
    g = generator(2)
    states = (2 * torch.rand(4, 6, generator=g, dtype=torch.float64) - 1) * limit
    x = 0.5 * (2 * torch.rand(4, 2, generator=g, dtype=torch.float64) - 1)
    expected = jacobian_certificate_norms(model, states, x, 0.5)
    for n in range(4):
        value = tightness._lstm_jacobian_norm(model, states[n], x[n], weights)
        assert float(value.detach()) == pytest.approx(float(expected[n]), rel=1e-10)


def test_perturbed_multiplies_weights_and_shifts_biases():
    model = _small_lstm()
    other = tightness._perturbed(model, 0.3, generator(5))
    g = generator(5)
    for mine, theirs in zip(other.parameters(), model.parameters(), strict=True):
        noise = torch.randn(theirs.shape, generator=g, dtype=torch.float64)
        if theirs.dim() == 1:
            torch.testing.assert_close(mine - theirs, 0.3 * noise)
        else:
            torch.testing.assert_close(mine / theirs, torch.exp(0.3 * noise))
    assert (other.input_size, other.hidden_size) == (2, 3)


def test_random_baselines_pass_the_config_and_take_the_worst(monkeypatch):
    calls = []

    class Result:
        def __init__(self, values):
            self.values = values

        def tightness(self):
            return np.array(self.values)

    def experiment(name, by_activation):
        def run(*args, **kwargs):
            calls.append((name, args, kwargs))
            act = kwargs.get("model", kwargs.get("activation"))
            return Result(by_activation[act])

        return run

    monkeypatch.setattr(
        tightness,
        "truncation_experiment",
        experiment("lemma1", {"identity": [[0.5, math.nan]], "tanh": [[0.25]]}),
    )  # noqa: E501
    monkeypatch.setattr(
        tightness,
        "gradient_gap_experiment",
        experiment("lemma2", {"identity": [0.125], "tanh": [[0.5, 0.75]]}),
    )  # noqa: E501
    monkeypatch.setattr(
        tightness,
        "smoothness_experiment",
        experiment("lemma3", {"identity": [0.0625], "tanh": [math.nan, 0.5]}),
    )  # noqa: E501
    monkeypatch.setattr(tightness, "proposition2_random_log10", lambda: -7.0)
    config = replace(CONFIG, activations=("identity", "tanh"), seed=4, seq_len=12,
                     hidden_size=5, input_size=3, random_instances=1, lstm_lams=(0.9,))  # fmt: skip
    baselines = tightness.random_baselines(config)
    assert {k: baselines[k] for k in ("lemma1", "lemma2_gamma", "lemma3_beta")} == {
        "lemma1": 0.5, "lemma2_gamma": 0.75, "lemma3_beta": 0.5,
    }  # fmt: skip
    assert baselines["proposition2_log10"] == -7.0
    common = {"num_instances": 1, "seed": 4, "progress": False, "seq_len": 12, "hidden_size": 5,
              "input_size": 3}  # fmt: skip
    lams, ks = config.lams, config.ks
    assert calls == [
        ("lemma1", (lams, ks), {"model": "identity", **common}),
        ("lemma1", (lams, ks), {"model": "tanh", **common}),
        ("lemma2", (lams, ks), {"activation": "identity", **common}),
        ("lemma2", (lams, ks), {"activation": "tanh", **common}),
        ("lemma3", (lams,), {"activation": "identity", **common}),
        ("lemma3", (lams,), {"activation": "tanh", **common}),
    ]
    # the LSTM baseline: one seeded draw of 300 states of D and inputs in [-1, 1]^D, its
    # Jacobians by autograd in the certificate's weighted max-norm, divided by lambda
    from stablernn_lib.theory.lstm_certificate import (
        lstm_certificate,
        random_stable_lstm,
        sample_box_states,
    )

    g = torch.Generator().manual_seed(4)
    model = random_stable_lstm(3, 1, 0.9, generator=g)
    states, x = sample_box_states(model, 1.0, 300, g)
    assert float(x.abs().max()) <= 1
    summed = torch.autograd.functional.jacobian(lambda s: model.step(s, x).sum(0), states)
    v_c, v_h = lstm_certificate(model, 1.0).weights
    v = torch.tensor([v_c, v_h], dtype=torch.float64)
    norms = (summed.permute(1, 0, 2).abs() * v).sum(-1) / v
    expected = float(norms.max()) / lstm_certificate(model, 1.0).lam
    assert baselines["lstm_lambda"] == pytest.approx(expected, rel=1e-7)
    assert 0.5 < baselines["lstm_lambda"] < 1


def _captured_ascent(monkeypatch) -> list:
    """Replace the ascent by one that records its arguments and leaves the point as drawn."""
    seen = []

    def ascend(objective, params, project, steps, learning_rate):
        project()
        value = float(objective())
        seen.append({"objective": objective, "params": params, "project": project,
                     "steps": steps, "learning_rate": learning_rate, "value": value})  # fmt: skip

    monkeypatch.setattr(tightness, "_ascend", ascend)
    return seen


def _numpy_run(W, U, inputs, rho):
    h = np.zeros(W.shape[0])
    for x in inputs:
        h = rho(W @ h + U @ x)
    return h


@pytest.mark.parametrize("activation", ["identity", "tanh"])
def test_lemma1_search_ascends_on_the_ratio_at_the_last_step(monkeypatch, activation):
    seen = _captured_ascent(monkeypatch)
    config = replace(CONFIG, restarts=2, steps=7, learning_rate=0.25, seq_len=6)
    best = tightness.lemma1_search(config, 0.5, 2, activation, generator(1))
    rho = np.tanh if activation == "tanh" else (lambda a: a)
    ratios = []
    for run in seen:
        W, U, inputs = (p.detach().numpy() for p in run["params"])
        assert inputs.shape == (6, 2) and run["steps"] == 7 and run["learning_rate"] == 0.25
        gap = np.linalg.norm(_numpy_run(W, U, inputs, rho) - _numpy_run(W, U, inputs[-2:], rho))
        lam, lx = np.linalg.norm(W, 2), np.linalg.norm(U, 2)
        bound = lam**2 * lx * np.linalg.norm(inputs, axis=1).max() / (1 - lam)
        assert run["value"] == pytest.approx(gap / bound, rel=1e-9)
        assert lam == pytest.approx(0.5, rel=1e-9)  # projected onto the radius
        ratios.append(tightness.lemma1_ratio(*run["params"], activation, 2))
    assert len(seen) == 2
    assert best == {"lam": 0.5, "k": 2, "activation": activation, "ratio": max(ratios),
                    "instance_lam": pytest.approx(0.5, rel=1e-9)}  # fmt: skip


@pytest.mark.parametrize("activation", ["identity", "tanh"])
def test_lemma2_search_ascends_on_the_gradient_gap(monkeypatch, activation):
    from stablernn_lib.theory.lemmas import gradient_gaps

    seen = _captured_ascent(monkeypatch)
    config = replace(CONFIG, restarts=2, steps=5, learning_rate=0.5, seq_len=6)
    best = tightness.lemma2_search(config, 0.4, 2, activation, 0.5, generator(2), input_norm=0.3)
    ratios = []
    for run in seen:
        W, U, inputs, target = run["params"]
        assert run["steps"] == 5 and run["learning_rate"] == 0.5 and len(run["params"]) == 4
        assert float(target.detach().norm()) == pytest.approx(0.5)
        assert float(inputs.detach().norm(dim=-1).max()) == pytest.approx(0.3)
        instance = tightness._instance(W, U, inputs, target, activation)
        assert run["value"] == pytest.approx(float(gradient_gaps(instance, [2])[0]), rel=1e-9)
        ratios.append(tightness.lemma2_ratio(W, U, inputs, target, activation, 2))
    assert best == {"lam": 0.4, "k": 2, "activation": activation, "target_norm": 0.5,
                    "input_norm": 0.3, "ratio": max(ratios),
                    "instance_lam": pytest.approx(0.4, rel=1e-9)}  # fmt: skip
    again = tightness.lemma2_search(config, 0.4, 2, activation, 0.5, generator(2), input_norm=0.3)
    assert again["ratio"] == best["ratio"]  # drawn from the given generator only
    plain = tightness.lemma2_search(
        replace(config, restarts=1), 0.4, 2, activation, 0.5, generator()
    )
    assert plain["input_norm"] == 1.0
    assert float(seen[-1]["params"][2].detach().norm(dim=-1).max()) == pytest.approx(1.0)


@pytest.mark.parametrize("activation", ["identity", "tanh"])
def test_lemma3_search_ascends_on_the_gradient_difference_quotient(monkeypatch, activation):
    from stablernn_lib.theory.lemmas import parameter_gradient

    seen = _captured_ascent(monkeypatch)
    config = replace(CONFIG, restarts=2, steps=5, learning_rate=0.5, seq_len=6)
    best = tightness.lemma3_search(config, 0.4, activation, 0.5, generator(3), 0.3)
    ratios = []
    for run in seen:
        W, U, inputs, target, W2, U2 = run["params"]
        assert run["steps"] == 5 and run["learning_rate"] == pytest.approx(0.1)
        a = tightness._instance(W, U, inputs, target, activation)
        b = tightness._instance(W2, U2, inputs, target, activation)
        gap = parameter_gradient(a.model, a.inputs, a.target) - parameter_gradient(
            b.model, b.inputs, b.target
        )
        distance = torch.cat([(W - W2).reshape(-1), (U - U2).reshape(-1)]).detach().norm()
        assert 0 < float(distance) < 0.1  # the second point starts close to the first
        assert run["value"] == pytest.approx(float(gap.norm() / distance), rel=1e-9)
        assert max(a.lam, b.lam) <= 0.4 * (1 + 1e-9)
        ratios.append(tightness.lemma3_ratio((W, U), (W2, U2), inputs, target, activation))
    assert best == {"lam": 0.4, "activation": activation, "target_norm": 0.5, "input_norm": 0.3,
                    "ratio": max(ratios), "instance_lam": pytest.approx(0.4, rel=1e-9)}  # fmt: skip
    again = tightness.lemma3_search(config, 0.4, activation, 0.5, generator(3), 0.3)
    assert again["ratio"] == best["ratio"]  # both points drawn from the given generator
    plain = tightness.lemma3_search(replace(config, restarts=1), 0.4, activation, 0.5, generator())
    assert plain["input_norm"] == 1.0


def test_lstm_state_search_ascends_on_the_jacobian_norm_in_the_box(monkeypatch):
    from stablernn_lib.theory.lstm_certificate import jacobian_certificate_norms, lstm_certificate

    seen = _captured_ascent(monkeypatch)
    model = _small_lstm()
    best = tightness.lstm_state_search(model, 0.5, 4, 0.125, generator(4), restarts=3)
    limit, weights = tightness._lstm_box(model, 0.5)
    lam = lstm_certificate(model, 0.5).lam
    values = []
    for run in seen:
        a, b = run["params"]
        assert run["steps"] == 4 and run["learning_rate"] == 0.125
        state, x = (limit * torch.tanh(a)).detach(), (0.5 * torch.tanh(b)).detach()
        expected = float(jacobian_certificate_norms(model, state[None], x[None], 0.5)[0])
        assert run["value"] == pytest.approx(expected, rel=1e-7)
        values.append(expected / lam)
    assert len(seen) == 3 and best == pytest.approx(max(values), rel=1e-7)
    tightness.lstm_state_search(model, 0.5, 4, 0.125, generator(4))
    assert len(seen) == 5  # two restarts by default
    g = generator(4)  # the starting points: 2 N(0, 1) in the unconstrained coordinates
    first = 2 * torch.randn(limit.shape, generator=g, dtype=torch.float64)
    torch.testing.assert_close(seen[0]["params"][0].detach(), first)
    torch.testing.assert_close(seen[0]["params"][1].detach(),
                               2 * torch.randn(2, generator=g, dtype=torch.float64))  # fmt: skip


def test_lstm_search_keeps_only_certified_improvements(monkeypatch):
    from stablernn_lib.theory import lstm_certificate as ls

    values = [0.5, 0.75, 0.75, 0.875, 0.875, 0.875]  # ties keep the earlier model
    searched = []

    generators = []

    def state_search(model, input_bound, steps, learning_rate, g, restarts=2):
        generators.append(g)
        searched.append(
            (model, values[len(searched)], (input_bound, steps, learning_rate, restarts))
        )
        return searched[-1][1]

    monkeypatch.setattr(tightness, "lstm_state_search", state_search)
    config = replace(CONFIG, lstm_climb_steps=5, steps=80, learning_rate=0.25)
    g = generator(6)
    result = tightness.lstm_search(config, 1, 0.5, g)
    assert all(each is g for each in generators)
    start = ls.random_stable_lstm(config.input_size, 1, 0.5, generator=generator(6))
    for mine, theirs in zip(searched[0][0].parameters(), start.parameters(), strict=True):
        torch.testing.assert_close(mine, theirs)
    assert searched[0][2] == (1.0, 16, 0.25, 2) and len(searched) >= 3
    assert all(arguments == (1.0, 16, 0.25, 1) for _, _, arguments in searched[1:])
    # a perturbation whose certificate reaches 1 is never searched; the others are kept
    # exactly when they beat the best ratio so far
    assert all(ls.lstm_certificate(model, 1.0).lam < 1 for model, _, _ in searched)
    kept, ratio = searched[0][:2]
    for model, value, _ in searched[1:]:
        if value > ratio:
            kept, ratio = model, value
    certificate = ls.lstm_certificate(kept, 1.0)
    assert result == {
        "hidden_size": 1,
        "start_lam": 0.5,
        "final_lam": certificate.lam,
        "forget_share": pytest.approx(float(certificate.matrix[0, 0]) / certificate.lam),
        "ratio": ratio,
    }
    assert ls.lstm_certificate(searched[0][0], 1.0).lam == pytest.approx(0.5, rel=1e-9)
    searched.clear()
    tightness.lstm_search(replace(config, steps=20, lstm_climb_steps=0), 1, 0.5, generator(6))
    assert searched[0][2] == (1.0, 10, 0.25, 2)  # at least 10 ascent steps


def test_tightness_command_line_defaults():
    from stablernn_lib.__main__ import build_parser

    args = build_parser("tightness").parse_args(["tightness"])
    assert (args.config, args.seed, args.out) == ("full", None, tightness.DEFAULT_OUT)
    assert args.func is tightness._command
    given = build_parser("tightness").parse_args(["tightness", "--out", "x.json", "--seed", "3"])
    assert given.out == Path("x.json") and given.seed == 3


def test_lstm_search_searches_exactly_the_certified_perturbations(monkeypatch):
    from stablernn_lib.theory import lstm_certificate as ls

    candidates, searched = [], []
    perturb = tightness._perturbed

    def recorded(model, scale, g):
        candidates.append((perturb(model, scale, g), scale))
        return candidates[-1][0]

    def state_search(model, input_bound, steps, learning_rate, g, restarts=2):
        searched.append(model)
        return 0.5 + 0.01 * len(searched)  # every searched candidate improves

    monkeypatch.setattr(tightness, "_perturbed", recorded)
    monkeypatch.setattr(tightness, "lstm_state_search", state_search)
    tightness.lstm_search(replace(CONFIG, lstm_climb_steps=8), 1, 0.95, generator(2))
    certified = [c for c, _ in candidates if ls.lstm_certificate(c, 1.0).lam < 1]
    assert all(scale == 0.3 for _, scale in candidates) and len(candidates) == 8
    assert 0 < len(certified) < len(candidates)  # the draw has both kinds
    assert searched[1:] == certified


def test_lstm_jacobian_norm_is_the_induced_weighted_max_norm():
    """Any positive weights: ``max_a sum_b |J_ab| w_b / w_a``, checked entry by entry."""
    model = _small_lstm()
    state = torch.tensor([0.3, -0.2, 0.1, 0.5, -0.4, 0.2], dtype=torch.float64)
    x = torch.tensor([0.2, -0.1], dtype=torch.float64)
    weights = torch.tensor([0.25, 1.0, 0.5, 2.0, 0.125, 1.0], dtype=torch.float64)
    J = torch.autograd.functional.jacobian(lambda s: model.step(s[None], x[None])[0], state)
    rows = [sum(abs(float(J[a, b])) * float(weights[b]) for b in range(6)) / float(weights[a])
            for a in range(6)]  # fmt: skip
    value = tightness._lstm_jacobian_norm(model, state, x, weights)
    assert float(value.detach()) == pytest.approx(max(rows), rel=1e-12)


@pytest.mark.parametrize("activation", ["identity", "tanh"])
def test_lemma1_objective_off_the_projection_radius(monkeypatch, activation):
    """The ascent's objective keeps ``L_x = L_rho ||U||`` and ``B_x`` where the search may
    take them: at ``||U|| = 0.5``, ``||x_t|| <= 0.7`` (the drawn point has both at 1)."""
    seen = _captured_ascent(monkeypatch)
    config = replace(CONFIG, restarts=1, steps=1, seq_len=6)
    tightness.lemma1_search(config, 0.5, 2, activation, generator(3))
    W, U, inputs = seen[0]["params"]
    with torch.no_grad():
        U.mul_(0.5 / spectral_norm(U))
        inputs.mul_(0.7 / inputs.norm(dim=-1).max())
    rho = np.tanh if activation == "tanh" else (lambda a: a)
    Wn, Un, xn = (p.detach().numpy() for p in (W, U, inputs))
    gap = np.linalg.norm(_numpy_run(Wn, Un, xn, rho) - _numpy_run(Wn, Un, xn[-2:], rho))
    lam = np.linalg.norm(Wn, 2)
    bound = lam**2 * 0.5 * 0.7 / (1 - lam)
    assert float(seen[0]["objective"]()) == pytest.approx(gap / bound, rel=1e-9)


def test_lemma1_search_draws_from_its_generator(monkeypatch):
    seen = _captured_ascent(monkeypatch)
    config = replace(CONFIG, restarts=1, steps=1, seq_len=6)
    torch.manual_seed(123)  # the global generator must play no part
    tightness.lemma1_search(config, 0.5, 2, "identity", generator(4))
    drawn = tightness._RNNVariables.draw(config, 0.5, "identity", generator(4))
    for got, expected in zip(seen[0]["params"], (drawn.W, drawn.U, drawn.inputs), strict=True):
        torch.testing.assert_close(got.detach(), expected.detach(), rtol=1e-12, atol=0)


@pytest.mark.parametrize(("lam", "tol", "steps"), [(0.5, 0.3, 2), (0.5, 0.2, 3), (0.9, 1e-3, 66)])
def test_lemma3_linear_unit_ratio_steps_and_second_point(monkeypatch, lam, tol, steps):
    """``T = max(2, ceil(log tol / log lam))`` steps of ``x_t = 1``; the second point lies
    ``1e-6`` below ``(lam, 1)`` along the top eigenvector of the Hessian of ``h_T^2 / 2``
    (sympy), so it stays in the set ``|W| <= lam, |U| <= 1``."""
    import sympy as sp

    seen = []
    monkeypatch.setattr(tightness, "lemma3_ratio", lambda *args: seen.append(args) or 0.25)
    assert tightness.lemma3_linear_unit_ratio(lam, tol) == 0.25
    (W, U), (W2, U2), inputs, target, activation = seen[0]
    assert inputs.shape == (steps, 1) and float(inputs.min()) == float(inputs.max()) == 1.0
    assert float(target.abs().max()) == 0.0 and activation == "identity"
    w, u = sp.symbols("w u")
    loss = (u * (1 - w**steps) / (1 - w)) ** 2 / 2
    at = {w: sp.nsimplify(lam), u: 1}
    hessian = np.array([[float(sp.diff(loss, a, b).subs(at)) for b in (w, u)] for a in (w, u)])
    top = np.abs(np.linalg.eigh(hessian)[1][:, -1])
    assert [float(W), float(U)] == pytest.approx([lam, 1.0], rel=1e-15)
    step = np.array([lam - float(W2), 1.0 - float(U2)])
    assert step == pytest.approx(1e-6 * top, rel=1e-6)
    assert float(W2) < lam and float(U2) < 1.0


def test_lstm_box_weights_are_float64_whichever_entry_is_one(monkeypatch):
    """Both weights as float64 (either may be the Perron vector's entry below 1)."""
    from types import SimpleNamespace

    certificate = SimpleNamespace(cell_bound=torch.tensor([0.5, 0.25]), weights=(0.1, 0.3))
    monkeypatch.setattr(tightness, "lstm_certificate", lambda model, bound: certificate)
    limit, weights = tightness._lstm_box(SimpleNamespace(hidden_size=2), 1.0)
    expected = torch.tensor([0.1, 0.1, 0.3, 0.3], dtype=torch.float64)
    torch.testing.assert_close(weights, expected, rtol=1e-15, atol=0)
    torch.testing.assert_close(limit, torch.tensor([0.5, 0.25, 1, 1], dtype=torch.float64))
