"""The parallel truncated model equals the per-window reference and obeys Lemma 1."""

from __future__ import annotations

import pytest
import torch

from stablernn_lib.core.bounds import lemma1_context, lemma1_truncation_bound, state_norm_bound
from stablernn_lib.core.contraction import contraction_constant
from stablernn_lib.core.models import random_lstm, random_vanilla_rnn
from stablernn_lib.core.norms import spectral_norm
from stablernn_lib.core.truncation import truncated_states, truncated_states_reference


@pytest.mark.parametrize("k", [1, 2, 3, 7, 15, 40])
@pytest.mark.parametrize("kind", ["tanh", "relu", "identity", "lstm"])
def test_parallel_matches_reference(kind, k, generator):
    if kind == "lstm":
        model = random_lstm(3, 4, generator=generator)
    else:
        model = random_vanilla_rnn(3, 4, 0.9, activation=kind, bias=True, generator=generator)
    inputs = torch.randn(15, 2, 3, dtype=torch.float64, generator=generator)
    torch.testing.assert_close(
        truncated_states(model, inputs, k), truncated_states_reference(model, inputs, k)
    )


@pytest.mark.parametrize("kind", ["tanh", "lstm"])
def test_context_at_least_t_gives_the_full_model(kind, generator):
    model = (
        random_lstm(2, 3, generator=generator)
        if kind == "lstm"
        else random_vanilla_rnn(2, 3, 1.7, bias=True, generator=generator)
    )
    inputs = torch.randn(10, 3, 2, dtype=torch.float64, generator=generator)
    full = model.run(inputs)
    k = 4
    truncated = truncated_states(model, inputs, k)
    torch.testing.assert_close(truncated[:k], full[:k])  # t <= k: same as the full model
    assert (truncated[k:] - full[k:]).abs().max() > 1e-6  # beyond k they differ
    torch.testing.assert_close(truncated_states(model, inputs, 10), full)


def test_truncated_states_work_in_float32():
    model = random_vanilla_rnn(2, 3, 0.5, dtype=torch.float32)
    inputs = torch.randn(6, 2, 2)
    torch.testing.assert_close(
        truncated_states(model, inputs, 3), truncated_states_reference(model, inputs, 3)
    )


def test_truncation_is_differentiable(generator):
    model = random_vanilla_rnn(2, 3, 0.8, generator=generator)
    inputs = torch.randn(8, 2, 2, dtype=torch.float64, generator=generator)
    truncated_states(model, inputs, 3).sum().backward()
    assert model.weight_hh.grad is not None and model.weight_hh.grad.abs().sum() > 0


@pytest.mark.parametrize("bad_k", [0, -2])
def test_context_below_one_is_rejected(bad_k):
    model = random_vanilla_rnn(2, 2, 0.5)
    with pytest.raises(ValueError, match="at least 1"):
        truncated_states(model, torch.zeros(4, 1, 2, dtype=torch.float64), bad_k)
    with pytest.raises(TypeError, match="must be an int"):
        truncated_states(model, torch.zeros(4, 1, 2, dtype=torch.float64), 2.5)


@pytest.mark.parametrize("seed", range(20))
def test_truncation_error_obeys_lemma1(seed):
    """On random stable tanh RNNs, ||h_t - h^k_t|| <= lambda^k L_x B_x / (1 - lambda)."""
    g = torch.Generator().manual_seed(seed)
    lam = float(torch.empty(1).uniform_(0.3, 0.95, generator=g))
    model = random_vanilla_rnn(4, 8, lam, generator=g)
    inputs = torch.randn(60, 5, 4, dtype=torch.float64, generator=g)
    bx = float(inputs.norm(dim=-1).max())
    lx = spectral_norm(model.weight_ih)  # rho is 1-Lipschitz
    assert contraction_constant(model) == pytest.approx(lam)
    full = model.run(inputs)
    assert full.norm(dim=-1).max() <= state_norm_bound(lam, lx, bx) + 1e-12
    for k in (1, 2, 5, 10, 20):
        error = (full - truncated_states(model, inputs, k)).norm(dim=-1).max()
        assert error <= lemma1_truncation_bound(lam, lx, bx, k) + 1e-12


def test_lemma1_context_is_the_smallest_sufficient_k():
    lam, lx, bx, eps = 0.8, 2.0, 3.0, 1e-3
    k = lemma1_context(lam, lx, bx, eps)
    assert lemma1_truncation_bound(lam, lx, bx, k) <= eps
    assert lemma1_truncation_bound(lam, lx, bx, k - 1) > eps
    assert lemma1_context(lam, lx, bx, 100.0) == 0
    with pytest.raises(ValueError, match="contractive"):
        lemma1_context(1.0, lx, bx, eps)
    with pytest.raises(ValueError, match="eps must be positive"):
        lemma1_context(lam, lx, bx, 0.0)
