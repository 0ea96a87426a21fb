"""The models as state maps agree with PyTorch's fused modules and check their inputs."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from stablernn_lib.core.contraction import contraction_constant
from stablernn_lib.core.models import (
    LinearRNN,
    LSTMMap,
    VanillaRNN,
    random_lstm,
    random_vanilla_rnn,
)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("nonlinearity", ["tanh", "relu"])
def test_vanilla_rnn_matches_torch_rnn(dtype, nonlinearity, generator):
    torch.manual_seed(0)
    reference = nn.RNN(3, 5, nonlinearity=nonlinearity, dtype=dtype)
    model = VanillaRNN.from_torch(reference)
    inputs = torch.randn(7, 4, 3, dtype=dtype, generator=generator)
    expected, _ = reference(inputs)
    tol = 1e-6 if dtype == torch.float32 else 1e-12
    torch.testing.assert_close(model.run(inputs), expected, atol=tol, rtol=tol)
    back = model.to_torch()
    torch.testing.assert_close(back(inputs)[0], expected, atol=tol, rtol=tol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_lstm_map_matches_torch_lstm(dtype, generator):
    torch.manual_seed(1)
    reference = nn.LSTM(3, 4, dtype=dtype)
    model = LSTMMap.from_torch(reference)
    inputs = torch.randn(9, 2, 3, dtype=dtype, generator=generator)
    expected, (h_n, c_n) = reference(inputs)
    states = model.run(inputs)
    tol = 1e-6 if dtype == torch.float32 else 1e-12
    torch.testing.assert_close(model.output(states), expected, atol=tol, rtol=tol)
    c_last, h_last = model.split_state(states[-1])
    torch.testing.assert_close(c_last, c_n[0], atol=tol, rtol=tol)
    torch.testing.assert_close(h_last, h_n[0], atol=tol, rtol=tol)
    torch.testing.assert_close(model.to_torch()(inputs)[0], expected, atol=tol, rtol=tol)


def test_lstm_step_follows_the_gate_equations(generator):
    model = random_lstm(2, 3, generator=generator)
    state = torch.randn(5, 6, dtype=torch.float64, generator=generator)
    x = torch.randn(5, 2, dtype=torch.float64, generator=generator)
    c, h = model.split_state(state)
    W = model.weight_hh.view(4, 3, 3)
    U = model.weight_ih.view(4, 3, 2)
    b = model.bias.view(4, 3)
    pre = [h @ W[g].T + x @ U[g].T + b[g] for g in range(4)]
    i, f, z, o = (
        torch.sigmoid(pre[0]),
        torch.sigmoid(pre[1]),
        torch.tanh(pre[2]),
        torch.sigmoid(pre[3]),
    )
    c_next = i * z + f * c
    expected = torch.cat([c_next, o * torch.tanh(c_next)], dim=-1)
    torch.testing.assert_close(model.step(state, x), expected)


def test_linear_rnn_is_an_affine_recurrence(generator):
    model = LinearRNN(2, 3, dtype=torch.float64)
    inputs = torch.randn(6, 1, 2, dtype=torch.float64, generator=generator)
    h = torch.zeros(3, dtype=torch.float64)
    for x in inputs[:, 0]:
        h = model.weight_hh @ h + model.weight_ih @ x
    torch.testing.assert_close(model.run(inputs)[-1, 0], h)


@pytest.mark.parametrize("activation", ["tanh", "relu", "identity", "sigmoid"])
@pytest.mark.parametrize("lam", [0.3, 0.95, 1.5])
def test_random_vanilla_rnn_has_the_requested_contraction(activation, lam, generator):
    model = random_vanilla_rnn(4, 6, lam, activation=activation, generator=generator)
    assert contraction_constant(model) == pytest.approx(lam, rel=1e-10)


def test_run_rejects_wrong_shapes_and_dtypes():
    model = VanillaRNN(3, 4)
    with pytest.raises(ValueError, match=r"\(T, B, 3\)"):
        model.run(torch.randn(5, 3))
    with pytest.raises(ValueError, match=r"\(T, B, 3\)"):
        model.run(torch.randn(5, 2, 4))
    with pytest.raises(TypeError, match="dtype"):
        model.run(torch.randn(5, 2, 3, dtype=torch.float64))
    with pytest.raises(TypeError, match="torch.Tensor"):
        model.run([[1.0, 2.0, 3.0]])
    with pytest.raises(ValueError, match="initial_state"):
        model.run(torch.randn(5, 2, 3), initial_state=torch.zeros(2, 5))


def test_unknown_activation_is_rejected():
    with pytest.raises(ValueError, match="unknown activation 'softsign'"):
        VanillaRNN(2, 2, activation="softsign")
    with pytest.raises(ValueError, match="tanh and relu"):
        VanillaRNN(2, 2, activation="identity").to_torch()
