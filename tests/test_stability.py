"""Lipschitz constants, spectral norms and the projection onto the stable set."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from stablernn_lib.core.contraction import (
    contraction_constant,
    empirical_lipschitz,
    jacobian_norms,
    project_spectral_ball,
    project_to_stable_,
    state_jacobians,
    svd_reproduces,
)
from stablernn_lib.core.models import random_lstm, random_vanilla_rnn
from stablernn_lib.core.norms import activation_lipschitz, spectral_norm


@pytest.mark.parametrize(
    ("name", "fn"), [("tanh", torch.tanh), ("sigmoid", torch.sigmoid), ("relu", torch.relu)]
)
def test_activation_lipschitz_is_the_sup_of_the_derivative(name, fn):
    z = torch.linspace(-8, 8, 200001, dtype=torch.float64, requires_grad=True)
    (derivative,) = torch.autograd.grad(fn(z).sum(), z)
    assert derivative.abs().max().item() == pytest.approx(activation_lipschitz(name), abs=1e-6)


def test_unknown_activation_has_no_lipschitz_constant():
    with pytest.raises(ValueError, match="no known Lipschitz constant for activation 'gelu'"):
        activation_lipschitz("gelu")


def test_spectral_norm_is_the_largest_singular_value(generator):
    W = torch.randn(5, 3, dtype=torch.float64, generator=generator)
    assert spectral_norm(W) == pytest.approx(float(torch.linalg.svdvals(W)[0]))
    with pytest.raises(ValueError, match="one matrix"):
        spectral_norm(torch.randn(2, 3, 3))
    with pytest.raises(ValueError, match="matrix"):
        spectral_norm(torch.randn(3))
    with pytest.raises(TypeError, match="floating"):
        spectral_norm(torch.ones(2, 2, dtype=torch.int64))


@pytest.mark.parametrize("radius", [0.5, 1.0, 2.0])
@pytest.mark.parametrize("seed", range(5))
def test_projection_lands_in_the_set_and_is_idempotent(radius, seed):
    g = torch.Generator().manual_seed(seed)
    W = torch.randn(6, 6, dtype=torch.float64, generator=g) * 2
    P = project_spectral_ball(W, radius)
    assert spectral_norm(P) <= radius + 1e-12
    torch.testing.assert_close(project_spectral_ball(P, radius), P)


def test_projection_leaves_points_inside_unchanged(generator):
    W = torch.randn(4, 4, dtype=torch.float64, generator=generator)
    W *= 0.7 / spectral_norm(W)
    torch.testing.assert_close(project_spectral_ball(W, 1.0), W)


@pytest.mark.parametrize("seed", range(5))
def test_projection_is_the_nearest_point_of_the_set(seed):
    g = torch.Generator().manual_seed(seed)
    W = torch.randn(5, 5, dtype=torch.float64, generator=g) * 1.5
    P = project_spectral_ball(W, 1.0)
    distance = torch.linalg.norm(W - P)
    candidates = torch.randn(4000, 5, 5, dtype=torch.float64, generator=g)
    candidates = project_spectral_ball(candidates, 1.0)  # random points of the set
    # also points near P, where a wrong projection would be beaten first
    near = project_spectral_ball(P + 0.05 * torch.randn(4000, 5, 5, dtype=torch.float64), 1.0)
    others = torch.cat([candidates, near])
    assert torch.linalg.matrix_norm(others, ord=2).max() <= 1 + 1e-9
    assert (torch.linalg.norm(W - others, dim=(-2, -1)) >= distance - 1e-12).all()


def _matrix_with_repeated_singular_values(rows, cols, repeated, generator):
    """``U diag(s) V^T`` with ``repeated`` singular values equal to 1, as clipping leaves."""
    k = min(rows, cols)
    U, _ = torch.linalg.qr(torch.randn(rows, k, dtype=torch.float64, generator=generator))
    V, _ = torch.linalg.qr(torch.randn(cols, k, dtype=torch.float64, generator=generator))
    s = torch.rand(k, dtype=torch.float64, generator=generator) * 3
    s[:repeated] = 1.0
    return (U * s) @ V.T


def _failing_svd(*args, **kwargs):
    raise torch.linalg.LinAlgError("linalg.svd: The algorithm failed to converge")


@pytest.mark.parametrize(("rows", "cols"), [(12, 12), (12, 7), (7, 12)])
def test_projection_falls_back_when_the_svd_does_not_converge(rows, cols, monkeypatch):
    """LAPACK's SVD can fail on many equal singular values; the eigh route gives the same."""
    g = torch.Generator().manual_seed(rows * cols)
    W = _matrix_with_repeated_singular_values(rows, cols, 5, g).float()
    expected = project_spectral_ball(W, 1.0)

    monkeypatch.setattr(torch.linalg, "svd", _failing_svd)
    P = project_spectral_ball(W, 1.0)
    assert P.dtype == W.dtype and P.shape == W.shape
    tolerance = 50 * torch.finfo(torch.float32).eps
    assert torch.linalg.matrix_norm(P.double(), ord=2) <= 1 + tolerance
    torch.testing.assert_close(P, expected, rtol=tolerance, atol=tolerance)


def test_projection_of_a_batch_falls_back_too(monkeypatch):
    g = torch.Generator().manual_seed(3)
    W = torch.stack([_matrix_with_repeated_singular_values(6, 4, 2, g) for _ in range(3)])
    expected = project_spectral_ball(W, 0.5)
    monkeypatch.setattr(torch.linalg, "svd", _failing_svd)
    torch.testing.assert_close(project_spectral_ball(W, 0.5), expected)


