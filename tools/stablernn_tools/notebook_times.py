"""How long each notebook of the book runs in smoke mode: recorded by the tests, shown in the book.

The test suite (``tests/book_support.py``) executes every notebook of ``_toc.yml`` once in
smoke mode and measures the kernel's CPU time and the wall time of each. :func:`write_times`
keeps them in ``data/results/notebook_times.json`` with the machine (cores, torch threads),
the 1-minute load average when each notebook finished, the date and the git commit.
The instructor page shows them through the directive ``{notebook-times}``, which renders
:func:`times_markdown`: one row per notebook of ``_toc.yml``, saying "not measured yet"
for a notebook the file does not hold and "changed since" for one whose source differs
from the measured commit. The times are benchmarks, recorded and shown, never limits.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
TIMES_FILE = "data/results/notebook_times.json"
WHAT = (
    "CPU and wall seconds of each notebook of the book, run once in smoke mode by the test "
    "suite (tests/book_support.py, as `make test` runs it); load_average_1min is the "
    "machine's 1-minute load average when the notebook finished. Benchmarks, not limits: "
    "no test fails on a time, and a loaded machine stretches both."
)


def kernel_torch_threads(env: dict[str, str] | None = None) -> int | None:
    """``torch.get_num_threads()`` in a fresh Python with this process's environment updated
    by ``env``, as a notebook kernel starts (the test process may have set its own count)."""
    command = [sys.executable, "-c", "import torch; print(torch.get_num_threads())"]
    try:
        result = subprocess.run(
            command,
            capture_output=True,
            text=True,
            check=True,
            timeout=300,
            env={**os.environ, **(env or {})},
        )
        return int(result.stdout.strip())
    except (OSError, subprocess.SubprocessError, ValueError):
        return None


def machine(kernel_env: dict[str, str] | None = None, in_parallel: int = 1) -> dict[str, Any]:
    """The machine and thread settings the notebook kernels ran with: this process's
    environment updated by ``kernel_env``, ``in_parallel`` notebooks at a time."""
    env = {**os.environ, **(kernel_env or {})}
    return {
        "cpu_count": os.cpu_count(),
        "torch_threads": kernel_torch_threads(kernel_env),
        "omp_num_threads": env.get("OMP_NUM_THREADS", "unset"),
        "notebooks_in_parallel": in_parallel,
        "platform": f"{platform.system()} {platform.machine()}",
    }


def times_record(
    times: dict[str, dict[str, Any]],
    kernel_env: dict[str, str] | None = None,
    in_parallel: int = 1,
) -> dict[str, Any]:
    """The file's content for ``times`` (``{notebook: {cpu_s, wall_s, load_average_1min,
    error}}``, as the test suite measures them, ``in_parallel`` at a time with
    ``kernel_env`` in each kernel's environment): a notebook that failed keeps no time."""
    from stablernn_lib.core.io import provenance

    notebooks: dict[str, dict[str, Any]] = {}
    for name, record in times.items():
        if record.get("error"):
            lines = str(record["error"]).strip().splitlines() or ["failed"]
            notebooks[name] = {"error": lines[-1][:300]}
        else:
            keys = ("cpu_s", "wall_s", "load_average_1min")
            notebooks[name] = {key: record[key] for key in keys if key in record}
    described = machine(kernel_env, in_parallel)
    record = provenance()  # its device names this process's threads; the kernels' instead:
    record["device"] = f"cpu ({described['platform']}, {described['torch_threads']} threads)"
    return {"what": WHAT, "machine": described, "notebooks": notebooks, "provenance": record}


def write_times(
    times: dict[str, dict[str, Any]],
    root: Path = REPO_ROOT,
    kernel_env: dict[str, str] | None = None,
    in_parallel: int = 1,
) -> Path:
    """Write :func:`times_record` of ``times`` to ``root / TIMES_FILE`` atomically."""
    from stablernn_lib.core.io import atomic_write_json

    record = times_record(times, kernel_env, in_parallel)
    return atomic_write_json(Path(root) / TIMES_FILE, record)


def read_times(root: Path = REPO_ROOT) -> dict[str, Any] | None:
    """The recorded times, or None when the file does not exist."""
    path = Path(root) / TIMES_FILE
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def changed_since(commit: str, paths: list[str], root: Path = REPO_ROOT) -> set[str] | None:
    """Which of ``paths`` differ between ``commit`` and the working tree of ``root``'s
    repository; None when git cannot tell (no repository, unknown or missing commit)."""
    commit = commit.removesuffix("-dirty")
    if not commit or commit == "unknown" or not paths:
        return None
    try:
        changed = subprocess.run(
            ["git", "-C", str(root), "diff", "--name-only", commit, "--"]
            + [f":(top){path}" for path in paths],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        ).stdout.split()
    except (OSError, subprocess.SubprocessError):
        return None
    return set(changed) & set(paths)


def _seconds(value: float | None) -> str:
    return "" if value is None else f"{value:.1f}"


