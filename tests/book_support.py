"""Shared by the notebook, book and browser tests: run every notebook once, build once.

``execute_book_notebooks()`` executes each notebook listed in ``_toc.yml`` (a homework
notebook in its student edition, with stubs, as the student site shows it) with nbclient
(fresh, so a library change cannot hide behind stale outputs), two at a time with one
torch thread each. It measures each notebook's kernel CPU time and wall time, writes them
to ``_build/notebook_times.json`` (with the machine's load average, since a loaded machine
stretches both) and, with the machine, date and commit, to
``data/results/notebook_times.json`` (shown by the instructor page; commit it after a run
on a quiet machine), and stores every executed notebook in the book's jupyter-cache. The
times are benchmarks, recorded and shown, never pass/fail limits; the per-cell timeout
only stops a hung cell. ``build_book()`` then builds the student site, as ``make book``
does, which finds every notebook in the cache and executes none. Each runs once per test run:
the first pytest-xdist worker that needs it does the work while the others wait for it
(:func:`once_per_run`), so the tests that read the built sites can run on any worker."""

from __future__ import annotations

import fcntl
import json
import multiprocessing
import os
import re
import resource
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from functools import lru_cache
from pathlib import Path

import nbformat
import yaml
from stablernn_tools.notebook_checks import forget_stale_build, toc_files
from stablernn_tools.notebook_times import read_times as read_recorded_times
from stablernn_tools.notebook_times import write_times

from stablernn_lib.core.io import atomic_write_json

ROOT = Path(__file__).resolve().parents[1]
BUILD_DIR = ROOT / "_build"
HTML_DIR = BUILD_DIR / "html"  # the student site (`make book`)
INSTRUCTOR_DIR = BUILD_DIR / "instructor"  # `make instructor` builds into it too
INSTRUCTOR_HTML_DIR = INSTRUCTOR_DIR / "_build" / "html"  # the instructor site
STUDENT_DIR = ROOT / "student"  # its generated sources
CACHE_DIR = BUILD_DIR / ".jupyter_cache"
TIMES_PATH = BUILD_DIR / "notebook_times.json"
# A hang guard, not a budget: generous enough for a notebook on a loaded 2-core machine.
CELL_TIMEOUT_S = 1800
# Notebooks run side by side, one per core (two on the 2-core machines of the course), each
# kernel with one torch thread: about half the wall time of running them one by one.
NOTEBOOK_WORKERS = max(1, min(2, os.cpu_count() or 1))
KERNEL_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
# Kernels that start side by side pick their ports at random; two can pick the same one (the
# second kernel then dies before it replies): it is started again, up to this many times.
KERNEL_STARTS = 3
ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*m")


# The workers of one pytest-xdist run share its id (one process alone gets one of its own).
RUN_ID = os.environ.get("PYTEST_XDIST_TESTRUNUID") or uuid.uuid4().hex


