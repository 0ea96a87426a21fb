"""Tolerances for comparing results that are equal in exact arithmetic.

Two computations of the same quantity by different paths (batch shapes, thread
counts, kernels, devices) round differently, so they agree only up to a few units
in the last place per operation.  The tolerances here come from the dtype's
machine epsilon ``eps`` (``torch.finfo(dtype).eps``) and a count of the rounded
operations that feed one result: the standard bound for a sum or dot product of
``n`` terms is ``n * eps * sum |terms|`` (Higham, *Accuracy and Stability of
Numerical Algorithms*, section 3.1).
"""

from __future__ import annotations

import torch


def rounding_tolerance(dtype: torch.dtype, operations: int, scale: float = 1.0) -> float:
    """``operations * eps(dtype) * scale``: the absolute rounding error to allow.

    ``operations`` counts the rounded operations that feed one result (e.g. the
    length of a dot product times the number of steps of a recurrence); ``scale``
    is the size of the quantities involved.
    """
    if operations < 1 or scale < 0:
        raise ValueError(f"need operations >= 1 and scale >= 0, got {operations}, {scale}")
    return operations * torch.finfo(dtype).eps * scale


def close_kwargs(dtype: torch.dtype, operations: int, scale: float = 1.0) -> dict[str, float]:
    """``rtol``/``atol`` for ``torch.testing.assert_close`` or ``np.testing.assert_allclose``."""
    return {
        "rtol": rounding_tolerance(dtype, operations),
        "atol": rounding_tolerance(dtype, operations, scale),
    }
