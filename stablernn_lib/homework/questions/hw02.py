"""Homework 2 (Chapter 2, BPTT): the state Jacobian, gradient norms over lags, clipping."""

from __future__ import annotations

import torch

from stablernn_lib.homework.expect import expect_close, expect_raises
from stablernn_lib.homework.questions.common import fixed_instance, rnn_instance, scaled_matrix
from stablernn_lib.homework.registry import (
    Check,
    CheckContext,
    CheckFailedError,
    Homework,
    Question,
)


def _jacobian_match(function, ctx: CheckContext, H: int, D: int, scale: float) -> str:
    W, U = scaled_matrix(ctx, H, H, 1.5), ctx.randn(H, D)
    h, x = ctx.randn(H, scale=scale), ctx.randn(D, scale=scale)
    expected = torch.autograd.functional.jacobian(lambda v: torch.tanh(W @ v + U @ x), h)
    given = f"H = {H}, D = {D}, entries of h and x of size ~{scale:g}"
    return expect_close(ctx.call(function, W, U, h, x, given=given), expected, "Jacobian", given)


def jacobian_random(function, ctx: CheckContext) -> str:
    _jacobian_match(function, ctx, 1, 1, 0.5)
    return _jacobian_match(function, ctx, ctx.integer(2, 7), ctx.integer(1, 5), 3.0)


def _lag_norms(W: torch.Tensor, U: torch.Tensor, inputs: torch.Tensor) -> torch.Tensor:
    """``||d h_T / d h_s||_2`` for ``s = 0..T-1`` by autograd (batch of one)."""
    T = inputs.shape[0]
    norms = []
    for s in range(T):

        def tail(h: torch.Tensor, s: int = s) -> torch.Tensor:
            for x in inputs[s:]:
                h = torch.tanh(W @ h + U @ x)
            return h

        h_s = torch.zeros(W.shape[0], dtype=W.dtype)
        for x in inputs[:s]:
            h_s = torch.tanh(W @ h_s + U @ x)
        jacobian = torch.autograd.functional.jacobian(tail, h_s)
        norms.append(torch.linalg.matrix_norm(jacobian, 2))
    return torch.stack(norms)


def _lags_match(function, ctx: CheckContext, T: int, H: int, lam: float) -> str:
    W, U, inputs = rnn_instance(ctx, T, 1, 2, H, lam)
    inputs = inputs[:, 0]
    given = f"T = {T}, H = {H}, ||W||_2 = {lam:.3g}"
    got = ctx.call(function, W, U, inputs, given=given)
    return expect_close(got, _lag_norms(W, U, inputs), "norms for s = 0..T-1", given, rtol=1e-4)


def lags_random(function, ctx: CheckContext) -> str:
    _lags_match(function, ctx, ctx.integer(3, 10), ctx.integer(2, 6), ctx.uniform(0.3, 0.9))
    _lags_match(function, ctx, ctx.integer(3, 10), ctx.integer(2, 6), ctx.uniform(2.0, 4.0))
    return _lags_match(function, ctx, 1, 2, 1.0)


def _clip_reference(grad: torch.Tensor, threshold: float) -> torch.Tensor:
    norm = grad.norm()
    return grad * (threshold / norm) if norm > threshold else grad.clone()


def _clip_match(function, ctx: CheckContext, grad: torch.Tensor, threshold: float) -> str:
    given = f"a gradient of shape {tuple(grad.shape)} and norm {float(grad.norm()):.3g}, "
    given += f"threshold {threshold:.3g}"
    original = grad.clone()
    got = ctx.call(function, grad, threshold, given=given, inplace=True)
    if not torch.equal(grad, original):
        raise CheckFailedError(f"your function changed its input gradient in place for {given}")
    return expect_close(got, _clip_reference(original, threshold), "clipped gradient", given)


def clip_large(function, ctx: CheckContext) -> str:
    return _clip_match(function, ctx, torch.tensor([6.0, 8.0], dtype=torch.float64), 1.0)


