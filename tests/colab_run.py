"""The notebooks run in Colab's own environment, as the site hands them out (``make colab-test``).

Not part of ``make test`` (its environments take minutes to build the first time; the
notebooks take about as long as the book's): ``.ci/run`` runs it after ``make test``. For
each flavour of environment (``tests/colab_support.py``):

- ``colab``: Colab's Python (3.13) and Colab's versions of every package the course uses
  (``tests/colab_runtime/``). Torch is PyPI's build of Colab's version, 2.11.0, with its
  CUDA libraries (Colab's own ``+cu128`` build comes from an index this machine cannot
  reach; the course's CPU wheel of 2.13.0 exists here for Python 3.11 only): Colab's Python
  and Colab's torch were worth the 2.6 GB download, once, into the cache;
- ``newest``: the same packages at their newest releases, for Colab's next runtime,

the test checks that ``pip install`` of the library would replace none of the
environment's packages (nor, for ``colab``, any package of Colab's ``pip freeze``), runs
one notebook's setup cell by itself (it installs the library, from the wheel of this
checkout: the one change, :func:`colab_support.offline_setup_cell`), then runs every Colab
notebook of both editions whole, setup cell included, in the default smoke mode: every
cell must pass and every figure the site numbers must be drawn. A notebook whose code
cells are the same in both editions (the chapters: the editions differ in Markdown only)
runs once for both. The times go to ``_build/colab-test/times-<flavour>.json``.

The last two tests show that the check fails where it should: a notebook that imports a
package the setup cell does not install, and an install that would replace a package.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import colab_support as cs
import nbformat
import pytest
from stablernn_tools import colab_conversion as colab

DOCNAMES = colab.notebook_docnames(cs.ROOT)
EDITIONS: tuple[cs.Edition, ...] = ("student", "instructor")
OUT = cs.ROOT / "_build" / "colab-test"


@dataclass
class FlavourRun:
    """What one flavour's run found."""

    python: Path
    replaced: list[str]
    handed_out: dict[cs.Edition, dict[str, nbformat.NotebookNode]]
    results: dict[tuple[cs.Edition, str], cs.Result]


@pytest.fixture(scope="session")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return cs.build_wheel(tmp_path_factory.mktemp("wheel"))


@pytest.fixture(scope="session")
def handed_out(tmp_path_factory: pytest.TempPathFactory) -> dict[cs.Edition, dict[str, Path]]:
    return cs.site_notebooks(tmp_path_factory.mktemp("site"))


def corpora() -> Path | None:
    data = os.environ.get("STABLERNN_DATA")
    return Path(data) if data else None


@pytest.fixture(scope="module", params=["colab", "newest"])
def flavour_run(request, wheel, handed_out, tmp_path_factory) -> FlavourRun:
    flavour: cs.Flavour = request.param
    started = time.monotonic()
    python = cs.environment(flavour)
    built = time.monotonic() - started
    cs.run([python, "-m", "pip", "uninstall", "--quiet", "--yes", "stablernn_lib"])
    present = cs.installed(python)
    if flavour == "colab":
        present = {**present, **cs.colab_versions()}
    replaced = cs.replaced_packages(cs.install_report(python, wheel), present)
    folder = tmp_path_factory.mktemp(f"run-{flavour}")
    notebooks: dict[cs.Edition, dict[str, nbformat.NotebookNode]] = {}
    runs: dict[tuple[str, ...], Path] = {}  # the code cells' sources -> the notebook to run
    for edition in EDITIONS:
        for docname, path in handed_out[edition].items():
            notebook = cs.offline_setup_cell(nbformat.read(path, as_version=4), wheel)
            notebooks.setdefault(edition, {})[docname] = notebook
            code = tuple(c.source for c in notebook.cells if c.cell_type == "code")
            if code not in runs:
                runs[code] = folder / "notebooks" / f"{edition}-{docname.replace('/', '_')}.ipynb"
                runs[code].parent.mkdir(parents=True, exist_ok=True)
                nbformat.write(notebook, runs[code])
    # the setup cell by itself first: it installs the library, as on a fresh Colab runtime
    first = notebooks["student"][DOCNAMES[0]]
    setup = cs.run([python, "-c", cs.setup_cell(first)], cwd=folder)
    executed = cs.execute({p.stem: p for p in runs.values()}, python, folder / "kernel", corpora())
    results = {}
    for edition, pages in notebooks.items():
        for docname, notebook in pages.items():
            code = tuple(c.source for c in notebook.cells if c.cell_type == "code")
            results[(edition, docname)] = executed[runs[code].stem]
    OUT.mkdir(parents=True, exist_ok=True)
    times = {
        "flavour": flavour,
        "environment_s": round(built),
        "notebooks_run": len(runs),
        "total_s": round(time.monotonic() - started),
        "setup_cell": setup.stdout[-500:],
        "notebooks_s": {name: round(r.seconds) for name, r in executed.items()},
    }
    (OUT / f"times-{flavour}.json").write_text(json.dumps(times, indent=1), encoding="utf-8")
    return FlavourRun(python, replaced, notebooks, results)


