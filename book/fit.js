// Every table fits its text column (book/fit.css). A table wider than its column is set
// compact (smaller type, narrower cells); one still wider is stacked: a block per row, each
// cell under the header of its column. A figure is never shown below MIN_SCALE of its size
// (its smallest text is 9 pt, 12 px, at full size: 9 px at MIN_SCALE); on a phone one that
// would be scrolls sideways in its box instead. Measured again after MathJax typesets, on
// resize, and when a folded section (a <details> element) opens.
(function () {
  "use strict";
  var MIN_SCALE = 0.75;
  function container(table) {
    return table.closest(".pst-scrollable-table-container, .table-wrapper") || table.parentElement;
  }
  function fits(table) {
    return table.scrollWidth <= container(table).clientWidth + 1;
  }
  function label(table) {
    var heads = Array.prototype.map.call(table.querySelectorAll("thead th"), function (th) {
      return th.textContent.trim();
    });
    table.querySelectorAll("tbody tr").forEach(function (row) {
      Array.prototype.forEach.call(row.children, function (cell, i) {
        if (heads[i]) cell.setAttribute("data-label", heads[i]);
        cell.classList.toggle("fit-empty", !cell.textContent.trim());
      });
    });
  }
  function fit() {
    document.querySelectorAll("main table").forEach(function (table) {
      table.classList.remove("fit-compact", "fit-stacked");
      if (container(table).clientWidth === 0 || fits(table)) return;  // folded, or it fits
      table.classList.add("fit-compact");
      if (fits(table)) return;
      label(table);
      table.classList.add("fit-stacked");
    });
  }
  function fitFigures() {
    document.querySelectorAll("main img").forEach(function (img) {
      if (img.closest(".jupyter-widgets")) return;  // the widgets' frames keep their layout
      img.style.minWidth = "";
      var box = img.closest("figure, div") || img.parentElement;
      var least = Math.round(MIN_SCALE * img.naturalWidth);
      if (img.naturalWidth > 0 && box.clientWidth > 0 && least > box.clientWidth) {
        img.style.minWidth = least + "px";
        box.style.overflowX = "auto";
        box.style.maxWidth = "100%";
        box.tabIndex = 0;  // a region that scrolls is reached and scrolled by keyboard too
        box.dataset.fitScrolls = "1";
      } else if (box.dataset.fitScrolls) {
        box.removeAttribute("tabindex");
        delete box.dataset.fitScrolls;
      }
    });
  }
  function whenTypeset() {
    fitFigures();
    if (window.MathJax && MathJax.startup && MathJax.startup.promise) {
      MathJax.startup.promise.then(fit);
    } else {
      fit();
    }
  }
  window.addEventListener("load", whenTypeset);
  window.addEventListener("resize", function () { fitFigures(); fit(); });
  document.addEventListener("toggle", function () { fitFigures(); fit(); }, true);
})();
