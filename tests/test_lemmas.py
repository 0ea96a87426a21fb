"""The experiments of Chapters 5 and 6 (stablernn_lib.theory.lemmas), their figures and the
symbolic steps (stablernn_lib.symbolic.lemma_algebra)."""

from __future__ import annotations

import copy
import math
from dataclasses import asdict

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import sympy as sp  # noqa: E402
import torch  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from tolerances import rounding_tolerance  # noqa: E402

from stablernn_lib.core import bounds
from stablernn_lib.core.contraction import project_spectral_ball  # noqa: E402
from stablernn_lib.core.models import random_vanilla_rnn  # noqa: E402
from stablernn_lib.core.truncation import truncated_states_reference  # noqa: E402
from stablernn_lib.figures import lemmas as lemma_plots
from stablernn_lib.symbolic import lemma_algebra  # noqa: E402
from stablernn_lib.theory.lemmas import (  # noqa: E402
    ROUNDOFF_SLACK,
    GradientGapResult,
    RegressionInstance,
    SmoothnessResult,
    TruncationResult,
    _regression_instances,
    _truncation_case,
    cube_inputs,
    finite_difference_gradient,
    flat_parameters,
    gradient_gap_experiment,
    gradient_gaps,
    hessian_top_direction,
    lipschitz_ratio,
    lstm_state_bound,
    parameter_gradient,
    random_regression_instance,
    random_rnn_with_inputs,
    regression_loss,
    single_threaded,
    smoothness_experiment,
    sphere_inputs,
    truncation_experiment,
    truncation_gaps,
)
from stablernn_lib.theory.lstm_certificate import (  # noqa: E402
    LSTMCertificate,
    lstm_certificate,
    random_stable_lstm,
    weighted_state_norm,
)

torch.set_num_threads(1)  # tiny tensors: threads only add overhead


# ----------------------------------------------------------------------------- Lemma 1


def test_truncation_gaps_match_the_reference_truncation(generator):
    seq_len, batch = 20, 2
    model, inputs = random_rnn_with_inputs(0.8, seq_len=seq_len, batch=batch, generator=generator)
    gaps = truncation_gaps(model, inputs, [1, 4, 25])
    with torch.no_grad():
        full = model.run(inputs)
        expected = [
            float((full - truncated_states_reference(model, inputs, k)).norm(dim=-1).max())
            for k in (1, 4, 25)
        ]
    # The two truncations and the full run use different batch shapes, so their matrix
    # products round differently: equal only up to rounding. Each state is T steps of
    # dot products of length H + D, and tanh states have norm <= sqrt(H).
    size = model.state_size + inputs.shape[-1]
    tolerance = rounding_tolerance(inputs.dtype, seq_len * size, math.sqrt(model.state_size))
    np.testing.assert_allclose(gaps, expected, rtol=0, atol=tolerance)
    assert gaps[-1] <= tolerance  # k >= T: the truncated model is the full one


@pytest.mark.parametrize("model", ["tanh", "identity", "lstm"])
def test_truncation_experiment_bound_holds(model):
    result = truncation_experiment(
        [0.4, 0.8, 0.95],
        [1, 2, 5, 10, 20, 40],
        model=model,
        num_instances=4,
        seed=3,
        progress=False,
    )
    assert result.measured.shape == (3, 4, 6) and result.bound.shape == (3, 4, 6)
    assert result.holds()
    tightness = result.tightness()
    assert np.all(tightness <= 1.0 + 1e-8) and np.all(tightness > 0)
    assert np.all(np.diff(result.measured.max(axis=1)[:, :4], axis=-1) <= 0)  # gaps shrink in k


def test_aligned_linear_rnn_attains_lemma1():
    result = truncation_experiment(
        [0.5, 0.9], [1, 4, 8], model="identity", family="aligned", seq_len=300, progress=False
    )
    assert result.holds()
    assert np.all(result.tightness() > 0.99)


def test_truncation_experiment_without_stability_has_no_bound():
    result = truncation_experiment([3.0], [1, 10, 40], num_instances=2, progress=False)
    assert np.all(np.isnan(result.bound)) and np.all(np.isnan(result.tightness()))
    assert result.holds()  # nothing is claimed ...
    assert result.measured[0, :, -1].min() > 1e-2  # ... and the gap does not vanish


def test_holds_detects_a_violation():
    result = truncation_experiment([0.5], [1, 5], num_instances=1, progress=False)
    result.measured[0, 0, 1] = 2 * result.bound[0, 0, 1]
    assert not result.holds()