def _machine_text(record: dict[str, Any]) -> str:
    described = record.get("machine")
    device = record.get("provenance", {}).get("device", "")
    if isinstance(described, dict):
        return (
            f"{described.get('cpu_count', '?')} CPU cores ({described.get('platform', '?')}), "
            f"torch {described.get('torch_threads', '?')} threads "
            f"(OMP_NUM_THREADS {described.get('omp_num_threads', '?')}), "
            f"{described.get('notebooks_in_parallel', 1)} notebook(s) at a time"
        )
    # files written before the machine was recorded as fields
    return f"{described or 'a machine not recorded'}, torch on {device or 'unrecorded threads'}"


def times_markdown(root: Path = REPO_ROOT, toc_notebooks: list[str] | None = None) -> str:
    """A Markdown (MyST) table of every notebook of ``_toc.yml`` with its smoke-mode times.

    Rows: wall and CPU seconds and the load average as recorded, or "not measured yet";
    a note when the notebook failed in the measured run or changed since its commit.
    Under the table: the total, the machine, the date and the commit of the measurement.
    """
    from stablernn_tools.book_config import toc_files

    root = Path(root)
    if toc_notebooks is None:
        names = [f"{name}.ipynb" for name in toc_files(root / "_toc.yml")]
        toc_notebooks = [name for name in names if (root / name).is_file()]
    record = read_times(root) or {}
    measured = record.get("notebooks", {})
    provenance = record.get("provenance", {})
    commit = str(provenance.get("git_commit", "unknown"))
    changed = changed_since(commit, [name for name in toc_notebooks if name in measured], root)
    lines = [
        "| notebook | wall (s) | CPU (s) | load (1 min) | note |",
        "| --- | ---: | ---: | ---: | --- |",
    ]
    wall_total = cpu_total = 0.0
    counted = 0
    for name in toc_notebooks:
        docname = name.removesuffix(".ipynb")
        link = f"{{doc}}`{Path(docname).name} </{docname}>`"
        entry = measured.get(name)
        if entry is None:
            lines.append(f"| {link} | | | | not measured yet |")
            continue
        if entry.get("error"):
            lines.append(f"| {link} | | | | failed in the measured run |")
            continue
        note = "changed since the measurement" if changed and name in changed else ""
        load = entry.get("load_average_1min")
        lines.append(
            f"| {link} | {_seconds(entry.get('wall_s'))} | {_seconds(entry.get('cpu_s'))} "
            f"| {'–' if load is None else f'{load:.1f}'} | {note} |"
        )
        wall_total += entry.get("wall_s", 0.0)
        cpu_total += entry.get("cpu_s", 0.0)
        counted += 1
    lines.append(
        f"| **total** ({counted} of {len(toc_notebooks)} measured) | **{wall_total:.0f}** "
        f"| **{cpu_total:.0f}** | | |"
    )
    if not record:
        where = f"Not measured yet: `{TIMES_FILE}` does not exist (the test suite writes it)."
    else:
        when = provenance.get("created_utc", "")
        try:
            when = datetime.fromisoformat(when).strftime("%Y-%m-%d %H:%M UTC")
        except ValueError:
            when = when or "an unrecorded date"
        where = (
            f"Measured on {when} at git commit `{commit[:12]}`"
            f"{' (with uncommitted changes)' if commit.endswith('-dirty') else ''}, "
            f"on {_machine_text(record)}; torch {provenance.get('torch', '?')}, "
            f"Python {provenance.get('python', '?')}."
        )
        if not any("load_average_1min" in entry for entry in measured.values()):
            where += " The load average was not recorded in this measurement (–)."
        if changed is None:
            where += " Whether the notebooks changed since that commit could not be checked."
        elif changed:
            where += (
                f" {len(changed)} of the {counted} measured notebooks changed since that "
                'commit ("changed since the measurement"): their times may no longer hold.'
            )
    if any(name.startswith("chapters/homework/") for name in toc_notebooks):
        where += " A homework notebook is timed in its student edition, as a student runs it."
    return "\n".join(lines) + "\n\n" + where + "\n"


def setup_sphinx(app) -> None:
    """Register the directive ``{notebook-times}`` (called by
    ``stablernn_tools.sphinx_extension.setup``).

    The page is re-read whenever the times file changes (a Sphinx dependency).
    """
    from docutils import nodes
    from docutils.statemachine import StringList
    from sphinx.util.docutils import SphinxDirective

    class NotebookTimesDirective(SphinxDirective):
        """The table of :func:`times_markdown` for the book being built."""

        has_content = False

        def run(self):
            root = Path(self.env.srcdir)
            self.env.note_dependency(str(root / TIMES_FILE))
            container = nodes.container(classes=["notebook-times"])
            text = times_markdown(root)
            self.state.nested_parse(StringList(text.splitlines()), self.content_offset, container)
            return [container]

    app.add_directive("notebook-times", NotebookTimesDirective)
