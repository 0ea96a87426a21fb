"""Tests of the experiments of Chapter 4 and its LSTM page (the figures draw their results)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from matplotlib.figure import Figure

from stablernn_lib.figures import contraction as figs
from stablernn_lib.theory import contraction_experiments as experiments
from stablernn_lib.theory import lstm_certificate as ls


def test_spectral_projection_is_closer_than_every_candidate():
    for seed in range(3):
        check = experiments.spectral_projection_check(num_candidates=4000, seed=seed)
        assert check["distance_to_projection"] <= check["closest_candidate"] + 1e-12
        assert check["projection_spectral_norm"] == pytest.approx(1.0)


def test_projected_gradient_descent_stays_in_the_stable_set():
    plain = experiments.gradient_descent_rnn(project=False, steps=120)
    projected = experiments.gradient_descent_rnn(project=True, steps=120)
    assert projected.spectral_norm.max() <= 1.0 + 1e-9
    assert plain.spectral_norm.max() > 1.0
    assert projected.loss[-1] < 0.1 * projected.loss[0]
    assert projected.loss[-1] >= plain.loss[-1]


def test_lstm_verification_rows_respect_the_certificate():
    rows = experiments.lstm_verification_rows(hidden_size=16, num_states=240, seed=0)
    for row in rows:
        if math.isfinite(row["certificate"]):
            assert row["jacobian_certificate_norm"] <= row["certificate"] + 1e-9
            assert row["pairs_certificate_norm"] <= row["certificate"] + 1e-9
    by_name = {row["model"]: row for row in rows}
    for scale in (0.5, 1.0):
        assert by_name[f"random, scale {scale}"]["jacobian_certificate_norm"] > 1.0
        assert by_name[f"random, scale {scale}, projected to 0.9"]["certificate"] <= 0.9
    for bias in (0, 5):
        row = by_name[f"authors' constraint, one unit reads all (bias {bias})"]
        assert row["jacobian_certificate_norm"] > 1.0
        assert row["jacobian_euclidean"] > 1.0
    table = figs.verification_table(rows)
    assert len(table.splitlines()) == 2 + len(rows)
    verdicts = ls.contraction_verdicts(rows)
    for row in rows:
        assert row["model"] in table and row["model"] in verdicts
    assert isinstance(figs.lstm_verification_figure(rows), Figure)


def test_iterated_norm_curves_fall_below_one_for_closed_gates_and_repeat_with_the_seed():
    """Concentrated authors' model with zero biases: above 1 after one step, below after ten;
    the same seed gives the same curves."""
    models = {"closed": ls.concentrated_authors_lstm(4, 16, 0.0)}
    curves = experiments.iterated_norm_curves(models, max_steps=10, num_states=90, seed=1)
    steps, norms = curves["closed"]
    assert steps[0] == 1 and steps[-1] == 10 and (np.diff(steps) > 0).all()
    assert norms.shape == steps.shape
    assert norms[0] > 1.0 > norms[-1]
    again = experiments.iterated_norm_curves(models, max_steps=10, num_states=90, seed=1)
    assert np.array_equal(again["closed"][1], norms)
