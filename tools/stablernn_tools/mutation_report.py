"""The mutation-testing report: what ``make mutants`` (mutmut) found, per module.

mutmut keeps one verdict per mutant in ``mutants/<module>.py.meta`` (the exit code of
the test run: 1 = a test failed, the mutant is *killed*; 0 = every test passed, it
*survived*; 33 = no test covers it; 36 = stopped by mutmut's timeout, counted as
detected; ``null`` = not run yet).  ``mutants/`` is not committed, so each module's
verdicts are also kept in ``data/results/mutation_verdicts.json``
(``{module: {"commit", "date", "mutmut", "mutants", "counts", "survivors", ...}}``):
the counts per verdict, each survivor's name with its diff (``null`` when unknown), the
names not run yet, the commit whose version of the module was mutated and, for a module
moved since (``git mv``, its functions unchanged), ``path``: its source path at that
commit.  A module's row comes from its meta file when mutmut has run any of its mutants
there (and the committed record is rewritten from it), otherwise from the committed record,
so a fresh checkout reproduces the table.  Survivors that cannot be killed are listed with the
reason in ``data/results/mutation_accepted.json`` (``{mutant name: reason}``).

Kill rate of a module = (killed + timed out) / (run - accepted as equivalent).
``python -m stablernn_tools mutation-report`` writes ``data/results/mutation_report.json``
and ``data/results/mutation_report.md``.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import datetime
import importlib.metadata
import json
import subprocess
from pathlib import Path
from typing import Any

import tomllib

from stablernn_lib.core.io import atomic_write_json

ACCEPTED = Path("data/results/mutation_accepted.json")
VERDICTS = Path("data/results/mutation_verdicts.json")  # committed copy of mutmut's verdicts
NOTES = Path("data/results/mutation_notes.md")  # how the run was done, appended when present
OUT = Path("data/results/mutation_report")


def mutated_modules(pyproject: Path = Path("pyproject.toml")) -> list[str]:
    """The ``only_mutate`` files of ``[tool.mutmut]`` as dotted module names."""
    config = tomllib.loads(pyproject.read_text(encoding="utf8"))["tool"]["mutmut"]
    return [p.removesuffix(".py").replace("/", ".") for p in config["only_mutate"]]


# mutmut 3's exit codes (mutmut.stats.status_by_exit_code), as the report counts them;
# any other code (segfault, suspicious) is "other", which does not count as detected.
_VERDICTS = {1: "killed", 3: "killed", 37: "killed", 0: "survived", 5: "no tests",
             33: "no tests", 34: "skipped", 36: "timeout", -24: "timeout", 24: "timeout",
             152: "timeout", 255: "timeout"}  # fmt: skip
_UNDETECTED = ("survived", "no tests")


def verdict(exit_code: int | None) -> str:
    """mutmut's exit code as ``killed``, ``timeout``, ``survived``, ``no tests``,
    ``skipped``, ``other`` or ``not run``."""
    if exit_code is None:
        return "not run"
    return _VERDICTS.get(exit_code, "other")


def source_path(module: str) -> Path:
    """``pkg.sub.mod`` -> ``pkg/sub/mod.py``."""
    return Path(module.replace(".", "/") + ".py")


def read_meta(module: str, mutants_dir: Path) -> dict[str, int | None]:
    """mutmut's exit codes of the module's mutants; empty when mutmut has run none."""
    meta = mutants_dir / source_path(module).with_suffix(".py.meta")
    if not meta.is_file():
        return {}
    codes = json.loads(meta.read_text(encoding="utf8"))["exit_code_by_key"]
    return codes if any(code is not None for code in codes.values()) else {}


def _git(*args: str) -> str:
    result = subprocess.run(["git", *args], capture_output=True, text=True, check=False)
    return result.stdout.strip() if result.returncode == 0 else ""


def code_commit(module: str) -> str:
    """The commit of the module's source as it is on disk (``+local changes`` if edited)."""
    path = str(source_path(module))
    commit = _git("log", "-1", "--format=%h", "--", path) or "unknown"
    return commit + ("+local changes" if _git("status", "--porcelain", "--", path) else "")


def _top_level_functions(source: str, names: set[str]) -> str:
    """The source of the named top-level functions, decorators included, one after another."""
    lines = source.splitlines()
    chunks = []
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name in names:
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            chunks.append("\n".join(lines[first - 1 : node.end_lineno]))
    return "\n\n\n".join(chunks) + "\n"


