"""Helpers for writing checks whose failure messages say what was expected and why."""

from __future__ import annotations

import math
from typing import Any

import torch

from stablernn_lib.homework.registry import CheckFailedError


def show(value: Any) -> str:
    """A short readable form of a number, tensor or other value for a message."""
    if isinstance(value, torch.Tensor):
        if value.numel() <= 6:
            numbers = ", ".join(f"{v:.4g}" for v in value.detach().flatten().tolist())
            return f"tensor of shape {tuple(value.shape)} [{numbers}]"
        return f"tensor of shape {tuple(value.shape)}, dtype {value.dtype}"
    if isinstance(value, float):
        return f"{value:.6g}"
    return repr(value)


def expect_tensor(got: Any, shape: tuple[int, ...], what: str, given: str) -> torch.Tensor:
    """``got`` must be a floating tensor of ``shape``; returns it."""
    if not isinstance(got, torch.Tensor):
        raise CheckFailedError(
            f"{what}: expected a torch.Tensor, got {type(got).__name__} for {given}"
        )
    if tuple(got.shape) != tuple(shape):
        raise CheckFailedError(
            f"{what}: expected shape {tuple(shape)}, got {tuple(got.shape)} for {given}"
        )
    if not got.is_floating_point():
        raise CheckFailedError(f"{what}: expected a floating tensor, got {got.dtype} for {given}")
    if not torch.isfinite(got).all():
        raise CheckFailedError(f"{what}: contains NaN or inf for {given}")
    return got


def expect_close(
    got: Any,
    expected: torch.Tensor,
    what: str,
    given: str,
    *,
    atol: float = 1e-6,
    rtol: float = 1e-5,
) -> str:
    """``got`` must be a tensor equal to ``expected`` up to ``atol + rtol |expected|``."""
    got = expect_tensor(got, tuple(expected.shape), what, given)
    got = got.detach().to(expected.dtype)
    if not torch.allclose(got, expected, atol=atol, rtol=rtol):
        if expected.numel() <= 6:
            raise CheckFailedError(
                f"{what}: expected {show(expected)}, got {show(got)} for {given}"
            )
        gaps = (got - expected).abs()
        worst = tuple(int(i) for i in torch.unravel_index(gaps.argmax(), gaps.shape))
        raise CheckFailedError(
            f"{what}: wrong at index {worst} (the largest difference): expected "
            f"{float(expected[worst]):.6g}, got {float(got[worst]):.6g}, for {given}"
        )
    return f"{what}: correct for {given}"


def expect_number(
    got: Any, expected: float, what: str, given: str, *, rel: float = 1e-6, abs_tol: float = 1e-9
) -> str:
    """``got`` must be a real number close to ``expected``."""
    if isinstance(got, torch.Tensor) and got.numel() == 1:
        got = float(got)
    if isinstance(got, bool) or not isinstance(got, (int, float)):
        raise CheckFailedError(f"{what}: expected a number, got {type(got).__name__} for {given}")
    if not math.isfinite(float(got)):
        raise CheckFailedError(f"{what}: expected a finite number, got {got} for {given}")
    if not math.isclose(float(got), expected, rel_tol=rel, abs_tol=abs_tol):
        raise CheckFailedError(
            f"{what}: expected {show(float(expected))}, got {show(float(got))} for {given}"
        )
    return f"{what} = {show(float(got))} for {given}"


def expect_raises(
    function: Any, error: type[Exception], what: str, given: str, *args: Any, **kwargs: Any
) -> str:
    """Calling ``function(*args, **kwargs)`` must raise ``error`` (bad input is refused)."""
    try:
        function(*args, **kwargs)
    except error:
        return f"{what}: raises {error.__name__} for {given}"
    except NotImplementedError:
        raise
    except Exception as other:
        raise CheckFailedError(
            f"{what}: expected {error.__name__} for {given}, got {type(other).__name__}: {other}"
        ) from other
    raise CheckFailedError(f"{what}: expected {error.__name__} for {given}, but nothing was raised")
