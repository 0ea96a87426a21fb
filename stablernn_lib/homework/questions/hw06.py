"""Homework 6 (Chapter 6, Lemmas 2 and 3): finite differences and truncated gradients."""

from __future__ import annotations

import torch

from stablernn_lib.homework.expect import expect_close
from stablernn_lib.homework.inputs import TanhQuadraticLoss
from stablernn_lib.homework.questions.common import fixed_instance, rnn_instance
from stablernn_lib.homework.registry import (
    Check,
    CheckContext,
    CheckFailedError,
    Homework,
    Question,
)


def _fd_match(function, ctx: CheckContext, shape: tuple[int, ...], what: str) -> str:
    A = ctx.randn(*shape)
    w = ctx.randn(*shape)

    loss = TanhQuadraticLoss(A)

    expected = torch.func.grad(loss)(w)
    given = f"f(w) = tanh(<A, w>) + ||w||^2 / 2 with w of shape {shape} ({what})"
    original = w.clone()
    got = ctx.call(function, loss, w, 1e-5, given=given)
    if not torch.equal(w, original):
        raise CheckFailedError(f"w must hold its original values after your function, for {given}")
    return expect_close(got, expected, "gradient", given, atol=1e-6, rtol=1e-5)


def fd_random(function, ctx: CheckContext) -> str:
    _fd_match(function, ctx, (ctx.integer(1, 4), ctx.integer(1, 4)), "a matrix")
    return _fd_match(function, ctx, (1,), "one number")


def _truncated_gradient(W, U, inputs, target, k) -> torch.Tensor:
    W = W.clone().requires_grad_(True)
    h = torch.zeros(W.shape[0], dtype=W.dtype)
    for x in inputs[max(0, len(inputs) - k) :]:
        h = torch.tanh(W @ h + U @ x)
    (0.5 * ((h - target) ** 2).sum()).backward()
    return W.grad


def _gradient_match(function, ctx: CheckContext, T: int, k: int, lam: float) -> str:
    W, U, inputs = rnn_instance(ctx, T, 1, 2, 3, lam)
    inputs, target = inputs[:, 0], ctx.randn(3)
    given = f"T = {T}, k = {k}, ||W||_2 = {lam:.3g}, H = 3, D = 2"
    got = ctx.call(function, W.clone(), U, inputs, target, k, given=given)
    expected = _truncated_gradient(W, U, inputs, target, k)
    return expect_close(got, expected, "gradient with respect to W", given, atol=1e-8)


def gradient_random(function, ctx: CheckContext) -> str:
    T = ctx.integer(3, 12)
    _gradient_match(function, ctx, T, ctx.integer(1, T), ctx.uniform(0.3, 1.5))
    return _gradient_match(function, ctx, 4, 9, 0.9)


HOMEWORK = Homework(
    id="hw06",
    chapter="06_gradients_close",
    title="Lemmas 2 and 3: gradients close",
    minutes=60,
    questions=(
        Question(
            id="hw06.q1",
            title="Gradients by finite differences",
            points=2,
            function="finite_difference_gradient",
            task=(
                "finite_difference_gradient(f, w, eps) returns the central-difference gradient "
                "(f(w + eps e_i) - f(w - eps e_i)) / (2 eps) of the scalar function f at the "
                "tensor w (any shape), without autograd; w must be unchanged afterwards."
            ),
            tests="checking autograd gradients, as the chapter's tests do",
            forbidden=("backward", "grad", "jacobian", "gradcheck"),
            checks=(
                Check("a vector of 3", fixed_instance(_fd_match, (3,), "a vector")),
                Check("a matrix, one number", fd_random, hidden=True),
            ),
        ),
        Question(
            id="hw06.q2",
            title="The gradient of the truncated loss",
            points=3,
            function="truncated_loss_gradient",
            task=(
                "truncated_loss_gradient(W, U, inputs, target, k) returns d p^k_T / d W (shape "
                "of W) for p^k_T = ||h^k_T - target||^2 / 2, where h^k_T runs the tanh RNN on "
                "the last k of the inputs (T, D) from the zero state (autograd is fine)."
            ),
            tests="the quantity of Lemma 2: the gradient of the truncated model's loss",
            checks=(
                Check("T = 8, k = 3", fixed_instance(_gradient_match, 8, 3, 0.8)),
                Check("random T and k, k > T", gradient_random, hidden=True),
            ),
        ),
        Question(
            id="hw06.q3",
            title="Proof: Jacobians of a contraction",
            points=3,
            kind="proof",
            task=(
                "Let phi_w be differentiable and lambda-contractive in h. Prove "
                "||d phi_w / d h||_2 <= lambda everywhere, and deduce "
                "||d h_t / d h_s||_2 <= lambda^(t - s)."
            ),
            tests="from a Lipschitz constant to Jacobian norms (the first step of Lemma 2)",
        ),
    ),
)
