"""Shared by the browser tests: headless Chromium, and many pages visited side by side.

A page spends most of its visit inside Chromium (parsing MathJax, typesetting, layout)
while Python waits. :func:`visit_pages` keeps a few tabs busy at once, each in its own
browser context (so in its own renderer process): it starts the next navigation of a tab
as soon as that tab's page is measured, and measures the tabs in turn.
"""

from __future__ import annotations

import functools
import http.server
import os
import re
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from stablernn_tools.book_config import toc_files

CHROMIUM = Path("/usr/bin/chromium")
# The marks of a test module that opens pages in Chromium.
BROWSER_TEST = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium (make browser-deps)"),
]
ROOT = Path(__file__).resolve().parents[1]
# Each page is loaded at the first width, then the window is narrowed to the second.
WIDTHS = (1400, 400)
# axe-core from npm (tests/axe/package-lock.json; `make test` runs `npm ci` there): the
# accessibility rules of WCAG 2.1 levels A and AA, run in the page.
AXE_SCRIPT = Path(__file__).resolve().parent / "axe" / "node_modules" / "axe-core" / "axe.min.js"
AXE_TAGS = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"]
CHROMIUM_FLAGS = [  # BOOK-TOOLING.md; Playwright adds --headless itself
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
# Tabs loading at once: one per core (the course's machines have two), at least two, since
# a tab also waits on its own page load.
TABS = max(2, min(4, os.cpu_count() or 1))

# Resolves once MathJax's first typeset is done, the page is laid out and every font that
# layout asked for (MathJax's included) is loaded. book/course.js scales the wide equations
# in a `then` of the same promise that it registers at the load event, so before this one:
# the page is measured after the scaling, with no fixed sleep.
TYPESET_SCRIPT = """async () => {
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) {
    await MathJax.startup.promise;
  }
  await new Promise(resolve => requestAnimationFrame(() => resolve(null)));
  await document.fonts.ready;
}"""


@contextmanager
def chromium(args: list[str] = CHROMIUM_FLAGS) -> Iterator[Any]:
    """One headless Chromium (Debian's) for a whole test module."""
    playwright_api = pytest.importorskip("playwright.sync_api")
    # Playwright gives the browser a fresh temporary profile (the --user-data-dir flag).
    with playwright_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=args
        )
        try:
            yield browser
        finally:
            browser.close()


class Tab:
    """A page in a context of its own, with what went wrong since its last navigation:
    requests refused by ``allowed`` (aborted), JavaScript errors, HTTP errors."""

    def __init__(
        self, browser: Any, allowed: Callable[[str], bool], init_script: str | None = None
    ) -> None:
        self.context = browser.new_context()
        if init_script:
            self.context.add_init_script(init_script)
        self.page = self.context.new_page()
        self.problems: list[str] = []
        self.job: Any = None

        def route(request_route: Any) -> None:
            url = request_route.request.url
            if allowed(url):
                request_route.continue_()
            else:
                self.problems.append(f"network request {url}")
                request_route.abort()

        def response(answer: Any) -> None:
            if answer.status >= 400:
                self.problems.append(f"HTTP {answer.status} {answer.url}")

        self.page.route("**/*", route)
        self.page.on("pageerror", lambda error: self.problems.append(f"JavaScript error {error}"))
        self.page.on("response", response)

    def start(self, job: Any, url: str, width: int) -> None:
        """Begin loading ``url`` ``width`` px wide; returns once the navigation commits."""
        self.job, self.problems = job, []
        self.page.set_viewport_size({"width": width, "height": 1000})
        self.page.goto(url, wait_until="commit")

    def finish(self) -> None:
        """Wait for the load event and the typesetting of the page being loaded."""
        self.page.wait_for_load_state("load")
        self.page.evaluate(TYPESET_SCRIPT)


