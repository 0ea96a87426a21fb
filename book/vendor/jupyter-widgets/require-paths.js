// Load between require.js and embed-amd.js. The widget manager resolves its font
// files relative to the URL of its AMD module; point that module at this folder
// (from any page depth, using Sphinx's data-content_root) so the fonts load locally.
(function () {
  var root = document.documentElement.getAttribute("data-content_root") || "";
  if (window.require && window.require.config) {
    window.require.config({
      paths: {"@jupyter-widgets/html-manager/dist": root + "_static/vendor/jupyter-widgets"},
    });
  }
})();
