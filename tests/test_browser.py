"""Open the built student site in headless Chromium with no network.

Every request that does not go to the local server is aborted (and recorded), so
the checks prove that the site works offline: math is typeset by the vendored
MathJax, every image loads, and moving a slider of the widget plot swaps the
image shown, with no Python kernel. Every page is loaded once at 1400 px, measured, and
measured again with the window narrowed to 400 px (a phone; the book's scripts refit the
page on a resize), a few pages side by side; the page tests judge what those visits
measured, axe-core's accessibility rules (WCAG 2.1 A and AA) included: at each width over
the collapsibles closed, then over the page with every collapsible open. Screenshots go to
_build/screenshots/. The instructor site: tests/test_browser_instructor.py.
"""

import contextlib
import json

import pytest
from book_support import BUILD_DIR, HTML_DIR, build_book
from browser_support import (
    BROWSER_TEST,
    CLOSE_COLLAPSIBLES_SCRIPT,
    THEME_RESIZE_DELAY_MS,
    TYPESET_SCRIPT,
    WIDGETS_SCRIPT,
    WIDTHS,
    alt_problem,
    at_each_width,
    axe_failures,
    book_pages,
    by_width,
    measure_accessibility,
    serve,
    visit_pages,
)

CHAPTER_PAGE = "chapters/01_recurrent_models.html"
SCREENSHOTS = BUILD_DIR / "screenshots"

pytestmark = BROWSER_TEST


@pytest.fixture(scope="module")
def site_url():
    build_book()  # warnings elsewhere fail tests/test_book.py; this test needs Chapter 1 only
    assert (HTML_DIR / CHAPTER_PAGE).is_file(), f"the build wrote no {CHAPTER_PAGE}"
    with serve(HTML_DIR) as url:
        yield url


