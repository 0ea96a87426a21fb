"""Tests of the Chapter 4 figures and tables, and of the claims the chapter makes."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from matplotlib.figure import Figure

from stablernn_lib.core.contraction import project_spectral_ball
from stablernn_lib.core.norms import spectral_norm
from stablernn_lib.figures import contraction as figs
from stablernn_lib.figures.widgets import interactive_plot
from stablernn_lib.theory import contraction_experiments as experiments
from stablernn_lib.theory import lstm_certificate as ls


def _gaps(lam: float, activation: str, matrix: str) -> np.ndarray:
    first, second = figs._trajectory_pair(lam, activation, matrix, 60, 32, 0)
    return np.linalg.norm(first - second, axis=1)


@pytest.mark.parametrize("matrix", figs.MATRIX_KINDS)
@pytest.mark.parametrize("activation", ["tanh", "identity"])
@pytest.mark.parametrize("lam", [0.5, 0.9])
def test_contractive_trajectories_obey_the_geometric_bound(lam, activation, matrix):
    gaps = _gaps(lam, activation, matrix)
    bound = gaps[0] * lam ** np.arange(len(gaps))
    assert (gaps <= bound * (1 + 1e-9) + 1e-12).all()  # 1e-12: floating-point floor


@pytest.mark.parametrize("lam", [0.5, 1.1, 2.0])
def test_linear_scaled_orthogonal_model_scales_distances_by_exactly_lambda(lam):
    gaps = _gaps(lam, "identity", "scaled orthogonal")
    np.testing.assert_allclose(gaps, gaps[0] * lam ** np.arange(len(gaps)), rtol=1e-8, atol=1e-12)


def test_tanh_widget_claims():
    """Gaussian W merges beyond lambda = 1; scaled orthogonal W stops forgetting at 1.5."""
    assert _gaps(1.5, "tanh", "gaussian")[-1] < 1e-3 * _gaps(1.5, "tanh", "gaussian")[0]
    orthogonal = _gaps(1.5, "tanh", "scaled orthogonal")
    assert orthogonal[-1] > 0.1 * orthogonal[0]


def test_trajectories_reject_unknown_matrix_kind():
    with pytest.raises(ValueError, match="matrix must be one of"):
        figs.trajectories_figure(0.9, matrix="diagonal")


@pytest.mark.parametrize("family", sorted(figs.FAMILIES))
def test_projection_stays_in_the_family(family):
    for a, b in [(1.6, 1.8), (-1.6, 0.4), (0.3, -0.2), (0.0, 1.2)]:
        projected = project_spectral_ball(figs.family_matrix(family, a, b), 1.0)
        pa, pb = figs.projected_point(family, a, b)
        torch.testing.assert_close(figs.family_matrix(family, pa, pb), projected)
        if spectral_norm(figs.family_matrix(family, a, b)) <= 1:
            assert (pa, pb) == pytest.approx((a, b))
        else:
            assert spectral_norm(projected) == pytest.approx(1.0)


def test_family_rejects_unknown_name():
    with pytest.raises(ValueError, match="family must be one of"):
        figs.family_matrix("upper triangular", 1.0, 0.0)


def test_iterated_map_claims(generator):
    """Concentrated authors' model: zero biases contract after a few steps, open gates never."""

    def largest(model, steps):
        states, _ = ls.sample_box_states(model, 1.0, 90, generator)
        inputs = (
            2
            * torch.rand(
                steps, len(states), model.input_size, generator=generator, dtype=states.dtype
            )
            - 1
        )
        return float(ls.iterated_jacobian_norms(model, states, inputs).max())

    closed = ls.concentrated_authors_lstm(4, 16, 0.0)
    assert largest(closed, 1) > 1.0 > largest(closed, 10)
    opened = ls.concentrated_authors_lstm(4, 16, 5.0)
    assert largest(opened, 40) > largest(opened, 10) > 1.0


def test_figures_are_figures_and_feed_the_widget():
    runs = [experiments.gradient_descent_rnn(project=flag, steps=5) for flag in (False, True)]
    assert isinstance(figs.projected_descent_figure(runs), Figure)
    curves = {"stable": (np.array([1, 2, 4]), np.array([0.9, 0.8, 0.6]))}
    assert isinstance(figs.iterated_norms_figure(curves), Figure)
    widget = interactive_plot(figs.projection_figure, {"a": [0.5, 1.5], "b": [0.0, 1.0]})
    assert widget.num_frames == 4
    widget = interactive_plot(figs.trajectories_figure, {"lam": [0.9, 1.5]})
    assert widget.num_frames == 2


def test_contraction_table_takes_the_larger_measurement_and_reads_it_against_one():
    row = {
        "model": "m",
        "certificate": 0.97,
        "jacobian_certificate_norm": 0.4,
        "pairs_certificate_norm": 1.2,
        "jacobian_euclidean": 0.99,
        "pairs_euclidean": 0.5,
    }
    infinite = {**row, "model": "n", "certificate": math.inf}
    lines = figs.contraction_table([row, infinite]).splitlines()
    assert lines[0].count("|") == 5 and len(lines) == 4
    assert lines[2] == "| m | 0.97 (< 1) | 1.2 (≥ 1) | 0.99 (< 1) |"
    assert lines[3].startswith("| n | inf (≥ 1) |")


def test_gate_norm_table_gives_column_and_row_sums_of_each_block():
    model = ls.authors_rescaled_lstm(3, 5, bias_std=0.1, generator=torch.Generator().manual_seed(1))
    lines = figs.gate_norm_table(model).splitlines()
    assert len(lines) == 2 + 5 and "Forget" not in "".join(lines)
    blocks = model.weight_hh.detach().abs().reshape(4, 5, 5)  # (gate, row, column)
    for gate, (name, block) in enumerate(zip("ifzo", blocks, strict=True)):
        columns, rows = block.sum(0).max().item(), block.sum(1).max().item()
        assert lines[2 + gate] == f"| $W_{name}$ | {columns:.4f} | {rows:.4f} |"
    assert math.isclose(float(lines[2].split("|")[2]), 0.395, abs_tol=1e-4)  # the authors' c_i
    u_f = model.weight_ih.detach().abs()[5:10]
    assert lines[6] == f"| $U_f$ | {u_f.sum(0).max().item():.4f} | {u_f.sum(1).max().item():.4f} |"
