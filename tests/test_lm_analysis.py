"""Figure 2 gradients, layer maps, Jacobian norms, weights close, truncated evaluation."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch
from stablernn_tools.synthetic_corpus import write_synthetic_corpus

from stablernn_lib.core.io import atomic_write_json
from stablernn_lib.tasks.wikitext2.data import (
    WIKITEXT2_TOKENS,
    Corpus,
    batchify,
)
from stablernn_lib.tasks.wikitext2.measurements import (
    gradient_by_distance,
    gradient_by_distance_naive,
    layer_map,
    state_jacobian_norms,
    truncated_eval_curve,
    weights_close_experiment,
)
from stablernn_lib.tasks.wikitext2.model import WordLanguageModel, project_stable_
from stablernn_lib.tasks.wikitext2.results import (
    epochs_table,
    load_full_results,
    table_by_scale,
    time_budget_table,
)
from stablernn_lib.tasks.wikitext2.train import CONFIGS


def tiny(cell: str, layers: int = 2) -> WordLanguageModel:
    torch.manual_seed(3)
    model = WordLanguageModel(cell, 25, 5, 7, layers, dropout=0.0)
    with torch.no_grad():  # larger recurrent weights: gradients reach further back
        for n in range(layers):
            getattr(model.rnn, f"weight_hh_l{n}").mul_(3)
    return model.eval()


@pytest.mark.parametrize("cell", ["rnn", "lstm"])
def test_fast_gradient_profile_matches_per_pair_reference(cell: str) -> None:
    model = tiny(cell)
    source = batchify(torch.randint(25, (3 * 14,)), 3)  # 14 rows: windows of 5, 5, 3
    fast = gradient_by_distance(model, source, max_distance=4)
    naive = gradient_by_distance_naive(model, source, max_distance=4)
    assert fast["count"] == naive["count"] == [3.0 * c for c in (13, 10, 7, 4, 2)]
    torch.testing.assert_close(
        torch.tensor(fast["mean_norm"]), torch.tensor(naive["mean_norm"]), rtol=1e-4, atol=1e-7
    )
    assert min(fast["mean_norm"]) > 0


def test_gradient_profile_is_zero_beyond_distance_zero_without_recurrence() -> None:
    model = tiny("rnn")
    with torch.no_grad():
        model.rnn.weight_hh_l0.zero_()
        model.rnn.weight_hh_l1.zero_()
    source = batchify(torch.randint(25, (40,)), 2)
    profile = gradient_by_distance(model, source, max_distance=3)
    assert profile["mean_norm"][0] > 1e-3
    assert max(profile["mean_norm"][1:]) == 0.0


@pytest.mark.parametrize("cell", ["rnn", "lstm"])
def test_layer_maps_reproduce_the_fused_stack(cell: str) -> None:
    model = tiny(cell, layers=3)
    tokens = torch.randint(25, (9, 2))
    expected, _ = model.recur(model.embed(tokens))
    inputs = model.embed(tokens)
    for layer in range(3):
        step_map = layer_map(model, layer)
        inputs = step_map.output(step_map.run(inputs))
    torch.testing.assert_close(inputs, expected, atol=1e-5, rtol=1e-4)


def test_jacobian_norms_of_a_stable_rnn_are_at_most_one() -> None:
    model = tiny("rnn")
    source = batchify(torch.randint(25, (200,)), 4)
    before = state_jacobian_norms(model, source, positions=40, burn_in=5)
    assert len(before) == 2 and len(before[0]) == 40
    assert max(max(norms) for norms in before) > 1  # weights were scaled up
    project_stable_(model)
    after = state_jacobian_norms(model, source, positions=40, burn_in=5)
    assert max(max(norms) for norms in after) <= 1 + 1e-5


def test_truncated_eval_curve_approaches_the_recurrent_model() -> None:
    model = tiny("lstm")
    source = batchify(torch.randint(25, (120,)), 4)
    curve = truncated_eval_curve(model, source, [1, 5, 40])
    assert curve["ppl"][-1] == pytest.approx(curve["recurrent_ppl"], rel=1e-5)
    assert curve["ppl"][0] != pytest.approx(curve["recurrent_ppl"], rel=1e-5)


@pytest.mark.parametrize("cell", ["rnn", "lstm"])
def test_weights_close_full_context_equals_recurrent_training(cell: str, tmp_path) -> None:
    corpus = Corpus.from_folder(write_synthetic_corpus(tmp_path, lines=(60, 5, 5)))
    rows = corpus.train.numel() // 20
    config = replace(CONFIGS["smoke"], embedding_size=8, hidden_size=8, bptt=rows)  # one window
    record = weights_close_experiment(cell, config, corpus, [2, rows], steps=3, record_every=1)
    assert record["step"] == [1, 2, 3]
    assert max(record["relative_distance"][f"k={rows}"]) < 1e-5  # same model, same gradients
    assert min(record["relative_distance"]["k=2"]) > 1e-4


def test_gradient_profile_ignores_dropout_and_restores_it() -> None:
    model = tiny("lstm")
    source = batchify(torch.randint(25, (30,)), 2)
    expected = gradient_by_distance(model, source, max_distance=3)
    model.drop.p, model.rnn.dropout = 0.5, 0.5
    model.train()
    profile = gradient_by_distance(model, source, max_distance=3)
    assert profile["mean_norm"] == pytest.approx(expected["mean_norm"], rel=1e-6)
    assert model.training and model.drop.p == 0.5 and model.rnn.dropout == 0.5


def test_results_table_shows_paper_numbers_and_ours_when_present(tmp_path) -> None:
    assert load_full_results(tmp_path / "missing") == {}
    table = table_by_scale({"ours": load_full_results(tmp_path)})
    assert "| 146.7 ✓ | not run yet |" in table and "| 94.6 † | not run yet |" in table
    assert table.count("not run yet") == 4
    atomic_write_json(tmp_path / "lstm-stable.json", {"test_ppl": 97.25})
    table = table_by_scale({"ours": load_full_results(tmp_path)})
    assert "97.2" in table and table.count("not run yet") == 3


def test_the_evidence_page_reproduces_the_full_scale_with_the_rnn_pair_at_lr_2() -> None:
    import json

    path = Path(__file__).resolve().parents[1] / "chapters" / "08b_wikitext2_evidence.ipynb"
    cells = json.loads(path.read_text(encoding="utf8"))["cells"]
    text = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    (command,) = [line for line in text.splitlines() if "paper-run run" in line]
    assert "--config full --variants" in command and "lstm-unconstrained lstm-stable" in command
    # the RNN pair at lr 2: at full's lr 20 the unconstrained RNN diverges
    assert "rnn-unconstrained@full-rnn-lr2 rnn-stable@full-rnn-lr2" in command
    assert "--model rnn" not in command


def test_epochs_table_lists_validation_perplexity_per_epoch_and_wall_time():
    def run(val_ppls: list[float], seconds: float) -> dict:
        epochs = [{"val_ppl": v} for v in val_ppls]
        return {"epochs": epochs, "vocab_size": 33278, "test_ppl": 150.04, "wall_seconds": seconds}

    runs = {"lstm-cpu": run([351.1, 261.9], 3461.2), "tiny": run([90.0], 42.0)}
    table = epochs_table(runs, "cpu run")
    header, _, long_run, short_run = table.splitlines()
    assert header.startswith("| cpu run |")
    assert "| 351, 262 |" in long_run and "58 min" in long_run and "33,278" in long_run
    assert "150.0" in long_run and "| 42 s |" in short_run


def test_time_budget_table_adds_measured_and_estimated_minutes():
    evaluated = 2 * WIKITEXT2_TOKENS["valid"] + WIKITEXT2_TOKENS["test"]
    model = {
        "epoch_seconds_unconstrained": 600.0,
        "epoch_seconds_stable": 900.0,
        "eval_tokens_per_second": evaluated / 60.0,  # every evaluation: one minute
    }
    benchmark = {
        "epochs": 2,
        "models": {"rnn": model, "lstm": model},
        "provenance": {"device": "cpu (x86_64, 2 threads)"},
    }
    runs = {
        "rnn-unconstrained": {"wall_seconds": 3000.0},
        "rnn-stable": {"wall_seconds": 4200.0},
        "analysis": {"seconds": {"a": 300.0, "b": 300.0}},
    }
    table = time_budget_table(runs, benchmark, {"seconds": {"a": 120.0}})
    rows = table.splitlines()
    assert "minutes, idle machine (cpu (x86_64, 2 threads))" in rows[0]
    assert len(rows) == 2 + 2 + 2  # the LSTMs did not run
    assert rows[2] == "| training rnn-unconstrained | 50 | 21 (estimated) |"
    assert rows[3] == "| training rnn-stable | 70 | 31 (estimated) |"
    assert rows[4] == "| every analysis | 10 | 2 (measured) |"
    assert rows[5] == "| **total** | **130** | **54** |"
