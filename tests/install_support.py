"""Installing the course as it is deployed, cheaply, without exposing this checkout.

- :func:`build_source`, :func:`course_repository`: a copy of the files a build of the
  library reads, taken from this working tree (uncommitted changes included), and a git
  repository of them with its commit;
- :func:`dependencies_folder`: a folder of links to the packages of this checkout's
  ``.venv`` (torch, numpy, IPython, ...) less every entry of the course library (its
  editable finder and ``.pth`` point at the checkout), for a fresh environment to
  reach through one ``.pth`` file instead of installing 2 GB again;
- :func:`fresh_environment`: ``python -m venv`` with that ``.pth`` file; :func:`build_wheel`
  (the library's, or the grader's from ``grader/``) and :func:`build_zipapp` make what a
  plain install or a zipapp run takes;
- :func:`setup_sh_environment`: what ``setup.sh`` of the Gradescope autograder runs with
  here: a ``python3`` whose virtual environments get that ``.pth`` file and no pip of
  their own (pip, as every dependency, comes from the dependencies' folder),
  an ``apt-get`` that does nothing, pip without an index (every dependency is already
  there), and git fetching the autograder's repository address from
  :func:`course_repository`.

Nothing here sets ``PYTHONPATH``; the environments import the library they installed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BUILD_FILES = ("stablernn_lib", "grader", "pyproject.toml", "setup.py", "MANIFEST.in", "README.md")
BASE_PYTHON = getattr(sys, "_base_executable", sys.executable)
CLEAN = ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PIP_REQUIRE_VIRTUALENV")


def clean_environment(**extra: str) -> dict[str, str]:
    """This process's environment without any path to the checkout's library."""
    environment = {k: v for k, v in os.environ.items() if k not in CLEAN}
    return {**environment, "PIP_DISABLE_PIP_VERSION_CHECK": "1", **extra}


def _git(folder: Path, *args: str) -> str:
    command = ["git", "-C", str(folder), "-c", "user.name=t", "-c", "user.email=t@t", *args]
    return subprocess.run(command, capture_output=True, text=True, check=True).stdout.strip()


def _build_files() -> list[str]:
    """The working tree's files that a build reads (git's list; every file outside a
    checkout, less compiled ones)."""
    paths = [*BUILD_FILES, "data/results"]
    listed = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "-co", "--exclude-standard", "-z", "--", *paths],
        capture_output=True,
    )
    if listed.returncode == 0:
        return [n.decode() for n in listed.stdout.split(b"\0") if n]
    found = []
    for path in map(ROOT.joinpath, paths):
        for file in sorted(path.rglob("*")) if path.is_dir() else [path]:
            if "__pycache__" not in file.parts and file.suffix != ".pyc":
                found.append(str(file.relative_to(ROOT)))
    return found


def build_source(dest: Path) -> Path:
    """A copy in ``dest`` of the working tree's build files (setuptools' ``build/`` folder
    lands there, not in the checkout)."""
    for name in _build_files():
        source = ROOT / name
        if source.is_file() and not source.is_symlink():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)
    return dest


def course_repository(dest: Path) -> str:
    """A git repository in ``dest`` of the working tree's build files; its commit."""
    build_source(dest)
    _git(dest, "init", "-q")
    _git(dest, "add", "-A")
    _git(dest, "commit", "-q", "-m", "the course library as tested")
    return _git(dest, "rev-parse", "HEAD")


def build_wheel(source: Path, dest: Path, *, grader: bool = False) -> Path:
    """The wheel of the library in ``source``, or with ``grader`` of the grader in
    ``source/grader`` (built once, without an index)."""
    project, name = (source / "grader", "stablernn_grader") if grader else (source, "stablernn_lib")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation"]
        + ["-w", str(dest), str(project)],
        check=True,
        capture_output=True,
        env=clean_environment(),
    )
    return next(dest.glob(f"{name}-*.whl"))


