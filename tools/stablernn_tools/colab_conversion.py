"""Plain Jupyter notebooks for Colab and the download button, generated from the MyST sources.

The chapters are MyST notebooks: ``{prf:theorem}`` blocks, ``{cite:t}`` roles and the
book's MathJax macros (``\\norm``, ``\\R``, ...) typeset on the site but show as raw text
in Colab, Jupyter and GitHub, which render Markdown as CommonMark plus MathJax. This
module rewrites each Markdown cell for them:

- a directive becomes a bold heading with the number the site gives it
  ("**Theorem 4.2 (Diagonal scaling).**") and its body between horizontal rules (a block
  quote would put its "> " marks into multi-line formulas); a proof ends with ∎; an
  admonition gets a bold title between rules;
- exercise solutions are removed (student edition) or collapsed in a ``<details>``
  element (instructor edition); the student edition converts notebooks that are already
  student editions (solutions, model answers and rubrics removed by the caller's
  ``student`` transform, :func:`stablernn_tools.student_notebooks.student_notebook`, or
  by ``python -m stablernn_tools student-edition``);
- ``{cite:t}`` and ``{cite:p}`` become "Miller and Hardt (2019)" and
  "(Miller and Hardt, 2019)", and a last cell lists the cited works;
- ``{prf:ref}``, ``{ref}``, ``{numref}`` and ``{eq}`` become the text the site shows
  ("Theorem 4.2", a section title, "Figure 7.1"), ``{paper}`` the marked number;
- ``{glue:text}``, ``{glue:md}`` and ``{glue}`` become the value the page shows: the one
  its executed notebook glued (MyST-NB ``glue``), formatted as MyST-NB formats it;
- the macros of ``_config.yml`` are expanded, so no front end needs them defined.

Numbers follow Sphinx's rule for this book: one counter per kind and chapter,
continuing across the chapter's sections, in the order of ``_toc.yml``.

Command line: ``python -m stablernn_tools colab --edition student --root student/
--out colab/`` writes one notebook per notebook page of the book in ``student/`` (the
student edition written by ``python -m stablernn_tools student-edition``).  The
book's Sphinx extension writes the same notebooks over the site's ``_sources/*.ipynb`` (the
download button and, once the site is published, the Colab launch buttons; see
``instructor.md``).
"""

from __future__ import annotations

import argparse
import ast
import copy
import json
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import nbformat
import yaml

from stablernn_tools.citation_style import authors_text

Edition = Literal["student", "instructor"]
# Makes the student edition of a notebook (homework's ``student_notebook``); passed in.
Transform = Callable[[nbformat.NotebookNode], nbformat.NotebookNode]
REPO_ROOT = Path(__file__).resolve().parents[2]

# Directive name -> the word the heading uses. Every numbered kind has its own counter.
NUMBERED = {
    "prf:theorem": "Theorem",
    "prf:lemma": "Lemma",
    "prf:definition": "Definition",
    "prf:proposition": "Proposition",
    "prf:corollary": "Corollary",
    "prf:conjecture": "Conjecture",
    "prf:remark": "Remark",
    "prf:example": "Example",
    "prf:assumption": "Assumption",
    "prf:axiom": "Axiom",
    "prf:criterion": "Criterion",
    "prf:observation": "Observation",
    "prf:property": "Property",
    "exercise": "Exercise",
}
ADMONITIONS = {
    "note": "Note",
    "tip": "Tip",
    "hint": "Hint",
    "important": "Important",
    "warning": "Warning",
    "caution": "Caution",
    "attention": "Attention",
    "danger": "Danger",
    "error": "Error",
    "seealso": "See also",
}
FIGURE_KINDS = {"figure": "Figure", "table": "Table", "code-block": "Listing"}
# Outputs that myst-nb wraps in a numbered figure when the cell has figure metadata.
DISPLAYED_OUTPUTS = ("display_data", "execute_result")

FENCE_OPEN = re.compile(
    r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|:{3,})\{(?P<name>[\w:-]+)\}(?P<arg>.*)$"
)
OPTION_LINE = re.compile(r"^:(?P<key>[\w-]+):\s*(?P<value>.*)$")
TARGET_LINE = re.compile(r"^\((?P<label>[^()\s]+)\)=\s*$")
ROLE = re.compile(r"\{(?P<name>[\w:-]+)\}`(?P<text>[^`]*)`")
HEADING = re.compile(r"^#{1,6}\s+(?P<title>.+?)\s*#*\s*$")
# A role written as text with an explicit target: "the lemma <lem-ch04-perron>".
EXPLICIT_TARGET = re.compile(r"^(?P<text>.*?)\s*<(?P<target>[^<>]+)>$", re.S)


