"""Hand-written "formula" mutants of every bound, run against the value tests.

mutmut's operators change one token at a time; a reviewer of the proofs makes other
mistakes: a factor the proof needs dropped, a geometric-series denominator removed, one
term of a sum halved or doubled.  Such a bound can become *smaller* than the proof's and
still hold on the instances a test draws, so only a test of the bound's value kills it.

Each mutant below replaces one exact snippet of one module (the snippet must occur once,
so a mutant that no longer applies is reported, never silently skipped).  The edits are
made in a temporary copy of ``stablernn_lib/`` and ``tests/``, never in the working tree;
the copy's unmutated tests must pass first (the baseline).  A mutant is *killed* when
pytest fails (exit code 1) on the copy; exit code 0 is a survivor; any other code
(collection error, usage) is an error, which counts as not killed.

``python -m stablernn_tools formula-mutants`` (``make formula-mutants``) writes
``data/results/formula_mutants.json`` and exits 1 unless every mutant is killed.
"""

from __future__ import annotations

import argparse
import datetime
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stablernn_lib.core.io import atomic_write_json

OUT = Path("data/results/formula_mutants.json")
VALUE_TESTS = ("tests/test_formula_values.py", "tests/test_bound_values.py")


@dataclass(frozen=True)
class FormulaMutant:
    """Replace ``old`` (once in ``path``) by ``new``; ``tests`` must then fail."""

    name: str
    path: str
    kind: str
    old: str
    new: str
    tests: tuple[str, ...] = VALUE_TESTS


_B, _WC = "stablernn_lib/core/bounds.py", "stablernn_lib/theory/weights_close.py"
_EV, _GL = "stablernn_lib/theory/eventual_stability.py", "stablernn_lib/theory/general_lemmas.py"
_LS, _DS = "stablernn_lib/theory/lstm_certificate.py", "stablernn_lib/theory/diagonal_scaling.py"
_LSTM_TESTS = ("tests/test_lstm_stability.py",)
_TIGHT_TESTS = ("tests/test_tightness.py",)

