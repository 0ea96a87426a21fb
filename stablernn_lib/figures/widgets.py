""":func:`interactive_plot`: ``draw(**values)`` rendered on a grid of slider values into PNG
frames (with text alternatives) in ``ipywidgets.Stack``s ``jslink``-ed to the sliders, so the
static site needs no kernel; on Colab, without ``Stack`` or with ``STABLERNN_WIDGETS=live`` it
redraws on the kernel.
"""

from __future__ import annotations

import base64
import html
import io
import itertools
import math
import os
import re
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import ipywidgets
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import to_rgba
from matplotlib.figure import Figure
from matplotlib.transforms import Bbox

from stablernn_lib.core.style import DPI, finish

MAX_FRAMES = 60
MAX_SLIDERS = 3
FRAME_DPI = DPI  # one figure point is one page point (stablernn_lib.core.style)
WIDGET_MODE_VARIABLE = "STABLERNN_WIDGETS"


class InteractivePlot(ipywidgets.VBox):
    """:func:`interactive_plot`'s widget: ``sliders``, ``links`` (browser-side) and
    ``num_frames`` (none of either live)."""

    def __init__(
        self,
        children: Sequence[ipywidgets.Widget],
        sliders: dict[str, ipywidgets.SelectionSlider],
        links: list[ipywidgets.Widget],
        num_frames: int,
    ) -> None:
        super().__init__(children=list(children))
        self.sliders = sliders
        self.links = links
        self.num_frames = num_frames


def interactive_plot(
    draw: Callable[..., Figure],
    sliders: Mapping[str, Sequence[Any]],
    *,
    description: str | None = None,
    labels: Mapping[str, str] | None = None,
    alt: str | Callable[..., str] | None = None,
) -> InteractivePlot:
    """A widget showing ``draw(**values)`` (a ``Figure``) for the sliders' ``values``:
    ``sliders`` 1 to 3 ``name -> grid of distinct values`` (at most ``MAX_FRAMES`` frames),
    starting at each first value; ``description`` HTML above them (no TeX); ``labels`` in place
    of ``SLIDER_LABELS``; ``alt`` the frames' text alternative (about 250 characters) or a
    function of the values giving it (default: the description)."""
    grids = _validate(draw, sliders, description)
    if alt is not None and not (callable(alt) or (isinstance(alt, str) and alt.strip())):
        raise TypeError(
            f"alt must be a non-empty string or a function of the slider values, got {alt!r}; "
            "say what the figure shows, e.g. alt='Line plot of the gap against t ...'."
        )
    unknown = sorted(set(labels or {}) - set(grids))
    if unknown:
        raise ValueError(f"labels name no slider: {unknown}; the sliders are {list(grids)}.")
    names = {**{name: slider_label(name) for name in grids}, **dict(labels or {})}
    slider_widgets = {name: _make_slider(names[name], grid) for name, grid in grids.items()}
    header = [ipywidgets.HTML(f"<p>{description}</p>")] if description else []
    controls = list(slider_widgets.values())
    if _live_mode():
        output = ipywidgets.interactive_output(
            lambda **values: _show_live(draw, values), dict(slider_widgets.items())
        )
        return InteractivePlot([*header, *controls, output], slider_widgets, [], 0)
    describe = _frame_text(alt if alt is not None else description, names)
    stack, links = _frame_stack(draw, grids, slider_widgets, describe)
    num_frames = math.prod(len(grid) for grid in grids.values())
    return InteractivePlot([*header, *controls, stack], slider_widgets, links, num_frames)


def render_png(figure: Figure, dpi: int = FRAME_DPI) -> bytes:
    """``figure`` as PNG bytes at ``dpi``, cut to its tight box plus ``savefig.pad_inches`` as
    ``savefig(bbox_inches="tight")`` cuts it, and closed: drawn once, to find that box, and
    the box cut out of the pixels when it lies inside the figure, else saved by ``savefig``
    with that box (a second drawing)."""
    buffer = io.BytesIO()
    try:
        figure.set_dpi(dpi)
        canvas = FigureCanvasAgg(figure)
        canvas.draw()
        tight = figure.get_tightbbox(canvas.get_renderer())
        width, height = figure.get_size_inches()
        box = tight.padded(plt.rcParams["savefig.pad_inches"])
        if tight.x0 >= 0 and tight.y0 >= 0 and tight.x1 <= width and tight.y1 <= height:
            face = np.round(np.multiply(to_rgba(figure.get_facecolor()), 255)).astype(np.uint8)
            cut = _cut(np.asarray(canvas.buffer_rgba()), box, dpi, face)
            plt.imsave(buffer, cut, format="png", dpi=dpi)
        else:  # laid out by the drawing above, as savefig lays a figure out once
            figure.set_layout_engine("none")
            figure.savefig(buffer, format="png", dpi=dpi, bbox_inches=box)
    finally:
        plt.close(figure)
    return buffer.getvalue()