@dataclass
class BookIndex:
    """What the references of one notebook can point at, gathered over the whole book."""

    numbers: dict[str, str] = field(default_factory=dict)  # label -> "Theorem 4.2"
    titles: dict[str, str] = field(default_factory=dict)  # label -> section title
    doc_titles: dict[str, str] = field(default_factory=dict)  # docname -> page title


def read_config(root: Path = REPO_ROOT) -> dict[str, Any]:
    return yaml.safe_load((root / "_config.yml").read_text(encoding="utf-8"))


def book_macros(config: dict[str, Any]) -> dict[str, tuple[str, int]]:
    """``{name: (body, number of arguments)}`` from ``_config.yml``'s MathJax settings."""
    macros = config["sphinx"]["config"]["mathjax3_config"]["tex"]["macros"]
    found = {}
    for name, body in macros.items():
        found[name] = (body[0], int(body[1])) if isinstance(body, list) else (body, 0)
    return found


def _braced(text: str, start: int) -> tuple[str, int] | None:
    """The group ``{...}`` starting at ``text[start]`` (after spaces) and the index after it."""
    index = start
    while index < len(text) and text[index] == " ":
        index += 1
    if index >= len(text) or text[index] != "{":
        return None
    depth = 0
    for end in range(index, len(text)):
        char = text[end]
        if char == "\\":
            continue
        if char == "{" and text[end - 1] != "\\":
            depth += 1
        elif char == "}" and text[end - 1] != "\\":
            depth -= 1
            if depth == 0:
                return text[index + 1 : end], end + 1
    raise ValueError(f"unbalanced braces in {text[start - 20 : start + 60]!r}")


def expand_macros(text: str, macros: dict[str, tuple[str, int]]) -> str:
    """Replace every ``\\name`` of ``macros`` (with its ``{arguments}``) by its definition."""
    if not macros:
        return text
    names = "|".join(sorted(map(re.escape, macros), key=len, reverse=True))
    pattern = re.compile(rf"\\({names})(?![A-Za-z])")
    for _ in range(10):  # definitions may use other macros; arguments may hold macros
        out, position, changed = [], 0, False
        for match in pattern.finditer(text):
            if match.start() < position:
                continue
            body, arity = macros[match.group(1)]
            index, arguments = match.end(), []
            for _argument in range(arity):
                group = _braced(text, index)
                if group is None:
                    break
                arguments.append(group[0])
                index = group[1]
            if len(arguments) < arity:
                continue  # \norm without a brace group: leave it, the test will report it
            for number, argument in enumerate(arguments, start=1):
                body = body.replace(f"#{number}", argument)
            out.append(text[position : match.start()])
            out.append(body + (" " if body[-1:].isalpha() else ""))
            position, changed = index, True
        text = "".join(out) + text[position:]
        if not changed:
            return text
    return text


# --- bibliography -----------------------------------------------------------------------


@dataclass
class Bibliography:
    """The entries of ``references.bib``: in-text labels and formatted references."""

    path: Path

    def __post_init__(self) -> None:
        from pybtex.database import parse_file

        self.data = parse_file(str(self.path))

    def authors(self, key: str) -> str:
        return authors_text(self._entry(key))

    def year(self, key: str) -> str:
        return self._entry(key).fields.get("year", "n.d.")

    def cite(self, keys: list[str], textual: bool) -> str:
        """The in-text label of ``keys``, in the order the site gives them (pybtex's
        author-year-title sorting)."""
        from pybtex.style.sorting.author_year_title import SortingStyle

        keys = sorted(keys, key=lambda k: SortingStyle().sorting_key(self._entry(k)))
        if textual:
            return "; ".join(f"{self.authors(k)} ({self.year(k)})" for k in keys)
        return "(" + "; ".join(f"{self.authors(k)}, {self.year(k)}" for k in keys) + ")"

    def references(self, keys: list[str]) -> str:
        """The cited entries, formatted as the site's bibliography lists them, in Markdown."""
        from pybtex.plugin import find_plugin

        style = find_plugin("pybtex.style.formatting", "plain")()
        entries = sorted(keys, key=lambda k: (self.authors(k), self.year(k)))
        lines = ["## References", ""]
        for key in entries:
            formatted = style.format_entry(key, self._entry(key))
            text = formatted.text.render_as("markdown").replace("\\", "")
            lines.append(f"- {self.authors(key)} ({self.year(key)}). {text}")
        return "\n".join(lines)

    def _entry(self, key: str):
        try:
            return self.data.entries[key]
        except KeyError:
            raise KeyError(f"{key} is cited but not in {self.path}") from None


