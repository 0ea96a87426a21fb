"""Homework 4 (Chapter 4, stability as contractivity): projection, lambda, a Lipschitz estimate."""

from __future__ import annotations

import torch

from stablernn_lib.homework.expect import expect_close, expect_number, expect_raises
from stablernn_lib.homework.inputs import TanhStep
from stablernn_lib.homework.questions.common import fixed_instance, scaled_matrix, svd_clip
from stablernn_lib.homework.registry import (
    Check,
    CheckContext,
    CheckFailedError,
    Homework,
    Question,
)

LIPSCHITZ = {"tanh": 1.0, "relu": 1.0, "identity": 1.0, "sigmoid": 0.25}


def _projection_matches(projection, ctx: CheckContext, m: int, n: int, norm: float, radius: float):
    W = scaled_matrix(ctx, m, n, norm)
    given = f"W of shape ({m}, {n}) with ||W||_2 = {norm:.3g}, radius = {radius:.3g}"
    got = ctx.call(projection, W.clone(), radius, given=given)
    return expect_close(got, svd_clip(W, radius), "projection", given, atol=1e-8)


def projection_in_ball(projection, ctx: CheckContext) -> str:
    W = scaled_matrix(ctx, 4, 3, 3.0)
    given = "W of shape (4, 3) with ||W||_2 = 3, radius = 1"
    got = ctx.call(projection, W.clone(), 1.0, given=given)
    expect_close(got, svd_clip(W, 1.0), "projection", given, atol=1e-8)
    norm = float(torch.linalg.matrix_norm(got.detach().double(), 2))
    if norm > 1 + 1e-6:
        raise CheckFailedError(f"||P(W)||_2 should be <= 1, got {norm:.6g} for {given}")
    return f"||P(W)||_2 = {norm:.4g} <= 1 for {given}"


def projection_inside_unchanged(projection, ctx: CheckContext) -> str:
    W = scaled_matrix(ctx, 3, 3, 0.5)
    given = "W of shape (3, 3) with ||W||_2 = 0.5 (already inside), radius = 1"
    got = ctx.call(projection, W.clone(), 1.0, given=given)
    return expect_close(got, W, "a matrix inside the ball is left unchanged", given, atol=1e-8)


def projection_random_instances(projection, ctx: CheckContext) -> str:
    for _ in range(3):
        m, n = ctx.integer(2, 7), ctx.integer(2, 7)
        _projection_matches(projection, ctx, m, n, ctx.uniform(0.2, 4.0), ctx.uniform(0.3, 2.0))
    return "matches the SVD clip on 3 random matrices of random shapes and radii"


def projection_nearest(projection, ctx: CheckContext) -> str:
    W = scaled_matrix(ctx, 4, 4, 2.5)
    given = "a random (4, 4) W with ||W||_2 = 2.5, radius = 1"
    got = ctx.call(projection, W.clone(), 1.0, given=given)
    expect_close(got, svd_clip(W, 1.0), "projection", given, atol=1e-8)
    got = got.detach().double()
    distance = float(torch.linalg.matrix_norm(W - got))
    for _ in range(200):
        Q = svd_clip(ctx.randn(4, 4) + W, 1.0)
        if float(torch.linalg.matrix_norm(W - Q)) < distance - 1e-9:
            raise CheckFailedError(
                f"found a matrix Q in the ball closer to W than P(W): ||W - Q||_F = "
                f"{float(torch.linalg.matrix_norm(W - Q)):.4g} < ||W - P(W)||_F = {distance:.4g}"
            )
    return "no random point of the ball is closer to W than P(W)"


def projection_idempotent(projection, ctx: CheckContext) -> str:
    W = scaled_matrix(ctx, 3, 5, 3.0)
    once = ctx.call(projection, W.clone(), 0.7, given="a random (3, 5) W, radius 0.7")
    expect_close(once, svd_clip(W, 0.7), "P(W)", "a random (3, 5) W, radius 0.7", atol=1e-8)
    twice = ctx.call(projection, once.detach().clone(), 0.7, given="P(W), radius 0.7")
    return expect_close(twice, once.detach().double(), "P(P(W)) = P(W)", "radius 0.7", atol=1e-8)


def projection_bad_radius(projection, ctx: CheckContext) -> str:
    return expect_raises(
        projection, ValueError, "a radius <= 0", "radius = 0", scaled_matrix(ctx, 2, 2, 1.0), 0.0
    )


def _lambda_matches(function, ctx: CheckContext, activation: str, m: int, norm: float) -> str:
    W = scaled_matrix(ctx, m, m, norm)
    given = f"a ({m}, {m}) W with ||W||_2 = {norm:.3g}, activation {activation!r}"
    got = ctx.call(function, W.clone(), activation, given=given)
    return expect_number(got, LIPSCHITZ[activation] * norm, "lambda", given)


def lambda_every_activation(function, ctx: CheckContext) -> str:
    for activation in LIPSCHITZ:
        _lambda_matches(function, ctx, activation, ctx.integer(2, 6), ctx.uniform(0.1, 5.0))
    return "correct for tanh, relu, identity and sigmoid on random matrices"


def lambda_unknown_activation(function, ctx: CheckContext) -> str:
    W = scaled_matrix(ctx, 2, 2, 1.0)
    return expect_raises(function, ValueError, "unknown activation", "'softplus'", W, "softplus")


def _tanh_rnn(ctx: CheckContext, size: int, inputs: int, lam: float):
    return TanhStep(scaled_matrix(ctx, size, size, lam), ctx.randn(size, inputs))


def _ratio(step, h, h2, x) -> float:
    return float(((step(h, x) - step(h2, x)).norm(dim=1) / (h - h2).norm(dim=1)).max())


