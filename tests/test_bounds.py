"""The constants of Lemmas 1-3 (stablernn_lib.core.bounds): formulas, bad input, and the
bounds asserted against measurements on many random float64 instances."""

from __future__ import annotations

import math

import pytest
import torch

from stablernn_lib.core import bounds
from stablernn_lib.core.norms import activation_lipschitz, spectral_norm
from stablernn_lib.theory.lemmas import (
    flat_parameters,
    gradient_gaps,
    parameter_gradient,
    project_parameters_,
    random_regression_instance,
    random_rnn_with_inputs,
    truncation_gaps,
)

torch.set_num_threads(1)  # tiny tensors: threads only add overhead

SEEDS = range(12)


# ----------------------------------------------------------------------------- Lemma 1


def test_state_norm_bound_is_the_geometric_series_limit():
    assert bounds.state_norm_bound(0.5, 2.0, 3.0) == pytest.approx(12.0)
    assert bounds.lemma1_truncation_bound(0.5, 2.0, 3.0, 3) == pytest.approx(1.5)


@pytest.mark.parametrize("lam", [0.1, 0.5, 0.9, 0.99])
@pytest.mark.parametrize("eps", [1e-1, 1e-4, 1e-9])
def test_lemma1_context_is_the_smallest_sufficient_k(lam, eps):
    k = bounds.lemma1_context(lam, 1.3, 2.0, eps)
    assert bounds.lemma1_truncation_bound(lam, 1.3, 2.0, k) <= eps
    if k > 0:
        assert bounds.lemma1_truncation_bound(lam, 1.3, 2.0, k - 1) > eps
    closed_form = math.log(1.3 * 2.0 / ((1 - lam) * eps)) / math.log(1 / lam)
    assert k == max(0, math.ceil(closed_form - 1e-12))


LEMMA1_BAD_INPUT = [
    (lambda: bounds.state_norm_bound(1.0, 1.0, 1.0), "lambda < 1"),
    (lambda: bounds.state_norm_bound(1.5, 1.0, 1.0), "lambda < 1"),
    (lambda: bounds.state_norm_bound(0.5, -1.0, 1.0), "lx"),
    (lambda: bounds.lemma1_context(0.5, 1.0, 1.0, 0.0), "eps"),
    (lambda: bounds.lemma1_context(0.5, 1.0, 1.0, -1e-3), "eps"),
    (lambda: bounds.lemma1_truncation_bound(0.5, 1.0, 1.0, -1), "k"),
]


@pytest.mark.parametrize("activation", ["tanh", "identity"])
@pytest.mark.parametrize("family", ["gaussian", "aligned"])
@pytest.mark.parametrize("lam", [0.3, 0.8, 0.97])
def test_lemma1_holds_on_random_instances(activation, family, lam):
    for seed in SEEDS:
        generator = torch.Generator().manual_seed(seed)
        model, inputs = random_rnn_with_inputs(
            lam, family=family, activation=activation, seq_len=50, batch=3, generator=generator
        )
        lx = activation_lipschitz(activation) * spectral_norm(model.weight_ih)
        with torch.no_grad():
            states = model.run(inputs)
        radius = bounds.state_norm_bound(lam, lx, 1.0)
        assert float(states.norm(dim=-1).max()) <= radius * (1 + 1e-12)
        ks = [1, 3, 10, 30]
        gaps = truncation_gaps(model, inputs, ks)
        for k, gap in zip(ks, gaps, strict=True):
            assert gap <= bounds.lemma1_truncation_bound(lam, lx, 1.0, k) + 1e-12 * radius


def test_lemma1_bound_is_attained_by_the_aligned_linear_rnn():
    """A bound that is 10% too small must fail: the aligned linear RNN nearly attains it."""
    model, inputs = random_rnn_with_inputs(
        0.9, family="aligned", activation="identity", seq_len=400, generator=torch.Generator()
    )
    lx = spectral_norm(model.weight_ih)
    gap = truncation_gaps(model, inputs, [5])[0]
    assert gap > 0.9 * bounds.lemma1_truncation_bound(0.9, lx, 1.0, 5)


