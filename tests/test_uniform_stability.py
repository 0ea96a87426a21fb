"""Stability uniform over the LSTM parameter set (Chapter 4): one norm and one invariant box,
those of the set's worst-case matrix M-bar, work for every LSTM of the set."""

from __future__ import annotations

import math

import pytest
import torch

from stablernn_lib.core.models import LSTMMap
from stablernn_lib.theory import lstm_certificate as ls

SETS = {
    "course": ls.course_lstm_constraint(),
    "lambda 0.9": ls.stable_lstm_constraint(0.9, 1.0),
    "tight compact": ls.course_lstm_constraint(input_radius=2.0, bias_bound=3.0),
}


def _model_in_set(constraint, hidden, inputs, generator, scale, extreme_biases) -> LSTMMap:
    """A random LSTM projected onto the set; with ``extreme_biases`` every bias is pushed
    to a bound of its interval (open gates, saturated candidate) before projecting."""
    model = LSTMMap(inputs, hidden, bias=True, dtype=torch.float64)
    with torch.no_grad():
        for param in (model.weight_hh, model.weight_ih, model.bias):
            param.copy_(scale * torch.randn(param.shape, generator=generator, dtype=param.dtype))
        if extreme_biases:
            signs = torch.randint(0, 2, model.bias.shape, generator=generator) * 2 - 1
            model.bias.copy_(1e3 * signs.to(model.bias.dtype))
    ls.project_lstm_(model, constraint=constraint)
    return model


def _box_states(cell_bound, hidden, n, generator) -> torch.Tensor:
    """States of the common box: half uniform, half corners."""
    uniform = 2 * torch.rand(n, 2 * hidden, generator=generator, dtype=torch.float64) - 1
    corners = torch.randint(0, 2, (n, 2 * hidden), generator=generator).double() * 2 - 1
    states = torch.cat([uniform, corners])
    states[:, :hidden] *= cell_bound
    return states


@pytest.mark.parametrize("name", sorted(SETS))
def test_one_norm_and_one_box_for_every_model_of_the_set(name, generator):
    constraint = SETS[name]
    uniform = constraint.uniform_certificate(1.0)
    assert uniform.lam < 1
    hidden, inputs = 5, 3
    worst = 0.0
    for trial in range(12):
        model = _model_in_set(
            constraint,
            hidden,
            inputs,
            generator,
            scale=[0.1, 1.0, 10.0][trial % 3],
            extreme_biases=trial % 2 == 1,
        )
        # the model's own certificate never exceeds the set's (Chapter 4's corollary)
        assert ls.lstm_contraction_bound(model, 1.0) <= uniform.lam + 1e-12
        states = _box_states(uniform.cell_bound, hidden, 400, generator)
        others = _box_states(uniform.cell_bound, hidden, 400, generator)
        near = states + 1e-3 * (2 * torch.rand(states.shape, generator=generator).double() - 1)
        limit = torch.cat([torch.full((hidden,), uniform.cell_bound), torch.ones(hidden)])
        near = torch.maximum(torch.minimum(near, limit), -limit).double()
        x = 2 * torch.rand(len(states), inputs, generator=generator, dtype=torch.float64) - 1
        with torch.no_grad():
            following = model.step(states, x)
            # the box is invariant
            assert (following.abs() <= limit + 1e-12).all()
            for pair in (others, near):
                numerator = ls.weighted_state_norm(
                    following - model.step(pair, x), hidden, uniform.weights, math.inf
                )
                denominator = ls.weighted_state_norm(
                    states - pair, hidden, uniform.weights, math.inf
                )
                keep = denominator > 1e-12
                worst = max(worst, float((numerator[keep] / denominator[keep]).max()))
            # the Jacobian's induced norm in the common norm, at every sampled state
            v_c, v_h = uniform.weights
            w = torch.cat([torch.full((hidden,), v_c), torch.full((hidden,), v_h)]).double()
            J = ls.lstm_state_jacobians(model, states, x)
            induced = ((J.abs() * w[None, None, :]).sum(-1) / w[None, :]).max(-1).values
            worst = max(worst, float(induced.max()))
    assert worst <= uniform.lam * (1 + 1e-9)


def test_hill_climbing_does_not_break_the_common_norm(generator):
    """A cheap adversarial search: climb the Jacobian's induced norm over states and inputs."""
    constraint = ls.stable_lstm_constraint(0.9, 1.0)
    uniform = constraint.uniform_certificate(1.0)
    hidden, inputs = 4, 2
    v_c, v_h = uniform.weights
    w = torch.cat([torch.full((hidden,), v_c), torch.full((hidden,), v_h)]).double()
    limit = torch.cat([torch.full((hidden,), uniform.cell_bound), torch.ones(hidden)]).double()

    def induced(model, states, x):
        J = ls.lstm_state_jacobians(model, states, x)
        return ((J.abs() * w[None, None, :]).sum(-1) / w[None, :]).max(-1).values

    best_overall = 0.0
    for trial in range(4):
        model = _model_in_set(constraint, hidden, inputs, generator, 3.0, trial % 2 == 1)
        states = _box_states(uniform.cell_bound, hidden, 64, generator)[:64]
        x = 2 * torch.rand(64, inputs, generator=generator, dtype=torch.float64) - 1
        best = induced(model, states, x)
        for step in range(150):
            size = 0.3 * 0.98**step
            trial_states = states + size * limit * torch.randn(
                states.shape, generator=generator, dtype=torch.float64
            )
            trial_states = torch.maximum(torch.minimum(trial_states, limit), -limit)
            trial_x = (x + size * torch.randn(x.shape, generator=generator).double()).clamp(-1, 1)
            value = induced(model, trial_states, trial_x)
            better = value > best
            states[better], x[better], best[better] = (
                trial_states[better],
                trial_x[better],
                value[better],
            )
        best_overall = max(best_overall, float(best.max()))
    assert best_overall <= uniform.lam * (1 + 1e-9)
    assert best_overall > 0.3 * uniform.lam  # the search did reach the interesting range


def test_a_set_whose_forget_gate_can_reach_one_has_no_uniform_certificate():
    free = ls.LSTMConstraint(
        recurrent_radius=dict(ls.AUTHORS_RECURRENT_SCALES),
        input_radius={g: math.inf for g in ls.GATES},
        bias_max={g: math.inf for g in ls.GATES},
    )
    uniform = free.uniform_certificate(1.0)
    assert uniform.lam == math.inf and uniform.cell_bound == math.inf
    assert uniform.weights == (1.0, 1.0)  # the Perron vector of an infinite M: equal weights
