"""The student side of grading: run a submission's cells, then call its answers.

The grader (:mod:`stablernn_lib.homework.grading`) starts :func:`main` in a separate,
isolated interpreter (``python -I``, in the sandbox of
:mod:`stablernn_lib.homework.isolation`) for each submission: under another user id
when the grader runs as root, working in a fresh folder holding only a copy of the
submission, with resource limits it sets on itself before any student code runs.
It reads a *plan* (JSON on stdin: cells, checks, seed, limits, its working folder,
the number of the pipe for events), runs the student's cells in an IPython shell, then runs each
check with the student's function wrapped in a :class:`Recorder` and sends, for each
check, what every call of the answer returned, raised or changed in its arguments.

Nothing this process says is believed: the grader replays every check in its own,
untouched process with a :class:`Replayer` of these records, so the only way to earn
a check's points is to have returned the right values for the grader's inputs.
Values cross as JSON (:func:`encode` / :func:`decode`): numbers, strings, lists,
tuples, dicts and dense tensors or arrays; never pickle.
"""

from __future__ import annotations

import base64
import builtins
import importlib
import inspect
import json
import os
import resource
import stat
import sys
from builtins import float, int, isinstance, repr, str, type  # noqa: UP029 (see below)
from pathlib import Path
from typing import Any

import numpy as np
import torch

# The harness keeps its own references to what it uses, taken before any student code
# runs: a notebook that replaces builtins, json, base64 or torch.equal changes what its
# own answers compute, not what this process reports.
_dumps = json.dumps
_b64encode = base64.b64encode
_tensor_equal = torch.equal

MAX_DEPTH = 16
MAX_ELEMENTS = 50_000_000
MAX_STRING = 10_000
TENSOR_DTYPES = {
    str(dtype).removeprefix("torch."): dtype
    for dtype in (
        torch.float16,
        torch.bfloat16,
        torch.float32,
        torch.float64,
        torch.complex64,
        torch.complex128,
        torch.int8,
        torch.int16,
        torch.int32,
        torch.int64,
        torch.uint8,
        torch.bool,
    )
}
SAFE_EXCEPTIONS = frozenset(
    name
    for name in dir(builtins)
    if isinstance(getattr(builtins, name), type)
    and issubclass(getattr(builtins, name), Exception)
    and not issubclass(getattr(builtins, name), (Warning, StopIteration, StopAsyncIteration))
)


class UnsupportedValue:
    """Stands for a returned value of a type that does not cross between processes."""

    def __init__(self, type_name: str) -> None:
        self.type_name = type_name

    def __repr__(self) -> str:
        return f"<a {self.type_name} (not a number, tensor, string or container)>"


class ProtocolError(ValueError):
    """A record from the student's process that does not follow the format."""


# ----------------------------------------------------------------------------- values


def _bytes_of(tensor: torch.Tensor) -> str:
    flat = tensor.detach().cpu().contiguous().reshape(-1)
    return _b64encode(flat.view(torch.uint8).numpy().tobytes()).decode("ascii")


def encode(value: Any, depth: int = 0) -> Any:
    """A JSON-able description of ``value`` (what :func:`decode` turns back into a value)."""
    if depth > MAX_DEPTH:
        return {"unsupported": "a too deeply nested value"}
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        return {"int": str(int(value))}
    if isinstance(value, float):
        return {"float": repr(float(value))}
    if isinstance(value, str):
        return {"str": str(value)[:MAX_STRING]}
    if isinstance(value, torch.Tensor):
        name = str(value.dtype).removeprefix("torch.")
        if value.layout != torch.strided or name not in TENSOR_DTYPES:
            return {"unsupported": f"tensor of {value.dtype}, {value.layout}"}
        return {"tensor": name, "shape": list(value.shape), "data": _bytes_of(value)}
    if isinstance(value, np.ndarray) and value.dtype.kind in "biufc":
        array = np.ascontiguousarray(value)
        data = _b64encode(array.tobytes()).decode("ascii")
        return {"ndarray": array.dtype.str, "shape": list(array.shape), "data": data}
    if isinstance(value, np.generic) and value.dtype.kind in "biuf":
        return encode(value.item(), depth)
    if isinstance(value, (list, tuple)):
        kind = "list" if isinstance(value, list) else "tuple"
        return {kind: [encode(v, depth + 1) for v in value]}
    if isinstance(value, dict):
        return {"dict": [[encode(k, depth + 1), encode(v, depth + 1)] for k, v in value.items()]}
    return {"unsupported": type(value).__name__[:100]}


