"""The course's figure style: one colour per model across figures, text legible on the site."""

from __future__ import annotations

import re
from pathlib import Path

import matplotlib.colors as mcolors
import matplotlib.pyplot as plt
import numpy as np
import pytest
from matplotlib.figure import Figure

from stablernn_lib.core import style
from stablernn_lib.figures import full_vs_truncated
from stablernn_lib.figures.jsb import plot_truncated_nll
from stablernn_lib.tasks.jsb import results as mr
from stablernn_lib.tasks.wikitext2 import measurements as lm_analysis

ROOT = Path(__file__).resolve().parents[1]
MODELS = ("rnn-unconstrained", "rnn-stable", "lstm-unconstrained", "lstm-stable")


# The rest of the Okabe-Ito palette, for figures that draw more than the full and truncated model.
EXTRA_COLORS = ("#009e73", "#cc79a7", "#56b4e9", "#e69f00", "#000000")


def rendered_scale(fig: Figure) -> float:
    """How much the site shrinks the figure's PNG: 1 when it fits the text column."""
    width_px = fig.get_figwidth() * fig.get_dpi()
    return min(1.0, style.COLUMN_PX / width_px) * fig.get_dpi() / style.DPI


def legibility_problems(fig: Figure) -> list[str]:
    """Texts below ``style.MIN_PT`` at the size the site shows ``fig``; a figure too wide."""
    scale = rendered_scale(fig)
    fig.canvas.draw()
    problems = [
        f"{text.get_text()[:30]!r}: {text.get_fontsize() * scale:.1f} pt on the page"
        for text in style._texts(fig)
        if text.get_fontsize() * scale < style.MIN_PT - 1e-6
    ]
    if fig.get_figwidth() > style.MAX_WIDTH_IN + 1e-6:
        problems.append(f"{fig.get_figwidth():.1f} in wide, wider than the column")
    return problems


def colour_only_series(fig: Figure) -> list[str]:
    """Pairs of labelled lines in one axes of ``fig`` told apart by colour alone (different
    colours, the same line style and marker): ``"'a' and 'b' in axes 0"``."""
    problems = []
    for number, axis in enumerate(fig.get_axes()):
        lines = style._series(axis)
        for i, first in enumerate(lines):
            for second in lines[i + 1 :]:
                same_look = style._look(first) == style._look(second)
                if same_look and mcolors.to_hex(first.get_color()) != mcolors.to_hex(
                    second.get_color()
                ):
                    problems.append(
                        f"{first.get_label()!r} and {second.get_label()!r} in axes {number}"
                    )
    return problems


def line_colors(fig) -> dict[str, str]:
    """Legend label -> hex colour of every labelled line of ``fig``."""
    return {
        line.get_label(): mcolors.to_hex(line.get_color())
        for axis in fig.axes
        for line in axis.get_lines()
        if not line.get_label().startswith("_")
    }


def truncation_analysis(value: str, recurrent: str) -> dict:
    curve = {"k": [1, 2, 4, 8], value: [9.0, 8.0, 7.5, 7.4], recurrent: 7.3}
    return {name: {"truncated_eval": dict(curve)} for name in MODELS}


def test_model_colors_are_one_per_model_and_distinct():
    colors = [style.model_color(name) for name in MODELS + ("lstm-authors-bug",)]
    assert len(set(colors)) == len(colors)
    assert style.model_color("rnn") == style.model_color("rnn-unconstrained")
    assert style.model_color("lstm-stable-adam") == style.model_color("lstm-stable")
    with pytest.raises(KeyError, match="MODEL_COLORS"):
        style.model_color("gru-stable")


