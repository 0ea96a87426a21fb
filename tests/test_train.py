"""Training: the smoke config learns, resume is exact, divergence is caught, CLI."""

from __future__ import annotations

import json
import math
import os
import signal
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from stablernn_tools.synthetic_corpus import write_synthetic_corpus

from stablernn_lib.__main__ import main
from stablernn_lib.core.io import same_config
from stablernn_lib.tasks.training import TrainingDivergedError, with_seed
from stablernn_lib.tasks.wikitext2 import data
from stablernn_lib.tasks.wikitext2.data import Corpus
from stablernn_lib.tasks.wikitext2.train import (
    CONFIGS,
    load_trained_model,
    published_result_path,
    train_language_model,
)

TINY = replace(CONFIGS["smoke"], name="tiny", embedding_size=16, hidden_size=16, epochs=3)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Corpus:
    return Corpus.from_folder(write_synthetic_corpus(tmp_path_factory.mktemp("synthetic")))


def test_smoke_config_lowers_validation_perplexity(tmp_path: Path) -> None:
    folder = write_synthetic_corpus(tmp_path / "corpus", lines=(1500, 100, 100))
    corpus = Corpus.from_folder(folder)  # ~19k training tokens: ~27 steps per epoch
    result = train_language_model(
        "lstm", stable=True, config="smoke", corpus=corpus, out_dir=tmp_path / "run", progress=False
    )
    history = result["epochs"]
    assert len(history) == CONFIGS["smoke"].epochs
    assert history[-1]["val_ppl"] < 0.7 * history[0]["val_ppl"]
    assert history[0]["val_ppl"] < corpus.vocab_size  # better than uniform guessing
    assert result["status"] == "completed" and math.isfinite(result["test_ppl"])
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["epoch"] for line in lines] == [1, 2, 3]
    saved = json.loads((tmp_path / "run" / "result.json").read_text())
    assert saved["config"]["name"] == "smoke" and saved["seed"] == 1111
    assert {"git_commit", "device"} <= set(saved["provenance"])
    model = load_trained_model(tmp_path / "run")
    assert model.stable and model.encoder.weight.abs().max() <= 1.0


def _final(result: dict) -> tuple:
    return (
        [(e["train_loss"], e["val_loss"], e["lr"]) for e in result["epochs"]],
        result["test_loss"],
    )


@pytest.mark.parametrize("cell", ["rnn"])
def test_killed_and_interrupted_runs_resume_to_the_same_result(
    cell: str, corpus: Corpus, tmp_path: Path
) -> None:
    config = replace(TINY, dropout=0.3)  # dropout: the random state must be restored too
    reference = train_language_model(
        cell, True, config, corpus=corpus, out_dir=tmp_path / "ref", progress=False
    )

    def kill(step: int, model) -> None:
        if step == 11:  # mid-way through epoch 2: no checkpoint of this moment
            raise RuntimeError("killed")

    with pytest.raises(RuntimeError, match="killed"):
        train_language_model(
            cell,
            True,
            config,
            corpus=corpus,
            out_dir=tmp_path / "kill",
            progress=False,
            on_step=kill,
        )
    saved = torch.load(tmp_path / "kill" / "checkpoint.pt", weights_only=False)
    assert saved["progress"]["epoch"] == 1
    resumed = train_language_model(
        cell, True, config, corpus=corpus, out_dir=tmp_path / "kill", resume=True, progress=False
    )
    assert _final(resumed) == _final(reference)

    def interrupt(step: int, model) -> None:
        if step == 13:
            os.kill(os.getpid(), signal.SIGINT)  # what Ctrl-C or a notebook's stop does

    stopped = train_language_model(
        cell,
        True,
        config,
        corpus=corpus,
        out_dir=tmp_path / "int",
        progress=False,
        on_step=interrupt,
    )
    assert stopped["status"] == "interrupted" and "test_ppl" not in stopped
    assert (
        torch.load(tmp_path / "int" / "checkpoint.pt", weights_only=False)["progress"]["next"] > 0
    )
    resumed = train_language_model(
        cell, True, config, corpus=corpus, out_dir=tmp_path / "int", resume=True, progress=False
    )
    assert _final(resumed) == _final(reference)
    log = (tmp_path / "int" / "metrics.jsonl").read_text().splitlines()
    assert len(log) == config.epochs


