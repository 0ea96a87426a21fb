"""``data/results/value_tests.md`` keeps its promise: every test it names exists, every row
names a function that exists, and no bound, constant or certificate of a mutated module is
left out, and each function of a mutated module is pinned by a test that mutmut runs.

The rule for "left out": a public function (no leading underscore) at the top level of a
module in ``[tool.mutmut] only_mutate`` (``pyproject.toml``), or a public method or property
of a public class there (listed as ``Class.method``), whose own name (not its class's)
contains one of ``bound``, ``constant``, ``certif``, ``gamma``, ``beta``, ``lipschitz``,
``smoothness``, ``threshold`` or ``slack`` must have a row.  Exempt are names with a word
``table``/``tables``, ``format`` or ``experiment`` between underscores: Markdown renderers
of values that have rows, and experiment drivers whose numbers come from functions that
have rows.  Checked against the modules, the rule also catches measured Lipschitz
ratios (``empirical_lipschitz``, ``pair_lipschitz``, ``lipschitz_ratio``), the authors'
constraint set and ``constant_input_growth`` (a growth rate): they have rows too.  It is a
floor, not the inventory: bounds named otherwise (``lemma1_context``,
``LSTMConstraint.matrix``, ``decay_recurrence_solution_log10`` ...) are in
``NAMED_OTHERWISE`` and must keep their rows; the table may list more (e.g. ``symbolic/``
and ``core/norms.py``, which are not mutated).
"""

from __future__ import annotations

import ast
import re
import sys
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TABLE = ROOT / "data" / "results" / "value_tests.md"
NAME_RULE = re.compile(r"bound|constant|certif|gamma|beta|lipschitz|smoothness|threshold|slack")
EXEMPT = re.compile(r"(^|_)(tables?|format|experiment)(_|$)")
# bounds, constants and certificates of the mutated modules whose names the rule misses
NAMED_OTHERWISE = {
    "core/bounds.py": {"lemma1_context"},
    "core/contraction.py": {"jacobian_norms"},
    "theory/general_lemmas.py": {"solved_recursions", "fixed_point_split"},
    "theory/tightness.py": {"lemma3_linear_unit_ratio", "proposition2_worst_case"},
    "theory/lstm_certificate.py": {
        "LSTMConstraint.matrix", "LSTMCertificate.unweighted_lam", "induced_norm",
        "course_lstm_constraint", "stable_lstm_constraint", "measured_contraction",
    },
    "theory/necessity.py": {
        "contraction_context_solution", "attracting_fixed_point", "fixed_point_slope",
    },
    "theory/eventual_stability.py": {"telescoping_sum_identity", "fixed_point_spectral_radius"},
    "theory/weights_close.py": {
        "decay_recurrence_solution_log10", "symbolic_recurrence_solution", "theorem1_table",
    },
    "theory/one_unit.py": {"saddle_nodes"},
}  # fmt: skip
TEST_ID = re.compile(r"`(tests/[\w/]+\.py)::(test_\w+)(?:\[[^\]`]*\])?`")


def _caught(name: str) -> bool:
    """Whether a function's (or a method's own) name says it is a bound, constant or certificate."""
    return bool(NAME_RULE.search(name.lower())) and not EXEMPT.search(name.lower())


def _rows() -> list[list[str]]:
    """The table's data rows as lists of cells (the header and the rule line dropped)."""
    lines = [line for line in TABLE.read_text().splitlines() if line.startswith("| ")]
    cells = [[cell.strip() for cell in line.strip().strip("|").split("|")] for line in lines]
    assert cells[0] == [
        "module", "function", "what it returns", "value test(s)", "independent computation",
    ]  # fmt: skip
    return [row for row in cells[1:] if not set(row[0]) <= {"-", ":"}]