def visit_pages(
    browser: Any,
    jobs: list[tuple[Any, str, int]],
    measure: Callable[[Any, Any], Any],
    allowed: Callable[[str], bool],
    tabs: int = TABS,
    init_script: str | None = None,
) -> dict[Any, tuple[Any, list[str]]]:
    """``{job: (measure(job, page), problems)}`` for each ``(job, url, width)``.

    Every page is loaded to its load event and typeset (:data:`TYPESET_SCRIPT`), then
    ``measure`` runs on it; ``problems`` are the requests refused by ``allowed``, the
    JavaScript errors and the HTTP errors of that page's visit. ``init_script`` runs in each
    page before its own scripts."""
    queue = list(jobs)
    open_tabs = [Tab(browser, allowed, init_script) for _ in range(min(tabs, len(queue)))]
    results: dict[Any, tuple[Any, list[str]]] = {}
    try:
        for tab in open_tabs:
            tab.start(*queue.pop(0))
        busy = list(open_tabs)
        while busy:
            for tab in list(busy):
                tab.finish()
                results[tab.job] = (measure(tab.job, tab.page), tab.problems)
                if queue:
                    tab.start(*queue.pop(0))
                else:
                    busy.remove(tab)
    finally:
        for tab in open_tabs:
            tab.context.close()
    return results


# Resolves once every widget view of the page has been rendered (the widget manager draws
# each after the load event, into a ``.widget-subarea`` beside its view's script), or after
# 20 s.
WIDGETS_SCRIPT = """async () => {
  const views = Array.from(document.querySelectorAll(
    'script[type="application/vnd.jupyter.widget-view+json"]'));
  const drawn = () => views.every(view => view.parentElement.querySelector(".widget-subarea"));
  for (let waited = 0; !drawn() && waited < 20000; waited += 100) {
    await new Promise(resolve => setTimeout(resolve, 100));
  }
  await new Promise(resolve => requestAnimationFrame(() => resolve(null)));
  await new Promise(resolve => setTimeout(resolve, 50));  // book/accessibility.js runs
}"""

# axe-core's violations of the WCAG 2.1 A and AA rules in the elements that a CSS selector
# matches (the whole document when it is null; none when it matches nothing), each with its
# nodes.
AXE_RUN_SCRIPT = """async ([tags, selector, skip]) => {
  if (selector !== null && !document.querySelector(selector)) return [];
  const rules = Object.fromEntries(skip.map(rule => [rule, {enabled: false}]));
  const result = await axe.run(selector ?? document, {runOnly: {type: "tag", values: tags},
                                                      rules, resultTypes: ["violations"]});
  return result.violations.map(v => ({id: v.id, help: v.help, nodes: v.nodes.map(n => ({
    target: n.target.join(" "), html: n.html.slice(0, 160),
    summary: (n.failureSummary || "").slice(0, 300)}))}));
}"""

# axe's rules that lay out the whole page whatever the selector (seconds on a long page).
LAYOUT_RULES = ("color-contrast", "link-in-text-block")

# The page's collapsibles: <details> (the theme's menus, folded cells and sections) and
# sphinx-togglebutton's admonitions (a solution, a dropdown note).
COLLAPSIBLES = "details, .admonition.toggle"

# Resolves once the page is laid out again and its animations are done.
SETTLED = """await new Promise(resolve => requestAnimationFrame(() => resolve(null)));
  await new Promise(resolve => setTimeout(resolve, 0));
  await Promise.all(document.getAnimations().map(a => a.finished.catch(() => null)));"""

# Every collapsible of the page opened (an admonition by its title, as a reader clicks it),
# once the content has faded in (the theme animates it: half-faded text would read as low
# contrast); each one opened here is marked, for CLOSE_COLLAPSIBLES_SCRIPT.
OPEN_COLLAPSIBLES_SCRIPT = f"""async () => {{
  document.querySelectorAll("details:not([open])").forEach(d => {{
    d.open = true; d.dataset.openedByTest = ""; }});
  document.querySelectorAll(".admonition.toggle.toggle-hidden > .admonition-title")
    .forEach(title => {{ title.parentElement.dataset.openedByTest = ""; title.click(); }});
  {SETTLED}
}}"""

# The collapsibles that OPEN_COLLAPSIBLES_SCRIPT opened, closed again.
CLOSE_COLLAPSIBLES_SCRIPT = f"""async () => {{
  document.querySelectorAll("[data-opened-by-test]").forEach(node => {{
    delete node.dataset.openedByTest;
    if (node.tagName === "DETAILS") node.open = false;
    else node.querySelector(":scope > .admonition-title").click();
  }});
  {SETTLED}
}}"""


