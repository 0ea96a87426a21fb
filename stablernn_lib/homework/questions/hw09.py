"""Homework 9 (Chapter 9, JSB Chorales): Bernoulli NLL, bounded inputs, the baseline, and two
readings of the chapter's truncation curves: the context a model uses, and what a 1%
tolerance can hide."""

from __future__ import annotations

import torch

from stablernn_lib.homework.expect import expect_close, expect_number, show
from stablernn_lib.homework.questions.common import fixed_instance
from stablernn_lib.homework.registry import (
    Check,
    CheckContext,
    CheckFailedError,
    Homework,
    Question,
)
from stablernn_lib.theory.lstm_certificate import project_l1_ball


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


def marginal_random(function, ctx: CheckContext) -> str:
    _marginal_match(function, ctx, ctx.integer(1, 8), ctx.integer(1, 88))
    # a key that never sounds (f = 0) and one that always does (f = 1) cost nothing
    rolls = [torch.tensor([[1.0, 0.0, 1.0], [1.0, 0.0, 0.0], [1.0, 0.0, 1.0]])]
    got = ctx.call(function, rolls, given="keys with frequency 0, 1 and 1/2")
    return expect_number(got, float(torch.log(torch.tensor(2.0))), "baseline", "f = 0, 1, 1/2")


def _context_match(function, ctx: CheckContext, curve: dict, tolerance: float, given: str) -> str:
    from stablernn_lib.tasks.jsb import results  # matplotlib: imported when a check runs

    expected = results.context_used(curve, tolerance)
    got = ctx.call(
        function,
        list(curve["k"]),
        list(curve["loss"]),
        curve["recurrent_loss"],
        tolerance,
        given=given,
    )
    if got != expected or isinstance(got, bool):
        raise CheckFailedError(f"expected k = {show(expected)}, got {show(got)} for {given}")
    return f"k = {show(expected)} for {given}"


def context_visible(function, ctx: CheckContext) -> str:
    """The truncation curves of Chapter 9's four models trained as the authors did (seed 1111)."""
    from stablernn_lib.tasks.jsb import results

    measured = results.load_full_analysis(None, "authors") or {}
    curves = {n: e["truncated_eval_after"] for n, e in measured.items()
              if isinstance(e, dict) and "truncated_eval_after" in e}  # fmt: skip
    if not curves:
        raise CheckFailedError("the chapter's committed truncation curves were not found")
    return "; ".join(
        _context_match(function, ctx, curve, 0.01, f"Chapter 9's {name}, tolerance 1%")
        for name, curve in sorted(curves.items())
    )


def context_random(function, ctx: CheckContext) -> str:
    for _ in range(3):
        ks = sorted({ctx.integer(1, 64) for _ in range(ctx.integer(3, 10))})
        recurrent = ctx.uniform(5.0, 12.0)
        excess = sorted((ctx.uniform(0.0, 0.2) for _ in ks), reverse=True)
        curve = {
            "k": ks,
            "loss": [recurrent * (1 + e) for e in excess],
            "recurrent_loss": recurrent,
        }
        tolerance = ctx.uniform(0.005, 0.1)
        _context_match(function, ctx, curve, tolerance, f"k = {ks}, tolerance {tolerance:.3g}")
    never = {"k": [1, 2, 4], "loss": [9.0, 8.0, 7.5], "recurrent_loss": 7.0}
    _context_match(function, ctx, never, 0.01, "a curve that never comes within 1%")
    below = {"k": [1, 2, 4], "loss": [7.3, 6.9, 7.0], "recurrent_loss": 7.0}
    return _context_match(function, ctx, below, 0.01, "a truncated loss below the recurrent one")


HOMEWORK = Homework(
    id="hw09",
    chapter="09_polyphonic_music",
    title="Polyphonic music",
    minutes=70,
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
                Check("T = 3, K = 5", fixed_instance(_nll_match, 3, 5, 1.0)),
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
                Check("4 rows of 6 inputs, bound 1", fixed_instance(_rows_match, 4, 6, 1.0)),
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
                Check("3 chorales of 6 keys", fixed_instance(_marginal_match, 3, 6)),
                Check("random chorales, frequencies 0 and 1", marginal_random, hidden=True),
            ),
        ),
        Question(
            id="hw09.q4",
            title="How much context does a model use?",
            points=2,
            function="context_used",
            task=(
                "context_used(ks, losses, recurrent_loss, tolerance) reads a truncation curve "
                "(the test NLL of the truncated model at each context k, in increasing k) and "
                "returns the smallest k whose loss is at most (1 + tolerance) times the recurrent "
                "model's, or None when no k is."
            ),
            tests="reading the truncation curve as the course's criteria read it",
            forbidden=("context_used", "smallest_k_within"),
            checks=(
                Check("Chapter 9's four curves, 1%", context_visible),
                Check("random curves and tolerances; none; below", context_random, hidden=True),
            ),
        ),
        Question(
            id="hw09.q5",
            title="Judgement: what the 1% tolerance hides",
            points=3,
            kind="proof",
            task=(
                "Chapter 9 reads every model trained as the authors did as a model of short "
                "context (within 1% of its recurrent NLL with a few frames), while the "
                "unconstrained LSTM's gradient still keeps several percent of its size after 20 "
                "frames and its curve still falls past k = 32. Decide whether the unconstrained "
                "LSTM is 'effectively of short context', say in nats what the 1% tolerance allows "
                "beside the gain the LSTM still makes from frames older than 32, and say which "
                "result would change your verdict."
            ),
            tests="a verdict and the tolerance behind it: reading a number against a rule",
        ),
    ),
)
