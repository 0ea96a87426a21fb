"""Legends moved below the axes (stablernn_lib.core.plot_helpers), as in Figure 7.2."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from stablernn_lib.core.plot_helpers import legends_below


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


PHONE_COLUMN_PX = 360  # the text column of a 400 px window, less the page's margins


def _chapter8_figures() -> list[Figure]:
    from stablernn_lib.figures.wikitext2 import cost_of_stability_figure, figure2_figure
    from stablernn_lib.tasks.wikitext2.results import load_seed_results

    profile = {"distance": list(range(6)), "mean_norm": [10.0**-k for k in range(6)]}
    names = ("rnn-unconstrained", "rnn-stable", "lstm-unconstrained", "lstm-stable")
    return [
        cost_of_stability_figure(load_seed_results("cpu"), "cpu scale, 3 seeds per model"),
        figure2_figure({name: {"figure2": profile} for name in names}, "cpu scale, seed 1111"),
    ]


def test_chapter8_figures_fit_a_phone_whole_with_their_legends_below() -> None:
    """Figures 8.1 and 8.2 at 3/4 of their size (their 9 pt text at 9 px) fit the column of a
    400 px window, so book/fit.js shows them whole; every legend is below the axes and inside
    the figure."""
    for figure in _chapter8_figures():
        assert figure.legends and all(axis.get_legend() is None for axis in figure.get_axes())
        FigureCanvasAgg(figure).draw()
        renderer = figure.canvas.get_renderer()
        # the inline backend saves the drawn artists' box (inches) with 0.1 in of padding
        saved_px = (figure.get_tightbbox(renderer).width + 0.2) * figure.get_dpi()
        assert 0.75 * saved_px <= PHONE_COLUMN_PX, saved_px
        box = figure.bbox
        lowest_axis = min(axis.get_window_extent(renderer).y0 for axis in figure.get_axes())
        for legend in figure.legends:
            extent = legend.get_window_extent(renderer)
            assert extent.y1 <= lowest_axis + 1e-6
            assert extent.x0 >= box.x0 - 1 and extent.x1 <= box.x1 + 1
