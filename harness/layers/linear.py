"""The linear layer through a port: forward y, backward dx, dW, db."""
from __future__ import annotations

from ...ctypes_kernels import layer_table

from ._ffi import call, f32, out, ptr

LAYER = "linear"
FIXTURES = layer_table.fixtures(LAYER)   # stems and tiers: ctypes_kernels/layer_table.py
TIERS = layer_table.tiers(LAYER)
INPUTS = ("x", "W", "b", "dY")


def run(lib, case) -> dict:
    x, W, b, dY = (f32(case.inputs[k]) for k in ("x", "W", "b", "dY"))
    T, I = x.shape
    O = W.shape[0]
    y = out((T, O))
    call(lib, "crnn_linear_forward", ptr(x), ptr(W), ptr(b), T, I, O, ptr(y))
    dx, dW, db = out((T, I)), out((O, I)), out(O)
    call(lib, "crnn_linear_backward", ptr(x), ptr(W), ptr(dY), T, I, O, ptr(dx), ptr(dW), ptr(db))
    return {"y": y, "dx": dx, "dW": dW, "db": db}
