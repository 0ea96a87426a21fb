"""The instructor site (`make instructor`) in headless Chromium with no network: what it adds
to the student site (the chapters' solutions, homework with model answers and rubrics, the
instructor pages) passes axe-core's WCAG 2.1 A and AA rules at both widths, every collapsible
open. Its own test file, so that it runs beside the student site's visits on another worker."""

import json
import re

import pytest
from book_support import HTML_DIR, build_book, build_instructor_site
from browser_support import (
    BROWSER_TEST,
    WIDTHS,
    at_each_width,
    axe_failures,
    book_pages,
    by_width,
    measure_accessibility,
    serve,
    visit_pages,
)

pytestmark = BROWSER_TEST


# The blocks that the instructor edition of a chapter adds (sphinx-exercise's solutions).
SOLUTIONS = "div.solution"

# Run in a page before its scripts: on the pages listed (%%s: their paths), MathJax is
# configured not to typeset the page when it starts (the page's configuration gets
# ``startup.typeset = false`` as it is assigned), since only the solutions are checked there.
TYPESET_LATER_SCRIPT = """(() => {
  const later = %s;
  if (!later.some(path => location.pathname.endsWith("/" + path))) return;
  let value;
  Object.defineProperty(window, "MathJax", {configurable: true, get: () => value, set(given) {
    if (given && !given.version) given.startup = {...(given.startup || {}), typeset: false};
    value = given;
  }});
})();"""

# Typesets the solutions alone (on a page loaded with TYPESET_LATER_SCRIPT).
TYPESET_SOLUTIONS_SCRIPT = f"""async () => {{
  await MathJax.typesetPromise(Array.from(document.querySelectorAll("{SOLUTIONS}")));
  await new Promise(resolve => requestAnimationFrame(() => resolve(null)));
}}"""


@pytest.fixture(scope="module")
def instructor_visits(browser) -> dict[int, dict[str, dict]]:
    """The instructor site (`make instructor`), served like the student site (which it is
    compared with, so that is built first): what it adds to
    the student site visited at both widths, every collapsible open, through axe: the
    solutions of a chapter that differs from the student page by its solutions alone, every
    other page whose article differs (homework with model answers and rubrics, the
    instructor pages) whole. Records by width and page, as :func:`measure_accessibility`."""
    build_book()
    site = build_instructor_site()
    changed = [
        name
        for name in book_pages()
        if (site / name).is_file() and article(site / name) != article(HTML_DIR / name)
    ]
    selectors = {name: added_part(site / name, HTML_DIR / name) for name in changed}

    def measure(name: str, page) -> dict[int, dict]:
        if selectors[name] == SOLUTIONS:
            page.evaluate(TYPESET_SOLUTIONS_SCRIPT)
        return {
            width: measure_accessibility(page, selectors[name], closed_too=False)
            for width in at_each_width(page)
        }

    with serve(site) as url:
        jobs = [(name, url + name, WIDTHS[0]) for name in changed]
        only_solutions = [name for name in changed if selectors[name] == SOLUTIONS]
        results = visit_pages(
            browser,
            jobs,
            measure,
            lambda u: u.startswith((url, "data:", "blob:")),
            init_script=TYPESET_LATER_SCRIPT % json.dumps(only_solutions),
        )
    return by_width(results)


def article(path) -> str:
    """The HTML of a page's article (what an edition changes), or "" without one."""
    text = path.read_text(encoding="utf-8") if path.is_file() else ""
    start, end = text.find('<article class="bd-article">'), text.find("</article>")
    return text[start:end] if start >= 0 else ""


def added_part(instructor_page, student_page) -> str | None:
    """:data:`SOLUTIONS` when the instructor page's article is the student page's plus
    solutions (compared with white space collapsed), else None (the whole page)."""
    from bs4 import BeautifulSoup

    def markup(html: str) -> str:
        return re.sub(r"\s+", " ", str(BeautifulSoup(html, "html.parser")))

    soup = BeautifulSoup(article(instructor_page), "html.parser")
    solutions = soup.select(SOLUTIONS)
    for block in solutions:
        block.decompose()
    same = markup(str(soup)) == markup(article(student_page))
    return SOLUTIONS if solutions and same else None


def test_no_accessibility_violations_on_the_instructor_site(instructor_visits):
    """What the instructor site adds (homework with model answers and rubrics, the chapters'
    solutions, opened) passes the same axe rules at both widths."""
    pages = instructor_visits[1400]
    assert any(name.startswith("chapters/homework/") for name in pages), sorted(pages)
    assert any(name.startswith("chapters/0") for name in pages), sorted(pages)
    failures = axe_failures("instructor site", instructor_visits)
    assert not failures, "\n".join(failures[:60])