def once_per_run(name: str, compute: Callable[[], object]) -> object:
    """``compute()``'s JSON result, computed by the first worker of this test run that asks
    (under a lock in ``_build``) and read back from ``_build/.<name>.json`` by the others; an
    exception is not kept (the next caller computes again)."""
    BUILD_DIR.mkdir(parents=True, exist_ok=True)
    record = BUILD_DIR / f".{name}.json"
    with open(BUILD_DIR / f".{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if record.is_file():
            saved = json.loads(record.read_text())
            if saved["run"] == RUN_ID:
                return saved["result"]
        result = compute()
        atomic_write_json(record, {"run": RUN_ID, "result": result})
        return result


def _one_thread() -> None:
    """Worker initializer: the kernels it starts inherit one torch thread."""
    os.environ.update(KERNEL_ENV)


def book_notebooks() -> list[str]:
    """Notebooks of the book (paths relative to the repository root), in toc order."""
    names = [f"{name}.ipynb" for name in toc_files(ROOT / "_toc.yml")]
    return [name for name in names if (ROOT / name).is_file()]


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _execute(path: str) -> tuple[str, dict]:
    """Run one notebook in this (worker) process; its kernel is this process's only child,
    so the children's CPU time is the kernel's. Returns the executed notebook as JSON."""
    from jupyter_cache.executors.utils import single_nb_execution

    cpu_before, wall_before = _children_cpu_s(), time.perf_counter()
    for attempt in range(1, KERNEL_STARTS + 1):
        notebook = nbformat.read(path, as_version=4)
        try:
            result = single_nb_execution(
                notebook, cwd=str(Path(path).parent), timeout=CELL_TIMEOUT_S, allow_errors=False
            )
            break
        except RuntimeError as error:  # the kernel never started: e.g. a port taken meanwhile
            if "before replying to kernel_info" not in str(error) or attempt == KERNEL_STARTS:
                raise
    record = {
        "cpu_s": round(_children_cpu_s() - cpu_before, 2),
        "wall_s": round(time.perf_counter() - wall_before, 2),
        "load_average_1min": round(os.getloadavg()[0], 2),
        "cpu_count": os.cpu_count(),
        "error": None if result.err is None else ANSI_ESCAPE.sub("", result.exc_string)[-4000:],
    }
    return nbformat.writes(notebook), record


def _longest_first(names: list[str]) -> list[str]:
    """``names`` by their last recorded wall time, longest first (unknown ones first), so
    that two workers finish close together."""
    recorded = (read_recorded_times(ROOT) or {}).get("notebooks", {})
    return sorted(names, key=lambda name: -recorded.get(name, {}).get("wall_s", float("inf")))


@lru_cache(maxsize=1)
def execute_book_notebooks() -> dict[str, dict]:
    """Execute every book notebook once per run, a homework notebook in the student edition
    (written to ``student/``) that the student site shows; all go to the jupyter-cache.
    Returns the times of the book's notebooks: ``{path: {cpu_s, wall_s, ..., error}}``."""
    return once_per_run("notebooks", _execute_book_notebooks)


def _execute_book_notebooks() -> dict[str, dict]:
    from jupyter_cache import get_cache
    from jupyter_cache.base import CacheBundleIn
    from stablernn_tools.student_edition import build_student_edition

    os.environ.pop("STABLERNN_WIDGETS", None)  # the site needs precomputed frames
    forget_stale_build()  # so that the build below re-reads every page it is fed
    build_student_edition(ROOT, STUDENT_DIR)
    cache = get_cache(str(CACHE_DIR))
    names = book_notebooks()
    # the student edition's chapters have the book's code (the same cache entries); a
    # homework page of the student site is the student edition's notebook, with stubs
    # instead of solutions: that one runs, and is timed, as a student runs it (the
    # instructor editions run in the grader's tests, tests/test_homework_grading.py)
    sources = {
        name: STUDENT_DIR / name if name.startswith("chapters/homework/") else ROOT / name
        for name in names
    }
    times: dict[str, dict] = {}
    # one kernel per worker process and one torch thread per kernel, side by side
    spawn = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(NOTEBOOK_WORKERS, mp_context=spawn, initializer=_one_thread) as pool:
        queue = _longest_first(names)
        futures = {name: pool.submit(_execute, str(sources[name])) for name in queue}
        for name, future in futures.items():
            text, record = future.result()
            times[name] = record
            if record["error"] is None:
                data = {"execution_seconds": record["wall_s"]}
                notebook = nbformat.reads(text, as_version=4)
                bundle = CacheBundleIn(notebook, str(sources[name]), data=data)
                cache.cache_notebook_bundle(bundle, check_validity=False, overwrite=True)
            status = "ok" if record["error"] is None else "FAILED"
            print(f"{name}: cpu {record['cpu_s']:.1f} s, wall {record['wall_s']:.1f} s, {status}")
    times = {name: times[name] for name in names}  # toc order
    atomic_write_json(TIMES_PATH, times)
    # data/results/notebook_times.json: the table of instructor.md
    write_times(times, ROOT, kernel_env=KERNEL_ENV, in_parallel=NOTEBOOK_WORKERS)
    return times


@lru_cache(maxsize=1)
def build_book() -> subprocess.CompletedProcess:
    """Run the notebooks (timed, cached), then build the STUDENT site as ``make book`` does,
    once per run.

    The student edition (``student/``, written by :func:`execute_book_notebooks`) is built
    into ``_build/html`` with the shared cache, where every one of its notebooks is already:
    the build executes nothing.
    """
    execute_book_notebooks()
    done = once_per_run("student_site", _build_student_site)
    return subprocess.CompletedProcess(
        done["args"], done["returncode"], done["stdout"], done["stderr"]
    )


def _build_student_site() -> dict:
    # as `make book`: Sphinx would keep an earlier build's search-index words (e.g. of an
    # instructor build into the same folder), so the student site starts from nothing
    shutil.rmtree(HTML_DIR, ignore_errors=True)
    jupyter_book = Path(sys.executable).with_name("jupyter-book")
    start = time.perf_counter()
    result = subprocess.run(
        [str(jupyter_book), "build", str(STUDENT_DIR), "--path-output", str(ROOT)]
        + ["-W", "--keep-going"],
        cwd=ROOT,
        env={**os.environ, "STABLERNN_WIDGETS": "frames"},
        capture_output=True,
        text=True,
        timeout=3600,
    )
    print(f"jupyter-book build: {time.perf_counter() - start:.0f} s, exit code {result.returncode}")
    return {key: getattr(result, key) for key in ("args", "returncode", "stdout", "stderr")}


@lru_cache(maxsize=1)
def build_instructor_site() -> Path:
    """Build the INSTRUCTOR site (`make instructor`: the book's own sources, solutions
    included) into :data:`INSTRUCTOR_HTML_DIR` with ``-W``, once per run; returns that folder.

    The chapters come from the cache that :func:`execute_book_notebooks` filled, so this build
    executes none of them; the instructor homework notebooks are shown without running them
    again here (tests/test_homework_grading.py runs every one in the grader). Raises
    ``AssertionError`` with the build's output when it fails.
    """
    execute_book_notebooks()
    return Path(once_per_run("instructor_site", _build_instructor_site))


def _build_instructor_site() -> str:
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    config["execute"]["cache"] = str(CACHE_DIR)
    config["execute"]["exclude_patterns"] = ["chapters/homework/*"]
    forget_stale_build(ROOT, INSTRUCTOR_DIR / "_build")  # no page of older code survives
    shutil.rmtree(INSTRUCTOR_HTML_DIR, ignore_errors=True)
    config_path = INSTRUCTOR_DIR / "_config.yml"
    config_path.write_text(yaml.safe_dump(config, sort_keys=False))
    jupyter_book = Path(sys.executable).with_name("jupyter-book")
    start = time.perf_counter()
    result = subprocess.run(
        [str(jupyter_book), "build", str(ROOT), "--config", str(config_path)]
        + ["--path-output", str(INSTRUCTOR_DIR), "-W", "--keep-going"],
        capture_output=True,
        text=True,
        timeout=1800,
        env={**os.environ, "STABLERNN_WIDGETS": "frames"},
    )
    print(f"instructor build: {time.perf_counter() - start:.0f} s, exit code {result.returncode}")
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    return str(INSTRUCTOR_HTML_DIR)


def read_times() -> dict[str, dict]:
    return json.loads(TIMES_PATH.read_text())