def test_a_model_has_the_same_colour_in_chapter_8_and_chapter_9():
    """WikiText-2 (lm_analysis) and JSB Chorales (music_analysis) draw each model alike."""
    words = truncation_analysis("ppl", "recurrent_ppl")
    words = line_colors(lm_analysis.plot_truncated_eval(words))
    music = line_colors(plot_truncated_nll(truncation_analysis("loss", "recurrent_loss")))
    for name in MODELS:
        assert words[lm_analysis._plain_name(name)] == style.MODEL_COLORS[name]  # "LSTM, stable"
        assert music[mr.LABELS[name]] == style.MODEL_COLORS[name]
    profile = {"distance": [1, 2, 3], "mean_norm": [1.0, 0.5, 0.2]}
    figure2 = line_colors(lm_analysis.plot_figure2({n: {"figure2": profile} for n in MODELS}))
    assert figure2["LSTM, stable"] == style.MODEL_COLORS["lstm-stable"]
    assert figure2["RNN (tanh)"] == style.MODEL_COLORS["rnn-unconstrained"]
    plt.close("all")


def test_histograms_and_theory_figures_are_legible_at_the_rendered_size():
    """The four-panel histogram (once 6-7 px tick labels) and a Chapter 1 figure: every text
    at least 9 pt once the site shows the PNG, no figure wider than the column."""
    rng = np.random.default_rng(0)
    analysis = {name: {"jacobian_norms": [rng.random(200), rng.random(200)]} for name in MODELS}
    histograms = lm_analysis.plot_jacobian_norms(analysis, "smoke models")
    for fig in (histograms, full_vs_truncated.full_vs_truncated_figure(0.8, 5)):
        assert legibility_problems(fig) == []
        assert fig.get_figwidth() * fig.get_dpi() <= style.COLUMN_PX + 1e-6
    bars = {p.get_facecolor()[:3] for p in histograms.axes[0].patches}
    assert mcolors.to_rgb(style.model_color(MODELS[0])) in {tuple(c) for c in bars}
    plt.close("all")


def test_finish_repairs_a_wide_figure_with_small_text():
    fig, axis = plt.subplots(figsize=(13, 4))
    axis.plot([1, 2], [3, 4], label="a line")
    axis.legend(fontsize=6)
    axis.set_title("tiny", fontsize=5)
    assert any("pt on the page" in p for p in legibility_problems(fig))
    assert style.finish(fig) is fig
    assert legibility_problems(fig) == []
    plt.close("all")