def _without_docstrings(source: str) -> str:
    """``source`` with every module, class and function docstring removed, as ``ast.unparse``
    writes it (comments dropped)."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if not isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        if node.body and isinstance(node.body[0], ast.Expr):
            value = node.body[0].value
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                node.body = node.body[1:] or [ast.Pass()]
    return ast.unparse(tree) + "\n"


def _pragmas(source: str) -> list[str]:
    """The lines that carry a ``# pragma:`` comment (mutmut's ``no mutate``)."""
    return [line.strip() for line in source.splitlines() if "pragma:" in line]


def recorded_path(module: str, record: dict[str, Any]) -> str:
    """The module's source path at the record's commit: ``record["path"]`` for a moved module."""
    return record.get("path", str(source_path(module)))


def mutants_unchanged(module: str, commit: str, path_then: str | None = None) -> bool:
    """Whether mutmut makes the same mutants of ``module`` at ``commit`` as on disk: the same
    mutant names and the same hash of every mutated function, mutmut's own test of which
    verdicts to reset when a module changes, compared without docstrings (an edit of a
    docstring, of a comment or of a decorated function, which mutmut does not mutate, keeps
    every mutant).

    Functions whose syntax tree is unchanged make the same mutants, so only the changed
    top-level functions are mutated (the whole module when a method changed).  ``path_then``:
    the module's path at ``commit`` when it moved since (default: its path now).
    """
    from mutmut.mutation.file_mutation import compute_function_hashes, mutate_file_contents

    path = str(source_path(module))
    then_path = path_then or path
    shown = subprocess.run(["git", "show", f"{commit}:{then_path}"], capture_output=True, text=True)
    if shown.returncode != 0:
        return False
    then_text, now_text = shown.stdout, Path(path).read_text(encoding="utf8")
    if _pragmas(then_text) != _pragmas(now_text):  # mutmut skips the lines they mark
        return False
    # docstrings make no mutant and change no mutant's behaviour: compared without them
    then_source, now_source = (_without_docstrings(text) for text in (then_text, now_text))
    then_hashes, now_hashes = (compute_function_hashes(s) for s in (then_source, now_source))
    changed = {k for k in then_hashes.keys() | now_hashes.keys()
               if then_hashes.get(k) != now_hashes.get(k)}  # fmt: skip
    if not changed:
        return True
    if all(key.startswith("x_") and "\u01c1" not in key for key in changed):  # top-level only
        names = {key.removeprefix("x_") for key in changed}
        then_source, now_source = (
            _top_level_functions(s, names) for s in (then_source, now_source)
        )
    then, now = (mutate_file_contents(path, s) for s in (then_source, now_source))
    return (list(then.mutant_names), then.hash_by_function_name) == (
        list(now.mutant_names),
        now.hash_by_function_name,
    )


