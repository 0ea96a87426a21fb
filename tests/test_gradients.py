"""Chapter 2: Jacobians of BPTT, the norm bound, the nilpotent example, clipping, one unit."""

from __future__ import annotations

import math
import re

import matplotlib
import pytest
import torch

from stablernn_lib.core import gradients
from stablernn_lib.core.models import random_vanilla_rnn
from stablernn_lib.core.norms import activation_lipschitz, spectral_norm
from stablernn_lib.figures import gradients as figures_gradients
from stablernn_lib.symbolic import bptt_algebra as symbolic_gradients
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


# --- values against independent computations (issue 40: mutation testing) ----------------


def _tanh_product_norms(weight, weight_ih, inputs):
    """``||d h_T / d h_s||_2`` for ``s = 0..T`` of ``h_t = tanh(W h_{t-1} + U x_t)`` from
    ``h_0 = 0``, written out: ``J_t = diag(1 - h_t^2) W`` multiplied from the left end,
    norms from the singular values. Shapes: inputs ``(T, B, D)`` -> ``(T + 1, B)``."""
    steps, batch, _ = inputs.shape
    state = torch.zeros(batch, weight.shape[0], dtype=weight.dtype)
    jacobians = []
    for x in inputs:
        state = torch.tanh(state @ weight.T + x @ weight_ih.T)
        jacobians.append((1 - state**2).unsqueeze(-1) * weight)
    product = torch.eye(weight.shape[0], dtype=weight.dtype).expand(batch, -1, -1)
    norms = [torch.ones(batch, dtype=weight.dtype)]
    for jacobian in reversed(jacobians):
        product = product @ jacobian
        norms.append(torch.linalg.svdvals(product)[:, 0])
    return torch.stack(norms[::-1])