def test_every_plotting_function_ends_with_the_course_style():
    """Each function of the library that returns a figure returns ``finish(...)``."""
    unstyled = []
    for path in sorted((ROOT / "stablernn_lib").rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        if "plt.subplots(" not in text and "Figure(" not in text:
            continue
        for match in re.finditer(r"^\s+return (fig|figure)\s*$", text, re.M):
            line = text[: match.start()].count("\n") + 1
            unstyled.append(f"{path.relative_to(ROOT)}:{line}")
    assert not unstyled, f"return finish(fig) instead: {unstyled}"


# Colour-vision deficiency: Machado, Oliveira and Fernandes (2009), severity 1, on linear RGB.
CVD = {
    "deuteranopia": np.array(
        [
            [0.367322, 0.860646, -0.227968],
            [0.280085, 0.672501, 0.047413],
            [-0.011820, 0.042940, 0.968881],
        ]
    ),
    "protanopia": np.array(
        [
            [0.152286, 1.052583, -0.204868],
            [0.114503, 0.786281, 0.099216],
            [-0.003882, -0.048116, 1.051998],
        ]
    ),
    "tritanopia": np.array(
        [
            [1.255528, -0.076749, -0.178779],
            [-0.078411, 0.930809, 0.147602],
            [0.004733, 0.691367, 0.303900],
        ]
    ),
}


def lab(rgb: np.ndarray) -> np.ndarray:
    """CIE L*a*b* (D65) of sRGB colours in [0, 1], shape (n, 3)."""
    linear = np.where(rgb <= 0.04045, rgb / 12.92, ((rgb + 0.055) / 1.055) ** 2.4)
    xyz = (
        linear
        @ np.array([[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722], [0.0193, 0.1192, 0.9505]]).T
        / np.array([0.95047, 1.0, 1.08883])
    )
    f = np.where(xyz > (6 / 29) ** 3, np.cbrt(xyz), xyz / (3 * (6 / 29) ** 2) + 4 / 29)
    return np.stack(
        [116 * f[:, 1] - 16, 500 * (f[:, 0] - f[:, 1]), 200 * (f[:, 1] - f[:, 2])], axis=1
    )


def simulate(rgb: np.ndarray, deficiency: str) -> np.ndarray:
    linear = np.where(rgb <= 0.04045, rgb / 12.92, ((rgb + 0.055) / 1.055) ** 2.4)
    seen = np.clip(linear @ CVD[deficiency].T, 0, 1)
    return np.where(seen <= 0.0031308, 12.92 * seen, 1.055 * seen ** (1 / 2.4) - 0.055)


def smallest_difference(colors: list[str], deficiency: str | None) -> float:
    """The smallest CIE76 colour difference between two of ``colors`` as a reader with
    ``deficiency`` (None: typical vision) sees them."""
    rgb = np.array([mcolors.to_rgb(c) for c in colors])
    points = lab(rgb if deficiency is None else simulate(rgb, deficiency))
    gaps = np.linalg.norm(points[:, None] - points[None], axis=-1)
    return float(gaps[np.triu_indices(len(colors), 1)].min())


def test_the_palettes_stay_distinct_with_colour_vision_deficiencies():
    """The theory chapters' colours and the trained models' colours stay apart (CIE76
    distance above 10, a clearly visible difference) for deuteranopia, protanopia and
    tritanopia, as simulated by Machado et al. (2009); a red and a green do not."""
    theory = [style.FULL_COLOR, style.TRUNCATED_COLOR, style.BOUND_COLOR, *EXTRA_COLORS]
    for palette in (theory, list(style.MODEL_COLORS.values())):
        for deficiency in (None, *CVD):
            assert smallest_difference(palette, deficiency) > 10, (palette, deficiency)
    assert smallest_difference(["#d62728", "#2ca02c"], "deuteranopia") < 10  # the check bites


def test_finish_gives_lines_told_apart_by_colour_alone_a_marker():
    fig, axis = plt.subplots()
    for number, color in enumerate(("#0072b2", "#d55e00", "#009e73")):
        axis.plot(np.arange(40), np.arange(40) * number, color=color, label=f"series {number}")
    axis.plot([0, 39], [1, 1], color="#000000", linestyle="--", label="bound")
    axis.legend()
    assert len(colour_only_series(fig)) == 3  # every pair of the three solid lines
    style.finish(fig)
    assert colour_only_series(fig) == []
    markers = [line.get_marker() for line in axis.get_lines()]
    assert markers[0] == "None" and len(set(markers[:3])) == 3 and markers[3] == "None"
    assert axis.get_lines()[1].get_markevery() == 40 // style.MARKS_PER_LINE
    legend = [handle.get_marker() for handle in axis.get_legend().legend_handles]
    assert legend == markers
    style.finish(fig)  # a second call changes nothing
    assert [line.get_marker() for line in axis.get_lines()] == markers
    plt.close("all")


def test_the_figure_functions_never_tell_series_apart_by_colour_alone():
    """The figures of Chapters 1, 5, 8 and 9 (models, bounds, contexts in one axes): every pair
    of labelled lines of one axes differs in line style or marker, not in colour only."""
    from stablernn_lib.figures import lemmas as lemma_plots
    from stablernn_lib.theory import lemmas

    profile = {"distance": [1, 2, 3], "mean_norm": [1.0, 0.5, 0.2]}
    result = lemmas.truncation_experiment(
        [0.5, 0.8, 0.95], [1, 2, 4], model="tanh", seed=0, num_instances=2, seq_len=20
    )
    figures = {
        "full_vs_truncated_figure": full_vs_truncated.full_vs_truncated_figure(0.8, 5),
        "plot_truncated_eval": lm_analysis.plot_truncated_eval(
            truncation_analysis("ppl", "recurrent_ppl")
        ),
        "plot_truncated_nll": plot_truncated_nll(truncation_analysis("loss", "recurrent_loss")),
        "plot_figure2": lm_analysis.plot_figure2({n: {"figure2": profile} for n in MODELS}),
        "truncation_figure": lemma_plots.truncation_figure(result),
    }
    problems = {name: colour_only_series(fig) for name, fig in figures.items()}
    assert all(fig.axes and fig.axes[0].get_lines() for fig in figures.values())
    assert not any(problems.values()), problems
    plt.close("all")
