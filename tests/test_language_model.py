"""Word-level language model: shapes, stable projections, truncated evaluation."""

from __future__ import annotations

import math

import pytest
import torch

from stablernn_lib.core.norms import spectral_norm
from stablernn_lib.core.stability import project_spectral_ball
from stablernn_lib.tasks.wikitext2.analysis import layer_map
from stablernn_lib.tasks.wikitext2.data import batchify
from stablernn_lib.tasks.wikitext2.model import (
    WordLanguageModel,
    evaluate_loss,
    project_spectral_balls_,
    project_stable_,
    spectral_norm_upper_bounds,
    truncated_loss,
    truncated_outputs,
)
from stablernn_lib.theory.lstm_stability import lstm_contraction_bound


def tiny(cell: str, layers: int = 2, stable: bool = False) -> WordLanguageModel:
    torch.manual_seed(0)
    return WordLanguageModel(cell, 30, 6, 8, layers, dropout=0.0, stable=stable).eval()


@pytest.mark.parametrize("cell", ["rnn", "lstm"])
def test_forward_shapes_and_state(cell: str) -> None:
    model = tiny(cell)
    tokens = torch.randint(30, (7, 3))
    logits, state = model(tokens)
    assert logits.shape == (7, 3, 30)
    # carrying the state equals one longer run
    first, state_a = model(tokens[:4])
    second, _ = model(tokens[4:], state_a)
    torch.testing.assert_close(torch.cat([first, second]), logits)


def test_unknown_cell_is_rejected() -> None:
    with pytest.raises(ValueError, match="use 'rnn'"):
        WordLanguageModel("gru", 10, 4, 4)


def test_stable_rnn_projection_bounds_every_layer() -> None:
    model = tiny("rnn", layers=3)
    with torch.no_grad():
        for n in range(3):
            getattr(model.rnn, f"weight_hh_l{n}").mul_(10)
    assert spectral_norm(model.rnn.weight_hh_l2) > 1.5
    project_stable_(model)
    for n in range(3):
        assert spectral_norm(getattr(model.rnn, f"weight_hh_l{n}")) <= 1 + 1e-5


def test_spectral_norm_upper_bound_is_a_true_and_tight_bound() -> None:
    generator = torch.Generator().manual_seed(3)
    matrices = [torch.randn(3, 40, 40, generator=generator) * s for s in (1e-3, 1.0, 1e3)]
    rank_one = torch.randn(40, 1, generator=generator) @ torch.randn(1, 40, generator=generator)
    q, _ = torch.linalg.qr(torch.randn(40, 40, generator=generator, dtype=torch.float64))
    flat = q * torch.linspace(0.999, 1.0, 40, dtype=torch.float64)  # a cluster at the top
    matrices += [rank_one[None], flat[None].float(), torch.randn(2, 30, 50, generator=generator)]
    for batch in matrices:
        bounds = spectral_norm_upper_bounds(batch)
        exact = torch.linalg.matrix_norm(batch.double(), ord=2)
        assert (bounds >= exact).all()
        assert (bounds <= exact * batch.shape[-1] ** (1 / 256) * (1 + 1e-5)).all()
    assert spectral_norm_upper_bounds(torch.zeros(1, 5, 5)).item() == 0.0


def test_spectral_projection_skips_only_matrices_already_inside() -> None:
    generator = torch.Generator().manual_seed(4)
    inside = torch.randn(50, 50, generator=generator)
    inside *= 0.95 / spectral_norm(inside)
    outside = torch.randn(50, 50, generator=generator)
    outside *= 1.2 / spectral_norm(outside)
    weights = [inside.clone(), outside.clone()]
    project_spectral_balls_(weights, check_first=True)
    assert torch.equal(weights[0], inside)  # proved inside: left exactly as it was
    assert torch.equal(weights[1], project_spectral_ball(outside, 1.0))
    # the previous code projected every layer; both agree up to the SVD's rounding
    torch.testing.assert_close(weights[0], project_spectral_ball(inside, 1.0))
    # without the check (the default on a CPU) every matrix goes through the SVD
    weights = [inside.clone(), outside.clone()]
    project_spectral_balls_(weights)
    for got, original in zip(weights, (inside, outside), strict=True):
        assert torch.equal(got, project_spectral_ball(original, 1.0))


def test_stable_lstm_projection_certifies_every_layer() -> None:
    model = tiny("lstm", layers=2)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.mul_(20)
    assert lstm_contraction_bound(layer_map(model, 0), 1.0) > 1
    project_stable_(model)
    assert model.encoder.weight.abs().max() <= 1.0
    for n in range(2):
        assert lstm_contraction_bound(layer_map(model, n), 1.0) < 1