def _cut(pixels: np.ndarray, box: Bbox, dpi: float, face: np.ndarray) -> np.ndarray:
    """``box`` (inches from the bottom left) of ``pixels`` (rows from the top, columns, RGBA)
    as savefig places it: ``floor(size * dpi)`` pixels, those outside ``pixels`` ``face``."""
    rows, columns = math.floor(box.height * dpi), math.floor(box.width * dpi)
    top, left = round(len(pixels) - box.y0 * dpi) - rows, round(box.x0 * dpi)
    inside = pixels[max(top, 0) : top + rows, max(left, 0) : left + columns]
    out = np.empty((rows, columns, 4), np.uint8)
    out[:] = face
    row, column = max(-top, 0), max(-left, 0)
    out[row : row + inside.shape[0], column : column + inside.shape[1]] = inside
    return out


def _validate(
    draw: Callable[..., Figure], sliders: Mapping[str, Sequence[Any]], description: str | None
) -> dict[str, list[Any]]:
    if not callable(draw):
        raise TypeError(
            f"draw must be a function returning a matplotlib Figure, got {type(draw).__name__}; "
            "pass e.g. `lambda k: plot_something(k)`."
        )
    if description is not None and not isinstance(description, str):
        raise TypeError(f"description must be a string or None, got {type(description).__name__}.")
    if not isinstance(sliders, Mapping):
        raise TypeError(
            f"sliders must be a dict name -> list of values, got {type(sliders).__name__}; "
            "pass e.g. {'k': [1, 2, 4, 8]}."
        )
    if not 1 <= len(sliders) <= MAX_SLIDERS:
        raise ValueError(
            f"interactive_plot takes 1 to {MAX_SLIDERS} sliders, got {len(sliders)}; "
            "fix the other parameters inside draw (e.g. with functools.partial)."
        )
    grids: dict[str, list[Any]] = {}
    for name, grid in sliders.items():
        if not isinstance(name, str) or not name.isidentifier():
            raise ValueError(
                f"slider name {name!r} is not a valid keyword argument of draw; "
                "use names like 'k' or 'lam'."
            )
        if isinstance(grid, str | bytes | Mapping) or not isinstance(grid, Iterable):
            raise TypeError(
                f"slider {name!r} needs a list of values (e.g. [1, 2, 4]), "
                f"got {type(grid).__name__}."
            )
        values = list(grid)
        if not values:
            raise ValueError(f"slider {name!r} has no values; give it at least one value.")
        labels = [_label(value) for value in values]
        if len(set(labels)) != len(labels):
            raise ValueError(
                f"slider {name!r} has repeated values {labels}; give each grid value once."
            )
        grids[name] = values
    num_frames = math.prod(len(values) for values in grids.values())
    if num_frames > MAX_FRAMES:
        sizes = " x ".join(str(len(values)) for values in grids.values())
        raise ValueError(
            f"the slider grids give {sizes} = {num_frames} frames, more than {MAX_FRAMES}; "
            "use fewer values per slider (about 30 frames keep the page small)."
        )
    return grids


