"""The student side of grading: run a submission's cells, then answer calls.

The grader (:mod:`stablernn_grader.grading`) starts :func:`main` in a separate,
isolated interpreter (``python -I``, in the sandbox of
:mod:`stablernn_grader.isolation`) for each submission: under another user id
when the grader runs as root, working in a fresh folder holding only a copy of the
submission, with resource limits it sets on itself before any student code runs.
It reads a *plan* (the first JSON line on stdin: cells, limits, its working folder,
the number of the pipe for events), runs the student's cells in an IPython shell, says
``ready``, then answers *requests*, one JSON line each on stdin: ``describe`` (is the
function there, and its source) and ``call`` (call the student's function on these
arguments, drawn by the grading process).  For each call it sends back what the
function returned, raised or changed in its arguments.

This process never holds a check, an expected value or a reference implementation:
the checks run in the grading process, which sends only each call's inputs; the
sandbox's copy of the library has no ``homework/questions`` folder.  Values cross as
JSON (:func:`encode` / :func:`decode`): numbers, strings, lists, tuples, dicts, dense
tensors or arrays, recurrent ``torch.nn`` modules and the input functions of
:mod:`stablernn_lib.homework.inputs`; never pickle.
"""

from __future__ import annotations

import base64
import builtins
import inspect
import json
import os
from builtins import float, int, isinstance, repr, str, type  # noqa: UP029 (see below)
from typing import Any

import numpy as np
import torch

from stablernn_grader.confine import (  # noqa: F401 (mapped_bytes: part of the API)
    apply_limits,
    drop_privileges,
    mapped_bytes,
)
from stablernn_lib.homework.inputs import INPUT_FUNCTIONS, InputFunction

# The harness keeps its own references to what it uses, taken before any student code
# runs: a notebook that replaces builtins, json, base64 or torch.equal changes what its
# own answers compute, not what this process reports.
_dumps = json.dumps
_loads = json.loads
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
RECURRENT_MODULES = {cls.__name__: cls for cls in (torch.nn.RNN, torch.nn.LSTM, torch.nn.GRU)}
MODULE_SETTINGS = ("input_size", "hidden_size", "num_layers", "bias", "batch_first")
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
    if isinstance(value, InputFunction):
        arguments = [encode(v, depth + 1) for v in value.arguments]
        return {"function": type(value).__name__, "arguments": arguments}
    if type(value) in RECURRENT_MODULES.values():
        settings = {key: getattr(value, key) for key in MODULE_SETTINGS}
        if type(value) is torch.nn.RNN:
            settings["nonlinearity"] = value.nonlinearity
        parameters = [[name, encode(p.detach())] for name, p in value.named_parameters()]
        return {"module": type(value).__name__, "settings": settings, "parameters": parameters}
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


def _module(obj: dict[str, Any]) -> torch.nn.Module:
    settings = obj.get("settings")
    if not isinstance(settings, dict) or not isinstance(obj.get("parameters"), list):
        raise ProtocolError("a module needs its settings and parameters")
    known = {k: v for k, v in settings.items() if k in (*MODULE_SETTINGS, "nonlinearity")}
    parameters = [decode(value) for _, value in obj["parameters"]]
    dtype = parameters[0].dtype if parameters else torch.float32
    try:
        module = RECURRENT_MODULES[obj["module"]](**known, dtype=dtype)
    except (TypeError, ValueError) as error:
        raise ProtocolError(f"unusable module settings: {error}") from None
    own = dict(module.named_parameters())
    with torch.no_grad():
        for (name, _), value in zip(obj["parameters"], parameters, strict=True):
            if name not in own or own[name].shape != value.shape:
                raise ProtocolError("a module parameter does not match its settings")
            own[name].copy_(value)
    return module


def decode(obj: Any, depth: int = 0, *, inputs: bool = False) -> Any:
    """The value an :func:`encode` description stands for; :class:`ProtocolError` otherwise.

    ``inputs``: the description comes from the grading process (the arguments of a call),
    so input functions and recurrent modules are rebuilt too.
    """
    if depth > MAX_DEPTH + 1:
        raise ProtocolError("a too deeply nested value")
    if obj is None or isinstance(obj, bool):
        return obj
    if not isinstance(obj, dict) or len(obj) not in (1, 2, 3):
        raise ProtocolError(f"unexpected value description {str(obj)[:80]!r}")
    if "int" in obj and isinstance(obj["int"], str) and len(obj["int"]) < 5000:
        return int(obj["int"])
    if "float" in obj and isinstance(obj["float"], str):
        return float(obj["float"])
    if "str" in obj and isinstance(obj["str"], str):
        return obj["str"][:MAX_STRING]
    if "unsupported" in obj:
        return UnsupportedValue(str(obj["unsupported"])[:100])
    if inputs and obj.get("function") in INPUT_FUNCTIONS and isinstance(obj.get("arguments"), list):
        arguments = [decode(v, depth + 1, inputs=True) for v in obj["arguments"]]
        return INPUT_FUNCTIONS[obj["function"]](*arguments)
    if inputs and obj.get("module") in RECURRENT_MODULES:
        return _module(obj)
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
            items = [decode(v, depth + 1, inputs=inputs) for v in obj[kind]]
            return items if kind == "list" else tuple(items)
    if "dict" in obj and isinstance(obj["dict"], list):
        result = {}
        for pair in obj["dict"]:
            if not isinstance(pair, list) or len(pair) != 2:
                raise ProtocolError("a dict item must be a [key, value] pair")
            key = decode(pair[0], depth + 1)
            try:
                result[key] = decode(pair[1], depth + 1, inputs=inputs)
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


