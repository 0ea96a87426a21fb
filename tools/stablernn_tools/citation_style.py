"""One citation style for the text and the bibliography: "Miller and Hardt (2019)".

sphinxcontrib-bibtex's ``author_year`` referencing style cites as "Miller and Hardt
[2019]" while its default bibliography style labels entries "[MH19]", so a reader cannot
match the two. The book registers (with pybtex's plugin registry, from its Sphinx
extension) a referencing style with round brackets, ``author_year_round``: textual
citations "Miller and Hardt (2019)", parenthetical "(Miller and Hardt, 2019)"; and a
bibliography style, ``author_year``, whose labels are the same "Miller and Hardt, 2019",
sorted by author and year. The Colab notebooks (``stablernn_tools.colab_conversion``) cite
the same way.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterable, Iterator
from string import ascii_lowercase


def authors_text(entry) -> str:
    """ "Hardt", "Miller and Hardt", "van den Oord et al." (last names with their "von" part;
    editors or title if none)."""
    people = entry.persons.get("author") or entry.persons.get("editor") or []
    last = [
        " ".join(p.prelast_names + p.last_names).replace("{", "").replace("}", "") for p in people
    ]
    if not last:
        return entry.fields.get("title", entry.key)
    if len(last) == 1:
        return last[0]
    if len(last) == 2:
        return f"{last[0]} and {last[1]}"
    return f"{last[0]} et al."


def register() -> None:
    """Register ``author_year_round`` (referencing) and ``author_year`` (labels, formatting)."""
    from pybtex.plugin import find_plugin, register_plugin
    from pybtex.style.labels import BaseLabelStyle
    from sphinxcontrib.bibtex.plugin import register_plugin as register_referencing
    from sphinxcontrib.bibtex.style.referencing import BracketStyle
    from sphinxcontrib.bibtex.style.referencing.author_year import AuthorYearReferenceStyle

    class AuthorYearLabelStyle(BaseLabelStyle):
        """Labels "Miller and Hardt, 2019"; a letter tells apart equal ones (2019a, 2019b)."""

        def format_labels(self, sorted_entries: Iterable) -> Iterator[str]:
            entries = list(sorted_entries)
            labels = [f"{authors_text(e)}, {e.fields.get('year', 'n.d.')}" for e in entries]
            counts, seen = Counter(labels), Counter()
            for label in labels:
                if counts[label] > 1:
                    seen[label] += 1
                    label = f"{label}{ascii_lowercase[seen[label] - 1]}"
                yield label

    plain = find_plugin("pybtex.style.formatting", "plain")

    class AuthorYearStyle(plain):
        default_label_style = "author_year"
        default_sorting_style = "author_year_title"

    def round_brackets() -> BracketStyle:
        return BracketStyle(left="(", right=")", sep="; ")

    @dataclasses.dataclass
    class RoundAuthorYearReferenceStyle(AuthorYearReferenceStyle):
        bracket_parenthetical: BracketStyle = dataclasses.field(default_factory=round_brackets)
        bracket_textual: BracketStyle = dataclasses.field(default_factory=round_brackets)
        bracket_author: BracketStyle = dataclasses.field(default_factory=round_brackets)
        bracket_label: BracketStyle = dataclasses.field(default_factory=round_brackets)
        bracket_year: BracketStyle = dataclasses.field(default_factory=round_brackets)

    referencing = "sphinxcontrib.bibtex.style.referencing"
    register_plugin("pybtex.style.labels", "author_year", AuthorYearLabelStyle, force=True)
    register_plugin("pybtex.style.formatting", "author_year", AuthorYearStyle, force=True)
    register_referencing(referencing, "author_year_round", RoundAuthorYearReferenceStyle, True)