# ----------------------------------------------------------------------------- Lemmas 2, 3


def test_activation_smoothness_values():
    # tanh'' = -2 tanh (1 - tanh^2) peaks at tanh = 1/sqrt(3)
    z = torch.linspace(-4, 4, 200001, dtype=torch.float64)
    t = torch.tanh(z)
    assert float((2 * t * (1 - t**2)).abs().max()) == pytest.approx(
        bounds.activation_smoothness("tanh"), rel=1e-8
    )
    assert bounds.activation_smoothness("identity") == 0.0
    with pytest.raises(ValueError, match="smooth"):
        bounds.activation_smoothness("relu")
    with pytest.raises(ValueError, match="rho\\(0\\) = 0"):
        bounds.activation_smoothness("sigmoid")


def test_gamma_and_beta_formulas():
    lam, lx, bx, lp, sp_ = 0.5, 2.0, 1.0, 3.0, 0.5
    bh = 4.0
    bz = math.hypot(bh, bx)
    l2 = 0.25
    gamma = bz * (l2 * lp * bh / 0.5 + sp_ * bh + lp / 0.5) + lp * bh / 0.5
    beta = (l2 * lp + sp_) * bz**2 / 0.25 + 0.5 * l2 * lp * bz**2 / 0.125 + 2 * lp * bz / 0.25
    constants = bounds.GradientConstants(lam, lx, bx, lp, sp_, l_rho=1.0, l2_rho=l2)
    assert bounds.lemma2_gamma(constants) == pytest.approx(gamma)
    assert bounds.lemma3_beta(constants) == pytest.approx(beta)
    assert bounds.lemma2_gradient_bound(gamma, 4, lam) == pytest.approx(gamma * 4 * lam**4)


def test_constants_grow_as_lambda_approaches_one():
    lams = [0.5, 0.9, 0.99, 0.999]
    constants = [bounds.GradientConstants(lam, 1.0, 1.0, 1.0, 1.0) for lam in lams]
    gammas = [bounds.lemma2_gamma(c) for c in constants]
    betas = [bounds.lemma3_beta(c) for c in constants]
    assert gammas == sorted(gammas) and betas == sorted(betas)


LEMMA2_LEMMA3_BAD_INPUT = [
    (lambda: bounds.lemma2_gamma(bounds.GradientConstants(1.0, 1, 1, 1, 1)), "0 < lambda < 1"),
    (lambda: bounds.lemma2_gamma(bounds.GradientConstants(0.0, 1, 1, 1, 1)), "0 < lambda < 1"),
    (lambda: bounds.lemma3_beta(bounds.GradientConstants(1.2, 1, 1, 1, 1)), "lambda < 1"),
    (lambda: bounds.GradientConstants(0.5, 1, 1, -1, 1), "lp"),
    (lambda: bounds.GradientConstants(0.5, 1, -2, 1, 1), "bx"),
    (lambda: bounds.GradientConstants(0.5, 1, 1, 1, 1, l_rho=0.0), "l_rho"),
    (lambda: bounds.GradientConstants(0.5, 1, 1, 1, 1, l2_rho=-1.0), "l2_rho"),
    (lambda: bounds.lemma2_gradient_bound(1.0, 0, 0.5), "k"),
    (lambda: bounds.lemma2_gradient_bound(1.0, 2.5, 0.5), "k"),
    (lambda: bounds.lemma2_gradient_bound(1.0, True, 0.5), "k"),
    (lambda: bounds.lemma2_gradient_bound(-1.0, 2, 0.5), "gamma"),
    (lambda: bounds.lemma2_gradient_bound(1.0, 2, 1.0), "0 < lambda < 1"),
    (lambda: bounds.squared_loss_constants(-1.0, 1.0), "state_bound"),
]