@cache
def _public_names(module: Path) -> frozenset[str]:
    """Top-level public functions and ``Class.method`` of public classes (properties too)."""
    names = set()
    for node in ast.parse(module.read_text()).body:
        if isinstance(node, ast.FunctionDef) and not node.name.startswith("_"):
            names.add(node.name)
        if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
            names.update(
                f"{node.name}.{sub.name}"
                for sub in node.body
                if isinstance(sub, ast.FunctionDef) and not sub.name.startswith("_")
            )
    return frozenset(names)


def _test_names(path: Path) -> set[str]:
    """``def test_...`` names of a test file (a parametrized test counts by its base name)."""
    return {
        node.name
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.name.startswith("test_")
    }


def _mutmut_config() -> dict:
    """``[tool.mutmut]`` of ``pyproject.toml``."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mutmut"]


def _mutated_modules() -> list[str]:
    """The ``only_mutate`` modules as paths under ``stablernn_lib/``."""
    return [module.removeprefix("stablernn_lib/") for module in _mutmut_config()["only_mutate"]]


def test_every_row_has_five_cells_a_real_function_and_at_least_one_test():
    rows = _rows()
    assert len(rows) >= 60
    for row in rows:
        assert len(row) == 5, row
        module, function, returns, tests, computation = row
        path = ROOT / "stablernn_lib" / module
        assert path.is_file(), f"{module}: no such module"
        assert function in _public_names(path), f"{module} has no public {function}"
        assert returns and computation, row
        assert TEST_ID.search(tests), f"{function}: no test id in {tests!r}"
    pairs = [(row[0], row[1]) for row in rows]
    assert len(pairs) == len(set(pairs)), "a function is listed twice"


def test_every_test_the_table_names_exists():
    cache: dict[str, set[str]] = {}
    missing = []
    for row in _rows():
        ids = TEST_ID.findall(row[3])
        # every backticked entry of the column is a well-formed test id
        assert len(ids) == row[3].count("`") // 2, row[3]
        for file, name in ids:
            if file not in cache:
                path = ROOT / file
                cache[file] = _test_names(path) if path.is_file() else set()
            if name not in cache[file]:
                missing.append(f"{file}::{name}")
    assert not missing, f"value_tests.md names tests that do not exist: {missing}"


@pytest.mark.parametrize("module", _mutated_modules())
def test_every_bound_constant_and_certificate_of_a_mutated_module_is_listed(module):
    listed = {row[1] for row in _rows() if row[0] == module}
    by_rule = {
        name
        for name in _public_names(ROOT / "stablernn_lib" / module)
        if _caught(name.rsplit(".", 1)[-1])
    }
    required = by_rule | NAMED_OTHERWISE.get(module, set())
    assert not required - listed, f"{module}: add rows to value_tests.md for {required - listed}"


def test_the_rule_catches_the_known_bounds_and_exempts_the_renderers():
    """The rule itself, on names of the modules: a bound, a constant, a certificate and a
    Lipschitz estimate match; a table, a formatter and an experiment driver are exempt."""

    for name in ("lemma1_truncation_bound", "rnn_constants", "diagonal_certificate",
                 "lemma2_gamma", "general_beta", "pair_lipschitz", "activation_smoothness",
                 "forget_gate_threshold", "product_bound_slack", "certify_stable_rnn_",
                 "UniformCertificate.state_bound"):  # fmt: skip
        assert _caught(name.rsplit(".", 1)[-1]), name
    for name in ("certificate_table", "format_certificate", "smoothness_experiment",
                 "bound_tables", "truncated_states", "project_stable_",
                 "stable_lstm_constraint"):  # fmt: skip
        assert not _caught(name), name


def test_every_mutated_function_is_pinned_by_a_test_that_mutmut_runs():
    """A value test kills a mutant only if it is in ``pytest_add_cli_args_test_selection``."""
    selection = set(_mutmut_config()["pytest_add_cli_args_test_selection"])
    mutated = set(_mutated_modules())
    unpinned = [
        f"{row[0]}::{row[1]}"
        for row in _rows()
        if row[0] in mutated and not {file for file, _ in TEST_ID.findall(row[3])} & selection
    ]
    assert not unpinned, f"no value test of these runs under mutmut: {unpinned}"
