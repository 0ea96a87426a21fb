"""Homeworks (``HOMEWORK`` of ``questions/hwNN.py``), their questions and checks: a check
``run(answer, ctx) -> str`` returns what held or raises :class:`CheckFailedError` naming the
expected value, the value obtained and the input; hidden checks draw from ``ctx.generator``."""

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

HOMEWORK_MODULES: tuple[str, ...] = tuple(f"hw{n:02d}" for n in range(1, 10))

QuestionKind = Literal["code", "proof"]


class CheckFailedError(AssertionError):
    """Raised by a check when the student's answer is wrong; the message says why."""


class NotAttemptedError(Exception):
    """The student's function still raises ``NotImplementedError`` (the stub)."""


class StudentError(Exception):
    """The student's function raised an exception; the message names it and the input."""


@dataclass
class CheckContext:
    """What a check receives besides the answer: its seeded ``generator``, and when known
    the answer's ``source`` and every code cell of the ``notebook`` (for the source gate)."""

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
        """Call the student's function on copies of the arguments (the originals when
        ``inplace``); ``NotImplementedError`` becomes :class:`NotAttemptedError`, any other
        exception a :class:`StudentError` naming it and ``given`` (the input)."""
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
    """One check of a question; a failed ``required`` check zeroes the question's score."""

    name: str
    run: CheckFunction
    hidden: bool = False
    weight: float = 1.0
    time_limit: float = 10.0
    required: bool = False
    gate: bool = False  # the source-code gate: reads the answer's source, never calls it


@dataclass(frozen=True)
class Question:
    """A question ``hwNN.qM``: ``task`` its statement, ``tests`` what it tests, ``function``
    the solution cell defines (None for a proof: its rubric is in the instructor notebook),
    ``forbidden`` names that would answer it."""

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
    """A visible gate (weight 0, required): the answer uses neither ``forbidden`` nor the
    reference code, the notebook's aliases followed (a computed ``getattr`` passes it)."""

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