# The theme makes each scrollable element a tab stop (and each other one none) 300 ms after
# the last resize event.
THEME_RESIZE_DELAY_MS = 300


def resize(page: Any, width: int) -> None:
    """Set the window ``width`` px wide and wait until the page has laid itself out again
    (book/course.js, fit.js and accessibility.js refit it on the resize event, the theme
    its tab stops :data:`THEME_RESIZE_DELAY_MS` later)."""
    page.set_viewport_size({"width": width, "height": 1000})
    page.wait_for_timeout(THEME_RESIZE_DELAY_MS + 100)
    page.evaluate(f"async () => {{ {SETTLED} }}")


def at_each_width(page: Any, before_narrowing: str | None = None) -> Iterator[int]:
    """Each of :data:`WIDTHS` in turn, the window that wide: the first as the page was loaded,
    the next after :func:`resize` (``before_narrowing``, a script, run first)."""
    for width in WIDTHS:
        if width != WIDTHS[0]:
            if before_narrowing:
                page.evaluate(before_narrowing)
            resize(page, width)
        yield width


def by_width(results: dict[Any, tuple[dict[int, dict], list[str]]]) -> dict[int, dict[Any, dict]]:
    """:func:`visit_pages`' results of a ``{width: record}`` measure as ``{width: {page:
    record}}``, each record with its page's ``problems``."""
    records: dict[int, dict[Any, dict]] = {width: {} for width in WIDTHS}
    for name, (measured, problems) in results.items():
        for width, record in measured.items():
            records[width][name] = {**record, "problems": problems}
    return records


@contextmanager
def serve(folder: Path) -> Iterator[str]:
    """A local HTTP server of ``folder`` for the duration; yields its address (``.../``)."""

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base's name)
            pass

    handler = functools.partial(Quiet, directory=str(folder))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


# Every image of the page's content: its address and its text alternative (alt, or the
# aria-label or title that stands for it; null when it has none).
CONTENT_IMAGES_SCRIPT = """() => Array.from(
  document.querySelectorAll("article.bd-article img")).map(i => ({
    src: (i.getAttribute("src") || "").slice(0, 120),
    alt: i.getAttribute("alt") ?? i.getAttribute("aria-label") ?? i.getAttribute("title"),
    decorative: ["presentation", "none"].includes(i.getAttribute("role"))
  }))"""


# Each formula's visual rendering (MathJax's ``mjx-math``: hidden from assistive technology,
# glyphs drawn by CSS in the text's colour; about 85% of a chapter's elements) set aside for
# axe, an empty box of its size in its place; its MathML copy, what assistive technology
# reads, stays. axe's work grows with the elements of the page. Returns the formulas that set
# a colour of their own (their contrast would then be unchecked): none is allowed.
MATH_ASIDE_SCRIPT = """() => {
  const maths = Array.from(document.querySelectorAll("mjx-container > mjx-math"));
  const boxes = maths.map(math => math.getBoundingClientRect());  // one layout for all
  const coloured = maths.filter(math => math.querySelector('[style*="color"]'))
    .map(math => math.parentElement.querySelector("mjx-assistive-mml")?.textContent || "?");
  window.mathAside = maths.map((math, i) => {
    const box = document.createElement("mjx-box");
    box.style.cssText = `display: inline-block; width: ${boxes[i].width}px; ` +
                        `height: ${boxes[i].height}px`;
    box.setAttribute("aria-hidden", "true");
    math.replaceWith(box);
    return [box, math];
  });
  return coloured.map(text => text.slice(0, 60));
}"""
MATH_BACK_SCRIPT = """() => {
  for (const [box, math] of window.mathAside || []) box.replaceWith(math);
  window.mathAside = [];
}"""


@contextmanager
def formulas_set_aside(page: Any) -> Iterator[list[str]]:
    """The formulas' renderings set aside for the duration (:data:`MATH_ASIDE_SCRIPT`), put
    back after; yields the formulas that set a colour of their own."""
    coloured = page.evaluate(MATH_ASIDE_SCRIPT)
    try:
        yield coloured
    finally:
        page.evaluate(MATH_BACK_SCRIPT)


