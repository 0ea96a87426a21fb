"""JSB models and training: the NLL, the authors' bug, stability after every step, resume."""

from __future__ import annotations

import json
import math
import os
import signal
from dataclasses import replace

import pytest
import torch
from jsb_support import write_synthetic_jsb

from stablernn_lib.core.io import same_config
from stablernn_lib.tasks.jsb.data import NUM_KEYS, read_piano_rolls
from stablernn_lib.tasks.jsb.train import (
    CONFIGS,
    PUBLISHED_RESULTS,
    MusicConfig,
    MusicModel,
    build_music_model,
    evaluate_nll,
    load_music_model,
    pad_rolls,
    project_music_stable_,
    result_file_name,
    should_decay,
    train_music_model,
)
from stablernn_lib.tasks.training import published_config, with_seed
from stablernn_lib.tasks.wikitext2.measurements import (
    gradient_by_distance,
    gradient_by_distance_naive,
    state_jacobian_norms,
    truncated_eval_curve,
)
from stablernn_lib.theory.lstm_certificate import lstm_certificate_from_tensors

TINY = replace(CONFIGS["smoke"], name="tiny", hidden_size=16, epochs=3, train_sequences=None)


@pytest.fixture(scope="module")
def rolls(tmp_path_factory):
    path = tmp_path_factory.mktemp("jsb") / "JSB_Chorales.mat"
    return read_piano_rolls(write_synthetic_jsb(path, sequences=(16, 5, 5)))


def _random_rolls(count: int, generator: torch.Generator) -> list[torch.Tensor]:
    lengths = torch.randint(3, 12, (count,), generator=generator).tolist()
    return [(torch.rand(t, NUM_KEYS, generator=generator) < 0.05).float() for t in lengths]


def test_token_nll_is_the_bernoulli_nll_summed_over_keys():
    torch.manual_seed(0)
    model = MusicModel("rnn", hidden_size=8).double()
    outputs = torch.randn(5, 3, 8, dtype=torch.float64)
    targets = (torch.rand(5, 3, NUM_KEYS) < 0.3).double()
    p = torch.sigmoid(model.decode(outputs))
    reference = -(targets * p.log() + (1 - targets) * (1 - p).log()).sum(-1)
    torch.testing.assert_close(model.token_nll(outputs, targets), reference)


def test_evaluate_nll_equals_a_loop_over_chorales():
    generator = torch.Generator().manual_seed(1)
    rolls = _random_rolls(6, generator)
    torch.manual_seed(0)
    model = MusicModel("lstm", hidden_size=8).eval()
    total, steps = 0.0, 0
    with torch.no_grad():
        for roll in rolls:
            outputs, _ = model.recur(model.embed(roll[:-1, None]))
            total += float(model.token_nll(outputs, roll[1:, None]).sum())
            steps += roll.shape[0] - 1
    eps = torch.finfo(torch.float32).eps
    assert evaluate_nll(model, rolls) == pytest.approx(total / steps, rel=100 * eps)
    _, _, mask = pad_rolls(rolls)
    assert int(mask.sum()) == steps


def test_correct_lstm_is_recurrent_and_the_authors_bug_is_not():
    torch.manual_seed(0)
    roll = (torch.rand(7, 1, NUM_KEYS) < 0.2).float()
    for bug in (False, True):
        model = MusicModel("lstm", hidden_size=6, authors_bug=bug)
        forget = slice(6, 12)
        bias = model.rnn.bias_ih_l0 + model.rnn.bias_hh_l0
        assert torch.all(bias[forget] == (20.0 if bug else 10.0))
        outputs, _ = model.recur(model.embed(roll))
        outputs.sum().backward()
        grad = model.rnn.weight_hh_l0.grad
        assert (grad.abs().max() == 0) == bug  # no recurrence: exactly zero gradient
        # the bug: the output at t depends on frame t only
        changed = roll.clone()
        changed[0] = 1 - changed[0]
        later, _ = model.recur(model.embed(changed))
        moved = (later[1:] - outputs[1:]).abs().max()
        assert (moved == 0) == bug