def answer_call(function: Any, args: list[Any], kwargs: dict[str, Any]) -> dict[str, Any]:
    """Call the student's function once: what it returned (or raised) and changed in place."""
    arguments = {**{str(i): v for i, v in enumerate(args)}, **kwargs}
    before = {key: _snapshot(v) for key, v in arguments.items()}
    record: dict[str, Any] = {}
    try:
        record["returned"] = encode(function(*args, **kwargs))
    except BaseException as error:  # noqa: BLE001 (exits and interrupts are answers too)
        record = {"raised": exception_record(error)}
    changed = {}
    for key, value in arguments.items():
        change = _changes(value, before[key])
        if change is not None:
            changed[key] = change
    record["changed"] = changed
    return record


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


class _Events:
    """JSON lines to the grader on a pipe of its own (stdout and stderr go nowhere)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def send(self, **event: Any) -> None:
        data = (_dumps(event) + "\n").encode()
        while data:
            data = data[os.write(self.fd, data) :]


class _Requests:
    """JSON lines from the grader on stdin, read with this harness's own references."""

    def __init__(self, fd: int = 0) -> None:
        self.fd, self.buffer = fd, b""

    def next(self) -> Any:
        """The next request; None once the grader closed the pipe."""
        while b"\n" not in self.buffer:
            chunk = os.read(self.fd, 1 << 20)
            if not chunk:
                return None
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return _loads(line)


def _error_text(error: BaseException | None) -> str | None:
    if error is None:
        return None
    record = exception_record(error)
    return f"{record['type']}: {record['message'][:300]}"


def _source(function: Any) -> str:
    try:
        return str(inspect.getsource(function))[:100_000]
    except BaseException:  # noqa: BLE001
        return ""


def _answer(request: Any, namespace: dict[str, Any]) -> dict[str, Any]:
    """The reply to one request of the grader (``describe`` or ``call``)."""
    if not isinstance(request, dict) or not isinstance(request.get("name"), str):
        return {"error": "unreadable request"}
    function = namespace.get(request["name"])
    if request.get("describe"):
        if not callable(function):
            return {"missing": True}
        return {"missing": False, "source": _source(function)}
    if not callable(function):
        return {"missing": True}
    try:
        args = decode(request.get("args"), inputs=True)
        kwargs = decode(request.get("kwargs"), inputs=True)
    except (ProtocolError, TypeError, ValueError) as error:
        return {"error": f"unreadable arguments ({error})"}
    return answer_call(function, list(args), dict(kwargs))


def run_plan(plan: dict[str, Any], requests: _Requests) -> None:
    """Run the student's cells, say ``ready``, then answer the grader's requests."""
    events = _Events(int(plan["events_fd"]))
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    for index, source in plan["cells"]:
        events.send(event="cell", index=index, phase="start")
        result = shell.run_cell(source, store_history=False)
        error = result.error_before_exec or result.error_in_exec
        events.send(event="cell", index=index, phase="end", error=_error_text(error))
    events.send(event="ready")
    namespace = shell.user_ns
    while (request := requests.next()) is not None:
        number = request.get("id") if isinstance(request, dict) else None
        events.send(event="result", id=number, **_answer(request, namespace))


def main() -> None:
    requests = _Requests(0)
    plan = requests.next()
    apply_limits(plan.get("limits", {}))
    torch.set_num_threads(1)
    import IPython.core.interactiveshell  # noqa: F401 (imported while the interpreter is reachable)

    if plan.get("uid") is not None:
        drop_privileges(int(plan["uid"]))
    os.chdir(plan["workdir"])  # only now: the interpreter started in a folder it cannot write
    run_plan(plan, requests)
    os._exit(0)  # do not wait for threads the student's code may have left running


if __name__ == "__main__":
    main()
