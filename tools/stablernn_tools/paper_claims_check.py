"""Checks that the book writes the paper's numbers through the registry, and the Sphinx
role that renders them.

:func:`markdown_problems` and :func:`library_problems` find paper numbers written without
the mechanism of :mod:`stablernn_lib.core.paper_claims` (``python -m stablernn_tools book
check-claims``; ``tests/test_paper_claims.py`` runs them on the whole book);
:func:`html_problems` reads the built pages; :func:`setup_sphinx` registers ``{paper}`` and
``{paper-claims}``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from html.parser import HTMLParser
from pathlib import Path

from stablernn_lib.core.paper_claims import CHECKED, CLAIMS, REGISTRY, VERSIONS, claim

REPO_ROOT = Path(__file__).resolve().parents[2]
LEGEND = (
    "✓: checked against the source named in its tooltip; "
    "†: recalled as the paper's, not checked against any stored source."
)


# ---------------------------------------------------------------------------
# Checks: paper numbers written without the mechanism
# ---------------------------------------------------------------------------

ROLE = re.compile(r"\{paper\}`([^`]*)`")
# A sentence that attributes numbers to the paper or its authors.
ATTRIBUTION = re.compile(
    r"paper(?:'s)?\s+(?:reports?|reported|gives?|found|finds|measures?|obtains?)"
    r"|reported\s+(?:by|in)\s+the\s+paper"
    r"|authors\s+(?:report|reported|obtain|found|measure)"
    r"|miller2019stable`\s+(?:report|reported|find|found|obtain)",
    re.IGNORECASE,
)
DECIMAL = re.compile(r"(?<![\w.$\\])\d+\.\d+(?![\w.]*\d)")
MATH = re.compile(r"\$\$.*?\$\$|\$[^$\n]*\$", re.DOTALL)


def _value_pattern(text: str) -> re.Pattern[str]:
    return re.compile(rf"(?<![\d.]){re.escape(text)}(?!\d|\.\d)")


def _sentences(text: str) -> list[str]:
    return re.split(r"(?<=[.!?])\s+(?=[A-Z{*(])|\n\s*\n", text)


def text_problems(text: str, where: str) -> list[str]:
    """Problems in one Markdown text: unknown role keys, bare paper numbers, untagged
    numbers in a sentence that attributes them to the paper."""
    problems = [
        f"{where}: {{paper}}`{key}`: unknown claim; known: {', '.join(REGISTRY)}"
        for key in ROLE.findall(text)
        if key not in REGISTRY
    ]
    rest = ROLE.sub("⟨claim⟩", text)
    for number in sorted({entry.value for entry in CLAIMS}):
        if _value_pattern(number).search(rest):
            keys = ", ".join(entry.key for entry in CLAIMS if entry.value == number)
            problems.append(
                f"{where}: the paper's number {number} written bare; "
                f"write {{paper}}`KEY` with KEY one of: {keys}"
            )
    for sentence in _sentences(MATH.sub("⟨math⟩", rest)):
        if ATTRIBUTION.search(sentence):
            for number in DECIMAL.findall(sentence):
                problems.append(
                    f"{where}: {number!r} in a sentence attributing numbers to the paper "
                    f"is not tagged; register it in stablernn_lib/core/paper_claims.py and write "
                    f"{{paper}}`KEY` (sentence: {sentence.strip()[:120]!r})"
                )
    return problems


def book_markdown_files(root: Path = REPO_ROOT) -> list[Path]:
    """The Markdown pages and notebooks a reader sees: root ``*.md`` and every notebook
    under ``chapters/``."""
    return sorted(root.glob("*.md")) + sorted((root / "chapters").rglob("*.ipynb"))


def markdown_problems(paths: Iterable[Path] | None = None, root: Path = REPO_ROOT) -> list[str]:
    """:func:`text_problems` over Markdown files and the Markdown cells of notebooks, and
    paper numbers written as literals in notebooks' code cells."""
    import nbformat  # a book/test dependency, not needed to use the registry

    problems: list[str] = []
    for path in paths if paths is not None else book_markdown_files(root):
        path = Path(path)
        name = path.relative_to(root) if path.is_relative_to(root) else path
        if path.suffix == ".ipynb":
            notebook = nbformat.read(path, as_version=4)
            for index, cell in enumerate(notebook.cells):
                if cell.cell_type == "markdown":
                    problems += text_problems(cell.source, f"{name} cell {index}")
                elif cell.cell_type == "code":
                    problems += _literal_problems(cell.source, f"{name} cell {index}")
        else:
            problems += text_problems(path.read_text(encoding="utf-8"), str(name))
    return problems


def _literal_problems(text: str, where: str) -> list[str]:
    problems = []
    for number in sorted({entry.value for entry in CLAIMS}):
        for match in _value_pattern(number).finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            problems.append(
                f"{where}:{line}: the paper's number {number} as a literal; "
                "use stablernn_lib.core.paper_claims.value(KEY) or marked(KEY)"
            )
    return problems


def library_problems(root: Path = REPO_ROOT) -> list[str]:
    """Paper numbers written as literals in the library outside this registry."""
    problems = []
    for path in sorted((root / "stablernn_lib").rglob("*.py")):
        if path.name != "paper_claims.py":
            text = path.read_text(encoding="utf-8")
            problems += _literal_problems(text, str(path.relative_to(root)))
    return problems