def record_from_codes(
    codes: dict[str, int | None], commit: str, date: str, previous: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The committed record of one module's verdicts (diffs kept from ``previous``)."""
    verdicts = {name: verdict(code) for name, code in codes.items()}
    counts = {v: list(verdicts.values()).count(v) for v in sorted(set(verdicts.values()))}
    previous = previous or {}
    old_diffs = previous.get("survivors", {}) if previous.get("commit") == commit else {}
    record: dict[str, Any] = {
        "commit": commit,
        "date": date,
        "mutmut": importlib.metadata.version("mutmut"),
        "mutants": len(codes),
        "counts": counts,
        "survivors": {n: old_diffs.get(n) for n in sorted(verdicts) if verdicts[n] in _UNDETECTED},
    }
    not_run = sorted(n for n, v in verdicts.items() if v == "not run")
    if not_run:
        record["not_run"] = not_run
    return record


def summarize(
    module: str, record: dict[str, Any] | None, accepted: dict[str, str]
) -> dict[str, Any]:
    """Counts, status, kill rate and explained survivors of one module's record."""
    if record is None:
        return {"module": module, "status": "not run"}
    counts = record["counts"]
    run = record["mutants"] - counts.get("not run", 0)
    equivalent = [n for n in record["survivors"] if n in accepted]
    detected = counts.get("killed", 0) + counts.get("timeout", 0)
    denominator = run - len(equivalent)
    status = "complete" if run == record["mutants"] else ("not run" if run == 0 else "partial")
    return {
        "module": module,
        "status": status,
        "commit": record["commit"],
        "date": record["date"],
        "mutants": record["mutants"],
        "counts": counts,
        "accepted": len(equivalent),
        "kill_rate": detected / denominator if denominator else None,
        "survivors": {n: accepted.get(n, "NOT EXPLAINED") for n in record["survivors"]},
    }


def fill_diffs(module: str, record: dict[str, Any], mutants_dir: Path) -> None:
    """Add the diff of each survivor that has none, from mutmut's mutated copy in
    ``mutants_dir`` (named ``mutants``), when the source is still the record's commit's."""
    missing = [n for n, d in record["survivors"].items() if not d]
    path, commit = source_path(module), record["commit"]
    if not missing or not (mutants_dir / path).is_file():
        return
    unchanged = ["git", "diff", "--quiet", commit, "--", str(path)]
    same_code = commit == code_commit(module) or (
        "+" not in commit and subprocess.run(unchanged, capture_output=True).returncode == 0
    )
    if not same_code:
        return
    from mutmut.mutation.diff_apply import get_diff_for_mutant

    with contextlib.chdir(mutants_dir.parent):  # mutmut reads ./mutants
        for name in missing:
            try:
                diff = get_diff_for_mutant(name, path=path)
            except Exception:  # noqa: BLE001 - a mutant mutmut no longer generates: no diff
                continue
            lines = [ln for ln in diff.splitlines() if not ln.startswith(("---", "+++"))]
            record["survivors"][name] = "\n".join(lines) or None


def markdown(summaries: list[dict[str, Any]], diffs: dict[str, str | None]) -> str:
    """The report as Markdown: a table per module, then every survivor with its reason
    (and its diff, when ``diffs`` has one)."""
    lines = [
        "# Mutation testing of the math (mutmut)",
        "",
        "Written by `python -m stablernn_tools mutation-report` from mutmut's verdicts.",
        "Kill rate = (killed + timed out) / (mutants run - survivors accepted as equivalent).",
        "'code at' is the commit whose version of the module was mutated.",
        "",
        "| module | status | code at | mutants | killed | timeout | survived | no tests "
        "| not run | accepted | kill rate |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for s in summaries:
        if "counts" not in s:
            lines.append(f"| {s['module']} | not run | | | | | | | | | |")
            continue
        c = s["counts"]
        rate = "n/a" if s["kill_rate"] is None else f"{100 * s['kill_rate']:.1f} %"
        lines.append(
            f"| {s['module']} | {s['status']} | {s['commit']} ({s['date']}) | {s['mutants']} | "
            f"{c.get('killed', 0)} | {c.get('timeout', 0)} | {c.get('survived', 0)} | "
            f"{c.get('no tests', 0)} | {c.get('not run', 0)} | {s['accepted']} | {rate} |"
        )
    for s in summaries:
        if s.get("survivors"):
            lines += ["", f"## Survivors in {s['module']}", ""]
            for name, reason in s["survivors"].items():
                lines.append(f"- `{name}`: {reason}")
                if diffs.get(name):
                    lines += ["", "  ```diff", *("  " + d for d in diffs[name].splitlines()),
                              "  ```"]  # fmt: skip
    return "\n".join(lines) + "\n"


def _load(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf8")) if path.is_file() else {}


def _report(args: argparse.Namespace) -> int:
    accepted, records = _load(ACCEPTED), _load(VERDICTS)
    modules = args.modules or mutated_modules()
    for module in modules:
        codes = read_meta(module, args.mutants)
        if codes:
            meta = args.mutants / source_path(module).with_suffix(".py.meta")
            mtime = datetime.datetime.fromtimestamp(meta.stat().st_mtime, datetime.UTC)
            records[module] = record_from_codes(
                codes, code_commit(module), f"{mtime:%Y-%m-%d %H:%M} UTC", records.get(module)
            )
        if module in records and not args.no_diffs:
            fill_diffs(module, records[module], args.mutants)
    atomic_write_json(VERDICTS, dict(sorted(records.items())))
    summaries = [summarize(m, records.get(m), accepted) for m in modules]
    atomic_write_json(OUT.with_suffix(".json"), {"modules": summaries})
    diffs = {n: d for r in records.values() for n, d in r["survivors"].items()}
    text = markdown(summaries, diffs)
    if NOTES.is_file():
        text += "\n" + NOTES.read_text(encoding="utf8")
    tmp = OUT.with_suffix(".md.tmp")
    tmp.write_text(text, encoding="utf8")
    tmp.replace(OUT.with_suffix(".md"))
    print(text)
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``mutation-report`` to ``python -m stablernn_tools``."""
    parser = subparsers.add_parser("mutation-report", help=__doc__.splitlines()[0])
    parser.add_argument("--mutants", type=Path, default=Path("mutants"))
    parser.add_argument("--no-diffs", action="store_true", help="do not look up missing diffs")
    parser.add_argument(
        "--modules", nargs="+", help="dotted module names (default: only_mutate of pyproject)"
    )
    parser.set_defaults(func=_report)
