"""Layout helpers shared by the figures: legends that no curve can cover."""

from __future__ import annotations

from matplotlib.figure import Figure

from stablernn_lib.core.style import finish

# Figure-legend slots below the axes, in the order the distinct legends are met.
_BELOW = ("outside lower left", "outside lower right", "outside lower center")


def legends_below(figure: Figure, columns: int = 2) -> Figure:
    """Move the legends of ``figure``'s axes below all axes, where no curve is drawn.

    Axes whose legends list the same entries (one per row of a grid, say) share one
    figure legend; at most three distinct legends fit side by side. Each keeps its title
    and gets ``columns`` columns. The figure must use the constrained layout, which makes
    room for the legends; its height grows by 0.35 in per row of the tallest legend, and the
    course style is applied again (:func:`~stablernn_lib.core.style.finish`).
    """
    if (
        figure.get_layout_engine() is None
        or "Constrained" not in type(figure.get_layout_engine()).__name__
    ):
        raise ValueError(
            "legends_below needs a figure with layout='constrained' (it makes room for the "
            "legends below the axes); create the figure with Figure(layout='constrained')"
        )
    found: dict[tuple[str, ...], tuple[list, str]] = {}
    for axis in figure.get_axes():
        legend = axis.get_legend()
        if legend is None:
            continue
        handles, labels = axis.get_legend_handles_labels()
        found.setdefault(tuple(labels), (handles, legend.get_title().get_text()))
        legend.remove()
    if len(found) > len(_BELOW):
        raise ValueError(
            f"{len(found)} distinct legends do not fit below one figure (at most "
            f"{len(_BELOW)}); merge them or draw fewer panels"
        )
    rows = 0
    for slot, (labels, (handles, title)) in zip(_BELOW, found.items(), strict=False):
        figure.legend(handles, labels, loc=slot, ncols=columns, title=title or None)
        rows = max(rows, -(-len(labels) // columns) + len(title.splitlines()))
    width, height = figure.get_size_inches()
    figure.set_size_inches(width, height + 0.35 * rows)
    return finish(figure)
