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

import pytest
import torch

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
    # one whole search, from its own generator (same code, same seed: same instance)
    again = tightness.rerun_search(config, "lemma1", 0)
    committed = searches["lemma1"][0]
    assert {k: v for k, v in again.items() if k != "ratio" and k != "instance_lam"} == {
        k: v for k, v in committed.items() if k != "ratio" and k != "instance_lam"
    }
    assert again["ratio"] == pytest.approx(committed["ratio"], rel=1e-4)
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
