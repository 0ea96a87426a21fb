"""Markdown tables for the notebooks (shown with ``display(Markdown(table))``, which the
book renders as MyST): rows of results, and configurations side by side."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict
from typing import Any


def format_value(value: Any, none: str = "") -> str:
    """Floats to 3 significant digits, integers with thousands separators, tuples joined."""
    if value is None:
        return none
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:.3g}"
    if isinstance(value, tuple | list):
        return ", ".join(format_value(item, none) for item in value)
    return str(value)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def text_table(
    columns: Sequence[str] | str, rows: Iterable[Sequence[str] | str], right: Iterable[int] = ()
) -> str:
    """A Markdown table of text cells: ``columns`` and each row a sequence of cells or one string
    of them separated by ``" | "``; the columns numbered in ``right`` (from 0) right-aligned."""
    titles = columns.split(" | ") if isinstance(columns, str) else list(columns)
    aligned = set(right)
    lines = [
        "| " + " | ".join(titles) + " |",
        "|" + "|".join(" ---: " if i in aligned else " --- " for i in range(len(titles))) + "|",
    ]
    lines += ["| " + (row if isinstance(row, str) else " | ".join(row)) + " |" for row in rows]
    return "\n".join(lines)


def markdown_table(
    rows: Sequence[Mapping[str, Any]], headers: Mapping[str, str] | None = None
) -> str:
    """A table with one row per mapping and the first row's keys as columns, titled by
    ``headers`` (words or ``$math$``; by default the key, which may wrap after an underscore);
    columns of numbers only are right-aligned."""
    if not rows:
        raise ValueError("a table needs at least one row; got none")
    keys = list(rows[0])
    for index, row in enumerate(rows):
        if list(row) != keys:
            raise ValueError(f"row {index} has keys {list(row)}, but row 0 has {keys}")
    numeric = [all(_is_number(row[key]) or row[key] is None for row in rows) for key in keys]
    # a zero-width space after each underscore lets long column names wrap there
    titles = [(headers or {}).get(key, key.replace("_", "_\u200b")) for key in keys]
    cells = [[format_value(row[key]) for key in keys] for row in rows]
    return text_table(titles, cells, right=[i for i, right in enumerate(numeric) if right])


def config_table(configs: Mapping[str, Any], none: str = "all") -> str:
    """Every field of named dataclass configs, one column per config (``None`` as ``none``)."""
    if not configs:
        raise ValueError("no configs to show")
    names = list(configs)
    fields = {name: asdict(config) for name, config in configs.items()}
    keys = [key for key in fields[names[0]] if key != "name"]
    rows = []
    for key in keys:  # a seed is a label, not a quantity: no thousands separator
        show = str if key == "seed" else lambda value: format_value(value, none)
        rows.append([f"`{key}`", *(show(fields[name][key]) for name in names)])
    return text_table(["field", *names], rows, right=range(1, len(names) + 1))
