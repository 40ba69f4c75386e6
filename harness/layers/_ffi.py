"""Small helpers for calling a port through ctypes with poisoned, caller-owned outputs."""
from __future__ import annotations

import numpy as np

from ...ctypes_kernels.abi import check
from ..sandbox import guard


def f32(a) -> np.ndarray:
    return np.ascontiguousarray(a, np.float32)


def i32(a) -> np.ndarray:
    return np.ascontiguousarray(a, np.int32)


def out(shape, dtype=np.float32) -> np.ndarray:
    """An output buffer filled with the poison value, so an unwritten element fails; in the
    worker it lies between guard zones (harness/sandbox/guard.py)."""
    return guard.output(shape, dtype)


def copy(a) -> np.ndarray:
    """A copy of `a` for a call to update in place (guarded in the worker)."""
    return guard.inout(a)


def assign(dst, src) -> None:
    """dst[...] = src for buffers of a run (the worker's replay of a run repeats it)."""
    guard.assign(dst, src)


def zeros(shape, dtype=np.float32) -> np.ndarray:
    return guard.inout(shape=shape, dtype=dtype)


def ptr(a):
    return None if a is None else guard.address(a)


def call(lib, name: str, *args) -> None:
    check(getattr(lib, name)(*args), name)