def test_existing_run_is_not_overwritten_without_resume(corpus: Corpus, tmp_path: Path) -> None:
    config = replace(TINY, epochs=1)
    train_language_model("rnn", False, config, corpus=corpus, out_dir=tmp_path, progress=False)
    with pytest.raises(ValueError, match="resume=True"):
        train_language_model("rnn", False, config, corpus=corpus, out_dir=tmp_path, progress=False)
    again = train_language_model(
        "rnn", False, config, corpus=corpus, out_dir=tmp_path, resume=True, progress=False
    )
    assert again["status"] == "completed"


def test_exploding_loss_stops_before_any_checkpoint(corpus: Corpus, tmp_path: Path) -> None:
    config = replace(TINY, divergence_factor=0.5)  # even the first loss (~log V) is "exploding"
    with pytest.raises(TrainingDivergedError, match="No epoch had finished"):
        train_language_model("rnn", False, config, corpus=corpus, out_dir=tmp_path, progress=False)


def test_cli_trains_from_a_data_folder(tmp_path: Path, monkeypatch, capsys) -> None:
    folder = write_synthetic_corpus(tmp_path / "wikitext-2")
    sums = {name: data.sha256_of(folder / name) for name in data.WIKITEXT2_SHA256}
    monkeypatch.setattr(data, "WIKITEXT2_SHA256", sums)  # accept the synthetic files
    argv = ["train", "--task", "wikitext2", "--model", "rnn", "--stable", "--config", "smoke"]
    argv += [
        "--epochs",
        "1",
        "--data",
        str(tmp_path),
        "--out",
        str(tmp_path / "run"),
        "--device",
        "cpu",
    ]
    assert main(argv) == 0
    assert '"status": "completed"' in capsys.readouterr().out
    result = json.loads((tmp_path / "run" / "result.json").read_text())
    assert result["stable"] and result["config"]["epochs"] == 1
    assert result["config"]["name"] == "smoke-1ep"  # --epochs makes another config


@pytest.mark.parametrize("name", ["cpu", "full"])
def test_only_the_published_config_itself_replaces_a_committed_result(name, tmp_path) -> None:
    """A shorter run of a published config (a timing check, a test) must not overwrite the
    committed result of the real one."""
    published = published_result_path(CONFIGS[name], "lstm", True, tmp_path)
    assert published == tmp_path / "lstm-stable.json"
    for changed in (replace(CONFIGS[name], epochs=1), replace(CONFIGS[name], lr=1.0)):
        assert published_result_path(changed, "lstm", True, tmp_path) is None
    assert published_result_path(CONFIGS["smoke"], "rnn", False, tmp_path) is None


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without GPU")
def test_cli_refuses_the_full_config_on_a_cpu_unless_asked(tmp_path: Path) -> None:
    argv = ["train", "--model", "lstm", "--config", "full", "--out", str(tmp_path / "run")]
    with pytest.raises(SystemExit, match="no CUDA GPU found.*--device cpu"):
        main(argv)
    assert not (tmp_path / "run").exists()


def test_a_config_saved_before_a_field_was_added_still_matches() -> None:
    saved = json.loads(json.dumps(vars(CONFIGS["cpu"])))  # tuples become lists in JSON
    del saved["projected_layers"]  # as in the result files written before it existed
    assert same_config(saved, CONFIGS["cpu"])
    assert not same_config(saved, CONFIGS["cpu-first-layer"])
    assert not same_config(saved | {"epochs": 7}, CONFIGS["cpu"])
    assert not same_config(saved | {"unknown_knob": 1}, CONFIGS["cpu"])


