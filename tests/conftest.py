"""Shared fixtures: seeded generators and the real-data location."""

from __future__ import annotations

import ast
import functools
import inspect
import os
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from tqdm import tqdm

# The unit tests run many tiny float64 operations: one thread is faster than two there.
torch.set_num_threads(1)
# No tqdm monitor thread: mutmut forks each mutant's run from a process that has run the
# tests, and a thread alive at a fork can leave a lock held in the child. (Forked runs that
# draw a tqdm bar still hung with it off: data/results/mutation_notes.md.)
tqdm.monitor_interval = 0


@pytest.fixture
def generator() -> torch.Generator:
    """A seeded CPU generator, so every random instance is reproducible."""
    return torch.Generator().manual_seed(20190506)


@pytest.fixture
def real_data_dir() -> Path:
    """The directory of the real corpora (STABLERNN_DATA), or skip with the reason."""
    value = os.environ.get("STABLERNN_DATA")
    if not value:
        pytest.skip(
            "needs the real WikiText-2 corpus: set STABLERNN_DATA to the folder holding "
            "wikitext-2/ (CI sets it to ../shared/data)"
        )
    return Path(value)


@pytest.fixture(scope="module")
def browser():
    """One headless Chromium for a test module (tests/browser_support.py)."""
    from browser_support import chromium

    with chromium() as browser:
        yield browser


