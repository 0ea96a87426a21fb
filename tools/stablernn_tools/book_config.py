"""The book's configuration: ``_config.yml`` (repository, settings) and ``_toc.yml`` (pages).

A leaf of ``book/``: the tooling, the notebook times and the Colab conversion all read the
book's files through it.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]

# The tag of every notebook's first cell, which installs the course library on Colab.
COLAB_SETUP_TAG = "colab-setup"


def read_book_config(config_path: Path | str = REPO_ROOT / "_config.yml") -> dict[str, Any]:
    """The parsed ``_config.yml`` of the book."""
    import yaml

    path = Path(config_path)
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist; run from the repository root.")
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def repository(config_path: Path | str = REPO_ROOT / "_config.yml") -> tuple[str, str]:
    """``(url, branch)`` of the course repository, as defined in ``_config.yml``."""
    config = read_book_config(config_path).get("repository") or {}
    url, branch = config.get("url"), config.get("branch", "main")
    if not url:
        raise ValueError(f"{config_path} has no repository.url; add it under `repository:`.")
    return str(url).rstrip("/"), str(branch)


def toc_files(toc_path: Path | str = REPO_ROOT / "_toc.yml") -> list[str]:
    """Every ``file:`` entry of ``_toc.yml`` (root first), without suffix, in order."""
    import yaml

    toc = yaml.safe_load(Path(toc_path).read_text(encoding="utf-8"))
    files = [toc["root"]]

    def walk(entries: Iterable[dict[str, Any]]) -> None:
        for entry in entries:
            if "file" in entry:
                files.append(entry["file"])
            for key in ("parts", "chapters", "sections"):
                walk(entry.get(key, []))

    for key in ("parts", "chapters"):
        walk(toc.get(key, []))
    return files