def clip_small(function, ctx: CheckContext) -> str:
    return _clip_match(function, ctx, torch.tensor([0.3, -0.4], dtype=torch.float64), 1.0)


def clip_random(function, ctx: CheckContext) -> str:
    for _ in range(3):
        grad = ctx.randn(ctx.integer(1, 4), ctx.integer(1, 4), scale=ctx.uniform(0.1, 5.0))
        _clip_match(function, ctx, grad, ctx.uniform(0.1, 3.0))
    return _clip_match(function, ctx, torch.zeros(3, dtype=torch.float64), 0.5)


def clip_bad_threshold(function, ctx: CheckContext) -> str:
    grad = ctx.randn(3)
    return expect_raises(function, ValueError, "a threshold <= 0", "threshold = -1", grad, -1.0)


HOMEWORK = Homework(
    id="hw02",
    chapter="02_backpropagation_through_time",
    title="Backpropagation through time",
    minutes=60,
    questions=(
        Question(
            id="hw02.q1",
            title="The state Jacobian",
            points=2,
            function="tanh_rnn_jacobian",
            task=(
                "tanh_rnn_jacobian(W, U, h, x) returns the (H, H) Jacobian d phi / d h of "
                "phi(h, x) = tanh(W h + U x) at the vectors h (H,) and x (D,), written out "
                "(diag(1 - tanh^2(.)) W), not by autograd."
            ),
            tests="the chain rule for one step of BPTT",
            forbidden=("jacobian", "jacrev", "jacfwd", "state_jacobians", "backward", "grad"),
            checks=(
                Check("H = 3, D = 2", fixed_instance(_jacobian_match, 3, 2, 1.0)),
                Check("random sizes, saturated units", jacobian_random, hidden=True),
            ),
        ),
        Question(
            id="hw02.q2",
            title="Gradient norm versus time lag",
            points=3,
            function="lag_gradient_norms",
            task=(
                "lag_gradient_norms(W, U, inputs) returns a tensor (T,) whose entry s is "
                "||d h_T / d h_s||_2 for s = 0..T-1, for the tanh RNN (h_0 = 0) on inputs "
                "(T, D) (one sequence): multiply the one-step Jacobians backwards from T."
            ),
            tests="products of Jacobians; vanishing and exploding gradients measured",
            checks=(
                Check("T = 5, ||W||_2 = 0.9", fixed_instance(_lags_match, 5, 3, 0.9)),
                Check("vanishing, exploding, T = 1", lags_random, hidden=True),
            ),
        ),
        Question(
            id="hw02.q3",
            title="Gradient clipping",
            points=2,
            function="clip_gradient",
            task=(
                "clip_gradient(grad, threshold) returns a new tensor: grad rescaled to norm "
                "threshold when ||grad|| > threshold, else an unchanged copy (Pascanu et al.); "
                "never modify grad; raise ValueError when threshold <= 0."
            ),
            tests="Pascanu et al.'s rescaling rule: direction kept, norm bounded",
            forbidden=("clip_grad_norm_", "clip_grad_norm"),
            checks=(
                Check("a large gradient is rescaled", clip_large),
                Check("a small gradient is left as is", clip_small),
                Check("random gradients, the zero gradient", clip_random, hidden=True),
                Check("refuses a threshold <= 0", clip_bad_threshold, hidden=True),
            ),
        ),
        Question(
            id="hw02.q4",
            title="Proof: the vanishing-gradient bound",
            points=3,
            kind="proof",
            task=(
                "For h_t = rho(W h_{t-1} + U x_t) with |rho'| <= gamma, prove "
                "||d h_T / d h_s||_2 <= (gamma ||W||_2)^(T - s), and deduce a sufficient "
                "condition for vanishing and a necessary condition for exploding gradients."
            ),
            tests="chain rule, submultiplicativity of the operator norm",
        ),
    ),
)