def test_the_colab_environment_has_colabs_versions(flavour_run, request):
    present = cs.installed(flavour_run.python)
    versions = cs.colab_versions()
    packages = cs.course_packages()
    assert set(packages) <= set(present)
    if request.node.callspec.params["flavour_run"] == "colab":
        wrong = {p: present[p] for p in packages if present[p].split("+")[0] != versions[p]}
        assert not wrong, f"not Colab's versions ({cs.FREEZE.name}): {wrong}"


def test_installing_the_library_replaces_none_of_the_runtimes_packages(flavour_run):
    assert not flavour_run.replaced, (
        "the setup cell's `pip install` would replace: "
        + ", ".join(flavour_run.replaced)
        + "; relax the base dependencies in pyproject.toml"
    )


@pytest.mark.parametrize("edition", EDITIONS)
@pytest.mark.parametrize("docname", DOCNAMES)
def test_every_cell_passes_and_every_numbered_figure_is_drawn(flavour_run, edition, docname):
    result = flavour_run.results[(edition, docname)]
    assert not result.error, f"{edition} {docname}:\n{result.error}"
    notebook = flavour_run.handed_out[edition][docname]
    missing = cs.undrawn_figures(notebook, result.notebook)
    assert not missing, f"{edition} {docname}: numbered but not drawn: {missing}"


# --- the check fails where it should -------------------------------------------------------


def test_a_notebook_importing_what_the_setup_cell_does_not_install_fails(tmp_path, wheel):
    """MyST-NB is in the book's extra, not in Colab: a notebook that imports it fails."""
    python = cs.environment("colab")
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("import math")])
    notebook.cells[0].metadata["tags"] = [cs.COLAB_SETUP_TAG]
    notebook.cells[0].source = f'# install\nURL = "git+https://example.org/x@{"0" * 40}"'
    notebook.cells.append(nbformat.v4.new_code_cell("from myst_nb import glue"))
    path = tmp_path / "synthetic.ipynb"
    nbformat.write(cs.offline_setup_cell(notebook, wheel), path)
    assert str(wheel) in nbformat.read(path, as_version=4).cells[0].source
    (result,) = cs.execute({"synthetic": path}, python, tmp_path / "kernel", None).values()
    assert "ModuleNotFoundError" in result.error and "myst_nb" in result.error


def test_an_install_that_would_replace_a_colab_package_is_found(tmp_path):
    """A package requiring a newer ipywidgets than Colab's (the library's old pin) is caught:
    its dry run installs ipywidgets over Colab's 7.7.1. Offline: both are local wheels."""
    python = cs.environment("colab")
    links = tmp_path / "links"
    for name, version, requires in (
        ("fake_course", "1.0", '["ipywidgets>=8.1"]'),
        ("ipywidgets", "8.1.99", "[]"),
    ):
        source = tmp_path / name
        source.mkdir()
        (source / "pyproject.toml").write_text(
            '[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n'
            f'[project]\nname = "{name}"\nversion = "{version}"\ndependencies = {requires}\n'
            "[tool.setuptools]\npy-modules = []\n",
            encoding="utf-8",
        )
        cs.run([python, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                "-w", links, source])  # fmt: skip
    fake = next(links.glob("fake_course-*.whl"))
    report = cs.install_report(python, "--no-index", "--find-links", links, fake)
    present = {**cs.installed(python), **cs.colab_versions()}
    assert cs.replaced_packages(report, present) == ["ipywidgets 7.7.1 -> 8.1.99"]
    shutil.rmtree(links)
