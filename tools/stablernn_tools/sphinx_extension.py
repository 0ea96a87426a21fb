"""The book's Sphinx extension: MathJax shim, course styles, Colab buttons and notebooks,
the paper's numbers and the notebooks' run times (``_config.yml``'s ``extra_extensions``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import nbformat

from stablernn_tools import citation_style, notebook_times, paper_claims_check
from stablernn_tools.notebook_checks import FULL_SCALE_TAG

# The widget manager (@jupyter-widgets/html-manager 1.0.6) typesets widget labels with
# the MathJax 2 call ``MathJax.Hub.Queue(["Typeset", MathJax.Hub, element])``; the
# site runs MathJax 3, so that call throws. This shim forwards it to MathJax 3. It is
# re-installed at DOMContentLoaded and load because MathJax 3 replaces its global.
MATHJAX2_SHIM = """(function () {
  function queue() {
    var elements = [];
    for (var i = 0; i < arguments.length; i++) {
      var job = arguments[i];
      if (Array.isArray(job) && job[0] === "Typeset" && job[2]) { elements.push(job[2]); }
    }
    if (elements.length && window.MathJax && window.MathJax.typesetPromise) {
      window.MathJax.typesetPromise(elements);
    }
  }
  function install() {
    if (window.MathJax && !window.MathJax.Hub) { window.MathJax.Hub = {Queue: queue}; }
  }
  install();
  document.addEventListener("DOMContentLoaded", install);
  window.addEventListener("load", install);
})();"""


def _deduplicate_scripts(app, pagename, templatename, context, doctree) -> None:
    """Drop repeated script tags (Jupyter Book 1.x adds sphinx-thebe's config twice)."""
    scripts = context.get("script_files")
    if not scripts:
        return
    seen, unique = set(), []
    for script in scripts:
        attributes = tuple(sorted(getattr(script, "attributes", {}).items()))
        key = (str(getattr(script, "filename", script) or ""), attributes)  # None == ""
        if key not in seen:
            seen.add(key)
            unique.append(script)
    scripts[:] = unique


def _colab_launch_target(app, config) -> None:
    """Point the Colab buttons at the published ``_sources/`` notebooks of this edition.

    With ``colab_notebooks_branch`` set (e.g. ``gh-pages``, where the site is published),
    a launch button opens ``<repository>/blob/<branch>/_sources/<page>.ipynb``: the plain
    notebook :func:`_write_colab_sources` wrote there, not the MyST source.  The instructor
    edition (solutions shown) is published only to a private fork: its buttons use
    ``instructor_repository_url``, and with none set the instructor site has no Colab
    button at all, so that no link leads to a public copy of the solutions.
    """
    branch = config.colab_notebooks_branch
    options = dict(config.html_theme_options or {})
    if not getattr(config, "hide_solutions", False):  # the instructor edition
        private = config.instructor_repository_url
        if not private:
            launch = dict(options.get("launch_buttons") or {})
            launch["colab_url"] = ""
            options["launch_buttons"] = launch
            config.html_theme_options = options
            return
        options["repository_url"] = private
    if branch:
        options.update(repository_branch=branch, path_to_docs="_sources")
    config.html_theme_options = options


def _one_search_field(app, config) -> None:
    """Keep the search field of the sidebar only.

    pydata-sphinx-theme 0.17.1 fills an unset ``navbar_persistent`` with its search
    button, which sphinx-book-theme 1.3.0 means to leave empty: every page then had a
    second search field in a header bar of its own. Setting it empty removes that bar.
    """
    options = dict(config.html_theme_options or {})
    options.setdefault("navbar_persistent", [])
    config.html_theme_options = options


def _write_colab_sources(app, exception) -> None:
    """Replace the site's ``_sources/*.ipynb`` (the download button) by the Colab notebooks.

    The edition follows sphinx-exercise's ``hide_solutions``: set (student edition), the
    notebooks carry no solution; unset (instructor edition), solutions are collapsed.
    Figures are numbered as Sphinx numbered them on this site (a figure cell that drew
    nothing has no number), and the setup cell installs the commit the book was built from.
    """
    if exception is not None or app.builder.format != "html":
        return
    from stablernn_tools import colab_conversion as colab

    root, sources = Path(app.srcdir), Path(app.outdir) / "_sources"
    edition = "student" if getattr(app.config, "hide_solutions", False) else "instructor"
    config = colab.read_config(root)
    docnames = colab.notebook_docnames(root)
    # the figures Sphinx numbered on this site, so that the notebooks number the same ones
    numbered = getattr(app.env, "toc_fignumbers", {})
    drawn = {doc: dict.fromkeys(numbered.get(doc, {}).get("figure", {}), 1) for doc in docnames}
    index = colab.book_index(root, drawn)
    bibliography = colab.Bibliography(root / config["bibtex_bibfiles"][0])
    macros = colab.book_macros(config)
    executed = Path(app.outdir).parent / "jupyter_execute"  # the run the pages show
    for docname in docnames:
        target = sources / f"{docname}.ipynb"
        if not target.parent.is_dir():
            continue
        notebook = nbformat.read(root / f"{docname}.ipynb", as_version=4)
        run = executed / f"{docname}.ipynb"
        plain = colab.colab_notebook(
            notebook,
            edition=edition,
            index=index,
            bibliography=bibliography,
            macros=macros,
            site_url=app.config.html_baseurl or None,
            root=root,
            glued=colab.executed_glue(run) if run.is_file() else None,
        )
        target.write_text(nbformat.writes(plain) + "\n", encoding="utf-8")


def _drop_empty_full_scale_cells(app, doctree) -> None:
    """Student site: remove every code cell tagged ``full-scale`` that has no output.

    In the default (smoke) mode such a cell does nothing until its full-scale results
    exist; students would see only code that waits for a run they cannot make. Once the
    results are committed, the cell draws and stays.
    """
    from docutils import nodes

    if not getattr(app.config, "hide_solutions", False):
        return
    tag = f"tag_{FULL_SCALE_TAG}"
    for cell in list(doctree.findall(nodes.container)):
        if cell.get("nb_element") != "cell_code" or tag not in cell["classes"]:
            continue
        outputs = [c for c in cell.children if c.get("nb_element") == "cell_code_output"]
        if not outputs:
            cell.parent.remove(cell)


def setup(app) -> dict[str, Any]:
    """Sphinx extension (``extra_extensions: [stablernn_tools.sphinx_extension]``)."""
    app.add_js_file(None, body=MATHJAX2_SHIM, priority=100)
    citation_style.register()  # bibtex_reference_style author_year_round, labels alike
    app.add_css_file("course.css")  # book/course.css: outputs wrap, wide tables scroll
    app.add_js_file("course.js")  # book/course.js: wide display equations scaled to fit
    # book/accessibility.css and .js: names, contrast, focus and keyboard use (WCAG 2.1 AA)
    app.add_css_file("accessibility.css")
    app.add_js_file("accessibility.js")
    app.add_config_value("colab_notebooks_branch", "", "html")
    app.add_config_value("instructor_repository_url", "", "html")
    app.connect("config-inited", _colab_launch_target)
    app.connect("config-inited", _one_search_field)
    app.connect("build-finished", _write_colab_sources)
    app.connect("doctree-read", _drop_empty_full_scale_cells)
    # early: a later handler may return a template name, which ends the event
    app.connect("html-page-context", _deduplicate_scripts, priority=100)
    paper_claims_check.setup_sphinx(app)  # {paper}`KEY` and {paper-claims}: the paper's numbers
    notebook_times.setup_sphinx(app)  # {notebook-times}: each notebook's smoke-mode run time
    return {"parallel_read_safe": True, "parallel_write_safe": True}
