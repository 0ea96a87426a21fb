"""The mutation-testing report: what ``make mutants`` (mutmut) found, per module.

mutmut keeps one verdict per mutant in ``mutants/<module>.py.meta`` (exit code of the
test run: 1 = a test failed, the mutant is *killed*; 0 = every test passed, it
*survived*; 5 = no test covers it; negative = stopped by mutmut's timeout, counted as
detected; ``null`` = not run yet).  Survivors that cannot be killed are listed with
the reason in ``data/results/mutation_accepted.json`` (``{mutant name: reason}``).
A module none of whose mutants was run falls back to ``data/results/mutation_earlier.json``
(``{module: {"run_as": old name, "commit": ..., "summary": ...}}``): verdicts of an
earlier run, labelled in the report with the commit and the name the module had then.

Kill rate of a module = (killed + timed out) / (run - accepted as equivalent).
``python -m stablernn_lib.book.mutation_report`` writes ``data/results/mutation_report.json``
and ``data/results/mutation_report.md``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
from pathlib import Path
from typing import Any

import tomllib

from stablernn_lib.core.io import atomic_write_json

ACCEPTED = Path("data/results/mutation_accepted.json")
EARLIER = Path("data/results/mutation_earlier.json")  # verdicts of runs not redone
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


def verdict(exit_code: int | None) -> str:
    """mutmut's exit code as ``killed``, ``timeout``, ``survived``, ``no tests``,
    ``skipped``, ``other`` or ``not run``."""
    if exit_code is None:
        return "not run"
    return _VERDICTS.get(exit_code, "other")


def module_summary(
    module: str,
    mutants_dir: Path,
    accepted: dict[str, str],
    earlier: dict[str, dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """Counts and survivors of one module.

    When mutmut has run none of its mutants (no meta file, or every verdict null): the
    ``earlier`` run's summary (with ``run_as`` and ``commit``) when there is one.
    """
    meta = mutants_dir / (module.replace(".", "/") + ".py.meta")
    codes = (
        json.loads(meta.read_text(encoding="utf8"))["exit_code_by_key"] if meta.is_file() else {}
    )
    if all(code is None for code in codes.values()) and earlier and module in earlier:
        e = earlier[module]
        return {**e["summary"], "module": module, "run_as": e["run_as"], "commit": e["commit"]}
    if not codes:
        return {"module": module, "status": "not run"}
    verdicts = {name: verdict(code) for name, code in codes.items()}
    counts = {v: sum(1 for x in verdicts.values() if x == v) for v in set(verdicts.values())}
    survivors = sorted(n for n, v in verdicts.items() if v in ("survived", "no tests"))
    run = len(codes) - counts.get("not run", 0)
    equivalent = [n for n in survivors if n in accepted]
    detected = counts.get("killed", 0) + counts.get("timeout", 0)
    denominator = run - len(equivalent)
    return {
        "module": module,
        "status": "complete" if run == len(codes) else ("not run" if run == 0 else "partial"),
        "mutants": len(codes),
        "counts": counts,
        "accepted": len(equivalent),
        "kill_rate": detected / denominator if denominator else None,
        "survivors": {n: accepted.get(n, "NOT EXPLAINED") for n in survivors},
    }


def _diff(name: str) -> str:
    result = subprocess.run(
        ["mutmut", "show", name], capture_output=True, text=True, check=False, timeout=60
    )
    lines = [line for line in result.stdout.splitlines() if line.startswith(("-", "+"))]
    return "\n".join(line for line in lines if not line.startswith(("---", "+++")))


def markdown(summaries: list[dict[str, Any]], with_diffs: bool) -> str:
    """The report as Markdown: a table per module, then every survivor with its reason."""
    lines = [
        "# Mutation testing of the math (mutmut)",
        "",
        "Written by `python -m stablernn_lib.book.mutation_report` from mutmut's verdicts.",
        "Kill rate = (killed + timed out) / (mutants run - survivors accepted as equivalent).",
        "",
        "| module | status | mutants | killed | timeout | survived | no tests | not run "
        "| accepted | kill rate |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for s in summaries:
        if s["status"] == "not run" and "counts" not in s:
            lines.append(f"| {s['module']} | not run | | | | | | | | |")
            continue
        c = s["counts"]
        rate = "n/a" if s["kill_rate"] is None else f"{100 * s['kill_rate']:.1f} %"
        status = s["status"]
        if "commit" in s:
            status += f" (earlier run, at {s['commit']}, as `{s['run_as']}`)"
        lines.append(
            f"| {s['module']} | {status} | {s['mutants']} | {c.get('killed', 0)} | "
            f"{c.get('timeout', 0)} | {c.get('survived', 0)} | {c.get('no tests', 0)} | "
            f"{c.get('not run', 0)} | {s['accepted']} | {rate} |"
        )
    for s in summaries:
        if s.get("survivors"):
            lines += ["", f"## Survivors in {s['module']}", ""]
            if "commit" in s:
                lines += [
                    f"Earlier run at {s['commit']}, when the module was `{s['run_as']}`; "
                    "the mutant names are mutmut's from then.",
                    "",
                ]
            for name, reason in s["survivors"].items():
                lines.append(f"- `{name}`: {reason}")
                if with_diffs and "commit" not in s:
                    lines += ["", "  ```diff", *("  " + d for d in _diff(name).splitlines()),
                              "  ```"]  # fmt: skip
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mutants", type=Path, default=Path("mutants"))
    parser.add_argument("--no-diffs", action="store_true", help="skip `mutmut show` per survivor")
    parser.add_argument(
        "--modules", nargs="+", help="dotted module names (default: only_mutate of pyproject)"
    )
    args = parser.parse_args(argv)
    accepted = json.loads(ACCEPTED.read_text(encoding="utf8")) if ACCEPTED.is_file() else {}
    earlier = json.loads(EARLIER.read_text(encoding="utf8")) if EARLIER.is_file() else {}
    modules = args.modules or mutated_modules()
    summaries = [module_summary(m, args.mutants, accepted, earlier) for m in modules]
    atomic_write_json(OUT.with_suffix(".json"), {"modules": summaries})
    text = markdown(summaries, with_diffs=not args.no_diffs)
    if NOTES.is_file():
        text += "\n" + NOTES.read_text(encoding="utf8")
    tmp = OUT.with_suffix(".md.tmp")
    tmp.write_text(text, encoding="utf8")
    tmp.replace(OUT.with_suffix(".md"))
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
