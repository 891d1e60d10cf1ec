"""A stable identity of a user callable (loss, regulariser, decay filter) for checkpoint configs.

A resumed :func:`ensemblize.training.fit` must be the same run, so each callable that shapes the
training is recorded by *what it computes*, not only by its name: two lambdas are both
``<lambda>``, and ``SelectiveNetLoss(0.7)`` and ``SelectiveNetLoss(0.8)`` are both
``SelectiveNetLoss``. :func:`callable_identity` returns ``"module.qualname#digest"`` where the
digest (16 hex digits of SHA-256) covers

* a Python function or lambda: its bytecode, constants and names (nested code objects included),
  its default arguments and the values its closure captured;
* a bound method: the function and the object it is bound to;
* ``functools.partial``: the function, its positional and keyword arguments;
* any other callable object (an ``nn.Module`` loss, a class instance with ``__call__``): its type
  and the attributes named like its constructor's parameters (scikit-learn's ``get_params``
  convention: the configuration, not run-time state such as an epoch counter).

Values are read structurally up to a small depth: numbers, strings, bools, ``None``, tuples,
lists, dicts, tensors/arrays of up to 64 elements (by value; a tensor that requires grad — trained
state — by shape and dtype only), callables (recursively); any other object by its type name only. The digest is stable across processes for one Python version (it
hashes bytecode), so a resume under another Python version is refused as a different loss.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import types
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

__all__ = ["callable_identity"]

_DEPTH = 4
_SMALL = 64


def _value(v: Any, depth: int) -> str:
    if v is None or isinstance(v, (bool, int, float, complex, str, bytes)):
        return repr(v)
    if depth >= _DEPTH:
        return f"<{type(v).__qualname__}>"
    if isinstance(v, (tuple, list, set, frozenset)):
        items = (
            sorted(map(lambda x: _value(x, depth + 1), v))
            if isinstance(v, (set, frozenset))
            else [_value(x, depth + 1) for x in v]
        )
        return f"{type(v).__name__}({','.join(items)})"
    if isinstance(v, dict):
        items = sorted(f"{_value(k, depth + 1)}:{_value(x, depth + 1)}" for k, x in v.items())
        return f"dict({','.join(items)})"
    if isinstance(v, torch.Tensor):
        if v.requires_grad:  # a trained parameter is state, not configuration: shape and dtype only
            return f"parameter({tuple(v.shape)},{v.dtype})"
        shown = v.detach().cpu().tolist() if v.numel() <= _SMALL else f"<{v.numel()} values>"
        return f"tensor({tuple(v.shape)},{v.dtype},{shown})"
    if isinstance(v, np.ndarray):
        shown = v.tolist() if v.size <= _SMALL else f"<{v.size} values>"
        return f"ndarray({v.shape},{v.dtype},{shown})"
    if isinstance(v, types.CodeType):
        return _code(v, depth + 1)
    if isinstance(v, types.ModuleType):
        return f"<module {v.__name__}>"
    if isinstance(v, type):
        return f"<class {v.__module__}.{v.__qualname__}>"
    if callable(v):
        return _describe(v, depth + 1)
    return f"<{type(v).__qualname__}>"


def _code(co: types.CodeType, depth: int) -> str:
    consts = ",".join(_value(c, depth) for c in co.co_consts)
    return f"code({co.co_code.hex()};{','.join(co.co_names)};{consts})"


def _constructor_state(obj: Any, depth: int) -> str:
    """The attributes named like ``type(obj).__init__``'s parameters (scikit-learn's ``get_params``
    convention): the object's configuration, not its run-time state (an epoch counter, last values)."""
    try:
        params = inspect.signature(type(obj).__init__).parameters
    except (TypeError, ValueError):  # pragma: no cover - builtins without a signature
        return ""
    names = [n for n, p in params.items() if n != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    return ",".join(f"{n}={_value(getattr(obj, n), depth)}" for n in names if hasattr(obj, n))


def _describe(fn: Callable, depth: int) -> str:
    if isinstance(fn, functools.partial):
        return (
            f"partial({_describe(fn.func, depth + 1)};{_value(fn.args, depth)};{_value(fn.keywords, depth)})"
        )
    if isinstance(fn, types.MethodType):
        return f"method({_describe(fn.__func__, depth + 1)};{_value(fn.__self__, depth)})"
    if isinstance(fn, types.FunctionType):
        cells = [c.cell_contents if _filled(c) else "<empty cell>" for c in (fn.__closure__ or ())]
        return (
            f"function({_code(fn.__code__, depth)};{_value(fn.__defaults__, depth)};"
            f"{_value(fn.__kwdefaults__, depth)};{_value(tuple(cells), depth)})"
        )
    if isinstance(fn, (types.BuiltinFunctionType, type)):
        return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"
    return f"object({type(fn).__module__}.{type(fn).__qualname__};{_constructor_state(fn, depth)})"


def _filled(cell: types.CellType) -> bool:
    try:
        cell.cell_contents  # noqa: B018 - an empty cell raises
    except ValueError:
        return False
    return True


def callable_identity(fn: Callable) -> str:
    """``"module.qualname#digest"`` of ``fn`` (see the module docstring for what the digest covers)."""
    target = fn.func if isinstance(fn, functools.partial) else fn
    kind = target if isinstance(target, (types.FunctionType, types.MethodType, type)) else type(target)
    name = f"{getattr(kind, '__module__', '?')}.{getattr(kind, '__qualname__', type(fn).__qualname__)}"
    digest = hashlib.sha256(_describe(fn, 0).encode()).hexdigest()[:16]
    return f"{name}#{digest}"
