"""Checks of the book's notebooks: strip them, check their layout, the table of contents
and the paper's numbers, and write the Colab setup cell.

Command line::

    python -m stablernn_tools book strip chapters/01_recurrent_models.ipynb
    python -m stablernn_tools book check-stripped chapters/*.ipynb chapters/homework/*.ipynb
    python -m stablernn_tools book check-chapters      # first two cells of every chapter
    python -m stablernn_tools book check-toc           # _toc.yml against the files on disk
    python -m stablernn_tools book colab-cell          # print the Colab cell for _config.yml
    python -m stablernn_tools book fix-layout chapters/04_stability.ipynb  # first two cells

The repository URL is defined once, in ``_config.yml`` (``repository.url`` and
``repository.branch``); :func:`colab_setup_source` derives the chapters' first
cell from it, and ``check-chapters`` verifies that every chapter agrees.
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import nbformat

from stablernn_tools import notebook_times, paper_claims_check
from stablernn_tools.book_config import COLAB_SETUP_TAG, REPO_ROOT, repository, toc_files

# Both set-up cells run on the site but are not shown: the page starts with its title.
HIDDEN_TAG = "remove-cell"
PARAMETERS_TAG = "parameters"
# A cell that runs or shows only the full-scale (or cpu-scale) experiments; the student
# site leaves it out when it displayed nothing (its results do not exist yet).
FULL_SCALE_TAG = "full-scale"
SMOKE_MODE_LINE = 'MODE = "smoke"'
CHAPTER_GLOB = "chapters/[0-9][0-9]_*.ipynb"
NOTEBOOK_GLOB = "chapters/**/*.ipynb"
# Cell metadata written by front ends at run time; a stored notebook keeps none of it.
RUNTIME_CELL_METADATA = ("execution", "collapsed", "scrolled", "ExecuteTime")

COLAB_SETUP_TEMPLATE = """\
# Colab setup: install the course library when it is missing, then report the runtime.
try:
    import stablernn_lib
except ImportError:
    import importlib
    import subprocess
    import sys

    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet",
         "git+{url}@{branch}"],
        check=True,
    )
    importlib.invalidate_caches()
import stablernn_lib.core.runtime

