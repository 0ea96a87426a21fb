"""Word-level language model: shapes, stable projections, truncated evaluation."""

from __future__ import annotations

import math

import pytest
import torch

from stablernn_lib.data import batchify
from stablernn_lib.language_model import (
    WordLanguageModel,
    evaluate_loss,
    project_stable_,
    truncated_loss,
    truncated_outputs,
)
from stablernn_lib.lm_analysis import layer_map
from stablernn_lib.lstm_stability import lstm_contraction_bound
from stablernn_lib.stability import spectral_norm


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
