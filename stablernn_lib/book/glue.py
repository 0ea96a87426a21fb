"""The chapters' glued values, without MyST-NB in the kernel.

A chapter computes a number and writes ``{glue:text}`name:.1f``` in its prose; when the
book is built, MyST-NB finds the value in the executed notebook's outputs and puts it in
the page. :func:`glue` displays the same output MyST-NB's own ``glue`` displays, so the
site reads it as before, and the notebook needs only IPython (which every Jupyter kernel,
Colab's included, has): MyST-NB is in the ``book`` extra, which Colab does not install.

The output is a ``display_data`` whose data is the value's mime bundle (IPython's
formatters: ``text/plain``, and ``text/markdown``, ``image/png``, ... where the value has
them), each mime type prefixed by ``application/papermill.record/`` when the value is not
shown, and whose metadata holds ``scrapbook = {"name": name, "mime_prefix": prefix}``.
:func:`stablernn_tools.colab_conversion.glued_values` reads it back for the Colab notebooks.
"""

from __future__ import annotations

from typing import Any

# The mime-type prefix of a value glued without being shown (MyST-NB and papermill's).
HIDDEN_PREFIX = "application/papermill.record/"


def glue_display_data(
    name: str, value: Any, display: bool = True
) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(data, metadata)`` of the output that glues ``value`` under ``name``.

    ``data`` maps each (prefixed, unless ``display``) mime type to the value's
    representation; ``metadata`` is IPython's metadata plus the ``scrapbook`` record."""
    from IPython.core.formatters import format_display_data

    if not isinstance(name, str) or not name:
        raise ValueError(
            f"a glue name must be a non-empty string, got {name!r}; the prose refers to it "
            "as {glue:text}`name`"
        )
    bundle, metadata = format_display_data(value)
    prefix = "" if display else HIDDEN_PREFIX
    metadata = dict(metadata)
    metadata["scrapbook"] = {"name": name, "mime_prefix": prefix}
    return {prefix + kind: data for kind, data in bundle.items()}, metadata


def glue(name: str, value: Any, display: bool = True) -> None:
    """Display ``value`` glued under ``name`` (shown in the notebook only when ``display``),
    for the book's ``{glue:text}`name``` roles; the output is :func:`glue_display_data`'s."""
    from IPython.display import display as show

    data, metadata = glue_display_data(name, value, display)
    show(data, raw=True, metadata=metadata)