# --- directives ---------------------------------------------------------------------------


def _parse_directive(lines: list[str], start: int) -> tuple[dict[str, Any], int] | None:
    """The directive opening at ``lines[start]``: name, argument, options, body; next index."""
    match = FENCE_OPEN.match(lines[start])
    if match is None:
        return None
    fence = match.group("fence")
    closing = re.compile(rf"^[ \t]*{re.escape(fence[0])}{{{len(fence)},}}\s*$")
    end = start + 1
    while end < len(lines) and not closing.match(lines[end]):
        end += 1
    if end == len(lines):
        raise ValueError(f"directive {lines[start].strip()!r} is never closed")
    body = lines[start + 1 : end]
    options: dict[str, str] = {}
    if body and body[0].strip() == "---":  # YAML options block
        close = body.index("---", 1)
        options = yaml.safe_load("\n".join(body[1:close])) or {}
        body = body[close + 1 :]
    while body and OPTION_LINE.match(body[0]):
        option = OPTION_LINE.match(body[0])
        options[option.group("key")] = option.group("value")
        body = body[1:]
    directive = {
        "name": match.group("name"),
        "argument": match.group("arg").strip(),
        "options": options,
        "body": "\n".join(body).strip("\n"),
    }
    return directive, end + 1


def directives(text: str) -> list[dict[str, Any]]:
    """Every directive of a MyST text, outermost first (nested ones follow their parent)."""
    found, lines, index = [], text.split("\n"), 0
    while index < len(lines):
        parsed = _parse_directive(lines, index)
        if parsed is None:
            index += 1
            continue
        directive, index = parsed
        found.append(directive)
        found += directives(directive["body"])
    return found


def _ruled(title: str, body: str) -> str:
    """A titled block between horizontal rules (a block quote would put "> " into formulas)."""
    return f"\n\n---\n\n{title}\n\n{body}\n\n---\n\n"