def test_authors_bug_needs_an_lstm():
    with pytest.raises(ValueError, match="lstm"):
        MusicModel("rnn", authors_bug=True)
    with pytest.raises(ValueError, match="variant"):
        build_music_model("rnn", "authors-bug", TINY)


def test_lr_rule_is_the_authors():
    config = CONFIGS["full"]
    assert not should_decay(10, 9.0, [1.0, 2.0, 3.0], config)  # never before epoch 11
    assert should_decay(11, 3.5, [9.0, 1.0, 2.0, 3.0], config)  # above the max of the last 3
    assert not should_decay(11, 3.0, [9.0, 1.0, 2.0, 3.0], config)


def test_smoke_training_lowers_validation_nll(rolls, tmp_path):
    result = train_music_model(
        "rnn",
        "unconstrained",
        replace(TINY, epochs=4),
        rolls=rolls,
        out_dir=tmp_path,
        progress=False,
    )
    first = result["epochs"][0]["val_nll"]
    assert result["status"] == "completed" and result["best_val_nll"] < first
    assert math.isfinite(result["test_nll"])
    model = load_music_model(tmp_path)
    assert evaluate_nll(model, rolls.test) == pytest.approx(result["test_nll"], rel=1e-5)
    again = train_music_model(
        "rnn", "unconstrained", replace(TINY, epochs=4), rolls=rolls, out_dir=tmp_path, resume=True
    )
    # a rerun of a finished run is skipped: it returns the stored result, no new epochs
    assert again["provenance"] == result["provenance"] and again["epochs"] == result["epochs"]


@pytest.mark.parametrize(("cell", "encoder"), [("rnn", False), ("lstm", False), ("lstm", True)])
def test_stable_variants_stay_in_their_sets_after_every_step(rolls, tmp_path, cell, encoder):
    config = replace(TINY, input_encoder=encoder)
    bound = config.input_bound
    checked = []

    def check(step: int, model: MusicModel) -> None:
        with torch.no_grad():
            if cell == "rnn":
                norm = torch.linalg.matrix_norm(model.rnn.weight_hh_l0.double(), 2)
                assert norm <= 1 + 1e-5
            else:
                assert model.input_encoder == encoder
                if encoder:  # without it, the inputs are the frames: in [0, 1]
                    rows = torch.cat([model.encoder.weight, model.encoder.bias[:, None]], 1)
                    assert rows.abs().sum(1).max() <= bound * (1 + 1e-5)
                rnn = model.rnn
                certificate = lstm_certificate_from_tensors(
                    rnn.weight_hh_l0.double(),
                    rnn.weight_ih_l0.double(),
                    (rnn.bias_ih_l0 + rnn.bias_hh_l0).double(),
                    input_bound=bound,
                )
                assert certificate.lam < 1
        checked.append(step)

    model = build_music_model(cell, "stable", config)
    check(0, model)  # projected at initialization
    train_music_model(
        cell,
        "stable",
        replace(config, epochs=1),
        rolls=rolls,
        out_dir=tmp_path,
        progress=False,
        on_step=check,
    )
    assert checked == list(range(len(rolls.train) + 1))


def test_projection_of_a_wild_model_lands_in_the_set():
    torch.manual_seed(0)
    model = MusicModel("lstm", hidden_size=5, stable=True, input_encoder=True)
    with torch.no_grad():
        for param in model.parameters():
            param.mul_(30)
    project_music_stable_(model)
    frames = (torch.rand(200, 1, NUM_KEYS) < 0.5).float()
    assert model.embed(frames).abs().max() <= 1 + 1e-5


