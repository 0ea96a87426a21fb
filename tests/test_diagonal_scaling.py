"""The diagonal-scaling certificate and eventual stability (Chapter 4, beyond the paper)."""

from __future__ import annotations

import math

import pytest
import sympy as sp
import torch

from stablernn_lib.core.models import random_vanilla_rnn
from stablernn_lib.theory import eventual_stability as ev
from stablernn_lib.theory.diagonal_scaling import (
    _log_norm,
    certificate_table,
    diagonal_certificate,
    scaled_matrix,
    scaled_pair_ratios,
)
from stablernn_lib.theory.lemmas import truncation_gaps
from stablernn_lib.theory.lstm_certificate import concentrated_authors_lstm

EPS = torch.finfo(torch.float64).eps


def generator(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def badly_scaled(hidden: int, radius: float, seed: int) -> torch.Tensor:
    """``diag(a) G diag(1/a)``: spectral radius ``radius``, a huge ``||W||_2``."""
    g = generator(seed)
    G = torch.randn(hidden, hidden, generator=g, dtype=torch.float64)
    G *= radius / torch.linalg.eigvals(G).abs().max()
    a = torch.exp(1.5 * torch.randn(hidden, generator=g, dtype=torch.float64))
    return a[:, None] * G / a[None, :]


def test_triangular_matrix_is_certified_although_its_norm_is_large():
    W = torch.tensor([[0.5, 3.0], [0.0, 0.5]], dtype=torch.float64)
    certificate = diagonal_certificate(W)
    assert certificate.spectral_lam > 3
    assert certificate.certifies and certificate.lam < 0.51
    assert certificate.lam >= certificate.spectral_radius * (1 - 1e-12)


@pytest.mark.parametrize("seed", range(4))
def test_certificate_beats_the_spectral_norm_and_is_recomputed_from_d(seed):
    W = badly_scaled(8, 0.8, seed)
    certificate = diagonal_certificate(W)
    recomputed = float(torch.linalg.matrix_norm(scaled_matrix(W, certificate.scales), ord=2))
    assert math.isclose(certificate.lam, recomputed, rel_tol=1e-12)
    assert certificate.lam < 0.5 * certificate.spectral_lam
    assert certificate.spectral_radius * (1 - 1e-12) <= certificate.lam <= certificate.spectral_lam


@pytest.mark.parametrize(("seed", "radius"), [(0, 0.95), (1, 1.05), (2, 0.95), (3, 1.05)])
def test_finds_the_optimal_scaling_of_a_symmetrizable_matrix(seed, radius):
    """``W = diag(a) S diag(1/a)`` with ``S`` symmetric: the best diagonal scaling undoes
    ``a`` and gives ``||S||_2 = rho(W)``, the smallest any norm can give.  The optimizer
    must find it (``||W||_2`` is up to ~100 times larger), and certify exactly when
    ``rho(W) < 1``."""
    g = generator(seed)
    G = torch.randn(6, 6, generator=g, dtype=torch.float64)
    S = (G + G.T) / 2
    S *= radius / torch.linalg.eigvalsh(S).abs().max()
    a = torch.exp(1.5 * torch.randn(6, generator=g, dtype=torch.float64))
    certificate = diagonal_certificate(a[:, None] * S / a[None, :])
    assert certificate.lam == pytest.approx(radius, rel=1e-6)
    assert certificate.spectral_lam > 2 * radius
    assert certificate.certifies == (radius < 1)


def test_gradient_of_log_norm_is_u_squared_minus_v_squared():
    W = badly_scaled(5, 0.9, 7)
    t = 0.3 * torch.randn(5, generator=generator(1), dtype=torch.float64)
    _, grad = _log_norm(W, t)
    step = 1e-6
    for i in range(5):
        e = torch.zeros(5, dtype=torch.float64)
        e[i] = step
        numeric = (_log_norm(W, t + e)[0] - _log_norm(W, t - e)[0]) / (2 * step)
        assert numeric == pytest.approx(float(grad[i]), abs=1e-6)


def test_tanh_rnn_contracts_in_the_scaled_norm():
    model = random_vanilla_rnn(3, 8, 0.5, generator=generator(2))
    with torch.no_grad():
        model.weight_hh.copy_(badly_scaled(8, 0.7, 2))
    certificate = diagonal_certificate(model.weight_hh)
    assert certificate.certifies and certificate.spectral_lam > 1
    g = generator(3)
    states = 3 * torch.randn(2000, 8, generator=g, dtype=torch.float64) / certificate.scales
    others = states + torch.randn(2000, 8, generator=g, dtype=torch.float64) / certificate.scales
    inputs = torch.randn(2000, 3, generator=g, dtype=torch.float64)
    ratios = scaled_pair_ratios(model, certificate.scales, states, others, inputs)
    assert float(ratios.max()) <= certificate.lam * (1 + 1e3 * EPS)


def test_lemma1_under_eventual_stability_with_the_diagonal_certificate():
    """kappa = max d / min d turns the D-norm contraction into Euclidean forgetting."""
    model = random_vanilla_rnn(3, 6, 0.5, generator=generator(4))
    with torch.no_grad():
        model.weight_hh.copy_(badly_scaled(6, 0.6, 4))
    certificate = diagonal_certificate(model.weight_hh)
    assert certificate.certifies and certificate.spectral_lam > 1
    inputs = torch.randn(60, 4, 3, generator=generator(5), dtype=torch.float64)
    inputs /= inputs.norm(dim=-1, keepdim=True)
    ks = [1, 2, 4, 8]
    gaps = truncation_gaps(model, inputs, ks)
    lx = float(torch.linalg.matrix_norm(model.weight_ih.detach(), ord=2))
    for gap, k in zip(gaps, ks, strict=True):
        bound = ev.eventual_truncation_bound(certificate.condition, certificate.lam, lx, 1.0, k)
        assert gap <= bound * (1 + 1e-9)


def test_telescoping_sum_identity_in_sympy():
    total, closed = ev.telescoping_sum_identity()
    assert sp.simplify(total - closed) == 0


def test_authors_constraint_counterexample_has_an_unstable_fixed_point_and_two_attractors():
    model = concentrated_authors_lstm(4, 8, open_gates_bias=5.0)
    zero = torch.zeros(16, dtype=torch.float64)
    for value in (0.0, 1.0, -1.0):
        residual, radius = ev.fixed_point_spectral_radius(model, zero, torch.full((4,), value))
        assert residual == 0.0 and radius > 1.05
    starts = 5 * torch.randn(60, 16, generator=generator(6), dtype=torch.float64)
    limits = ev.distinct_limits(ev.settled_states(model, torch.zeros(4), starts), 1e-4)
    assert len(limits) == 2
    assert sorted(round(float(c), 1) for c in limits[:, 0]) == [-12.4, 17.0]
    for limit in limits:  # both are fixed points, at distance > 0: no norm contracts them
        residual, radius = ev.fixed_point_spectral_radius(model, limit, torch.zeros(4))
        assert residual < 1e-5 and radius < 1  # slow approach: the forget gate is near 1


def test_certificate_table_says_who_is_certified():
    table = certificate_table(
        [
            {
                "model": "m",
                "layer": 0,
                "spectral_lam": 1.2,
                "diagonal_lam": 0.9,
                "spectral_radius": 0.8,
                "condition": 3.0,
            }
        ]
    )
    assert "| m | 0 | 1.200 | 0.900 | 0.800 | 3.0 | no | yes |" in table
    # Colab shows this output too and knows none of the book's macros (_config.yml)
    from stablernn_tools import colab_conversion as colab

    macros = colab.book_macros(colab.read_config())
    assert colab.expand_macros(table, macros) == table and "\\lVert W \\rVert_2" in table


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_log_norm_is_midpoint_convex_and_the_block_step_of_the_proof_holds(seed):
    """Part 4 of thm-ch04-diagonal: t -> log ||e^T W e^-T||_2 is convex. Checked at midpoints of
    random pairs, on a badly scaled and on a plain Gaussian W; and the step of the proof: the
    2n x 2n block matrix e^X N e^-X, N = [[0, W], [0, 0]], X = diag(T + cI, T), has largest
    singular value e^c ||e^T W e^-T||_2."""
    g = generator(100 + seed)
    for W in (badly_scaled(6, 0.9, seed), torch.randn(6, 6, generator=g, dtype=torch.float64)):
        for _ in range(50):
            t1, t2 = (2 * torch.randn(6, generator=g, dtype=torch.float64) for _ in range(2))
            middle = _log_norm(W, (t1 + t2) / 2)[0]
            assert middle <= (_log_norm(W, t1)[0] + _log_norm(W, t2)[0]) / 2 + 1e-9
        t, c = torch.randn(6, generator=g, dtype=torch.float64), 0.7
        N = torch.zeros(12, 12, dtype=torch.float64)
        N[:6, 6:] = W
        X = torch.cat([t + c, t])
        block = torch.exp(X)[:, None] * N * torch.exp(-X)[None, :]
        sigma = torch.linalg.matrix_norm(scaled_matrix(W, torch.exp(t)), ord=2)
        assert float(torch.linalg.matrix_norm(block, ord=2)) == pytest.approx(
            math.exp(c) * float(sigma), rel=1e-12
        )