MUTANTS: tuple[FormulaMutant, ...] = (
    # core.bounds: Lemma 1, the state bound, the loss constants, Lemmas 2 and 3
    FormulaMutant("state bound without 1 / (1 - lambda)", _B, "drop a denominator",
                  "return lx * bx / (1 - lam)", "return lx * bx"),
    FormulaMutant("state bound with 1 / (1 - lambda^2)", _B, "change a denominator",
                  "return lx * bx / (1 - lam)", "return lx * bx / (1 - lam**2)"),
    FormulaMutant("Lemma 1 without lambda^k", _B, "drop a factor",
                  "return lam**k * state_norm_bound(lam, lx, bx)",
                  "return state_norm_bound(lam, lx, bx)"),
    FormulaMutant("Lemma 1 with lambda^(k+1)", _B, "change an exponent",
                  "return lam**k * state_norm_bound(lam, lx, bx)",
                  "return lam ** (k + 1) * state_norm_bound(lam, lx, bx)"),
    FormulaMutant("Lemma 1 context for eps / 2", _B, "halve a term",
                  "while lemma1_truncation_bound(lam, lx, bx, k) > eps:",
                  "while lemma1_truncation_bound(lam, lx, bx, k) > 2 * eps:"),
    FormulaMutant("L_p without the target norm", _B, "drop a term of a sum",
                  "return state_bound + target_norm, 1.0", "return state_bound, 1.0"),
    FormulaMutant("B_z = B_h", _B, "drop a term of a sum",
                  "return math.hypot(state_norm_bound(lam, lx, bx), bx)",
                  "return state_norm_bound(lam, lx, bx)"),
    FormulaMutant("gamma: second-derivative term halved", _B, "halve a term",
                  "error_terms = c.l2_rho * c.lp * bh / (c.l_rho * (1 - c.lam))",
                  "error_terms = 0.5 * c.l2_rho * c.lp * bh / (c.l_rho * (1 - c.lam))"),
    FormulaMutant("gamma: tail without 1 / (1 - lambda)", _B, "drop a denominator",
                  "tail = c.l_rho * c.lp / (1 - c.lam)", "tail = c.l_rho * c.lp"),
    FormulaMutant("gamma: last term without 1 / lambda", _B, "drop a denominator",
                  "+ c.l_rho * c.lp * bh / c.lam", "+ c.l_rho * c.lp * bh"),
    FormulaMutant("gamma: without the factor B_z", _B, "drop a factor",
                  "return bz * (error_terms + tail)", "return (error_terms + tail)"),
    FormulaMutant("beta: (1 - lambda)^3 as (1 - lambda)^2", _B, "drop a denominator",
                  "+ c.lam * c.l2_rho * c.lp * bz**2 / gap**3",
                  "+ c.lam * c.l2_rho * c.lp * bz**2 / gap**2"),
    FormulaMutant("beta: last term halved", _B, "halve a term",
                  "+ 2 * c.l_rho**2 * c.lp * bz / gap**2", "+ c.l_rho**2 * c.lp * bz / gap**2"),
    FormulaMutant("beta: L_rho^2 as L_rho", _B, "drop a factor",
                  "(c.l2_rho * c.lp + c.l_rho**2 * c.sp)", "(c.l2_rho * c.lp + c.l_rho * c.sp)"),
    FormulaMutant("Lemma 2 right side without k", _B, "drop a factor",
                  "return gamma * k * lam**k", "return gamma * lam**k"),
    # theory.weights_close: Proposition 2, its recurrence, Theorem 1
    FormulaMutant("Proposition 2 without k", _WC, "drop a factor",
                  "_log10(alpha * gamma * k)", "_log10(alpha * gamma)"),
    FormulaMutant("Proposition 2: N^(alpha beta) for N^(alpha beta + 1)", _WC,
                  "drop a term of a sum",
                  "(alpha * beta + 1) * math.log10(num_steps)",
                  "(alpha * beta) * math.log10(num_steps)"),
    FormulaMutant("Proposition 2: alpha beta halved", _WC, "halve a term",
                  "(alpha * beta + 1) * math.log10(num_steps)",
                  "(alpha * beta / 2 + 1) * math.log10(num_steps)"),
    FormulaMutant("recurrence: growth alpha beta halved", _WC, "halve a term",
                  "np.log1p(steps * beta)", "np.log1p(steps * beta / 2)"),
    FormulaMutant("exact decay solution without 1 / beta", _WC, "drop a denominator",
                  "math.log(gradient_gap / beta)", "math.log(gradient_gap)"),
    FormulaMutant("Theorem 1 without the denominator 1 - lambda", _WC, "drop a denominator",
                  "l_rho * bh * weight_distance / (1 - lam)", "l_rho * bh * weight_distance"),
    FormulaMutant("Theorem 1 without L_rho", _WC, "drop a factor",
                  "return l_rho * bh * weight_distance / (1 - lam) +",
                  "return bh * weight_distance / (1 - lam) +"),
    FormulaMutant("Theorem 1 without B_h", _WC, "drop a factor",
                  "return l_rho * bh * weight_distance / (1 - lam) +",
                  "return l_rho * weight_distance / (1 - lam) +"),
    FormulaMutant("Theorem 1: truncation term halved", _WC, "halve a term",
                  "+ lemma1_truncation_bound(lam, lx, bx, k)",
                  "+ 0.5 * lemma1_truncation_bound(lam, lx, bx, k)"),
    FormulaMutant("Figure 1 constants: L_x without L_rho", _WC, "drop a factor",
                  "lx = l_rho * spectral_norm(instance.start.weight_ih)\n"
                  "    bx = float(instance.train",
                  "lx = spectral_norm(instance.start.weight_ih)\n    bx = float(instance.train"),
    FormulaMutant("Figure 1 Theorem 1 row: B_x of the training inputs", _WC, "wrong constant",
                  "bx = float(instance.test_inputs.norm(dim=-1).max())",
                  "bx = float(instance.train_inputs.norm(dim=-1).max())"),
    # theory.eventual_stability: Lemma 1 under eventual stability
    FormulaMutant("eventual Lemma 1 without kappa", _EV, "drop a factor",
                  "return kappa * bounds.lemma1_truncation_bound(lam, lx, bx, k)",
                  "return bounds.lemma1_truncation_bound(lam, lx, bx, k)"),
    FormulaMutant("eventual Lemma 1 with sqrt(kappa)", _EV, "change a factor",
                  "return kappa * bounds.lemma1_truncation_bound(lam, lx, bx, k)",
                  "return kappa**0.5 * bounds.lemma1_truncation_bound(lam, lx, bx, k)"),
    FormulaMutant("eventual Lemma 1 halved", _EV, "halve a term",
                  "return kappa * bounds.lemma1_truncation_bound(lam, lx, bx, k)",
                  "return kappa * bounds.lemma1_truncation_bound(lam, lx, bx, k) / 2"),
    FormulaMutant("telescoping closed form without 1 / (1 - lambda)", _EV, "drop a denominator",
                  "(1 - lam ** (t - k)) / (1 - lam)", "(1 - lam ** (t - k))"),
    FormulaMutant("telescoping closed form without lambda^(t-k)", _EV, "drop a term of a sum",
                  "(1 - lam ** (t - k)) / (1 - lam)", "1 / (1 - lam)"),
    # theory.general_lemmas: the LSTM weight-Lipschitz constant
    FormulaMutant("LSTM L_w without the C^2 / 16 of the cell", _GL, "drop a term of a sum",
                  "cell = math.sqrt(1 / 16 + 1 + cell_bound**2 / 16)",
                  "cell = math.sqrt(1 / 16 + 1)", ("tests/test_general_lemmas.py", *VALUE_TESTS)),
    FormulaMutant("LSTM L_w: B_zeta without the bias 1", _GL, "drop a term of a sum",
                  "math.sqrt(hidden_size + input_size * input_bound**2 + 1)\n    cell =",
                  "math.sqrt(hidden_size + input_size * input_bound**2)\n    cell =",
                  ("tests/test_general_lemmas.py", *VALUE_TESTS)),
    # theory.lstm_certificate: the LSTM certificate
    FormulaMutant("LSTM cell box without 1 / (1 - f_max)", _LS, "drop a denominator",
                  "cell_bound = input_max * candidate_max / (1 - forget_max)",
                  "cell_bound = input_max * candidate_max", _LSTM_TESTS),
    FormulaMutant("LSTM coupling A: forget term halved", _LS, "halve a term",
                  "+ (slope[\"f\"] * cell_bound)[:, None] * W[\"f\"]",
                  "+ 0.5 * (slope[\"f\"] * cell_bound)[:, None] * W[\"f\"]", _LSTM_TESTS),
    FormulaMutant("LSTM coupling G: output-gate term dropped", _LS, "drop a term of a sum",
                  "G = output_max[:, None] * A + (slope",
                  "G = output_max[:, None] * A + 0 * (slope", _LSTM_TESTS),
    FormulaMutant("LSTM matrix: o f entry without f", _LS, "drop a factor",
                  "[float((output_max * forget_max).max()), induced_norm(G, p)]",
                  "[float(output_max.max()), induced_norm(G, p)]", _LSTM_TESTS),
    FormulaMutant("LSTM gate radius: input term doubled", _LS, "double a term",
                  "r = {g: W[g].sum(dim=1) + input_bound * U[g].sum(dim=1) for g in GATES}",
                  "r = {g: W[g].sum(dim=1) + 2 * input_bound * U[g].sum(dim=1) for g in GATES}",
                  _LSTM_TESTS),
    # theory.necessity, core.contraction, core.gradients, theory.diagonal_scaling
    FormulaMutant("necessity lower bound with 1 / (k + 1)", "stablernn_lib/theory/necessity.py",
                  "change an exponent", "(gap / state_bound) ** (1.0 / k)",
                  "(gap / state_bound) ** (1.0 / (k + 1))", ("tests/test_necessity.py",)),
    FormulaMutant("contraction constant without L_rho", "stablernn_lib/core/contraction.py",
                  "drop a factor",
                  "return activation_lipschitz(model.activation) * spectral_norm(model.weight_hh)",
                  "return spectral_norm(model.weight_hh)", ("tests/test_stability.py",)),
    FormulaMutant("Jacobian product bound without gamma", "stablernn_lib/core/gradients.py",
                  "drop a factor", "return (gamma * weight_norm) ** lags.to(torch.float64)",
                  "return weight_norm ** lags.to(torch.float64)"),
    FormulaMutant("diagonal certificate without L_rho", _DS, "drop a factor",
                  "lam=l_rho * scaled_norm,", "lam=scaled_norm,"),
    FormulaMutant("diagonal certificate's spectral radius without L_rho", _DS, "drop a factor",
                  "spectral_radius=l_rho * radius,", "spectral_radius=radius,"),
    FormulaMutant("diagonal certificate: condition inverted", _DS, "wrong constant",
                  "condition=float(scales.max() / scales.min()),",
                  "condition=float(scales.min() / scales.max()),"),
    # theory.one_unit: the folds
    FormulaMutant("one-unit folds at sqrt(1 - 2/w)", "stablernn_lib/theory/one_unit.py",
                  "halve a term", "root = math.sqrt(1.0 - 4.0 / w)",
                  "root = math.sqrt(1.0 - 2.0 / w)"),
    # tasks.wikitext2.model: the certificate of the WikiText-2 projection
    FormulaMutant("spectral-norm certificate: root 1/q for 1/2q",
                  "stablernn_lib/tasks/wikitext2/model.py", "drop a factor",
                  "(log_norm / 2 ** (squarings + 1)).exp()", "(log_norm / 2**squarings).exp()"),
    FormulaMutant("spectral-norm certificate without the rounding slack",
                  "stablernn_lib/tasks/wikitext2/model.py", "drop a factor",
                  ".exp() * (1 + _BOUND_SLACK)", ".exp()"),
    # theory.tightness: the worst case of Proposition 2
    FormulaMutant("Proposition 2 worst case: gap halved", "stablernn_lib/theory/tightness.py",
                  "halve a term", "step * (beta * w_truncated + gap)",
                  "step * (beta * w_truncated + gap / 2)", _TIGHT_TESTS),
    # symbolic.lemma_algebra: the expressions the value tests compare with
    FormulaMutant("sympy beta: (1 - lambda)^3 as (1 - lambda)^2",
                  "stablernn_lib/symbolic/lemma_algebra.py", "drop a denominator",
                  "+ lam * L2_rho * Lp * Bz**2 / (1 - lam) ** 3",
                  "+ lam * L2_rho * Lp * Bz**2 / (1 - lam) ** 2"),
)  # fmt: skip


