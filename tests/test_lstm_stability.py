"""Tests of the LSTM contraction certificate, its projection and the authors' rescaling."""

from __future__ import annotations

import math

import pytest
import sympy as sp
import torch
from tolerances import close_kwargs
from torch import nn

from stablernn_lib.core.contraction import state_jacobians
from stablernn_lib.core.models import LSTMMap, random_lstm
from stablernn_lib.core.norms import ACTIVATION_LIPSCHITZ
from stablernn_lib.symbolic import contraction_algebra as ss
from stablernn_lib.theory import lstm_certificate as ls

# ----------------------------------------------------------------------------
# The l1-ball projection
# ----------------------------------------------------------------------------


def _random_points_in_l1_ball(n: int, dim: int, radius: float, generator) -> torch.Tensor:
    """Points of the ball: random directions scaled to a random l1-norm in [0, radius],
    half of them on the boundary, some sparse."""
    points = torch.randn(n, dim, generator=generator, dtype=torch.float64)
    points[: n // 4] *= (torch.rand(n // 4, dim, generator=generator) < 0.3).double()
    points[: n // 4, 0] += 1.0
    scale = torch.rand(n, 1, generator=generator, dtype=torch.float64)
    scale[n // 2 :] = 1.0
    return radius * scale * points / points.abs().sum(dim=1, keepdim=True)


@pytest.mark.parametrize("radius", [0.0, 0.3, 1.0, 5.0])
def test_l1_projection_lands_in_ball_and_is_idempotent(radius, generator):
    vectors = 3 * torch.randn(200, 7, generator=generator, dtype=torch.float64)
    projected = ls.project_l1_ball(vectors, radius)
    assert (projected.abs().sum(dim=1) <= radius + 1e-12).all()
    torch.testing.assert_close(ls.project_l1_ball(projected, radius), projected)
    outside = vectors.abs().sum(dim=1) > radius
    torch.testing.assert_close(
        projected[outside].abs().sum(dim=1), torch.full_like(projected[outside, 0], radius)
    )


def test_l1_projection_leaves_points_of_the_ball_unchanged(generator):
    points = _random_points_in_l1_ball(100, 5, 2.0, generator)
    torch.testing.assert_close(ls.project_l1_ball(points, 2.0), points)


def test_l1_projection_is_the_nearest_point_of_the_ball(generator):
    vectors = 2 * torch.randn(50, 6, generator=generator, dtype=torch.float64)
    projected = ls.project_l1_ball(vectors, 1.0)
    candidates = _random_points_in_l1_ball(2000, 6, 1.0, generator)
    distance_to_projection = (vectors - projected).norm(dim=1)
    distances = torch.cdist(vectors, candidates)
    assert (distance_to_projection[:, None] <= distances + 1e-12).all()
    # the obtuse-angle characterisation <v - P v, a - P v> <= 0 for every a in the ball
    inner = ((vectors - projected)[:, None, :] * (candidates[None] - projected[:, None])).sum(-1)
    assert inner.max() <= 1e-12


def test_l1_projection_matches_a_bisection_on_the_threshold(generator):
    v = torch.randn(9, generator=generator, dtype=torch.float64) * 3
    low, high = 0.0, float(v.abs().max())
    for _ in range(200):
        theta = 0.5 * (low + high)
        if float((v.abs() - theta).clamp(min=0).sum()) > 1.5:
            low = theta
        else:
            high = theta
    expected = v.sign() * (v.abs() - high).clamp(min=0)
    torch.testing.assert_close(ls.project_l1_ball(v, 1.5), expected)


def test_l1_projection_rejects_bad_input():
    with pytest.raises(ValueError, match="radius"):
        ls.project_l1_ball(torch.ones(3), -1.0)
    with pytest.raises(TypeError, match="floating"):
        ls.project_l1_ball(torch.ones(3, dtype=torch.int64), 1.0)


def test_row_projection_is_the_frobenius_projection_onto_the_inf_norm_ball(generator):
    matrix = torch.randn(6, 4, generator=generator, dtype=torch.float64)
    projected = ls.project_rows_l1_(matrix.clone(), 0.8)
    assert ls.induced_norm(projected, math.inf) <= 0.8 + 1e-12
    for _ in range(300):
        rows = _random_points_in_l1_ball(6, 4, 0.8, generator)
        assert (matrix - projected).norm() <= (matrix - rows).norm() + 1e-12


def test_bias_sum_projection_is_the_halfspace_projection(generator):
    first = torch.randn(10, generator=generator, dtype=torch.float64)
    second = torch.randn(10, generator=generator, dtype=torch.float64)
    before = torch.stack([first, second])
    ls.project_bias_sum_([first, second], upper=0.0)
    after = torch.stack([first, second])
    assert ((first + second) <= 1e-12).all()
    for _ in range(200):
        candidate = torch.randn(2, 10, generator=generator, dtype=torch.float64)
        candidate[1] = torch.minimum(candidate[1], -candidate[0])  # sum <= 0
        assert float(((before - after) * (candidate - after)).sum()) <= 1e-12


# ----------------------------------------------------------------------------
# The fast projection against the previous, per-gate implementation
# ----------------------------------------------------------------------------


def _reference_l1_rows(vectors: torch.Tensor, radius: float) -> torch.Tensor:
    """The sort-based l1-ball projection of every row, one radius (the previous code)."""
    radius_t = torch.as_tensor(radius, dtype=vectors.dtype)
    magnitudes = vectors.abs()
    inside = magnitudes.sum(dim=-1, keepdim=True) <= radius_t
    sorted_desc = magnitudes.sort(dim=-1, descending=True).values
    cumulative = sorted_desc.cumsum(dim=-1)
    ks = torch.arange(1, vectors.shape[-1] + 1, dtype=vectors.dtype)
    k_star = (sorted_desc > (cumulative - radius_t) / ks).to(torch.int64)
    k_star = k_star.mul(torch.arange(1, vectors.shape[-1] + 1)).max(-1, keepdim=True).values
    k_star = k_star.clamp(min=1)
    theta = (cumulative.gather(-1, k_star - 1) - radius_t) / k_star.to(vectors.dtype)
    return torch.where(inside, vectors, vectors.sign() * (magnitudes - theta).clamp(min=0))


def _reference_projection_(weight_hh, weight_ih, biases, constraint) -> None:
    """The previous ``project_lstm_weights_``: a loop over gates, one projection per block."""
    W, U = ls.gate_blocks(weight_hh), ls.gate_blocks(weight_ih)
    for g in ls.GATES:
        for block, radius in (
            (W[g], constraint.recurrent_radius[g]),
            (U[g], constraint.input_radius[g]),
        ):
            if radius != math.inf:
                block.copy_(_reference_l1_rows(block, radius))
        bound, lower = constraint.bias_max[g], constraint.lower_bias()[g]
        if (math.isfinite(bound) or math.isfinite(lower)) and biases:
            blocks = [ls.gate_blocks(b)[g] for b in biases]
            total = sum(blocks)
            excess = (total - total.clamp(min=lower, max=bound)) / len(blocks)
            for block in blocks:
                block.sub_(excess)


_GAPPED = ls.LSTMConstraint(  # free gates between constrained ones, a two-sided z bias
    recurrent_radius={"i": 0.3, "f": math.inf, "z": 0.2, "o": 0.5},
    input_radius={"i": 0.4, "f": math.inf, "z": math.inf, "o": 0.1},
    bias_max={"i": math.inf, "f": -0.5, "z": 0.3, "o": 1.0},
)

_LATE = ls.LSTMConstraint(  # the recurrent rows start at gate f: the first span has an offset
    recurrent_radius={"i": math.inf, "f": 0.2, "z": 0.3, "o": 0.4},
    input_radius={"i": 0.5, "f": 0.25, "z": math.inf, "o": math.inf},
    bias_max={"i": math.inf, "f": 0.0, "z": 1.0, "o": math.inf},
)


@pytest.mark.parametrize(
    ("hidden", "inputs", "dtype", "kwargs"),
    [
        (5, 4, torch.float64, {"constraint": _LATE}),
        (7, 7, torch.float32, {}),
        (7, 5, torch.float64, {}),
        (6, 9, torch.float32, {"lam": 0.9, "input_bound": 0.5}),
        (5, 3, torch.float64, {"constraint": _GAPPED}),
        (8, 8, torch.float32, {"constraint": _GAPPED, "input_bound": 2.0}),
    ],
)
def test_batched_projection_equals_the_per_gate_reference(hidden, inputs, dtype, kwargs, generator):
    if "constraint" in kwargs:
        constraint = kwargs["constraint"]
    elif "lam" in kwargs:
        constraint = ls.stable_lstm_constraint(kwargs["lam"], kwargs["input_bound"])
    else:
        constraint = ls.course_lstm_constraint()
    for scale in (0.01, 0.3, 3.0, 300.0):  # mostly inside, mixed, all outside the balls
        tensors = [
            scale * torch.randn(shape, generator=generator, dtype=dtype)
            for shape in ((4 * hidden, hidden), (4 * hidden, inputs), (4 * hidden,), (4 * hidden,))
        ]
        expected = [t.clone() for t in tensors]
        _reference_projection_(expected[0], expected[1], expected[2:], constraint)
        certified = ls.project_lstm_weights_(tensors[0], tensors[1], biases=tensors[2:], **kwargs)
        assert certified == constraint.contraction_bound(kwargs.get("input_bound", 1.0))
        # the batched projection and the per-block loop sum a row's sorted magnitudes in
        # different batch shapes: equal up to the rounding of a cumulative sum of a row
        operations = 4 * max(hidden, inputs)
        for got, want in zip(tensors, expected, strict=True):
            scale = float(want.abs().max())
            torch.testing.assert_close(got, want, **close_kwargs(dtype, operations, scale))


def test_batched_projection_handles_matrices_of_different_dtypes(generator):
    weight_hh = torch.randn(12, 3, generator=generator, dtype=torch.float64)
    weight_ih = torch.randn(12, 5, generator=generator)
    expected_hh, expected_ih = weight_hh.clone(), weight_ih.clone()
    _reference_projection_(expected_hh, expected_ih, (), ls.course_lstm_constraint())
    ls.project_lstm_weights_(weight_hh, weight_ih, biases=())
    for got, want, columns in ((weight_hh, expected_hh, 3), (weight_ih, expected_ih, 5)):
        tolerance = close_kwargs(got.dtype, 4 * columns, float(want.abs().max()))
        torch.testing.assert_close(got, want, **tolerance)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_projection_never_waits_for_the_gpu():
    lstm = nn.LSTM(6, 5).cuda()
    tensors = (lstm.weight_hh_l0, lstm.weight_ih_l0)
    biases = [lstm.bias_ih_l0, lstm.bias_hh_l0]
    ls.project_lstm_weights_(*tensors, biases=biases)  # first call: radii copied to the GPU
    torch.cuda.set_sync_debug_mode("error")
    try:
        ls.project_lstm_weights_(*tensors, biases=biases)
    finally:
        torch.cuda.set_sync_debug_mode("default")


# ----------------------------------------------------------------------------
# The certificate
# ----------------------------------------------------------------------------


def _differences_obey_the_entrywise_inequalities(model, input_bound, generator) -> None:
    certificate = ls.lstm_certificate(model, input_bound)
    states, x = ls.sample_box_states(model, input_bound, 300, generator)
    others, _ = ls.sample_box_states(model, input_bound, 300, generator)
    n = min(len(states), len(others))
    states, others, x = states[:n], others[:n], x[:n]
    H = model.hidden_size
    with torch.no_grad():
        gap_next = (model.step(states, x) - model.step(others, x)).abs()
    gap = (states - others).abs()
    A, G = certificate.cell_coupling, certificate.hidden_coupling
    f, o = certificate.forget_max, certificate.output_max
    cell_bound = f * gap[:, :H] + gap[:, H:] @ A.T
    hidden_bound = o * f * gap[:, :H] + gap[:, H:] @ G.T
    assert (gap_next[:, :H] <= cell_bound + 1e-10).all()
    assert (gap_next[:, H:] <= hidden_bound + 1e-10).all()


def _instances(generator):
    """Random LSTMs of several kinds and sizes, with an input bound each."""
    for hidden, inputs, bound in [(3, 2, 1.0), (8, 3, 0.5), (12, 4, 2.0)]:
        for lam in (0.5, 0.9, 0.99):
            yield ls.random_stable_lstm(inputs, hidden, lam, bound, generator=generator), bound
        for scale in (0.3, 1.0, 3.0):
            model = random_lstm(inputs, hidden, scale, generator=generator)
            yield model, bound
            projected = random_lstm(inputs, hidden, scale, generator=generator)
            ls.project_lstm_(projected, input_bound=bound, lam=0.9)
            yield projected, bound


def test_closed_form_jacobians_match_autograd(generator):
    model = random_lstm(3, 5, 1.0, generator=generator)
    states, x = ls.sample_box_states(model, 1.0, 30, generator)
    torch.testing.assert_close(
        ls.lstm_state_jacobians(model, states, x), state_jacobians(model, states, x).detach()
    )
    inputs = torch.rand(4, len(states), 3, generator=generator, dtype=torch.float64)

    def four_steps(state):
        for step_input in inputs:
            state = model.step(state, step_input)
        return state

    full = torch.autograd.functional.jacobian(four_steps, states)  # (N, S, N, S)
    blocks = torch.stack([full[n, :, n, :] for n in range(len(states))])
    torch.testing.assert_close(
        ls.iterated_jacobian_norms(model, states, inputs),
        torch.linalg.matrix_norm(blocks, ord=2),
    )


def test_the_box_is_invariant(generator):
    for model, bound in _instances(generator):
        certificate = ls.lstm_certificate(model, bound)
        if not torch.isfinite(certificate.cell_bound).all():
            continue
        states, x = ls.sample_box_states(model, bound, 300, generator, horizon=math.inf)
        with torch.no_grad():
            c, h = model.split_state(model.step(states, x))
        assert (c.abs() <= certificate.cell_bound * (1 + 1e-12)).all()
        assert (h.abs() <= 1).all()


def test_entrywise_difference_inequalities_hold(generator):
    for model, bound in _instances(generator):
        if math.isfinite(ls.lstm_contraction_bound(model, bound)):
            _differences_obey_the_entrywise_inequalities(model, bound, generator)


def test_measured_lipschitz_constant_never_exceeds_the_proved_bound(generator):
    checked = 0
    for model, bound in _instances(generator):
        lam = ls.lstm_contraction_bound(model, bound)
        if not math.isfinite(lam):
            continue
        states, x = ls.sample_box_states(model, bound, 150, generator)
        jacobian = float(ls.jacobian_certificate_norms(model, states, x, bound).max())
        assert jacobian <= lam + 1e-9
        for p in (1, 2, math.inf):
            lam_p = ls.lstm_contraction_bound(model, bound, p=p)
            assert ls.pair_lipschitz(model, bound, 300, generator, p=p) <= lam_p + 1e-9
        checked += 1
    assert checked >= 20


def test_the_measurement_can_exceed_a_wrong_bound(generator):
    """The forget gate alone (m11) is NOT a bound: the measurement finds the coupling."""
    model = ls.random_stable_lstm(3, 8, 0.95, 1.0, generator=generator)
    certificate = ls.lstm_certificate(model, 1.0)
    states, x = ls.sample_box_states(model, 1.0, 300, generator)
    measured = float(ls.jacobian_certificate_norms(model, states, x, 1.0).max())
    assert measured > float(certificate.matrix[0, 0])


def test_unconstrained_random_lstms_are_measured_expansive(generator):
    model = random_lstm(4, 16, 1.0, generator=generator)
    states, x = ls.sample_box_states(model, 1.0, 300, generator)
    assert float(ls.jacobian_certificate_norms(model, states, x, 1.0).max()) > 1.0
    assert ls.lstm_contraction_bound(model, 1.0) > 1.0


@pytest.mark.parametrize("lam", [0.55, 0.8, 0.95, 0.999])
@pytest.mark.parametrize("input_bound", [0.0, 1.0, 3.0])
def test_random_stable_lstm_attains_its_lambda(lam, input_bound, generator):
    model = ls.random_stable_lstm(3, 10, lam, input_bound, generator=generator)
    assert isinstance(model, LSTMMap)
    assert ls.lstm_contraction_bound(model, input_bound) == pytest.approx(lam, rel=1e-9)
    assert ls.lstm_contraction_bound(model, input_bound) <= lam


def test_certificate_is_the_perron_root_and_the_norm_matches_it(generator):
    model = ls.random_stable_lstm(2, 5, 0.9, 1.0, generator=generator)
    certificate = ls.lstm_certificate(model, 1.0)
    v = torch.tensor(certificate.weights, dtype=torch.float64)
    torch.testing.assert_close(certificate.matrix @ v, certificate.lam * v)
    assert max(certificate.weights) == pytest.approx(1.0)
    state = torch.randn(4, 10, generator=generator, dtype=torch.float64)
    expected = torch.maximum(state[:, :5].abs().amax(1) / v[0], state[:, 5:].abs().amax(1) / v[1])
    torch.testing.assert_close(ls.state_norm(model, state), expected)


def test_without_recurrent_weights_the_bound_is_the_forget_gate(generator):
    """Exercise ex-ch04-no-recurrence: lambda = max fbar, and the measurement reaches it."""
    model = random_lstm(3, 6, 1.0, generator=generator)
    with torch.no_grad():
        model.weight_hh.zero_()
    certificate = ls.lstm_certificate(model, 1.0)
    forget = float(certificate.forget_max.max())
    assert certificate.lam == pytest.approx(forget, abs=1e-9)
    unit = int(certificate.forget_max.argmax())
    x = torch.sign(ls.gate_blocks(model.weight_ih.detach())["f"][unit]).unsqueeze(0)
    state = torch.zeros(1, 12, dtype=torch.float64)
    jacobian = ls.jacobian_certificate_norms(model, state, x, 1.0)
    assert float(jacobian) == pytest.approx(forget, rel=1e-6)


def test_saturated_forget_gate_gives_no_bound():
    model = LSTMMap(2, 3, dtype=torch.float64)
    with torch.no_grad():
        ls.gate_blocks(model.bias)["f"].fill_(60.0)
    assert ls.lstm_contraction_bound(model, 1.0) == math.inf


# ----------------------------------------------------------------------------
# The constraint and its projection
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("lam", [0.7, 0.9, 0.99])
def test_stable_constraint_attains_lambda_and_bounds_every_member(lam, generator):
    constraint = ls.stable_lstm_constraint(lam, 1.0)
    assert constraint.contraction_bound(1.0) == pytest.approx(lam, rel=1e-9)
    for scale in (0.2, 1.0, 5.0):
        model = random_lstm(3, 9, scale, generator=generator)
        certified = ls.project_lstm_(model, constraint=constraint)
        assert ls.lstm_contraction_bound(model, 1.0) <= certified + 1e-12


def test_projection_on_torch_lstm_tensors(generator):
    torch.manual_seed(0)
    lstm = nn.LSTM(5, 7).double()
    with torch.no_grad():
        for param in lstm.parameters():
            param.mul_(10)
    certified = ls.project_lstm_weights_(
        lstm.weight_hh_l0,
        lstm.weight_ih_l0,
        input_bound=1.0,
        lam=0.9,
        biases=[lstm.bias_ih_l0, lstm.bias_hh_l0],
    )
    assert certified == pytest.approx(0.9)
    constraint = ls.stable_lstm_constraint(0.9, 1.0)
    W = ls.gate_blocks(lstm.weight_hh_l0)
    for g in ls.GATES:
        assert ls.induced_norm(W[g], math.inf) <= constraint.recurrent_radius[g] + 1e-12
    assert ls.induced_norm(ls.gate_blocks(lstm.weight_ih_l0)["f"], math.inf) <= 0.25 + 1e-12
    forget = ls.gate_blocks(lstm.bias_ih_l0 + lstm.bias_hh_l0)["f"]
    assert (forget <= 1e-12).all()
    model = LSTMMap.from_torch(lstm)
    assert ls.lstm_contraction_bound(model, 1.0) <= 0.9 + 1e-12
    # the projection is idempotent
    before = [p.detach().clone() for p in lstm.parameters()]
    ls.project_lstm_weights_(
        lstm.weight_hh_l0, lstm.weight_ih_l0, lam=0.9, biases=[lstm.bias_ih_l0, lstm.bias_hh_l0]
    )
    for old, new in zip(before, lstm.parameters(), strict=True):
        torch.testing.assert_close(old, new.detach())


def test_default_constraint_is_the_compact_course_set():
    constraint = ls.course_lstm_constraint()
    assert constraint.recurrent_radius == ls.AUTHORS_RECURRENT_SCALES
    assert constraint.is_compact and not ls.authors_constants_constraint().is_compact
    lam = constraint.contraction_bound(1.0)
    # the added bounds only lower lambda, and with generous constants barely
    assert lam <= ls.authors_constants_constraint().contraction_bound(1.0)
    assert 0.9 < lam < 0.95
    weight_hh, weight_ih = torch.ones(8, 2, dtype=torch.float64), torch.ones(8, 3)
    assert ls.project_lstm_weights_(weight_hh, weight_ih.double(), biases=()) == lam


def test_default_projection_lands_in_the_compact_set(generator):
    lstm = nn.LSTM(6, 5).double()
    with torch.no_grad():
        for param in lstm.parameters():
            param.copy_(1000 * torch.randn(param.shape, generator=generator, dtype=param.dtype))
    biases = [lstm.bias_ih_l0, lstm.bias_hh_l0]
    ls.project_lstm_weights_(lstm.weight_hh_l0, lstm.weight_ih_l0, biases=biases)
    constraint = ls.course_lstm_constraint()
    W, U = ls.gate_blocks(lstm.weight_hh_l0), ls.gate_blocks(lstm.weight_ih_l0)
    total = ls.gate_blocks((lstm.bias_ih_l0 + lstm.bias_hh_l0).detach())
    lower = constraint.lower_bias()
    for g in ls.GATES:
        # rounding of soft-thresholding entries of size ~1e3 in float64: ~1e-13 per row
        assert ls.induced_norm(W[g], math.inf) <= constraint.recurrent_radius[g] + 1e-9
        assert ls.induced_norm(U[g], math.inf) <= constraint.input_radius[g] + 1e-9
        assert float(total[g].max()) <= constraint.bias_max[g] + 1e-9
        assert float(total[g].min()) >= lower[g] - 1e-9
    model = LSTMMap.from_torch(lstm)
    assert ls.lstm_contraction_bound(model, 1.0) <= constraint.contraction_bound(1.0) + 1e-9


def test_compact_set_rejects_bad_bounds():
    with pytest.raises(ValueError, match="finite"):
        ls.course_lstm_constraint(input_radius=math.inf)
    with pytest.raises(ValueError, match="empty bias interval"):
        ls.LSTMConstraint(
            dict(ls.AUTHORS_RECURRENT_SCALES),
            {g: 1.0 for g in ls.GATES},
            {g: 0.0 for g in ls.GATES},
            {g: 1.0 for g in ls.GATES},
        )


def test_projection_rejects_bad_input():
    weight_hh, weight_ih = torch.zeros(8, 2), torch.zeros(8, 3)
    with pytest.raises(ValueError, match="biases="):
        ls.project_lstm_weights_(weight_hh, weight_ih)
    with pytest.raises(ValueError, match=r"\(4H, n\)"):
        ls.project_lstm_weights_(torch.zeros(7, 2), weight_ih, biases=())
    with pytest.raises(ValueError, match="same layer"):
        ls.project_lstm_weights_(weight_hh, torch.zeros(12, 3), biases=())
    with pytest.raises(ValueError, match="input_bound"):
        ls.project_lstm_weights_(weight_hh, weight_ih, input_bound=-1.0, biases=())
    with pytest.raises(ValueError, match="lam"):
        ls.project_lstm_weights_(weight_hh, weight_ih, lam=1.5, biases=())
    with pytest.raises(ValueError, match="forget"):
        ls.stable_lstm_constraint(0.3, 1.0)
    with pytest.raises(TypeError, match="LSTMMap"):
        ls.lstm_contraction_bound(nn.LSTM(2, 3), 1.0)
    with pytest.raises(ValueError, match="p must be"):
        ls.lstm_contraction_bound(LSTMMap(2, 3), 1.0, p=3)
    with pytest.raises(ValueError, match="per gate"):
        ls.LSTMConstraint({"i": 1.0}, {}, {})


# ----------------------------------------------------------------------------
# The authors' rescaling
# ----------------------------------------------------------------------------


def test_authors_rescaling_sets_the_column_sums(generator):
    weight_hh = torch.randn(4 * 6, 6, generator=generator, dtype=torch.float64)
    weight_ih = torch.randn(4 * 6, 3, generator=generator, dtype=torch.float64)
    embedding = 3 * torch.randn(10, 3, generator=generator, dtype=torch.float64)
    untouched = {g: block.clone() for g, block in ls.gate_blocks(weight_ih).items() if g != "f"}
    ls.authors_lstm_rescaling_(weight_hh, weight_ih, embedding)
    for g, c in ls.AUTHORS_RECURRENT_SCALES.items():
        column_sums = ls.gate_blocks(weight_hh)[g].abs().sum(dim=0)
        torch.testing.assert_close(column_sums, torch.full((6,), c, dtype=torch.float64))
        assert ls.induced_norm(ls.gate_blocks(weight_hh)[g], 1) == pytest.approx(c)
    forget_columns = ls.gate_blocks(weight_ih)["f"].abs().sum(dim=0)
    torch.testing.assert_close(forget_columns, torch.full((3,), 0.25, dtype=torch.float64))
    for g, block in untouched.items():
        torch.testing.assert_close(ls.gate_blocks(weight_ih)[g], block)
    assert embedding.abs().max() <= 1.0


def test_authors_rescaling_is_not_a_projection(generator):
    """It moves a matrix whose column sums are already below c (a projection would not)."""
    weight_hh = 1e-3 * torch.randn(8, 2, generator=generator, dtype=torch.float64)
    weight_ih = 1e-3 * torch.randn(8, 2, generator=generator, dtype=torch.float64)
    before = weight_hh.clone()
    ls.authors_lstm_rescaling_(weight_hh, weight_ih)
    assert not torch.allclose(before, weight_hh)


def test_concentrated_example_satisfies_the_authors_constraint_and_expands(generator):
    model = ls.concentrated_authors_lstm(4, 12)
    weight_hh, weight_ih = model.weight_hh.detach().clone(), model.weight_ih.detach().clone()
    ls.authors_lstm_rescaling_(weight_hh, weight_ih)
    torch.testing.assert_close(weight_hh, model.weight_hh.detach())
    torch.testing.assert_close(weight_ih, model.weight_ih.detach())
    states, x = ls.sample_box_states(model, 1.0, 200, generator)
    assert float(ls.jacobian_certificate_norms(model, states, x, 1.0).max()) > 1.0


def test_authors_rescaling_rejects_zero_columns():
    with pytest.raises(ValueError, match="zero column"):
        ls.authors_lstm_rescaling_(torch.zeros(8, 2), torch.ones(8, 3))


def test_forget_gate_threshold_is_where_the_bound_reaches_one():
    threshold = ls.forget_gate_threshold(ls.AUTHORS_RECURRENT_SCALES)
    assert 0.5 < threshold < 1
    radius = dict(ls.AUTHORS_RECURRENT_SCALES)
    # a set whose forget gate is bounded by exactly `threshold` (other gates free)
    forget_bias = math.log(threshold / (1 - threshold)) - radius["f"]
    at_threshold = ls.LSTMConstraint(
        recurrent_radius=radius,
        input_radius={g: 0.0 for g in ls.GATES},
        bias_max={"i": math.inf, "f": forget_bias, "z": math.inf, "o": math.inf},
    )
    assert at_threshold.contraction_bound(1.0) == pytest.approx(1.0, abs=1e-6)


# ----------------------------------------------------------------------------
# The sympy derivations
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["tanh", "sigmoid", "relu", "identity"])
def test_symbolic_lipschitz_constants_match_the_library(name):
    _, supremum = ss.activation_lipschitz_symbolic(name)
    assert float(supremum) == ACTIVATION_LIPSCHITZ[name]


def test_symbolic_identities_vanish():
    for value in ss.sigmoid_slope_facts().values():
        assert sp.simplify(value) == 0
    for value in ss.lstm_difference_identities().values():
        assert sp.simplify(value) == 0
    perron = ss.perron_2x2()
    assert perron["eigen_residual"] == sp.zeros(2, 1)


def test_symbolic_rejects_unknown_activation():
    with pytest.raises(ValueError, match="activation"):
        ss.activation_lipschitz_symbolic("swish")


def test_gate_norm_table_gives_both_induced_norms_of_every_block(generator):
    model = random_lstm(3, 4, generator=generator)
    lines = ls.gate_norm_table(model).splitlines()
    assert lines[:2] == ["| block | max column sum | max row sum |", "| --- | ---: | ---: |"]
    forget = ls.gate_blocks(model.weight_hh.detach())["f"]
    column_sum, row_sum = ls.induced_norm(forget, 1), ls.induced_norm(forget, math.inf)
    assert f"| `W_f` | {column_sum:.4f} | {row_sum:.4f} |" in lines
    assert [line.split(" | ")[0] for line in lines[2:7]] == [
        "| `W_i`",
        "| `W_f`",
        "| `W_z`",
        "| `W_o`",
        "| `U_f`",
    ]
    assert lines[-1].startswith("Forget bias in [")


def test_the_authors_data_set_idiom_leaves_the_parameter_unchanged_but_ours_does_not() -> None:
    """Chapter 8: the fork's ``weight.data.set_(new)`` rebinds a temporary tensor on current
    PyTorch, so the rule it meant to apply never reaches the parameter; the course's
    ``authors_lstm_rescaling_`` writes into the parameter itself."""
    torch.manual_seed(0)
    lstm = torch.nn.LSTM(3, 4)
    before = lstm.weight_hh_l0.detach().clone()
    lstm.weight_hh_l0.data.set_(torch.ones_like(before))
    assert torch.equal(lstm.weight_hh_l0.detach(), before)
    ls.authors_lstm_rescaling_(lstm.weight_hh_l0.data, lstm.weight_ih_l0.data)
    assert not torch.allclose(lstm.weight_hh_l0.detach(), before)
    sums = ls.gate_blocks(lstm.weight_hh_l0.detach())["f"].abs().sum(dim=0)
    assert torch.allclose(sums, torch.full_like(sums, ls.AUTHORS_RECURRENT_SCALES["f"]))


# ----------------------------------------------------------------------------
# Values by hand: the certificate and the set's worst case, in plain float64 Python
# ----------------------------------------------------------------------------


def _sigmoid(a: float) -> float:
    return 1 / (1 + math.exp(-a))


def _hand_certificate(weight_hh, weight_ih, bias, bound, p):
    """The theorem of chapter 4 unit by unit, in Python floats: ``(M, rho(M), Perron vector)``."""
    import numpy as np

    W, U, b = weight_hh.tolist(), weight_ih.tolist(), bias.tolist()
    H = len(W[0])
    row = {g: n * H for n, g in enumerate("ifzo")}
    r, slope, top = {}, {}, {}
    for g in "ifzo":
        r[g] = [
            sum(map(abs, W[row[g] + j])) + bound * sum(map(abs, U[row[g] + j])) for j in range(H)
        ]
        dist = [max(abs(b[row[g] + j]) - r[g][j], 0.0) for j in range(H)]
        if g == "z":
            top[g] = [math.tanh(abs(b[row[g] + j]) + r[g][j]) for j in range(H)]
            slope[g] = [1 - math.tanh(d) ** 2 for d in dist]
        else:
            top[g] = [_sigmoid(b[row[g] + j] + r[g][j]) for j in range(H)]
            slope[g] = [_sigmoid(d) * (1 - _sigmoid(d)) for d in dist]
    cell = [top["i"][j] * top["z"][j] / (1 - top["f"][j]) for j in range(H)]

    def w(g, j, k):
        return abs(W[row[g] + j][k])

    def a(j, k):
        through_i = slope["i"][j] * top["z"][j] * w("i", j, k)
        through_z = top["i"][j] * slope["z"][j] * w("z", j, k)
        return through_i + through_z + slope["f"][j] * cell[j] * w("f", j, k)

    A = np.array([[a(j, k) for k in range(H)] for j in range(H)])
    G = np.array([[top["o"][j] * A[j, k] + slope["o"][j] * math.tanh(cell[j]) * w("o", j, k)
                   for k in range(H)] for j in range(H)])  # fmt: skip
    M = np.array(
        [
            [max(top["f"]), np.linalg.norm(A, p)],
            [max(o * f for o, f in zip(top["o"], top["f"], strict=True)), np.linalg.norm(G, p)],
        ]
    )
    values, vectors = np.linalg.eig(M)
    top_index = int(np.argmax(values.real))
    vector = np.abs(vectors[:, top_index].real)
    return M, float(values[top_index].real), vector / vector.max(), cell, A, G


@pytest.mark.parametrize("p", [1, 2, math.inf])
@pytest.mark.parametrize("bound", [0.0, 0.7])
def test_certificate_equals_the_theorem_computed_unit_by_unit(p, bound, generator):
    """Three units, biases of both signs (some beyond the pre-activation radius)."""
    weight_hh = 0.3 * torch.randn(12, 3, generator=generator, dtype=torch.float64)
    weight_ih = 0.4 * torch.randn(12, 2, generator=generator, dtype=torch.float64)
    bias = [2.5, -0.3, 0.1, -2.0, 0.4, -3.0, 1.5, -0.8, 0.2, 0.0, -2.5, 3.0]
    bias = torch.tensor(bias, dtype=torch.float64)
    M, lam, vector, cell, A, G = _hand_certificate(weight_hh, weight_ih, bias, bound, p)
    certificate = ls.lstm_certificate_from_tensors(weight_hh, weight_ih, bias, bound, p)
    torch.testing.assert_close(certificate.matrix, torch.from_numpy(M), rtol=1e-12, atol=0)
    assert certificate.lam == pytest.approx(lam, rel=1e-12)
    assert certificate.weights == pytest.approx(tuple(vector), rel=1e-10)
    torch.testing.assert_close(certificate.cell_bound, torch.tensor(cell, dtype=torch.float64))
    torch.testing.assert_close(certificate.cell_coupling, torch.from_numpy(A))
    torch.testing.assert_close(certificate.hidden_coupling, torch.from_numpy(G))
    assert certificate.p == p and certificate.input_bound == bound
    assert certificate.unweighted_lam == pytest.approx(float(M.sum(axis=1).max()))
    i_max = torch.sigmoid(ls.gate_blocks(bias)["i"] + ls.gate_blocks(weight_hh.abs())["i"].sum(1)
                          + bound * ls.gate_blocks(weight_ih.abs())["i"].sum(1))  # fmt: skip
    torch.testing.assert_close(certificate.input_max, i_max)
    model = LSTMMap(2, 3, dtype=torch.float64)
    with torch.no_grad():
        model.weight_hh.copy_(weight_hh)
        model.weight_ih.copy_(weight_ih)
        model.bias.copy_(bias)
    assert ls.lstm_contraction_bound(model, bound, p) == pytest.approx(lam, rel=1e-12)
    assert ls.lstm_certificate(model, bound, p).matrix.tolist() == certificate.matrix.tolist()
    # without a bias the gate biases are zero
    zero = ls.lstm_certificate_from_tensors(weight_hh, weight_ih, None, bound, p)
    M0 = _hand_certificate(weight_hh, weight_ih, torch.zeros(12, dtype=torch.float64), bound, p)[0]
    torch.testing.assert_close(zero.matrix, torch.from_numpy(M0), rtol=1e-12, atol=0)


def _hand_set_matrix(rec, inp, top_bias, low_z, bound):
    """The set's worst case ``M-bar``: slopes 1/4 (sigmoid) and 1 (tanh), gates at their maxima."""
    r = {g: rec[g] + bound * inp[g] for g in "ifzo"}
    top = {g: _sigmoid(top_bias[g] + r[g]) for g in "ifo"}
    candidate = math.tanh(max(abs(top_bias["z"]), abs(low_z)) + r["z"])
    cell = top["i"] * candidate / (1 - top["f"])
    a = candidate * rec["i"] / 4 + top["i"] * rec["z"] + cell * rec["f"] / 4
    g = top["o"] * a + math.tanh(cell) * rec["o"] / 4
    return [[top["f"], a], [top["o"] * top["f"], g]], cell


def test_constraint_matrix_and_uniform_certificate_by_hand():
    constraint = ls.course_lstm_constraint(input_radius=2.0, bias_bound=1.5, forget_bias_max=-1.0)
    rec = dict(ls.AUTHORS_RECURRENT_SCALES)
    inp = {"i": 2.0, "f": 0.25, "z": 2.0, "o": 2.0}
    top_bias = {"i": 1.5, "f": -1.0, "z": 1.5, "o": 1.5}
    for bound in (0.0, 0.5):
        M, cell = _hand_set_matrix(rec, inp, top_bias, -1.5, bound)
        torch.testing.assert_close(constraint.matrix(bound), torch.tensor(M, dtype=torch.float64))
        m = torch.tensor(M, dtype=torch.float64)
        root = float(torch.linalg.eigvals(m).real.max())
        assert constraint.contraction_bound(bound) == pytest.approx(root, rel=1e-12)
        uniform = constraint.uniform_certificate(bound)
        assert uniform.lam == pytest.approx(root, rel=1e-12)
        assert uniform.cell_bound == pytest.approx(cell, rel=1e-12)
        v = torch.tensor(uniform.weights, dtype=torch.float64)
        torch.testing.assert_close(m @ v, root * v)
        assert max(uniform.weights) == 1.0
        assert uniform.state_bound == pytest.approx(max(cell / v[0], 1 / v[1]))
    # without bias_min the candidate bias is bounded by |b_z| <= bias_max["z"]
    inputs_only_f = {"i": 0.0, "f": 0.25, "z": 0.0, "o": 0.0}
    tops = {"i": 0.5, "f": -0.5, "z": 0.75, "o": 0.0}
    symmetric = ls.LSTMConstraint(rec, inputs_only_f, tops)
    M, cell = _hand_set_matrix(rec, inputs_only_f, tops, -0.75, 1.0)
    torch.testing.assert_close(symmetric.matrix(1.0), torch.tensor(M, dtype=torch.float64))
    assert symmetric.uniform_certificate(1.0).cell_bound == pytest.approx(cell, rel=1e-12)


def test_default_set_is_the_corollarys_matrix_with_gates_at_one():
    """Chapter 4b: for the default set the library's sharper gate maxima are 1 in float64,
    so its M-bar is the corollary's (F, C = 1/(1 - F), a = r_i/4 + r_z + C r_f/4)."""
    course = ls.course_lstm_constraint()
    forget = 1 / (1 + math.exp(-(0.0 + 0.155 + 0.25)))
    cell = 1 / (1 - forget)
    a = 0.395 / 4 + 0.099 + cell * 0.155 / 4
    prose = [[forget, a], [forget, a + math.tanh(cell) * 0.395 / 4]]
    torch.testing.assert_close(course.matrix(1.0), torch.tensor(prose, dtype=torch.float64))
    root = float(torch.linalg.eigvals(torch.tensor(prose, dtype=torch.float64)).real.max())
    uniform = course.uniform_certificate(1.0)
    assert uniform.lam == pytest.approx(root, rel=1e-12)
    assert uniform.cell_bound == pytest.approx(cell, rel=1e-12)
    assert forget == pytest.approx(0.5999, abs=1e-4) and 0.928 < root < 0.930


def test_free_forget_constraint_by_hand():
    free = ls.free_forget_constraint(input_radius=3.0, bias_bound=2.0)
    assert free.recurrent_radius == ls.AUTHORS_RECURRENT_SCALES
    assert free.input_radius == {g: 3.0 for g in ls.GATES}
    assert free.bias_max == {g: 2.0 for g in ls.GATES}
    assert free.lower_bias() == {g: -2.0 for g in ls.GATES}
    course = ls.course_lstm_constraint(3.0, 2.0, forget_bias_max=-0.5)
    assert course.input_radius == {"i": 3.0, "f": 0.25, "z": 3.0, "o": 3.0}
    assert course.bias_max == {"i": 2.0, "f": -0.5, "z": 2.0, "o": 2.0}
    assert course.lower_bias() == {g: -2.0 for g in ls.GATES}
    authors = ls.authors_constants_constraint(0.5)
    assert authors.lower_bias() == {"i": -math.inf, "f": -math.inf, "z": -math.inf, "o": -math.inf}
    assert authors.bias_max == {"i": math.inf, "f": 0.5, "z": math.inf, "o": math.inf}
    assert authors.input_radius == {"i": math.inf, "f": 0.25, "z": math.inf, "o": math.inf}
    assert free.scaled(2.0).recurrent_radius == {g: 2 * c for g, c in free.recurrent_radius.items()}


def _certificate_by_values() -> ls.LSTMCertificate:
    one = torch.tensor([0.5, 0.25], dtype=torch.float64)
    return ls.LSTMCertificate(
        p=math.inf,
        input_bound=1.0,
        input_max=one,
        forget_max=torch.tensor([0.5, 0.125], dtype=torch.float64),
        candidate_max=one,
        output_max=one,
        cell_bound=torch.tensor([1.5, 3.25], dtype=torch.float64),
        cell_coupling=torch.eye(2),
        hidden_coupling=torch.eye(2),
        matrix=torch.tensor([[0.5, 0.25], [0.125, 0.375]], dtype=torch.float64),
        lam=0.6,
        weights=(1.0, 0.4),
    )


def test_format_certificate_by_hand():
    assert ls.format_certificate(_certificate_by_values()).splitlines() == [
        "M = [[0.5000, 0.2500], [0.1250, 0.3750]]",
        "lambda = rho(M) = 0.6000   (plain max-norm: 0.7500)",
        "norm weights (v_c, v_h) = (1.0000, 0.4000)",
        "max forget gate fbar = 0.5000, max cell bound C = 3.2500",
    ]


def test_contraction_verdicts_by_hand():
    rows = [
        {"model": "a", "certificate": 0.5, "jacobian_certificate_norm": 0.25,
         "pairs_certificate_norm": 0.375, "jacobian_euclidean": 1.5, "pairs_euclidean": 0.5},
        {"model": "b", "certificate": 1.0, "jacobian_certificate_norm": 1.0,
         "pairs_certificate_norm": 0.5, "jacobian_euclidean": 0.75, "pairs_euclidean": 1.0},
    ]  # fmt: skip
    assert ls.contraction_verdicts(rows).splitlines() == [
        "a: certified yes (0.5); measured < 1 in the certificate's norm: yes (0.375); "
        "in the Euclidean norm: no (1.5)",
        "b: certified no (1); measured < 1 in the certificate's norm: no (1); "
        "in the Euclidean norm: no (1)",
    ]


def test_measured_contraction_collects_the_measurements(generator):
    model = ls.random_stable_lstm(2, 3, 0.8, generator=generator)
    seed = 11
    result = ls.measured_contraction(model, 0.5, 60, torch.Generator().manual_seed(seed))
    g = torch.Generator().manual_seed(seed)
    states, x = ls.sample_box_states(model, 0.5, 60, g)
    # the map acts row by row, so the Jacobian of the batch sum holds every row's Jacobian
    summed = torch.autograd.functional.jacobian(lambda s: model.step(s, x).sum(0), states)
    jacobians = summed.permute(1, 0, 2)
    certificate = ls.lstm_certificate(model, 0.5)
    v_c, v_h = certificate.weights
    v = torch.tensor([v_c] * 3 + [v_h] * 3, dtype=torch.float64)
    weighted = (jacobians.abs() * v).sum(-1) / v
    assert result["certificate"] == certificate.lam
    assert result["certificate_l1"] == ls.lstm_certificate(model, 0.5, p=1).lam
    assert result["jacobian_certificate_norm"] == pytest.approx(float(weighted.amax()), rel=1e-12)
    spectral = torch.linalg.matrix_norm(jacobians, ord=2).max()
    assert result["jacobian_euclidean"] == pytest.approx(float(spectral), rel=1e-9)
    pairs = ls.pair_lipschitz(model, 0.5, 60, g)
    assert result["pairs_certificate_norm"] == pytest.approx(pairs, rel=1e-12)
    pairs_euclidean = ls.pair_lipschitz(model, 0.5, 60, g, norm="euclidean")
    assert result["pairs_euclidean"] == pytest.approx(pairs_euclidean, rel=1e-12)
    assert 0 < pairs <= certificate.lam


def test_authors_rescaled_lstm_is_the_rescaling_of_its_gaussian_draw():
    model = ls.authors_rescaled_lstm(3, 4, bias_std=0.5, forget_bias=2.0,
                                     generator=torch.Generator().manual_seed(8))  # fmt: skip
    g = torch.Generator().manual_seed(8)
    weight_hh = torch.randn(16, 4, generator=g, dtype=torch.float64)
    weight_ih = torch.randn(16, 3, generator=g, dtype=torch.float64)
    bias = 0.5 * torch.randn(16, generator=g, dtype=torch.float64)
    bias[4:8] += 2.0
    assert model.weight_hh.dtype == torch.float64 and (model.input_size, model.hidden_size) == (
        3,
        4,
    )
    torch.testing.assert_close(model.bias.detach(), bias)
    W = ls.gate_blocks(model.weight_hh.detach())
    for n, g_name in enumerate(ls.GATES):
        block = weight_hh[4 * n : 4 * n + 4]
        expected = ls.AUTHORS_RECURRENT_SCALES[g_name] * block / block.abs().sum(0)
        torch.testing.assert_close(W[g_name], expected)
    U = ls.gate_blocks(model.weight_ih.detach())
    torch.testing.assert_close(U["f"], 0.25 * weight_ih[4:8] / weight_ih[4:8].abs().sum(0))
    for n in (0, 2, 3):
        torch.testing.assert_close(U[ls.GATES[n]], weight_ih[4 * n : 4 * n + 4])
    plain = ls.authors_rescaled_lstm(3, 4, dtype=torch.float32)
    assert plain.weight_hh.dtype == torch.float32 and float(plain.bias.abs().max()) == 0


def test_l1_projection_of_a_batch_with_one_radius_per_row(generator):
    vectors = torch.randn(2, 3, 4, generator=generator, dtype=torch.float64)
    radii = torch.tensor([[0.5, 1.0, 100.0], [0.1, 2.0, 0.0]], dtype=torch.float64)
    projected = ls.project_l1_ball(vectors, radii)
    for a in range(2):
        for b in range(3):
            one = ls.project_l1_ball(vectors[a, b][None], float(radii[a, b]))[0]
            torch.testing.assert_close(projected[a, b], one)
    # one coordinate: the projection onto [-r, r] is clipping
    scalars = torch.tensor([[-3.0], [0.2], [5.0]], dtype=torch.float64)
    torch.testing.assert_close(ls.project_l1_ball(scalars, 1.0), scalars.clamp(-1.0, 1.0))


def test_l1_projection_messages():
    with pytest.raises(TypeError, match=r"^vectors must be a floating torch\.Tensor of shape"):
        ls.project_l1_ball(torch.zeros(2, 3, dtype=torch.int64), 1.0)
    with pytest.raises(ValueError, match=r"n >= 1, got \(3, 0\)"):
        ls.project_l1_ball(torch.zeros(3, 0, dtype=torch.float64), 1.0)
    with pytest.raises(ValueError, match=r"n >= 1, got \(\)"):
        ls.project_l1_ball(torch.tensor(1.0, dtype=torch.float64), 1.0)


def test_bias_sum_projection_onto_a_single_value_and_its_message():
    biases = [torch.tensor([1.0, -4.0]), torch.tensor([2.0, 0.0])]
    ls.project_bias_sum_(biases, upper=0.5, lower=0.5)
    torch.testing.assert_close(biases[0] + biases[1], torch.tensor([0.5, 0.5]))
    torch.testing.assert_close(biases[0] - biases[1], torch.tensor([-1.0, -4.0]))
    with pytest.raises(ValueError, match=r"empty interval: lower = 1\.0 > upper = 0\.0"):
        ls.project_bias_sum_(biases, upper=0.0, lower=1.0)


def test_state_norm_uses_p_the_two_halves_and_any_batch_shape(generator):
    model = ls.random_stable_lstm(2, 3, 0.9, 1.0, generator=generator)
    for p in (1, 2, math.inf):
        v_c, v_h = ls.lstm_certificate(model, 1.0, p).weights
        assert v_c != v_h
        cell_only = torch.tensor([1.0, -2.0, 0.5, 0.0, 0.0, 0.0], dtype=torch.float64)
        hidden_only = torch.tensor([0.0, 0.0, 0.0, 0.5, -1.0, 0.25], dtype=torch.float64)
        c_norm = float(torch.linalg.vector_norm(cell_only, ord=p))
        h_norm = float(torch.linalg.vector_norm(hidden_only, ord=p))
        assert float(ls.state_norm(model, cell_only, p=p)) == pytest.approx(c_norm / v_c)
        assert float(ls.state_norm(model, hidden_only, p=p)) == pytest.approx(h_norm / v_h)
        batch = torch.stack([cell_only, hidden_only]).expand(4, 2, 6)
        expected = torch.tensor([c_norm / v_c, h_norm / v_h], dtype=torch.float64).expand(4, 2)
        torch.testing.assert_close(ls.state_norm(model, batch, p=p), expected)
    with pytest.raises(ValueError, match=r"\(B, 2H\) = \(B, 6\) as \[c, h\], got \(2, 5\)"):
        ls.state_norm(model, torch.zeros(2, 5, dtype=torch.float64))


def test_course_set_accepts_zero_bounds_and_stable_set_defaults_to_unit_inputs():
    tight = ls.course_lstm_constraint(input_radius=0.0, bias_bound=0.0)
    assert tight.input_radius == {"i": 0.0, "f": 0.25, "z": 0.0, "o": 0.0}
    assert tight.bias_max == {g: 0.0 for g in ls.GATES}
    small = ls.course_lstm_constraint(input_radius=0.5, bias_bound=0.5, forget_bias_max=0.0)
    assert small.input_radius["i"] == 0.5 and small.bias_max["z"] == 0.5
    assert ls.stable_lstm_constraint(0.8) == ls.stable_lstm_constraint(0.8, 1.0)
    with pytest.raises(ValueError, match=r"forget_bias_max = 2\.0 must lie in \[-bias_bound"):
        ls.course_lstm_constraint(1.0, 1.0, forget_bias_max=2.0)
    with pytest.raises(ValueError, match="no constraint of this shape reaches lambda = 0.3"):
        ls.stable_lstm_constraint(0.3, 1.0)


def test_concentrated_example_defaults_to_zero_biases():
    model = ls.concentrated_authors_lstm(2, 3)
    assert model.bias is not None and float(model.bias.abs().max()) == 0


def test_iterated_jacobian_norms_checks_the_input_shape():
    model = LSTMMap(2, 3, dtype=torch.float64)
    states = torch.zeros(4, 6, dtype=torch.float64)
    with pytest.raises(ValueError, match=r"\(r, N, D\) with N = 4, got \(4, 2\)"):
        ls.iterated_jacobian_norms(model, states, torch.zeros(4, 2, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"with N = 4, got \(2, 3, 2\)"):
        ls.iterated_jacobian_norms(model, states, torch.zeros(2, 3, 2, dtype=torch.float64))


def test_forget_gate_threshold_is_zero_when_even_a_closed_forget_gate_is_too_much():
    assert ls.forget_gate_threshold({"i": 4.0, "f": 0.0, "z": 1.0, "o": 0.0}) == 0.0


@pytest.mark.parametrize("p", [1, 2, math.inf])
def test_weighted_state_norm_by_hand(p):
    state = torch.tensor([[3.0, -4.0, 0.0, 1.0], [0.5, 0.0, 2.0, -2.0]], dtype=torch.float64)
    c_norms = {1: [7.0, 0.5], 2: [5.0, 0.5], math.inf: [4.0, 0.5]}[p]
    h_norms = {1: [1.0, 4.0], 2: [1.0, math.sqrt(8.0)], math.inf: [1.0, 2.0]}[p]
    expected = [max(c / 0.5, h / 0.25) for c, h in zip(c_norms, h_norms, strict=True)]
    values = ls.weighted_state_norm(state, 2, (0.5, 0.25), p)
    assert values.tolist() == pytest.approx(expected, rel=1e-12)


def test_authors_set_without_inputs_ignores_its_free_input_radii():
    """``input_bound = 0``: the infinite radii of U_i, U_z, U_o must not enter (0 * inf)."""
    authors = ls.authors_constants_constraint(-1.0)
    # free biases of i and z: those gates reach 1, so C = 1 / (1 - F)
    forget = _sigmoid(-1.0 + ls.AUTHORS_RECURRENT_SCALES["f"])
    uniform = authors.uniform_certificate(0.0)
    assert uniform.cell_bound == pytest.approx(1 / (1 - forget), rel=1e-12)
    assert float(authors.matrix(0.0)[0, 0]) == pytest.approx(forget, rel=1e-12)
    assert math.isfinite(uniform.lam)
    assert uniform.lam == pytest.approx(authors.contraction_bound(0.0), rel=1e-12)


def test_sample_box_states_draws_thirds_of_box_corners_and_trajectories():
    model = LSTMMap(2, 3, dtype=torch.float32)
    with torch.no_grad():
        for param in model.parameters():
            param.copy_(0.3 * torch.randn(param.shape, generator=torch.Generator().manual_seed(1)))
    cell = ls.lstm_certificate(model, 0.5).cell_bound.float()
    states, x = ls.sample_box_states(model, 0.5, 31, torch.Generator().manual_seed(3))
    assert states.shape == (30, 6) and x.shape == (30, 2) and states.dtype == torch.float32
    limit = torch.cat([cell, torch.ones(3)])
    assert (states[:10].abs() <= limit).all() and (states[:10].abs() < limit * (1 - 1e-4)).any()
    torch.testing.assert_close(states[10:20].abs(), limit.expand(10, 6))
    assert (x.abs() <= 0.5).all() and (x[15:].abs() == 0.5).all()
    again = ls.sample_box_states(model, 0.5, 31, torch.Generator().manual_seed(3))
    assert torch.equal(again[0], states) and torch.equal(again[1], x)
    assert ls.sample_box_states(model, 0.5, 2)[0].shape == (3, 6)  # at least one of each


@pytest.mark.parametrize("candidate_weight", [0.0, 0.5])
def test_sample_box_states_caps_an_unbounded_cell_at_the_horizon(candidate_weight):
    """A saturated forget gate: C = inf (0 / 0 = nan with a zero candidate) becomes the horizon."""
    model = LSTMMap(1, 2, dtype=torch.float64)
    with torch.no_grad():
        model.weight_hh.zero_()
        model.weight_ih.zero_()
        model.bias.zero_()
        ls.gate_blocks(model.bias)["f"].fill_(60.0)
        ls.gate_blocks(model.bias)["z"].fill_(candidate_weight)
        ls.gate_blocks(model.bias)["i"].fill_(1.0)
    assert not torch.isfinite(ls.lstm_certificate(model, 1.0).cell_bound).any()
    for horizon, expected in ((None, 50.0), (7.0, 7.0)):
        kwargs = {} if horizon is None else {"horizon": horizon}
        states, _ = ls.sample_box_states(model, 1.0, 30, torch.Generator().manual_seed(0), **kwargs)
        assert (states[10:20, :2].abs() == expected).all()
        assert (states[:10, :2].abs() <= expected).all()


def test_authors_constants_constraint_closes_the_forget_bias_at_zero_by_default():
    assert ls.authors_constants_constraint().bias_max["f"] == 0.0


def _induced_weighted_max_norm(J, w):
    """``sup ||J s||_w / ||s||_w`` for ``||s||_w = max_a |s_a| / w_a``, by brute force: the
    unit ball is the box ``|s_b| <= w_b``, and a convex function peaks at its corners."""
    import itertools

    n = len(w)
    best = 0.0
    for signs in itertools.product((-1.0, 1.0), repeat=n):
        image = [sum(J[a][b] * w[b] * signs[b] for b in range(n)) for a in range(n)]
        best = max(best, max(abs(image[a]) / w[a] for a in range(n)))
    return best


def test_jacobian_certificate_norms_are_the_induced_norms_by_brute_force():
    g = torch.Generator().manual_seed(4)
    model = ls.random_stable_lstm(2, 2, 0.6, 1.0, generator=g)
    states, x = ls.sample_box_states(model, 1.0, 24, g)
    v_c, v_h = ls.lstm_certificate(model, 1.0).weights
    w = [v_c, v_c, v_h, v_h]
    jacobians = ls.lstm_state_jacobians(model, states, x).tolist()
    # the instance is chosen so that at some state the largest weighted row has weight < 1
    # (an h row, v_h < v_c = 1): there the weights cannot be applied the wrong way round
    rows = [
        [sum(abs(J[a][b]) * w[b] for b in range(4)) / w[a] for a in range(4)] for J in jacobians
    ]
    assert v_h < v_c == 1 and any(max(r) > max(r[:2]) for r in rows)
    expected = [_induced_weighted_max_norm(J, w) for J in jacobians]
    norms = ls.jacobian_certificate_norms(model, states, x, 1.0)
    # rel 1e-12: weights rounded to float32 would be off by ~1e-8
    assert norms.tolist() == pytest.approx(expected, rel=1e-12)


def test_project_lstm_on_a_model_without_bias(generator):
    model = LSTMMap(2, 3, bias=False, dtype=torch.float64)
    with torch.no_grad():
        model.weight_hh.copy_(5 * torch.randn(12, 3, generator=generator, dtype=torch.float64))
    assert ls.project_lstm_(model, lam=0.9) == pytest.approx(0.9)
    assert ls.lstm_contraction_bound(model, 1.0) <= 0.9 + 1e-12


# ----------------------------------------------------------------------------
# Survivors of the whole-module mutation run (code at bda7a1e)
# ----------------------------------------------------------------------------

_FINITE = {"recurrent_radius": dict.fromkeys(ls.GATES, 0.5),
           "input_radius": dict.fromkeys(ls.GATES, 0.5)}  # fmt: skip


def test_constraint_argument_checks_and_messages():
    with pytest.raises(ValueError, match=r"recurrent_radius\['i'\] must be >= 0"):
        ls.LSTMConstraint(
            {**_FINITE["recurrent_radius"], "i": -0.1}, _FINITE["input_radius"],
            dict.fromkeys(ls.GATES, 1.0),
        )  # fmt: skip
    with pytest.raises(ValueError) as error:
        ls.LSTMConstraint(**_FINITE, bias_max={**dict.fromkeys(ls.GATES, 1.0), "z": -0.1})
    assert str(error.value) == "bias_max['z'] bounds |b_z| and must be >= 0"
    # |b_z| <= 0 is a valid (degenerate) interval
    ls.LSTMConstraint(**_FINITE, bias_max={**dict.fromkeys(ls.GATES, 1.0), "z": 0.0})
    with pytest.raises(ValueError, match=r"bias_min needs one value per gate .* \['f', 'i'\]"):
        ls.LSTMConstraint(
            **_FINITE, bias_max=dict.fromkeys(ls.GATES, 1.0), bias_min={"i": 0.0, "f": 0.0}
        )
    with pytest.raises(ValueError, match="must be finite and >= 0"):
        ls.course_lstm_constraint(bias_bound=math.inf)
    with pytest.raises(ValueError) as error:
        ls.project_lstm_weights_(
            torch.zeros(8, 2), torch.zeros(8, 1), lam=0.5,
            constraint=ls.course_lstm_constraint(), biases=(),
        )  # fmt: skip
    assert str(error.value) == "pass either lam or constraint, not both"


def test_constraint_matrix_with_a_saturated_forget_gate_is_infinite():
    constraint = ls.LSTMConstraint(
        **_FINITE, bias_max={**dict.fromkeys(ls.GATES, 1.0), "f": math.inf}
    )
    matrix = constraint.matrix(1.0)
    assert matrix.dtype == torch.float64 and matrix.shape == (2, 2)
    assert bool(torch.isinf(matrix).all())
    assert constraint.contraction_bound(1.0) == math.inf


@pytest.mark.parametrize(
    ("bias_max", "bias_min", "start", "expected"),
    [(0.5, -math.inf, 1.0, 0.5), (math.inf, -0.5, -1.0, -0.5)],
)
def test_bias_sums_with_one_side_free_on_every_gate(bias_max, bias_min, start, expected):
    """Every gate bounded on one side only (the all-free shortcut must not fire)."""
    constraint = ls.LSTMConstraint(
        **_FINITE, bias_max=dict.fromkeys(ls.GATES, bias_max),
        bias_min=dict.fromkeys(ls.GATES, bias_min),
    )  # fmt: skip
    biases = (
        torch.full((8,), start, dtype=torch.float64),
        torch.full((8,), start, dtype=torch.float64),
    )
    ls.project_lstm_weights_(
        torch.zeros(8, 2, dtype=torch.float64), torch.zeros(8, 1, dtype=torch.float64),
        constraint=constraint, biases=biases,
    )  # fmt: skip
    # the sum 2 * start moves to the bound, in equal shares
    for b in biases:
        torch.testing.assert_close(b, torch.full((8,), expected / 2, dtype=torch.float64))


@pytest.mark.parametrize("lam", [0.3, 0.9])  # forget bias lowered by about 1.8 and 0.3
def test_random_stable_lstm_follows_its_recipe(lam):
    """``W, U ~ N(0, 1/H)``, ``b ~ N(0, 0.1^2)`` from the generator, the forget bias lowered
    to ``logit(lam / 2)``, ``W`` and ``U`` scaled by one common factor ``t``."""
    H, D = 4, 3
    model = ls.random_stable_lstm(D, H, lam, 1.0, generator=torch.Generator().manual_seed(7))
    g = torch.Generator().manual_seed(7)
    W = torch.randn(4 * H, H, generator=g, dtype=torch.float64) / math.sqrt(H)
    U = torch.randn(4 * H, D, generator=g, dtype=torch.float64) / math.sqrt(H)
    b = torch.randn(4 * H, generator=g, dtype=torch.float64) * 0.1
    ceiling = math.log((lam / 2) / (1 - lam / 2))
    b[H : 2 * H] -= max(float(b[H : 2 * H].max()) - ceiling, 0.0)
    assert float(b[H : 2 * H].max()) == pytest.approx(ceiling, rel=1e-12)  # it was lowered
    torch.testing.assert_close(model.bias.detach(), b, rtol=1e-12, atol=0)
    t = float(model.weight_hh.detach()[0, 0] / W[0, 0])
    torch.testing.assert_close(model.weight_hh.detach(), t * W, rtol=1e-12, atol=0)
    torch.testing.assert_close(model.weight_ih.detach(), t * U, rtol=1e-12, atol=0)
    assert ls.lstm_contraction_bound(model, 1.0) == pytest.approx(lam, rel=1e-9)


@pytest.mark.parametrize(("num", "horizon"), [(30, 50.0), (12, 1.0)])
def test_sample_box_states_redrawn_by_its_recipe(num, horizon):
    """The states and inputs drawn again from the same seed, step by step of the docstring:
    uniform in the box, its corners, ``min(horizon, 30)`` steps of trajectories from 0 with
    a uniform pick of the step, inputs uniform or on corners."""
    model = random_lstm(2, 3, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    B = 0.7
    states, x = ls.sample_box_states(model, B, num, torch.Generator().manual_seed(5), horizon)
    g = torch.Generator().manual_seed(5)
    cell = ls.lstm_certificate(model, B).cell_bound.clamp(max=horizon)
    third, H, D = num // 3, 3, 2

    def uniform(*shape):
        return 2 * torch.rand(shape, generator=g, dtype=torch.float64) - 1

    def signs(*shape):
        return torch.randint(0, 2, shape, generator=g).to(torch.float64) * 2 - 1

    box = torch.cat([uniform(third, H) * cell, uniform(third, H)], dim=1)
    corners = torch.cat([signs(third, H) * cell, signs(third, H)], dim=1)
    steps = int(min(horizon, 30))
    state = torch.zeros(third, 2 * H, dtype=torch.float64)
    trajectory = []
    for inputs in B * uniform(steps, third, D):
        state = model.step(state, inputs).detach()
        trajectory.append(state)
    picks = torch.randint(0, steps, (third,), generator=g)
    reached = torch.stack([trajectory[int(p)][n] for n, p in enumerate(picks)])
    torch.testing.assert_close(states, torch.cat([box, corners, reached]), rtol=1e-12, atol=1e-15)
    n = 3 * third
    expected_x = B * torch.cat([uniform(n - n // 2, D), signs(n // 2, D)])
    torch.testing.assert_close(x, expected_x, rtol=1e-12, atol=0)
    assert {-1.0, 1.0} <= set(corners[:, H:].flatten().tolist())


def test_jacobian_certificate_norms_weights_in_the_states_dtype(monkeypatch, generator):
    """Weights ``(0.1, 0.3)`` (neither is exact in float32): the norm at rel 1e-12."""
    from types import SimpleNamespace

    model = random_lstm(2, 3, generator=generator, dtype=torch.float64)
    states = torch.randn(5, 6, generator=generator, dtype=torch.float64) * 0.5
    x = torch.randn(5, 2, generator=generator, dtype=torch.float64) * 0.5
    monkeypatch.setattr(ls, "lstm_certificate", lambda *a: SimpleNamespace(weights=(0.1, 0.3)))
    J = ls.lstm_state_jacobians(model, states, x)
    w = [0.1] * 3 + [0.3] * 3
    expected = [
        max(sum(abs(float(J[n, a, b])) * w[b] for b in range(6)) / w[a] for a in range(6))
        for n in range(5)
    ]
    got = ls.jacobian_certificate_norms(model, states, x, 1.0)
    assert got.tolist() == pytest.approx(expected, rel=1e-12)


def test_contraction_verdicts_line_by_hand():
    rows = [
        {"model": "a", "certificate": 0.9, "jacobian_certificate_norm": 0.5,
         "pairs_certificate_norm": 0.4, "jacobian_euclidean": 0.8, "pairs_euclidean": 0.7},
        {"model": "b", "certificate": 2.0, "jacobian_certificate_norm": 1.5,
         "pairs_certificate_norm": 0.4, "jacobian_euclidean": 0.8, "pairs_euclidean": 1.7},
    ]  # fmt: skip
    assert ls.contraction_verdicts(rows) == (
        "a: certified yes (0.9); measured < 1 in the certificate's norm: yes (0.5); "
        "in the Euclidean norm: yes (0.8)\n"
        "b: certified no (2); measured < 1 in the certificate's norm: no (1.5); "
        "in the Euclidean norm: no (1.7)"
    )


def test_solve_scale_refuses_a_bound_already_at_lam_with_its_advice():
    message = (
        "no test set reaches lambda = 0.5: even with zero recurrent weights the bound is "
        "0.5000 (the forget gate alone); lower the forget bias (forget_bias_max) or the input "
        "radius, or ask for a larger lambda"
    )
    with pytest.raises(ValueError) as error:
        ls._solve_scale(lambda t: 0.5 + t, 0.5, "test set")
    assert str(error.value) == message
    # just below lam: the largest t with 0.25 + t <= 0.5, by bisection
    assert ls._solve_scale(lambda t: 0.25 + t, 0.5, "test set") == pytest.approx(0.25, rel=1e-12)


def test_solve_scale_finds_the_largest_t_with_the_bound_at_most_lam():
    """Doubling then bisection: ``0.1 t`` reaches 0.5 at ``t = 5``; on a bound that stays at
    ``lam`` over ``[0.25, 3]`` the answer is the plateau's right end, 3."""
    assert ls._solve_scale(lambda t: 0.1 * t, 0.5, "x") == pytest.approx(5.0, rel=1e-12)

    def plateau(t: float) -> float:
        return 0.25 + t if t < 0.25 else (0.5 if t <= 3 else 0.5 + (t - 3))

    assert ls._solve_scale(plateau, 0.5, "x") == pytest.approx(3.0, rel=1e-12)


def test_certificate_argument_checks_and_messages():
    def certificate(hh, ih, bias=None):
        return ls.lstm_certificate_from_tensors(hh, ih, bias, 1.0)

    hh, ih = torch.zeros(8, 2), torch.zeros(8, 1)
    with pytest.raises(TypeError) as error:
        certificate([[0.0]], ih)
    assert str(error.value) == "weight_hh must be a torch.Tensor, got list"
    with pytest.raises(TypeError) as error:
        certificate(hh, torch.zeros(8, 1, dtype=torch.int64))
    assert str(error.value) == "weight_ih must be a floating tensor, got torch.int64; use .double()"
    with pytest.raises(ValueError) as error:
        certificate(hh, torch.zeros(12, 1))
    assert str(error.value) == (
        "weight_ih has 12 rows, but the recurrent matrix says 4H = 8; "
        "pass the matrices of the same layer"
    )
    with pytest.raises(ValueError) as error:
        certificate(torch.zeros(8, 3), ih)
    assert str(error.value) == "weight_hh must be (4H, H), got (8, 3)"
    with pytest.raises(ValueError) as error:
        certificate(hh, ih, torch.zeros(7))
    assert str(error.value) == "bias must have shape (4H,) = (8,), got (7,)"
    with pytest.raises(TypeError) as error:
        ls.lstm_certificate(nn.LSTM(1, 2), 1.0)
    assert str(error.value) == (
        "expected an LSTMMap, got LSTM; convert a torch.nn.LSTM with LSTMMap.from_torch(module)"
    )
    with pytest.raises(TypeError) as error:
        ls.lstm_certificate_from_tensors(hh, ih, None, True)
    assert str(error.value) == "input_bound must be a number, got bool"
    with pytest.raises(ValueError) as error:
        ls.lstm_certificate_from_tensors(hh, ih, None, math.inf)
    assert str(error.value) == (
        "input_bound must be finite and >= 0 (it bounds ||x_t||_inf), got inf; "
        "clamp the inputs, e.g. the embedding to [-1, 1], and pass that bound"
    )
    for bad in (0, 0.0, 1, 1.0):
        with pytest.raises(ValueError, match=r"lam must be a number in \(0, 1\)"):
            ls.random_stable_lstm(1, 2, bad)


def test_saturated_forget_gate_certificate_is_float64_inf():
    bias = torch.zeros(8, dtype=torch.float64)
    bias[2:4] = 1e3  # sigmoid(1e3) = 1.0: the forget gate never forgets
    certificate = ls.lstm_certificate_from_tensors(
        torch.zeros(8, 2, dtype=torch.float64), torch.zeros(8, 1, dtype=torch.float64), bias, 1.0
    )
    assert certificate.matrix.dtype == torch.float64 and certificate.matrix.shape == (2, 2)
    assert bool(torch.isinf(certificate.matrix).all()) and certificate.lam == math.inf
