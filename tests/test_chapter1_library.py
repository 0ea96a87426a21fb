"""The library code behind Chapter 1: the symbolic LSTM Jacobian and the truncation figure."""

import math

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import pytest
import sympy as sp
import torch
from matplotlib.figure import Figure

from stablernn_lib.core.models import LSTMMap, random_lstm
from stablernn_lib.core.style import apply_style
from stablernn_lib.figures import full_vs_truncated
from stablernn_lib.symbolic import lstm_jacobian


def test_symbolic_jacobian_has_the_known_blocks():
    lstm = lstm_jacobian.scalar_lstm()
    jacobian = lstm_jacobian.in_gate_terms(lstm, lstm_jacobian.state_jacobian(lstm))
    i, f, z, o, T = sp.symbols("i f z o T")
    assert sp.simplify(jacobian[0, 0] - f) == 0
    assert sp.simplify(jacobian[1, 0] - f * o * (1 - T**2)) == 0
    w = lstm.recurrent
    expected_ch = lstm.c * f * (1 - f) * w["f"] + z * i * (1 - i) * w["i"] + i * (1 - z**2) * w["z"]
    assert sp.simplify(jacobian[0, 1] - expected_ch) == 0
    direct = jacobian[1, 1] - o * (1 - T**2) * jacobian[0, 1]
    assert sp.simplify(direct - T * o * (1 - o) * w["o"]) == 0
    equations = lstm_jacobian.jacobian_equations(jacobian)
    assert len(equations) == 4 and all(isinstance(eq, sp.Eq) for eq in equations)


@pytest.mark.parametrize("bias", [True, False])
def test_symbolic_jacobian_matches_autograd(generator, bias):
    model = random_lstm(1, 1, scale=2.0, generator=generator)
    if not bias:
        model = LSTMMap(1, 1, bias=False, dtype=torch.float64)
        with torch.no_grad():
            for param in model.parameters():
                param.copy_(torch.randn(param.shape, generator=generator, dtype=torch.float64))
    states = torch.randn(20, 2, generator=generator, dtype=torch.float64)
    inputs = torch.randn(20, 1, generator=generator, dtype=torch.float64)
    assert lstm_jacobian.max_jacobian_gap(model, states, inputs) < 1e-12


def test_symbolic_check_rejects_wide_lstms():
    with pytest.raises(ValueError, match="LSTMMap\\(1, 1\\)"):
        lstm_jacobian.max_jacobian_gap(
            LSTMMap(2, 3, dtype=torch.float64), torch.zeros(1, 6), torch.zeros(1, 2)
        )


def test_truncation_example_agrees_early_and_obeys_the_contraction_estimate():
    example = full_vs_truncated.truncation_example(0.8, 5, hidden_size=8, steps=40)
    assert example.full.shape == example.truncated.shape == (40, 8)
    assert np.all(example.gap[:5] < 1e-12)  # t <= k: the same model
    assert np.all(np.isnan(example.bound[:5]))
    late = slice(5, None)
    assert np.all(example.gap[late] <= example.bound[late] * (1 + 1e-9))
    assert np.isnan(
        full_vs_truncated.truncation_example(1.5, 5, hidden_size=8, steps=40).bound
    ).all()


def test_gap_shrinks_with_context_for_a_contraction():
    gaps = [
        full_vs_truncated.truncation_example(0.5, k, steps=60).gap[20:].max() for k in (1, 4, 16)
    ]
    assert gaps[0] > gaps[1] > gaps[2]
    assert gaps[2] < 0.5**16 * 10 and math.isfinite(gaps[0])


def test_full_vs_truncated_figure_returns_a_two_panel_figure():
    apply_style()
    figure = full_vs_truncated.full_vs_truncated_figure(0.9, 4, steps=30)
    assert isinstance(figure, Figure) and len(figure.axes) == 2
    assert "k = 4" in figure.axes[1].get_title()
    plt.close(figure)