def test_lstm_state_bound_holds_along_trajectories(generator):
    model = random_stable_lstm(3, 6, 0.9, 1.0, generator=generator)
    certificate = lstm_certificate(model, 1.0)
    inputs = cube_inputs(200, 8, 3, 1.0, generator)
    with torch.no_grad():
        states = model.run(inputs)
    norms = weighted_state_norm(states, 6, certificate.weights, certificate.p)
    assert float(norms.max()) <= lstm_state_bound(certificate) * (1 + 1e-12)


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda: truncation_experiment([0.5], [], progress=False), ValueError, "ks"),
        (lambda: truncation_experiment([0.5], [0, 1], progress=False), ValueError, "ks"),
        (
            lambda: truncation_experiment([0.5], [1], model="gru", progress=False),
            ValueError,
            "model",
        ),
        (
            lambda: truncation_experiment([1.2], [1], model="lstm", progress=False),
            ValueError,
            "0 < lam < 1",
        ),
        (lambda: random_rnn_with_inputs(0.5, family="worst"), ValueError, "family"),
        (lambda: random_rnn_with_inputs(0.5, input_bound=-1.0), ValueError, "input_bound"),
    ],
)
def test_lemma1_experiment_bad_input(call, error, message):
    with pytest.raises(error, match=message):
        call()


def test_single_threaded_restores_the_thread_count():
    before = torch.get_num_threads()
    assert single_threaded(torch.get_num_threads)() == 1
    assert torch.get_num_threads() == before


def _hand_truncation_result() -> TruncationResult:
    """Lemma 1's result with numbers chosen by hand (no experiment run).

    lambda = 0.5: instance 0 has lambda_hat = 0.5, B_h = 1000, so its bounds at k = 1, 2, 20
    are 500, 250 and 1000 / 2^20 (below the ratio floor 1e-6 B_h = 1e-3, but above
    1e-6 / B_h); it exceeds the bound by exactly the rounding slack at k = 1 and by half
    of it at k = 2.  Instance 1 has lambda_hat = 1e-6, B_h = 1: its bound at k = 1 equals the
    floor exactly.  lambda = 3 has no bound (NaN constants).
    """
    ks = np.array([1, 2, 20])
    certified = np.array([[0.5, 1e-6], [np.nan, np.nan]])
    state_bounds = np.array([[1000.0, 1.0], [np.nan, np.nan]])
    measured = np.array(
        [
            [
                [500.0 + ROUNDOFF_SLACK * 1000.0, 250.0 + 0.5 * ROUNDOFF_SLACK * 1000.0, 4e-4],
                [5e-7, 1e-13, 0.0],
            ],
            [[3.0, 2.0, 1.5], [4.0, 1.0, 0.5]],
        ]
    )
    return TruncationResult(
        np.array([0.5, 3.0]), ks, measured, certified, state_bounds, "tanh", "gaussian", 1.0, "E"
    )


def test_truncation_result_bound_ratios_and_tightness_by_hand():
    result = _hand_truncation_result()
    expected_bound = np.array([[500.0, 250.0, 1000.0 / 2**20], [1e-6, 1e-12, 1e-120]])
    np.testing.assert_allclose(result.bound[0], expected_bound, rtol=1e-15)
    assert np.isnan(result.bound[1]).all()
    # equality and excess within the slack both count as holding; twice the slack does not
    assert result.holds()
    result.measured[0, 0, 1] = 250.0 + 2 * ROUNDOFF_SLACK * 1000.0
    assert not result.holds()
    result.measured[0, 0, 1] = 250.0 + 0.5 * ROUNDOFF_SLACK * 1000.0
    ratios = result.ratios()
    nan = np.nan
    expected = [[[1.0 + 2e-12, 1.0 + 2e-12, nan], [nan, nan, nan]], [[nan] * 3, [nan] * 3]]
    np.testing.assert_allclose(ratios, expected, rtol=1e-14)
    tightness = result.tightness()
    assert tightness.shape == (2,)
    assert tightness[0] == pytest.approx(1.0 + 2e-12, rel=1e-14) and np.isnan(tightness[1])


def test_truncation_result_smallest_context_by_hand():
    result = _hand_truncation_result()
    # worst gaps over instances: lambda = 0.5: (500, 250, 4e-4); lambda = 3: (4, 2, 1.5)
    np.testing.assert_array_equal(result.smallest_context(300.0), [2, 1])
    np.testing.assert_array_equal(result.smallest_context(1.5), [20, 20])  # 1.5 <= 1.5
    np.testing.assert_array_equal(result.smallest_context(1.0), [20, np.nan])
    np.testing.assert_array_equal(result.smallest_context(0.5), [20, np.nan])
    for eps in (0.0, -1.0):
        with pytest.raises(ValueError, match="eps must be positive"):
            result.smallest_context(eps)


def test_truncation_result_summary_by_hand():
    assert _hand_truncation_result().summary() == (
        "lambda = 0.5   bound holds in every run: True; largest measured/bound = 1; "
        "gap at k = 20: 4.0e-04\n"
        "lambda = 3     no bound (lambda >= 1); largest gap at k = 1: 4.00e+00, "
        "at k = 20: 1.50e+00"
    )
    result = _hand_truncation_result()
    result.measured[0, 1, 0] = 2e-6  # twice its bound
    assert "bound holds in every run: False" in result.summary()