@dataclass
class Converter:
    """Rewrites the Markdown of one notebook for CommonMark + MathJax front ends."""

    edition: Edition
    index: BookIndex
    bibliography: Bibliography
    macros: dict[str, tuple[str, int]]
    cited: list[str] = field(default_factory=list)
    claims: list[str] = field(default_factory=list)  # keys of the {paper} numbers quoted
    glued: Glued | None = None  # the executed notebook's glued values (:func:`glued_values`)

    def markdown(self, text: str) -> str:
        text = self._blocks(text)
        text = ROLE.sub(self._role, text)
        return expand_macros(text, self.macros)

    def _blocks(self, text: str) -> str:
        lines, out, index = text.split("\n"), [], 0
        while index < len(lines):
            if TARGET_LINE.match(lines[index]):
                index += 1
                continue
            parsed = _parse_directive(lines, index)
            if parsed is None:
                out.append(lines[index])
                index += 1
                continue
            directive, index = parsed
            out.append(self._directive(directive))
        return "\n".join(out)

    def _directive(self, directive: dict[str, Any]) -> str:
        name, argument = directive["name"], directive["argument"]
        body = self._blocks(directive["body"])
        label = directive["options"].get("label")
        if name in NUMBERED:
            number = self.index.numbers.get(label, NUMBERED[name]) if label else NUMBERED[name]
            title = f"{number} ({argument})." if argument else f"{number}."
            return _ruled(f"**{title}**", body)
        if name == "prf:proof":
            start = " " if body[:1].isalpha() else "\n\n"
            return f"\n\n*Proof.*{start}{body} $\\blacksquare$\n\n"
        if name == "solution":
            if self.edition == "student":
                return ""
            target = self.index.numbers.get(argument, argument)
            return (
                f"\n<details>\n<summary>Solution to {target} (click to show)</summary>\n\n"
                f"{body}\n\n</details>\n"
            )
        if name == "admonition":
            return _ruled(f"**{argument}**", body)
        if name in ADMONITIONS:
            return _ruled(f"**{argument or ADMONITIONS[name]}.**", body)
        if name in ("math", "prf:algorithm"):
            return f"\n$$\n{body}\n$$\n"
        raise ValueError(
            f"no Colab rendering for the directive {{{name}}}: "
            "add one to tools/stablernn_tools/colab_conversion.py"
        )

    def _role(self, match: re.Match[str]) -> str:
        name, text = match.group("name"), match.group("text")
        explicit = EXPLICIT_TARGET.match(text)
        if name.startswith("cite"):
            keys = [key.strip() for key in text.split(",")]
            self.cited += [key for key in keys if key not in self.cited]
            return self.bibliography.cite(keys, textual=name == "cite:t")
        if name in ("prf:ref", "ref", "numref", "eq", "doc", "solution", "exercise"):
            if explicit and name != "numref":
                return explicit.group("text")
            label = explicit.group("target") if explicit else text
            if name == "doc":
                return self._doc_title(label.lstrip("/").removesuffix(".ipynb"))
            found = self.index.numbers.get(label)
            if found is None and label in self.index.titles:
                # Sphinx writes a section title as plain text: a formula's TeX source, unmarked
                found = DOLLAR_MATH.sub(r"\1", self.index.titles[label])
            if found is None:
                raise KeyError(f"{{{name}}}`{text}`: no target {label!r} in the book")
            if explicit:  # {numref}`Figure %s <label>`
                return explicit.group("text").replace("%s", found.split()[-1])
            return f"({found.split()[-1]})" if name == "eq" else found
        if name == "paper":
            from stablernn_lib.core import paper_claims

            key = text.strip()
            marked = paper_claims.marked(key)  # raises on an unknown key
            self.claims += [key] if key not in self.claims else []
            return marked
        if name in ("math",):
            return f"${text}$"
        if name in GLUE_ROLES:
            return self._glued(name, text)
        raise ValueError(
            f"no Colab rendering for the role {{{name}}}: add one to "
            "tools/stablernn_tools/colab_conversion.py"
        )

    def _doc_title(self, docname: str) -> str:
        """The title of ``docname``, given from the book's root or, as ``{doc}`` allows,
        relative to the page's own folder (a name that ends one docname only)."""
        if docname in self.index.doc_titles:
            return self.index.doc_titles[docname]
        ends = [
            title for doc, title in self.index.doc_titles.items() if doc.endswith(f"/{docname}")
        ]
        return ends[0] if len(ends) == 1 else docname

    def _glued(self, name: str, text: str) -> str:
        """The text MyST-NB puts in place of ``{glue:text}`key:format```, ``{glue:md}`key```
        or ``{glue}`key``` on the page."""
        key, _, spec = text.rpartition(":") if name != "glue" and ":" in text else (text, "", "")
        if self.glued is None:  # converted from a notebook that was never run
            return f"[{key}: computed when the notebook runs]"
        if key not in self.glued:
            raise KeyError(f"{{{name}}}`{text}`: the executed notebook glued no {key!r}")
        data = self.glued[key]
        if name == "glue:md" or (name == "glue" and "text/markdown" in data):
            return str(data["text/markdown"])
        return plain_text_value(str(data["text/plain"]), spec)


GLUE_ROLES = ("glue", "glue:text", "glue:md")
DOLLAR_MATH = re.compile(r"\$([^$]*)\$")
# glue name -> the display data it stored ({mime type: data})
Glued = dict[str, dict[str, Any]]


def glued_values(notebook: nbformat.NotebookNode) -> Glued:
    """Every value an executed notebook glued: ``{name: {mime type: data}}``.

    ``myst_nb.glue(name, value, display=False)`` displays the value's mime bundle with its
    types prefixed and ``metadata.scrapbook = {name, mime_prefix}``; the prefix is removed.
    """
    values: Glued = {}
    for cell in notebook.cells:
        for output in cell.get("outputs", []) if cell.cell_type == "code" else []:
            record = output.get("metadata", {}).get("scrapbook")
            if output.output_type in DISPLAYED_OUTPUTS and record and record.get("name"):
                prefix = record.get("mime_prefix", "")
                data = output.get("data", {})
                values[record["name"]] = {k.removeprefix(prefix): v for k, v in data.items()}
    return values


def executed_glue(path: Path) -> Glued:
    """Every value the executed notebook at ``path`` glued, as the build keeps them.

    MyST-NB writes the glued outputs of a build to ``<notebook>.glue.json`` beside the
    executed notebook (``jupyter_execute/``) and drops them from the notebook when their
    cell is removed from the page (``remove-cell``); both are read, the file winning."""
    values = glued_values(nbformat.read(path, as_version=4))
    stored = path.with_suffix(".glue.json")
    if stored.is_file():
        outputs = json.loads(stored.read_text(encoding="utf-8"))
        values.update(glued_values(nbformat.v4.new_notebook(cells=[
            nbformat.v4.new_code_cell(outputs=[nbformat.from_dict(o) for o in outputs.values()])
        ])))  # fmt: skip
    return values