def test_resume_after_an_interruption_ends_like_an_uninterrupted_run(rolls, tmp_path):
    config = replace(TINY, epochs=3)  # epoch 3 draws its order from the restored shuffler
    whole = train_music_model(
        "lstm", "stable", config, rolls=rolls, out_dir=tmp_path / "a", progress=False
    )

    def interrupt(step: int, model: MusicModel) -> None:
        if step == len(rolls.train) + 5:  # in the middle of epoch 2
            os.kill(os.getpid(), signal.SIGINT)

    first = train_music_model(
        "lstm",
        "stable",
        config,
        rolls=rolls,
        out_dir=tmp_path / "b",
        progress=False,
        on_step=interrupt,
    )
    assert first["status"] == "interrupted" and len(first["epochs"]) == 1
    with pytest.raises(ValueError, match="resume"):
        train_music_model("lstm", "stable", config, rolls=rolls, out_dir=tmp_path / "b")
    resumed = train_music_model(
        "lstm", "stable", config, rolls=rolls, out_dir=tmp_path / "b", resume=True, progress=False
    )
    assert resumed["status"] == "completed" and resumed["steps"] == whole["steps"]
    for key in ("train_nll", "val_nll", "lr"):  # the same computation: the same bits
        assert [e[key] for e in resumed["epochs"]] == [e[key] for e in whole["epochs"]]
    assert resumed["test_nll"] == whole["test_nll"]
    with pytest.raises(ValueError, match="another run"):
        train_music_model("rnn", "stable", config, rolls=rolls, out_dir=tmp_path / "b", resume=True)


def test_stop_below_lr_ends_the_run_and_records_why(rolls, tmp_path):
    config = replace(TINY, lr=1e-3, epochs=5)
    result = train_music_model(
        "rnn",
        "unconstrained",
        config,
        rolls=rolls,
        out_dir=tmp_path,
        progress=False,
        stop_below_lr=1e-2,
    )
    assert result["status"] == "completed" and len(result["epochs"]) == 1
    stopped = result["stopped_early"]
    assert stopped["after_epoch"] == 1 and stopped["max_weight_change"] == pytest.approx(
        4 * len(rolls.train) * 1e-3 * config.clip
    )
    assert math.isfinite(result["test_nll"])


def test_adam_diagnostic_trains_with_adam_and_publishes_under_its_own_name(
    rolls, tmp_path, monkeypatch
):
    config = replace(CONFIGS["adam"], name="adam", hidden_size=16, epochs=3)
    monkeypatch.setitem(CONFIGS, "adam", config)  # a small stand-in for the published config
    results = tmp_path / "results"
    result = train_music_model(
        "rnn",
        "stable",
        config,
        rolls=rolls,
        out_dir=tmp_path / "run",
        results_dir=results,
        progress=False,
    )
    assert result["config"]["optimizer"] == "adam" and result["best_val_nll"] < math.inf
    assert (results / "rnn-stable-adam.json").is_file()
    # a run of another config under the same name (here, fewer epochs) is not published
    shorter = replace(config, epochs=1)
    train_music_model(
        "rnn",
        "unconstrained",
        shorter,
        rolls=rolls,
        out_dir=tmp_path / "short",
        results_dir=results,
        progress=False,
    )
    assert not (results / "rnn-unconstrained-adam.json").exists()
    assert result_file_name("lstm", "stable", "full") == "lstm-stable.json"
    with pytest.raises(ValueError, match="does not apply to the 'adam' optimizer"):
        train_music_model("rnn", "stable", config, rolls=rolls, stop_below_lr=1e-5)
    with pytest.raises(ValueError, match="unknown optimizer"):
        replace(config, optimizer="rmsprop")


def test_configs_saved_before_the_optimizer_field_still_match():
    saved = {k: v for k, v in vars(CONFIGS["full"]).items() if k != "optimizer"}
    assert same_config(saved, CONFIGS["full"]) and not same_config(saved, CONFIGS["adam"])


def _frames(rolls, length: int) -> torch.Tensor:
    """The chorales of at least ``length`` frames, cropped, as a source ``(length, N, 88)``."""
    return torch.stack([r[:length] for r in rolls if r.shape[0] >= length], dim=1)