def _hand_gradient_gap_result() -> GradientGapResult:
    """Lemma 2's result by hand: at lambda = 0.5 instance 0 (gamma = 1000) exceeds its bound
    by exactly the rounding slack at k = 1 and by half of it at k = 2, where the bound 5e-4
    is below the ratio floor 1e-6 gamma; instance 1 (gamma = 1) has a bound equal to the floor.  At
    lambda = 0.9 instance 1 exceeds its bound 2 with a gap of 3."""
    bound = np.array([[[400.0, 5e-4], [1e-6, 0.5]], [[1.0, 0.5], [2.0, 1.0]]])
    measured = np.array(
        [
            [[400.0 + ROUNDOFF_SLACK * 1000.0, 5e-4 + 0.5 * ROUNDOFF_SLACK * 1000.0], [1e-7, 0.25]],
            [[0.5, 0.5], [3.0, 0.5]],
        ]
    )
    gammas = np.array([[1000.0, 1.0], [2.0, 3.0]])
    lams, ks = np.array([0.5, 0.9]), np.array([1, 2])
    return GradientGapResult(lams, ks, measured, gammas, bound, "tanh", "gaussian", 8, 4, 60)


def test_gradient_gap_result_by_hand():
    result = _hand_gradient_gap_result()
    assert not result.holds()  # the gap 3 > 2 at lambda = 0.9
    nan = np.nan
    np.testing.assert_allclose(
        result.ratios(), [[[1.0 + 2.5e-12, nan], [nan, 0.5]], [[0.5, 1.0], [1.5, 0.5]]], rtol=1e-14
    )
    np.testing.assert_allclose(result.tightness(), [1.0 + 2.5e-12, 1.5], rtol=1e-14)
    assert result.summary() == (
        "lambda = 0.5   gamma =     1e+03; bound holds in every run: True; "
        "largest measured/bound = 1\n"
        "lambda = 0.9   gamma =         3; bound holds in every run: False; "
        "largest measured/bound = 1.5"
    )
    result.measured[1, 1, 0] = 2.0  # now every gap is at most its bound (up to the slack)
    assert result.holds()
    result.measured[0, 0, 1] = 5e-4 + 2 * ROUNDOFF_SLACK * 1000.0
    assert not result.holds()


def _hand_smoothness_result() -> SmoothnessResult:
    """Lemma 3's result by hand: with x = 1 / (1 - lambda) = 2, 4, 8 the ratios are
    (1, 3) x^2 (mean 2 x^2, exponent 2) and the betas (4, 4) x^3 (exponent 3)."""
    lams = np.array([0.5, 0.75, 0.875])
    x = 1 / (1 - lams)
    ratios = np.outer(x**2, [1.0, 3.0])
    betas = np.outer(x**3, [4.0, 4.0])
    return SmoothnessResult(lams, ratios, np.zeros_like(ratios), betas, "identity", "aligned")


def test_smoothness_result_by_hand():
    result = _hand_smoothness_result()
    assert result.growth_exponent() == pytest.approx(2.0, abs=1e-12)
    assert result.growth_exponent(result.betas) == pytest.approx(3.0, abs=1e-12)
    # largest ratio / beta = 3 x^2 / (4 x^3) = 3 / (4 x)
    np.testing.assert_allclose(result.tightness(), [0.375, 0.1875, 0.09375], rtol=1e-15)
    assert result.holds()
    assert result.summary() == (
        "lambda = 0.5   largest ratio =        12; beta =        32; largest ratio/beta = 0.375\n"
        "lambda = 0.75  largest ratio =        48; beta =       256; largest ratio/beta = 0.188\n"
        "lambda = 0.875 largest ratio =       192; beta =  2.05e+03; largest ratio/beta = 0.0938\n"
        "growth in 1/(1 - lambda): measured exponent 2.00, beta's exponent 3.00; "
        "bound holds: True"
    )
    result.ratios = result.betas.copy()  # ratio = beta is allowed
    assert result.holds()
    result.ratios[1, 0] *= 1 + 1e-12
    assert not result.holds()


def test_input_draws_have_the_stated_norms_shapes_and_seeds():
    draw = [
        lambda g: sphere_inputs(7, 3, 4, 2.5, g),
        lambda g: cube_inputs(7, 3, 4, 2.5, g),
        lambda g: random_rnn_with_inputs(0.6, seq_len=7, batch=3, input_bound=2.5, generator=g)[1],
    ]
    for make in draw:  # the same seed gives the same draw, whatever the global generator's state
        torch.manual_seed(0)
        x = make(torch.Generator().manual_seed(11))
        assert x.shape == (7, 3, 4) and x.dtype == torch.float64
        torch.manual_seed(1)
        torch.testing.assert_close(make(torch.Generator().manual_seed(11)), x, rtol=0, atol=0)
    sphere = draw[0](torch.Generator().manual_seed(1))
    np.testing.assert_allclose(sphere.norm(dim=-1), 2.5, rtol=1e-14)
    assert float(sphere_inputs(2, 2, 3, 0.0).abs().max()) == 0.0  # B_x = 0 is allowed
    cube = cube_inputs(500, 4, 3, 2.5, torch.Generator().manual_seed(2))
    assert float(cube.abs().max()) <= 2.5 and float(cube.min()) < -2.4 and float(cube.max()) > 2.4
    assert abs(float(cube.mean())) < 0.1  # uniform on [-B, B]