def test_projection_falls_back_when_the_svd_returns_nan_factors(monkeypatch):
    """A finite matrix must never project to NaN: the eigh route takes over."""
    g = torch.Generator().manual_seed(11)
    W = _matrix_with_repeated_singular_values(9, 9, 4, g).float()
    expected = project_spectral_ball(W, 1.0)
    svd = torch.linalg.svd
    monkeypatch.setattr(
        torch.linalg,
        "svd",
        lambda m, full_matrices=True: tuple(
            torch.full_like(f, float("nan")) if f.dim() == m.dim() else f
            for f in svd(m, full_matrices=full_matrices)
        ),
    )
    torch.testing.assert_close(project_spectral_ball(W, 1.0), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ["svd_nan_recurrent_matrix.pt", "svd_wrong_recurrent_matrix.pt"])
def test_projection_of_the_matrices_on_which_lapack_failed_silently(name):
    """Two recurrent matrices of the JSB stable RNN, seed 3 (float32, 256 x 256, about 30
    singular values within 1e-6 of 1): with one thread, LAPACK's SVD returned NaN factors
    for the first (epoch 53, step 190: the run stopped as diverged) and finite factors off
    by 0.1 per entry for the second (epoch 58, step 7: the projection damaged the model).
    Each projection is finite, in the ball, and equal to the float64 SVD projection."""
    W = torch.load(Path(__file__).parent / "data" / name)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        P = project_spectral_ball(W, 1.0)
    finally:
        torch.set_num_threads(threads)
    assert torch.isfinite(P).all()
    assert torch.linalg.matrix_norm(P.double(), ord=2) <= 1 + 1e-5
    U, s, Vh = torch.linalg.svd(W.double(), full_matrices=False)
    expected = (U * s.clamp(max=1.0).unsqueeze(-2)) @ Vh
    torch.testing.assert_close(P.double(), expected, rtol=1e-5, atol=1e-5)


def test_svd_check_flags_wrong_factors_and_passes_right_ones(generator):
    """The check of :func:`svd_reproduces`: a correct float32 SVD passes; factors with one
    entry of U off by 0.2 (a residual of a few percent of ||W||_F) or NaN fail."""
    W = torch.randn(64, 64, generator=generator)
    U, s, Vh = torch.linalg.svd(W, full_matrices=False)
    assert svd_reproduces(W, U, s, Vh)
    wrong = U.clone()
    wrong[3, 0] += 0.2
    assert not svd_reproduces(W, wrong, s, Vh)
    wrong[3, 0] = float("nan")
    assert not svd_reproduces(W, wrong, s, Vh)


def test_projection_names_a_diverged_matrix(generator):
    W = torch.randn(4, 4, generator=generator)
    W[1, 2] = float("nan")
    with pytest.raises(ValueError, match="NaN or infinite.*diverged"):
        project_spectral_ball(W, 1.0)


def test_projection_rejects_a_nonpositive_radius(generator):
    W = torch.randn(3, 3, generator=generator)
    for radius in (0.0, -1.0):
        with pytest.raises(ValueError, match="radius must be positive"):
            project_spectral_ball(W, radius)


@pytest.mark.parametrize("activation", ["tanh", "relu", "sigmoid", "identity"])
def test_projected_rnn_is_contractive_on_random_pairs(activation, generator):
    model = random_vanilla_rnn(3, 8, 3.0, activation=activation, bias=True, generator=generator)
    radius = 0.9 / activation_lipschitz(activation)
    project_to_stable_(model, radius)
    lam = contraction_constant(model)
    assert lam == pytest.approx(0.9)
    h = torch.randn(5000, 8, dtype=torch.float64, generator=generator) * 3
    h_prime = torch.randn(5000, 8, dtype=torch.float64, generator=generator) * 3
    x = torch.randn(5000, 3, dtype=torch.float64, generator=generator) * 3
    gap = (model.step(h, x) - model.step(h_prime, x)).norm(dim=-1)
    assert (gap <= lam * (h - h_prime).norm(dim=-1) + 1e-12).all()
    assert empirical_lipschitz(model, x[:100], num_pairs=2000, generator=generator) <= lam


def test_jacobians_match_the_vanilla_formula(generator):
    model = random_vanilla_rnn(2, 4, 0.8, bias=True, generator=generator)
    h = torch.randn(7, 4, dtype=torch.float64, generator=generator)
    x = torch.randn(7, 2, dtype=torch.float64, generator=generator)
    derivative = 1 - torch.tanh(model.preactivation(h, x)) ** 2
    expected = derivative.unsqueeze(-1) * model.weight_hh.detach()
    torch.testing.assert_close(state_jacobians(model, h, x), expected)
    assert (jacobian_norms(model, h, x) <= contraction_constant(model) + 1e-12).all()


def test_empirical_lipschitz_is_below_the_largest_jacobian_norm_bound_for_lstm(generator):
    model = random_lstm(2, 3, generator=generator)
    x = torch.randn(50, 2, dtype=torch.float64, generator=generator)
    estimate = empirical_lipschitz(model, x, num_pairs=500, scale=0.1, generator=generator)
    assert 0 < estimate < math.inf
    states = torch.randn(50, 6, dtype=torch.float64, generator=generator)
    assert jacobian_norms(model, states, x).shape == (50,)
    with pytest.raises(ValueError, match=r"states must have shape \(N, 6\)"):
        jacobian_norms(model, states[:, :3], x)


def test_contraction_constant_rejects_an_lstm(generator):
    with pytest.raises(TypeError, match="lstm_contraction_bound"):
        contraction_constant(random_lstm(2, 2, generator=generator))
