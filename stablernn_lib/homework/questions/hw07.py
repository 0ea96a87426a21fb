"""Homework 7 (Chapter 7, Proposition 2): projected gradient descent and the error recursion."""

from __future__ import annotations

import torch

from stablernn_lib.homework.expect import expect_close
from stablernn_lib.homework.inputs import BallProjection, Residual
from stablernn_lib.homework.questions.common import fixed_instance
from stablernn_lib.homework.registry import (
    Check,
    CheckContext,
    CheckFailedError,
    Homework,
    Question,
)


def _pgd_reference(grad, project, w0, steps, alpha, decay) -> torch.Tensor:
    iterates = [w0.clone()]
    for t in range(1, steps + 1):
        step = alpha / t if decay else alpha
        iterates.append(project(iterates[-1] - step * grad(iterates[-1])))
    return torch.stack(iterates)


def _pgd_match(function, ctx: CheckContext, n: int, steps: int, alpha: float, decay: bool):
    target = ctx.randn(n, scale=3.0)
    radius = ctx.uniform(0.5, 2.0)

    grad, project = Residual(target), BallProjection(radius)

    w0 = ctx.randn(n)
    given = (
        f"f(w) = ||w - c||^2 / 2 on the ball of radius {radius:.3g} in R^{n}, "
        f"{steps} steps, alpha = {alpha:g}, decay = {decay}"
    )
    got = ctx.call(function, grad, project, w0.clone(), steps, alpha, decay, given=given)
    expected = _pgd_reference(grad, project, w0, steps, alpha, decay)
    return expect_close(got, expected, "iterates w_0..w_N", given)


def pgd_random(function, ctx: CheckContext) -> str:
    _pgd_match(function, ctx, ctx.integer(1, 5), ctx.integer(1, 12), ctx.uniform(0.1, 1.0), True)
    _pgd_match(function, ctx, 3, 7, 0.3, False)
    return _pgd_match(function, ctx, 2, 0, 0.5, True)


def _recursion(alpha: float, beta: float, c: float, steps: int) -> torch.Tensor:
    errors = [0.0]
    for t in range(1, steps):
        errors.append((1 + alpha * beta / t) * errors[-1] + alpha / t * c)
    return torch.tensor(errors, dtype=torch.float64)


def _recursion_match(function, ctx: CheckContext, alpha, beta, c, steps) -> str:
    given = f"alpha = {alpha:.3g}, beta = {beta:.3g}, c = {c:.3g}, N = {steps}"
    got = ctx.call(function, alpha, beta, c, steps, given=given)
    got = torch.as_tensor(got, dtype=torch.float64)
    return expect_close(got, _recursion(alpha, beta, c, steps), "e_1..e_N", given, atol=1e-12)


def recursion_random(function, ctx: CheckContext) -> str:
    alpha, beta, c = ctx.uniform(0.05, 1.0), ctx.uniform(0.1, 3.0), ctx.uniform(0.01, 1.0)
    _recursion_match(function, ctx, alpha, beta, c, ctx.integer(2, 60))
    return _recursion_match(function, ctx, alpha, beta, c, 1)


def recursion_below_bound(function, ctx: CheckContext) -> str:
    alpha, beta, c, steps = ctx.uniform(0.05, 1.0), ctx.uniform(0.1, 2.0), 0.3, 200
    given = f"alpha = {alpha:.3g}, beta = {beta:.3g}, c = 0.3, N = {steps}"
    got = ctx.call(function, alpha, beta, c, steps, given=given)
    errors = torch.as_tensor(got, dtype=torch.float64)
    expect_close(errors, _recursion(alpha, beta, c, steps), "e_1..e_N", given, atol=1e-12)
    bound = alpha * c * steps ** (alpha * beta + 1)
    if float(errors[-1]) > bound:
        raise CheckFailedError(
            f"e_N = {float(errors[-1]):.4g} exceeds alpha c N^(alpha beta + 1)"
            f" = {bound:.4g}; check your recursion"
        )
    return f"e_N = {float(errors[-1]):.4g} <= alpha c N^(alpha beta + 1) = {bound:.4g}"


HOMEWORK = Homework(
    id="hw07",
    chapter="07_training_gives_the_same_model",
    title="Proposition 2 and Theorem 1: training gives the same model",
    minutes=60,
    questions=(
        Question(
            id="hw07.q1",
            title="Projected gradient descent",
            points=3,
            function="projected_gradient_descent",
            task=(
                "projected_gradient_descent(grad, project, w0, steps, alpha, decay) returns the "
                "iterates w_0..w_N stacked in a tensor (N + 1, *w0.shape), with "
                "w_t = project(w_{t-1} - alpha_t grad(w_{t-1})) and alpha_t = alpha / t if decay "
                "else alpha."
            ),
            tests=r"the training procedure of Proposition 2, the $\alpha / t$ schedule",
            checks=(
                Check("5 steps, alpha / t", fixed_instance(_pgd_match, 2, 5, 0.5, True)),
                Check("random runs, constant step, N = 0", pgd_random, hidden=True),
            ),
        ),
        Question(
            id="hw07.q2",
            title="The error recursion",
            points=2,
            function="error_recursion",
            task=(
                "error_recursion(alpha, beta, c, steps) returns e_1..e_N (N = steps) as a float "
                "tensor (N,), where e_1 = 0 and e_{t+1} = (1 + alpha beta / t) e_t + (alpha / t) c."
            ),
            tests="the recursion behind Proposition 2, compared with its closed-form bound",
            checks=(
                Check(
                    "alpha = 0.5, beta = 1, N = 6",
                    fixed_instance(_recursion_match, 0.5, 1.0, 0.1, 6),
                ),
                Check("random constants, N = 1", recursion_random, hidden=True),
                Check("below alpha c N^(alpha beta + 1)", recursion_below_bound, hidden=True),
            ),
        ),
        Question(
            id="hw07.q3",
            title="Proof: unrolling the recursion",
            points=3,
            kind="proof",
            task=(
                "Prove prod_{j=t+1}^{N} (1 + alpha beta / j) <= (N / t)^(alpha beta) and deduce "
                "e_N <= alpha c N^(alpha beta + 1) for the recursion of question 2."
            ),
            tests="the key estimate of Proposition 2's proof",
        ),
    ),
)