def test_chapter8_analyses_serve_music_models(rolls):
    torch.manual_seed(0)
    model = MusicModel("lstm", hidden_size=8).eval()
    source = _frames(rolls.valid + rolls.test, 12)
    fast = gradient_by_distance(model, source, max_distance=4)
    naive = gradient_by_distance_naive(model, source, max_distance=4)
    torch.testing.assert_close(
        torch.tensor(fast["mean_norm"]), torch.tensor(naive["mean_norm"]), rtol=1e-4, atol=1e-7
    )
    curve = truncated_eval_curve(model, source, ks=[1, 3, source.shape[0]])
    assert curve["loss"][-1] == pytest.approx(curve["recurrent_loss"], rel=1e-4)
    assert curve["loss"][0] != pytest.approx(curve["recurrent_loss"], rel=1e-4)
    norms = state_jacobian_norms(model, source, positions=20, burn_in=3)
    assert len(norms) == 1 and len(norms[0]) == 20


# --- the authors' model (no input layer), dropout, the upstream TCN defaults, seeds -------------


def test_the_authors_model_reads_the_frames_themselves():
    torch.manual_seed(0)
    model = MusicModel("rnn", hidden_size=8)
    assert not model.input_encoder and model.encoder is None
    assert not any(name.startswith("encoder") for name, _ in model.named_parameters())
    frames = (torch.rand(6, 2, NUM_KEYS) < 0.2).float()
    assert model.embed(frames) is frames
    logits, state = model(frames)
    assert logits.shape == (6, 2, NUM_KEYS) and state.shape == (1, 2, 8)
    # the forward is the recurrent layer on the frames, then the decoder: nothing in between
    outputs, _ = model.rnn(frames)
    torch.testing.assert_close(logits, model.decoder(outputs))
    with_layer = MusicModel("rnn", hidden_size=8, input_encoder=True)
    assert with_layer.encoder.weight.shape == (NUM_KEYS, NUM_KEYS)
    with pytest.raises(ValueError, match="input_bound >= 1"):
        MusicModel("lstm", stable=True, input_bound=0.5)


def test_build_follows_the_config_and_old_configs_keep_the_input_layer():
    assert CONFIGS["full"].input_encoder and CONFIGS["adam"].input_encoder
    for name in ("authors", "adam-tcn", "smoke"):
        assert not CONFIGS[name].input_encoder, name
    assert build_music_model("lstm", "stable", CONFIGS["full"]).input_encoder
    assert not build_music_model("lstm", "stable", CONFIGS["adam-tcn"]).input_encoder
    assert build_music_model("lstm", "unconstrained", CONFIGS["adam-tcn"]).drop.p == 0.25


def test_configs_saved_before_the_encoder_and_dropout_fields_still_match():
    for name in ("full", "adam"):
        saved = {
            k: v for k, v in vars(CONFIGS[name]).items() if k not in ("input_encoder", "dropout")
        }
        assert same_config(saved, CONFIGS[name])  # read as the encoder variant, no dropout
    saved = {k: v for k, v in vars(CONFIGS["full"]).items() if k != "input_encoder"}
    assert not same_config(saved, CONFIGS["authors"])


def test_adam_tcn_is_the_upstream_tcn_setting():
    config = CONFIGS["adam-tcn"]
    assert (config.optimizer, config.lr, config.clip, config.dropout, config.epochs) == (
        "adam",
        1e-3,
        0.2,
        0.25,
        100,
    )
    assert (config.hidden_size, config.seed, config.input_encoder) == (256, 1111, False)
    with pytest.raises(ValueError, match="dropout"):
        replace(config, dropout=1.0)


def test_dropout_acts_in_training_only():
    torch.manual_seed(0)
    model = MusicModel("lstm", hidden_size=32, dropout=0.5)
    outputs = torch.randn(4, 3, 32)
    model.train()
    assert not torch.equal(model.decode(outputs), model.decode(outputs))  # a new mask each call
    model.eval()
    torch.testing.assert_close(model.decode(outputs), model.decoder(outputs))
    # the analyses' train mode with dropout off computes the eval function
    from stablernn_lib.tasks.wikitext2.model import dropout_off

    with dropout_off(model):
        torch.testing.assert_close(model.decode(outputs), model.decoder(outputs))
    assert model.drop.p == 0.5


def test_evaluation_ignores_dropout(rolls):
    torch.manual_seed(0)
    model = MusicModel("rnn", hidden_size=8, dropout=0.5)
    model.train()
    first = evaluate_nll(model, rolls.test)
    assert evaluate_nll(model, rolls.test) == first  # evaluate_nll switches to eval mode


