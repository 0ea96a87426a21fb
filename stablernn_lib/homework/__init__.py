"""Homework for every chapter: the questions and the checks a student runs.

In a homework notebook, after each solution cell::

    from stablernn_lib.homework import check
    check("hw04.q1", spectral_projection)

prints which visible checks passed and why the others failed.  The names below are
imported on first use, so that the grader's reader imports neither torch nor the checks.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["check", "get_homework", "get_question", "homeworks"]
_HOME = {
    "check": "checks",
    "get_homework": "registry",
    "get_question": "registry",
    "homeworks": "registry",
}


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module 'stablernn_lib.homework' has no attribute {name!r}")
    return getattr(importlib.import_module(f"stablernn_lib.homework.{_HOME[name]}"), name)