def plain_text_value(text: str, spec: str) -> str:
    """``text`` (a ``text/plain`` repr) formatted by ``spec`` as ``{glue:text}`` does: the
    repr read back as a Python literal where it is one, converted for the spec's type."""
    try:
        value: Any = ast.literal_eval(text)
    except (SyntaxError, ValueError):
        value = text
    if not spec:
        return str(value)
    kind = spec[-1]
    if kind == "s":
        value = str(value)
    elif kind in "bcdoxX":
        value = int(value)
    elif kind in "eEfFgGn%":
        value = float(value)
    return format(value, spec)


# --- the book index: numbers and titles -----------------------------------------------------


def _chapter_numbers(root: Path) -> dict[str, int | None]:
    """docname -> the number of the chapter it belongs to (None outside numbered parts)."""
    toc = yaml.safe_load((root / "_toc.yml").read_text(encoding="utf-8"))
    numbers: dict[str, int | None] = {toc["root"]: None}
    counter = 0

    def walk(entries, chapter: int | None, numbered: bool, top: bool) -> None:
        nonlocal counter
        for entry in entries:
            number = chapter
            if "file" in entry:
                if top and numbered:
                    counter += 1
                    number = counter
                numbers[entry["file"]] = number if numbered else None
            walk(entry.get("sections", []), number, numbered, False)

    for part in toc.get("parts", [{"chapters": toc.get("chapters", [])}]):
        walk(part.get("chapters", []), None, bool(part.get("numbered")), True)
    return numbers


def _markdown_sources(root: Path, docname: str) -> list[str]:
    notebook, page = root / f"{docname}.ipynb", root / f"{docname}.md"
    if notebook.is_file():
        cells = nbformat.read(notebook, as_version=4).cells
        return [cell.source for cell in cells if cell.cell_type == "markdown"]
    return [page.read_text(encoding="utf-8")] if page.is_file() else []


def _figure_cells(root: Path, docname: str, drawn: Drawn | None = None) -> list[str]:
    """Labels of the figure cells of ``docname``, once per figure the site shows.

    myst-nb makes one numbered figure of each display output of a cell with ``mystnb.figure``
    metadata, and none of a cell that displays nothing. ``drawn`` (from
    :func:`drawn_figures`) holds those counts for an executed run; without it every figure
    cell counts once, as if it drew.
    """
    notebook = root / f"{docname}.ipynb"
    if not notebook.is_file():
        return []
    labels = []
    for cell in nbformat.read(notebook, as_version=4).cells:
        figure = cell.metadata.get("mystnb", {}).get("figure", {})
        if cell.cell_type == "code" and figure.get("name"):
            count = 1 if drawn is None else drawn.get(docname, {}).get(figure["name"], 0)
            labels += [figure["name"]] * count
    return labels


# docname -> {figure label: number of figures its cell displayed in an executed run}
Drawn = dict[str, dict[str, int]]


def drawn_figures(executed: Path, docnames: Sequence[str]) -> Drawn | None:
    """How many figures each figure cell displayed, from the executed notebooks in ``executed``.

    ``executed`` is the build's ``jupyter_execute/`` folder (one executed notebook per
    page, the outputs the site shows). Returns None when a page's notebook is missing
    there, so that the caller cannot number figures from a partial run.
    """
    drawn: Drawn = {}
    for docname in docnames:
        path = executed / f"{docname}.ipynb"
        if not path.is_file():
            return None
        counts = drawn.setdefault(docname, {})
        for cell in nbformat.read(path, as_version=4).cells:
            name = cell.metadata.get("mystnb", {}).get("figure", {}).get("name")
            if cell.cell_type == "code" and name:
                shown = [o for o in cell.outputs if o.output_type in DISPLAYED_OUTPUTS]
                counts[name] = counts.get(name, 0) + len(shown)
    return drawn


