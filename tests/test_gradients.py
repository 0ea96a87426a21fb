"""Chapter 2: Jacobians of BPTT, the norm bound, the nilpotent example, clipping, one unit."""

from __future__ import annotations

import math

import matplotlib
import pytest
import torch

from stablernn_lib.core import gradients
from stablernn_lib.core.models import random_vanilla_rnn
from stablernn_lib.core.norms import activation_lipschitz, spectral_norm
from stablernn_lib.figures import gradients as figures_gradients
from stablernn_lib.symbolic import gradients as symbolic_gradients
from stablernn_lib.theory import one_unit

matplotlib.use("Agg")

ACTIVATIONS = ("tanh", "relu", "sigmoid", "identity")


@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_jacobian_formula_matches_autograd(activation, generator):
    model = random_vanilla_rnn(3, 5, 1.3, activation=activation, bias=True, generator=generator)
    inputs = torch.randn(9, 4, 3, generator=generator, dtype=torch.float64)
    formula = gradients.state_jacobians(model, inputs)
    automatic = gradients.state_jacobians_autograd(model, inputs)
    assert formula.shape == (9, 4, 5, 5)
    torch.testing.assert_close(formula, automatic, atol=1e-12, rtol=0)


@pytest.mark.parametrize("activation", ("tanh", "relu"))
def test_bptt_written_out_matches_autograd(activation, generator):
    model = random_vanilla_rnn(3, 5, 1.2, activation=activation, bias=True, generator=generator)
    inputs = torch.randn(12, 4, 3, generator=generator, dtype=torch.float64)
    targets = torch.randn(12, 4, 5, generator=generator, dtype=torch.float64)
    states = model.run(inputs)
    loss = ((states - targets) ** 2).sum()
    loss.backward()
    manual = gradients.bptt_gradients(model, inputs, 2 * (states - targets).detach())
    for name in ("weight_hh", "weight_ih", "bias"):
        torch.testing.assert_close(manual[name], getattr(model, name).grad)


def test_products_chain_the_jacobians(generator):
    model = random_vanilla_rnn(2, 4, 0.9, generator=generator)
    inputs = torch.randn(6, 3, 2, generator=generator, dtype=torch.float64)
    jacobians = gradients.state_jacobians(model, inputs)
    products = gradients.jacobian_products(jacobians)
    assert products.shape == (7, 3, 4, 4)
    torch.testing.assert_close(products[-1], torch.eye(4, dtype=torch.float64).expand(3, 4, 4))
    torch.testing.assert_close(products[4], jacobians[5] @ jacobians[4])
    # d h_T / d h_0 by autograd through the whole run
    start = torch.randn(4, generator=generator, dtype=torch.float64)

    def last_state(h0):
        return model.run(inputs[:, :1], initial_state=h0.unsqueeze(0))[-1, 0]

    full = torch.autograd.functional.jacobian(last_state, start)
    trajectory_products = gradients.jacobian_products(_jacobians_from(model, inputs[:, :1], start))
    torch.testing.assert_close(trajectory_products[0, 0], full)


def _jacobians_from(model, inputs, start):
    """Formula Jacobians along the trajectory that starts at ``start`` (not at 0)."""
    with torch.no_grad():
        states = model.run(inputs, initial_state=start.unsqueeze(0))
        previous = torch.cat([start.reshape(1, 1, -1), states[:-1]])
        slopes = gradients.activation_derivative(
            model.activation, model.preactivation(previous, inputs)
        )
    return slopes.unsqueeze(-1) * model.weight_hh


def test_norm_bound_holds_on_random_instances(generator):
    checked = 0
    for trial in range(40):
        activation = ACTIVATIONS[trial % 4]
        gamma = activation_lipschitz(activation)
        lam = [0.3, 0.9, 1.0, 1.7, 3.0][trial % 5]
        model = random_vanilla_rnn(2, 6, lam, activation=activation, generator=generator)
        inputs = 3 * torch.randn(25, 8, 2, generator=generator, dtype=torch.float64)
        norms = gradients.jacobian_product_norms(model, inputs)
        lags = torch.arange(25, -1, -1)
        bound = gradients.jacobian_product_bound(gamma, spectral_norm(model.weight_hh), lags)
        assert torch.all(norms <= bound.unsqueeze(1) * (1 + 1e-9) + 1e-300)
        checked += norms.numel()
    assert checked == 40 * 26 * 8


def test_bound_is_attained_by_scaled_orthogonal_linear_rnn(generator):
    weight = gradients.recurrent_matrix("orthogonal", 8, 1.1, generator=generator)
    singular_values = torch.linalg.svdvals(weight)
    torch.testing.assert_close(singular_values, torch.full((8,), 1.1, dtype=torch.float64))
    curve = gradients.lag_norm_curve("orthogonal", 1.1, "identity", hidden_size=8, steps=12)
    torch.testing.assert_close(curve, gradients.lag_bound(1.1, "identity", 12))


