"""The linear layer through a port: forward y, backward dx, dW, db."""
from __future__ import annotations

from ._ffi import call, f32, out, ptr

LAYER = "linear"
FIXTURE = "linear"
FIXTURES = ["linear", "pytorch_linear",   # the second: the pytorch tier (trained crnn-v0)
            "linear_edges"]   # exact tier: underflow, signed zeros (docs/edge-cases.md)
INPUTS = ("x", "W", "b", "dY")
TIERS = {"linear_edges": ("exact",)}


def run(lib, case) -> dict:
    x, W, b, dY = (f32(case.inputs[k]) for k in ("x", "W", "b", "dY"))
    T, I = x.shape
    O = W.shape[0]
    y = out((T, O))
    call(lib, "crnn_linear_forward", ptr(x), ptr(W), ptr(b), T, I, O, ptr(y))
    dx, dW, db = out((T, I)), out((O, I)), out(O)
    call(lib, "crnn_linear_backward", ptr(x), ptr(W), ptr(dY), T, I, O, ptr(dx), ptr(dW), ptr(db))
    return {"y": y, "dx": dx, "dW": dW, "db": db}
