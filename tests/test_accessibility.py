"""Accessibility checks that need no built book: every figure of the notebooks has a text
alternative, and the axe-core check of tests/test_browser.py fails where it must (a page with
an image without alt text, a slider without a name), naming page, rule and element."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from browser_support import (
    AXE_SCRIPT,
    CHROMIUM,
    COLLAPSIBLES,
    OPEN_COLLAPSIBLES_SCRIPT,
    TYPESET_SCRIPT,
    alt_problem,
    axe_violations,
    chromium,
    describe_violations,
    measure_accessibility,
)

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = sorted((ROOT / "chapters").glob("*.ipynb"))
MAX_ALT = 300  # "at most about 250 characters"


def cells(path: Path) -> list[dict]:
    return json.loads(path.read_text(encoding="utf-8"))["cells"]


def source(cell: dict) -> str:
    text = cell["source"]
    return "".join(text) if isinstance(text, list) else text


def figure_cells(path: Path) -> list[dict]:
    """The code cells of a notebook that the site shows as a numbered figure."""
    return [
        cell
        for cell in cells(path)
        if cell["cell_type"] == "code" and cell["metadata"].get("mystnb", {}).get("figure")
    ]


def test_every_figure_of_the_chapters_is_described():
    """A figure cell carries MyST-NB's image ``alt`` (or, for a widget plot, ``alt=`` in its
    ``interactive_plot`` call): what it shows and its finding, not a file name."""
    problems, described = [], 0
    for path in CHAPTERS:
        for cell in figure_cells(path):
            name = cell["metadata"]["mystnb"]["figure"].get("name", cell.get("id"))
            code = source(cell)
            if "interactive_plot(" in code or "_widget(" in code:
                if "interactive_plot(" in code and "alt=" not in code:
                    problems.append(f"{path.name} {name}: interactive_plot without alt=")
                continue
            alt = cell["metadata"]["mystnb"].get("image", {}).get("alt")
            problem = alt_problem(alt, "") or (
                f"alt of {len(alt)} characters, more than {MAX_ALT}" if len(alt) > MAX_ALT else None
            )
            if problem:
                problems.append(f"{path.name} {name}: {problem}")
            else:
                described += 1
    assert described >= 30
    assert not problems, "\n".join(problems)


def test_widget_plots_of_the_library_are_described():
    """The library's widget plots pass ``alt=`` to ``interactive_plot``."""
    library = ROOT / "stablernn_lib" / "figures"
    calls = {
        path.name: re.findall(r"interactive_plot\((.*?)\n    \)", path.read_text(), re.S)
        for path in library.glob("*.py")
        if path.name != "widgets.py"
    }
    found = [call for found in calls.values() for call in found]
    assert len(found) >= 3
    assert all("alt=" in call for call in found), calls


@pytest.mark.parametrize(
    ("alt", "src", "expected"),
    [
        (None, "a.png", "no alt"),
        ("  ", "a.png", "empty alt"),
        ("3f2a9c0d1e2b3c4d5e6f.png", "_images/3f2a9c0d1e2b3c4d5e6f.png", "file name"),
        ("figure.png", "x/figure.png", "file name"),
        ("A plot", "a.png", "says too little"),
        ("Line plot of the gap against k, falling geometrically below the bound.", "a.png", None),
    ],
)
def test_alt_problem(alt, src, expected):
    problem = alt_problem(alt, src)
    assert (problem is None) if expected is None else (expected in problem)


BAD_PAGE = """<!doctype html><html lang="en"><head><title>Synthetic page</title></head><body>
<main><h1>Synthetic page</h1>
<img id="plot" src="data:image/png;base64,{png}">
<div id="lam" role="slider" tabindex="0" aria-valuemin="0" aria-valuemax="3"
     aria-valuenow="1" style="width:40px;height:10px;background:#333"></div>
<details><summary>More</summary><img id="folded" src="data:image/png;base64,{png}"></details>
</main></body></html>"""
# a 1 x 1 PNG
PIXEL = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5"
    "ErkJggg=="
)


@pytest.mark.browser
@pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium (make browser-deps)")
def test_axe_fails_on_an_image_without_alt_and_an_unnamed_slider():
    assert AXE_SCRIPT.is_file(), "run `npm ci --prefix tests/axe` (make test does)"
    with chromium() as browser:
        page = browser.new_page()
        page.set_content(BAD_PAGE.format(png=PIXEL))
        found = axe_violations(page)
        lines = describe_violations("synthetic.html at 1400 px", found)
        rules = {violation["id"] for violation in found}
        assert {"image-alt", "aria-input-field-name"} <= rules, lines
        assert any("image-alt" in line and "#plot" in line for line in lines), lines
        assert any("aria-input-field-name" in line and "#lam" in line for line in lines), lines
        assert all(line.startswith("synthetic.html at 1400 px: ") for line in lines)
        assert not any("#folded" in line for line in lines)  # hidden in a closed collapsible
        # a selector limits the check to what it matches
        assert {v["id"] for v in axe_violations(page, selector="#lam")} == {"aria-input-field-name"}
        assert axe_violations(page, selector=COLLAPSIBLES) == []
        # named, and the collapsible opened, the same page fails only on the folded image
        page.evaluate(
            """() => { document.querySelector("#plot").alt = "Line plot of a gap against k";
                       document.querySelector("#lam").setAttribute("aria-label", "λ"); }"""
        )
        page.evaluate(OPEN_COLLAPSIBLES_SCRIPT)
        found = describe_violations("synthetic.html", axe_violations(page, selector=COLLAPSIBLES))
        assert len(found) == 1 and "image-alt" in found[0] and "#folded" in found[0], found
        page.evaluate("""() => { document.querySelector("#folded").alt = "A folded plot of k"; }""")
        assert axe_violations(page) == []
        page.close()


MATH_PAGE = """<!doctype html><html lang="en"><head><title>Formulas</title>
<script>MathJax = {{options: {{menuOptions: {{settings: {{inTabOrder: false}}}}}}}};</script>
<script src="{mathjax}"></script></head><body><main><h1>Formulas</h1>
<p>A plain formula \\(x^2 + y\\) and a coloured one
<math><mstyle mathcolor="#f4f4f4"><mi>z</mi></mstyle></math>.</p>
<img id="plot" src="data:image/png;base64,{png}"></main></body></html>"""


@pytest.mark.browser
@pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium (make browser-deps)")
def test_formulas_set_aside_for_axe_hide_no_violation_and_a_coloured_one_fails(tmp_path):
    """axe runs with each formula's rendering set aside and put back afterwards; a violation
    beside the formulas is still found, and a formula with a colour of its own fails."""
    mathjax = Path(__file__).resolve().parents[1] / "book/vendor/mathjax/tex-mml-chtml.js"
    page_path = tmp_path / "formulas.html"
    page_path.write_text(MATH_PAGE.format(mathjax=mathjax.as_uri(), png=PIXEL))
    with chromium() as browser:
        page = browser.new_page()
        page.goto(page_path.as_uri(), wait_until="load")
        page.evaluate(TYPESET_SCRIPT)
        shown = "() => document.querySelectorAll('mjx-container > mjx-math').length"
        assert page.evaluate(shown) == 2
        record = measure_accessibility(page)
        assert page.evaluate(shown) == 2  # put back
        found = {v["id"]: v["nodes"] for v in record["axe"]["collapsibles open"]}
        assert "image-alt" in found, found
        assert [node["html"] for node in found["math-own-colour"]] == ["z"], found
        page.close()
