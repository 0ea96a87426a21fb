"""The library's ``glue`` leaves in a notebook exactly the outputs MyST-NB's ``glue`` leaves.

One kernel glues each value twice, with MyST-NB's function and with the library's, and
the two outputs are compared whole (output type, every mime type, metadata): the site,
which reads them with MyST-NB, and the Colab conversion, which reads them with
``stablernn_tools.colab_conversion.glued_values``, cannot tell them apart. The values are those the
chapters glue (floats, integers, NumPy scalars, strings, booleans) and, for completeness,
a Markdown object and a matplotlib figure.
"""

from __future__ import annotations

import nbformat
import pytest
from nbclient import NotebookClient
from stablernn_tools import colab_conversion as colab

from stablernn_lib.book.glue import HIDDEN_PREFIX, glue_display_data

VALUES = {
    "float": "27.41234",
    "tiny": "3.3306690738754696e-16",
    "integer": "3",
    "numpy_float": "np.float64(0.5)",
    "numpy_integer": "np.int64(7)",
    "word": "'not supported'",
    "flag": "True",
    "markdown": "Markdown('**bold** and $x$')",
    "figure": "figure",
}
SETUP = """
import matplotlib.pyplot as plt
import numpy as np
from IPython.display import Markdown
from myst_nb import glue as myst_glue
from stablernn_lib.book.glue import glue
figure, axes = plt.subplots(figsize=(2, 1.5))
axes.plot([0, 1], [1, 0])
plt.close(figure)
"""


@pytest.fixture(scope="module")
def executed() -> nbformat.NotebookNode:
    cells = [nbformat.v4.new_code_cell(SETUP)]
    for name, value in VALUES.items():
        for function in ("myst_glue", "glue"):
            cells.append(nbformat.v4.new_code_cell(f"{function}({name!r}, {value}, display=False)"))
    cells += [nbformat.v4.new_code_cell(f"{f}('shown', 1.5)") for f in ("myst_glue", "glue")]
    notebook = nbformat.v4.new_notebook(cells=cells)
    NotebookClient(notebook, timeout=120, kernel_name="python3").execute()
    return notebook


@pytest.mark.parametrize("name", [*VALUES, "shown"])
def test_the_output_is_myst_nbs(executed, name):
    pairs = [c.outputs for c in executed.cells[1:] if f"({name!r}," in c.source]
    assert len(pairs) == 2
    theirs, ours = pairs
    assert len(ours) == len(theirs) == 1
    assert ours[0] == theirs[0]
    assert ours[0].metadata["scrapbook"]["name"] == name
    prefix = "" if name == "shown" else HIDDEN_PREFIX
    assert f"{prefix}text/plain" in ours[0].data
    if name == "figure":
        assert f"{prefix}image/png" in ours[0].data
    if name == "markdown":
        assert ours[0].data[f"{prefix}text/markdown"] == "**bold** and $x$"


def test_the_colab_conversion_reads_the_glued_values(executed):
    glued = colab.glued_values(executed)
    assert colab.plain_text_value(glued["float"]["text/plain"], ".1f") == "27.4"
    assert colab.plain_text_value(glued["word"]["text/plain"], "s") == "not supported"
    assert glued["markdown"]["text/markdown"] == "**bold** and $x$"


def test_a_name_that_no_role_can_quote_is_refused():
    with pytest.raises(ValueError, match="non-empty string"):
        glue_display_data("", 1.0)
    data, metadata = glue_display_data("gap", 2.5, display=False)
    assert data == {HIDDEN_PREFIX + "text/plain": "2.5"}
    assert metadata == {"scrapbook": {"name": "gap", "mime_prefix": HIDDEN_PREFIX}}
