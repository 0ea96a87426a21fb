"""Tests of stablernn_lib.figures.widgets.interactive_plot (precomputed frames and live mode)."""

import base64
import html
import io
import re
import sys
import types

import ipywidgets
import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import pytest
from PIL import Image

from stablernn_lib.figures.widgets import (
    FRAME_DPI,
    MAX_FRAMES,
    InteractivePlot,
    interactive_plot,
    render_png,
)

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
FRAME_PATTERN = re.compile(r'^<img src="data:image/png;base64,([A-Za-z0-9+/=]+)" alt="([^"]*)">$')


def frame_contents(frame: ipywidgets.HTML) -> tuple[bytes, str]:
    """``(png, alt)`` of a frame made by ``widgets.frame_widget``."""
    match = FRAME_PATTERN.match(frame.value)
    if match is None:
        raise ValueError(f"not a frame of interactive_plot: {frame.value[:80]!r}")
    return base64.b64decode(match[1]), html.unescape(match[2])


def line_figure(**values):
    """A tiny figure whose pixels depend on every value."""
    fig, ax = plt.subplots(figsize=(2, 1.5))
    ax.plot([0, 1], [0, sum(float(v) for v in values.values())])
    ax.set_ylim(-1, 30)
    ax.set_title(",".join(f"{k}={v}" for k, v in values.items()))
    return fig


@pytest.fixture(autouse=True)
def frames_mode(monkeypatch):
    monkeypatch.delenv("STABLERNN_WIDGETS", raising=False)


def leaf_images(widget):
    """The frames (``ipywidgets.HTML`` holding one image each) under ``widget``."""
    if isinstance(widget, ipywidgets.HTML):
        return [widget]
    return [image for child in widget.children for image in leaf_images(child)]


def png(frame) -> bytes:
    return frame_contents(frame)[0]


def test_one_slider_gives_one_stack_of_distinct_png_frames():
    calls = []

    def draw(k):
        calls.append(k)
        return line_figure(k=k)

    plot = interactive_plot(draw, {"k": [1, 2, 4, 8]}, description="Context k")
    assert isinstance(plot, InteractivePlot)
    assert calls == [1, 2, 4, 8]
    assert plot.num_frames == 4
    html, slider, stack = plot.children
    assert "Context k" in html.value
    assert isinstance(slider, ipywidgets.SelectionSlider)
    assert list(slider._options_labels) == ["1", "2", "4", "8"]
    assert slider.index == 0 and slider.value == 1
    assert isinstance(stack, ipywidgets.Stack) and stack.selected_index == 0
    frames = [png(image) for image in stack.children]
    assert all(frame.startswith(PNG_SIGNATURE) for frame in frames)
    assert len(set(frames)) == 4
    (link,) = plot.links
    assert link.source == (slider, "index")
    assert link.target == (stack, "selected_index")
    assert plt.get_fignums() == []


def test_categories_get_buttons_and_a_plot_may_rename_a_slider():
    def draw(kind, b):
        return line_figure(b=b + (1.0 if kind == "second" else 0.0))

    plot = interactive_plot(draw, {"kind": ["first", "second"], "b": [0.0, 2.0]}, labels={"b": "b"})
    buttons, slider, outer = plot.children
    assert isinstance(buttons, ipywidgets.ToggleButtons) and buttons.description == "kind"
    assert list(buttons._options_labels) == ["first", "second"] and buttons.index == 0
    assert isinstance(slider, ipywidgets.SelectionSlider) and slider.description == "b"
    assert (
        interactive_plot(draw, {"kind": ["first"], "b": [0.0]}).children[1].description == "bias b"
    )
    (outer_link,) = [link for link in plot.links if link.source[0] is buttons]
    assert outer_link.source == (buttons, "index") and outer_link.target == (
        outer,
        "selected_index",
    )
    with pytest.raises(ValueError, match="labels name no slider: \\['c'\\]"):
        interactive_plot(draw, {"kind": ["first"], "b": [0.0]}, labels={"c": "c"})