@pytest.fixture(scope="module")
def chapter_page(browser, site_url):
    """The Chapter 1 page, loaded once, typeset and its widgets drawn, with every non-local
    request blocked."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    blocked: list[str] = []
    errors: list[str] = []
    missing: list[str] = []

    def route(request_route):
        url = request_route.request.url
        if url.startswith(site_url) or url.startswith(("data:", "blob:")):
            request_route.continue_()
        else:
            blocked.append(url)
            request_route.abort()

    page.route("**/*", route)
    page.on("pageerror", lambda error: errors.append(str(error)))

    def response(answer):
        if answer.status >= 400:
            missing.append(f"{answer.status} {answer.url}")

    page.on("response", response)
    page.goto(site_url + CHAPTER_PAGE, wait_until="load")
    page.evaluate(TYPESET_SCRIPT)
    page.wait_for_selector(".jupyter-widgets img >> visible=true", timeout=60_000)
    page.evaluate(WIDGETS_SCRIPT)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "chapter01_top.png"))
    yield page, blocked, errors + [f"HTTP {line}" for line in missing]
    context.close()


# The src of every widget image that is currently displayed.
VISIBLE_FRAMES = """() => Array.from(document.querySelectorAll(".jupyter-widgets img"))
  .filter(i => i.offsetParent !== null && i.offsetWidth > 0).map(i => i.currentSrc || i.src)"""


def visible_widget_images(page) -> list[str]:
    """The src of every widget image that is currently displayed."""
    return page.evaluate(VISIBLE_FRAMES)


def new_frames(page, before: list[str], timeout_ms: int = 5000) -> list[str]:
    """The visible widget frames once they differ from ``before`` (after ``timeout_ms``,
    whatever is visible then: the caller's assertion says what did not change)."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    changed = f"before => JSON.stringify(({VISIBLE_FRAMES})()) !== JSON.stringify(before)"
    with contextlib.suppress(PlaywrightTimeout):
        page.wait_for_function(changed, arg=before, timeout=timeout_ms)
    return visible_widget_images(page)


def test_math_is_typeset_offline(chapter_page):
    page, blocked, errors = chapter_page
    assert page.locator("mjx-container").count() > 20
    # no formula is left as raw TeX in the text of the page
    text = page.inner_text("main")
    assert "\\phi_w" not in text and "$$" not in text
    assert not errors, f"JavaScript errors or missing files: {errors}"
    assert not blocked, f"the page tried to reach the network: {blocked}"


# The changes made to the page in one second, counted once the theme's delayed changes of
# the load are done (its tab stops, THEME_RESIZE_DELAY_MS after the last event).
IDLE_CHANGES_SCRIPT = f"""async () => {{
  await new Promise(resolve => setTimeout(resolve, {THEME_RESIZE_DELAY_MS} + 200));
  let changes = 0;
  const observer = new MutationObserver(records => {{ changes += records.length; }});
  observer.observe(document.documentElement,
                   {{childList: true, subtree: true, attributes: true, characterData: true}});
  await new Promise(resolve => setTimeout(resolve, 1000));
  observer.disconnect();
  return changes;
}}"""


def test_a_page_left_alone_changes_nothing(chapter_page):
    """Once typeset and its widgets drawn, a page is idle: no script keeps rewriting it, which
    would cost a reader's battery (book/accessibility.js watches the page and writes only
    what differs: a write of the same value would wake its observer again, and again)."""
    page, _, _ = chapter_page
    assert page.evaluate(IDLE_CHANGES_SCRIPT) == 0


def test_every_image_loads(chapter_page):
    page, _, _ = chapter_page
    page.evaluate("window.scrollTo(0, document.body.scrollHeight)")
    # every image that is displayed has finished loading (or failed)
    page.wait_for_function(
        """() => Array.from(document.images).filter(i => i.offsetParent !== null)
                   .every(i => i.complete)"""
    )
    sizes = page.eval_on_selector_all(
        "img", "images => images.map(i => [i.currentSrc || i.src, i.complete, i.naturalWidth])"
    )
    assert sizes, "the page has no images"
    broken = [src for src, complete, width in sizes if not complete or width == 0]
    # hidden frames of the widget stack may not be decoded yet; visible ones must be
    visible = set(visible_widget_images(page))
    broken = [src for src in broken if not src.startswith("blob:") or src in visible]
    assert not broken, f"images that did not load: {broken}"


def test_moving_the_slider_changes_the_plot(chapter_page):
    page, _, errors = chapter_page
    widget = page.locator(".jupyter-widgets.widget-vbox").first
    widget.scroll_into_view_if_needed()
    widget.screenshot(path=str(SCREENSHOTS / "chapter01_widget_before.png"))
    before_src = visible_widget_images(page)
    before_pixels = widget.screenshot()
    assert len(before_src) == 1, f"expected one visible frame, got {before_src}"

    handles = page.locator(".jupyter-widgets .noUi-handle, .jupyter-widgets .ui-slider-handle")
    assert handles.count() >= 2, "the widget should have two sliders (lam and k)"
    handles.nth(1).focus()
    for _ in range(2):
        page.keyboard.press("ArrowRight")
    after_src = new_frames(page, before_src)
    after_pixels = widget.screenshot(path=str(SCREENSHOTS / "chapter01_widget_after.png"))
    assert len(after_src) == 1 and after_src != before_src, "the visible frame did not change"
    assert after_pixels != before_pixels

    handles.nth(0).focus()
    page.keyboard.press("End")
    last_src = new_frames(page, after_src)
    widget.screenshot(path=str(SCREENSHOTS / "chapter01_widget_lam_max.png"))
    assert last_src not in (before_src, after_src)
    assert not errors, f"JavaScript errors: {errors}"


RAW_TEX_SCRIPT = """() => {
  const main = document.querySelector("main").cloneNode(true);
  main.querySelectorAll("pre, code, .cell_input, .cell_output, mjx-container, script")
      .forEach(node => node.remove());
  // a TeX command outside math (e.g. a formula broken by Markdown) or a $...$ pair
  return (main.textContent.match(/\\\\[A-Za-z]{2,}|\\$[^$]{1,400}\\$/g) || []);
}"""

# A paragraph holding a Markdown table's delimiter row ("| --- | ---: |", which
# Sphinx's smart quotes turn into "| — | —: |"): a table, written by the text or
# printed by a cell, that was not rendered.
RAW_TABLE_SCRIPT = """() => Array.from(document.querySelectorAll("main p"))
  .map(node => node.textContent)
  .filter(text => /\\|\\s*:?(-{3,}|[\u2013\u2014]-*):?\\s*\\|/.test(text))
  .map(text => text.slice(0, 80))"""

# Display equations wider than the column that holds them (MathJax keeps each formula's TeX),
# and whether the reader can still scroll to the rest of the formula.
WIDE_EQUATIONS_SCRIPT = """() => {
  const wide = [];
  if (!window.MathJax || !MathJax.startup || !MathJax.startup.document) return wide;
  for (const item of MathJax.startup.document.math) {
    if (!item.display || !item.typesetRoot) continue;
    const box = item.typesetRoot, math = box.querySelector("mjx-math");
    const width = math.getBoundingClientRect().width, room = box.parentElement.clientWidth;
    if (width > room + 1) {
      const scrolls = ["auto", "scroll"].includes(getComputedStyle(box).overflowX);
      wide.push({width: Math.round(width), room, scrolls, focusable: box.tabIndex >= 0,
                 tex: item.math.trim().slice(0, 100)});
    }
  }
  return wide;
}"""

# Tables, printed outputs and code wider than the column: recorded, not failed on.
OVERFLOW_SCRIPT = """() => {
  const over = selector => Array.from(document.querySelectorAll(selector))
    .filter(node => node.scrollWidth > node.clientWidth + 1).length;
  return {tables: over("main table, main .table-wrapper"), outputs: over(".cell_output pre"),
          code: over(".cell_input pre"),
          code_cells: document.querySelectorAll(".cell_input pre").length};
}"""

# Every element of the article that reaches past its text column, unless an ancestor inside
# the article scrolls or clips it (a table's scroll container, a display equation's box):
# those boxes are measured themselves, so they must fit.
WIDER_THAN_COLUMN_SCRIPT = """() => {
  const article = document.querySelector("article.bd-article") || document.querySelector("main");
  const style = getComputedStyle(article), box = article.getBoundingClientRect();
  const left = box.left + parseFloat(style.paddingLeft) - 1;
  const right = box.right - parseFloat(style.paddingRight) + 1;
  const held = node => {
    for (let up = node.parentElement; up && up !== article; up = up.parentElement) {
      if (["auto", "scroll", "hidden", "clip"].includes(getComputedStyle(up).overflowX)) {
        return true;
      }
    }
    return false;
  };
  const wide = [];
  for (const node of article.querySelectorAll("*")) {
    const rect = node.getBoundingClientRect(), look = getComputedStyle(node);
    if (rect.width === 0 || rect.height === 0 || look.position === "fixed" ||
        look.visibility === "hidden") {  // e.g. a heading's "#" link until hovered
      continue;
    }
    if ((rect.right > right || rect.left < left) && !held(node)) {
      const name = typeof node.className === "string" ? node.className : "";
      wide.push(`${node.tagName.toLowerCase()}.${name.split(" ")[0]} ` +
                `${Math.round(rect.width)} px: ${(node.textContent || "").trim().slice(0, 50)}`);
    }
  }
  return {room: Math.round(right - left), page: document.documentElement.scrollWidth, wide};
}"""

# --- Tables and figures fit (book/fit.css, book/fit.js) ---------------------------------
# Every table shown (not folded): its width against its container and the text column, and,
# for a table with a column of the paper's numbers or of verdicts, how many of those cells
# lie outside the column or are hidden.
TABLE_FIT_SCRIPT = """() => {
  const article = document.querySelector("article.bd-article") || document.querySelector("main");
  const style = getComputedStyle(article), box = article.getBoundingClientRect();
  const left = box.left + parseFloat(style.paddingLeft) - 1;
  const right = box.right - parseFloat(style.paddingRight) + 1;
  const tables = [];
  for (const table of article.querySelectorAll("table")) {
    if (table.getBoundingClientRect().width === 0) continue;  // in a folded section
    const heads = Array.from(table.querySelectorAll("thead th")).map(th => th.textContent.trim());
    const key = heads.map((h, i) => /paper|verdict|reproduced/i.test(h) ? i : -1)
                     .filter(i => i >= 0);
    let off = 0;
    for (const row of table.querySelectorAll("tbody tr")) {
      for (const i of key) {
        const cell = row.children[i];
        if (!cell || !cell.textContent.trim()) continue;
        const r = cell.getBoundingClientRect();
        if (r.width === 0 || r.left < left || r.right > right) off++;
      }
    }
    const holder = table.parentElement;
    tables.push({head: heads.slice(0, 3).join(" | ").slice(0, 70),
                 width: table.scrollWidth, holder: holder.clientWidth,
                 room: Math.round(right - left - 2), key_columns: key.length, key_cells_off: off,
                 layout: table.className.match(/fit-[a-z]+/)?.[0] || "plain"});
  }
  return tables;
}"""

# The visible text of the article: its words, and its lines that are shell commands.
VISIBLE_TEXT_SCRIPT = """() => {
  const article = document.querySelector("article.bd-article") || document.querySelector("main");
  const text = article.innerText;
  return {words: text.split(/\\s+/).filter(w => /[A-Za-z0-9]/.test(w)).length,
          commands: text.split("\\n").filter(line => line.trim().startsWith("python -m")).length};
}"""

# Every figure shown outside a widget: its displayed width over its natural width.
FIGURE_SCALE_SCRIPT = """() => Array.from(document.querySelectorAll("main img"))
  .filter(i => !i.closest(".jupyter-widgets") && i.naturalWidth > 0
               && i.getBoundingClientRect().width > 0)
  .map(i => ({src: (i.currentSrc || i.src).split("/").pop(),
              scale: i.getBoundingClientRect().width / i.naturalWidth}))"""


def measure_page(page_name: str, page) -> dict[int, dict]:
    """``{width: record}``: everything the page tests judge, measured on the typeset page at
    each of :data:`WIDTHS` with its collapsibles closed (then opened for axe, and closed again
    before the window is narrowed), and a screenshot at each width."""
    records = {}
    for width in at_each_width(page, before_narrowing=CLOSE_COLLAPSIBLES_SCRIPT):
        record = {
            "raw_tex": page.evaluate(RAW_TEX_SCRIPT),
            "raw_tables": page.evaluate(RAW_TABLE_SCRIPT),
            "wide_equations": page.evaluate(WIDE_EQUATIONS_SCRIPT),
            "overflow": page.evaluate(OVERFLOW_SCRIPT),
        }
        if width < 1000:
            record["wider_than_column"] = page.evaluate(WIDER_THAN_COLUMN_SCRIPT)
            record["figure_scales"] = page.evaluate(FIGURE_SCALE_SCRIPT)
        else:
            record["visible_text"] = page.evaluate(VISIBLE_TEXT_SCRIPT)
        record["table_fit"] = page.evaluate(TABLE_FIT_SCRIPT)
        shot = SCREENSHOTS / str(width) / page_name.replace("/", "_").replace(".html", ".png")
        page.screenshot(path=str(shot))
        records[width] = {**record, **measure_accessibility(page, closed_too=width == WIDTHS[0])}
    return records


@pytest.fixture(scope="module")
def visits(browser, site_url) -> dict[int, dict[str, dict]]:
    """``{width: {page: record}}``: every built page of the book loaded once, with no network,
    and measured at each width; a record holds the measurements and the page's ``problems``.
    Screenshots of every page at both widths go to _build/screenshots/<width>/, the overflow
    counts to _build/page_widths_<width>.json."""
    for width in WIDTHS:
        (SCREENSHOTS / str(width)).mkdir(parents=True, exist_ok=True)
    built = [name for name in book_pages() if (HTML_DIR / name).is_file()]
    jobs = [(name, site_url + name, WIDTHS[0]) for name in built]
    results = visit_pages(
        browser, jobs, measure_page, lambda url: url.startswith((site_url, "data:", "blob:"))
    )
    records = by_width(results)
    for width, pages in records.items():
        counts = {
            name: {"wide_equations": len(record["wide_equations"]), **record["overflow"]}
            for name, record in pages.items()
        }
        (BUILD_DIR / f"page_widths_{width}.json").write_text(json.dumps(counts, indent=1))
        tables = {name: record["table_fit"] for name, record in pages.items()}
        (BUILD_DIR / f"table_widths_{width}.json").write_text(json.dumps(tables, indent=1))
    words = {name: record["visible_text"] for name, record in records[WIDTHS[0]].items()}
    (BUILD_DIR / "page_words.json").write_text(json.dumps(words, indent=1))
    return records


@pytest.mark.parametrize("page_name", book_pages())
def test_every_page_renders_offline(visits, page_name):
    """No JavaScript error, no network or missing file, no raw TeX, no unrendered table,
    at either width."""
    if page_name not in visits[WIDTHS[0]]:
        pytest.fail(f"the build wrote no {page_name}")
    for width in WIDTHS:
        record = visits[width][page_name]
        raw, raw_tables = record["raw_tex"], record["raw_tables"]
        assert not raw, f"{page_name} at {width} px: math left as raw TeX: {raw[:5]}"
        assert not raw_tables, f"{page_name} at {width} px: table not rendered: {raw_tables}"
        assert not record["problems"], f"{page_name} at {width} px: {record['problems']}"


@pytest.mark.parametrize("width", WIDTHS)
def test_display_equations_fit_the_column(visits, width):
    """At 1400 px every display equation fits its column; at 400 px (a phone) a wider one
    scrolls sideways but is never cut off, and the keyboard reaches it (a tab stop) to
    scroll it."""
    failures = {}
    for page_name, record in visits[width].items():
        bad = [
            w
            for w in record["wide_equations"]
            if width >= 1000 or not w["scrolls"] or not w["focusable"]
        ]
        if bad:
            failures[page_name] = bad
    assert not failures, f"equations wider than the column at {width} px: {failures}"


def test_nothing_is_wider_than_the_column_on_a_phone(visits):
    """At 400 px no element of any page is wider than the text column: tables scroll inside
    their container (first column fixed), equations are scaled down or scroll in their box,
    inline code and long words wrap, and the page itself never scrolls sideways."""
    width = 400
    failures = {}
    for page_name, record in visits[width].items():
        found = record["wider_than_column"]
        if found["wide"] or found["page"] > width:
            failures[page_name] = {**found, "wide": found["wide"][:8]}
    assert len(visits[width]) >= 20
    assert not failures, json.dumps(failures, indent=1)


# --- Tables and figures fit ------------------------------------------------------------


@pytest.mark.parametrize("width", WIDTHS)
def test_no_table_is_wider_than_the_text_column(visits, width):
    """At 1400 and at 400 px every table shown fits its container and the text column
    (book/fit.js sets a wide table compact, and stacks one that is still too wide)."""
    wide = {
        name: [
            t
            for t in record["table_fit"]
            if max(t["width"] - t["holder"], t["width"] - t["room"]) > 1
        ]
        for name, record in visits[width].items()
    }
    wide = {name: tables for name, tables in wide.items() if tables}
    assert sum(len(record["table_fit"]) for record in visits[width].values()) >= 40
    assert not wide, json.dumps(wide, indent=1)


def test_the_results_tables_keep_the_papers_numbers_and_verdicts_on_a_phone(visits):
    """At 400 px every cell of a column of the paper's numbers or of verdicts is on screen,
    in the main results tables of Chapters 8 and 9 and everywhere else."""
    for page_name in (
        "chapters/08_wikitext2_experiments.html",
        "chapters/09_polyphonic_music.html",
    ):
        assert any(t["key_columns"] >= 2 for t in visits[400][page_name]["table_fit"]), page_name
    off = {
        name: [t for t in record["table_fit"] if t["key_cells_off"]]
        for name, record in visits[400].items()
    }
    off = {name: tables for name, tables in off.items() if tables}
    assert not off, json.dumps(off, indent=1)


def test_figure_text_stays_at_least_9_px_on_a_phone(visits):
    """A figure's smallest text is 9 pt, 12 px at its natural size (core/style.py): at 400 px
    no figure is shown below 3/4 of that size, so no text is below 9 px."""
    small = {
        name: [f for f in record["figure_scales"] if f["scale"] < 0.75 - 0.005]
        for name, record in visits[400].items()
    }
    small = {name: figures for name, figures in small.items() if figures}
    assert sum(len(record["figure_scales"]) for record in visits[400].values()) >= 20
    assert not small, json.dumps(small, indent=1)


def test_the_evidence_pages_read_as_appendices(visits):
    """The evidence pages stay appendix-length (visible words at 1400 px; folded sections are
    not visible), and no chapter shows a shell command outside a folded section."""
    words = {name: record["visible_text"] for name, record in visits[1400].items()}
    assert words["chapters/08b_wikitext2_evidence.html"]["words"] <= 3500
    assert words["chapters/09b_polyphonic_music_evidence.html"]["words"] <= 3000
    shown = {
        n: w["commands"] for n, w in words.items() if n.startswith("chapters/") and w["commands"]
    }
    assert not shown, shown


def test_no_accessibility_violations_on_the_student_site(visits):
    """axe-core (WCAG 2.1 A and AA rules) finds nothing on any page, at either width, with the
    widgets drawn, every collapsible closed and then open."""
    assert sum(len(pages) for pages in visits.values()) >= 40
    failures = axe_failures("student site", visits)
    assert not failures, "\n".join(failures[:60])


def test_every_content_image_has_a_text_alternative(visits):
    """Every image of every page's content (figures, widget frames) has an alt text that says
    what it shows: not missing, not empty, not a file name."""
    failures, seen = [], 0
    for page_name, record in visits[1400].items():
        for image in record["images"]:
            if image["decorative"]:
                continue
            seen += 1
            problem = alt_problem(image["alt"], image["src"])
            if problem:
                failures.append(f"{page_name}: {image['src'][:60]}: {problem}")
    assert seen >= 50, seen
    assert not failures, "\n".join(failures)


def test_math_is_read_to_screen_readers(chapter_page):
    """MathJax's assistive MathML is on: each typeset formula carries a MathML copy that screen
    readers read (hidden from sight), and the visual rendering is hidden from them."""
    page, _, _ = chapter_page
    counts = page.evaluate(
        """() => ({formulas: document.querySelectorAll("mjx-container").length,
                  mathml: document.querySelectorAll("mjx-container mjx-assistive-mml math").length,
                  hidden: document.querySelectorAll('mjx-container > mjx-math[aria-hidden="true"]')
                    .length})"""
    )
    assert counts["formulas"] > 20
    assert counts["mathml"] == counts["formulas"], counts
    assert counts["hidden"] == counts["formulas"], counts


# Each slider's readout: whether it can be typed into, has a tab index, is hidden from
# assistive technology (the handle's aria-valuetext carries the value).
READOUTS_SCRIPT = """() => Array.from(document.querySelectorAll(".widget-readout")).map(r => ({
  editable: r.isContentEditable, focusable: r.hasAttribute("tabindex"),
  hidden: r.getAttribute("aria-hidden") === "true"}))"""


def focused(page) -> dict:
    """What has the keyboard focus: its tag, classes, accessible name and focus ring."""
    return page.evaluate(
        """() => { const e = document.activeElement, look = getComputedStyle(e);
          return {tag: e.tagName.toLowerCase(), classes: String(e.className),
                  name: e.getAttribute("aria-label") || e.textContent.trim().slice(0, 40),
                  pressed: e.getAttribute("aria-pressed"),
                  ring: look.outlineStyle !== "none" && parseFloat(look.outlineWidth) >= 2}; }"""
    )


def tab_to(page, wanted, limit: int = 400) -> dict:
    """Press Tab until the focused element satisfies ``wanted``; fails after ``limit`` presses."""
    for _ in range(limit):
        page.keyboard.press("Tab")
        now = focused(page)
        if wanted(now):
            return now
    raise AssertionError(f"{limit} presses of Tab never reached the element")


@pytest.mark.parametrize(
    ("page_name", "kind"),
    [("chapters/01_recurrent_models.html", "slider"), ("chapters/04_stability.html", "toggle")],
)
def test_widgets_work_by_keyboard_alone(browser, site_url, page_name, kind):
    """From the top of the page, Tab reaches the widget (a slider handle, a toggle button), it
    has a name and a visible focus ring, and the arrow keys change the figure shown."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.goto(site_url + page_name, wait_until="load")
    page.wait_for_selector(".jupyter-widgets img >> visible=true", timeout=60_000)
    page.evaluate(WIDGETS_SCRIPT)
    if kind == "slider":
        now = tab_to(page, lambda f: "noUi-handle" in f["classes"])
        assert now["name"] == "contraction λ", now
    else:
        now = tab_to(page, lambda f: f["tag"] == "button" and f["pressed"] is not None)
        assert now["pressed"] == "true" and now["name"], now
    assert now["ring"], f"no visible focus ring on {now}"
    before = visible_widget_images(page)
    page.keyboard.press("ArrowRight")
    after = new_frames(page, before)
    assert before and len(after) == len(before), (before, after)  # one frame per widget
    assert after != before, "the figure did not change"
    if kind == "toggle":
        assert focused(page)["pressed"] == "true", "the focus did not follow the choice"
    shot = SCREENSHOTS / f"keyboard_{kind}.png"
    page.screenshot(path=str(shot))
    if kind == "slider":  # the readout shows the value and takes neither focus nor typing
        readouts = page.evaluate(READOUTS_SCRIPT)
        assert readouts and not any(r["editable"] or r["focusable"] for r in readouts), readouts
        assert all(r["hidden"] for r in readouts), readouts
        page.keyboard.press("Tab")
        assert "widget-readout" not in focused(page)["classes"], "Tab stopped at the readout"
    context.close()
