"""The homework registry: homeworks, their questions, and each question's checks.

A *homework* belongs to one chapter (``hw04`` to ``chapters/04_stability.ipynb``) and
holds two to five *questions*.  A code question names the function the student writes
and carries its checks; a proof question is graded by hand with the rubric of its
instructor notebook.

A *check* is a function ``run(answer, ctx) -> str``: it calls the student's function on
some input, returns a message saying what held when everything is right, and raises
:class:`CheckFailedError` with a message (expected value, value obtained, the input used)
when something is wrong.  Visible checks use fixed instances and run in the student's
notebook; hidden checks draw their instances from ``ctx.generator``, which the grader
seeds with the instructor's grading seed, and run only when grading.

Each homework lives in its own module ``stablernn_lib.homework.questions.hwNN`` that
defines ``HOMEWORK``; adding a chapter's homework means adding that module and its name
to :data:`HOMEWORK_MODULES`.
"""

from __future__ import annotations

import copy
import hashlib
import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from typing import Any, Literal

import torch

from stablernn_lib.homework.sources import (  # noqa: F401 (part of this module's API)
    CELL_BREAK,
    REFERENCE_CODE,
    names_used,
    parse_cells,
)

HOMEWORK_MODULES: tuple[str, ...] = (
    "hw01",
    "hw02",
    "hw03",
    "hw04",
    "hw05",
    "hw06",
    "hw07",
    "hw08",
    "hw09",
)

QuestionKind = Literal["code", "proof"]


class CheckFailedError(AssertionError):
    """Raised by a check when the student's answer is wrong; the message says why."""


class NotAttemptedError(Exception):
    """The student's function still raises ``NotImplementedError`` (the stub)."""


class StudentError(Exception):
    """The student's function raised an exception; the message names it and the input."""


@dataclass
class CheckContext:
    """What a check receives besides the answer.

    ``generator`` is seeded per check (from the grading seed for hidden checks), so a
    check draws the same instance every time it runs with the same seed.  ``source``
    is the source code of the student's answer when known (for the independence
    check), else ``None``; ``notebook`` is every code cell of the submission (the
    independence check follows the aliases it defines), when known.
    """

    seed: int
    generator: torch.Generator
    source: str | None = None
    notebook: str | None = None

    def randn(self, *shape: int, scale: float = 1.0) -> torch.Tensor:
        """A float64 tensor of i.i.d. ``N(0, scale^2)`` entries from this check's generator."""
        return scale * torch.randn(*shape, generator=self.generator, dtype=torch.float64)

    def uniform(self, low: float, high: float) -> float:
        """One number drawn uniformly from ``[low, high)``."""
        return low + (high - low) * float(torch.rand((), generator=self.generator))

    def integer(self, low: int, high: int) -> int:
        """One integer drawn uniformly from ``low..high`` (both included)."""
        return int(torch.randint(low, high + 1, (), generator=self.generator))

    def call(
        self,
        function: Callable[..., Any],
        *args: Any,
        given: str = "",
        inplace: bool = False,
        **kwargs: Any,
    ):
        """Call the student's function; turn its exceptions into readable ones.

        The function gets copies of the check's tensors, modules and containers, so a
        check computes its expected values from inputs no answer could change; only a
        question about in-place semantics passes ``inplace=True`` (its check keeps its
        own copies from before the call).  ``NotImplementedError`` becomes
        :class:`NotAttemptedError`; any other exception becomes :class:`StudentError`
        naming the exception and ``given`` (the input).
        """
        if not inplace:
            args = tuple(pristine(a) for a in args)
            kwargs = {k: pristine(v) for k, v in kwargs.items()}
        try:
            return function(*args, **kwargs)
        except NotImplementedError as error:
            raise NotAttemptedError(str(error)) from error
        except (CheckFailedError, NotAttemptedError, StudentError):
            raise
        except Exception as error:  # the student's code may raise anything
            where = f" for {given}" if given else ""
            raise StudentError(
                f"your function raised {type(error).__name__}: {error}{where}"
            ) from error


def pristine(value: Any) -> Any:
    """A copy of ``value`` that shares no tensor storage with it (other values as they are)."""
    if isinstance(value, torch.Tensor):
        return value.detach().clone().requires_grad_(value.requires_grad)
    if isinstance(value, torch.nn.Module):
        return copy.deepcopy(value)
    if isinstance(value, (list, tuple)):
        return type(value)(pristine(v) for v in value)
    if isinstance(value, dict):
        return {k: pristine(v) for k, v in value.items()}
    return value


CheckFunction = Callable[[Any, CheckContext], str]


@dataclass(frozen=True)
class Check:
    """One check of a question: a name, the function, visibility, weight, time limit.

    A failed ``required`` check sets the question's score to zero (used for the
    check that the student did not just call the library's implementation).
    """

    name: str
    run: CheckFunction
    hidden: bool = False
    weight: float = 1.0
    time_limit: float = 10.0
    required: bool = False
    gate: bool = False  # the source-code gate: reads the answer's source, never calls it