def test_seeds_are_their_own_configs_and_results(rolls, tmp_path, monkeypatch):
    assert result_file_name("rnn", "stable", "adam-tcn") == "adam-tcn/rnn-stable.json"
    assert result_file_name("rnn", "stable", "adam-tcn-seed3") == "adam-tcn/seed3/rnn-stable.json"
    assert result_file_name("lstm", "stable", "full-seed2") == "seed2/lstm-stable.json"
    assert result_file_name("lstm", "stable", "adam-seed2") == "seed2/lstm-stable-adam.json"
    with pytest.raises(ValueError, match="commits no results"):
        result_file_name("rnn", "stable", "smoke-seed2")

    def published(name: str) -> MusicConfig | None:
        return published_config(name, CONFIGS, PUBLISHED_RESULTS)

    seeded = published("adam-tcn-seed3")
    assert seeded == with_seed(CONFIGS["adam-tcn"], 3)
    assert (seeded.name, seeded.seed) == ("adam-tcn-seed3", 3)
    assert published("adam-tcn-seed1111") == CONFIGS["adam-tcn"]
    assert published("adam-tcn") is CONFIGS["adam-tcn"]
    assert published("smoke") is None and published("adam-tcn-30ep") is None
    small = replace(CONFIGS["adam-tcn"], hidden_size=8, epochs=1)
    monkeypatch.setitem(CONFIGS, "adam-tcn", small)  # a small stand-in for the published config
    results = tmp_path / "results"
    result = train_music_model(
        "lstm",
        "stable",
        with_seed(small, 3),
        rolls=rolls,
        out_dir=tmp_path / "run",
        results_dir=results,
        progress=False,
    )
    assert result["seed"] == 3 and result["config"]["name"] == "adam-tcn-seed3"
    assert "criteria_commit" in result["provenance"]
    written = results / "adam-tcn" / "seed3" / "lstm-stable.json"
    assert json.loads(written.read_text())["test_nll"] == result["test_nll"]
    # another seed starts from other weights
    other = build_music_model("lstm", "stable", with_seed(small, 4))
    same = build_music_model("lstm", "stable", with_seed(small, 3))
    assert not torch.equal(other.rnn.weight_hh_l0, same.rnn.weight_hh_l0)


def test_train_music_command_takes_a_seed(rolls, tmp_path, monkeypatch):
    import argparse

    from stablernn_lib.tasks.jsb import train as music

    parser = argparse.ArgumentParser()
    music.register(parser.add_subparsers())
    args = parser.parse_args(
        ["train-music", "--model", "rnn", "--config", "adam-tcn", "--seed", "7", "--epochs", "1"]
    )
    seen = {}

    def fake_train(model, variant, config, **kwargs):
        seen.update(model=model, variant=variant, config=config)
        return {"model": model, "variant": variant, "status": "completed"}

    monkeypatch.setattr(music, "train_music_model", fake_train)
    assert args.func(args) == 0
    assert seen["config"].seed == 7 and seen["config"].name == "adam-tcn-seed7-1ep"
    # fewer epochs: never published
    assert published_config(seen["config"].name, CONFIGS, PUBLISHED_RESULTS) is None


def test_jacobian_norms_of_a_float32_lstm_come_from_a_float64_svd():
    from stablernn_lib.core.contraction import jacobian_norms, state_jacobians
    from stablernn_lib.tasks.wikitext2.measurements import layer_map

    torch.manual_seed(0)
    model = MusicModel("lstm", hidden_size=8).eval()
    step_map = layer_map(model, 0)
    frames = (torch.rand(20, NUM_KEYS) < 0.1).float()
    states = torch.randn(20, 16)
    norms = jacobian_norms(step_map, states, frames)
    assert norms.dtype == torch.float32 and norms.shape == (20,)
    reference = torch.linalg.svdvals(state_jacobians(step_map, states, frames).double())[:, 0]
    torch.testing.assert_close(norms.double(), reference, rtol=1e-6, atol=0)