def test_random_rnn_with_inputs_defaults_and_families():
    model, inputs = random_rnn_with_inputs(0.6, generator=torch.Generator().manual_seed(3))
    assert (model.input_size, model.hidden_size, model.activation) == (4, 8, "tanh")
    assert inputs.shape == (60, 1, 4)
    np.testing.assert_allclose(inputs.norm(dim=-1), 1.0, rtol=1e-14)
    assert spectral_norm_of(model.weight_hh) == pytest.approx(0.6, rel=1e-12)
    model, inputs = random_rnn_with_inputs(
        0.6, family="aligned", seq_len=5, batch=2, input_bound=3.0, activation="identity",
        generator=torch.Generator().manual_seed(3),
    )  # fmt: skip
    torch.testing.assert_close(model.weight_hh.detach(), 0.6 * torch.eye(8, dtype=torch.float64))
    # every input is B_x times the top right singular vector of U: ||U x|| = B_x ||U||_2
    U = model.weight_ih.detach()
    assert inputs.shape == (5, 2, 4)
    assert torch.equal(inputs, inputs[:1, :1].expand(5, 2, 4))
    pushed = float((U @ inputs[0, 0]).norm())
    assert pushed == pytest.approx(3.0 * spectral_norm_of(U), rel=1e-12)
    # with the sigmoid (L_rho = 1/4) the aligned W is (lambda / L_rho) I: L_rho ||W||_2 = lambda
    model, _ = random_rnn_with_inputs(0.6, family="aligned", activation="sigmoid", seq_len=3)
    torch.testing.assert_close(model.weight_hh.detach(), 2.4 * torch.eye(8, dtype=torch.float64))


def spectral_norm_of(matrix: torch.Tensor) -> float:
    return float(torch.linalg.matrix_norm(matrix.detach(), ord=2))


def _certificate_by_hand(lam: float, weights: tuple[float, float]) -> LSTMCertificate:
    zeros = torch.zeros(2, dtype=torch.float64)
    return LSTMCertificate(
        p=math.inf,
        input_bound=1.0,
        input_max=torch.tensor([0.5, 0.8], dtype=torch.float64),
        forget_max=zeros,
        candidate_max=torch.tensor([0.6, 0.9], dtype=torch.float64),
        output_max=torch.tensor([0.7, 0.4], dtype=torch.float64),
        cell_bound=torch.tensor([3.0, 1.0], dtype=torch.float64),
        cell_coupling=torch.zeros(2, 2, dtype=torch.float64),
        hidden_coupling=torch.zeros(2, 2, dtype=torch.float64),
        matrix=torch.zeros(2, 2, dtype=torch.float64),
        lam=lam,
        weights=weights,
    )


@pytest.mark.parametrize(
    ("lam", "weights", "expected"),
    [
        # push = max(0.72 / 2, max(0.7 tanh 0.3, 0.4 tanh 0.72) / 0.5); box = max(3 / 2, 1 / 0.5)
        (0.5, (2.0, 0.5), 0.4 * math.tanh(0.72) / 0.5 / 0.5),  # B_0 / (1 - lambda) < box
        (0.9, (2.0, 0.5), 2.0),  # the box: ||1||_inf / v_h
        (0.5, (0.2, 5.0), 0.72 / 0.2 / 0.5),  # the cell part of the push wins
        (0.9, (0.2, 5.0), 3.0 / 0.2),  # the box: ||C||_inf / v_c
    ],
)
def test_lstm_state_bound_by_hand(lam, weights, expected):
    """cell = i-bar z-bar = (0.3, 0.72); the max norm picks the larger entry of each part."""
    assert lstm_state_bound(_certificate_by_hand(lam, weights)) == pytest.approx(
        expected, rel=1e-14
    )


