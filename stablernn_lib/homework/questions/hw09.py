"""Homework 9 (Chapter 9, JSB Chorales): Bernoulli NLL, bounded inputs, the baseline."""

from __future__ import annotations

import torch

from stablernn_lib.homework.expect import expect_close, expect_number
from stablernn_lib.homework.registry import (
    Check,
    CheckContext,
    CheckFailedError,
    Homework,
    Question,
)
from stablernn_lib.theory.lstm_stability import project_l1_ball


def _reference_nll(logits: torch.Tensor, frames: torch.Tensor) -> float:
    terms = torch.nn.functional.softplus(logits) - frames * logits
    return float(terms.sum(-1).mean())


def _frames(ctx: CheckContext, steps: int, keys: int, density: float = 0.2) -> torch.Tensor:
    return (torch.rand(steps, keys, generator=ctx.generator) < density).double()


def _nll_match(function, ctx: CheckContext, steps: int, keys: int, scale: float) -> str:
    logits = ctx.randn(steps, keys, scale=scale)
    frames = _frames(ctx, steps, keys)
    given = f"logits and frames of shape ({steps}, {keys}), logits of scale {scale:g}"
    got = ctx.call(function, logits.clone(), frames.clone(), given=given)
    return expect_number(got, _reference_nll(logits, frames), "NLL per step", given, rel=1e-7)


def nll_visible(function, ctx: CheckContext) -> str:
    return _nll_match(function, ctx, 3, 5, 1.0)


def nll_random(function, ctx: CheckContext) -> str:
    _nll_match(function, ctx, ctx.integer(1, 12), ctx.integer(1, 88), ctx.uniform(0.1, 3.0))
    # confident predictions: log(sigmoid(z)) underflows to -inf for z << 0 in float64
    return _nll_match(function, ctx, 4, 88, 400.0)


def _rows_match(function, ctx: CheckContext, rows: int, columns: int, bound: float) -> str:
    weight = ctx.randn(rows, columns, scale=ctx.uniform(0.01, 2.0))
    bias = ctx.randn(rows)
    joint = torch.cat([weight, bias[:, None]], dim=1)
    expected = project_l1_ball(joint, bound)
    weight_in, bias_in = weight.clone(), bias.clone()
    given = f"weight ({rows}, {columns}), bias ({rows},), bound {bound:.3g}"
    result = ctx.call(function, weight_in, bias_in, bound, given=given, inplace=True)
    if result is not None:
        raise CheckFailedError(
            f"expected None (an in-place projection), got {result!r} for {given}"
        )
    expect_close(weight_in, expected[:, :-1], "projected weight", given, atol=1e-9)
    expect_close(bias_in, expected[:, -1], "projected bias", given, atol=1e-9)
    return f"rows [A_i, a_i] projected onto the l1 ball in place for {given}"


def rows_visible(function, ctx: CheckContext) -> str:
    return _rows_match(function, ctx, 4, 6, 1.0)


def rows_random(function, ctx: CheckContext) -> str:
    _rows_match(function, ctx, ctx.integer(1, 10), ctx.integer(1, 30), ctx.uniform(0.2, 3.0))
    weight = torch.full((2, 3), 0.1, dtype=torch.float64)
    bias = torch.zeros(2, dtype=torch.float64)
    ctx.call(function, weight, bias, 1.0, given="rows already inside the ball", inplace=True)
    expect_close(weight, torch.full((2, 3), 0.1, dtype=torch.float64), "weight", "inside", atol=0)
    return _rows_match(function, ctx, 3, 88, 1.0)


def _marginal_reference(rolls: list[torch.Tensor]) -> float:
    frames = torch.cat([roll[1:] for roll in rolls])
    f = frames.double().mean(0)
    entropy = torch.where(
        (f > 0) & (f < 1), -(f * f.log() + (1 - f) * (1 - f).log()), torch.zeros_like(f)
    )
    return float(entropy.sum())


def _marginal_match(function, ctx: CheckContext, count: int, keys: int) -> str:
    rolls = [_frames(ctx, ctx.integer(2, 15), keys, ctx.uniform(0.05, 0.5)) for _ in range(count)]
    given = f"{count} chorales of {keys} keys"
    got = ctx.call(function, [r.clone() for r in rolls], given=given)
    return expect_number(got, _marginal_reference(rolls), "baseline NLL per step", given, rel=1e-7)


def marginal_visible(function, ctx: CheckContext) -> str:
    return _marginal_match(function, ctx, 3, 6)


def marginal_random(function, ctx: CheckContext) -> str:
    _marginal_match(function, ctx, ctx.integer(1, 8), ctx.integer(1, 88))
    # a key that never sounds (f = 0) and one that always does (f = 1) cost nothing
    rolls = [torch.tensor([[1.0, 0.0, 1.0], [1.0, 0.0, 0.0], [1.0, 0.0, 1.0]])]
    got = ctx.call(function, rolls, given="keys with frequency 0, 1 and 1/2")
    return expect_number(got, float(torch.log(torch.tensor(2.0))), "baseline", "f = 0, 1, 1/2")


HOMEWORK = Homework(
    id="hw09",
    chapter="09_polyphonic_music",
    title="Polyphonic music",
    minutes=45,
    questions=(
        Question(
            id="hw09.q1",
            title="The NLL of independent Bernoulli outputs",
            points=2,
            function="bernoulli_nll",
            task=(
                "bernoulli_nll(logits, frames) returns (a float) the negative log-likelihood of "
                "the 0/1 frames (T, K) under independent keys with P(key sounds) = "
                "sigmoid(logits), summed over the K keys and averaged over the T steps; it "
                "must stay finite for logits of any size."
            ),
            tests="the loss and metric of the JSB table; a numerically stable form",
            checks=(
                Check("T = 3, K = 5", nll_visible),
                Check("random sizes, logits of size 400", nll_random, hidden=True),
            ),
        ),
        Question(
            id="hw09.q2",
            title="Bounded inputs for the stable LSTM",
            points=3,
            function="project_input_rows_",
            task=(
                "project_input_rows_(weight, bias, bound) projects, in place, every row "
                "[weight_i, bias_i] of a linear layer onto the l1 ball of radius bound (the "
                "Euclidean projection), so that |(weight v + bias)_i| <= bound for every v in "
                "[0, 1]^n; returns None."
            ),
            tests="the input bound that the Chapter 4 LSTM certificate needs",
            forbidden=("project_l1_ball", "project_rows_l1_", "project_input_layer_"),
            checks=(
                Check("4 rows of 6 inputs, bound 1", rows_visible),
                Check("random sizes and bounds, rows inside", rows_random, hidden=True),
            ),
        ),
        Question(
            id="hw09.q3",
            title="The baseline without memory",
            points=2,
            function="marginal_nll",
            task=(
                "marginal_nll(rolls) returns the training NLL per step of the best model that "
                "ignores the past: each key with its frequency f_j over the predicted frames "
                "(every chorale's frames but its first), i.e. the sum of the binary entropies "
                "H(f_j), with H(0) = H(1) = 0."
            ),
            tests="the floor any model of the table must beat (a Chapter 9 exercise derives it)",
            checks=(
                Check("3 chorales of 6 keys", marginal_visible),
                Check("random chorales, frequencies 0 and 1", marginal_random, hidden=True),
            ),
        ),
    ),
)