def test_two_sliders_nest_stacks_and_link_every_inner_stack():
    plot = interactive_plot(line_figure, {"a": [0.5, 1.0, 2.0], "b": range(4)})
    slider_a, slider_b, outer = plot.children
    assert plot.num_frames == 12
    assert list(slider_a._options_labels) == ["0.5", "1", "2"]
    assert len(outer.children) == 3
    assert all(isinstance(inner, ipywidgets.Stack) for inner in outer.children)
    assert all(len(inner.children) == 4 for inner in outer.children)
    assert len(plot.links) == 1 + 3
    targets_of_b = [link.target[0] for link in plot.links if link.source[0] is slider_b]
    assert set(map(id, targets_of_b)) == set(map(id, outer.children))
    targets_of_a = [link.target[0] for link in plot.links if link.source[0] is slider_a]
    assert targets_of_a == [outer]
    # frame (a index 2, b index 1) is the figure for a=2.0, b=1
    expected = interactive_plot(line_figure, {"a": [2.0], "b": [1]}).children[-1].children[0]
    assert png(outer.children[2].children[1]) == png(expected.children[0])


def test_three_sliders_make_three_levels():
    plot = interactive_plot(line_figure, {"a": [1, 2], "b": [1, 2, 3], "c": [0, 1]})
    assert plot.num_frames == 12
    assert len(leaf_images(plot.children[-1])) == 12
    assert len(plot.links) == 1 + 2 + 2 * 3
    assert set(plot.sliders) == {"a", "b", "c"}


@pytest.mark.parametrize(
    ("sliders", "message"),
    [
        ({}, "1 to 3 sliders"),
        ({"a": [1], "b": [1], "c": [1], "d": [1]}, "1 to 3 sliders"),
        ({"k": []}, "has no values"),
        ({"k": [1, 1]}, "repeated values"),
        ({"not a name": [1]}, "not a valid keyword"),
        ({"a": range(8), "b": range(8)}, f"more than {MAX_FRAMES}"),
    ],
)
def test_bad_sliders_raise_value_errors_naming_the_fix(sliders, message):
    with pytest.raises(ValueError, match=message):
        interactive_plot(line_figure, sliders)


def test_type_errors():
    with pytest.raises(TypeError, match="list of values"):
        interactive_plot(line_figure, {"k": "abc"})
    with pytest.raises(TypeError, match="dict name"):
        interactive_plot(line_figure, [("k", [1, 2])])
    with pytest.raises(TypeError, match="draw must be a function"):
        interactive_plot("not callable", {"k": [1]})
    with pytest.raises(TypeError, match="description"):
        interactive_plot(line_figure, {"k": [1]}, description=3)


def test_draw_that_returns_no_figure_is_rejected():
    def draw(k):
        plt.plot([0, k])
        return None

    with pytest.raises(TypeError, match=r"draw\(k=1\) returned NoneType, not a matplotlib Figure"):
        interactive_plot(draw, {"k": [1, 2]})
    assert plt.get_fignums() == []


def test_live_mode_redraws_through_an_output_widget(monkeypatch):
    monkeypatch.setenv("STABLERNN_WIDGETS", "live")
    calls = []

    def draw(k):
        calls.append(k)
        return line_figure(k=k)

    plot = interactive_plot(draw, {"k": [1, 2, 3]})
    assert plot.num_frames == 0 and plot.links == []
    assert isinstance(plot.children[-1], ipywidgets.Output)
    plot.sliders["k"].value = 3
    assert calls[-1] == 3


def test_colab_redraws_live_unless_frames_are_forced(monkeypatch):
    monkeypatch.setitem(sys.modules, "google.colab", types.ModuleType("google.colab"))
    plot = interactive_plot(line_figure, {"k": [1, 2]})
    assert isinstance(plot.children[-1], ipywidgets.Output) and plot.num_frames == 0
    monkeypatch.setenv("STABLERNN_WIDGETS", "frames")
    assert interactive_plot(line_figure, {"k": [1, 2]}).num_frames == 2


def test_unknown_widget_mode_is_an_error(monkeypatch):
    monkeypatch.setenv("STABLERNN_WIDGETS", "fast")
    with pytest.raises(ValueError, match="'frames'"):
        interactive_plot(line_figure, {"k": [1]})


def test_sliders_are_labelled_in_words_or_math_not_python_names():
    plot = interactive_plot(line_figure, {"k": [1, 2]})
    (slider,) = plot.sliders.values()
    assert slider.description == "context k"
    from stablernn_lib.figures.widgets import slider_label

    assert slider_label("lam") == "contraction λ"
    assert slider_label("input_bound") == "input bound Bₓ"
    assert slider_label("num_steps") == "num steps"  # never the raw identifier