@pytest.mark.parametrize("kind", gradients.MATRIX_KINDS)
def test_recurrent_matrix_has_the_requested_norm(kind, generator):
    weight = gradients.recurrent_matrix(kind, 12, 2.5, generator=generator)
    assert spectral_norm(weight) == pytest.approx(2.5, rel=1e-10)
    with pytest.raises(ValueError, match="unknown matrix kind"):
        gradients.recurrent_matrix("diagonal", 12, 2.5)


def test_nilpotent_weight_has_zero_eigenvalues_but_products_grow():
    weight = gradients.nilpotent_weight()
    assert torch.count_nonzero(weight @ weight) == 0
    assert spectral_norm(weight) == pytest.approx(16.0)
    results = gradients.nilpotent_check(steps=60, batch=64)
    lags = torch.arange(61).double()
    for result in results.values():
        assert torch.all(result["norms"] <= 16.0**lags * (1 + 1e-9))
    zero = results["zero input"]["norms"]
    assert zero[1] == pytest.approx(16.0) and torch.all(zero[2:] == 0)
    assert results["gaussian input"]["rate"] < 1
    assert results["constant input"]["norms"][60] > 1e8
    assert 1.3 < results["constant input"]["rate"] < 2.0
    # each factor is 8 |rho'(a_1) - rho'(a_2)| <= 8: steering nearly attains it
    assert 7.5 < results["steered input"]["rate"] < 8.0 * 1.1


def test_constant_input_growth_matches_the_products():
    grid = torch.tensor([[1.8, -2.2], [0.0, 0.0], [3.0, 3.0]], dtype=torch.float64)
    exponents = gradients.constant_input_growth(grid)
    assert exponents[0] > 0.3  # chaotic orbit: products grow
    assert exponents[1] < -100 and exponents[2] < 0  # symmetric or saturated: they vanish
    rate = gradients.nilpotent_check(steps=200, batch=1)["constant input"]["rate"]
    assert math.log(rate) == pytest.approx(float(exponents[0]), abs=0.15)


def test_sympy_rank_one_sandwich_and_jacobian():
    sandwich, square = symbolic_gradients.nilpotent_sandwich()
    assert sandwich.is_zero_matrix and square.is_zero_matrix
    rnn = symbolic_gradients.symbolic_rnn(2, 1)
    assert symbolic_gradients.jacobian_minus_formula(rnn).is_zero_matrix
    model = random_vanilla_rnn(1, 2, 1.5, bias=True, generator=torch.Generator().manual_seed(1))
    state, x = (
        torch.tensor([0.3, -0.7], dtype=torch.float64),
        torch.tensor([0.9], dtype=torch.float64),
    )
    assert symbolic_gradients.numeric_jacobian_gap(rnn, model, state, x) < 1e-12


def test_clipping_bounds_the_norm_and_keeps_the_direction(generator):
    params = [torch.zeros(3, 4, requires_grad=True), torch.zeros(5, requires_grad=True)]
    for threshold in (0.1, 1.0, 10.0):
        for p in params:
            p.grad = 7 * torch.randn(p.shape, generator=generator)
        before = torch.cat([p.grad.flatten() for p in params]).clone()
        norm = gradients.clip_gradient_norm_(params, threshold)
        after = torch.cat([p.grad.flatten() for p in params])
        assert norm == pytest.approx(float(before.norm()), rel=1e-6)
        assert float(after.norm()) <= threshold * (1 + 1e-6)
        assert float(after.norm()) == pytest.approx(min(norm, threshold), rel=1e-6)
        cosine = torch.dot(before, after) / (before.norm() * after.norm())
        assert float(cosine) == pytest.approx(1.0, abs=1e-6)
    small = torch.zeros(2, requires_grad=True)
    small.grad = torch.tensor([0.3, 0.4])
    assert gradients.clip_gradient_norm_(small, 1.0) == pytest.approx(0.5)
    torch.testing.assert_close(small.grad, torch.tensor([0.3, 0.4]))
    with pytest.raises(ValueError, match="threshold must be positive"):
        gradients.clip_gradient_norm_(params, 0.0)
    with pytest.raises(ValueError, match="backward"):
        gradients.clip_gradient_norm_([torch.zeros(2, requires_grad=True)], 1.0)


def test_clipping_experiment_explodes_only_without_clipping():
    unclipped = gradients.clipping_experiment(None, iterations=15)
    clipped = gradients.clipping_experiment(1.0, iterations=15)
    assert unclipped["loss"][0] == pytest.approx(clipped["loss"][0])
    assert max(unclipped["loss"]) > 1e3 * unclipped["loss"][0]
    assert max(clipped["loss"]) < 3 * clipped["loss"][0]
    assert max(clipped["grad_norm"]) > 1.0  # clipping was active


