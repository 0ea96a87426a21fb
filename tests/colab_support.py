"""Colab's runtime rebuilt on this machine, and the notebooks run in it as the site hands them out.

- :func:`environment` builds (once, then reuses) a virtual environment with Colab's Python
  (``tests/colab_runtime/os-info-gpu.txt``) and Colab's versions of the packages the course
  uses (``packages.txt``, at the versions of ``pip-freeze.gpu.txt``; every package they pull
  in at its Colab version too), or, for the ``newest`` flavour, the newest release of each.
  Torch: Colab installs ``torch==2.11.0+cu128`` from PyTorch's own index, which this machine
  cannot reach; the environment gets PyPI's build of the same version (its CUDA 13 libraries,
  unused on a CPU, 2.6 GB to download, about 4 minutes and 4.6 GB in all, measured). The
  folder is ``$STABLERNN_COLAB_CACHE`` (default ``~/.cache/stablernn_lib/colab-env``, outside
  the checkout), one subfolder per flavour and hash of the runtime files and install
  commands.
- :func:`replaced_packages` reads ``pip install --dry-run --report`` of the library: a
  package it would install over one of Colab's is a replacement.
- :func:`site_notebooks` writes both editions' Colab notebooks as the site does
  (``stablernn_tools.colab_conversion``; the student edition from ``python -m stablernn_tools
  student-edition``), without a Sphinx build.
- :func:`offline_setup_cell` is the ONE change made to a notebook as handed out: its setup
  cell's ``pip install git+URL@COMMIT`` installs the wheel built from this checkout instead
  (there is no network here). Everything else runs unchanged, setup cell included.
- :func:`execute` runs notebooks in a kernel of that environment, two at a time (one torch
  thread each, where Colab runs one notebook on its two cores), in a folder outside the
  checkout (as Colab's ``/content``).
- :func:`undrawn_figures` lists the numbered figures (a "**Figure N.**" caption cell) whose
  cell drew no image: no image output, and no image in the widget it displayed.
"""

from __future__ import annotations

import datetime
import glob
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import install_support
import nbformat
from book_support import KERNEL_ENV
from stablernn_tools import colab_conversion as colab
from stablernn_tools.book_config import COLAB_SETUP_TAG

ROOT = Path(__file__).resolve().parents[1]
RUNTIME = ROOT / "tests" / "colab_runtime"
FREEZE = RUNTIME / "pip-freeze.gpu.txt"
OS_INFO = RUNTIME / "os-info-gpu.txt"
PACKAGES = RUNTIME / "packages.txt"
CACHE_VARIABLE = "STABLERNN_COLAB_CACHE"
# Outside the checkout: inside, the book's tools would copy and scan its gigabytes.
USER_CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
DEFAULT_CACHE = USER_CACHE / "stablernn_lib" / "colab-env"
PYTHON_VARIABLE = "STABLERNN_COLAB_PYTHON"
Flavour = Literal["colab", "newest"]
Edition = Literal["student", "instructor"]
# Colab's CUDA 12.8 libraries; PyPI's torch brings its own (CUDA 13), so these are not pinned.
CUDA_LIBRARIES = re.compile(r"^(nvidia-|cuda-|triton$)")
# The setup cell's install target, as stablernn_tools.colab_conversion writes it.
GIT_INSTALL = re.compile(r"\"git\+https://[^\"\s]+@[\w./-]+\"")
CAPTION = re.compile(r"^\*\*Figure (?P<number>[\d.]+)\.\*\*")
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"


def run(command: Sequence[str | Path], **options: Any) -> subprocess.CompletedProcess[str]:
    """``command`` run to completion; its output in the error when it fails."""
    options.setdefault("timeout", 3600)
    result = subprocess.run(
        [str(c) for c in command], capture_output=True, text=True, check=False, **options
    )
    if result.returncode != 0:
        raise RuntimeError(
            f"{' '.join(map(str, command))} failed ({result.returncode}):\n"
            f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
        )
    return result