print(stablernn_lib.core.runtime.describe_runtime())"""


def colab_setup_source(url: str | None = None, branch: str | None = None) -> str:
    """The source of every chapter's first cell (tag ``colab-setup``).

    It installs ``stablernn_lib`` from ``git+url@branch`` with pip when the import
    fails (a fresh Colab runtime) and prints whether a GPU is present. Defaults
    come from ``_config.yml``.
    """
    if url is None or branch is None:
        config_url, config_branch = repository()
        url, branch = url or config_url, branch or config_branch
    return COLAB_SETUP_TEMPLATE.format(url=url, branch=branch)


def colab_setup_cell() -> nbformat.NotebookNode:
    """A new code cell holding :func:`colab_setup_source`, tagged ``colab-setup``."""
    cell = nbformat.v4.new_code_cell(colab_setup_source())
    cell.metadata["tags"] = [COLAB_SETUP_TAG, HIDDEN_TAG]
    return cell


def fix_layout(notebook: nbformat.NotebookNode) -> bool:
    """Put the current Colab cell first and the parameters cell second; returns whether it changed.

    Any older ``colab-setup`` cell is replaced. The first code cell tagged ``parameters``
    moves to position 1; both cells get the ``remove-cell`` tag, so the web page still
    starts with the chapter's title. Raises ``ValueError`` when there is no parameters cell.
    """
    cells = list(notebook.cells)
    parameters = [
        cell
        for cell in cells
        if cell.cell_type == "code" and PARAMETERS_TAG in cell.metadata.get("tags", [])
    ]
    if not parameters:
        raise ValueError(
            f"no code cell is tagged {PARAMETERS_TAG!r}; add one holding {SMOKE_MODE_LINE}"
        )
    parameter_cell = parameters[0]
    tags = parameter_cell.metadata.setdefault("tags", [])
    if HIDDEN_TAG not in tags:
        tags.append(HIDDEN_TAG)
    rest = [
        cell
        for cell in cells
        if cell is not parameter_cell and COLAB_SETUP_TAG not in cell.metadata.get("tags", [])
    ]
    old = [(cell.cell_type, cell.source, cell.metadata.get("tags")) for cell in notebook.cells]
    notebook.cells = [colab_setup_cell(), parameter_cell, *rest]
    new = [(cell.cell_type, cell.source, cell.metadata.get("tags")) for cell in notebook.cells]
    return old != new


def strip_notebook(notebook: nbformat.NotebookNode) -> bool:
    """Remove outputs, execution counts, widget state and run-time metadata in place.

    Returns whether anything changed.
    """
    changed = notebook.metadata.pop("widgets", None) is not None
    for cell in notebook.cells:
        for key in RUNTIME_CELL_METADATA:
            changed |= cell.metadata.pop(key, None) is not None
        if cell.cell_type != "code":
            continue
        if cell.get("outputs") or cell.get("execution_count") is not None:
            changed = True
        cell.outputs = []
        cell.execution_count = None
    return changed


def stripping_problems(notebook: nbformat.NotebookNode) -> list[str]:
    """What :func:`strip_notebook` would remove, one line per problem (empty when clean)."""
    problems = []
    if "widgets" in notebook.metadata:
        problems.append("notebook metadata holds widget state")
    for index, cell in enumerate(notebook.cells):
        if cell.cell_type == "code" and cell.get("outputs"):
            problems.append(f"cell {index} has outputs")
        if cell.cell_type == "code" and cell.get("execution_count") is not None:
            problems.append(f"cell {index} has an execution count")
        found = [key for key in RUNTIME_CELL_METADATA if key in cell.metadata]
        if found:
            problems.append(f"cell {index} has run-time metadata {found}")
    return problems


def chapter_layout_problems(notebook: nbformat.NotebookNode, colab_source: str) -> list[str]:
    """Check the first two cells of a chapter: the Colab cell, then the parameters cell."""
    cells = notebook.cells
    if len(cells) < 2:
        return ["a chapter needs at least the Colab cell and the parameters cell"]
    problems = []
    fix = "; fix with `python -m stablernn_tools book fix-layout NOTEBOOK`"
    colab, parameters = cells[0], cells[1]
    if colab.cell_type != "code" or COLAB_SETUP_TAG not in colab.metadata.get("tags", []):
        problems.append(f"cell 0 must be a code cell tagged {COLAB_SETUP_TAG!r}{fix}")
    if colab.source.strip() != colab_source.strip():
        problems.append(f"cell 0 differs from the Colab setup cell for _config.yml{fix}")
    if parameters.cell_type != "code" or PARAMETERS_TAG not in parameters.metadata.get("tags", []):
        problems.append(f"cell 1 must be a code cell tagged {PARAMETERS_TAG!r}{fix}")
    if SMOKE_MODE_LINE not in parameters.source:
        problems.append(f"cell 1 must set {SMOKE_MODE_LINE} (smoke mode runs by default)")
    return problems


def toc_problems(root: Path | str = REPO_ROOT) -> list[str]:
    """Files named in ``_toc.yml`` that are missing, and notebooks it does not list."""
    root = Path(root)
    listed = toc_files(root / "_toc.yml")
    problems = []
    for name in listed:
        if not any((root / f"{name}{suffix}").is_file() for suffix in (".md", ".ipynb")):
            problems.append(f"_toc.yml lists {name} but neither {name}.md nor {name}.ipynb exists")
    for notebook in sorted(root.glob(NOTEBOOK_GLOB)):
        name = notebook.relative_to(root).with_suffix("").as_posix()
        if ".ipynb_checkpoints" not in name and name not in listed:
            problems.append(f"{name}.ipynb is not listed in _toc.yml")
    return problems


def _notebook_paths(paths: Sequence[str], default_glob: str) -> list[Path]:
    if paths:
        found = [Path(path) for path in paths]
    else:
        found = sorted(REPO_ROOT.glob(default_glob))
        found = [path for path in found if ".ipynb_checkpoints" not in path.parts]
    missing = [str(path) for path in found if not path.is_file()]
    if missing:
        raise FileNotFoundError(f"no such notebook(s): {', '.join(missing)}")
    return found


def _report(problems: dict[Path, list[str]]) -> int:
    for path, lines in problems.items():
        for line in lines:
            print(f"{path}: {line}")
    return 1 if any(problems.values()) else 0


def _rewrite_notebooks(
    paths: list[Path], change: Callable[[nbformat.NotebookNode], bool], done: str
) -> int:
    """Apply ``change`` (True when it changed the notebook) to each notebook in ``paths``,
    writing back and printing ``done`` (with ``{path}``) for the changed ones."""
    for path in paths:
        notebook = nbformat.read(path, as_version=4)
        if change(notebook):
            nbformat.write(notebook, path)
            print(done.format(path=path))
    return 0


def command_strip(args: argparse.Namespace) -> int:
    paths = _notebook_paths(args.notebooks, NOTEBOOK_GLOB)
    return _rewrite_notebooks(paths, strip_notebook, "stripped {path}")


def command_check_stripped(args: argparse.Namespace) -> int:
    paths = _notebook_paths(args.notebooks, NOTEBOOK_GLOB)
    return _report({path: stripping_problems(nbformat.read(path, as_version=4)) for path in paths})


def command_check_chapters(args: argparse.Namespace) -> int:
    source = colab_setup_source()
    paths = _notebook_paths(args.notebooks, CHAPTER_GLOB)
    return _report(
        {path: chapter_layout_problems(nbformat.read(path, as_version=4), source) for path in paths}
    )


def command_check_toc(args: argparse.Namespace) -> int:
    return _report({Path("_toc.yml"): toc_problems()})


# What the notebooks import and read besides their own cells.
BUILD_INPUT_GLOBS = ("stablernn_lib/**/*.py", "data/results/**/*.json", "data/results/**/*.csv")
# Written by the test suite after the notebooks ran; no notebook reads it, and the page that
# shows it ({notebook-times}) declares it as a Sphinx dependency, so it never voids the cache.
BUILD_INPUT_EXCLUDED = frozenset({notebook_times.TIMES_FILE})
FINGERPRINT_FILE = ".build_inputs.sha256"


def build_inputs_fingerprint(root: Path = REPO_ROOT) -> str:
    """sha256 over the paths and bytes of every file matched by ``BUILD_INPUT_GLOBS``
    (except ``BUILD_INPUT_EXCLUDED``)."""
    digest = hashlib.sha256()
    for pattern in BUILD_INPUT_GLOBS:
        for path in sorted(root.glob(pattern)):
            if path.relative_to(root).as_posix() in BUILD_INPUT_EXCLUDED:
                continue
            digest.update(path.relative_to(root).as_posix().encode() + b"\0")
            digest.update(path.read_bytes())
    return digest.hexdigest()


def forget_stale_build(root: Path = REPO_ROOT, build_dir: Path | None = None) -> bool:
    """Drop executed notebooks and parsed pages if the library or the results changed.

    Jupyter Book's cache re-runs a notebook only when its cells change, and Sphinx
    re-reads a page only when its source changes: neither notices an edit of
    ``stablernn_lib`` or ``data/results``, so the book would keep outputs that
    the current code no longer produces.  Returns True if anything was dropped.
    """
    build_dir = build_dir if build_dir is not None else root / "_build"
    stamp = build_dir / FINGERPRINT_FILE
    fingerprint = build_inputs_fingerprint(root)
    if stamp.is_file() and stamp.read_text().strip() == fingerprint:
        return False
    stale = [build_dir / name for name in (".jupyter_cache", ".doctrees", "jupyter_execute")]
    dropped = [path for path in stale if path.exists()]
    for path in dropped:
        shutil.rmtree(path)
    build_dir.mkdir(parents=True, exist_ok=True)
    stamp.write_text(fingerprint + "\n")
    return bool(dropped)


def command_forget_stale_build(args: argparse.Namespace) -> int:
    if forget_stale_build():
        print("stablernn_lib or data/results changed since the last build: every notebook re-runs")
    return 0


def command_fix_layout(args: argparse.Namespace) -> int:
    paths = _notebook_paths(args.notebooks, CHAPTER_GLOB)
    return _rewrite_notebooks(paths, fix_layout, "{path}: Colab cell first, parameters cell second")


def command_colab_cell(args: argparse.Namespace) -> int:
    print(colab_setup_source())
    return 0


def command_check_claims(args: argparse.Namespace) -> int:
    """Fail if a number attributed to the paper is written without its source mark."""
    problems = paper_claims_check.markdown_problems() + paper_claims_check.library_problems()
    for problem in problems:
        print(problem)
    return 1 if problems else 0


def add_commands(parser: argparse.ArgumentParser) -> None:
    """Add the book subcommands to ``parser``."""
    commands = parser.add_subparsers(dest="book_command", required=True)
    for name, func, help_text, takes_notebooks in (
        ("strip", command_strip, "remove outputs and execution counts", True),
        ("check-stripped", command_check_stripped, "fail if a notebook has outputs", True),
        ("check-chapters", command_check_chapters, "check each chapter's first two cells", True),
        ("check-toc", command_check_toc, "check _toc.yml against the files", False),
        ("check-claims", command_check_claims, "paper numbers carry their source mark", False),
        ("colab-cell", command_colab_cell, "print the Colab setup cell", False),
        ("fix-layout", command_fix_layout, "Colab cell first, parameters second", True),
        (
            "forget-stale-build",
            command_forget_stale_build,
            "drop cached outputs if stablernn_lib or data/results changed",
            False,
        ),
    ):
        sub = commands.add_parser(name, help=help_text)
        if takes_notebooks:
            sub.add_argument("notebooks", nargs="*", help="notebooks (default: all chapters)")
        sub.set_defaults(func=func)


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``book`` to ``python -m stablernn_tools``."""
    add_commands(subparsers.add_parser("book", help="strip and check the book's notebooks"))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m stablernn_tools book", description=__doc__)
    add_commands(parser)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
