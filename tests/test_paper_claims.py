"""Numbers attributed to the paper: the registry (``stablernn_lib.core.paper_claims``), its
checks and how the book renders it (``stablernn_tools.paper_claims_check``)."""

import html

import nbformat
import pytest
from docutils import nodes
from docutils.core import publish_doctree, publish_parts
from docutils.parsers.rst import roles
from stablernn_tools import paper_claims_check
from stablernn_tools.paper_claims_check import library_problems, markdown_problems, text_problems

from stablernn_lib.core import paper_claims
from stablernn_lib.core.paper_claims import CLAIMS, REGISTRY, PaperClaim, marked


def test_every_claim_says_where_it_comes_from_and_which_version():
    assert len(REGISTRY) == len(CLAIMS)  # keys are unique
    for claim in CLAIMS:
        assert claim.status in ("checked", "recalled")
        assert claim.version in paper_claims.VERSIONS
        assert claim.quantity
        assert (claim.status == "checked") == bool(claim.source)
        assert claim.provenance.startswith("checked: " if claim.status == "checked" else "recalled")
    assert marked("wt2-rnn-unconstrained-ppl") == "146.7 ✓"
    assert marked("wt2-rnn-stable-ppl") == "143.5 †"
    assert paper_claims.value("wt2-lstm-unconstrained-ppl") == pytest.approx(92.3)


def test_a_claim_without_source_status_or_version_is_refused():
    with pytest.raises(ValueError, match="status"):
        PaperClaim("x", "1.0", "q", "probably", "iclr2019")
    with pytest.raises(ValueError, match="version"):
        PaperClaim("x", "1.0", "q", "recalled", "v7")
    with pytest.raises(ValueError, match="names its source"):
        PaperClaim("x", "1.0", "q", "checked", "iclr2019")
    with pytest.raises(KeyError, match="paper_claims.py"):
        marked("no-such-claim")


@pytest.mark.parametrize(
    "text",
    [
        "The paper reports a test perplexity of 146.7 for the RNN.",
        "{cite:t}`miller2019stable` report test perplexities of 81.2 and 77.0.",
        "Reported by the paper: 12.5 bits.",
        "The RNN reaches 143.5 in the table.",  # a registry value, bare, no attribution
        "The paper reports {paper}`wt2-rnn-stable-ppl` and 97.1.",  # one tagged, one not
        "The LSTM reaches {paper}`wt2-lstm-stabel-ppl`.",  # unknown key
    ],
)
def test_untagged_paper_numbers_are_found(text):
    assert text_problems(text, "page")


@pytest.mark.parametrize(
    "text",
    [
        "The paper reports {paper}`wt2-rnn-unconstrained-ppl` for the RNN.",
        "The paper reports {paper}`wt2-rnn-stable-ppl` and {paper}`wt2-lstm-stable-ppl`.",
        "Our RNN reaches 151.3 at the cpu scale.",  # our number, not attributed to the paper
        "The paper reports that $\\lambda = 0.9$ suffices.",  # math is not a quoted result
        "Figure 2 of the paper reports gradients for Lemma 1.",  # no decimal number
    ],
)
def test_tagged_paper_numbers_and_our_own_numbers_pass(text):
    assert text_problems(text, "page") == []


def test_a_paper_number_in_a_notebook_code_cell_is_found(tmp_path):
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [
        nbformat.v4.new_markdown_cell("The RNN: {paper}`wt2-rnn-stable-ppl`."),
        nbformat.v4.new_code_cell("print('paper:', 94.6)"),
    ]
    path = tmp_path / "chapter.ipynb"
    nbformat.write(notebook, path)
    problems = markdown_problems([path], root=tmp_path)
    assert len(problems) == 1 and "94.6" in problems[0] and "cell 1" in problems[0]


def test_the_book_writes_every_paper_number_with_its_mark():
    problems = markdown_problems()
    assert problems == [], "\n".join(problems)


def test_the_library_takes_paper_numbers_from_the_registry():
    problems = library_problems()
    assert problems == [], "\n".join(problems)


def test_the_role_renders_the_value_with_its_mark_and_source():
    roles.register_local_role("paper", paper_claims_check.paper_role)
    source = "RNN :paper:`wt2-rnn-unconstrained-ppl`, stable :paper:`wt2-rnn-stable-ppl`."
    html = publish_parts(source, writer_name="html5")["body"]
    assert "146.7<sup><abbr>✓</abbr></sup>" in html and "143.5<sup><abbr>†</abbr></sup>" in html
    assert "paper-claim-checked" in html and "paper-claim-recalled" in html
    # the tooltip (Sphinx writes `explanation` as the abbr's title) names the source
    abbreviations = list(publish_doctree(source).findall(nodes.abbreviation))
    assert [a["explanation"] for a in abbreviations] == [
        REGISTRY["wt2-rnn-unconstrained-ppl"].provenance,
        REGISTRY["wt2-rnn-stable-ppl"].provenance,
    ]
    assert "checked: the caption of Figure 2" in abbreviations[0]["explanation"]
    assert "recalled, not checked" in abbreviations[1]["explanation"]


def test_an_unknown_role_key_is_an_error_in_the_page():
    roles.register_local_role("paper", paper_claims_check.paper_role)
    tree = publish_doctree(
        "The RNN reaches :paper:`wt2-rnn-nope`.", settings_overrides={"report_level": 5}
    )
    messages = [str(m) for m in tree.findall(nodes.system_message)]
    assert any("unknown paper claim 'wt2-rnn-nope'" in m for m in messages)
    assert list(tree.findall(nodes.problematic))


def test_the_built_page_check_finds_missing_and_wrong_marks(tmp_path):
    checked = REGISTRY["wt2-rnn-unconstrained-ppl"]
    good = (
        '<span class="paper-claim paper-claim-checked">146.7<sup>'
        f'<abbr title="{html.escape(checked.provenance)}">✓</abbr></sup></span>'
    )
    pages = {
        "good.html": f"<h2>8.5. Section</h2><p>RNN {good}.</p>"
        '<figcaption><p><span class="caption-number">Fig. 8.5 </span>A figure.</p></figcaption>'
        '<div class="cell_output"><pre>143.5 †</pre></div><nav>8.9 Next</nav>'
        '<div class="notebook-times"><table><tr><td><p>8.9</p></td></tr></table></div>',
        "wrong_mark.html": good.replace(">✓<", ">†<"),
        "no_tooltip.html": good.replace(html.escape(checked.provenance), ""),
        "bare.html": "<p>The stable LSTM reaches 94.6 in the paper.</p>",
    }
    for name, body in pages.items():
        (tmp_path / name).write_text(f"<html><body>{body}</body></html>", encoding="utf-8")
    problems = paper_claims_check.html_problems(tmp_path)
    assert not [p for p in problems if p.startswith("good.html")], problems
    assert [p for p in problems if p.startswith("wrong_mark.html")]
    assert [p for p in problems if p.startswith("no_tooltip.html")]
    assert [p for p in problems if p.startswith("bare.html") and "94.6" in p]


@pytest.mark.book
@pytest.mark.slow
def test_the_built_site_shows_every_paper_number_with_its_mark():
    from book_support import HTML_DIR, build_book

    assert build_book().returncode == 0
    problems = paper_claims_check.html_problems(HTML_DIR)
    assert problems == [], "\n".join(problems)
    appendix = (HTML_DIR / "paper_numbers.html").read_text(encoding="utf-8")
    assert appendix.count('class="paper-claim ') >= len(CLAIMS)  # the {paper-claims} table