def _estimate_matches(function, ctx: CheckContext, size: int, inputs: int, lam: float, n: int):
    step = _tanh_rnn(ctx, size, inputs, lam)
    h, h2, x = ctx.randn(n, size), ctx.randn(n, size), ctx.randn(n, inputs)
    given = f"a tanh RNN with lambda = {lam:.3g}, S = {size}, D = {inputs}, N = {n} pairs"
    got = ctx.call(function, step, h, h2, x, given=given)
    return expect_number(got, _ratio(step, h, h2, x), "largest ratio", given, rel=1e-6)


def estimate_random(function, ctx: CheckContext) -> str:
    for _ in range(3):
        lam = ctx.uniform(0.2, 3.0)
        size, inputs, pairs = ctx.integer(1, 6), ctx.integer(1, 4), ctx.integer(1, 80)
        _estimate_matches(function, ctx, size, inputs, lam, pairs)
    return "matches on 3 random tanh RNNs (including a single pair and one-unit states)"


def estimate_below_lambda(function, ctx: CheckContext) -> str:
    lam = ctx.uniform(0.3, 0.95)
    step = _tanh_rnn(ctx, 5, 3, lam)
    h, h2, x = ctx.randn(200, 5, scale=3.0), ctx.randn(200, 5, scale=3.0), ctx.randn(200, 3)
    got = ctx.call(function, step, h, h2, x, given="200 wide pairs")
    expect_number(got, _ratio(step, h, h2, x), "largest ratio", "200 wide pairs", rel=1e-6)
    got = float(got)
    if not 0 < got <= lam + 1e-9:
        raise CheckFailedError(
            f"a lower bound on a {lam:.3g}-contraction must lie in (0, {lam:.3g}], got {got:.6g}"
        )
    return f"the estimate {got:.4g} lies below the proved lambda = {lam:.4g}"


PROJECTION = Question(
    id="hw04.q1",
    title="The projection onto the stable set",
    points=3,
    function="spectral_projection",
    task=(
        "spectral_projection(W, radius) returns the Euclidean (Frobenius) projection of the "
        "matrix W onto {M : ||M||_2 <= radius}: clip the singular values of W at radius. "
        "Raise ValueError when radius <= 0."
    ),
    tests="the SVD clip, why it is the nearest point of the spectral-norm ball",
    forbidden=("project_spectral_ball", "project_to_stable_"),
    checks=(
        Check("lands in the ball", projection_in_ball),
        Check("leaves points inside unchanged", projection_inside_unchanged),
        Check("matches the SVD clip", fixed_instance(_projection_matches, 5, 4, 2.0, 1.0)),
        Check("random shapes and radii", projection_random_instances, hidden=True),
        Check("nearest point", projection_nearest, hidden=True),
        Check("idempotent", projection_idempotent, hidden=True),
        Check("refuses a radius <= 0", projection_bad_radius, hidden=True),
    ),
)

LAMBDA = Question(
    id="hw04.q2",
    title="The contraction constant of a vanilla RNN",
    points=2,
    function="rnn_contraction_constant",
    task=(
        "rnn_contraction_constant(W, activation) returns lambda = L_rho ||W||_2 (a float) for "
        "activation in 'tanh', 'relu', 'identity', 'sigmoid'; raise ValueError for any other."
    ),
    tests="Lipschitz constants of activations (sigmoid: 1/4), spectral norm versus other norms",
    forbidden=("contraction_constant", "activation_lipschitz", "ACTIVATION_LIPSCHITZ"),
    checks=(
        Check("tanh", fixed_instance(_lambda_matches, "tanh", 4, 0.8)),
        Check("sigmoid", fixed_instance(_lambda_matches, "sigmoid", 3, 2.0)),
        Check("every activation, random matrices", lambda_every_activation, hidden=True),
        Check("refuses an unknown activation", lambda_unknown_activation, hidden=True),
    ),
)

ESTIMATE = Question(
    id="hw04.q3",
    title="An empirical Lipschitz estimate",
    points=2,
    function="lipschitz_lower_bound",
    task=(
        "lipschitz_lower_bound(step, states, other_states, inputs) returns (a float) the largest "
        "ratio ||step(h, x) - step(h', x)|| / ||h - h'|| over the rows h, h', x of the (N, S), "
        "(N, S), (N, D) tensors; step maps a batch (N, S), (N, D) to (N, S)."
    ),
    tests="contractivity measured on random pairs; a lower bound on the Lipschitz constant",
    forbidden=("empirical_lipschitz", "jacobian_norms"),
    checks=(
        Check("a tanh RNN, 50 pairs", fixed_instance(_estimate_matches, 3, 2, 0.9, 50)),
        Check("random RNNs, edge sizes", estimate_random, hidden=True),
        Check("below the proved lambda", estimate_below_lambda, hidden=True),
    ),
)

CONTRACTION_PROOF = Question(
    id="hw04.q4",
    title="Proof: the vanilla RNN condition",
    points=3,
    kind="proof",
    task=(
        "Prove that if rho is L_rho-Lipschitz (coordinate-wise) and ||W||_2 < 1 / L_rho, then "
        "phi(h, x) = rho(W h + U x) is lambda-contractive in h with lambda = L_rho ||W||_2, "
        "for every input x."
    ),
    tests="writing a contraction proof: coordinate-wise Lipschitz bound, operator norm",
)

HOMEWORK = Homework(
    id="hw04",
    chapter="04_stability",
    title="Stability as contractivity",
    minutes=60,
    questions=(PROJECTION, LAMBDA, ESTIMATE, CONTRACTION_PROOF),
)
