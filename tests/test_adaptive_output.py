"""The adaptive-softmax output layer (the `cpu` config): exact losses, training, rerun skips."""

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
from torch.nn.functional import cross_entropy

from stablernn_lib.tasks.wikitext2 import measurements as lma
from stablernn_lib.tasks.wikitext2.data import Corpus, batchify
from stablernn_lib.tasks.wikitext2.model import (
    WordLanguageModel,
    evaluate_loss,
    truncated_loss,
)
from stablernn_lib.tasks.wikitext2.train import (
    CONFIGS,
    load_trained_model,
    run_name,
    train_language_model,
)
from stablernn_lib.tasks.wikitext2.variants import MODEL_VARIANTS

# The cpu config at toy sizes: the synthetic corpus has 200 words, so the cutoffs shrink.
TINY_ADAPTIVE = replace(
    CONFIGS["cpu"],
    name="tiny-adaptive",
    embedding_size=16,
    hidden_size=16,
    epochs=2,
    lr=1.0,
    dropout=0.0,
    adaptive_cutoffs=(20, 80),
)


def _as_json(value: object) -> object:
    return json.loads(json.dumps(value))


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Corpus:
    folder = write_synthetic_corpus(
        tmp_path_factory.mktemp("corpus"), vocab_size=200, lines=(1500, 100, 100)
    )
    return Corpus.from_folder(folder)


@pytest.mark.parametrize("output", ["softmax", "adaptive"])
@pytest.mark.parametrize("cell", ["rnn", "lstm"])
def test_token_nll_is_the_exact_normalized_loss(cell: str, output: str) -> None:
    torch.manual_seed(0)
    model = WordLanguageModel(cell, 300, 8, 16, 2, 0.0, output=output, cutoffs=(30, 120))
    model.eval()
    tokens = torch.randint(300, (7, 3))
    targets = torch.randint(300, (7, 3))
    outputs, _ = model.recur(model.embed(tokens))
    scores = model.decode(outputs).double()
    log_probs = scores.log_softmax(-1)
    nll = model.token_nll(outputs, targets).double()
    assert nll.shape == targets.shape
    picked = -log_probs.gather(-1, targets[..., None]).squeeze(-1)
    torch.testing.assert_close(nll, picked, rtol=1e-5, atol=1e-5)
    if output == "adaptive":  # decode already gives normalized log-probabilities
        torch.testing.assert_close(scores.exp().sum(-1), torch.ones(7, 3, dtype=torch.float64))
        torch.testing.assert_close(
            cross_entropy(scores.flatten(0, 1), targets.flatten(), reduction="none"),
            nll.flatten(),
            rtol=1e-5,
            atol=1e-5,
        )


def test_adaptive_cutoffs_beyond_the_vocabulary_are_refused() -> None:
    with pytest.raises(ValueError, match="cutoffs"):
        WordLanguageModel("rnn", 1000, 8, 8, output="adaptive", cutoffs=(2_000, 10_000))
    with pytest.raises(ValueError, match="unknown output"):
        WordLanguageModel("rnn", 1000, 8, 8, output="sampled")


def test_evaluations_agree_when_the_context_covers_everything() -> None:
    torch.manual_seed(1)
    model = WordLanguageModel("lstm", 300, 8, 16, 1, 0.0, output="adaptive", cutoffs=(30, 120))
    source = batchify(torch.randint(300, (60,)), 3)  # 20 rows
    full = evaluate_loss(model, source, bptt=35)
    assert truncated_loss(model, source, k=25) == pytest.approx(full, rel=1e-5)


def test_cpu_config_is_the_authors_setup_but_output_epochs_and_lr() -> None:
    cpu, full = CONFIGS["cpu"], CONFIGS["full"]
    assert cpu.output == "adaptive" and full.output == "softmax"
    assert cpu.vocab_size is None and cpu.train_tokens is None and cpu.eval_tokens is None
    differences = {
        name for name in cpu.__dataclass_fields__ if getattr(cpu, name) != getattr(full, name)
    }
    assert differences == {"name", "output", "epochs", "lr"}
    assert (full.embedding_size, full.hidden_size, full.num_layers) == (200, 200, 2)
    assert (full.dropout, full.epochs, full.lr, full.clip) == (0.2, 40, 20.0, 0.25)


