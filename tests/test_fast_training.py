"""The fast training step (issue 38) against the plain one, and the iterative projection
against the exact one, on the CPU; the CUDA-only parts (graph capture, TF32) skip here."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch
from stablernn_tools.synthetic_corpus import write_synthetic_corpus

from stablernn_lib.core.iterative_projection import (
    SIGN_ITERATIONS,
    project_spectral_ball_iterative,
    spectral_norms_float64,
)
from stablernn_lib.tasks.fast_step import FastStep, PlainStep
from stablernn_lib.tasks.training import TrainingDivergedError
from stablernn_lib.tasks.wikitext2 import model as lm
from stablernn_lib.tasks.wikitext2.data import Corpus
from stablernn_lib.tasks.wikitext2.train import CONFIGS, train_language_model

# The smoke config on a synthetic corpus: 30 steps an epoch, 7 epochs = 210 steps.
SMOKE = replace(CONFIGS["smoke"], epochs=7)
NEEDS_CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


class Recording:
    """A step implementation that keeps every loss the loop reads."""

    def __init__(self, inner: PlainStep | FastStep) -> None:
        self.inner, self.seen = inner, []
        self.sync_every, self.description = inner.sync_every, inner.description

    def run(self, *args):
        return self.inner.run(*args)

    def values(self, losses):
        values = self.inner.values(losses)
        self.seen += values
        return values


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Corpus:
    folder = write_synthetic_corpus(tmp_path_factory.mktemp("corpus"), lines=(1500, 60, 60))
    return Corpus.from_folder(folder)


def losses_of(
    cell: str, stable: bool, step, corpus: Corpus, out: Path, **kwargs
) -> tuple[torch.Tensor, dict]:
    recording = Recording(step)
    result = train_language_model(
        cell, stable, SMOKE, corpus=corpus, out_dir=out, progress=False, step=recording, **kwargs
    )
    return torch.tensor(recording.seen, dtype=torch.float64), result


@pytest.mark.parametrize("cell", ["rnn", "lstm"])
def test_fast_step_without_capture_equals_the_plain_loop(cell, corpus, tmp_path) -> None:
    plain, plain_result = losses_of(cell, True, PlainStep(), corpus, tmp_path / "plain")
    fast, fast_result = losses_of(cell, True, FastStep(sync_every=40), corpus, tmp_path / "fast")
    assert len(plain) == len(fast) >= 200
    assert ((fast - plain).abs() / plain.abs()).max() <= 1e-6
    assert fast_result["test_ppl"] == pytest.approx(plain_result["test_ppl"], rel=1e-6)
    assert fast_result["step_implementation"] == "fast-eager"
    assert plain_result["step_implementation"] == "plain"
    assert fast_result["mean_step_ms"] > 0


def test_iterative_projection_trains_like_the_exact_one_and_is_certified(corpus, tmp_path) -> None:
    exact, _ = losses_of("rnn", True, PlainStep(), corpus, tmp_path / "exact")
    fast, result = losses_of(
        "rnn", True, FastStep(), corpus, tmp_path / "fast", projection="iterative"
    )
    # Each step's projection agrees to ~1e-7; 210 steps of SGD amplify it (5e-6 measured).
    assert ((fast - exact).abs() / exact.abs()).max() <= 1e-4
    assert result["projection"] == "iterative"
    for epoch in result["epochs"]:
        certificate = epoch["certificate"]
        assert max(certificate["norms_after"]) <= 1 + lm.CERTIFICATE_SLACK


def test_fast_step_stops_a_diverging_run_within_its_sync_interval(corpus, tmp_path) -> None:
    exploding = replace(SMOKE, lr=1e4, clip=1e4, epochs=1)
    with pytest.raises(TrainingDivergedError, match="diverged at epoch 1"):
        train_language_model(
            "rnn",
            False,
            exploding,
            corpus=corpus,
            out_dir=tmp_path,
            progress=False,
            step=FastStep(sync_every=5),
        )


def test_unknown_step_mode_and_projection_are_refused(corpus, tmp_path) -> None:
    with pytest.raises(ValueError, match="unknown step mode"):
        FastStep(mode="turbo")
    with pytest.raises(ValueError, match="unknown projection"):
        train_language_model(
            "rnn", True, SMOKE, corpus=corpus, out_dir=tmp_path, projection="approximate"
        )


# ---------------------------------------------------------------------------------------
# The iterative projection against the exact one
# ---------------------------------------------------------------------------------------


def with_singular_values(values: list[float], generator: torch.Generator) -> torch.Tensor:
    n = len(values)
    q1, _ = torch.linalg.qr(torch.randn(n, n, generator=generator, dtype=torch.float64))
    q2, _ = torch.linalg.qr(torch.randn(n, n, generator=generator, dtype=torch.float64))
    return (q1 * torch.tensor(values, dtype=torch.float64)) @ q2.T


def sign_iteration_resolution(matrix: torch.Tensor) -> float:
    """``(||W||_F + sqrt(min(m, n))) 1.5^-k`` at radius 1 after the ``k`` sign iterations: a
    singular value farther from 1 is clipped exactly, a closer one to within half of it."""
    frobenius = float(torch.linalg.matrix_norm(matrix.double()))
    return (frobenius + min(matrix.shape) ** 0.5) * 1.5 ** (-SIGN_ITERATIONS)


def exact_projection(matrix: torch.Tensor, radius: float = 1.0) -> torch.Tensor:
    u, s, vh = torch.linalg.svd(matrix.double(), full_matrices=False)
    return (u * s.clamp(max=radius).unsqueeze(-2)) @ vh


def adversarial(generator: torch.Generator) -> dict[str, torch.Tensor]:
    n = 48
    return {
        "random": torch.randn(n, n, generator=generator, dtype=torch.float64) / 4,
        "clustered at 1": with_singular_values(
            [1.0] * 20 + [1.0 + 1e-4 * k for k in range(16)] + [0.3] * 12, generator
        ),
        "rank deficient": with_singular_values([0.0] * 20 + [2.0] * 14 + [0.5] * 14, generator),
        "norm exactly 1": with_singular_values([1.0] * n, generator),
        "far outside": with_singular_values([40.0] + [1.0 + 1e-5] * 30 + [1e-3] * 17, generator),
        "after a step": with_singular_values(
            [1.0 + 1e-3 * k / n for k in range(n // 2)] + [0.1] * (n // 2), generator
        ),
    }


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_iterative_projection_is_within_its_stated_tolerance_of_the_exact_one(
    generator, dtype
) -> None:
    rounding = {torch.float32: 2e-6, torch.float64: 1e-12}[dtype]
    for name, matrix in adversarial(generator).items():
        got = project_spectral_ball_iterative(matrix.to(dtype)).double()
        tolerance = sign_iteration_resolution(matrix) + rounding
        error = (got - exact_projection(matrix)).abs().max()
        assert error <= tolerance, name
        assert float(spectral_norms_float64(got)) <= 1 + tolerance, name


def test_iterative_projection_of_batches_wide_matrices_and_other_radii(generator) -> None:
    batch = 3 * torch.randn(4, 12, 30, generator=generator, dtype=torch.float64)
    got = project_spectral_ball_iterative(batch, radius=2.0)
    torch.testing.assert_close(got, exact_projection(batch, 2.0), atol=1e-8, rtol=0)
    with pytest.raises(ValueError, match="radius must be positive"):
        project_spectral_ball_iterative(batch, radius=0.0)


def test_inside_matrices_are_kept_bit_for_bit_and_the_others_projected(generator) -> None:
    inside = with_singular_values([0.9 * k / 24 for k in range(1, 25)], generator).float()
    outside = with_singular_values([0.05 * k for k in range(1, 25)], generator).float()
    weights = [inside.clone(), outside.clone()]
    lm.project_spectral_balls_iteratively_(weights)
    assert torch.equal(weights[0], inside)
    torch.testing.assert_close(weights[1].double(), exact_projection(outside), atol=2e-5, rtol=0)


def test_certificate_reprojects_exactly_a_layer_that_fails_it() -> None:
    torch.manual_seed(0)
    model = lm.WordLanguageModel("rnn", 30, 8, 8, num_layers=2, stable=True)
    lm.project_stable_(model)
    with torch.no_grad():
        model.rnn.weight_hh_l1.mul_(1.001)  # just outside: what an unfinished iteration leaves
    kept = model.rnn.weight_hh_l0.detach().clone()
    certificate = lm.certify_stable_rnn_(model)
    assert certificate["reprojected_layers"] == [1]
    assert certificate["norms"][1] == pytest.approx(1.001, rel=1e-5)
    assert max(certificate["norms_after"]) <= 1 + lm.CERTIFICATE_SLACK
    assert torch.equal(model.rnn.weight_hh_l0.detach(), kept)


# ---------------------------------------------------------------------------------------
# CUDA only
# ---------------------------------------------------------------------------------------


@NEEDS_CUDA
@pytest.mark.parametrize("cell", ["rnn", "lstm"])
def test_captured_step_trains_like_the_eager_fast_step(cell, corpus, tmp_path) -> None:
    config = replace(SMOKE, epochs=2)
    eager = Recording(FastStep(mode="eager"))
    graph = Recording(FastStep(mode="graph"))
    for step, out in ((eager, "eager"), (graph, "graph")):
        train_language_model(
            cell,
            True,
            config,
            corpus=corpus,
            out_dir=tmp_path / out,
            progress=False,
            step=step,
            device="cuda",
            projection="iterative",
        )
    a, b = (torch.tensor(r.seen, dtype=torch.float64) for r in (eager, graph))
    assert graph.inner.description == "fast-graph"  # the capture worked, no fallback
    assert len(a) == len(b) and ((a - b).abs() / a.abs()).max() <= 1e-3


@NEEDS_CUDA
def test_iterative_projection_on_cuda_needs_no_host_synchronization(generator) -> None:
    matrices = torch.stack(list(adversarial(generator).values())).float().cuda()
    torch.cuda.set_sync_debug_mode("error")
    try:
        got = project_spectral_ball_iterative(matrices)
    finally:
        torch.cuda.set_sync_debug_mode(0)
    for n, matrix in enumerate(matrices):
        error = (got[n].double().cpu() - exact_projection(matrix.cpu())).abs().max()
        assert error <= 1e-4


# ---------------------------------------------------------------------------------------
# Several models in one task
# ---------------------------------------------------------------------------------------


def test_a_group_of_models_trains_each_as_it_trains_alone(corpus, tmp_path) -> None:
    """Without dropout (the smoke config) on a CPU: each member's per-epoch training and
    validation losses and test perplexity equal those of its run alone (the plain loop);
    members with different learning rates keep their own schedules."""
    from stablernn_lib.tasks.wikitext2.group import ModelGroup, train_language_models_together

    config = replace(SMOKE, epochs=4)
    runs = [("rnn", True, config), ("lstm", False, replace(config, lr=20.0, seed=2))]
    together = train_language_models_together(
        runs, tmp_path / "group", corpus=corpus, step=FastStep(sync_every=40), progress=False
    )
    for (cell, stable, member_config), grouped in zip(runs, together, strict=True):
        alone = train_language_model(
            cell, stable, member_config, corpus=corpus, out_dir=tmp_path / cell, progress=False
        )
        assert grouped["status"] == alone["status"] == "completed"
        assert grouped["trained_in_group_of"] == 2 and grouped["seed"] == member_config.seed
        for key in ("train_loss", "val_loss", "lr"):
            got = torch.tensor([e[key] for e in grouped["epochs"]])
            want = torch.tensor([e[key] for e in alone["epochs"]])
            assert ((got - want).abs() / want.abs()).max() <= 1e-6, (cell, key)
        assert grouped["test_ppl"] == pytest.approx(alone["test_ppl"], rel=1e-6)
    lrs = [[e["lr"] for e in result["epochs"]] for result in together]
    assert lrs[0][0] == 5.0 and lrs[1][0] == 20.0
    with pytest.raises(ValueError, match="must read the same batches"):
        from stablernn_lib.tasks.wikitext2.train import LanguageModelTask

        ModelGroup(
            [
                LanguageModelTask("rnn", False, config, corpus_for(config, corpus), "cpu"),
                LanguageModelTask(
                    "rnn", False, replace(config, bptt=20), corpus_for(config, corpus), "cpu"
                ),
            ]
        )


def test_a_group_stopped_by_its_deadline_resumes_bit_for_bit(corpus, tmp_path) -> None:
    """A group stopped mid-epoch by ``stop_at`` (its members' loss sums and records in the
    checkpoint) and resumed ends with the numbers and weights of the uninterrupted group."""
    from stablernn_lib.tasks.wikitext2.group import train_language_models_together

    config = replace(SMOKE, epochs=2)
    runs = [("rnn", True, config), ("lstm", False, replace(config, lr=20.0, seed=2))]

    def group(out: str, **kwargs) -> list[dict]:
        return train_language_models_together(
            runs,
            tmp_path / out,
            corpus=corpus,
            step=FastStep(sync_every=7),
            progress=False,
            **kwargs,
        )

    whole = group("whole")
    stopped = group("stopped", stop_at=0.0)  # a deadline already past: stop after one step
    assert [result["status"] for result in stopped] == ["interrupted"] * 2
    resumed = group("stopped", resume=True)
    for mine, theirs in zip(resumed, whole, strict=True):
        assert mine["status"] == "completed" and mine["test_ppl"] == theirs["test_ppl"]
        for key in ("train_loss", "val_loss", "lr"):
            assert [e[key] for e in mine["epochs"]] == [e[key] for e in theirs["epochs"]]
    weights = [
        torch.load(tmp_path / out / "checkpoint.pt", weights_only=False)["model_state"]
        for out in ("whole", "stopped")
    ]
    assert all(torch.equal(weights[0][name], weights[1][name]) for name in weights[0])


def corpus_for(config, corpus: Corpus) -> Corpus:
    from stablernn_lib.tasks.wikitext2.train import prepare_corpus

    return prepare_corpus(config, corpus, None)


@NEEDS_CUDA
def test_a_captured_group_step_trains_like_the_eager_group(corpus, tmp_path) -> None:
    from stablernn_lib.tasks.wikitext2.group import train_language_models_together

    config = replace(SMOKE, epochs=2)
    runs = [("rnn", True, config), ("lstm", True, replace(config, lr=20.0))]
    results = {
        mode: train_language_models_together(
            runs,
            tmp_path / mode,
            corpus=corpus,
            device="cuda",
            step=FastStep(mode=mode),
            projection="iterative",
            progress=False,
        )
        for mode in ("eager", "graph")
    }
    assert results["graph"][0]["step_implementation"] == "fast-graph"  # the capture worked
    for eager, graph in zip(results["eager"], results["graph"], strict=True):
        for key in ("train_loss", "val_loss"):
            got = torch.tensor([e[key] for e in graph["epochs"]])
            want = torch.tensor([e[key] for e in eager["epochs"]])
            assert ((got - want).abs() / want.abs()).max() <= 1e-3, key