def book_index(root: Path = REPO_ROOT, drawn: Drawn | None = None) -> BookIndex:
    """Numbers of every labelled directive and figure, and every section title, of the book.

    Figures are numbered as the site numbers them after the run ``drawn`` describes
    (:func:`drawn_figures`): a figure cell that displayed nothing has no number.
    """
    index = BookIndex()
    counters: dict[tuple[str, int | None], int] = {}
    for docname, chapter in _chapter_numbers(root).items():
        sources = _markdown_sources(root, docname)
        lines = "\n".join(sources).split("\n")
        for position, line in enumerate(lines):
            heading = HEADING.match(line)
            if heading and docname not in index.doc_titles:
                index.doc_titles[docname] = heading.group("title")
            target = TARGET_LINE.match(line)
            if target:
                following = next((x for x in lines[position + 1 :] if x.strip()), "")
                title = HEADING.match(following)
                index.titles[target.group("label")] = title.group("title") if title else following
        kinds = [
            (d["name"], d["options"].get("label"))
            for text in sources
            for d in directives(text)
            if d["name"] in NUMBERED
        ] + [("figure", label) for label in _figure_cells(root, docname, drawn)]
        for name, label in kinds:
            word = NUMBERED.get(name) or FIGURE_KINDS[name]
            counters[(name, chapter)] = counters.get((name, chapter), 0) + 1
            count = counters[(name, chapter)]
            number = f"{word} {chapter}.{count}" if chapter else f"{word} {count}"
            if label:
                index.numbers.setdefault(label, number)
    return index


# --- checking: what a CommonMark + MathJax front end makes of the Markdown ----------------------

MATH = re.compile(
    r"\$\$.+?\$\$|\$(?:[^$\n]|\n(?![ \t]*\n))+?\$"
    r"|\\begin\{(?P<env>[a-z*]+)\}.+?\\end\{(?P=env)\}",
    re.S,
)
CODE = re.compile(r"^(`{3,}|~{3,}).*?^\1|`[^`\n]+`", re.S | re.M)
MYST_LEFTOVERS = {
    "directive fence": re.compile(r"language-\{|^\s*(`{3,}|:{3,})\{", re.M),
    "colon fence": re.compile(r":::"),
    "role": re.compile(r"\{[\w:-]+\}(<code>|`)"),
    "target": re.compile(r"^\s*\([\w:.-]+\)=\s*$", re.M),
}


def split_math(text: str) -> tuple[str, list[str]]:
    """``text`` with every formula replaced by a placeholder, and the formulas.

    Jupyter, JupyterLab and Colab take the math out before the Markdown parser sees it
    (so ``_`` and ``\\`` inside formulas survive); this does the same.
    """
    formulas: list[str] = []
    code: list[str] = []  # code spans and blocks hold no math ("$HOME" stays text)

    def keep_code(match: re.Match[str]) -> str:
        code.append(match.group(0))
        return f"CODEPLACEHOLDER{len(code) - 1}X"

    def keep(match: re.Match[str]) -> str:
        formulas.append(match.group(0))
        return f"MATHPLACEHOLDER{len(formulas) - 1}X"

    text = CODE.sub(keep_code, text)
    text = MATH.sub(keep, text)
    for number, span in enumerate(code):
        text = text.replace(f"CODEPLACEHOLDER{number}X", span)
    return text, formulas


def render_plain(text: str) -> tuple[str, list[str]]:
    """HTML of ``text`` by CommonMark (markdown-it-py, no MyST plugins) and its formulas."""
    from markdown_it import MarkdownIt

    rest, formulas = split_math(text)
    html = MarkdownIt("commonmark").render(rest)
    for number, formula in enumerate(formulas):
        html = html.replace(f"MATHPLACEHOLDER{number}X", formula)
    return html, formulas


def plain_markdown_problems(text: str, macros: dict[str, tuple[str, int]]) -> list[str]:
    """What would show as raw MyST or undefined macros when ``text`` is rendered plainly."""
    html, formulas = render_plain(text)
    prose = MATH.sub("", html)
    problems = [
        f"{what}: {match.group(0)!r} in {prose[max(0, match.start() - 40) : match.end() + 40]!r}"
        for what, pattern in MYST_LEFTOVERS.items()
        for match in pattern.finditer(prose)
    ]
    if macros:
        names = "|".join(sorted(map(re.escape, macros), key=len, reverse=True))
        undefined = re.compile(rf"\\({names})(?![A-Za-z])")
        for formula in formulas:
            for match in undefined.finditer(formula):
                problems.append(f"macro \\{match.group(1)} undefined in {formula[:80]!r}")
    prose = re.sub(r"<code>.*?</code>|<pre>.*?</pre>", "", prose, flags=re.S)
    if "$" in prose.replace("\\$", ""):
        problems.append(f"unpaired $ in {prose[prose.index('$') - 40 : prose.index('$') + 40]!r}")
    return problems


def notebook_problems(notebook: nbformat.NotebookNode, macros) -> list[str]:
    """:func:`plain_markdown_problems` of every Markdown cell, prefixed by the cell's index."""
    return [
        f"cell {number}: {problem}"
        for number, cell in enumerate(notebook.cells)
        if cell.cell_type == "markdown"
        for problem in plain_markdown_problems(cell.source, macros)
    ]


