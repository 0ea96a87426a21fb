"""Homework: registry and notebooks agree, checks pass on solutions and fail on wrong answers,
student editions keep no solution, and the grader scores made-up submissions correctly."""

from __future__ import annotations

import copy
import itertools
import json
import re
import time
from pathlib import Path
from typing import Any

import nbformat
import pytest
import torch
from stablernn_grader.grading import is_check_cell
from stablernn_grader.rubrics import rubric_items
from stablernn_tools.student_notebooks import (
    remove_solution_directives,
    stub_source,
    student_notebook,
)

from stablernn_lib.homework import homeworks
from stablernn_lib.homework.cells import (
    is_answer_cell,
    is_solution_cell,
    question_of,
)
from stablernn_lib.homework.checks import run_check, run_question
from stablernn_lib.homework.registry import Check, Question, get_question

ROOT = Path(__file__).resolve().parents[1]
CODE_QUESTIONS = [q for h in homeworks() for q in h.questions if q.kind == "code"]


def notebook(question: Question) -> nbformat.NotebookNode:
    homework = next(h for h in homeworks() if question in h.questions)
    return nbformat.read(ROOT / homework.notebook, as_version=4)


def solution_source(question: Question) -> str:
    cells = [c for c in notebook(question).cells if is_solution_cell(c)]
    return next(c.source for c in cells if question_of(c) == question.id)


def define(source: str, name: str) -> Any:
    """Execute a solution cell's source as the notebook would and return the function."""
    namespace: dict[str, Any] = {"torch": torch}
    for other in CODE_QUESTIONS:  # later questions may use earlier functions
        if other.function != name and other.id.split(".")[0] == name_to_homework[name]:
            exec(solution_source(other), namespace)
    exec(source, namespace)
    return namespace[name]


name_to_homework = {q.function: q.id.split(".")[0] for q in CODE_QUESTIONS}


def test_every_homework_matches_its_notebook() -> None:
    for homework in homeworks():
        path = ROOT / homework.notebook
        assert path.exists(), f"{homework.notebook} is missing"
        nb = nbformat.read(path, as_version=4)
        assert nb.metadata["homework"]["id"] == homework.id
        assert "colab-setup" in nb.cells[0].metadata.get("tags", [])
        assert 2 <= len(homework.questions) <= 5
        for cell in nb.cells:
            assert cell.get("outputs", []) == [], f"{path.name} is stored with outputs"
        for question in homework.questions:
            cells = [c for c in nb.cells if question_of(c) == question.id]
            if question.kind == "code":
                assert question.visible_checks and question.hidden_checks, question.id
                assert sum(is_solution_cell(c) for c in cells) == 1, question.id
                assert sum(is_check_cell(c) for c in cells) == 1, question.id
            else:
                assert sum(is_answer_cell(c) for c in cells) == 1, question.id
                items = rubric_items(question)
                assert items and sum(p for _, p in items) == question.points, question.id


def test_homework_starts_with_the_colab_cell() -> None:
    from stablernn_tools.notebook_checks import colab_setup_cell

    expected = colab_setup_cell()
    for homework in homeworks():
        first = nbformat.read(ROOT / homework.notebook, as_version=4).cells[0]
        assert (first.source, first.metadata["tags"]) == (
            expected.source,
            expected.metadata.tags,
        ), f"{homework.notebook}: run `python -m stablernn_tools sync-colab`"


@pytest.mark.parametrize("question", CODE_QUESTIONS, ids=lambda q: q.id)
def test_solutions_pass_every_check(question: Question) -> None:
    answer = define(solution_source(question), question.function)
    for seed in (1, 2):
        result = run_question(
            question, answer, hidden=True, seed=seed, source=solution_source(question)
        )
        failed = [o for o in result.outcomes if not o.passed]
        assert not failed, failed
        assert result.points == question.points


