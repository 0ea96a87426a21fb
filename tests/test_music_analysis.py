"""The Chapter 9 views: measurements of trained JSB models, the table, the piano roll."""

from __future__ import annotations

import json
from dataclasses import replace

import matplotlib
import pytest

from stablernn_lib.core import paper_claims
from stablernn_lib.tasks.jsb import analysis as ma
from stablernn_lib.tasks.jsb.data import read_piano_rolls, write_synthetic_jsb
from stablernn_lib.tasks.jsb.train import CONFIGS, music_run_name, train_music_model

matplotlib.use("Agg")


@pytest.fixture(scope="module")
def rolls(tmp_path_factory):
    path = tmp_path_factory.mktemp("jsb") / "JSB_Chorales.mat"
    return read_piano_rolls(write_synthetic_jsb(path, sequences=(8, 4, 6), length=(34, 50)))


def test_analysis_of_trained_models(rolls, tmp_path, monkeypatch):
    config = replace(CONFIGS["smoke"], hidden_size=8, epochs=1)
    monkeypatch.setitem(CONFIGS, "smoke", config)
    for cell, variant in (("rnn", "stable"), ("lstm", "authors-bug")):
        out = tmp_path / music_run_name(cell, variant, config)
        train_music_model(cell, variant, config, rolls=rolls, out_dir=out, progress=False)
    analysis = ma.run_music_analysis("smoke", rolls=rolls, runs_dir=tmp_path, progress=False)
    assert set(analysis["missing"]) == {"rnn-unconstrained", "lstm-unconstrained", "lstm-stable"}
    bug = analysis["lstm-authors-bug"]["truncated_eval"]
    # no recurrence: every context gives the recurrent model's NLL
    assert max(bug["loss"]) == pytest.approx(min(bug["loss"]), rel=1e-5)
    assert ma.context_used(bug) == 1
    stable = analysis["rnn-stable"]
    assert len(stable["jacobian_norms"][0]) == 6 * (32 - ma.ANALYSIS.burn_in)  # all there are
    assert max(stable["jacobian_norms"][0]) <= 1 + 1e-4  # ||W||_2 <= 1 and tanh' <= 1
    roll = stable["piano_roll"]
    assert set(roll["probs"]) == {str(k) for k in ma.ANALYSIS.roll_ks}
    figure = ma.draw_piano_roll(roll, ma.ANALYSIS.roll_ks[0], "rnn-stable")
    assert len(figure.axes) == 3
    again = ma.run_music_analysis("smoke", rolls=rolls, runs_dir=tmp_path, progress=False)
    assert again["rnn-stable"]["seconds"] == stable["seconds"]  # kept, not recomputed


def test_table_marks_paper_numbers_and_pending_runs():
    results = {
        "rnn-unconstrained": {
            "test_nll": 9.5,
            "best_epoch": 12,
            "wall_seconds": 600.0,
            "epochs": [{}] * 20,
        }
    }
    table = ma.results_table(results)
    assert "9.50" in table and "not yet run" in table
    assert paper_claims.marked("jsb-rnn-unconstrained-nll") in table
    sentences = ma.describe_differences(results)
    expected = 9.5 - paper_claims.value("jsb-rnn-unconstrained-nll")
    assert len(sentences) == 1 and f"{expected:+.2f}" in sentences[0]


def test_optimizer_diagnostic_table_reads_each_config_under_its_own_name(tmp_path):
    def result(nll: float, best: int, epochs: int) -> dict:
        return {"test_nll": nll, "best_epoch": best, "epochs": [{}] * epochs}

    (tmp_path / "rnn-stable.json").write_text(json.dumps(result(9.9, 400, 420)))
    (tmp_path / "rnn-stable-adam.json").write_text(json.dumps(result(8.8, 17, 50)))
    sgd, adam = ma.load_results(tmp_path), ma.load_results(tmp_path, config="adam")
    assert set(sgd) == set(adam) == {"rnn-stable"}
    table = ma.optimizer_diagnostic_table(sgd, adam)
    row = next(line for line in table.splitlines() if line.startswith("| RNN, stable |"))
    assert "9.90 (420)" in row and "8.80 (17)" in row
    assert paper_claims.marked("jsb-rnn-stable-nll") in row
    assert table.count("not yet run") == 6  # three other variants, two columns each


def test_stability_cost_sentences_give_a_verdict_only_for_finished_pairs():
    results = {
        "rnn-unconstrained": {"test_nll": 10.0},
        "rnn-stable": {"test_nll": 10.1},  # +1%: within the 2% criterion
        "lstm-unconstrained": {"test_nll": 8.0},
    }
    rnn, lstm = ma.stability_cost_sentences(results, "test scale")
    assert "+0.10 nats, +1.0%" in rnn and "this supports" in rnn
    assert "has not finished" in lstm and "support" not in lstm
    results["lstm-stable"] = {"test_nll": 8.4}  # +5%
    lstm = ma.stability_cost_sentences(results, "test scale")[1]
    assert "+5.0%" in lstm and "does not support" in lstm
    strict = ma.stability_cost_sentences(results, "test scale", tolerance=0.005)[0]
    assert "does not support" in strict


def test_piano_roll_contexts_are_in_increasing_order_after_a_json_round_trip():
    entry = {"probs": {k: [[0.5]] for k in (1, 2, 4, 8, 16, 48)}}
    assert ma.piano_roll_contexts(json.loads(json.dumps(entry))) == [1, 2, 4, 8, 16, 48]