# --- notebooks ---------------------------------------------------------------------------------


def claims_note(keys: list[str]) -> str:
    """The cell that replaces the site's tooltips on the marks of the paper's numbers."""
    return (
        "**The paper's numbers in this notebook.** A number quoted from the paper carries a "
        "mark: ✓ checked against the source named here, † recalled, not checked. (On the "
        "course website, the mark's tooltip says the same.)\n\n" + claims_markdown(keys)
    )


def claims_markdown(keys: Iterable[str]) -> str:
    """A Markdown table of the claims ``keys``: value, mark, quantity, source, version."""
    from stablernn_lib.core import paper_claims
    from stablernn_lib.core.tables import text_table

    rows = []
    for key in keys:
        entry = paper_claims.claim(key)
        checked = entry.status == paper_claims.CHECKED
        where = f"checked: {entry.source}" if checked else "recalled, not checked"
        version = paper_claims.VERSIONS[entry.version]
        rows.append([paper_claims.marked(key), entry.quantity, where, version])
    return text_table("number | what it is | source | version", rows, right=[0])


def install_ref(root: Path, branch: str) -> tuple[str, str]:
    """The git ref the install cell pins, and a comment line saying what it is.

    ``$STABLERNN_INSTALL_REF`` (a released tag, say) wins; otherwise the commit checked
    out in ``root`` (``git rev-parse HEAD``), the code the book was built from; outside a
    git checkout, ``branch``, with a comment saying that it may have moved on.
    """
    import os
    import subprocess

    pinned = os.environ.get("STABLERNN_INSTALL_REF", "").strip()
    if pinned:
        return pinned, f"# Installs stablernn_lib {pinned}, the version this notebook was made for."
    try:
        commit = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"],
            capture_output=True, text=True, check=True, timeout=30,
        ).stdout.strip()  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        commit = ""
    if re.fullmatch(r"[0-9a-f]{40}", commit):
        return commit, "# Installs stablernn_lib at the commit this notebook was built from."
    return branch, (
        f"# Not built from a git checkout: installs the newest {branch!r} of the course "
        "repository,\n# which may differ from the code this notebook was made with."
    )


def _pinned_setup_cell(cell: nbformat.NotebookNode, root: Path) -> None:
    """Point the Colab setup cell's ``git+URL@BRANCH`` at :func:`install_ref`'s ref."""
    from stablernn_tools.book_config import COLAB_SETUP_TAG, repository

    if cell.cell_type != "code" or COLAB_SETUP_TAG not in cell.metadata.get("tags", []):
        return
    url, branch = repository(root / "_config.yml")
    ref, comment = install_ref(root, branch)
    target = f"git+{url}@{branch}"
    if target not in cell.source:
        raise ValueError(f"the Colab setup cell does not install {target}; run fix-layout")
    cell.source = comment + "\n" + cell.source.replace(target, f"git+{url}@{ref}")


