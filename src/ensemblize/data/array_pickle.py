"""Read CIFAR's official python batches — pickles of dicts, lists, bytes and NumPy arrays — without
letting the file build any object but those.

A pickle is a program: each global it names is called with arguments from the file. Allowing NumPy's own
reconstruction functions is not enough (``numpy.ndarray(shape, dtype('O'), buffer=...)`` builds an object
array whose pointers are bytes from the file, and a dtype's pickled flags can make a plain dtype hold
objects: memory corruption on the first read). So no NumPy object is built by the pickle at all: the
three globals an array's pickle names (``_reconstruct``, ``ndarray``, ``dtype``; protocol 2–4, as
``ndarray.__reduce__`` writes them; ``_frombuffer`` for protocol 5) resolve to inert recorders, and each array is made afterwards by
:func:`numpy.frombuffer` from its recorded raw bytes, with a dtype rebuilt from its type string —
numbers only (bool, integer, unsigned, float), whose size must match the bytes; a NumPy scalar
(``scalar(dtype, bytes)``, e.g. a label) likewise. Every other global
(``os.system``, ``numpy.load``, …) is refused. ``_codecs.encode`` is allowed: protocol-2 pickles of bytes
written by Python 3 call it (latin-1), and it returns bytes; so is ``bytes()`` without arguments (an empty
byte string at protocol 2). Python 2 pickles — the official batches — hold a dtype's type string and
byte order as bytes; they are read as ASCII text.
"""

from __future__ import annotations

import io
import math
import pickle
from typing import Any

import numpy as np

__all__ = ["load_array_pickle"]

_NUMERIC_KINDS = "biuf"
_MAX_DIMS = 8


def _type_string(value: Any, *, what: str) -> str:
    """A dtype's type string or byte order as text: Python 3 pickles hold ``str``; Python 2 pickles (the
    official CIFAR batches) hold ``bytes`` under ``encoding="bytes"``, ASCII by construction."""
    if isinstance(value, (bytes, bytearray)):
        try:
            return bytes(value).decode("ascii")
        except UnicodeDecodeError:
            raise pickle.UnpicklingError(f"{what} must be ASCII text, got {bytes(value)[:16]!r}") from None
    if not isinstance(value, str):
        raise pickle.UnpicklingError(f"{what} must be a type string, got {type(value).__name__}")
    return value


def _empty_bytes(*args: Any) -> bytes:
    """``bytes()`` as Python 3 pickles an empty byte string at protocol 2; any argument is refused (``bytes(n)``
    would allocate n bytes the file does not hold)."""
    if args:
        raise pickle.UnpicklingError("refusing bytes(...) with arguments: CIFAR batches hold bytes as data")
    return b""


class _DtypeRecord:
    """Stands for ``numpy.dtype(spec, align, copy)`` in a pickle; :meth:`resolve` makes the real one."""

    def __init__(self, spec: Any, align: Any = False, copy: Any = False) -> None:
        self.spec = _type_string(spec, what="an array dtype")
        self.order = "|"

    def __setstate__(self, state: Any) -> None:
        # (version, byte order, subarray, names, fields, elsize, alignment, flags): only the byte order is
        # read; the rest describes structured / object dtypes, which are refused in resolve
        if not (isinstance(state, tuple) and len(state) > 1):
            return
        order = _type_string(state[1], what="an array byte order")
        if order not in ("<", ">", "|", "="):
            raise pickle.UnpicklingError(f"unknown array byte order {order!r}")
        self.order = order

    def resolve(self) -> np.dtype:
        try:
            dt = np.dtype(self.spec)
        except TypeError as exc:
            raise pickle.UnpicklingError(f"unknown array dtype {self.spec!r}") from exc
        if dt.kind not in _NUMERIC_KINDS or dt.fields is not None or dt.subdtype is not None:
            raise pickle.UnpicklingError(f"refusing an array of dtype {self.spec!r}: only numbers are read")
        return dt.newbyteorder(self.order) if self.order in "<>" and dt.itemsize > 1 else dt


class _ArrayRecord:
    """Stands for ``numpy.core.multiarray._reconstruct(ndarray, shape, typecode)`` in a pickle; its state
    (BUILD) holds shape, dtype, order and raw bytes; :meth:`resolve` makes the array from them."""

    def __init__(self, subtype: Any = None, shape: Any = None, typecode: Any = None) -> None:
        if subtype is not _NDARRAY:
            raise pickle.UnpicklingError("an array pickle must reconstruct numpy.ndarray")
        self.state: Any = None

    def __setstate__(self, state: Any) -> None:
        self.state = state

    def resolve(self) -> np.ndarray:
        state = self.state
        if not (isinstance(state, tuple) and len(state) == 5):
            raise pickle.UnpicklingError(
                "an array pickle without its (version, shape, dtype, order, data) state"
            )
        _version, shape, dtype, fortran, raw = state
        if not isinstance(dtype, _DtypeRecord):
            raise pickle.UnpicklingError("an array's dtype must come from numpy.dtype")
        if not (
            isinstance(shape, tuple)
            and len(shape) <= _MAX_DIMS
            and all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in shape)
        ):
            raise pickle.UnpicklingError(f"bad array shape {shape!r}")
        if not isinstance(raw, (bytes, bytearray)):
            raise pickle.UnpicklingError("an array's data must be raw bytes")
        dt = dtype.resolve()
        if len(raw) != math.prod(shape) * dt.itemsize:
            raise pickle.UnpicklingError(
                f"array of shape {shape} and dtype {dt} needs {math.prod(shape) * dt.itemsize} bytes, the file "
                f"holds {len(raw)}"
            )
        flat = np.frombuffer(bytes(raw), dtype=dt)
        return flat.reshape(shape, order="F" if fortran else "C").copy()


