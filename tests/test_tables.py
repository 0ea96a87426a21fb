"""Markdown tables: values formatted, numeric columns right-aligned, bad rows rejected."""

from __future__ import annotations

import pytest

from stablernn_lib.core.tables import config_table, format_value, markdown_table, text_table
from stablernn_lib.tasks.wikitext2.train import CONFIGS as LM_CONFIGS
from stablernn_lib.theory.weights_close import CONFIGS as FIGURE1_CONFIGS


def test_format_value() -> None:
    assert format_value(0.123456) == "0.123"
    assert format_value(2_088_628) == "2,088,628"
    assert format_value(True) == "True"  # a bool is an int, but not a count
    assert format_value(("identity", "tanh")) == "identity, tanh"
    assert format_value(None, none="all") == "all"


def test_markdown_table_aligns_numbers_right() -> None:
    rows = [{"k": 1, "name": "a", "gap_max": 0.5}, {"k": 8, "name": "b", "gap_max": None}]
    header, delimiter, *body = markdown_table(rows).splitlines()
    assert header == "| k | name | gap_\u200bmax |"  # may wrap after the underscore
    assert delimiter == "| ---: | --- | ---: |"
    assert body == ["| 1 | a | 0.5 |", "| 8 | b |  |"]


def test_text_table_takes_cells_or_joined_rows_and_aligns_the_named_columns_right() -> None:
    table = text_table("model | ppl | note", [["RNN", "130.2", ""], "LSTM | 99.0 | stable"], [1])
    assert table.splitlines() == [
        "| model | ppl | note |",
        "| --- | ---: | --- |",
        "| RNN | 130.2 |  |",
        "| LSTM | 99.0 | stable |",
    ]


def test_markdown_table_rejects_ragged_or_empty_rows() -> None:
    with pytest.raises(ValueError, match="row 1 has keys"):
        markdown_table([{"a": 1}, {"b": 2}])
    with pytest.raises(ValueError, match="at least one row"):
        markdown_table([])


@pytest.mark.parametrize("configs", [LM_CONFIGS, FIGURE1_CONFIGS])
def test_config_table_lists_every_field_once(configs) -> None:
    table = config_table(configs)
    names = list(configs)
    assert table.splitlines()[0] == "| field | " + " | ".join(names) + " |"
    fields = [f for f in configs[names[0]].__dataclass_fields__ if f != "name"]
    assert len(table.splitlines()) == 2 + len(fields)
    for field in fields:
        assert table.count(f"| `{field}` |") == 1


def test_config_table_shows_a_seed_as_a_label() -> None:
    seeds = {c.seed for c in LM_CONFIGS.values()}
    assert max(seeds) >= 1000  # a seed that a thousands separator would split
    row = next(line for line in config_table(LM_CONFIGS).splitlines() if "| `seed` |" in line)
    assert "," not in row
    assert all(f"| {seed} |" in row + " |" or f" {seed} |" in row for seed in seeds)


def test_markdown_table_titles_columns_in_words():
    table = markdown_table([{"decay_final": 0.5, "k": 2}], {"decay_final": "distance at $N$"})
    header = table.splitlines()[0]
    assert header == "| distance at $N$ | k |"