def test_adaptive_training_learns_writes_results_and_a_rerun_skips(
    corpus: Corpus, tmp_path: Path
) -> None:
    kwargs = {
        "corpus": corpus,
        "out_dir": tmp_path / "run",
        "progress": False,
    }
    result = train_language_model("rnn", True, TINY_ADAPTIVE, **kwargs)
    assert result["status"] == "completed" and math.isfinite(result["test_ppl"])
    assert result["epochs"][-1]["val_ppl"] < 0.9 * corpus.vocab_size  # beats uniform
    assert result["config"]["output"] == "adaptive"
    model = load_trained_model(tmp_path / "run")
    assert model.output == "adaptive" and model.stable
    assert torch.linalg.matrix_norm(model.rnn.weight_hh_l0, ord=2) <= 1 + 1e-5
    again = train_language_model("rnn", True, TINY_ADAPTIVE, resume=True, **kwargs)
    assert again == _as_json(result)  # not trained or evaluated again


def test_run_analysis_writes_every_part_and_a_rerun_computes_only_what_is_missing(
    corpus: Corpus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs = tmp_path / "runs"
    for cell, stable in MODEL_VARIANTS:
        out = runs / run_name(cell, stable, CONFIGS["smoke"])
        train_language_model(cell, stable, "smoke", corpus=corpus, out_dir=out, progress=False)
    path = tmp_path / "analysis.json"
    kwargs = {"corpus": corpus, "runs_dir": runs, "results_path": path, "progress": False}
    first = lma.run_analysis("smoke", parts=("truncated", "certificates"), **kwargs)
    assert set(first["rnn-stable"]) == {"truncated_eval", "diagonal_certificates"}
    assert set(first["lstm-stable"]) == {"truncated_eval"}
    certificate = first["rnn-stable"]["diagonal_certificates"][0]
    assert certificate["diagonal_lam"] <= certificate["spectral_lam"] <= 1 + 1e-5
    variants = ("rnn-unconstrained", "rnn-stable", "lstm-unconstrained", "lstm-stable")
    assert set(first["seconds"]) == {f"{name}/truncated_eval" for name in variants} | {
        "rnn-unconstrained/diagonal_certificates",
        "rnn-stable/diagonal_certificates",
    }

    def must_not_run(*args: object, **kwargs: object) -> None:
        raise AssertionError("a measurement already in the file was computed again")

    monkeypatch.setattr(lma, "truncated_eval_curve", must_not_run)
    second = lma.run_analysis("smoke", parts=("truncated", "figure2"), **kwargs)
    saved = json.loads(path.read_text())
    assert saved == _as_json(second)
    for name in variants:
        assert saved[name]["truncated_eval"] == _as_json(first[name]["truncated_eval"])
        assert saved[name]["figure2"]["count"][0] > 0  # stable models too
    # one variant only: the others are not read (nor need to exist)
    only = lma.run_analysis("smoke", parts=("jacobians",), variants=(("lstm", True),), **kwargs)
    assert "jacobian_norms" in only["lstm-stable"]
    assert all("jacobian_norms" not in only[name] for name in variants[:3])


def test_mid_epoch_checkpoints_and_sigterm_resume_to_the_same_result(
    corpus: Corpus, tmp_path: Path
) -> None:
    config = replace(TINY_ADAPTIVE, dropout=0.3)  # the random state must be restored too
    common = {"corpus": corpus, "progress": False}
    reference = train_language_model("lstm", True, config, out_dir=tmp_path / "ref", **common)

    def kill(step: int, model: WordLanguageModel) -> None:
        if step == 40:  # mid-epoch: only a periodic checkpoint has this epoch's progress
            raise RuntimeError("killed")

    with pytest.raises(RuntimeError, match="killed"):
        train_language_model(
            "lstm", True, config, out_dir=tmp_path / "kill", on_step=kill, checkpoint_every=0.0,
            **common,
        )  # fmt: skip
    saved = torch.load(tmp_path / "kill" / "checkpoint.pt", weights_only=False)
    assert saved["progress"]["step"] == 39  # the step before the kill, saved mid-epoch
    resumed = train_language_model(
        "lstm", True, config, out_dir=tmp_path / "kill", resume=True, **common
    )
    assert [e["val_loss"] for e in resumed["epochs"]] == [
        e["val_loss"] for e in reference["epochs"]
    ]
    assert resumed["test_loss"] == reference["test_loss"]

    def terminate(step: int, model: WordLanguageModel) -> None:
        if step == 45:
            os.kill(os.getpid(), signal.SIGTERM)  # what a job scheduler sends

    stopped = train_language_model(
        "lstm", True, config, out_dir=tmp_path / "term", on_step=terminate, **common
    )
    assert stopped["status"] == "interrupted"
    resumed = train_language_model(
        "lstm", True, config, out_dir=tmp_path / "term", resume=True, **common
    )
    assert resumed["test_loss"] == reference["test_loss"]