@pytest.fixture(autouse=True)
def no_open_figures():
    """Start every test with no open matplotlib figure and close what it leaves open."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.close("all")
    yield
    plt.close("all")


def _mutated_function(mutant: str) -> tuple[str, str] | None:
    """``(module, function)`` of a mutant name ``pkg.mod.x_func__mutmut_3``; None for a method."""
    module, _, name = mutant.rpartition(".")
    if "\u01c1" in name or not name.startswith("x_"):  # a method's name holds U+01C1
        return None
    return module, name[2:].rsplit("__mutmut_", 1)[0]


def _reaches(function: Callable, target: tuple[str, str]) -> bool:
    """Whether ``function`` calls ``target``, directly or through ``stablernn_lib`` functions.

    Follows the names in each body (``f(...)`` and ``module.f(...)``); a body it cannot read
    counts as reaching the target, so a cache is only kept when it provably does not
    depend on the mutated function.
    """
    stack, seen = [function], set()
    while stack:
        current = inspect.unwrap(stack.pop())
        key = (current.__module__, current.__name__)
        if key == target:
            return True
        if key in seen:
            continue
        seen.add(key)
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(current)))
        except (OSError, TypeError, SyntaxError):
            return True
        for node in ast.walk(tree):
            value = None
            if isinstance(node, ast.Name):
                value = current.__globals__.get(node.id)
            elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
                owner = current.__globals__.get(node.value.id)
                value = getattr(owner, node.attr, None) if inspect.ismodule(owner) else None
            ours = (getattr(value, "__module__", None) or "").startswith("stablernn_lib")
            if inspect.isclass(value) and ours:
                return True  # methods are not followed: keep it simple and clear
            function_value = inspect.unwrap(value) if callable(value) else value
            if inspect.isfunction(function_value) and ours:
                stack.append(value)
    return False


@pytest.fixture(autouse=True, scope="session")
def fresh_caches_under_mutmut() -> None:
    """Under mutmut, clear the ``functools`` caches of ``stablernn_lib`` that the mutant can reach.

    mutmut 3 forks each mutant's test run from a process that has already run the
    unmutated code, so a cached result (``general_lemmas.solved_recursions``) would hide
    the mutant; only a name holding ``__mutmut_`` (a mutant, not mutmut's own passes)
    triggers this.  A cache whose function provably never calls the mutated function
    (:func:`_reaches`) is kept: recomputing it (seconds of sympy) would change nothing.
    """
    mutant = os.environ.get("MUTANT_UNDER_TEST", "")
    if "__mutmut_" not in mutant:
        return
    target = _mutated_function(mutant)
    for name, module in list(sys.modules.items()):
        if name.startswith("stablernn_lib") and module is not None:
            for value in vars(module).values():
                cached = callable(getattr(value, "cache_clear", None))
                if cached and (target is None or _reaches(value, target)):
                    value.cache_clear()


# The built sites' browser tests: each site's visits are one unit of work, which may go to
# either worker once the book is built (tests/book_support.py builds it once per run).
SITE_SCOPES = {"test_browser.py": "student site", "test_browser_instructor.py": "instructor site"}
BOOK_SCOPES = {"book", *SITE_SCOPES.values()}


@functools.cache
def _scope(path: str) -> str:
    """Which tests pytest-xdist keeps on one worker, one after another: each site's browser
    tests (:data:`SITE_SCOPES`); ``book`` for another file that runs the book's notebooks or
    reads the built site; ``grading`` for one that grades submissions in the sandbox (the
    grader's tests look for student processes left running, so no other grading may run
    beside them), else the file itself."""
    if Path(path).name in SITE_SCOPES:
        return SITE_SCOPES[Path(path).name]
    text = Path(path).read_text(encoding="utf-8")
    if "book_support" in text:
        return "book"
    if any(call in text for call in ("grade_submissions", '"grade"', "run_autograder")):
        return "grading"
    return path


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """How pytest-xdist shares the tests out (``make test`` runs two workers).

    The ``book`` tests (they execute the notebooks and build the site) go first, to the
    first worker; each site's browser tests go, once the ``book`` tests are done, to the
    next worker that asks for work (one worker visits the student site while the other
    visits the instructor site); the tests that grade in the sandbox go to
    one worker, one file after another; every other test file goes to one worker whole, so
    its module fixtures run once (:func:`_scope`).
    """
    # Not ``--dist loadgroup`` with ``xdist_group`` marks: pytest-xdist 3.8 groups a test by
    # the "@group" it appends to ``item._nodeid``, and pytest 9.2 reads a node's id from
    # ``Node._id`` instead, so the marks are ignored and each group is spread over both
    # workers (checked: two files marked with one group, ``-n 2 --dist loadgroup``); the book
    # would then be executed and built on each worker.
    from xdist.scheduler import LoadScopeScheduling

    root = Path(str(config.rootpath))

    class BookFirst(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _scope(str(root / nodeid.split("::", 1)[0]))

        def _book_done(self) -> bool:
            flags = [
                done
                for work in self.assigned_work.values()
                for done in work.get("book", {}).values()
            ]
            return "book" not in self.workqueue and all(flags)

        def _assign_work_unit(self, node) -> None:  # noqa: ANN001 (xdist's WorkerController)
            # the book first; then a site's visits as soon as the book is built; else any
            # other unit (a site's, when nothing else is left: it waits for the build)
            order = ["book", *SITE_SCOPES.values()]
            first = [scope for scope in order if scope in self.workqueue]
            ready = [scope for scope in first if scope == "book" or self._book_done()]
            # the longest other unit, the grading, first
            rest = sorted(
                (scope for scope in self.workqueue if scope not in BOOK_SCOPES),
                key=lambda scope: scope != "grading",
            )
            chosen = (ready + rest + first)[0]
            self.workqueue.move_to_end(chosen, last=False)
            super()._assign_work_unit(node)

    return BookFirst(config, log)


# How much the workers without the book yield the CPU to it (``nice`` increment).
OTHER_WORKERS_NICE = 5


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """On a pytest-xdist worker, lower the priority once at its first test that is not the
    book's.

    The book's chain (notebooks, build, browser visits) is the longest; the other tests keep
    the cores busy where that chain leaves them idle, instead of stretching it. The first
    worker gets the book first (``BookFirst``), so it is lowered only once the book is done.
    """
    if "PYTEST_XDIST_WORKER" not in os.environ or _scope(str(item.path)) in BOOK_SCOPES:
        return
    if not getattr(pytest_runtest_setup, "lowered", False):
        os.nice(OTHER_WORKERS_NICE)
        pytest_runtest_setup.lowered = True  # type: ignore[attr-defined]