def test_ipywidgets_7_without_stack_redraws_live(monkeypatch):
    """Colab ships ipywidgets 7.7.1, which has no ``Stack``: the plot redraws on the kernel,
    even where precomputed frames are asked for."""
    monkeypatch.delattr(ipywidgets, "Stack")
    monkeypatch.setenv("STABLERNN_WIDGETS", "frames")
    plot = interactive_plot(line_figure, {"k": [1, 2]})
    assert isinstance(plot.children[-1], ipywidgets.Output) and plot.num_frames == 0


def test_every_frame_carries_its_text_alternative():
    """``alt`` (a sentence, or a function of the slider values) becomes each frame's image
    ``alt``, followed by the values it shows; without it the description stands in, tags
    dropped; quotes and angle brackets are escaped, a "<" that starts no tag is kept."""
    plot = interactive_plot(
        line_figure,
        {"lam": [0.5, 0.9], "k": [1, 4]},
        alt=lambda lam, k: f"Line plot of the gap for λ = {lam}, falling with k.",
    )
    texts = [frame_contents(image)[1] for image in leaf_images(plot.children[-1])]
    assert texts[0] == (
        "Line plot of the gap for λ = 0.5, falling with k. "
        "Shown: contraction λ = 0.5, context k = 1."
    )
    assert texts[3].endswith("Shown: contraction λ = 0.9, context k = 4.")
    plain = interactive_plot(line_figure, {"k": [1, 2]}, description="<i>Context</i> k &amp; more")
    assert frame_contents(leaf_images(plain.children[-1])[1])[1] == (
        "Context k & more. Shown: context k = 2."
    )
    quoted = interactive_plot(line_figure, {"k": [1]}, alt='The "gap" for λ < 1 & k > 0')
    assert (
        'alt="The &quot;gap&quot; for λ &lt; 1 &amp; k &gt; 0. Shown'
        in leaf_images(quoted.children[-1])[0].value
    )
    with pytest.raises(TypeError, match="alt must be a non-empty string"):
        interactive_plot(line_figure, {"k": [1, 2]}, alt="  ")


def pixels(data: bytes) -> np.ndarray:
    """A PNG's pixels as grey levels 0-255, ``(rows, columns)``."""
    return np.asarray(Image.open(io.BytesIO(data)).convert("L"), dtype=float)


def blocks(grey: np.ndarray, size: int = 8) -> np.ndarray:
    """The mean of each ``size`` x ``size`` block (a one-pixel shift hardly changes it)."""
    rows, columns = (n // size * size for n in grey.shape)
    return grey[:rows, :columns].reshape(rows // size, size, columns // size, size).mean((1, 3))


@pytest.mark.parametrize("legend_below", [False, True])
def test_a_frame_is_cut_as_savefig_cuts_it(legend_below):
    """A frame is the figure drawn once with its tight box (and savefig's padding) cut out of
    the pixels: the size of ``savefig(bbox_inches="tight")``'s image to a pixel, the same
    picture; a figure with an artist outside it (a legend below the figure) is saved by
    savefig, which widens the image to hold it."""

    def figure():
        fig, ax = plt.subplots(figsize=(3, 2), layout="constrained")
        ax.semilogy([1, 2, 3], [1e-3, 1, 1e3], marker="o", label="$h_t$ (full)")
        ax.set_xlabel("time $t$")
        if legend_below:
            ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.6))
        else:
            ax.legend()
        return fig

    saved = io.BytesIO()
    reference = figure()
    reference.savefig(saved, format="png", dpi=FRAME_DPI, bbox_inches="tight")
    plt.close(reference)
    ours, theirs = pixels(render_png(figure())), pixels(saved.getvalue())
    assert np.abs(np.subtract(ours.shape, theirs.shape)).max() <= 1, (ours.shape, theirs.shape)
    rows, columns = np.minimum(ours.shape, theirs.shape)
    difference = np.abs(blocks(ours[:rows, :columns]) - blocks(theirs[:rows, :columns]))
    assert difference.mean() < 2 and difference.max() < 40, (difference.mean(), difference.max())
