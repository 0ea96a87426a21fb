"""The judgement questions of Homeworks 8 and 9: an honest reading of the chapter's results
passes, a wrong one fails with a reason, and an untouched stub is reported as not answered."""

from __future__ import annotations

import pytest

from stablernn_lib.homework.checks import format_result, run_question
from stablernn_lib.homework.registry import get_question


def _cost(stable: list[float], free: list[float]) -> tuple[float, str]:
    """An honest answer to hw08.q4, written from the question's text."""
    if min(len(stable), len(free)) < 3:
        raise ValueError("three seeds per model")
    mean_s, mean_f = sum(stable) / len(stable), sum(free) / len(free)
    var_s = sum((v - mean_s) ** 2 for v in stable) / (len(stable) - 1)
    var_f = sum((v - mean_f) ** 2 for v in free) / (len(free) - 1)
    gap = 100 * (mean_s - mean_f) / mean_f
    if gap <= 5:
        return gap, "supported"
    beyond = abs(mean_s - mean_f) > 2 * ((var_s + var_f) / 2) ** 0.5
    return gap, "not supported" if beyond else "inconclusive"


def _context(ks: list[int], losses: list[float], recurrent: float, tol: float) -> int | None:
    """An honest answer to hw09.q4."""
    return next(
        (k for k, loss in zip(ks, losses, strict=True) if loss <= (1 + tol) * recurrent), None
    )


def test_an_honest_cost_of_stability_passes_and_reads_chapter8_as_the_chapter_does() -> None:
    from stablernn_lib.homework.questions.hw08 import CHAPTER8_SEEDS
    from stablernn_lib.tasks.wikitext2.results import chapter8_numbers, load_seed_results

    question = get_question("hw08.q4")
    for seed in (0, 7):
        result = run_question(question, _cost, hidden=True, seed=seed)
        assert result.points == question.points, result.outcomes
    # the check's seeds are the committed ones, and its verdicts the chapter's
    committed = load_seed_results("cpu")
    numbers = chapter8_numbers()
    for cell, (stable, free) in CHAPTER8_SEEDS.items():
        name = "rnn" if cell == "RNN" else "lstm"
        for values, variant in ((stable, "stable"), (free, "unconstrained")):
            runs = committed[f"{name}-{variant}"]
            assert [round(runs[s]["test_ppl"], 1) for s in (2, 3, 1111)] == list(values)
        assert _cost(list(stable), list(free))[1] == numbers[f"{name}_verdict"]


@pytest.mark.parametrize(
    "wrong",
    [
        lambda s, f: (_cost(s, f)[0], "supported"),  # ignores the noise and the tolerance
        lambda s, f: (
            _cost(s, f)[0],
            "not supported" if _cost(s, f)[0] > 5 else "supported",
        ),  # ignores the noise
        lambda s, f: (100 * (sum(s) - sum(f)) / sum(s), _cost(s, f)[1]),  # gap relative to stable
    ],
)
def test_a_wrong_reading_of_the_cost_fails(wrong) -> None:
    question = get_question("hw08.q4")
    result = run_question(question, wrong, hidden=True, seed=1)
    assert result.points < question.points
    assert any(o.status == "fail" and "expected" in o.message for o in result.outcomes)


def test_an_honest_context_reading_passes_and_a_wrong_one_fails() -> None:
    question = get_question("hw09.q4")
    result = run_question(question, _context, hidden=True, seed=3)
    assert result.points == question.points, result.outcomes
    assert "k = 6" in result.outcomes[1].message  # the unconstrained models of Chapter 9

    def strict(ks, losses, recurrent, tol):  # "within" read as strictly below the recurrent NLL
        return next((k for k, loss in zip(ks, losses, strict=True) if loss < recurrent), None)

    assert run_question(question, strict, hidden=True, seed=3).points < question.points


@pytest.mark.parametrize("question_id", ["hw08.q4", "hw09.q4"])
def test_an_untouched_stub_is_reported_as_not_answered(question_id: str) -> None:
    def stub(*args):
        raise NotImplementedError("the task")

    question = get_question(question_id)
    result = run_question(question, stub, hidden=True, seed=0, source="def f():\n    raise X\n")
    assert result.status == "not attempted" and result.points == 0
    assert not any(o.passed for o in result.outcomes)  # not even "written from scratch"
    report = format_result(question, result)
    assert "not answered" in report and "nothing was checked" in report
    assert "PASS" not in report


def test_the_judgement_questions_in_prose_have_a_rubric_and_a_model_answer() -> None:
    from stablernn_grader.rubrics import rubric_items

    for question_id in ("hw08.q5", "hw09.q5"):
        question = get_question(question_id)
        items = rubric_items(question)
        assert question.kind == "proof" and len(items) == 3
        assert sum(points for _, points in items) == question.points
        assert any("decide" in text for text, _ in items)


def test_the_check_cell_of_an_untouched_stub_says_only_that(capsys) -> None:
    from stablernn_lib.homework import check

    def stub(stable, free):
        raise NotImplementedError("the task")

    check("hw08.q4", stub)
    printed = capsys.readouterr().out
    assert printed.startswith("hw08.q4 stability_cost: not answered")
    assert "PASS" not in printed and "also run" not in printed


def test_hw09_q5_quotes_the_distance_of_chapter9s_summary() -> None:
    """The summary of Chapter 9 reads the gradient at the distance of ``gradient_vanishes``."""
    import json
    from pathlib import Path

    from stablernn_lib.core import criteria

    phrase = f"after {criteria.criterion('gradient_vanishes')['distance']} frames"
    assert phrase in get_question("hw09.q5").task.replace("\n", " ")
    notebook = Path(__file__).parents[1] / "chapters/homework/hw09_polyphonic_music.ipynb"
    cells = json.loads(notebook.read_text())["cells"]
    question = next(c for c in cells if "".join(c["source"]).startswith("## Question 5"))
    assert phrase in " ".join("".join(question["source"]).split())