def _shape(raw: Any) -> tuple[int, ...]:
    if not isinstance(raw, list) or not all(isinstance(n, int) and n >= 0 for n in raw):
        raise ProtocolError("a shape must be a list of non-negative integers")
    if int(np.prod(raw, dtype=np.float64)) > MAX_ELEMENTS:
        raise ProtocolError("a returned tensor is too large")
    return tuple(raw)


def _data(raw: Any, expected: int) -> bytes:
    if not isinstance(raw, str):
        raise ProtocolError("tensor data must be base64 text")
    data = base64.b64decode(raw.encode("ascii"), validate=True)
    if len(data) != expected:
        raise ProtocolError("tensor data does not match its shape")
    return data


def decode(obj: Any, depth: int = 0) -> Any:
    """The value an :func:`encode` description stands for; :class:`ProtocolError` otherwise."""
    if depth > MAX_DEPTH + 1:
        raise ProtocolError("a too deeply nested value")
    if obj is None or isinstance(obj, bool):
        return obj
    if not isinstance(obj, dict) or len(obj) not in (1, 3):
        raise ProtocolError(f"unexpected value description {str(obj)[:80]!r}")
    if "int" in obj and isinstance(obj["int"], str) and len(obj["int"]) < 5000:
        return int(obj["int"])
    if "float" in obj and isinstance(obj["float"], str):
        return float(obj["float"])
    if "str" in obj and isinstance(obj["str"], str):
        return obj["str"][:MAX_STRING]
    if "unsupported" in obj:
        return UnsupportedValue(str(obj["unsupported"])[:100])
    if "tensor" in obj and obj["tensor"] in TENSOR_DTYPES:
        dtype, shape = TENSOR_DTYPES[obj["tensor"]], _shape(obj.get("shape"))
        size = int(np.prod(shape, dtype=np.int64)) * torch.empty((), dtype=dtype).element_size()
        data = bytearray(_data(obj.get("data"), size))
        flat = (
            torch.frombuffer(data, dtype=torch.uint8) if data else torch.empty(0, dtype=torch.uint8)
        )
        return flat.view(dtype).reshape(shape).clone()
    if "ndarray" in obj and isinstance(obj["ndarray"], str):
        dtype = np.dtype(obj["ndarray"])
        if dtype.kind not in "biufc":
            raise ProtocolError("only numeric arrays cross")
        shape = _shape(obj.get("shape"))
        data = _data(obj.get("data"), int(np.prod(shape, dtype=np.int64)) * dtype.itemsize)
        return np.frombuffer(data, dtype=dtype).reshape(shape).copy()
    for kind in ("list", "tuple"):
        if kind in obj and isinstance(obj[kind], list):
            items = [decode(v, depth + 1) for v in obj[kind]]
            return items if kind == "list" else tuple(items)
    if "dict" in obj and isinstance(obj["dict"], list):
        result = {}
        for pair in obj["dict"]:
            if not isinstance(pair, list) or len(pair) != 2:
                raise ProtocolError("a dict item must be a [key, value] pair")
            key = decode(pair[0], depth + 1)
            try:
                result[key] = decode(pair[1], depth + 1)
            except TypeError as error:  # an unhashable key
                raise ProtocolError(f"unusable dict key: {error}") from error
        return result
    raise ProtocolError(f"unexpected value description {str(obj)[:80]!r}")


def exception_record(error: BaseException) -> dict[str, Any]:
    """What an answer raised: its type name, nearest built-in class and message."""
    kind = type(error)
    builtin = next(
        (c.__name__ for c in kind.__mro__ if c.__module__ == "builtins" and c is not object),
        "BaseException",
    )
    try:
        message = str(error)[:1000]
    except BaseException:  # noqa: BLE001 (a hostile __str__)
        message = "(its message could not be read)"
    return {"type": kind.__name__[:100], "builtin": builtin, "message": message}