def _copy_tree(root: Path, destination: Path) -> None:
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in ("stablernn_lib", "tests"):
        shutil.copytree(root / name, destination / name, ignore=ignore)
    for name in ("pyproject.toml", "_config.yml"):
        if (root / name).is_file():
            shutil.copy2(root / name, destination / name)
    (destination / "data").mkdir()
    if (root / "data" / "results").is_dir():
        shutil.copytree(root / "data" / "results", destination / "data" / "results")


def _pytest(copy: Path, tests: tuple[str, ...]) -> tuple[int, float, str]:
    env = os.environ | {"PYTHONPATH": str(copy), "PYTHONDONTWRITEBYTECODE": "1",
                        "OMP_NUM_THREADS": "1"}  # fmt: skip
    command = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests]
    start = time.perf_counter()
    result = subprocess.run(command, cwd=copy, env=env, capture_output=True, text=True)
    failed = [ln for ln in result.stdout.splitlines() if ln.startswith("FAILED")]
    return result.returncode, time.perf_counter() - start, failed[0] if failed else ""


def _verdict(returncode: int) -> str:
    return {0: "survived", 1: "killed"}.get(returncode, "error")


def _commit(root: Path) -> str:
    result = subprocess.run(["git", "-C", str(root), "log", "-1", "--format=%h"],
                            capture_output=True, text=True, check=False)  # fmt: skip
    dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--",
                            *sorted({m.path for m in MUTANTS}), "tests"],
                           capture_output=True, text=True, check=False).stdout  # fmt: skip
    return (result.stdout.strip() or "unknown") + ("+local changes" if dirty.strip() else "")


