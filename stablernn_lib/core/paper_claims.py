"""Every number the course attributes to the paper, once, as a :class:`PaperClaim`: the value as
quoted, what it measures, checked against a stored source (✓) or recalled (†), and the paper's
version.  The book shows a claim with its mark: ``{paper}`key``` in Markdown, :func:`marked` in
code, the ``{paper-claims}`` directive for the registry (``stablernn_tools.paper_claims_check``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

CHECKED, RECALLED = "checked", "recalled"
MARKS = {CHECKED: "✓", RECALLED: "†"}

# The two versions of the paper, and what "version not known" means.
VERSIONS = {
    "earlier": (
        'the earlier version, "When Recurrent Models Don\'t Need To Be Recurrent" '
        "(arXiv:1805.10369, 2018)"
    ),
    "iclr2019": 'the ICLR 2019 version, "Stable Recurrent Models"',
    "unknown": "a version of the paper not known to us",
}

# The stored sources a claim can be checked against (see ../shared/seeds/README.md).
TALK = (
    "the caption of Figure 2 in the slides of a third-party talk on the paper's "
    "earlier version (Oleg Voinov; not the authors')"
)


@dataclass(frozen=True)
class PaperClaim:
    """One number attributed to the paper: ``value`` as quoted (``"146.7"``), ``status``
    (``"checked"``, with its ``source``, or ``"recalled"``), ``version`` (a key of ``VERSIONS``)."""

    key: str
    value: str
    quantity: str
    status: str
    version: str
    source: str = ""

    def __post_init__(self) -> None:
        if self.status not in MARKS:
            raise ValueError(f"{self.key}: status {self.status!r} must be one of {list(MARKS)}")
        if self.version not in VERSIONS:
            raise ValueError(
                f"{self.key}: version {self.version!r} must be one of {list(VERSIONS)}"
            )
        if (self.status == CHECKED) != bool(self.source):
            raise ValueError(f"{self.key}: a checked claim names its source, a recalled one none")
        if not re.fullmatch(r"\d+(\.\d+)?", self.value):
            raise ValueError(f"{self.key}: value {self.value!r} must be a plain decimal number")

    @property
    def mark(self) -> str:
        return MARKS[self.status]

    @property
    def provenance(self) -> str:
        """One sentence: checked against what, or recalled; and which version."""
        if self.status == CHECKED:
            where = f"checked: {self.source}"
        else:
            where = "recalled, not checked against any stored source"
        return f"{where}; refers to {VERSIONS[self.version]}."


CLAIMS: tuple[PaperClaim, ...] = (
    PaperClaim(
        "wt2-rnn-unconstrained-ppl",
        "146.7",
        "WikiText-2 test perplexity, unconstrained RNN (the model of Figure 2)",
        CHECKED,
        "earlier",
        TALK,
    ),
    PaperClaim(
        "wt2-lstm-unconstrained-ppl",
        "92.3",
        "WikiText-2 test perplexity, unconstrained LSTM (the model of Figure 2)",
        CHECKED,
        "earlier",
        TALK,
    ),
    PaperClaim(
        "wt2-rnn-stable-ppl",
        "143.5",
        "WikiText-2 test perplexity, stable RNN",
        RECALLED,
        "unknown",
    ),
    PaperClaim(
        "wt2-lstm-stable-ppl",
        "94.6",
        "WikiText-2 test perplexity, stable LSTM",
        RECALLED,
        "unknown",
    ),
    PaperClaim(
        "jsb-rnn-unconstrained-nll",
        "8.9",
        "JSB Chorales test negative log-likelihood, unconstrained RNN",
        RECALLED,
        "unknown",
    ),
    PaperClaim(
        "jsb-rnn-stable-nll",
        "8.9",
        "JSB Chorales test negative log-likelihood, stable RNN",
        RECALLED,
        "unknown",
    ),
    PaperClaim(
        "jsb-lstm-unconstrained-nll",
        "8.5",
        "JSB Chorales test negative log-likelihood, unconstrained LSTM",
        RECALLED,
        "unknown",
    ),
    PaperClaim(
        "jsb-lstm-stable-nll",
        "8.5",
        "JSB Chorales test negative log-likelihood, stable LSTM",
        RECALLED,
        "unknown",
    ),
)
REGISTRY: dict[str, PaperClaim] = {claim.key: claim for claim in CLAIMS}


def claim(key: str) -> PaperClaim:
    """The registered claim ``key``; a clear error lists the keys when it is unknown."""
    try:
        return REGISTRY[key]
    except KeyError:
        raise KeyError(
            f"no paper claim {key!r}: add it to stablernn_lib/core/paper_claims.py "
            f"or use one of {sorted(REGISTRY)}"
        ) from None


def value(key: str) -> float:
    """The claim's value as a float (for computations and plots)."""
    return float(claim(key).value)


def marked(key: str) -> str:
    """The claim as plain text with its mark, e.g. ``"146.7 ✓"`` or ``"143.5 †"``."""
    entry = claim(key)
    return f"{entry.value} {entry.mark}"
