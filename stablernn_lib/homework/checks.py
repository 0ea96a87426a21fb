"""Running a question's checks: time limits (``signal.setitimer``: POSIX, main thread; else the
grader's per-cell limit), crash capture, scores, readable reports."""

from __future__ import annotations

import inspect
import signal
import threading
import time
import traceback
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any, Literal

import torch

from stablernn_lib.homework.registry import (
    Check,
    CheckContext,
    CheckFailedError,
    NotAttemptedError,
    Question,
    StudentError,
    check_seed,
    get_question,
)

Status = Literal["pass", "fail", "error", "timeout", "not attempted"]

VISIBLE_SEED = 0


class CheckTimeoutError(BaseException):
    """A check ran past its time limit (a BaseException: ``except Exception`` misses it)."""


@dataclass
class CheckOutcome:
    """What one check found."""

    name: str
    hidden: bool
    status: Status
    message: str
    weight: float
    required: bool
    seconds: float

    @property
    def passed(self) -> bool:
        return self.status == "pass"


@dataclass
class QuestionResult:
    """All outcomes of one question and the points they earn."""

    question_id: str
    points: float
    max_points: float
    outcomes: list[CheckOutcome]

    @property
    def status(self) -> str:
        """``complete``, ``partial``, ``not attempted`` or ``failed``."""
        if all(o.passed for o in self.outcomes):
            return "complete"
        if all(o.status == "not attempted" for o in self.outcomes if not o.required):
            return "not attempted"
        return "partial" if self.points > 0 else "failed"

    def to_dict(self) -> dict[str, Any]:
        return {
            "question_id": self.question_id,
            "points": self.points,
            "max_points": self.max_points,
            "status": self.status,
            "outcomes": [asdict(o) for o in self.outcomes],
        }


@contextmanager
def time_limit(seconds: float):
    """Raise :class:`CheckTimeoutError` after ``seconds``, then every 0.5 s (without
    ``SIGALRM`` or off the main thread: nothing)."""
    usable = hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()
    if not usable or seconds <= 0:
        yield
        return

    def on_alarm(signum: int, frame: Any) -> None:
        raise CheckTimeoutError(f"ran longer than {seconds:g} s")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds, 0.5)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def run_check(
    question: Question,
    check: Check,
    answer: Any,
    *,
    seed: int = 0,
    source: str | None = None,
    time_scale: float = 1.0,
    notebook: str | None = None,
) -> CheckOutcome:
    """Run one check on ``answer`` with its seeded generator (from ``seed`` when hidden);
    never raises (except KeyboardInterrupt)."""
    value = check_seed(seed, question.id, check.name) if check.hidden else VISIBLE_SEED
    generator = torch.Generator().manual_seed(value)
    ctx = CheckContext(seed=value, generator=generator, source=source, notebook=notebook)
    start = time.perf_counter()
    status: Status
    try:
        with time_limit(check.time_limit * time_scale):
            message = check.run(answer, ctx)
        status = "pass"
    except CheckTimeoutError as error:
        status = "timeout"
        message = f"the check {error} (your function may loop forever or be slow)"
    except (NotAttemptedError, NotImplementedError):
        status, message = "not attempted", "still the stub (it raises NotImplementedError)"
    except (CheckFailedError, StudentError) as error:
        status, message = "fail", str(error)
    except Exception as error:  # a bug in the check itself or an unexpected answer type
        last = traceback.extract_tb(error.__traceback__)[-1]
        status = "error"
        message = f"{type(error).__name__}: {error} (at {last.name}, line {last.lineno})"
    return CheckOutcome(
        name=check.name,
        hidden=check.hidden,
        status=status,
        message=str(message),
        weight=check.weight,
        required=check.required,
        seconds=round(time.perf_counter() - start, 3),
    )


def score(question: Question, outcomes: list[CheckOutcome]) -> float:
    """Points earned: ``points * passed weight / total weight``; 0 if a required check failed."""
    if not outcomes or any(o.required and not o.passed for o in outcomes):
        return 0.0
    total = sum(o.weight for o in outcomes)
    if total == 0:
        return 0.0
    earned = sum(o.weight for o in outcomes if o.passed)
    return round(question.points * earned / total, 2)