def run(root: Path, mutants: tuple[FormulaMutant, ...] = MUTANTS) -> dict[str, Any]:
    """Apply each mutant to a temporary copy of ``root`` and run its tests."""
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="formula-mutants-") as tmp:
        copy = Path(tmp)
        _copy_tree(root, copy)
        all_tests = tuple(sorted({t for m in mutants for t in m.tests}))
        baseline, seconds, failed = _pytest(copy, all_tests)
        if baseline != 0:
            raise RuntimeError(f"the unmutated tests fail in the copy ({failed or baseline})")
        for mutant in mutants:
            source = copy / mutant.path
            original = source.read_text(encoding="utf8")
            count = original.count(mutant.old)
            row: dict[str, Any] = {"name": mutant.name, "module": mutant.path,
                                   "kind": mutant.kind, "old": mutant.old, "new": mutant.new,
                                   "tests": list(mutant.tests)}  # fmt: skip
            if count != 1:
                row |= {"verdict": "not applied", "detail": f"snippet found {count} times"}
                rows.append(row)
                continue
            source.write_text(original.replace(mutant.old, mutant.new), encoding="utf8")
            try:
                code, took, first_failure = _pytest(copy, mutant.tests)
            finally:
                source.write_text(original, encoding="utf8")
            row |= {"verdict": _verdict(code), "seconds": round(took, 1),
                    "first_failure": first_failure}  # fmt: skip
            rows.append(row)
            print(f"{row['verdict']:>11}  {mutant.name}  ({took:.1f} s)", flush=True)
    counts = {v: sum(r["verdict"] == v for r in rows) for v in sorted({r["verdict"] for r in rows})}
    return {
        "commit": _commit(root),
        "date": f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC",
        "baseline": {"tests": list(all_tests), "passed": True, "seconds": round(seconds, 1)},
        "mutants": len(rows),
        "counts": counts,
        "all_killed": counts.get("killed", 0) == len(rows),
        "rows": rows,
    }


def _run(args: argparse.Namespace) -> int:
    chosen = tuple(m for m in MUTANTS if args.only is None or args.only in m.name)
    if not chosen:
        raise ValueError(f"no mutant name contains {args.only!r}: give part of a mutant's name")
    result = run(Path.cwd(), chosen)
    if args.only is None:
        atomic_write_json(args.out, result)
    print(f"{result['counts']} of {result['mutants']} formula mutants")
    return 0 if result["all_killed"] else 1


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``formula-mutants`` to ``python -m stablernn_tools``."""
    parser = subparsers.add_parser("formula-mutants", help=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--only", help="run only the mutants whose name contains this text")
    parser.set_defaults(func=_run)
