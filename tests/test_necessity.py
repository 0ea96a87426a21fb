"""The necessity direction (Chapter 5): a truncation gap forces non-vanishing Jacobians."""

import math

import pytest
import torch

from stablernn_lib.core.contraction import project_spectral_ball
from stablernn_lib.core.models import LinearRNN, VanillaRNN
from stablernn_lib.core.truncation import truncated_states
from stablernn_lib.symbolic.lemma_algebra import same_expression
from stablernn_lib.theory import necessity

DTYPE = torch.float64
TOL = 1e-9  # float64 round-off over a few dozen steps


def random_rnn(hidden: int, spectral_norm: float, seed: int, linear: bool = False) -> VanillaRNN:
    generator = torch.Generator().manual_seed(seed)
    model = LinearRNN(2, hidden, dtype=DTYPE) if linear else VanillaRNN(2, hidden, dtype=DTYPE)
    with torch.no_grad():
        weight = torch.randn(hidden, hidden, generator=generator, dtype=DTYPE)
        model.weight_hh.copy_(weight * spectral_norm / torch.linalg.matrix_norm(weight, ord=2))
        model.weight_ih.copy_(torch.randn(hidden, 2, generator=generator, dtype=DTYPE))
    return model


def random_inputs(length: int, seed: int, scale: float = 1.0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return scale * torch.randn(length, 1, 2, generator=generator, dtype=DTYPE)


@pytest.mark.parametrize("k", [1, 3, 7])
def test_the_window_map_from_zero_is_the_truncated_state(k):
    model, inputs = random_rnn(4, 1.7, seed=k), random_inputs(12, seed=k)
    window = inputs[-k:, 0]
    from_zero = necessity.window_map(model, window, torch.zeros(4, dtype=DTYPE))
    with torch.no_grad():
        expected = truncated_states(model, inputs, k)[-1, 0]
        full = model.run(inputs)[:, 0]
    assert torch.allclose(from_zero, expected, atol=TOL, rtol=0)
    # and from h_{T-k} it is the full model's state
    assert torch.allclose(necessity.window_map(model, window, full[-k - 1]), full[-1], atol=TOL)


@pytest.mark.parametrize("seed", range(4))
def test_the_gap_is_bounded_by_the_largest_jacobian_on_the_segment(seed):
    """Part 2 on random unstable tanh RNNs: gap <= max_theta ||D Phi_k(theta h)|| ||h||."""
    model, inputs = random_rnn(3, 3.0, seed), random_inputs(30, seed, scale=0.5)
    for row in necessity.necessity_table(model, inputs, [1, 2, 4, 8], num_points=201):
        assert row.gap <= row.mean_value_bound * (1 + 1e-3) + TOL
        assert row.gap <= row.largest_jacobian_norm * row.state_norm * (1 + 1e-3) + TOL
        # part 3: the Chapter 2 product bound turns the gap into a lower bound on ||W||_2
        spectral = float(torch.linalg.matrix_norm(model.weight_hh.detach(), ord=2))
        if row.gap > 0:
            lower = necessity.rnn_norm_lower_bound(row.gap, row.state_norm, row.k)
            assert spectral >= lower * (1 - 1e-9)


def test_adversarial_inputs_do_not_break_the_mean_value_bound():
    """Search the inputs for the largest ratio gap / (max Jacobian * ||h||); it stays <= 1."""
    model = random_rnn(2, 2.5, seed=11)
    generator = torch.Generator().manual_seed(5)
    worst = 0.0
    for _ in range(40):
        inputs = torch.randn(10, 1, 2, generator=generator, dtype=DTYPE) * 2.0
        (row,) = necessity.necessity_table(model, inputs, [3], num_points=201)
        if row.state_norm > 0:
            worst = max(worst, row.gap / (row.largest_jacobian_norm * row.state_norm))
    assert 0.0 < worst <= 1 + 1e-3


def test_in_one_dimension_the_mean_value_identity_is_exact():
    """For a monotone one-unit map the gap equals the integral of the Jacobian along the
    segment, so a wrongly computed Jacobian product would show up here."""
    model = necessity.bistable_rnn(1.5)
    inputs = torch.tensor([[[2.0]], [[-0.3]], [[0.4]], [[0.1]], [[-0.2]]], dtype=DTYPE)
    for row in necessity.necessity_table(model, inputs, [1, 2, 3], num_points=4001):
        assert row.mean_value_bound == pytest.approx(row.gap, rel=1e-5)


def test_a_linear_map_attains_the_bound():
    model = random_rnn(3, 1.3, seed=2, linear=True)
    weight = model.weight_hh.detach()
    k = 4
    power = torch.linalg.matrix_power(weight, k)
    # start along the top right singular vector of W^k: ||W^k h|| = ||W^k|| ||h||
    start = torch.linalg.svd(power).Vh[0] * 2.0
    profile = necessity.segment_profile(model, torch.zeros(k, 2, dtype=DTYPE), start, 11)
    attained = profile.largest_jacobian_norm * profile.start_norm
    assert profile.gap == pytest.approx(attained, rel=1e-9)
    assert torch.allclose(profile.jacobian_norms, profile.jacobian_norms[0].expand(11), rtol=1e-9)


def test_contraction_forces_the_gap_below_lambda_to_the_k():
    """Part 1, the contrapositive: a contractive tanh RNN has gap <= lambda^k ||h_{T-k}||."""
    model = random_rnn(5, 1.0, seed=3)
    with torch.no_grad():
        model.weight_hh.copy_(project_spectral_ball(model.weight_hh * 2.0, 0.8))
    lam = float(torch.linalg.matrix_norm(model.weight_hh.detach(), ord=2))
    assert lam <= 0.8 + TOL
    inputs = random_inputs(40, seed=4, scale=2.0)
    for row in necessity.necessity_table(model, inputs, [1, 5, 10, 20], num_points=3):
        assert row.gap <= lam**row.k * row.state_norm + TOL


def test_a_bistable_unit_is_never_approximated_though_its_trajectory_gradients_vanish():
    weight = 2.0
    model = necessity.bistable_rnn(weight)
    h_star = necessity.attracting_fixed_point(weight)
    slope = weight * (1 - h_star**2)
    assert slope < 0.17
    rows = necessity.necessity_table(model, necessity.pulse(150), [1, 10, 40, 100], num_points=51)
    for row in rows:
        assert row.gap == pytest.approx(h_star, rel=1e-9)  # h^k_T = 0: zero is a fixed point
        # part 2: some state on the segment has a k-step Jacobian >= gap / ||h||; here the
        # largest is the unstable fixed point 0, the truncated model's own state: w^k
        assert row.largest_jacobian_norm >= row.gap / row.state_norm
        assert row.largest_jacobian_norm == pytest.approx(weight**row.k, rel=1e-9)
        # along the trajectory the model actually follows, the products vanish
        assert row.jacobian_on_trajectory <= 1.0001 * slope**row.k


def test_the_memory_line_neither_vanishes_nor_explodes():
    rows = necessity.necessity_table(
        necessity.memory_line(), necessity.pulse(80, amplitude=1.0), [1, 20, 79], num_points=5
    )
    for row in rows:
        assert row.gap == pytest.approx(1.0, abs=TOL)
        assert row.largest_jacobian_norm == pytest.approx(1.0, abs=TOL)
        assert row.jacobian_on_trajectory == pytest.approx(1.0, abs=TOL)
        assert necessity.rnn_norm_lower_bound(row.gap, row.state_norm, row.k) == pytest.approx(1.0)


def test_the_algebra_checks_with_sympy():
    solution, closed = necessity.contraction_context_solution()
    assert same_expression(solution, closed)
    assert necessity.root_limit() == 1
    assert necessity.chain_rule_on_segment() == 0
    point, slope = necessity.fixed_point_slope(2.0)
    assert point == pytest.approx(necessity.attracting_fixed_point(2.0), abs=1e-12)
    assert slope == pytest.approx(2.0 * (1 - point**2), rel=1e-12) and slope < 1
    assert math.tanh(2.0 * point) == pytest.approx(point, abs=1e-12)


def test_bad_arguments_are_refused_with_a_clear_message():
    model = necessity.bistable_rnn()
    with pytest.raises(ValueError, match="1 <= k < T"):
        necessity.necessity_table(model, necessity.pulse(5), [5])
    with pytest.raises(ValueError, match="one sequence"):
        necessity.necessity_table(model, torch.zeros(5, 2, 1, dtype=DTYPE), [1])
    with pytest.raises(ValueError, match="w > 1"):
        necessity.attracting_fixed_point(0.5)
    with pytest.raises(ValueError, match="num_points"):
        window, start = torch.zeros(1, 1, dtype=DTYPE), torch.ones(1, dtype=DTYPE)
        necessity.segment_profile(model, window, start, 1)


def test_batched_window_jacobians_match_one_at_a_time_autograd():
    """The batched Jacobians against torch's per-state Jacobian of Phi_k (another path)."""
    model, window = random_rnn(3, 2.0, seed=4), random_inputs(5, seed=9)[:, 0]
    states = torch.randn(6, 3, generator=torch.Generator().manual_seed(1), dtype=DTYPE)
    batched = necessity.window_jacobians(model, window, states)
    assert batched.shape == (6, 3, 3)
    for state, jacobian in zip(states, batched, strict=True):
        single = torch.autograd.functional.jacobian(
            lambda s: necessity.window_map(model, window, s), state
        )
        assert torch.allclose(jacobian, single, atol=1e-12, rtol=1e-12)
    # the states differ, so the Jacobians do: a batch mixed up across states would show
    assert float((batched[0] - batched[1]).abs().max()) > 1e-3


@pytest.mark.parametrize("num_points", [2, 7])
def test_linear_segment_profile_against_the_closed_form(num_points):
    """For h' = W h + U x, Phi_k(h) - Phi_k(0) = W^k h whatever the inputs, and
    D Phi_k = W^k everywhere: the gap, every integrand value and the trapezoid integral
    equal ||W^k h|| (closed form), also with two points only."""
    model = random_rnn(3, 1.3, seed=5, linear=True)
    window = random_inputs(4, seed=6, scale=2.0)[:, 0]  # nonzero inputs: Phi_k(0) != 0
    start = torch.tensor([0.5, -1.0, 2.0], dtype=DTYPE)
    power = torch.linalg.matrix_power(model.weight_hh.detach(), 4)
    exact = float(torch.linalg.vector_norm(power @ start))
    from_zero = necessity.window_map(model, window, 0 * start).detach()
    assert float(torch.linalg.vector_norm(from_zero)) > 0.1
    profile = necessity.segment_profile(model, window, start, num_points)
    assert profile.gap == pytest.approx(exact, rel=1e-12)
    assert profile.integral == pytest.approx(exact, rel=1e-12)
    assert profile.integrand.shape == (num_points,)
    assert torch.allclose(profile.integrand, torch.full((num_points,), exact, dtype=DTYPE))
    assert profile.thetas.dtype == DTYPE
    assert torch.equal(profile.thetas, torch.linspace(0.0, 1.0, num_points, dtype=DTYPE))
    assert profile.start_norm == pytest.approx(float(torch.linalg.vector_norm(start)))


def test_the_window_map_returns_a_state_vector():
    model, window = random_rnn(4, 1.0, seed=1), random_inputs(3, seed=2)[:, 0]
    assert necessity.window_map(model, window, torch.zeros(4, dtype=DTYPE)).shape == (4,)


def test_norm_lower_bound_value_and_tightness():
    """(gap / B)^(1/k): a value by hand, and exact on h' = a h (gap = a^k B)."""
    assert necessity.rnn_norm_lower_bound(0.27, 3.0, 2) == pytest.approx(0.3, rel=1e-12)
    for a, k, bound in [(0.7, 5, 2.0), (1.4, 3, 0.5)]:
        assert necessity.rnn_norm_lower_bound(a**k * bound, bound, k) == pytest.approx(a)


def test_the_chapter_instances_are_the_ones_documented():
    """bistable_rnn() is h' = tanh(2 h + x); pulse(n) puts 3 at t = 1; defaults of
    fixed_point_slope are weight 2; at weight 1 there is no attracting nonzero point."""
    model = necessity.bistable_rnn()
    h, x = torch.tensor([[0.4]], dtype=DTYPE), torch.tensor([[-0.7]], dtype=DTYPE)
    assert float(model.step(h, x)) == pytest.approx(math.tanh(2.0 * 0.4 - 0.7), rel=1e-12)
    assert torch.equal(necessity.pulse(4)[:, 0, 0], torch.tensor([3.0, 0, 0, 0], dtype=DTYPE))
    assert necessity.fixed_point_slope() == pytest.approx(necessity.fixed_point_slope(2.0))
    assert necessity.fixed_point_slope()[0] == pytest.approx(0.957504, abs=1e-6)
    with pytest.raises(ValueError, match="w > 1"):
        necessity.attracting_fixed_point(1.0)


def test_the_table_shows_the_ratio_the_theorem_bounds():
    """One row by hand: gap / state norm is printed (not the gap twice), and a zero state
    norm does not divide by zero."""
    row = necessity.NecessityRow(
        k=3, gap=0.5, state_norm=2.0, largest_jacobian_norm=0.75,
        jacobian_on_trajectory=0.125, mean_value_bound=0.6,
    )  # fmt: skip
    zero = necessity.NecessityRow(k=1, gap=0.0, state_norm=0.0, largest_jacobian_norm=1.0,
                                  jacobian_on_trajectory=1.0, mean_value_bound=0.0)  # fmt: skip
    small = necessity.NecessityRow(k=2, gap=0.25, state_norm=0.5, largest_jacobian_norm=1.0,
                                   jacobian_on_trajectory=1.0, mean_value_bound=0.3)  # fmt: skip
    lines = necessity.table_markdown([row, zero, small]).splitlines()
    assert lines[0] == (
        "| k | gap at T | gap / state norm | largest Jacobian on the segment "
        "| Jacobian on the trajectory |"
    )
    assert lines[1] == "| ---: | ---: | ---: | ---: | ---: |"
    assert lines[2] == "| 3 | 0.5000 | 0.2500 | 0.75 | 0.125 |"
    assert lines[3] == "| 1 | 0.0000 | 0.0000 | 1 | 1 |"
    assert lines[4] == "| 2 | 0.2500 | 0.5000 | 1 | 1 |"  # a state norm below 1 divides too
    assert len(lines) == 5


def test_contraction_context_in_the_chapter_notation_has_the_right_value():
    """Both forms, evaluated through the chapter's symbol names, at c = 2, lambda = 1/2,
    B = 3, eps = 0.01: k = log(600) / log(2) (by hand)."""
    values = {"c": 2.0, "lambda": 0.5, "B": 3.0, "varepsilon": 0.01}
    for expression in necessity.contraction_context_solution():
        names = {s.name: s for s in expression.free_symbols}
        assert set(names) == set(values)
        number = float(expression.subs({names[n]: v for n, v in values.items()}))
        assert number == pytest.approx(math.log(600.0) / math.log(2.0), rel=1e-12)