@dataclass(frozen=True)
class Question:
    """A homework question.

    ``id`` is ``"hwNN.qM"``; ``function`` is the name the solution cell defines (code
    questions); ``task`` is the one-paragraph statement used in stubs and reports;
    ``tests`` says what the question tests (instructor page); ``forbidden`` lists
    names whose use in the answer defeats the question (the library function it
    re-implements).  A proof question's rubric lives only in its instructor notebook
    (a Markdown cell tagged ``rubric``, read by :mod:`stablernn_grader.rubrics`),
    never in the library that students install.
    """

    id: str
    title: str
    points: float
    task: str
    tests: str
    kind: QuestionKind = "code"
    function: str | None = None
    checks: tuple[Check, ...] = ()
    forbidden: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.kind == "code" and (not self.function or not self.checks):
            raise ValueError(f"code question {self.id} needs a function name and checks")

    @property
    def visible_checks(self) -> tuple[Check, ...]:
        return tuple(c for c in self.all_checks if not c.hidden)

    @property
    def hidden_checks(self) -> tuple[Check, ...]:
        return tuple(c for c in self.all_checks if c.hidden)

    @property
    def all_checks(self) -> tuple[Check, ...]:
        """The question's checks, preceded by the source-code gate (the independence check)."""
        if self.kind != "code":
            return self.checks
        return (independence_check(self.forbidden), *self.checks)


@dataclass(frozen=True)
class Homework:
    """The homework of one chapter: id ``hwNN``, the chapter slug, expected minutes."""

    id: str
    chapter: str
    title: str
    minutes: int
    questions: tuple[Question, ...] = field(default_factory=tuple)

    @property
    def notebook(self) -> str:
        """Path of the single-source notebook, relative to the repository root."""
        return f"chapters/homework/{self.id}_{self.chapter.split('_', 1)[1]}.ipynb"

    @property
    def points(self) -> float:
        return sum(q.points for q in self.questions)


def gate_verdict(forbidden: tuple[str, ...], used: set[str]) -> str:
    """The gate's message when ``used`` (from :func:`names_used`) is allowed; else it raises
    :class:`CheckFailedError` naming the forbidden names or the reference code used."""
    found = sorted(set(forbidden) & used)
    if REFERENCE_CODE in used:
        raise CheckFailedError(
            f"your answer uses {REFERENCE_CODE} (stablernn_lib.homework.questions), which the "
            "grader compares answers with: this question asks you to write it yourself"
        )
    if found:
        raise CheckFailedError(
            f"your answer uses {', '.join(found)}: this question asks you to write it "
            "yourself (plain torch operations are fine)"
        )
    if not forbidden:
        return f"does not use {REFERENCE_CODE}"
    return f"does not call {', '.join(forbidden)} or {REFERENCE_CODE}"


def independence_check(forbidden: tuple[str, ...]) -> Check:
    """A visible gate (weight 0, required): the answer must not use the names it re-implements,
    nor the homework's reference code (``stablernn_lib.homework.questions``).

    It reads the source code (IPython syntax included), follows the aliases the
    notebook defines (``from m import f as g``, ``g = m.f``), and fails closed: source
    it cannot parse fails the gate.  A determined student still passes it (``getattr``
    with a computed name); the grader's sandbox holds no reference code at all.
    """

    def run(answer: Any, ctx: CheckContext) -> str:
        if ctx.source is None:
            return "source code not available here; the grader checks it"
        try:
            used = names_used(ctx.source, ctx.notebook or "")
        except SyntaxError:
            raise CheckFailedError(
                "the grader could not parse your answer's cells (Python or IPython syntax): "
                "fix the syntax error so that the source check can run"
            ) from None
        return gate_verdict(forbidden, used)

    return Check("written from scratch", run, weight=0.0, required=True, gate=True)


def check_seed(grading_seed: int, question_id: str, check_name: str) -> int:
    """The seed of one hidden check: a hash of the grading seed, question and check."""
    text = f"{grading_seed}:{question_id}:{check_name}".encode()
    return int.from_bytes(hashlib.sha256(text).digest()[:8], "little") % (2**63)


@cache
def get_homework(homework_id: str) -> Homework:
    """The homework ``hwNN``; ValueError naming the known ids otherwise."""
    if homework_id not in HOMEWORK_MODULES:
        known = ", ".join(HOMEWORK_MODULES)
        raise ValueError(f"unknown homework {homework_id!r}; known homeworks: {known}")
    module = importlib.import_module(f"stablernn_lib.homework.questions.{homework_id}")
    return module.HOMEWORK


def homeworks() -> tuple[Homework, ...]:
    """Every registered homework, in chapter order."""
    return tuple(get_homework(name) for name in HOMEWORK_MODULES)


def get_question(question_id: str) -> Question:
    """The question ``hwNN.qM``; ValueError naming the homework's questions otherwise."""
    if not isinstance(question_id, str) or "." not in question_id:
        raise ValueError(f"a question id looks like 'hw04.q1', got {question_id!r}")
    homework = get_homework(question_id.split(".", 1)[0])
    for question in homework.questions:
        if question.id == question_id:
            return question
    known = ", ".join(q.id for q in homework.questions)
    raise ValueError(f"unknown question {question_id!r}; {homework.id} has {known}")
