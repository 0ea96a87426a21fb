"""Shared by the browser tests: headless Chromium, and many pages visited side by side.

A page spends most of its visit inside Chromium (parsing MathJax, typesetting, layout)
while Python waits. :func:`visit_pages` keeps a few tabs busy at once, each in its own
browser context (so in its own renderer process): it starts the next navigation of a tab
as soon as that tab's page is measured, and measures the tabs in turn.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

CHROMIUM = Path("/usr/bin/chromium")
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
    import pytest

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

    def __init__(self, browser: Any, allowed: Callable[[str], bool]) -> None:
        self.context = browser.new_context()
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
) -> dict[Any, tuple[Any, list[str]]]:
    """``{job: (measure(job, page), problems)}`` for each ``(job, url, width)``.

    Every page is loaded to its load event and typeset (:data:`TYPESET_SCRIPT`), then
    ``measure`` runs on it; ``problems`` are the requests refused by ``allowed``, the
    JavaScript errors and the HTTP errors of that page's visit."""
    queue = list(jobs)
    open_tabs = [Tab(browser, allowed) for _ in range(min(tabs, len(queue)))]
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