def _label(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


# What a slider is called on the page: words and Unicode math, never the Python parameter
# name. (The static site's widget manager does not typeset TeX in widgets: no $...$.)
SLIDER_LABELS = {
    "lam": "contraction λ",
    "k": "context k",
    "input_bound": "input bound Bₓ",
    "weight_norm": "norm ‖W‖₂",
    "activation": "activation",
    "matrix": "kind of W",
    "schedule": "step sizes",
    "w": "weight w",
    "b": "bias b",
    "a": "a",
}


def slider_label(name: str) -> str:
    """The label shown for the slider of parameter ``name`` (see ``SLIDER_LABELS``)."""
    return SLIDER_LABELS.get(name, name.replace("_", " "))


def _make_slider(label: str, grid: list[Any]) -> ipywidgets.SelectionSlider:
    """A slider over the grid; buttons when the values are categories (all strings)."""
    options = [(_label(value), value) for value in grid]
    common = {"options": options, "index": 0, "description": label}
    common["style"] = {"description_width": "initial"}
    if all(isinstance(value, str) for value in grid):
        return ipywidgets.ToggleButtons(**common)
    layout = ipywidgets.Layout(width="420px")
    return ipywidgets.SelectionSlider(**common, continuous_update=True, layout=layout)


def _live_mode() -> bool:
    """Redraw on the kernel when asked to, on Colab, or when ipywidgets has no Stack."""
    requested = os.environ.get(WIDGET_MODE_VARIABLE, "").strip().lower()
    if requested not in ("", "frames", "live"):
        raise ValueError(
            f"{WIDGET_MODE_VARIABLE}={requested!r} is not understood; set it to 'frames' "
            "(precomputed images, the default) or 'live' (redraw on a kernel)."
        )
    if not hasattr(ipywidgets, "Stack"):
        return True
    if requested:
        return requested == "live"
    # Colab's front end may lag behind ipywidgets 8 (Stack, jslink): redraw there.
    return "google.colab" in sys.modules


def _show_live(draw: Callable[..., Figure], values: dict[str, Any]) -> None:
    from IPython.display import Image, display

    display(Image(data=render_png(_checked_figure(draw, values))))


def _checked_figure(draw: Callable[..., Figure], values: dict[str, Any]) -> Figure:
    figure = draw(**values)
    if not isinstance(figure, Figure):
        plt.close("all")
        called = ", ".join(f"{name}={value!r}" for name, value in values.items())
        raise TypeError(
            f"draw({called}) returned {type(figure).__name__}, not a matplotlib Figure; "
            "end draw with `return fig` (e.g. `fig, ax = plt.subplots()`)."
        )
    return finish(figure)  # every frame in the course style, whoever wrote draw


FRAME_HTML = '<img src="data:image/png;base64,{data}" alt="{alt}">'


def frame_widget(png: bytes, alt: str) -> ipywidgets.HTML:
    """One frame: ``png`` as a data URL with the text alternative ``alt`` (``Image`` has none)."""
    data = base64.b64encode(png).decode("ascii")
    return ipywidgets.HTML(FRAME_HTML.format(data=data, alt=html.escape(alt, quote=True)))


def _frame_text(
    alt: str | Callable[..., str] | None, labels: Mapping[str, str]
) -> Callable[[dict[str, Any]], str]:
    """``describe(values)``: ``alt`` (or ``alt(**values)``) without HTML tags, then the values."""

    def describe(values: dict[str, Any]) -> str:
        text = alt(**values) if callable(alt) else alt or "Plot"
        text = " ".join(html.unescape(re.sub(r"</?[A-Za-z][^<>]*>", "", str(text))).split())
        shown = ", ".join(f"{labels[name]} = {_label(value)}" for name, value in values.items())
        return f"{text.rstrip('.')}. Shown: {shown}."

    return describe


def _frame_stack(
    draw: Callable[..., Figure],
    grids: dict[str, list[Any]],
    sliders: dict[str, ipywidgets.SelectionSlider],
    describe: Callable[[dict[str, Any]], str],
) -> tuple[ipywidgets.Widget, list[ipywidgets.Widget]]:
    """Every frame (``alt``: ``describe(values)``) nested in stacks, one level per slider."""
    names = list(grids)
    images = {}
    for combination in itertools.product(*(range(len(grids[name])) for name in names)):
        values = {name: grids[name][i] for name, i in zip(names, combination, strict=True)}
        png = render_png(_checked_figure(draw, values))
        images[combination] = frame_widget(png, describe(values))
    links: list[ipywidgets.Widget] = []

    def build(level: int, prefix: tuple[int, ...]) -> ipywidgets.Widget:
        name = names[level]
        if level == len(names) - 1:
            children = [images[(*prefix, i)] for i in range(len(grids[name]))]
        else:
            children = [build(level + 1, (*prefix, i)) for i in range(len(grids[name]))]
        stack = ipywidgets.Stack(children=children, selected_index=0)
        links.append(ipywidgets.jslink((sliders[name], "index"), (stack, "selected_index")))
        return stack

    return build(0, ()), links