def test_another_seed_is_its_own_config_committed_under_its_seed_folder(tmp_path) -> None:
    seeded = with_seed(CONFIGS["cpu"], 2)
    assert (seeded.name, seeded.seed) == ("cpu-seed2", 2)
    assert with_seed(CONFIGS["cpu"], CONFIGS["cpu"].seed) == CONFIGS["cpu"]
    published = published_result_path(seeded, "rnn", False)
    assert published is not None and published.parent.name == "seed2"
    assert published.parent.parent.name == "cpu"
    # the seed in the name must be the seed in the config, or nothing is published
    assert published_result_path(replace(seeded, seed=3), "rnn", False) is None
    assert published_result_path(with_seed(CONFIGS["smoke"], 2), "rnn", False) is None


def test_cli_seed_option_trains_another_config(tmp_path: Path, monkeypatch) -> None:
    folder = write_synthetic_corpus(tmp_path / "wikitext-2")
    sums = {name: data.sha256_of(folder / name) for name in data.WIKITEXT2_SHA256}
    monkeypatch.setattr(data, "WIKITEXT2_SHA256", sums)  # accept the synthetic files
    out = tmp_path / "run"
    argv = ["train", "--model", "rnn", "--config", "smoke", "--epochs", "1", "--seed", "7"]
    assert main([*argv, "--data", str(tmp_path), "--out", str(out), "--device", "cpu"]) == 0
    result = json.loads((out / "result.json").read_text())
    assert result["seed"] == 7 and result["config"]["name"] == "smoke-seed7-1ep"
    assert result["provenance"]["criteria_commit"] != ""


def test_every_ablation_config_changes_one_thing_from_cpu() -> None:
    base = vars(CONFIGS["cpu"])
    for name in (
        "cpu-authors-first",
        "cpu-authors-all",
        "cpu-free-forget",
        "cpu-free-forget-upper",
        "cpu-lr20",
        "cpu-converged",
        "cpu-first-layer",
    ):
        changed = {k for k, v in vars(CONFIGS[name]).items() if base[k] != v} - {"name"}
        assert changed, name
        expected = {
            "cpu-authors-first": {"lstm_constraint", "projected_layers"},
            "cpu-converged": {"epochs", "stop_below_lr"},  # one factor: how long it trains
        }.get(name)
        assert changed == expected if expected else len(changed) == 1, (name, changed)


def test_stop_below_lr_ends_a_run_as_completed_and_the_result_says_when(corpus, tmp_path) -> None:
    config = replace(TINY, name="tiny-stop", stop_below_lr=10.0)  # lr 5 < 10 after epoch 1
    result = train_language_model("rnn", False, config, corpus=corpus, out_dir=tmp_path,
                                  progress=False)  # fmt: skip
    assert result["status"] == "completed" and len(result["epochs"]) == 1
    assert math.isfinite(result["test_ppl"])
    stopped = result["stopped_early"]
    assert (stopped["after_epoch"], stopped["lr"], stopped["stop_below_lr"]) == (1, 5.0, 10.0)
    steps = math.ceil((len(corpus.train) // config.batch_size - 1) / config.bptt)
    assert stopped["max_weight_change"] == pytest.approx(2 * steps * 5.0 * config.clip)
    assert json.loads((tmp_path / "result.json").read_text())["stopped_early"] == stopped


def test_a_loaded_model_keeps_its_projection_scope_and_constraint(corpus, tmp_path) -> None:
    config = replace(TINY, name="tiny-authors", num_layers=2, projected_layers=1, epochs=1)
    config = replace(config, lstm_constraint="authors")
    train_language_model("lstm", True, config, corpus=corpus, out_dir=tmp_path, progress=False)
    model = load_trained_model(tmp_path)
    assert (model.projected_layers, model.lstm_constraint) == (1, "authors")
