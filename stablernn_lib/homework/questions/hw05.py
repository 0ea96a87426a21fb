"""Homework 5 (Chapter 5, Lemma 1): the context k from the bound, and the measured errors."""

from __future__ import annotations

import torch

from stablernn_lib.homework.expect import expect_close, expect_number, expect_raises
from stablernn_lib.homework.questions.common import (
    fixed_instance,
    rnn_instance,
    tanh_rnn_states,
    tanh_truncated_states,
)
from stablernn_lib.homework.registry import (
    Check,
    CheckContext,
    CheckFailedError,
    Homework,
    Question,
)


def _context(lam: float, lx: float, bx: float, eps: float) -> int:
    k, bound = 0, lx * bx / (1 - lam)
    while bound > eps:
        k, bound = k + 1, bound * lam
    return k


def _context_match(function, ctx: CheckContext, lam: float, lx: float, bx: float, eps: float):
    given = f"lam = {lam:.4g}, L_x = {lx:.4g}, B_x = {bx:.4g}, eps = {eps:.3g}"
    got = ctx.call(function, lam, lx, bx, eps, given=given)
    if not isinstance(got, int):
        raise CheckFailedError(f"expected an int, got {type(got).__name__} ({got!r}) for {given}")
    return expect_number(got, _context(lam, lx, bx, eps), "smallest k", given)


def context_random(function, ctx: CheckContext) -> str:
    for _ in range(4):
        lam, eps = ctx.uniform(0.05, 0.99), 10 ** ctx.uniform(-6, -1)
        _context_match(function, ctx, lam, ctx.uniform(0.1, 3), ctx.uniform(0.1, 3), eps)
    _context_match(function, ctx, 0.5, 1.0, 1.0, 10.0)
    return _context_match(function, ctx, 0.0, 1.0, 2.0, 0.5)


def context_bad_input(function, ctx: CheckContext) -> str:
    expect_raises(function, ValueError, "an unstable model", "lam = 1", 1.0, 1.0, 1.0, 0.1)
    return expect_raises(function, ValueError, "a tolerance <= 0", "eps = 0", 0.5, 1.0, 1.0, 0.0)


def _errors(W, U, inputs, ks) -> torch.Tensor:
    full = tanh_rnn_states(W, U, inputs)
    return torch.stack(
        [(full - tanh_truncated_states(W, U, inputs, k)).norm(dim=-1).max() for k in ks]
    )


def _errors_match(function, ctx: CheckContext, T: int, lam: float, ks: list[int]) -> str:
    W, U, inputs = rnn_instance(ctx, T, 2, 2, 3, lam)
    given = f"a tanh RNN with ||W||_2 = {lam:.3g}, T = {T}, ks = {ks}"
    got = ctx.call(function, W, U, inputs.clone(), list(ks), given=given)
    return expect_close(got, _errors(W, U, inputs, ks), "errors", given, atol=1e-9)


def errors_random(function, ctx: CheckContext) -> str:
    T = ctx.integer(5, 15)
    ks = sorted({ctx.integer(1, T + 2) for _ in range(3)})
    _errors_match(function, ctx, T, ctx.uniform(0.3, 0.95), ks)
    return _errors_match(function, ctx, T, 2.5, [1, T])


def errors_below_bound(function, ctx: CheckContext) -> str:
    lam, T = ctx.uniform(0.3, 0.9), 20
    W, U, inputs = rnn_instance(ctx, T, 1, 2, 3, lam)
    inputs = inputs / inputs.norm(dim=-1, keepdim=True).clamp(min=1.0)
    lx, bx = float(torch.linalg.matrix_norm(U, 2)), 1.0
    ks = [1, 3, 6]
    got = ctx.call(function, W, U, inputs, ks, given="a stable RNN, inputs of norm <= 1")
    for k, error in zip(ks, torch.as_tensor(got).tolist(), strict=True):
        bound = lam**k * lx * bx / (1 - lam)
        if error > bound + 1e-9:
            raise CheckFailedError(
                f"the error {error:.4g} at k = {k} exceeds Lemma 1's {bound:.4g}"
            )
    return f"every error lies below Lemma 1's bound lam^k L_x B_x / (1 - lam) (lam = {lam:.3g})"


HOMEWORK = Homework(
    id="hw05",
    chapter="05_outputs_close",
    title="Lemma 1: outputs close",
    minutes=60,
    questions=(
        Question(
            id="hw05.q1",
            title="How much context Lemma 1 asks for",
            points=2,
            function="lemma1_min_context",
            task=(
                "lemma1_min_context(lam, lx, bx, eps) returns the smallest integer k >= 0 with "
                "lam^k * lx * bx / (1 - lam) <= eps; raise ValueError unless 0 <= lam < 1 and "
                "eps > 0."
            ),
            tests=(
                r"Lemma 1's bound solved for $k$; its $\log(1/\epsilon) / \log(1/\lambda)$ "
                "growth"
            ),
            forbidden=("lemma1_context", "lemma1_truncation_bound"),
            checks=(
                Check("lam = 0.9, eps = 0.01", fixed_instance(_context_match, 0.9, 1.0, 1.0, 0.01)),
                Check("random constants, k = 0", context_random, hidden=True),
                Check("refuses lam >= 1 and eps <= 0", context_bad_input, hidden=True),
            ),
        ),
        Question(
            id="hw05.q2",
            title="Measured truncation errors",
            points=3,
            function="truncation_errors",
            task=(
                "truncation_errors(W, U, inputs, ks) returns a tensor (len(ks),) whose entry i "
                "is max over t and the batch of ||h_t - h^k_t|| with k = ks[i], for the tanh "
                "RNN on inputs (T, B, D)."
            ),
            tests=r"the experiment behind Lemma 1: the error decays like $\lambda^k$",
            forbidden=("truncated_states", "truncated_states_reference"),
            checks=(
                Check(
                    "T = 12, ks = [1, 2, 4, 8]",
                    fixed_instance(_errors_match, 12, 0.8, [1, 2, 4, 8]),
                ),
                Check("random instances, an unstable one", errors_random, hidden=True),
                Check("below Lemma 1's bound", errors_below_bound, hidden=True),
            ),
        ),
        Question(
            id="hw05.q3",
            title="Proof: the two steps of Lemma 1",
            points=4,
            kind="proof",
            task=(
                "For a lambda-contractive phi_w with ||phi_w(0, x) - phi_w(0, 0)|| <= L_x ||x|| "
                "and phi_w(0, 0) = 0, prove ||h_t - h^k_t|| <= lambda^k ||h_{t-k}|| and "
                "||h_s|| <= L_x B_x / (1 - lambda) when ||x_t|| <= B_x; then solve for k."
            ),
            tests="the proof of Lemma 1 with its explicit constant",
        ),
    ),
)
