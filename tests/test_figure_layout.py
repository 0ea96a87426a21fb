"""Legends moved below the axes (stablernn_lib.figures.layout), as in Figure 7.2."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from stablernn_lib.figures.layout import legends_below


def _grid(layout: str | None = "constrained") -> Figure:
    figure = Figure(figsize=(8, 5), layout=layout)
    axes = figure.subplots(2, 2)
    for row in axes:
        for k in (1, 2, 4):
            row[0].plot([0, 1, 2], [k, k + 1, k + 2], label=f"k = {k}")
        row[0].legend(title="solid: measured")
        row[1].plot([0, 1], [0, 1], label="weights")
        row[1].plot([0, 1], [1, 0], label="prediction gap")
        row[1].legend()
    return figure


def test_axes_legends_become_one_figure_legend_per_distinct_set_below_every_axis():
    figure = _grid()
    height = figure.get_size_inches()[1]
    legends_below(figure)
    assert all(axis.get_legend() is None for axis in figure.get_axes())
    assert len(figure.legends) == 2  # the two rows share their legends
    assert figure.legends[0].get_title().get_text() == "solid: measured"
    assert [t.get_text() for t in figure.legends[1].get_texts()] == ["weights", "prediction gap"]
    assert figure.get_size_inches()[1] > height
    FigureCanvasAgg(figure).draw()
    renderer = figure.canvas.get_renderer()
    lowest_axis = min(axis.get_window_extent(renderer).y0 for axis in figure.get_axes())
    for legend in figure.legends:
        assert legend.get_window_extent(renderer).y1 <= lowest_axis + 1e-6


def test_a_figure_without_the_constrained_layout_is_refused():
    with pytest.raises(ValueError, match="constrained"):
        legends_below(_grid(layout=None))