def rebuild_exception(record: Any) -> BaseException:
    """An exception to raise in the grader's process for a recorded one.

    Only built-in ``Exception`` classes are rebuilt (a subclass keeps its name); exits,
    interrupts and anything else become a ``RuntimeError`` naming what was raised, so
    that the grader's checks record it as a failure.
    """
    if not isinstance(record, dict):
        raise ProtocolError("an exception record must be an object")
    name = str(record.get("type", "Exception"))[:100]
    builtin = str(record.get("builtin", ""))
    message = str(record.get("message", ""))[:1000]
    if builtin not in SAFE_EXCEPTIONS:
        return RuntimeError(f"{name}: {message} (raised by your function)")
    base = getattr(builtins, builtin)
    if name == builtin or not name.isidentifier():
        return base(message)
    try:
        return type(name, (base,), {})(message)
    except TypeError:  # a built-in that cannot be subclassed
        return base(message)


# ----------------------------------------------------------------------------- calls


def _snapshot(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, torch.nn.Module):
        return {name: (p, p.detach().clone()) for name, p in value.named_parameters()}
    return None


def _changes(value: Any, before: Any) -> Any:
    """What a call did to one argument: new tensor values, replaced module parameters."""
    if isinstance(value, torch.Tensor) and before is not None:
        now = value.detach()
        if now.shape != before.shape or now.dtype != before.dtype or not _tensor_equal(now, before):
            return {"tensor": encode(now.clone())}
        return None
    if isinstance(value, torch.nn.Module) and before is not None:
        changes = {}
        for name, parameter in value.named_parameters():
            original, values = before.get(name, (None, None))
            replaced = parameter is not original
            if replaced or not _tensor_equal(parameter.detach(), values):
                changes[name] = {"replaced": replaced, "value": encode(parameter.detach().clone())}
        return {"module": changes} if changes else None
    return None


class Recorder:
    """Wraps the student's function; records every call's result and side effects."""

    def __init__(self, function: Any) -> None:
        self.function = function
        self.calls: list[dict[str, Any]] = []

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        arguments = {**{str(i): v for i, v in enumerate(args)}, **kwargs}
        before = {key: _snapshot(v) for key, v in arguments.items()}
        record: dict[str, Any] = {}
        try:
            result = self.function(*args, **kwargs)
        except BaseException as error:  # noqa: BLE001 (exits and interrupts are answers too)
            record["raised"] = exception_record(error)
            raise
        else:
            record["returned"] = encode(result)
            return result
        finally:
            changed = {}
            for key, value in arguments.items():
                change = _changes(value, before[key])
                if change is not None:
                    changed[key] = change
            record["changed"] = changed
            self.calls.append(record)


def _set_parameter(module: torch.nn.Module, name: str, value: torch.Tensor) -> None:
    owner_path, _, attribute = name.rpartition(".")
    owner = module.get_submodule(owner_path) if owner_path else module
    setattr(owner, attribute, torch.nn.Parameter(value))


def _apply_changes(arguments: dict[str, Any], changed: Any) -> None:
    if not isinstance(changed, dict):
        raise ProtocolError("'changed' must be an object")
    for key, change in changed.items():
        target = arguments.get(key)
        if not isinstance(change, dict):
            raise ProtocolError("a change must be an object")
        if isinstance(target, torch.Tensor) and "tensor" in change:
            value = decode(change["tensor"])
            if isinstance(value, torch.Tensor) and value.shape == target.shape:
                with torch.no_grad():
                    target.copy_(value.to(target.dtype))
        elif isinstance(target, torch.nn.Module) and isinstance(change.get("module"), dict):
            parameters = dict(target.named_parameters())
            for name, item in change["module"].items():
                value = decode(item.get("value")) if isinstance(item, dict) else None
                if name not in parameters or not isinstance(value, torch.Tensor):
                    continue
                if item.get("replaced"):
                    _set_parameter(target, name, value.to(parameters[name].dtype))
                elif value.shape == parameters[name].shape:
                    with torch.no_grad():
                        parameters[name].copy_(value)