def run_question(
    question: Question,
    answer: Any,
    *,
    hidden: bool,
    seed: int = 0,
    source: str | None = None,
    time_scale: float = 1.0,
) -> QuestionResult:
    """Run a question's visible checks (and its hidden ones when ``hidden``)."""
    checks = question.all_checks if hidden else question.visible_checks
    outcomes = [
        run_check(question, c, answer, seed=seed, source=source, time_scale=time_scale)
        for c in checks
    ]
    return QuestionResult(
        question.id, score(question, outcomes), question.points, unanswered(outcomes)
    )


def unanswered(outcomes: list[CheckOutcome]) -> list[CheckOutcome]:
    """``outcomes`` where every check that calls the answer found the stub: the source gate
    says "not attempted" too (an untouched stub was not written from scratch; nothing was)."""
    calls = [o for o in outcomes if not o.required]
    if not calls or any(o.status != "not attempted" for o in calls):
        return outcomes
    return [
        CheckOutcome(
            o.name, o.hidden, "not attempted", "nothing to check yet", o.weight, o.required, 0.0
        )
        if o.required and o.passed
        else o
        for o in outcomes
    ]


def format_result(question: Question, result: QuestionResult) -> str:
    """A plain-text report: a count, then one line per check with the reason for each
    failure; a weight-0 check says so, and whether the question's points need it."""
    shown = result.outcomes
    if result.status == "not attempted":
        return (
            f"{question.id} {question.function}: not answered: the function is still the stub "
            "(it raises NotImplementedError), so nothing was checked and it earns no points. "
            "Replace the `raise NotImplementedError(...)` with your code and run the cell again."
        )
    passed = sum(o.passed for o in shown)
    hidden = any(o.hidden for o in shown)
    points = f" ({result.points:g} of {result.max_points:g} points)" if hidden else ""
    kind = "checks" if hidden else "visible checks"
    lines = [f"{question.id} {question.function}: {passed} of {len(shown)} {kind} passed{points}"]
    for outcome in shown:
        mark = {"pass": "PASS", "not attempted": "TODO", "timeout": "TIME"}.get(
            outcome.status, "FAIL"
        )
        unweighted = " [required, no points of its own]" if outcome.required else " [no points]"
        notes = (" [hidden]" if outcome.hidden else "") + (unweighted if not outcome.weight else "")
        lines.append(f"  {mark}  {outcome.name}{notes}: {outcome.message}")
    return "\n".join(lines)


def _source_of(answer: Any) -> str | None:
    try:
        return inspect.getsource(answer)
    except (OSError, TypeError):
        return None


def check(question_id: str, answer: Any) -> None:
    """Print which visible checks of ``question_id`` pass on ``answer`` and why the others
    fail, e.g. ``check("hw04.q1", spectral_projection)``; never raises for a wrong answer."""
    question = get_question(question_id)
    if question.kind != "code":
        raise ValueError(f"{question_id} is a proof question: your instructor grades it by hand")
    result = run_question(question, answer, hidden=False, source=_source_of(answer))
    print(format_result(question, result))
    if result.status != "not attempted":
        print(hidden_checks_note(question))


def hidden_checks_note(question: Question) -> str:
    """What the visible checks do not show: the hidden checks, and their share of the points."""
    hidden = question.hidden_checks
    total = sum(c.weight for c in question.all_checks)
    share = sum(c.weight for c in hidden) / total if total else 0.0
    checks = (
        "1 hidden check also runs" if len(hidden) == 1 else f"{len(hidden)} hidden checks also run"
    )
    return (
        f"  (Only the visible checks ran here. When your instructor grades, {checks} "
        f"on other random instances and edge cases, and they count toward your grade: "
        f"{share:.0%} of this question's {question.points:g} points. Passing every visible "
        "check does not yet mean full points.)"
    )