def _perturbed(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value + 0.01 * (1 + value.abs()) if value.is_floating_point() else value + 1
    if isinstance(value, (int, float)):
        return value + 1
    if isinstance(value, tuple):
        return (_perturbed(value[0]), *value[1:])
    return value


@pytest.mark.parametrize("question", CODE_QUESTIONS, ids=lambda q: q.id)
def test_wrong_answers_fail(question: Question) -> None:
    correct = define(solution_source(question), question.function)

    def wrong(*args: Any, **kwargs: Any) -> Any:
        result = correct(*args, **kwargs)
        if result is None:  # an in-place answer: undo its work
            raise ValueError("deliberately wrong")
        return _perturbed(result)

    result = run_question(question, wrong, hidden=True, seed=3)
    assert any(o.status == "fail" for o in result.outcomes), result.outcomes
    assert result.points < question.points


@pytest.mark.parametrize("question", CODE_QUESTIONS, ids=lambda q: q.id)
def test_replaying_the_visible_answers_fails_a_hidden_check(question: Question) -> None:
    correct = define(solution_source(question), question.function)
    recorded: list[Any] = []

    def recorder(*args: Any, **kwargs: Any) -> Any:
        recorded.append(correct(*copy.deepcopy(args), **kwargs))
        return correct(*args, **kwargs)

    run_question(question, recorder, hidden=False)
    replies = itertools.cycle(recorded)

    def hard_coded(*args: Any, **kwargs: Any) -> Any:
        return copy.deepcopy(next(replies))

    visible = run_question(question, hard_coded, hidden=False)
    if all(o.passed for o in visible.outcomes):
        full = run_question(question, hard_coded, hidden=True, seed=4)
        assert any(not o.passed for o in full.outcomes if o.hidden), question.id
        assert full.points < question.points


def test_stubs_are_not_attempted_and_score_zero() -> None:
    for question in CODE_QUESTIONS:
        stub = stub_source(solution_source(question), question)
        assert "NotImplementedError" in stub and question.task.split()[0] in stub
        answer = define(stub, question.function)
        result = run_question(question, answer, hidden=True, seed=5)
        assert result.points == 0 and result.status == "not attempted", question.id


def test_calling_the_library_scores_zero() -> None:
    question = get_question("hw04.q1")
    source = (
        "from stablernn_lib.core.contraction import project_spectral_ball\n"
        "def spectral_projection(W, radius):\n    return project_spectral_ball(W, radius)\n"
    )
    answer = define(source, "spectral_projection")
    result = run_question(question, answer, hidden=True, seed=0, source=source)
    assert result.points == 0
    assert "project_spectral_ball" in result.outcomes[0].message


def test_the_source_gate_reads_calls_not_variable_names() -> None:
    from stablernn_lib.homework.registry import names_used

    assert "grad" not in names_used("grad = torch.zeros(3)\nreturn_value = grad + 1")
    assert "grad" in names_used("g = torch.autograd.grad(y, x)")
    assert "grad" in names_used("from torch.autograd import grad as g")
    assert "backward" in names_used("loss.backward()")
    question = get_question("hw06.q1")
    source = re.sub(r"\bgradient\b", "grad", solution_source(question))
    assert "grad = " in source
    answer = define(source, question.function)
    assert run_question(question, answer, hidden=False, source=source).points == question.points


def test_a_slow_check_times_out_with_a_message() -> None:
    def forever(*args: Any) -> None:
        while True:
            try:  # noqa: SIM105 (written as a student might)
                time.sleep(0.01)
            except Exception:  # a student's broad except must not stop the limit
                pass

    question = get_question("hw04.q2")
    outcome = run_check(question, question.checks[0], forever, time_scale=0.05)
    assert outcome.status == "timeout" and "longer than" in outcome.message


def test_check_explains_failures(capsys: pytest.CaptureFixture[str]) -> None:
    from stablernn_lib.homework import check

    check("hw03.q3", lambda layers, kernel, base: 1000)
    printed = capsys.readouterr().out
    assert "FAIL" in printed and "expected 1024" in printed and "got 1000" in printed
    assert "WaveNet" in printed  # the input used
    # the student learns that hidden checks count too, and how much
    assert "visible checks passed" in printed and "points)" not in printed.splitlines()[0]
    assert "hidden checks also run" in printed and "count toward your grade" in printed
    share = sum(c.weight for c in get_question("hw03.q3").hidden_checks) / sum(
        c.weight for c in get_question("hw03.q3").all_checks
    )
    assert f"{share:.0%} of this question's" in printed


def test_the_hidden_checks_note_agrees_with_their_number() -> None:
    from stablernn_lib.homework.checks import hidden_checks_note

    notes = {len(q.hidden_checks): hidden_checks_note(q) for q in CODE_QUESTIONS}
    assert 1 in notes and any(n > 1 for n in notes)
    for n, note in notes.items():
        expected = "1 hidden check also runs " if n == 1 else f"{n} hidden checks also run "
        assert expected in note, note


def test_the_check_count_covers_every_line_shown(capsys: pytest.CaptureFixture[str]) -> None:
    """ "3 of 3" above four PASS lines confused students: the count includes the
    unweighted "written from scratch" check, which says that it carries no points."""
    from stablernn_lib.core.contraction import project_spectral_ball
    from stablernn_lib.homework import check
    from stablernn_lib.homework.registry import get_question

    def answer(matrix, radius):  # calls the library's own: fails the "from scratch" gate
        return project_spectral_ball(matrix, radius)

    question = get_question("hw04.q1")
    check("hw04.q1", answer)
    lines = capsys.readouterr().out.splitlines()
    first = re.match(r".*: (\d+) of (\d+) visible checks passed", lines[0])
    marks = [line for line in lines[1:] if re.match(r"  (PASS|FAIL|TODO|TIME)  ", line)]
    assert first and int(first[2]) == len(marks) == len(question.visible_checks)
    assert int(first[1]) == sum(line.startswith("  PASS") for line in marks)
    assert any("[required, no points of its own]" in line for line in marks)


def test_remove_solution_directives() -> None:
    text = "\n".join(
        [
            "Intro",
            "````{solution} ex-a",
            ":class: dropdown",
            "```python",
            "secret_code = 1",
            "```",
            "````",
            "middle",
            ":::{solution-start} ex-b",
            ":::",
            "gated secret",
            ":::{solution-end}",
            ":::",
            "```{exercise} keep",
            "Exercise text",
            "```",
        ]
    )
    kept, removed = remove_solution_directives(text)
    assert removed and "secret" not in kept
    assert "Intro" in kept and "middle" in kept and "Exercise text" in kept


def test_chapter_solution_code_becomes_a_placeholder() -> None:
    nb = nbformat.v4.new_notebook(
        cells=[
            nbformat.v4.new_markdown_cell("```{exercise} Go\n:label: ex-go\nDo it.\n```"),
            nbformat.v4.new_markdown_cell("```{solution} ex-go\nThe secret answer.\n```"),
            nbformat.v4.new_code_cell("secret_value = 42", metadata={"tags": ["solution"]}),
        ]
    )
    student = nbformat.writes(student_notebook(nb))
    assert "secret" not in student and "Do it." in student
    assert len(student_notebook(nb).cells) == 2


def test_student_notebooks_keep_no_solution() -> None:
    for path in sorted((ROOT / "chapters").rglob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        student = nbformat.writes(student_notebook(nb))
        for secret in solution_lines(nb):
            assert secret not in student, f"{path.name} leaks {secret!r}"
        assert "{solution" not in student


def public_lines(nb: nbformat.NotebookNode) -> set[str]:
    """The lines of ``nb`` outside solution and answer cells (they may appear anywhere)."""
    return {
        line.strip()
        for cell in nb.cells
        if not is_solution_cell(cell) and not is_answer_cell(cell)
        for line in cell.source.split("\n")
    }


def solution_lines(nb: nbformat.NotebookNode) -> set[str]:
    """Distinctive lines of every solution body, model answer and rubric in ``nb``."""
    public = public_lines(nb)
    secrets: set[str] = set()
    for cell in nb.cells:
        if is_solution_cell(cell):
            question = get_question(question_of(cell))
            kept = stub_source(cell.source, question)
            lines = [line.strip() for line in cell.source.split("\n")]
            secrets |= {line for line in lines if len(line) > 12 and line not in kept}
        elif is_answer_cell(cell) or "rubric" in cell.metadata.get("tags", []):
            secrets |= {line.strip() for line in cell.source.split("\n") if len(line) > 12}
        elif cell.cell_type == "markdown":
            text, removed = remove_solution_directives(cell.source)
            if removed:
                secrets |= {
                    line.strip()
                    for line in cell.source.split("\n")
                    if len(line.strip()) > 12 and line not in text and "{solution" not in line
                }
    return secrets - public


def test_secret_lines_are_found() -> None:
    """The leak search is not vacuous: the instructor notebooks hold many secret lines."""
    count = sum(
        len(solution_lines(nbformat.read(ROOT / h.notebook, as_version=4))) for h in homeworks()
    )
    assert count > 100


def test_questions_table_is_current_in_instructor_page() -> None:
    from stablernn_grader.cli import questions_markdown

    page = (ROOT / "instructor.md").read_text()
    assert questions_markdown() in page, (
        "instructor.md is out of date: paste `python -m stablernn_grader questions`"
    )


def test_unknown_question_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="known homeworks"):
        get_question("hw99.q1")
    with pytest.raises(ValueError, match="hw04 has"):
        get_question("hw04.q9")


def test_code_question_needs_checks() -> None:
    with pytest.raises(ValueError, match="needs a function name and checks"):
        Question(id="hw00.q1", title="t", points=1, task="t", tests="t", function="f")
    assert Check("c", lambda a, c: "").weight == 1.0


def test_json_of_result_round_trips() -> None:
    question = get_question("hw03.q3")
    result = run_question(question, lambda a, b, c: 0, hidden=False)
    assert json.loads(json.dumps(result.to_dict()))["points"] == 0


def test_rubrics_are_absent_from_the_installed_library() -> None:
    """show_rubric and every rubric line exist only in the instructor notebooks."""
    import stablernn_lib.homework as homework_package

    assert not hasattr(homework_package, "show_rubric")
    library = "\n".join(p.read_text() for p in (ROOT / "stablernn_lib").rglob("*.py"))
    assert "show_rubric" not in library
    lines = [
        text
        for h in homeworks()
        for q in h.questions
        if q.kind == "proof"
        for text, _ in rubric_items(q)
    ]
    assert len(lines) >= 7
    for text in lines:
        assert text not in library, text
    edition = [
        student_notebook(nbformat.read(ROOT / h.notebook, as_version=4)) for h in homeworks()
    ]
    cells = "\n".join(c.source for nb in edition for c in nb.cells)
    assert "show_rubric" not in cells and not any(text in cells for text in lines)


def test_the_source_gate_reads_ipython_syntax_follows_aliases_and_fails_closed() -> None:
    from stablernn_lib.homework.registry import CheckContext, independence_check, names_used

    assert "RNN" in names_used("%time x = 1\nmodel = torch.nn.RNN(3, 4)")
    assert "RNN" in names_used("!ls\nR(3, 4)", "from torch.nn import RNN as R")
    assert "RNN" in names_used("R(3, 4)", "R = torch.nn.RNN")
    assert "RNN" not in names_used("h = R + 1", "R = make(RNN)")  # a value, not an alias
    with pytest.raises(SyntaxError):
        names_used("def f(:\n    pass")
    gate = independence_check(("RNN",))
    ctx = CheckContext(0, torch.Generator(), source="def f(:")
    with pytest.raises(AssertionError, match="could not parse"):
        gate.run(None, ctx)