def test_one_unit_fixed_points_and_folds():
    w = 5.0
    folds = one_unit.saddle_nodes(w)
    assert len(folds) == 2 and one_unit.saddle_nodes(3.0) == []
    for x, b in folds:
        s = 1 / (1 + math.exp(-x))
        assert w * s * (1 - s) == pytest.approx(1.0)
        assert x == pytest.approx(w * s + b)
    symbol, expressions = symbolic_gradients.one_unit_folds()
    sympy_folds = sorted(float(e.subs(symbol, w)) for e in expressions)
    assert sympy_folds == pytest.approx(sorted(x for x, _ in folds))
    b_low, b_high = sorted(b for _, b in folds)
    for b, count in ((b_low - 0.2, 1), (0.5 * (b_low + b_high), 3), (b_high + 0.2, 1)):
        roots = one_unit.fixed_points(w, b)
        assert len(roots) == count
        for x in roots:
            assert x == pytest.approx(w / (1 + math.exp(-x)) + b, abs=1e-9)
    curve = one_unit.fixed_point_curve(w, torch.linspace(-8, 8, 101))
    residual = w * torch.sigmoid(curve["x"]) + curve["b"] - curve["x"]
    assert residual.abs().max() < 1e-12
    assert not curve["stable"][50] and curve["stable"][0]  # x = 0 is between the folds


def test_hysteresis_and_gradient_spike():
    w = 5.0
    b_values = torch.linspace(-3.2, -1.8, 15)
    up, down = one_unit.hysteresis_sweep(w, b_values)
    middle = (b_values > -2.6) & (b_values < -2.4)
    assert torch.all(up[middle] < 0) and torch.all(down[middle] > 0)
    assert torch.allclose(up[~middle][[0, -1]], down[~middle][[0, -1]])
    b_grid = torch.linspace(-3.0, -2.0, 2001)
    peaks = []
    for steps in (10, 30, 100):
        _, gradient = one_unit.final_state_gradient(w, b_grid, -5.0, steps)
        peaks.append(float(gradient.abs().max()))
        location = float(b_grid[gradient.abs().argmax()])
        assert -2.6 < location < -2.1
    assert peaks[0] < peaks[1] < peaks[2] and peaks[2] > 100
    # away from the folds the gradient stays moderate
    _, far = one_unit.final_state_gradient(w, torch.tensor([-4.0, 0.0]), -5.0, 100)
    assert far.abs().max() < 3


def test_training_the_bias_across_the_fold_spikes_and_clipping_bounds_the_step():
    w, b_plus = 5.0, one_unit.saddle_nodes(5.0)[0][1]
    runs = {th: one_unit.train_bias(w, -3.0, 2.0, threshold=th) for th in (None, 10.0)}
    for history in runs.values():
        # gradient descent walks b up to the fold b_+, where x_T jumps to the upper branch
        assert history["b"][0] < b_plus < max(history["b"])
        assert max(history["grad_norm"]) > 10 * history["grad_norm"][0]  # the spike
    plain, clipped = runs[None]["b"], runs[10.0]["b"]
    plain_steps = [abs(a - b) for a, b in zip(plain[1:], plain[:-1], strict=True)]
    clipped_steps = [abs(a - b) for a, b in zip(clipped[1:], clipped[:-1], strict=True)]
    assert max(plain_steps) > 1.0  # one step on the cliff throws b far away
    assert max(clipped_steps) <= 0.02 * 10.0 + 1e-12  # learning rate times threshold
    assert runs[None]["loss"][-1] > 10 * runs[10.0]["loss"][-1]
    assert figures_gradients.bias_training_figure({"plain": runs[None]}, w).axes


def test_figures_and_widget_render():
    assert figures_gradients.lag_norm_figure(1.5, "tanh", steps=10).axes
    assert figures_gradients.one_unit_figure(5.0, -2.5, steps=20).axes
    widget = figures_gradients.lag_norm_widget(weight_norms=(0.5, 2.0), activations=("tanh",))
    assert widget.num_frames in (0, 2)


def test_bad_inputs_raise_clear_errors():
    with pytest.raises(ValueError, match="unknown activation"):
        gradients.activation_derivative("softplus", torch.zeros(2))
    with pytest.raises(TypeError, match="VanillaRNN"):
        gradients.state_jacobians(torch.nn.Linear(2, 2), torch.zeros(3, 1, 2))
    with pytest.raises(ValueError, match="steps"):
        one_unit.iterate(5.0, -2.0, 0.0, -1)
    with pytest.raises(ValueError, match="iterations must be >= 1"):
        one_unit.train_bias(5.0, -3.0, 2.0, iterations=0)
