"""PyTorch for the references: imported on first use (the gate never needs it), the two
dtypes of every reference run ("fp32", "f64"), one torch thread while a fixture is built, and
the copies between NumPy arrays and torch tensors."""
from __future__ import annotations

import contextlib

import numpy as np

DTYPES = ("fp32", "f64")


def _torch():
    import torch
    return torch


def tdtype(kind: str):
    torch = _torch()
    return {"fp32": torch.float32, "f64": torch.float64}[kind]


def np_dtype(kind: str):
    return {"fp32": np.float32, "f64": np.float64}[kind]


@contextlib.contextmanager
def deterministic():
    """One torch thread for the duration (results do not depend on the thread count then)."""
    torch = _torch()
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _np(t, kind):
    """A copy (never a view of torch's storage: optimizers and clipping work in place)."""
    return np.array(t.detach().cpu().numpy(), dtype=np_dtype(kind), copy=True)


def _t(a, kind, grad=False):
    torch = _torch()
    t = torch.from_numpy(np.array(a, dtype=np_dtype(kind), order="C", copy=True))
    return t.requires_grad_(True) if grad else t