@pytest.mark.parametrize("cell", ["rnn", "lstm"])
def test_projecting_the_first_layer_only_leaves_the_others_untouched(cell: str) -> None:
    """The authors' code projected layer 0 only; ``projected_layers=1`` does the same."""
    torch.manual_seed(3)
    model = WordLanguageModel(cell, 25, 5, 7, 2, dropout=0.0, stable=True, projected_layers=1)
    with torch.no_grad():
        for parameter in model.rnn.parameters():
            parameter.mul_(20)
    free = {name: value.clone() for name, value in model.rnn.named_parameters() if "_l1" in name}
    project_stable_(model)
    for name, value in model.rnn.named_parameters():
        if "_l1" in name:
            assert torch.equal(value, free[name]), f"{name} was changed"
    if cell == "rnn":
        assert spectral_norm(model.rnn.weight_hh_l0) <= 1 + 1e-5
        assert spectral_norm(model.rnn.weight_hh_l1) > 1.5
    else:
        assert lstm_contraction_bound(layer_map(model, 0), 1.0) < 1
        assert lstm_contraction_bound(layer_map(model, 1), 1.0) > 1
    with pytest.raises(ValueError, match="projected_layers must be between 1 and num_layers"):
        WordLanguageModel(cell, 25, 5, 7, 2, projected_layers=3)


@pytest.mark.parametrize("cell", ["rnn", "lstm"])
def test_truncated_outputs_match_a_per_position_loop(cell: str) -> None:
    model = tiny(cell)
    source = torch.randint(30, (12, 2))
    k = 4
    fast = truncated_outputs(model, source, 1, 10, k, max_window_tokens=9)  # several chunks
    for t in range(1, 11):
        window = source[max(0, t - k + 1) : t + 1]
        outputs, _ = model.recur(model.embed(window))
        torch.testing.assert_close(fast[t - 1], outputs[-1], atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("cell", ["rnn", "lstm"])
def test_truncated_loss_with_long_context_is_the_recurrent_loss(cell: str) -> None:
    model = tiny(cell)
    source = batchify(torch.randint(30, (200,)), 4)  # 50 rows
    recurrent = evaluate_loss(model, source, bptt=7)
    assert truncated_loss(model, source, k=60, rows_per_block=13) == pytest.approx(
        recurrent, rel=1e-5
    )
    assert abs(truncated_loss(model, source, k=1) - recurrent) > 1e-5
    assert math.isfinite(truncated_loss(model, source, k=3))


def test_lstm_constraint_choices_and_their_sets() -> None:
    from stablernn_lib.theory.lstm_stability import (
        AUTHORS_RECURRENT_SCALES,
        COURSE_BIAS_BOUND,
        course_lstm_constraint,
        free_forget_constraint,
        gate_blocks,
    )

    with pytest.raises(ValueError, match="unknown lstm_constraint 'tight'"):
        WordLanguageModel("lstm", 30, 6, 5, 2, stable=True, lstm_constraint="tight")
    lifted, course = free_forget_constraint(), course_lstm_constraint()
    assert lifted.bias_max["f"] == COURSE_BIAS_BOUND and course.bias_max["f"] == 0.0
    assert lifted.input_radius["f"] == lifted.input_radius["i"] > course.input_radius["f"]
    assert lifted.recurrent_radius == course.recurrent_radius
    torch.manual_seed(0)
    model = WordLanguageModel("lstm", 30, 6, 5, 2, stable=True, lstm_constraint="free-forget")
    with torch.no_grad():
        for layer in range(2):
            getattr(model.rnn, f"bias_ih_l{layer}").add_(3.0)  # forget bias far above 0
            getattr(model.rnn, f"weight_ih_l{layer}").mul_(50.0)
    project_stable_(model)
    forget = gate_blocks(model.rnn.bias_ih_l0 + model.rnn.bias_hh_l0)["f"]
    assert forget.max() > 1.0  # the lifted cap lets the forget bias stay positive
    # lifted above the first layer only: layer 1 keeps the cap, layer 2 does not
    torch.manual_seed(0)
    model = WordLanguageModel("lstm", 30, 6, 5, 2, stable=True, lstm_constraint="free-forget-upper")
    with torch.no_grad():
        for layer in range(2):
            getattr(model.rnn, f"bias_ih_l{layer}").add_(3.0)
    project_stable_(model)
    first, second = (
        gate_blocks(getattr(model.rnn, f"bias_ih_l{n}") + getattr(model.rnn, f"bias_hh_l{n}"))["f"]
        for n in range(2)
    )
    assert first.max() <= course.bias_max["f"] + 1e-6 < 1.0 < second.max()
    # the authors' rule: every column of every recurrent block sums to its constant
    model = WordLanguageModel("lstm", 30, 6, 5, 2, stable=True, lstm_constraint="authors")
    project_stable_(model)
    for layer in range(2):
        blocks = gate_blocks(getattr(model.rnn, f"weight_hh_l{layer}").detach())
        for gate, c in AUTHORS_RECURRENT_SCALES.items():
            sums = blocks[gate].abs().sum(dim=0)
            assert torch.allclose(sums, torch.full_like(sums, c), rtol=1e-5), (layer, gate)
    assert model.encoder.weight.abs().max() <= 1.0