def colab_notebook(
    notebook: nbformat.NotebookNode,
    *,
    edition: Edition,
    index: BookIndex,
    bibliography: Bibliography,
    macros: dict[str, tuple[str, int]],
    site_url: str | None = None,
    student: Transform | None = None,
    root: Path | None = None,
    glued: Glued | None = None,
) -> nbformat.NotebookNode:
    """The plain-Markdown notebook for ``edition`` (a new notebook; ``notebook`` is unchanged).

    A figure cell gets its numbered caption only when ``index`` numbers its figure, that is
    when the site shows it (:func:`drawn_figures`). With ``root`` (the book's folder) the
    Colab setup cell installs the library at :func:`install_ref`'s ref.

    ``student``: applied to ``notebook`` first in the student edition; leave it out when
    ``notebook`` is a student edition already (the student site's sources). ``glued``: the
    values the executed notebook glued (:func:`glued_values`), which replace the glue roles;
    by default those of ``notebook`` itself, and where it glued nothing (it never ran) each
    role says that its value is computed when the notebook runs.
    """
    plain = student(notebook) if edition == "student" and student else copy.deepcopy(notebook)
    glued = glued if glued is not None else (glued_values(notebook) or None)
    converter = Converter(edition, index, bibliography, macros, glued=glued)
    cells = []
    for cell in plain.cells:
        options = cell.metadata.pop("mystnb", {})
        figure, alt = options.get("figure", {}), options.get("image", {}).get("alt", "")
        if cell.cell_type == "markdown":
            cell.source = converter.markdown(cell.source).strip("\n")
        if root is not None:
            _pinned_setup_cell(cell, root)
        cells.append(cell)
        name = figure.get("name")
        if figure.get("caption") and (name is None or name in index.numbers):
            # the site's numbered caption, under the figure's cell
            number = index.numbers.get(name, "Figure")
            caption = nbformat.v4.new_markdown_cell(
                f"**{number}.** " + converter.markdown(figure["caption"]).strip()
            )
            caption.id = f"{cell.get('id', len(cells))}-caption"
            cells.append(caption)
            if alt.strip():  # the site's text alternative of the figure, for every reader
                description = nbformat.v4.new_markdown_cell(
                    f"*Description of {number}:* {' '.join(alt.split())}"
                )
                description.id = caption.id.removesuffix("-caption") + "-description"
                cells.append(description)
    plain.cells = cells
    plain.cells = [c for c in plain.cells if c.cell_type != "markdown" or c.source.strip()]
    where = f" The typeset version is the course website{f', {site_url}' if site_url else ''}."
    note = nbformat.v4.new_markdown_cell(
        f"*{edition.capitalize()} edition of this chapter, generated for Colab and Jupyter "
        f"from the course's MyST source by `stablernn_tools.colab_conversion`.{where}*"
    )
    note.id = "colab-edition-note"
    first_markdown = next((i for i, c in enumerate(plain.cells) if c.cell_type == "markdown"), 0)
    plain.cells.insert(first_markdown + 1, note)
    if converter.claims:
        claims = nbformat.v4.new_markdown_cell(claims_note(converter.claims))
        claims.id = "colab-paper-numbers"
        plain.cells.append(claims)
    if converter.cited:
        references = nbformat.v4.new_markdown_cell(bibliography.references(converter.cited))
        references.id = "colab-references"
        plain.cells.append(references)
    plain.metadata.setdefault("colab", {})["provenance"] = []  # smoke mode needs no GPU
    return plain


def notebook_docnames(root: Path = REPO_ROOT) -> list[str]:
    """Every page of ``_toc.yml`` whose source is a notebook."""
    return [name for name in _chapter_numbers(root) if (root / f"{name}.ipynb").is_file()]


def write_colab_notebooks(
    root: Path,
    out: Path,
    edition: Edition,
    student: Transform | None = None,
    executed: Path | None = None,
) -> list[Path]:
    """Write the ``edition`` notebook of every notebook page of the book in ``root`` to ``out``.

    ``student`` as in :func:`colab_notebook`. ``executed``: the folder of executed notebooks
    of a build (``_build/jupyter_execute``), whose figures decide the numbering
    (:func:`drawn_figures`); without one, every figure cell counts as drawn.
    """
    config = read_config(root)
    docnames = notebook_docnames(root)
    drawn = drawn_figures(executed, docnames) if executed is not None else None
    if executed is not None and drawn is None:
        raise FileNotFoundError(
            f"{executed} lacks executed notebooks of some pages; build the book first "
            "(`make book`) or leave out --executed"
        )
    index = book_index(root, drawn)
    bibliography = Bibliography(root / config["bibtex_bibfiles"][0])
    macros = book_macros(config)
    written = []
    for docname in docnames:
        notebook = nbformat.read(root / f"{docname}.ipynb", as_version=4)
        run = executed / f"{docname}.ipynb" if executed is not None else None
        plain = colab_notebook(
            notebook,
            edition=edition,
            index=index,
            bibliography=bibliography,
            macros=macros,
            student=student,
            root=root,
            glued=executed_glue(run) if run else None,
        )
        target = out / f"{docname}.ipynb"
        target.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(plain, target)
        written.append(target)
    return written


def _write(args: argparse.Namespace) -> int:
    for path in write_colab_notebooks(args.root, args.out, args.edition, executed=args.executed):
        print(path)
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``colab`` to ``python -m stablernn_tools``."""
    parser = subparsers.add_parser("colab", help="write the book's notebooks as Colab notebooks")
    parser.add_argument("--edition", choices=("student", "instructor"), default="student")
    parser.add_argument(
        "--root",
        type=Path,
        default=REPO_ROOT,
        help="the book (default: here); for --edition student, the folder written by "
        "`python -m stablernn_tools student-edition`",
    )
    parser.add_argument("--out", type=Path, required=True, help="folder for the notebooks")
    parser.add_argument(
        "--executed", type=Path, default=None,
        help="a build's executed notebooks (e.g. _build/jupyter_execute): figures are numbered "
        "as that run drew them, as on the site; default: every figure cell counts",
    )  # fmt: skip
    parser.set_defaults(func=_write)
