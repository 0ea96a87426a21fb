// The course's accessibility script (added to every page by stablernn_tools.sphinx_extension): what
// the theme and the widget manager leave unnamed gets a name, what moves with the mouse moves
// with the keyboard too (WCAG 2.1 AA; tests/test_browser.py runs axe-core after it).
(function () {
  "use strict";

  function text(node) {
    return node ? (node.textContent || "").replace(/\s+/g, " ").trim() : "";
  }

  // An attribute written only when its value changes: the observer below watches attributes,
  // and every write, even of the same value, would call it again (a loop that never idles).
  function set(node, name, value) {
    if (node.getAttribute(name) !== String(value)) node.setAttribute(name, value);
  }

  // A collapsible's <summary> holding only an icon (the sidebar's "show the sections" arrow):
  // named after the link of its entry.
  function nameSummaries(root) {
    root.querySelectorAll("summary").forEach(function (summary) {
      if (text(summary) || summary.getAttribute("aria-label")) return;
      var entry = summary.closest("li");
      var link = entry ? entry.querySelector(":scope > a") : null;
      set(summary, "aria-label", link ? "Sections of " + text(link) : "Show or hide");
    });
  }

  // A button, link or summary whose label differs from its visible text (the theme's search
  // button "Search Ctrl+K" labelled "Search", the download entries ".ipynb" labelled
  // "Download source file", a hidden cell's "Show code cell source" labelled "Toggle hidden
  // content"): its name becomes what the reader sees; the label stays as its title.
  function matchVisibleText(root) {
    root.querySelectorAll("button[aria-label], a[aria-label], summary[aria-label]")
      .forEach(function (node) {
        if (node.closest(".jupyter-widgets")) return;
        var seen = text(node), label = node.getAttribute("aria-label");
        if (seen && label.toLowerCase().indexOf(seen.toLowerCase()) === -1) {
          if (!node.getAttribute("title")) set(node, "title", label);
          node.removeAttribute("aria-label");
        }
      });
  }

  // The bibliography's entries carry DPUB-ARIA's deprecated doc-biblioentry role inside a
  // role="list" container: plain list items.
  function bibliographyRoles(root) {
    root.querySelectorAll('[role="doc-biblioentry"]').forEach(function (entry) {
      set(entry, "role", "listitem");
    });
  }

  // Widgets (rendered by the widget manager after the page loads).
  function sliderName(widget) {
    return text(widget.querySelector(".widget-label")) || "slider";
  }

  function nameWidgets(root) {
    root.querySelectorAll(".widget-slider, .widget-hslider")
      .forEach(function (widget) {
        var name = sliderName(widget), readout = widget.querySelector(".widget-readout");
        widget.querySelectorAll('.noUi-handle, [role="slider"]').forEach(function (handle) {
          set(handle, "aria-label", name);
          if (readout && text(readout)) set(handle, "aria-valuetext", text(readout));
        });
        // The widget manager makes the readout beside the handle editable: a Tab stop with no
        // name or role, where a typed value changed the readout's text (and so the value read
        // out) but not the slider or its figure. It shows the value; the handle carries it.
        if (readout) {
          set(readout, "contenteditable", "false");
          set(readout, "aria-hidden", "true");
        }
      });
    root.querySelectorAll("div.widget-toggle-buttons").forEach(function (widget) {
      var buttons = widget.querySelectorAll("button");
      if (!buttons.length) return;
      var group = buttons[0].parentElement;
      set(group, "role", "group");
      set(group, "aria-label", text(widget.querySelector(".widget-label")) || "options");
      buttons.forEach(function (button) {
        set(button, "aria-pressed", button.classList.contains("mod-active"));
      });
    });
  }

  // Left/Right (and Up/Down) move the choice of a group of toggle buttons, as in a radio group.
  document.addEventListener("keydown", function (event) {
    var button = event.target;
    if (!button || button.tagName !== "BUTTON" || !button.closest(".widget-toggle-buttons")) return;
    var step = {ArrowRight: 1, ArrowDown: 1, ArrowLeft: -1, ArrowUp: -1}[event.key];
    if (!step) return;
    var buttons = Array.prototype.slice.call(button.parentElement.querySelectorAll("button"));
    var next = buttons[(buttons.indexOf(button) + step + buttons.length) % buttons.length];
    event.preventDefault();
    next.focus();
    next.click();
  });

  // A display equation that scrolls sideways (a phone) can be reached and scrolled with the
  // keyboard; one that fits is no tab stop.
  function focusableEquations() {
    var boxes = Array.prototype.slice.call(
      document.querySelectorAll('mjx-container[display="true"]'));
    // every width read before any attribute is written: one layout, not one per equation
    var wide = boxes.map(function (box) { return box.scrollWidth > box.clientWidth + 1; });
    boxes.forEach(function (box, i) {
      if (wide[i]) {
        set(box, "tabindex", "0");
      } else if (box.getAttribute("tabindex") === "0") {
        box.removeAttribute("tabindex");
      }
    });
  }
  var measuring = null;
  function focusableEquationsSoon() {  // once for many events in a row
    if (measuring !== null) return;
    measuring = setTimeout(function () {
      measuring = null;
      focusableEquations();
    }, 0);
  }

  function fixAll() {
    nameSummaries(document);
    matchVisibleText(document);
    bibliographyRoles(document);
    nameWidgets(document);
  }

  var pending = false;
  var observer = new MutationObserver(function () {
    if (pending) return;
    pending = true;
    setTimeout(function () {
      pending = false;
      fixAll();
    }, 0);
  });

  function start() {
    fixAll();
    observer.observe(document.body, {
      childList: true, subtree: true, attributes: true,
      attributeFilter: ["class", "aria-label", "title", "contenteditable"],
      characterData: true,
    });
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();

  // after MathJax's first typeset and book/course.js's scaling (registered before this one)
  window.addEventListener("load", function () {
    var mathjax = window.MathJax && window.MathJax.startup;
    Promise.resolve(mathjax && mathjax.promise).then(focusableEquations);
  });
  // again when the room changes: the window is resized, a collapsible opens (a <details>, or
  // an admonition by its title), so that an equation shown only then is measured too
  window.addEventListener("resize", focusableEquationsSoon);
  document.addEventListener("toggle", focusableEquationsSoon, true);
  document.addEventListener("click", function (event) {
    if (event.target.closest && event.target.closest(".admonition-title")) {
      focusableEquationsSoon();
    }
  });
})();
