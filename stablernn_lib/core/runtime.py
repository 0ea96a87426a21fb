"""Where the code runs: the mode (smoke or full) and the device."""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path
from typing import Literal, NoReturn, get_args

import torch

Mode = Literal["smoke", "full"]


def check_mode(mode: str) -> Mode:
    """Validate a mode name: ``"smoke"`` (CPU, minutes) or ``"full"`` (GPU, paper scale)."""
    if mode not in get_args(Mode):
        raise ValueError(
            f"unknown mode {mode!r}: use 'smoke' (small, runs on a CPU in minutes) "
            "or 'full' (paper scale, needs a GPU)"
        )
    return mode  # type: ignore[return-value]


def refuse_paper_scale_on_cpu(what: str, alternative: str = "") -> NoReturn:
    """Stop a command-line run of a paper-size config without a GPU: ``what`` would train (and
    how long on a CPU), ``alternative`` is a smaller config; ``--device cpu`` overrides."""
    other = f", use {alternative}" if alternative else ""
    raise SystemExit(
        f"no CUDA GPU found: {what}. Run it on a GPU{other}, "
        "or pass --device cpu to run it here anyway."
    )


def describe_runtime() -> str:
    """One line saying which torch build runs and whether a GPU is present."""
    if torch.cuda.is_available():
        where = f"GPU: {torch.cuda.get_device_name(0)}"
    else:
        where = "no GPU: smoke mode runs on the CPU"
    return f"torch {torch.__version__}, {torch.get_num_threads()} CPU threads, {where}"


def scratch_dir(prefix: str) -> Path:
    """A new temporary folder for a notebook's smoke runs, removed when Python (or the Jupyter
    kernel) exits."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path