def axe_violations(
    page: Any,
    tags: list[str] = AXE_TAGS,
    selector: str | None = None,
    skip: tuple[str, ...] = (),
) -> list[dict]:
    """axe-core's violations on ``page`` for ``tags`` but the rules in ``skip``, in the
    elements ``selector`` matches (the whole page when None): ``[{id, help, nodes: [{target,
    html, summary}]}]`` (axe is injected from :data:`AXE_SCRIPT` once per page)."""
    if not AXE_SCRIPT.is_file():
        raise FileNotFoundError(
            f"{AXE_SCRIPT} is missing: run `npm ci --prefix tests/axe` (make test does)"
        )
    if not page.evaluate("() => typeof window.axe !== 'undefined'"):
        page.add_script_tag(path=str(AXE_SCRIPT))
    return page.evaluate(AXE_RUN_SCRIPT, [tags, selector, list(skip)])


def describe_violations(where: str, violations: list[dict], limit: int = 5) -> list[str]:
    """One line per violating element: ``"<where>: <rule> (<help>) at <selector>: <html>"``."""
    return [
        f"{where}: {violation['id']} ({violation['help']}) at {node['target']}: {node['html']}"
        for violation in violations
        for node in violation["nodes"][:limit]
    ]


FILE_NAME = re.compile(r"^[\w.-]+\.(png|jpe?g|gif|svg|webp)$|^[0-9a-f]{16,}", re.I)


def alt_problem(alt: str | None, src: str) -> str | None:
    """Why ``alt`` is no text alternative of the image at ``src`` (None when it is one):
    missing, empty, a file name or address, or too short to say what the image shows."""
    if alt is None:
        return "no alt"
    words = " ".join(alt.split())
    if not words:
        return "empty alt"
    name = src.rsplit("/", 1)[-1]
    if FILE_NAME.match(words) or words in (name, src):
        return f"alt is a file name ({words[:40]})"
    if len(words) < 30 or len(words.split()) < 5:
        return f"alt says too little ({words!r})"
    return None


def book_pages() -> list[str]:
    """The pages of the book (``_toc.yml``), as paths of the built site."""
    return [f"{name}.html" for name in toc_files(ROOT / "_toc.yml")]


def measure_accessibility(page, selector: str | None = None, closed_too: bool = True) -> dict:
    """axe-core's violations once the widgets are drawn, the formulas' renderings set aside
    (:data:`MATH_ASIDE_SCRIPT`): with ``closed_too``, in the collapsibles as loaded
    (closed); then, every collapsible opened, in the elements ``selector`` matches (the
    whole page when None); and the text alternative of every content image. One load serves
    both states: outside the collapsibles nothing changes when they open, and a closed
    collapsible's content is hidden, which axe skips, so the closed state adds only the
    collapsibles' own names, roles and states (summaries, titles, buttons); their colours,
    the same in both states, are checked with the page open (:data:`LAYOUT_RULES` would lay
    out the whole page a second time). The closed state is checked at the first width only
    (``closed_too``): the collapsibles' names and roles do not depend on the width."""
    page.evaluate(WIDGETS_SCRIPT)
    found = {}
    if closed_too:
        with formulas_set_aside(page):
            found["collapsibles closed"] = axe_violations(
                page, selector=COLLAPSIBLES, skip=LAYOUT_RULES
            )
    page.evaluate(OPEN_COLLAPSIBLES_SCRIPT)
    with formulas_set_aside(page) as coloured:
        found["collapsibles open"] = axe_violations(page, selector=selector)
    if coloured:
        nodes = [{"target": "mjx-container", "html": text} for text in coloured]
        found["collapsibles open"].append(
            {"id": "math-own-colour", "help": "a formula sets its own colour", "nodes": nodes}
        )
    return {"axe": found, "images": page.evaluate(CONTENT_IMAGES_SCRIPT)}


def axe_failures(site: str, records: dict[int, dict[str, dict]]) -> list[str]:
    """Every element that breaks an axe rule: site, page, width, state, rule, element."""
    lines = []
    for width, pages in records.items():
        for page_name, record in pages.items():
            for state, violations in record["axe"].items():
                where = f"{site} {page_name} at {width} px, {state}"
                lines += describe_violations(where, violations)
    return lines