class _PageText(HTMLParser):
    """Prose of a built page (outside scripts, code and cell outputs), and its claims:
    ``claims`` holds ``(value, mark, tooltip)`` for every ``paper-claim`` span."""

    # code, navigation, headings and links carry section numbers such as "8.5", not claims
    SKIPPED = {"script", "style", "pre", "nav", "a", "h1", "h2", "h3", "h4", "h5", "h6"}
    # cell outputs, figure numbers, and the measured notebook times of the instructor page
    # (seconds that can equal a paper number, e.g. 8.9)
    SKIPPED_CLASSES = {"cell_output", "caption-number", "notebook-times"}
    VOID = {"br", "img", "hr", "meta", "link", "input", "wbr", "source", "col", "area"}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[tuple[str, bool, bool]] = []  # (tag, skipped, in a claim)
        self.prose: list[str] = []
        self.claims: list[list[str]] = []
        self.tooltip: str | None = None

    def _skipping(self) -> bool:
        return any(skipped for _, skipped, _ in self.stack)

    def _in_claim(self) -> bool:
        return any(claim for _, _, claim in self.stack)

    def handle_starttag(self, tag, attrs) -> None:
        if tag in self.VOID:
            return
        attributes = dict(attrs)
        classes = (attributes.get("class") or "").split()
        skipped = tag in self.SKIPPED or bool(self.SKIPPED_CLASSES & set(classes))
        claim = tag == "span" and "paper-claim" in classes
        if claim:
            self.claims.append(["", "", ""])
        if tag == "abbr" and self._in_claim():
            self.claims[-1][2] = attributes.get("title") or ""
            self.tooltip = "open"
        self.stack.append((tag, skipped, claim))

    def handle_endtag(self, tag) -> None:
        for index in range(len(self.stack) - 1, -1, -1):
            if self.stack[index][0] == tag:
                del self.stack[index:]
                break
        if tag == "abbr":
            self.tooltip = None

    def handle_data(self, data) -> None:
        if self._in_claim():
            self.claims[-1][1 if self.tooltip else 0] += data.strip()
        elif not self._skipping():
            self.prose.append(data)


def html_problems(html_dir: Path) -> list[str]:
    """Problems on the built site: a claim rendered without its mark or tooltip, or with
    the wrong ones, and a paper number in the prose outside the ``{paper}`` role."""
    problems = []
    by_value: dict[str, set[str]] = {}
    for entry in CLAIMS:
        by_value.setdefault(entry.value, set()).add(entry.mark)
    for path in sorted(Path(html_dir).rglob("*.html")):
        page = _PageText()
        page.feed(path.read_text(encoding="utf-8"))
        name = path.relative_to(html_dir)
        for value_text, mark, tooltip in page.claims:
            expected = [e for e in CLAIMS if e.value == value_text and e.mark == mark]
            if not expected:
                problems.append(f"{name}: claim {value_text!r} rendered with mark {mark!r}")
            elif tooltip not in {e.provenance for e in expected}:
                problems.append(f"{name}: claim {value_text} has the tooltip {tooltip!r}")
        prose = " ".join(page.prose)
        for number in by_value:
            if _value_pattern(number).search(prose):
                problems.append(f"{name}: the paper's number {number} in prose, without its mark")
    return problems


# ---------------------------------------------------------------------------
# Sphinx: the {paper} role and the {paper-claims} directive
# ---------------------------------------------------------------------------


def claim_nodes(key: str) -> list:
    """Docutils nodes of a claim: its value, then its mark as a superscript
    abbreviation whose tooltip says where the number comes from."""
    from docutils import nodes

    entry = claim(key)
    mark = nodes.abbreviation(entry.mark, entry.mark, explanation=entry.provenance)
    return [
        nodes.inline(
            "",
            "",
            nodes.Text(entry.value),
            nodes.superscript("", "", mark),
            classes=["paper-claim", f"paper-claim-{entry.status}"],
        )
    ]


def paper_role(name, rawtext, text, lineno, inliner, options=None, content=None):
    """``{paper}`KEY``` : the registered claim KEY with its mark."""
    key = text.strip()
    if key not in REGISTRY:
        message = inliner.reporter.error(
            f"unknown paper claim {key!r}; known: {', '.join(REGISTRY)}", line=lineno
        )
        return [inliner.problematic(rawtext, rawtext, message)], [message]
    return claim_nodes(key), []


def _claims_table():
    from docutils import nodes

    header = ("number", "what it is", "source", "version")
    table = nodes.table(classes=["paper-claims"])
    group = nodes.tgroup(cols=len(header))
    table += group
    for width in (10, 35, 35, 20):
        group += nodes.colspec(colwidth=width)

    def row(cells: list) -> nodes.row:
        result = nodes.row()
        for cell in cells:
            entry = nodes.entry()
            children = cell if isinstance(cell, list) else [nodes.Text(cell)]
            entry += nodes.paragraph("", "", *children)
            result += entry
        return result

    head = nodes.thead()
    head += row(list(header))
    group += head
    body = nodes.tbody()
    for entry in CLAIMS:
        where = f"checked: {entry.source}" if entry.status == CHECKED else "recalled, not checked"
        body += row([claim_nodes(entry.key), entry.quantity, where, VERSIONS[entry.version]])
    group += body
    return table


def setup_sphinx(app) -> None:
    """Register ``{paper}`` and ``{paper-claims}`` (called by
    :func:`stablernn_tools.sphinx_extension.setup`)."""
    from docutils.parsers.rst import Directive

    class PaperClaimsDirective(Directive):
        """The whole registry as a table, with the legend of the marks."""

        has_content = False

        def run(self):
            from docutils import nodes

            return [_claims_table(), nodes.paragraph("", LEGEND)]

    app.add_role("paper", paper_role)
    app.add_directive("paper-claims", PaperClaimsDirective)
