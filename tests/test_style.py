"""The course's figure style: one colour per model across figures, text legible on the site."""

from __future__ import annotations

import re
from pathlib import Path

import matplotlib.colors as mcolors
import matplotlib.pyplot as plt
import numpy as np
import pytest

from stablernn_lib.core import style
from stablernn_lib.figures import plots
from stablernn_lib.tasks.jsb import analysis as music_analysis
from stablernn_lib.tasks.wikitext2 import analysis as lm_analysis

ROOT = Path(__file__).resolve().parents[1]
MODELS = ("rnn-unconstrained", "rnn-stable", "lstm-unconstrained", "lstm-stable")


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
    music = line_colors(
        music_analysis.plot_truncated_nll(truncation_analysis("loss", "recurrent_loss"))
    )
    for name in MODELS:
        assert words[lm_analysis._plain_name(name)] == style.MODEL_COLORS[name]  # "LSTM, stable"
        assert music[music_analysis.LABELS[name]] == style.MODEL_COLORS[name]
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
    for fig in (histograms, plots.full_vs_truncated_figure(0.8, 5)):
        assert style.legibility_problems(fig) == []
        assert fig.get_figwidth() * fig.get_dpi() <= style.COLUMN_PX + 1e-6
    bars = {p.get_facecolor()[:3] for p in histograms.axes[0].patches}
    assert mcolors.to_rgb(style.model_color(MODELS[0])) in {tuple(c) for c in bars}
    plt.close("all")


def test_finish_repairs_a_wide_figure_with_small_text():
    fig, axis = plt.subplots(figsize=(13, 4))
    axis.plot([1, 2], [3, 4], label="a line")
    axis.legend(fontsize=6)
    axis.set_title("tiny", fontsize=5)
    assert any("pt on the page" in p for p in style.legibility_problems(fig))
    assert style.finish(fig) is fig
    assert style.legibility_problems(fig) == []
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
