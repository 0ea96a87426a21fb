"""Confining a helper process of the grader: resource limits, and its own user id as root.

Used by the student process (:mod:`stablernn_grader.sandbox`) and by the process
that reads a submission's source (:mod:`stablernn_grader.reader`) before they touch
anything a student wrote.  Imports nothing beyond the standard library.
"""

from __future__ import annotations

import importlib
import os
import resource
import stat
import sys
from pathlib import Path


def mapped_bytes() -> int:
    """The address space this process maps now (``VmSize`` of ``/proc/self/status``)."""
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("/proc/self/status has no VmSize line: cannot bound the memory")


def apply_limits(limits: dict[str, int]) -> None:
    """Set soft and hard resource limits on this process (a process cannot raise them again).

    ``memory_bytes`` is what the submission may map on top of what the process maps already
    (the interpreter, torch and this harness): a CUDA build of torch maps about 3 GB of
    address space when imported, the CPU build about 0.6 GB, so an absolute bound would mean
    something else with each build.
    """
    if limits.get("memory_bytes"):
        limits = {**limits, "memory_bytes": mapped_bytes() + int(limits["memory_bytes"])}
    names = {
        "cpu_s": (resource.RLIMIT_CPU, 5),
        "memory_bytes": (resource.RLIMIT_AS, 0),
        "processes": (resource.RLIMIT_NPROC, 0),
        "file_bytes": (resource.RLIMIT_FSIZE, 0),
        "open_files": (resource.RLIMIT_NOFILE, 0),
    }
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    for key, (which, extra_hard) in names.items():
        value = limits.get(key)
        if value:
            resource.setrlimit(which, (int(value), int(value) + extra_hard))


def _reachable_by_others(path: Path) -> bool:
    """Whether a user other than the owner can enter ``path`` and each folder above it."""
    try:
        return all(p.stat().st_mode & stat.S_IXOTH for p in (path, *path.parents))
    except OSError:
        return False


def drop_privileges(uid: int) -> None:
    """Become ``uid`` (group ``uid``, no other groups) for good; keep imports working.

    The interpreter's own library may sit in a folder closed to other users (``/root``
    when Python was installed there): each ``sys.path`` folder this user could not
    enter is opened first and replaced by its ``/proc/self/fd/N`` path, which reaches
    that one folder and nothing beside it.
    """
    replaced: dict[str, str] = {}
    for entry in sys.path:
        path = Path(entry or ".").resolve()
        if entry and path.is_dir() and not _reachable_by_others(path):
            replaced[entry] = f"/proc/self/fd/{os.open(path, os.O_RDONLY | os.O_DIRECTORY)}"

    def reachable(entry: str) -> str:
        for folder, handle in replaced.items():
            if entry == folder or entry.startswith(folder + os.sep):
                return handle + entry[len(folder) :]
        return entry

    sys.path[:] = [reachable(entry) for entry in sys.path]
    for module in list(sys.modules.values()):  # packages already imported from there
        paths = getattr(module, "__path__", None)
        if isinstance(paths, list):
            paths[:] = [reachable(str(p)) for p in paths]
    importlib.invalidate_caches()
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)  # as root: real, effective and saved ids, so there is no way back
    if os.getuid() != uid or os.geteuid() != uid:
        raise RuntimeError(f"could not become user {uid}")
