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


@pytest.mark.parametrize(("activation", "floor"), [("identity", 0.5), ("tanh", 0.0)])
def test_lemma3_search_never_breaks_beta(activation, floor):
    best = tightness.lemma3_search(CONFIG, 0.1, activation, 0.0, generator())
    assert best["ratio"] <= 1 + TOL
    assert best["ratio"] > floor


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


def test_a_broken_bound_is_caught():
    """Halve Lemma 1's bound: the same search must then report a ratio above 1."""
    best = tightness.lemma1_search(CONFIG, 0.5, 2, "identity", generator())
    assert 2 * best["ratio"] > 1 + TOL


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


def test_committed_table_holds_every_bound():
    if not COMMITTED.exists():
        pytest.skip(f"no committed tightness run at {COMMITTED}")
    results = json.loads(COMMITTED.read_text())
    worst = results["worst_adversarial"]
    assert set(worst) == {"lemma1", "lemma2_gamma", "lemma3_beta", "proposition2", "lstm_lambda"}
    assert all(value <= 1 + TOL for value in worst.values())
    assert worst["lemma1"] > 0.99 and worst["proposition2"] == pytest.approx(1.0)