@pytest.mark.parametrize("kind", ["tanh", "identity", "lstm"])
def test_truncation_case_returns_the_drawn_instance_and_its_certificate(kind):
    sizes = {"input_size": 3, "hidden_size": 4, "seq_len": 12, "batch": 2}
    ks = [1, 3]
    gaps, certified, state_bound = _truncation_case(
        0.7, ks, kind, "gaussian", sizes, 2.0, torch.Generator().manual_seed(5)
    )
    generator = torch.Generator().manual_seed(5)  # draw the same instance again
    if kind == "lstm":
        model = random_stable_lstm(3, 4, 0.7, 2.0, generator=generator)
        inputs = cube_inputs(12, 2, 3, 2.0, generator)
        certificate = lstm_certificate(model, 2.0)
        assert certified == certificate.lam and certified <= 0.7 + 1e-12
        assert state_bound == lstm_state_bound(certificate)

        def norm(diff):
            return weighted_state_norm(diff, 4, certificate.weights, certificate.p)
    else:
        model, inputs = random_rnn_with_inputs(
            0.7, activation=kind, input_bound=2.0, generator=generator, **sizes
        )
        lam = spectral_norm_of(model.weight_hh)  # L_rho = 1 for tanh and the identity
        assert certified == pytest.approx(lam, rel=1e-12) and lam == pytest.approx(0.7, rel=1e-12)
        expected = spectral_norm_of(model.weight_ih) * 2.0 / (1 - lam)
        assert state_bound == pytest.approx(expected, rel=1e-12)

        def norm(diff):
            return diff.norm(dim=-1)

    with torch.no_grad():
        full = model.run(inputs)
        expected_gaps = [
            float(norm((full - truncated_states_reference(model, inputs, k)).flatten(0, 1)).max())
            for k in ks
        ]
    np.testing.assert_allclose(gaps, expected_gaps, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize(("lam", "family"), [(1.5, "gaussian"), (1.0, "aligned")])
def test_truncation_case_has_no_bound_from_lambda_one(lam, family):
    """lambda >= 1 proves nothing; the aligned family has W = lambda I, so lambda = 1 exactly."""
    sizes = {"input_size": 2, "hidden_size": 3, "seq_len": 5, "batch": 1}
    gaps, certified, state_bound = _truncation_case(
        lam, [1], "tanh", family, sizes, 1.0, torch.Generator().manual_seed(0)
    )
    assert gaps.shape == (1,) and math.isnan(certified) and math.isnan(state_bound)


# ----------------------------------------------------------------------------- gradients


@pytest.mark.parametrize("activation", ["tanh", "identity"])
@pytest.mark.parametrize("k", [None, 1, 4])
def test_autograd_gradient_matches_finite_differences(activation, k, generator):
    instance = random_regression_instance(
        0.8, input_size=2, hidden_size=3, seq_len=12, activation=activation, generator=generator
    )
    autograd = parameter_gradient(instance.model, instance.inputs, instance.target, k)
    numeric = finite_difference_gradient(instance, k)
    assert autograd.shape == (3 * 3 + 3 * 2,)
    torch.testing.assert_close(autograd, numeric, rtol=1e-6, atol=1e-8)


def test_truncated_loss_uses_only_the_last_k_inputs(generator):
    instance = random_regression_instance(0.7, seq_len=10, generator=generator)
    model, inputs, target = instance.model, instance.inputs, instance.target
    changed = inputs.clone()
    changed[:6] = 0.0
    with torch.no_grad():
        assert float(regression_loss(model, inputs, target, 4)) == float(
            regression_loss(model, changed, target, 4)
        )
        assert float(regression_loss(model, inputs, target)) == float(
            regression_loss(model, inputs, target, 10)
        )
        assert float(regression_loss(model, inputs, target)) != float(
            regression_loss(model, changed, target)
        )


def test_regression_loss_bad_input(generator):
    instance = random_regression_instance(0.5, generator=generator)
    with pytest.raises(ValueError, match="step"):
        finite_difference_gradient(instance, step=0.0)
    with pytest.raises(ValueError, match="k"):
        regression_loss(instance.model, instance.inputs, instance.target, 0)
    biased = random_vanilla_rnn(4, 8, 0.5, bias=True, generator=generator)
    with pytest.raises(ValueError, match="bias=False"):
        regression_loss(biased, instance.inputs, instance.target)
    with pytest.raises(TypeError, match="about a VanillaRNN, got LSTMMap"):
        regression_loss(random_stable_lstm(4, 8, 0.5), instance.inputs, instance.target)
    relu = random_regression_instance(0.5, activation="relu", generator=generator)
    with pytest.raises(ValueError, match="smooth"):
        relu.constants()


def _tanh_rnn_last_state(instance: RegressionInstance, window: torch.Tensor) -> torch.Tensor:
    """``h_T`` of ``h_t = tanh(W h_{t-1} + U x_t)`` from ``h_0 = 0``, by a plain loop."""
    W, U = instance.model.weight_hh.detach(), instance.model.weight_ih.detach()
    h = torch.zeros(window.shape[1], W.shape[0], dtype=torch.float64)
    for x in window:
        h = torch.tanh(h @ W.T + x @ U.T)
    return h


def test_regression_loss_and_constants_by_hand(generator):
    instance = random_regression_instance(
        0.7, input_size=2, hidden_size=3, seq_len=6, target_norm=1.5, generator=generator
    )
    model, y = instance.model, instance.target
    inputs = torch.cat([instance.inputs, -0.5 * instance.inputs], dim=1)  # a batch of two
    for k in (None, 1, 2):
        window = inputs if k is None else inputs[-k:]
        h = _tanh_rnn_last_state(instance, window)
        expected = 0.5 * float(((h - y) ** 2).sum(dim=1).mean())
        with torch.no_grad():
            assert float(regression_loss(model, inputs, y, k)) == pytest.approx(expected, rel=1e-12)
    lam, lx = spectral_norm_of(model.weight_hh), spectral_norm_of(model.weight_ih)
    assert float(y.norm()) == pytest.approx(1.5, rel=1e-14)
    expected = {
        "lam": lam,
        "lx": lx,
        "bx": 1.0,
        "lp": lx * 1.0 / (1 - lam) + 1.5,  # B_h + ||y||
        "sp": 1.0,
        "l_rho": 1.0,
        "l2_rho": 4 / (3 * math.sqrt(3)),
    }
    constants = asdict(instance.constants())
    assert constants.keys() == expected.keys()
    for name, value in expected.items():
        assert constants[name] == pytest.approx(value, rel=1e-12), name


def test_random_regression_instance_defaults_and_seed():
    instance = random_regression_instance(0.6, generator=torch.Generator().manual_seed(4))
    assert instance.inputs.shape == (60, 1, 4) and instance.family == "gaussian"
    assert (instance.model.hidden_size, instance.model.activation) == (8, "tanh")
    assert float(instance.target.norm()) == pytest.approx(1.0, rel=1e-14)
    np.testing.assert_allclose(instance.inputs.norm(dim=-1), 1.0, rtol=1e-14)
    torch.manual_seed(0)  # the draw depends on the generator only, not on the global state
    again = random_regression_instance(0.6, generator=torch.Generator().manual_seed(4))
    torch.testing.assert_close(again.target, instance.target, rtol=0, atol=0)
    torch.testing.assert_close(again.inputs, instance.inputs, rtol=0, atol=0)
    aligned = random_regression_instance(0.6, family="aligned", seq_len=3)
    assert aligned.family == "aligned"  # the label the results and figures carry


def test_regression_instances_are_drawn_in_order_from_one_generator():
    options = {"input_size": 2, "hidden_size": 3, "seq_len": 5}
    torch.manual_seed(1)
    drawn = list(_regression_instances([0.5, 0.8], 2, 3, False, "test", options))
    assert [(i, j) for i, j, _, _ in drawn] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    generator = torch.Generator().manual_seed(3)
    for i, _, instance, _ in drawn:
        expected = random_regression_instance([0.5, 0.8][i], generator=generator, **options)
        assert spectral_norm_of(instance.model.weight_hh) == pytest.approx([0.5, 0.8][i])
        for a, b in ((instance.inputs, expected.inputs), (instance.target, expected.target)):
            torch.testing.assert_close(a, b, rtol=0, atol=0)
        torch.testing.assert_close(flat_parameters(instance.model), flat_parameters(expected.model))
    for lams, count in (([], 1), ([0.5], 0)):
        with pytest.raises(ValueError, match="need at least one lambda and num_instances >= 1"):
            list(_regression_instances(lams, count, 0, False, "test", options))


def test_regression_instances_progress_bar_is_labelled_and_optional(capsys):
    options = {"input_size": 2, "hidden_size": 3, "seq_len": 3}
    list(_regression_instances([0.5], 1, 0, False, "Lemma X instances", options))
    assert capsys.readouterr().err == ""
    list(_regression_instances([0.5], 1, 0, True, "Lemma X instances", options))
    assert "Lemma X instances" in capsys.readouterr().err


def test_gradient_gaps_match_finite_difference_gradients(generator):
    instance = random_regression_instance(
        0.8, input_size=2, hidden_size=3, seq_len=8, generator=generator
    )
    full = finite_difference_gradient(instance)
    expected = [float((full - finite_difference_gradient(instance, k)).norm()) for k in (1, 3)]
    np.testing.assert_allclose(gradient_gaps(instance, [1, 3]), expected, rtol=1e-6)


def test_hessian_power_iteration_start_comes_from_the_generator(generator):
    instance = random_regression_instance(
        0.7, input_size=2, hidden_size=3, seq_len=4, generator=generator
    )
    results = []
    for global_seed in (0, 1):  # one iteration: the estimate depends on the random start
        torch.manual_seed(global_seed)
        results.append(
            hessian_top_direction(instance, 1, generator=torch.Generator().manual_seed(7))
        )
    assert results[0][0] == results[1][0]
    torch.testing.assert_close(results[0][1], results[1][1], rtol=0, atol=0)


def test_hessian_power_iteration_of_a_constant_loss_is_zero(generator):
    """With zero inputs every state is 0 whatever w is: the loss is ||y||^2 / 2, flat in w."""
    instance = random_regression_instance(
        0.7, input_size=2, hidden_size=3, seq_len=4, generator=generator
    )
    instance.inputs.zero_()
    norm, direction = hessian_top_direction(instance, generator=generator)
    assert norm == 0.0 and float(direction.norm()) == pytest.approx(1.0, rel=1e-12)


def test_lipschitz_ratio_by_hand(generator):
    """w' = Proj(w + r d / ||d||) built by hand, gradients by central differences."""
    instance = random_regression_instance(
        0.9, family="aligned", input_size=2, hidden_size=3, seq_len=8, generator=generator
    )
    direction = torch.randn(15, generator=generator, dtype=torch.float64)
    ratio = lipschitz_ratio(instance, 4.0 * direction, 0.5)
    W, U = instance.model.weight_hh.detach(), instance.model.weight_ih.detach()
    step = 0.5 * direction / direction.norm()
    W2 = project_spectral_ball(W + step[:9].reshape(3, 3), instance.lam)  # L_rho = 1 (tanh)
    U2 = project_spectral_ball(U + step[9:].reshape(3, 2), instance.lx)
    other = copy.deepcopy(instance.model)
    with torch.no_grad():
        other.weight_hh.copy_(W2)
        other.weight_ih.copy_(U2)
    moved = RegressionInstance(other, instance.inputs, instance.target)
    gap = finite_difference_gradient(instance) - finite_difference_gradient(moved)
    distance = math.sqrt(float(((W - W2) ** 2).sum() + ((U - U2) ** 2).sum()))
    assert ratio == pytest.approx(float(gap.norm()) / distance, rel=1e-6)
    assert lipschitz_ratio(instance, direction, 0.5) == pytest.approx(ratio, rel=1e-12)


def test_gradient_gap_experiment_holds_and_feeds_figure_1a():
    result = gradient_gap_experiment(
        [0.5, 0.9], [1, 3, 8, 20], num_instances=3, seq_len=40, progress=False
    )
    assert result.measured.shape == (2, 3, 4)
    assert result.holds()
    assert np.all(result.tightness() <= 1.0)
    figure = lemma_plots.gradient_gap_figure(result)
    assert isinstance(figure, Figure) and len(figure.axes) == 2


def test_gradient_gap_holds_detects_a_violation():
    result = gradient_gap_experiment([0.5], [2], num_instances=1, progress=False)
    result.measured[...] = 1.01 * result.bound
    assert not result.holds()


def test_hessian_power_iteration_finds_the_top_eigenvalue(generator):
    instance = random_regression_instance(
        0.8, input_size=2, hidden_size=3, seq_len=10, generator=generator
    )
    model = instance.model

    def loss_of(w):
        size = model.weight_hh.numel()
        with torch.no_grad():
            saved = (model.weight_hh.clone(), model.weight_ih.clone())
        try:
            state = torch.zeros(1, 3, dtype=torch.float64)
            W, U = w[:size].reshape(3, 3), w[size:].reshape(3, 2)
            for x in instance.inputs:
                state = torch.tanh(state @ W.T + x @ U.T)
            return 0.5 * ((state[0] - instance.target) ** 2).sum()
        finally:
            model.weight_hh.data, model.weight_ih.data = saved

    hessian = torch.autograd.functional.hessian(loss_of, flat_parameters(model))
    expected = float(torch.linalg.eigvalsh(hessian).abs().max())
    norm, direction = hessian_top_direction(instance, iterations=200, generator=generator)
    assert norm == pytest.approx(expected, rel=1e-6)
    assert float(direction.norm()) == pytest.approx(1.0)


def test_lipschitz_ratio_stays_in_omega_and_below_beta(generator):
    instance = random_regression_instance(0.9, family="aligned", generator=generator)
    beta = bounds.lemma3_beta(instance.constants())
    _, top = hessian_top_direction(instance, generator=generator)
    for radius in (1e-4, 1e-1, 10.0):
        ratio = lipschitz_ratio(instance, top, radius)
        assert 0 < ratio <= beta
    with pytest.raises(ValueError, match="radius"):
        lipschitz_ratio(instance, top, 0.0)


def test_smoothness_experiment_holds_and_grows():
    result = smoothness_experiment(
        [0.5, 0.8, 0.9],
        family="aligned",
        activation="identity",
        num_instances=2,
        progress=False,
    )
    assert result.holds()
    assert np.all(result.tightness() <= 1.0)
    # the aligned linear RNN shows the polynomial blow-up in 1 / (1 - lambda)
    assert result.growth_exponent() > 2.5
    assert result.growth_exponent(result.betas) >= result.growth_exponent() - 0.5
    figure = lemma_plots.smoothness_figure([result], ["linear, aligned"])
    assert isinstance(figure, Figure)


# ----------------------------------------------------------------------------- figures


def test_truncation_figures_and_widget_frame():
    stable = truncation_experiment([0.5, 0.9], [1, 4, 8], num_instances=2, progress=False)
    assert len(lemma_plots.truncation_figure(stable).axes) == 2
    unstable = truncation_experiment([0.9, 3.0], [1, 4, 8], num_instances=2, progress=False)
    assert isinstance(lemma_plots.unstable_truncation_figure(unstable), Figure)
    frame = lemma_plots.truncation_frame(0.8, 0.5, ks=[1, 2, 4], num_instances=1)
    assert isinstance(frame, Figure)


def _plotted_curves(figure: Figure) -> list[np.ndarray]:
    return [np.asarray(line.get_ydata()) for line in figure.axes[0].get_lines()]


def test_gradient_gap_frame_follows_its_sliders():
    ks = (1, 3, 8)
    frame = lemma_plots.gradient_gap_frame(0.8, 1.0, ks=ks, seq_len=30)
    assert isinstance(frame, Figure) and len(frame.axes) == 2
    assert frame.axes[0].get_ylim() == (1e-17, 1e10)  # fixed, so that frames compare by eye
    measured, bound = _plotted_curves(frame)[:2]  # first instance: solid gap, dashed bound
    instance = random_regression_instance(
        0.8, seq_len=30, generator=torch.Generator().manual_seed(0)
    )
    constants = instance.constants()
    gamma = bounds.lemma2_gamma(constants)
    expected = [bounds.lemma2_gradient_bound(gamma, k, constants.lam) for k in ks]
    np.testing.assert_allclose(bound, expected, rtol=1e-12)
    assert np.all(measured <= bound)
    for lam, input_bound in ((0.5, 1.0), (0.8, 3.0)):
        other = lemma_plots.gradient_gap_frame(lam, input_bound, ks=ks, seq_len=30)
        assert not np.allclose(_plotted_curves(other)[1], bound)  # the slider changes the bound
        assert not np.allclose(_plotted_curves(other)[0], measured)  # and the measurement


# ----------------------------------------------------------------------------- sympy


def test_geometric_series_behind_the_state_bound():
    series, closed, limit = lemma_algebra.state_norm_series()
    lam, s = lemma_algebra.lam, lemma_algebra.s
    values = {lam: sp.Rational(3, 5), s: 7, lemma_algebra.Lx: 2, lemma_algebra.Bx: 3}
    assert sp.simplify(series.subs(values).doit() - closed.subs(values)) == 0
    assert float(limit.subs(values)) == pytest.approx(bounds.state_norm_bound(0.6, 2.0, 3.0))


def test_solving_lemma1_for_k():
    solution = lemma_algebra.lemma1_context_solution()
    assert lemma_algebra.same_expression(solution, lemma_algebra.lemma1_context_closed_form())
    assert not lemma_algebra.same_expression(
        solution, 2 * lemma_algebra.lemma1_context_closed_form()
    )
    values = {
        lemma_algebra.lam: 0.9,
        lemma_algebra.Lx: 1.5,
        lemma_algebra.Bx: 2.0,
        lemma_algebra.eps: 1e-3,
    }
    assert math.ceil(float(solution.subs(values))) == bounds.lemma1_context(0.9, 1.5, 2.0, 1e-3)


def test_geometric_identities():
    for total, closed in lemma_algebra.geometric_identities().values():
        assert sp.simplify(lemma_algebra.evaluate_sum(total) - closed) == 0


@pytest.mark.parametrize("seed", range(5))
def test_symbolic_constants_match_the_float_functions(seed):
    rng = np.random.default_rng(seed)
    lam, lx, bx, lp, sp_, l_rho, l2_rho = rng.uniform(0.05, 0.95), *rng.uniform(0.1, 3.0, 6)
    values = {
        lemma_algebra.lam: lam,
        lemma_algebra.Lx: lx,
        lemma_algebra.Bx: bx,
        lemma_algebra.Lp: lp,
        lemma_algebra.Sp: sp_,
        lemma_algebra.L_rho: l_rho,
        lemma_algebra.L2_rho: l2_rho,
    }
    constants = bounds.GradientConstants(lam, lx, bx, lp, sp_, l_rho, l2_rho)
    gamma = lemma_algebra.unfold_state_bounds(lemma_algebra.lemma2_gamma_expression())
    beta = lemma_algebra.unfold_state_bounds(lemma_algebra.lemma3_beta_expression())
    assert float(gamma.subs(values)) == pytest.approx(bounds.lemma2_gamma(constants), rel=1e-12)
    assert float(beta.subs(values)) == pytest.approx(bounds.lemma3_beta(constants), rel=1e-12)


def test_rnn_growth_orders_with_the_states_unfolded():
    """sympy's limits against log-slopes of the float gamma, beta (L_p, S_p fixed)."""
    orders = {False: (3, 5), True: (2, 4)}
    gamma = lemma_algebra.unfold_state_bounds(lemma_algebra.lemma2_gamma_expression())
    beta = lemma_algebra.unfold_state_bounds(lemma_algebra.lemma3_beta_expression())
    for linear, (n_gamma, n_beta) in orders.items():
        assert lemma_algebra.growth_exponent(gamma, linear) == n_gamma
        assert lemma_algebra.growth_exponent(beta, linear) == n_beta
        l2_rho = 0.0 if linear else bounds.activation_smoothness("tanh")

        near, nearer = (
            bounds.GradientConstants(1 - theta, 1.2, 0.8, 1.5, 0.7, 1.0, l2_rho)
            for theta in (1e-4, 1e-5)
        )
        slopes = [
            math.log10(bound(nearer) / bound(near))
            for bound in (bounds.lemma2_gamma, bounds.lemma3_beta)
        ]
        assert slopes == pytest.approx([n_gamma, n_beta], abs=0.01)