class _BufferRecord(_ArrayRecord):
    """Stands for ``numpy._core.numeric._frombuffer(buffer, dtype, shape, order)``, how protocol 5 pickles
    an array (its buffer in band)."""

    def __init__(self, buf: Any = None, dtype: Any = None, shape: Any = None, order: Any = "C") -> None:
        if isinstance(buf, pickle.PickleBuffer):
            buf = bytes(buf.raw())
        self.state = (1, shape, dtype, order == "F", buf)


class _NdarrayMarker:
    """``numpy.ndarray`` as a pickle names it: only a marker for :class:`_ArrayRecord`, never called."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise pickle.UnpicklingError(
            "the pickle calls numpy.ndarray itself: an array pickle must reconstruct numpy.ndarray"
        )


def _scalar(dtype: Any, raw: Any = b"") -> Any:
    """``numpy._core.multiarray.scalar(dtype, bytes)``: a NumPy number (e.g. a label), numbers only."""
    if not isinstance(dtype, _DtypeRecord) or not isinstance(raw, (bytes, bytearray)):
        raise pickle.UnpicklingError("a NumPy scalar must be a dtype and its raw bytes")
    dt = dtype.resolve()
    if len(raw) != dt.itemsize:
        raise pickle.UnpicklingError(f"a {dt} scalar needs {dt.itemsize} bytes, the file holds {len(raw)}")
    return np.frombuffer(bytes(raw), dtype=dt)[0]


_NDARRAY = _NdarrayMarker()


class _Unpickler(pickle.Unpickler):
    _GLOBALS: dict[tuple[str, str], Any] = {
        ("numpy.core.multiarray", "_reconstruct"): _ArrayRecord,
        ("numpy._core.multiarray", "_reconstruct"): _ArrayRecord,
        ("numpy", "ndarray"): _NDARRAY,
        ("numpy", "dtype"): _DtypeRecord,
        ("numpy.core.multiarray", "scalar"): _scalar,
        ("numpy._core.multiarray", "scalar"): _scalar,
        ("numpy.core.numeric", "_frombuffer"): _BufferRecord,
        ("numpy._core.numeric", "_frombuffer"): _BufferRecord,
    }

    def find_class(self, module: str, name: str) -> Any:  # noqa: D401 - pickle API
        if (module, name) in self._GLOBALS:
            return self._GLOBALS[(module, name)]
        if (module, name) == ("_codecs", "encode"):
            import _codecs

            return _codecs.encode
        if (module, name) in (("__builtin__", "bytes"), ("builtins", "bytes")):
            return _empty_bytes
        raise pickle.UnpicklingError(
            f"refusing to load {module}.{name}: CIFAR batch files only contain dicts, lists, bytes and "
            "NumPy arrays of numbers"
        )

    def persistent_load(self, pid: Any) -> Any:
        raise pickle.UnpicklingError("refusing a persistent id: CIFAR batch files have none")


def _resolved(obj: Any, depth: int = 0) -> Any:
    if depth > 32:
        raise pickle.UnpicklingError("the pickle nests deeper than a CIFAR batch does")
    if isinstance(obj, _ArrayRecord):
        return obj.resolve()
    if isinstance(obj, (_DtypeRecord, _NdarrayMarker)):
        raise pickle.UnpicklingError("a bare numpy dtype or ndarray in the pickle: not a CIFAR batch")
    if isinstance(obj, dict):
        return {k: _resolved(v, depth + 1) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_resolved(v, depth + 1) for v in obj]
    if isinstance(obj, tuple):
        return tuple(_resolved(v, depth + 1) for v in obj)
    return obj


def load_array_pickle(data: bytes) -> Any:
    """Unpickle ``data`` (a pickle of dicts, lists, tuples, bytes, strings, numbers and NumPy arrays of
    numbers, any protocol; protocol 5 buffers in band) as the module docstring says; ``pickle.UnpicklingError`` for anything else.
    Byte strings from Python 2 pickles stay bytes (``encoding="bytes"``)."""
    try:
        obj = _Unpickler(io.BytesIO(data), encoding="bytes").load()
    except RecursionError as exc:
        raise pickle.UnpicklingError("the pickle nests deeper than a CIFAR batch does") from exc
    return _resolved(obj)
