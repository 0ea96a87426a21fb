"""Chapter 8 as built: the lesson and its evidence page glue every number their text
quotes, and the lesson reads as a lesson (no commands, the evidence page linked)."""

from __future__ import annotations

import re

import nbformat
import pytest
from book_support import BUILD_DIR, HTML_DIR, ROOT, build_book
from stablernn_tools.colab_conversion import executed_glue

PAGES = ("chapters/08_wikitext2_experiments", "chapters/08b_wikitext2_evidence")


def _roles(page: str) -> set[str]:
    """The keys of every ``{glue:text}`` role in a page's Markdown."""
    cells = nbformat.read(ROOT / f"{page}.ipynb", as_version=4).cells
    text = "\n".join(c.source for c in cells if c.cell_type == "markdown")
    return {role.partition(":")[0] for role in re.findall(r"\{glue:text\}`([^`]+)`", text)}


def test_the_pages_glue_every_number_in_one_cell_from_the_library() -> None:
    """The numbers come from ``chapter8_numbers`` (tested against the result files), glued by
    one hidden cell of each page, before any Markdown that quotes them."""
    for page in PAGES:
        cells = nbformat.read(ROOT / f"{page}.ipynb", as_version=4).cells
        (glue,) = [c for c in cells if c.cell_type == "code" and "glue(" in c.source]
        assert "chapter8_numbers()" in glue.source and "remove-cell" in glue.metadata["tags"]
        first_role = next(i for i, c in enumerate(cells) if "{glue:text}" in c.source)
        assert cells.index(glue) < first_role and _roles(page)


def test_the_lesson_shows_no_command_and_links_its_evidence_page() -> None:
    cells = nbformat.read(ROOT / f"{PAGES[0]}.ipynb", as_version=4).cells
    text = "\n".join(c.source for c in cells if c.cell_type == "markdown")
    assert "python -m" not in text and "```bash" not in text
    assert text.count("</chapters/08b_wikitext2_evidence>") >= 2  # intro and result table
    # no lab detail, no file path, and no configuration that only the evidence page defines
    assert "criteria.json" not in text and "on a shared one" not in text and "full-650" not in text
    # the hypothesis section says what the authors' `.data.set_()` does here and what is unknown
    assert "`.data.set_()`" in text and "unknown" in text
    for word in ("lease", "session", "tracker", "17 jobs"):
        assert word not in text, word


@pytest.mark.book
@pytest.mark.slow
def test_the_executed_pages_glued_every_key_their_text_quotes() -> None:
    assert build_book().returncode == 0
    for page in PAGES:
        executed = BUILD_DIR / "jupyter_execute" / f"{page}.ipynb"
        glued = executed_glue(executed)  # the notebook's and the build's <page>.glue.json
        missing = _roles(page) - set(glued)
        assert not missing, (page, sorted(missing))
    html = (HTML_DIR / f"{PAGES[0]}.html").read_text(encoding="utf-8")
    assert "python -m" not in html and "08b_wikitext2_evidence.html" in html


def test_the_evidence_page_shows_its_set_check_and_the_check_holds_here() -> None:
    """The evidence page's claim about ``.data.set_()`` is a cell run when the page builds;
    on this machine's PyTorch the assignment leaves the parameter unchanged, ``mul_`` not."""
    import torch

    cells = nbformat.read(ROOT / f"{PAGES[1]}.ipynb", as_version=4).cells
    assert any(
        "block.data.set_(0.5 * block.data)" in c.source for c in cells if c.cell_type == "code"
    )
    weight = torch.nn.LSTM(4, 3).weight_hh_l0
    before = weight.detach().clone()
    block = weight[3:6]
    block.data.set_(0.5 * block.data)
    weight.data.set_(0.5 * weight.data)
    assert torch.equal(weight.detach(), before)
    with torch.no_grad():
        weight.mul_(0.5)
    assert torch.allclose(weight.detach(), 0.5 * before)


def test_the_figures_name_models_in_words_and_sort_k() -> None:
    from stablernn_lib.tasks.wikitext2 import measurements as lma

    distances = {"k=10": [0.1], "k=2": [0.3], "k=5": [0.2]}
    record = {"step": [1], "relative_distance": distances}
    figure = lma.plot_weights_close({"weights_close-rnn": record, "weights_close-lstm": record})
    labels = [text.get_text() for text in figure.axes[0].get_legend().get_texts()]
    assert labels == ["k=2", "k=5", "k=10"]
    assert lma._plain_name("lstm-stable") == "LSTM, stable"
    assert lma._plain_name("rnn-unconstrained") == "RNN (tanh), unconstrained"
