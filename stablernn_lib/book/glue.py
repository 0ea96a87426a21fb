"""The chapters' glued values (``{glue:text}`name:.1f``` in the prose), with IPython only.

:func:`glue` displays the output MyST-NB's own ``glue`` does (MyST-NB is not on Colab): a
``display_data`` of the value's mime bundle, each type prefixed by
``application/papermill.record/`` when not shown, with metadata
``scrapbook = {"name": name, "mime_prefix": prefix}``.
"""

from __future__ import annotations

from typing import Any

# The mime-type prefix of a value glued without being shown (MyST-NB and papermill's).
HIDDEN_PREFIX = "application/papermill.record/"


def glue_display_data(
    name: str, value: Any, display: bool = True
) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(data, metadata)`` of the output that glues ``value`` under ``name``: the mime
    bundle (prefixed unless ``display``) and IPython's metadata plus the ``scrapbook`` record."""
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
    """Display ``value`` glued under ``name`` (shown only when ``display``)."""
    from IPython.display import display as show

    data, metadata = glue_display_data(name, value, display)
    show(data, raw=True, metadata=metadata)