def _lower_median(values):
    """The lower middle value along dim 1 (``torch.median``'s convention), by sorting."""
    return values.sort(dim=1).values[:, (values.shape[1] - 1) // 2]


def test_activation_derivative_keeps_the_dtype_and_relu_slope_at_zero_is_autograds():
    points = torch.tensor([-1.5, 0.0, 2.0], dtype=torch.float64, requires_grad=True)
    (autograd_slope,) = torch.autograd.grad(torch.relu(points).sum(), points)
    slope = gradients.activation_derivative("relu", points.detach())
    assert slope.dtype == torch.float64
    torch.testing.assert_close(slope, torch.tensor([0.0, 0.0, 1.0], dtype=torch.float64))
    torch.testing.assert_close(slope, autograd_slope)
    assert gradients.activation_derivative("relu", torch.zeros(2)).dtype == torch.float32
    with pytest.raises(TypeError, match="got Linear"):
        gradients.bptt_gradients(torch.nn.Linear(2, 2), torch.zeros(3, 1, 2), torch.zeros(3, 1, 2))


def test_bptt_with_one_step_and_one_unit_matches_autograd(generator):
    weight = torch.tensor([[0.7]], dtype=torch.float64)
    bias = torch.tensor([0.1], dtype=torch.float64)
    model = gradients.vanilla_rnn_with_weight(weight, "tanh", 2, bias=bias, generator=generator)
    inputs = torch.randn(1, 3, 2, generator=generator, dtype=torch.float64)
    state_grads = torch.randn(1, 3, 1, generator=generator, dtype=torch.float64)
    (model.run(inputs) * state_grads).sum().backward()
    manual = gradients.bptt_gradients(model, inputs, state_grads)
    for name in ("weight_hh", "weight_ih", "bias"):
        torch.testing.assert_close(manual[name], getattr(model, name).grad)
    with pytest.raises(ValueError, match=r"\(T, B, H\) = \(1, 3, 1\), got \(1, 3, 2\)"):
        gradients.bptt_gradients(model, inputs, torch.zeros(1, 3, 2, dtype=torch.float64))


def test_recurrent_matrix_values_follow_the_documented_recipe():
    size, norm = 6, 2.5
    for kind in gradients.MATRIX_KINDS:
        weight = gradients.recurrent_matrix(
            kind, size, norm, generator=torch.Generator().manual_seed(3)
        )
        draws = torch.Generator().manual_seed(3)
        gaussian = torch.randn(size, size, generator=draws, dtype=torch.float64)
        assert weight.dtype == torch.float64
        if kind == "gaussian":
            expected = gaussian * (norm / torch.linalg.svdvals(gaussian)[0])
        elif kind == "orthogonal":
            # W / norm is the Q of gaussian = Q R with a positive diagonal of R
            r = (weight / norm).T @ gaussian
            torch.testing.assert_close(torch.tril(r, -1), torch.zeros_like(r), atol=1e-12, rtol=0)
            assert torch.all(torch.diagonal(r) > 0)
            expected = gaussian @ torch.linalg.inv(r) * norm
        else:
            # rank 2 by default: Gram-Schmidt on the first two columns, strengths 1 and 1/2
            first = gaussian[:, 0] / gaussian[:, 0].norm()
            second = gaussian[:, 1] - (first @ gaussian[:, 1]) * first
            second = second / second.norm()
            noise = torch.randn(size, size, generator=draws, dtype=torch.float64)
            memory = torch.outer(first, first) + 0.5 * torch.outer(second, second)
            matrix = memory + 0.1 * noise / torch.linalg.svdvals(noise)[0]
            expected = matrix * (norm / torch.linalg.svdvals(matrix)[0])
        torch.testing.assert_close(weight, expected, atol=1e-12, rtol=1e-10)


def test_recurrent_matrix_edge_sizes_and_bad_arguments():
    for kind in gradients.MATRIX_KINDS:
        one = gradients.recurrent_matrix(kind, 1, 2.0, generator=torch.Generator().manual_seed(0))
        assert one.shape == (1, 1) and abs(float(one)) == pytest.approx(2.0)
    for size, norm in ((0, 1.0), (3, 0.0), (3, -1.0)):
        with pytest.raises(ValueError, match="hidden_size must be >= 1 and weight_norm > 0"):
            gradients.recurrent_matrix("gaussian", size, norm)


def test_vanilla_rnn_with_weight_defaults_input_weights_and_bias(generator):
    weight = gradients.recurrent_matrix("gaussian", 4, 1.5, generator=generator)
    plain = gradients.vanilla_rnn_with_weight(weight)
    assert plain.activation == "tanh" and plain.bias is None and plain.input_size == 4
    torch.testing.assert_close(plain.weight_hh.detach(), weight)
    torch.testing.assert_close(plain.weight_ih.detach(), torch.eye(4, dtype=torch.float64))
    seeded = gradients.vanilla_rnn_with_weight(
        weight, "relu", 3, generator=torch.Generator().manual_seed(5)
    )
    gauss = torch.randn(4, 3, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    assert seeded.weight_ih.dtype == torch.float64
    torch.testing.assert_close(seeded.weight_ih.detach(), gauss / 2, atol=1e-15, rtol=0)
    bias = torch.tensor([0.1, -0.2, 0.3, -0.4], dtype=torch.float64)
    biased = gradients.vanilla_rnn_with_weight(weight, bias=bias)
    torch.testing.assert_close(biased.bias.detach(), bias)


def test_lag_norm_curve_defaults_match_the_recipe_written_out():
    # the chapter's exercise calls lag_norm_curve(kind, norm, activation) with the defaults:
    # H = 32, 40 steps, batch 32, inputs N(0, 1), seed 0
    curve = gradients.lag_norm_curve("gaussian", 1.5, "tanh")
    draws = torch.Generator().manual_seed(0)
    weight = gradients.recurrent_matrix("gaussian", 32, 1.5, generator=draws)
    weight_ih = torch.randn(32, 32, generator=draws, dtype=torch.float64) / math.sqrt(32)
    inputs = torch.randn(40, 32, 32, generator=draws, dtype=torch.float64)
    expected = _lower_median(_tanh_product_norms(weight, weight_ih, inputs))
    assert curve.shape == (41,)
    torch.testing.assert_close(curve, expected.flip(0), atol=1e-14, rtol=1e-9)
    scaled = gradients.lag_norm_curve("gaussian", 1.5, "tanh", steps=5, batch=4, input_scale=3.0)
    draws = torch.Generator().manual_seed(0)
    weight = gradients.recurrent_matrix("gaussian", 32, 1.5, generator=draws)
    weight_ih = torch.randn(32, 32, generator=draws, dtype=torch.float64) / math.sqrt(32)
    inputs = 3.0 * torch.randn(5, 4, 32, generator=draws, dtype=torch.float64)
    expected = _lower_median(_tanh_product_norms(weight, weight_ih, inputs))
    torch.testing.assert_close(scaled, expected.flip(0), atol=1e-14, rtol=1e-9)


def test_steering_inputs_hold_the_preactivations_at_zero_and_the_saturation():
    model = gradients.vanilla_rnn_with_weight(gradients.nilpotent_weight(), "tanh")
    weight = gradients.nilpotent_weight()
    for saturation, inputs in (
        (10.0, gradients.steering_inputs(model, 6)),  # the default, used by nilpotent_check
        (3.0, gradients.steering_inputs(model, 6, saturation=3.0)),
    ):
        assert inputs.shape == (6, 1, 2)
        state = torch.zeros(1, 2, dtype=torch.float64)
        for x in inputs:
            preactivation = state @ weight.T + x
            target = torch.tensor([[0.0, saturation]], dtype=torch.float64)
            torch.testing.assert_close(preactivation, target, atol=1e-12, rtol=0)
            state = torch.tanh(preactivation)
    for hidden, inputs in ((3, 2), (2, 3)):
        wrong = gradients.vanilla_rnn_with_weight(
            torch.eye(hidden, dtype=torch.float64), "tanh", inputs
        )
        with pytest.raises(ValueError, match="two-unit RNN with U = I"):
            gradients.steering_inputs(wrong, 3)


def _growth_by_hand(x1, x2, steps, burn_in):
    """The average of ``log max(8 |rho'(a_1) - rho'(a_2)|, 1e-300)`` over steps ``burn_in..``
    of the nilpotent tanh RNN driven by the constant input ``(x1, x2)``, in plain floats."""
    h1 = h2 = 0.0
    total = 0.0
    for t in range(steps):
        a1, a2 = 8 * (h1 + h2) + x1, -8 * (h1 + h2) + x2
        if t >= burn_in:
            slope_gap = (1 - math.tanh(a1) ** 2) - (1 - math.tanh(a2) ** 2)
            total += math.log(max(8 * abs(slope_gap), 1e-300))
        h1, h2 = math.tanh(a1), math.tanh(a2)
    return total / (steps - burn_in)


def test_constant_input_growth_values_defaults_and_errors():
    grid = torch.tensor([[0.5, -0.3], [0.0, 0.0], [0.2, 0.9]], dtype=torch.float64)
    for steps, burn_in in ((4, 0), (5, 2)):
        exponents = gradients.constant_input_growth(grid, steps=steps, burn_in=burn_in)
        assert exponents.dtype == torch.float64
        expected = [_growth_by_hand(x1, x2, steps, burn_in) for x1, x2 in grid.tolist()]
        assert exponents.tolist() == pytest.approx(expected, rel=1e-9)
    # the chapter's grid uses the defaults: 600 steps, the first 100 discarded
    chaotic = torch.tensor([[1.8, -2.2]], dtype=torch.float64)
    torch.testing.assert_close(
        gradients.constant_input_growth(chaotic),
        gradients.constant_input_growth(chaotic, steps=600, burn_in=100),
        rtol=1e-12,
        atol=0,
    )
    with pytest.raises(ValueError, match=r"shape \(N, 2\), got \(3,\)"):
        gradients.constant_input_growth(torch.zeros(3, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"shape \(N, 2\), got \(4, 3\)"):
        gradients.constant_input_growth(torch.zeros(4, 3, dtype=torch.float64))
    for steps, burn_in in ((10, 10), (10, -1)):
        with pytest.raises(ValueError, match="0 <= burn_in < steps"):
            gradients.constant_input_growth(chaotic, steps=steps, burn_in=burn_in)


def _rate_by_hand(norms, steps):
    """Median over the batch of ``(||P_0|| / ||P_{T - T//2}||)^(1 / (T//2))`` (0 for 0/0)."""
    long, short = norms[0], norms[steps - steps // 2]
    ratio = torch.where(short > 0, long / torch.where(short > 0, short, 1.0), 0.0)
    return float(ratio.sort().values[(len(ratio) - 1) // 2]) ** (1 / (steps // 2))


def test_nilpotent_check_defaults_and_odd_steps_match_products_written_out():
    weight, identity = gradients.nilpotent_weight(), torch.eye(2, dtype=torch.float64)
    # the chapter calls nilpotent_check(steps=60): batch 256 and seed 0 are the defaults
    results = gradients.nilpotent_check()
    gaussian = torch.randn(
        60, 256, 2, generator=torch.Generator().manual_seed(0), dtype=torch.float64
    )
    norms = _tanh_product_norms(weight, identity, gaussian)
    for result in results.values():
        assert result["norms"].shape == (61,)
    torch.testing.assert_close(
        results["gaussian input"]["norms"], _lower_median(norms).flip(0), atol=1e-14, rtol=1e-9
    )
    assert results["gaussian input"]["rate"] == pytest.approx(_rate_by_hand(norms, 60), rel=1e-9)
    # an odd length: the rate is over steps // 2 = 4 lags, from lag 9 down to lag 5
    odd = gradients.nilpotent_check(steps=9, batch=8, seed=2)
    gaussian = torch.randn(9, 8, 2, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    model = gradients.vanilla_rnn_with_weight(weight, "tanh")
    regimes = {
        "gaussian input": gaussian,
        "constant input": torch.tensor([1.8, -2.2], dtype=torch.float64).expand(9, 1, 2),
        "steered input": gradients.steering_inputs(model, 9),
    }
    for name, inputs in regimes.items():
        norms = _tanh_product_norms(weight, identity, inputs)
        assert odd[name]["rate"] == pytest.approx(_rate_by_hand(norms, 9), rel=1e-9)
        torch.testing.assert_close(
            odd[name]["norms"], _lower_median(norms).flip(0), rtol=1e-9, atol=1e-14
        )


def test_clipping_with_an_infinite_threshold_leaves_an_infinite_gradient_alone():
    param = torch.zeros(2, requires_grad=True)
    param.grad = torch.tensor([math.inf, 1.0])
    assert gradients.clip_gradient_norm_(param, math.inf) == math.inf
    torch.testing.assert_close(param.grad, torch.tensor([math.inf, 1.0]))


def test_clipping_experiment_defaults_match_gradient_descent_written_out():
    # the chapter sets only the threshold and the number of iterations
    history = gradients.clipping_experiment(1.0)
    assert len(history["loss"]) == len(history["grad_norm"]) == 25
    draws = torch.Generator().manual_seed(0)
    weight = gradients.recurrent_matrix("orthogonal", 16, 3.0, generator=draws)
    weight_ih = torch.randn(16, 1, generator=draws, dtype=torch.float64) / 4
    readout = torch.randn(1, 16, generator=draws, dtype=torch.float64) / 4
    readout_bias = torch.zeros(1, dtype=torch.float64)
    inputs = torch.randn(20, 32, 1, generator=draws, dtype=torch.float64)
    targets = torch.cat([torch.zeros(3, 32, 1, dtype=torch.float64), inputs[:-3]])
    params = [p.requires_grad_() for p in (weight, weight_ih, readout, readout_bias)]
    for iteration in range(3):
        state = torch.zeros(32, 16, dtype=torch.float64)
        squared_errors = []
        for x, y in zip(inputs, targets, strict=True):
            state = torch.tanh(state @ weight.T + x @ weight_ih.T)
            squared_errors.append((state @ readout.T + readout_bias - y) ** 2)
        loss = torch.stack(squared_errors).mean()
        grads = torch.autograd.grad(loss, params)
        norm = math.sqrt(sum(float((g**2).sum()) for g in grads))
        assert history["loss"][iteration] == pytest.approx(float(loss.detach()), rel=1e-9)
        assert history["grad_norm"][iteration] == pytest.approx(norm, rel=1e-9)
        with torch.no_grad():
            for p, g in zip(params, grads, strict=True):
                p.sub_(0.5 * g * min(1.0, 1.0 / norm))


@pytest.mark.parametrize("shape", [(3, 1), (1, 3), (3,), (2, 2, 2)])
def test_vanilla_rnn_with_weight_refuses_a_matrix_that_is_not_square(shape):
    with pytest.raises(
        ValueError, match=r"square \(H, H\) matrix, got shape " + re.escape(str(shape))
    ):
        gradients.vanilla_rnn_with_weight(torch.zeros(shape))
