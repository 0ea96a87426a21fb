// The course's layout script (added to every page by stablernn_tools.sphinx_extension): a display
// equation wider than its column is scaled down to fit, to 75 % of its size at most
// (smaller is illegible); one still wider scrolls sideways in its box (book/course.css).
(function () {
  var SMALLEST = 0.75;
  function fit() {
    var boxes = document.querySelectorAll('mjx-container[display="true"]');
    for (var i = 0; i < boxes.length; i++) {
      var box = boxes[i];
      box.style.fontSize = "";
      var room = box.clientWidth, math = box.firstElementChild;
      var width = math ? math.getBoundingClientRect().width : box.scrollWidth;
      if (room > 0 && width > room + 1) {
        box.style.fontSize = Math.max(SMALLEST, room / width) * 100 + "%";
      }
    }
  }
  function whenTypeset() {
    if (window.MathJax && MathJax.startup && MathJax.startup.promise) {
      MathJax.startup.promise.then(fit);
    } else {
      setTimeout(whenTypeset, 200);
    }
  }
  window.addEventListener("load", whenTypeset);
  window.addEventListener("resize", fit);
})();