def canonical(name: str) -> str:
    """A distribution's name as pip compares them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def colab_versions(freeze: Path = FREEZE) -> dict[str, str]:
    """``{name: version}`` of every package of Colab's ``pip freeze`` (local versions such as
    ``+cu128`` dropped; "" for a package installed from a URL)."""
    versions = {}
    for line in freeze.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, pinned, version = line.partition("==")
        if pinned:
            versions[canonical(name)] = version.split("+")[0]
        else:
            versions[canonical(line.partition(" @ ")[0])] = ""
    return versions


def course_packages(path: Path = PACKAGES) -> list[str]:
    """The packages of Colab's runtime that the course uses (``packages.txt``)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    return [canonical(line.strip()) for line in lines if line.strip() and line[0] != "#"]


def colab_python_version(os_info: Path = OS_INFO) -> str:
    """``"3.13"``: the Python of Colab's runtime, from ``os-info-gpu.txt``."""
    found = re.search(r"^Python (\d+\.\d+)\.\d+", os_info.read_text(encoding="utf-8"), re.M)
    if found is None:
        raise ValueError(f"{os_info} names no Python version; refresh it from backend-info")
    return found.group(1)


def find_python(version: str) -> Path:
    """An interpreter of Python ``version``: ``$STABLERNN_COLAB_PYTHON``, ``python3.X`` on the
    PATH, or pyenv's newest ``3.X.*``."""
    given = os.environ.get(PYTHON_VARIABLE)
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    candidates = [given] if given else [shutil.which(f"python{version}")]
    if not given:
        candidates += sorted(glob.glob(f"{pyenv}/{version}.*/bin/python{version}"), reverse=True)
    for candidate in filter(None, candidates):
        check = subprocess.run(
            [candidate, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        if check.returncode == 0 and check.stdout.strip() == version:
            return Path(candidate)
    raise FileNotFoundError(
        f"Colab runs Python {version} ({OS_INFO.name}) and no Python {version} was found: "
        f"install it (e.g. `pyenv install {version}`) or set {PYTHON_VARIABLE} to its python"
    )


def install_commands(flavour: Flavour, constraints: Path) -> list[list[str]]:
    """The ``pip`` argument lists that fill a new environment of ``flavour``."""
    packages = course_packages()
    if flavour == "newest":
        first = ["install", "--quiet", "--upgrade"]
        return [[*first, "pip"], [*first, "torch"], [*first, *packages]]
    versions = colab_versions()
    missing = [p for p in packages if not versions.get(p)]
    if missing:
        raise ValueError(f"{FREEZE.name} pins no version of {missing}; fix {PACKAGES.name}")
    rest = [f"{p}=={versions[p]}" for p in packages if p not in ("pip", "torch")]
    return [
        ["install", "--quiet", f"pip=={versions['pip']}"],
        ["install", "--quiet", f"torch=={versions['torch']}"],
        ["install", "--quiet", "--constraint", str(constraints), *rest],
    ]


def _constraints_text() -> str:
    """Colab's version of every package but torch and its CUDA libraries."""
    versions = colab_versions()
    return "".join(
        f"{name}=={version}\n"
        for name, version in sorted(versions.items())
        if version and name != "torch" and not CUDA_LIBRARIES.match(name)
    )


def environment(flavour: Flavour) -> Path:
    """The python of the cached ``flavour`` environment, built first if missing.

    The ``newest`` flavour is also keyed by the ISO week, so that it follows new releases."""
    cache = Path(os.environ.get(CACHE_VARIABLE) or DEFAULT_CACHE)
    version = colab_python_version()
    placeholder = Path("CONSTRAINTS")
    key = hashlib.sha256()
    for path in (FREEZE, OS_INFO, PACKAGES):
        key.update(path.read_bytes())
    key.update(json.dumps([flavour, version, install_commands(flavour, placeholder)]).encode())
    if flavour == "newest":
        key.update(datetime.date.today().strftime("%G-W%V").encode())
    folder = cache / f"{flavour}-{key.hexdigest()[:16]}"
    python = folder / "bin" / "python"
    if (folder / "complete.json").is_file():
        return python
    for old in cache.glob(f"{flavour}-*"):  # an environment of older runtime files
        shutil.rmtree(old, ignore_errors=True)
    started = time.monotonic()
    run([find_python(version), "-m", "venv", folder])
    constraints = folder / "colab-constraints.txt"
    constraints.write_text(_constraints_text(), encoding="utf-8")
    for command in install_commands(flavour, constraints):
        run([python, "-m", "pip", *command])
    record = {"seconds": round(time.monotonic() - started), "packages": installed(python)}
    (folder / "complete.json").write_text(json.dumps(record, indent=1), encoding="utf-8")
    return python


def installed(python: Path) -> dict[str, str]:
    """``{name: version}`` of every package of the environment of ``python``."""
    listed = json.loads(run([python, "-m", "pip", "list", "--format", "json"]).stdout)
    return {canonical(p["name"]): p["version"] for p in listed}


def install_report(python: Path, *requirements: str | Path) -> dict[str, Any]:
    """``pip install --dry-run --report`` of ``requirements`` into the environment of ``python``."""
    command = [python, "-m", "pip", "install", "--dry-run", "--quiet", "--report", "-"]
    return json.loads(run([*command, *requirements]).stdout)


def replaced_packages(report: dict[str, Any], present: dict[str, str]) -> list[str]:
    """Each package the install of ``report`` would put over one of ``present``
    (``{name: version}``, "" for an unknown version), as "name old -> new"."""
    found = []
    for item in report.get("install", []):
        name = canonical(item["metadata"]["name"])
        new = item["metadata"]["version"]
        if name in present and present[name] != new:
            found.append(f"{name} {present[name] or '(from a URL)'} -> {new}")
    return found


def build_wheel(out: Path) -> Path:
    """The library's wheel, built from a copy of the working tree's build files in ``out``
    (setuptools' ``build/`` folder lands there, not in the checkout)."""
    return install_support.build_wheel(install_support.build_source(out / "source"), out / "wheel")


def site_notebooks(out: Path) -> dict[Edition, dict[str, Path]]:
    """``{edition: {docname: notebook}}``: the Colab notebook of every notebook page, as the
    site's download and Colab buttons hand them out (the student edition converted from
    ``homework student-edition``'s folder, the instructor edition from the book itself)."""
    student_root = ROOT / "_build" / "colab-test" / "student"  # in the checkout: its commit
    run([sys.executable, "-m", "stablernn_tools", "student-edition", "--out",
         student_root], cwd=ROOT)  # fmt: skip
    written: dict[Edition, dict[str, Path]] = {}
    for edition, root in (("student", student_root), ("instructor", ROOT)):
        paths = colab.write_colab_notebooks(root, out / edition, edition)
        written[edition] = {
            p.relative_to(out / edition).with_suffix("").as_posix(): p for p in paths
        }
    return written


def offline_setup_cell(notebook: nbformat.NotebookNode, wheel: Path) -> nbformat.NotebookNode:
    """``notebook`` with its setup cell installing ``wheel`` where it installs
    ``git+URL@COMMIT``: the only change the Colab test makes to a notebook."""
    setup = [c for c in notebook.cells if COLAB_SETUP_TAG in c.metadata.get("tags", [])]
    if len(setup) != 1 or len(GIT_INSTALL.findall(setup[0].source)) != 1:
        raise ValueError(
            f"expected one setup cell (tag {COLAB_SETUP_TAG!r}) installing one git+ URL; "
            f"found {len(setup)} setup cells"
        )
    setup[0].source = GIT_INSTALL.sub(json.dumps(str(wheel)), setup[0].source)
    return notebook


def setup_cell(notebook: nbformat.NotebookNode) -> str:
    """The source of the notebook's setup cell."""
    return next(c.source for c in notebook.cells if COLAB_SETUP_TAG in c.metadata.get("tags", []))


DRIVER = """
import sys, nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError
notebook = nbformat.read(sys.argv[1], as_version=4)
client = NotebookClient(notebook, timeout=1800, kernel_name="colab",
                        resources={"metadata": {"path": sys.argv[2]}})
status = 0
try:
    client.execute()
except CellExecutionError as error:
    print(str(error)[-6000:], file=sys.stderr)
    status = 1
nbformat.write(notebook, sys.argv[1])
sys.exit(status)
"""


def kernel_environment(python: Path, folder: Path, data: Path | None) -> dict[str, str]:
    """The process environment of a notebook run: a kernel spec ``colab`` for ``python``,
    nothing of the test environment (no PYTHONPATH, no widget or backend setting), and one
    thread per kernel as in the book's runs (two notebooks share the two cores; with two
    threads each, chapters 8 and 9 took 1296 s and 961 s on a loaded machine)."""
    spec = folder / "kernels" / "colab"
    spec.mkdir(parents=True, exist_ok=True)
    argv = [str(python), "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    kernel = {"argv": argv, "display_name": "Colab runtime", "language": "python"}
    (spec / "kernel.json").write_text(json.dumps(kernel), encoding="utf-8")
    dropped = ("PYTHONPATH", "VIRTUAL_ENV", "STABLERNN_WIDGETS", "MPLBACKEND", "STABLERNN_DATA")
    env = {k: v for k, v in os.environ.items() if k not in dropped}
    env.update(KERNEL_ENV, JUPYTER_PATH=str(folder))
    if data is not None:  # Colab downloads the corpora; this machine has them on disk
        env["STABLERNN_DATA"] = str(data)
    return env


@dataclass
class Result:
    """One executed notebook: its outputs, the error text ("" when every cell passed), time."""

    notebook: nbformat.NotebookNode
    error: str
    seconds: float


def execute(
    notebooks: dict[str, Path], python: Path, folder: Path, data: Path | None, jobs: int = 2
) -> dict[str, Result]:
    """Run every notebook (``{name: path}``, rewritten with its outputs) in a kernel of
    ``python``, ``jobs`` at a time, each in its own working folder under ``folder``."""
    env = kernel_environment(python, folder, data)

    def one(item: tuple[str, Path]) -> tuple[str, Result]:
        name, path = item
        workdir = folder / "content" / name.replace("/", "_")
        workdir.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-c", DRIVER, str(path), str(workdir)],
            capture_output=True, text=True, env=env, cwd=workdir, timeout=3600, check=False,
        )  # fmt: skip
        error = "" if done.returncode == 0 else (done.stderr[-6000:] or done.stdout[-3000:])
        notebook = nbformat.read(path, as_version=4)
        return name, Result(notebook, error, time.monotonic() - started)

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        return dict(pool.map(one, sorted(notebooks.items())))


def _widget_images(model: str, state: dict[str, Any], seen: set[str]) -> bool:
    """Whether the widget ``model`` or a widget inside it shows an image."""
    if model in seen or model not in state:
        return False
    seen.add(model)
    entry = state[model]
    fields = entry.get("state", {})
    if entry.get("model_name") == "ImageModel":
        return True
    frame = '<img src="data:image/' in fields.get("value", "")
    if entry.get("model_name") == "HTMLModel" and frame:
        return True  # a precomputed frame: the image inline, with its alt text
    outputs = fields.get("outputs", []) if entry.get("model_name") == "OutputModel" else []
    if any(k.startswith("image/") for o in outputs for k in o.get("data", {})):
        return True
    inside = json.dumps(fields)
    return any(_widget_images(m, state, seen) for m in re.findall(r"IPY_MODEL_([0-9a-f]+)", inside))


def draws_image(cell: nbformat.NotebookNode, widgets: dict[str, Any]) -> bool:
    """Whether a code cell displayed an image, directly or in a widget."""
    for output in cell.get("outputs", []):
        if output.output_type not in colab.DISPLAYED_OUTPUTS:
            continue
        if any(kind.startswith("image/") for kind in output.data):
            return True
        view = output.data.get(WIDGET_VIEW)
        if view and _widget_images(view["model_id"], widgets, set()):
            return True
    return False


def undrawn_figures(notebook: nbformat.NotebookNode, executed: nbformat.NotebookNode) -> list[str]:
    """The numbered figures of ``notebook`` (a "**Figure N.**" caption cell under a code cell)
    whose code cell, in the run ``executed`` (matched by cell id), drew no image."""
    cells = {c.id: c for c in executed.cells if c.cell_type == "code"}
    widgets = executed.metadata.get("widgets", {}).get(WIDGET_STATE, {}).get("state", {})
    missing, previous = [], None
    for cell in notebook.cells:
        caption = CAPTION.match(cell.source) if cell.cell_type == "markdown" else None
        if caption and (previous is None or not draws_image(cells[previous], widgets)):
            missing.append(f"Figure {caption['number']}")
        if cell.cell_type == "code":
            previous = cell.id
    return missing


def numbered_figures(notebook: nbformat.NotebookNode) -> int:
    """How many numbered figure captions ``notebook`` holds."""
    return sum(bool(CAPTION.match(c.source)) for c in notebook.cells if c.cell_type == "markdown")