def build_zipapp(source: Path, dest: Path) -> Path:
    """``dest``: a zipapp of the library and the grader in ``source`` that runs
    ``python -m stablernn_grader``."""
    import zipapp

    app = dest.parent / f"{dest.stem}-files"
    compiled = shutil.ignore_patterns("__pycache__")
    shutil.copytree(source / "stablernn_lib", app / "stablernn_lib", ignore=compiled)
    grader = source / "grader" / "stablernn_grader"
    shutil.copytree(grader, app / "stablernn_grader", ignore=compiled)
    main = "import sys\nfrom stablernn_grader.__main__ import main\nsys.exit(main())\n"
    (app / "__main__.py").write_text(main)
    zipapp.create_archive(app, dest)
    shutil.rmtree(app)
    return dest


def _is_course(name: str) -> bool:
    name = name.lower().replace("-", "_")
    course = ("stablernn_lib", "stablernn_grader", "stablernn_tools", "__editable__")
    return name.startswith(course) or name in ("__pycache__",)


def dependencies_folder(dest: Path) -> Path:
    """Links to every package of the checkout's ``.venv`` but the course library's entries."""
    import torch

    site = Path(torch.__file__).parents[1]  # the folder of this interpreter's packages
    dest.mkdir(parents=True)
    for entry in sorted(site.iterdir()):
        if not _is_course(entry.name) and not entry.name.endswith(".pth"):
            (dest / entry.name).symlink_to(entry)
    return dest


def _add_dependencies(venv: Path, dependencies: Path) -> None:
    for site in venv.glob("lib/python3*/site-packages"):
        (site / "course_dependencies.pth").write_text(f"{dependencies}\n")


def fresh_environment(venv: Path, dependencies: Path) -> Path:
    """``python -m venv`` (no pip) reaching ``dependencies``; its interpreter."""
    subprocess.run([BASE_PYTHON, "-m", "venv", "--without-pip", str(venv)], check=True)
    _add_dependencies(venv, dependencies)
    return venv / "bin" / "python"


def install_wheel(python: Path, wheel: Path) -> None:
    """``pip install --no-deps`` of ``wheel`` into the environment of ``python``."""
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet"]
        + ["--no-deps", "--no-index", str(wheel)],
        check=True,
        capture_output=True,
        env=clean_environment(),
    )


STUB_PYTHON3 = """#!/bin/sh
# python3 for setup.sh in a test: the base interpreter; a venv it makes gets no pip of its
# own (pip too comes from the dependencies' folder) and reaches the dependencies' folder
if [ "$1" = -m ] && [ "$2" = venv ]; then
  "{base}" -m venv --without-pip "$3" || exit $?
  for site in "$3"/lib/python3*/site-packages; do echo "{dependencies}" > "$site/{pth}"; done
  exit 0
fi
exec "{base}" "$@"
"""


def setup_sh_environment(
    work: Path, dependencies: Path, repository_url: str, repository: Path
) -> dict[str, str]:
    """The environment ``setup.sh`` runs with in a test (see the module's docstring)."""
    stubs = work / "stubs"
    stubs.mkdir()
    python3 = stubs / "python3"
    python3.write_text(
        STUB_PYTHON3.format(
            base=BASE_PYTHON, dependencies=dependencies, pth="course_dependencies.pth"
        )
    )
    (stubs / "apt-get").write_text("#!/bin/sh\nexit 0\n")
    for stub in stubs.iterdir():
        stub.chmod(0o755)
    return clean_environment(
        PATH=f"{stubs}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        PIP_NO_INDEX="1",
        PIP_NO_BUILD_ISOLATION="0",
        PIP_CACHE_DIR=str(work / "pip-cache"),
        GIT_CONFIG_COUNT="1",
        GIT_CONFIG_KEY_0=f"url.{repository.as_uri()}.insteadOf",
        GIT_CONFIG_VALUE_0=repository_url,
    )