@pytest.mark.parametrize(("call", "message"), LEMMA1_BAD_INPUT + LEMMA2_LEMMA3_BAD_INPUT)
def test_bad_input_raises_a_value_error_naming_the_problem(call, message):
    with pytest.raises(ValueError, match=message):
        call()


@pytest.mark.parametrize("activation", ["tanh", "identity"])
@pytest.mark.parametrize("family", ["gaussian", "aligned"])
@pytest.mark.parametrize("lam", [0.2, 0.7, 0.95])
def test_lemma2_holds_on_random_instances(activation, family, lam):
    ks = [1, 2, 5, 12, 30]
    for seed in SEEDS:
        generator = torch.Generator().manual_seed(seed)
        instance = random_regression_instance(
            lam, family=family, activation=activation, seq_len=40, generator=generator
        )
        constants = instance.constants()
        gamma = bounds.lemma2_gamma(constants)
        gaps = gradient_gaps(instance, ks)
        for k, gap in zip(ks, gaps, strict=True):
            bound = bounds.lemma2_gradient_bound(gamma, k, constants.lam)
            assert gap <= bound + 1e-12 * gamma, (seed, k, gap, bound)


def test_lemma2_is_within_a_small_factor_on_the_aligned_linear_rnn():
    """The aligned linear RNN comes within a factor 3 of gamma k lambda^k: gamma is not slack."""
    instance = random_regression_instance(
        0.6, family="aligned", activation="identity", seq_len=60, generator=torch.Generator()
    )
    constants = instance.constants()
    gamma = bounds.lemma2_gamma(constants)
    gap = gradient_gaps(instance, [3])[0]
    assert gap > bounds.lemma2_gradient_bound(gamma, 3, constants.lam) / 3


def test_lemma2_needs_its_one_over_lambda_term():
    """At k = 1 and small lambda, gamma without ``L_rho L_p B_h / lambda`` is too small."""
    instance = random_regression_instance(0.01, seq_len=20, generator=torch.Generator())
    constants = instance.constants()
    gamma = bounds.lemma2_gamma(constants)
    state_bound = bounds.state_norm_bound(constants.lam, constants.lx, constants.bx)
    term = constants.l_rho * constants.lp * state_bound / constants.lam
    gap = gradient_gaps(instance, [1])[0]
    assert gap <= bounds.lemma2_gradient_bound(gamma, 1, constants.lam)
    assert gap > bounds.lemma2_gradient_bound(gamma - term, 1, constants.lam)


def _random_point_in_omega(instance, generator):
    """An independent random ``w'`` in the same set ``Omega`` as the instance's ``w``."""
    other = random_regression_instance(
        instance.lam * 1.5,  # then projected back into Omega
        input_size=instance.model.input_size,
        hidden_size=instance.model.hidden_size,
        activation=instance.model.activation,
        generator=generator,
    ).model
    with torch.no_grad():
        other.weight_ih.mul_(3.0)
    return project_parameters_(other, instance.lam, instance.lx)


@pytest.mark.parametrize("activation", ["tanh", "identity"])
@pytest.mark.parametrize("family", ["gaussian", "aligned"])
@pytest.mark.parametrize("lam", [0.3, 0.8, 0.95])
def test_lemma3_holds_on_random_pairs(activation, family, lam):
    for seed in SEEDS:
        generator = torch.Generator().manual_seed(seed)
        instance = random_regression_instance(
            lam, family=family, activation=activation, seq_len=40, generator=generator
        )
        beta = bounds.lemma3_beta(instance.constants())
        other = _random_point_in_omega(instance, generator)
        l_rho = activation_lipschitz(activation)
        assert l_rho * spectral_norm(other.weight_hh) <= instance.lam * (1 + 1e-12)
        assert l_rho * spectral_norm(other.weight_ih) <= instance.lx * (1 + 1e-12)
        distance = float((flat_parameters(instance.model) - flat_parameters(other)).norm())
        gap = parameter_gradient(instance.model, instance.inputs, instance.target) - (
            parameter_gradient(other, instance.inputs, instance.target)
        )
        assert float(gap.norm()) <= beta * distance
