"""The Colab conversion puts the glued values in place of MyST-NB's glue roles."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from IPython.core.formatters import format_display_data
from myst_nb.ext.glue.roles import format_plain_text
from stablernn_tools import colab_conversion as colab

ROOT = Path(__file__).resolve().parents[1]


def glue_output(name: str, value: object) -> nbformat.NotebookNode:
    """The output ``myst_nb.glue(name, value, display=False)`` leaves in a notebook."""
    data, metadata = format_display_data(value)
    prefix = "application/papermill.record/"
    metadata["scrapbook"] = {"name": name, "mime_prefix": prefix}
    return nbformat.v4.new_output(
        "display_data", data={prefix + k: v for k, v in data.items()}, metadata=metadata
    )


def executed_notebook() -> nbformat.NotebookNode:
    code = nbformat.v4.new_code_cell("glue(...)")
    code.outputs = [
        glue_output("gap", 27.41234),
        glue_output("verdict", "not supported"),
        glue_output("seeds", 3),
        glue_output("small", 3.3306690738754696e-16),
    ]
    text = (
        "The gap is {glue:text}`gap:.1f`% over {glue:text}`seeds` seeds, read as "
        "**{glue:text}`verdict`**; rounding leaves {glue:text}`small:.0e`."
    )
    return nbformat.v4.new_notebook(cells=[code, nbformat.v4.new_markdown_cell(text)])


def convert(notebook: nbformat.NotebookNode, **options) -> str:
    config = colab.read_config(ROOT)
    plain = colab.colab_notebook(
        notebook, edition="student", index=colab.BookIndex(), macros=colab.book_macros(config),
        bibliography=colab.Bibliography(ROOT / "references.bib"), **options,
    )  # fmt: skip
    return "\n".join(c.source for c in plain.cells if c.cell_type == "markdown")


def test_glued_values_replace_the_roles_as_the_site_formats_them():
    text = convert(executed_notebook())
    expected = "The gap is 27.4% over 3 seeds, read as **not supported**; rounding leaves 3e-16."
    assert expected in text
    assert "{glue" not in text


@pytest.mark.parametrize(
    ("value", "spec"), [(27.41234, ".1f"), (3, ""), ("'not supported'", "s"), (1e-16, ".0e")]
)
def test_formatting_agrees_with_myst_nb(value, spec):
    """The same text as MyST-NB's own ``format_plain_text`` (an independent implementation)."""
    text = value if isinstance(value, str) else repr(value)
    assert colab.plain_text_value(text, spec) == format_plain_text(text, spec)


def test_a_missing_key_is_an_error_and_a_never_run_notebook_says_so():
    notebook = executed_notebook()
    notebook.cells[1].source += " {glue:text}`absent`"
    with pytest.raises(KeyError, match="absent"):
        convert(notebook)
    never_run = executed_notebook()
    never_run.cells[0].outputs = []
    assert "[gap: computed when the notebook runs]%" in convert(never_run)
    # the values of another (executed) copy are used when given
    assert "27.4%" in convert(never_run, glued=colab.glued_values(executed_notebook()))


def test_the_values_a_build_keeps_beside_the_executed_notebook_are_read(tmp_path):
    """MyST-NB keeps a build's glued outputs in ``<page>.glue.json`` and drops them from the
    executed notebook when the gluing cell is removed from the page (``remove-cell``)."""
    import json

    executed = executed_notebook()
    outputs = {o.metadata["scrapbook"]["name"]: o for o in executed.cells[0].outputs}
    executed.cells[0].outputs = []  # as jupyter_execute/ holds a removed cell
    nbformat.write(executed, tmp_path / "page.ipynb")
    assert colab.executed_glue(tmp_path / "page.ipynb") == {}
    (tmp_path / "page.glue.json").write_text(json.dumps(outputs))
    glued = colab.executed_glue(tmp_path / "page.ipynb")
    assert glued == colab.glued_values(executed_notebook())
    assert "27.4%" in convert(executed, glued=glued)