class Replayer:
    """Stands for the student's function in the grader's process: plays back records.

    The ``i``-th call returns (or raises) what the ``i``-th call of the real function
    did in the student's process and applies the same changes to its arguments; a call
    with no record raises, so that a check cannot pass on missing answers.
    """

    def __init__(self, calls: list[Any], stopped: str | None = None) -> None:
        self.calls = calls
        self.index = 0
        self.stopped = stopped  # how the check ended in the student's process

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.index >= len(self.calls):
            where = f"; there the check stopped at {self.stopped}" if self.stopped else ""
            raise RuntimeError(
                "no result came back from your notebook's process for this call (it "
                f"stopped, or it was not called with the grader's inputs{where})"
            )
        record = self.calls[self.index]
        self.index += 1
        if not isinstance(record, dict):
            raise ProtocolError("a call record must be an object")
        _apply_changes(
            {**{str(i): v for i, v in enumerate(args)}, **kwargs}, record.get("changed", {})
        )
        if "raised" in record:
            raise rebuild_exception(record["raised"])
        return decode(record.get("returned"))


# ----------------------------------------------------------------------------- the process


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


class _Events:
    """JSON lines to the grader on a pipe of its own (stdout and stderr go nowhere)."""

    def __init__(self, fd: int) -> None:
        self.stream = os.fdopen(fd, "w", encoding="utf8")

    def send(self, **event: Any) -> None:
        self.stream.write(_dumps(event) + "\n")
        self.stream.flush()


def _error_text(error: BaseException | None) -> str | None:
    if error is None:
        return None
    record = exception_record(error)
    return f"{record['type']}: {record['message'][:300]}"


def _source(function: Any) -> str:
    try:
        return inspect.getsource(function)[:100_000]
    except BaseException:  # noqa: BLE001
        return ""


def run_plan(plan: dict[str, Any]) -> None:
    """Run the student's cells, then every check of the plan, sending events."""
    events = _Events(int(plan["events_fd"]))
    from IPython.core.interactiveshell import InteractiveShell

    from stablernn_lib.homework.registry import get_question
    from stablernn_lib.homework.runner import check_context

    shell = InteractiveShell.instance()
    for index, source in plan["cells"]:
        events.send(event="cell", index=index, phase="start")
        result = shell.run_cell(source, store_history=False)
        error = result.error_before_exec or result.error_in_exec
        events.send(event="cell", index=index, phase="end", error=_error_text(error))
    namespace = shell.user_ns
    for question_id, check_name in plan["checks"]:
        events.send(event="check", key=[question_id, check_name], phase="start")
        question = get_question(question_id)
        check = next(c for c in question.all_checks if c.name == check_name)
        function = namespace.get(question.function or "")
        if not callable(function):
            events.send(event="check", key=[question_id, check_name], phase="end", missing=True)
            continue
        recorder = Recorder(function)
        context = check_context(question, check, int(plan["seed"]), None)
        stopped = None
        try:
            check.run(recorder, context)
        except BaseException as error:  # noqa: BLE001 (the grader judges, not this process)
            stopped = _error_text(error)
        events.send(
            event="check",
            key=[question_id, check_name],
            phase="end",
            calls=recorder.calls,
            stopped=stopped,
            source=_source(function),
        )
    events.send(event="done")


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


def main() -> None:
    plan = json.loads(sys.stdin.read())
    apply_limits(plan.get("limits", {}))
    torch.set_num_threads(1)
    import IPython.core.interactiveshell  # noqa: F401 (imported while the interpreter is reachable)

    if plan.get("uid") is not None:
        drop_privileges(int(plan["uid"]))
    os.chdir(plan["workdir"])  # only now: the interpreter started in a folder it cannot write
    run_plan(plan)
    os._exit(0)  # do not wait for threads the student's code may have left running


if __name__ == "__main__":
    main()
