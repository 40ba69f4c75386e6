"""The bidirectional LSTM layer through a port: forward (output and saved states), then the
backward from the port's own saved states, as a training step would run it.

A case of kind `activations` (fixtures/activations.h5) runs the layer's element-wise
functions instead: crnn_sigmoid and crnn_tanh on consecutive segments of `x` whose `lengths`
cover every vector tail, each segment its own output buffer."""
from __future__ import annotations

import numpy as np

from ...ctypes_kernels import layer_table
from ..compare import json_value

from ._ffi import call, f32, out, ptr

LAYER = "lstm"
FIXTURES = layer_table.fixtures(LAYER)   # stems and tiers: ctypes_kernels/layer_table.py
TIERS = layer_table.tiers(LAYER)
INPUTS = ("x", "W_ih", "W_hh", "b", "dOut")


def required_inputs(case) -> list[str]:
    return ["x", "lengths"] if case.params.get("kind") == "activations" else list(INPUTS)


def run_activations(lib, case) -> dict:
    x = f32(case.inputs["x"])
    result = {}
    for name in ("sigmoid", "tanh"):
        y, at = np.empty(x.size, np.float32), 0
        for n in case.inputs["lengths"]:
            n = int(n)
            seg = out(n)    # its own buffer: a write past the segment hits a guard zone
            call(lib, f"crnn_{name}", ptr(x[at:at + n]), n, ptr(seg))
            y[at:at + n] = seg
            at += n
        result[name] = y
    return result


def run(lib, case) -> dict:
    if case.params.get("kind") == "activations":
        return run_activations(lib, case)
    x, W_ih, W_hh, b, dOut = (f32(case.inputs[k]) for k in ("x", "W_ih", "W_hh", "b", "dOut"))
    T, I = x.shape
    H = W_hh.shape[2]
    G = 4 * H
    y, gates = out((T, 2 * H)), out((2, T, G))
    c, tc, hPrev = out((2, T, H)), out((2, T, H)), out((2, T, H))
    call(lib, "crnn_lstm_forward", ptr(x), T, I, H, ptr(W_ih), ptr(W_hh), ptr(b),
         ptr(y), ptr(gates), ptr(c), ptr(tc), ptr(hPrev))
    dW_ih, dW_hh, db, dx = out((2, G, I)), out((2, G, H)), out((2, G)), out((T, I))
    call(lib, "crnn_lstm_backward", ptr(x), T, I, H, ptr(W_ih), ptr(W_hh), ptr(gates), ptr(c),
         ptr(tc), ptr(hPrev), ptr(dOut), ptr(dW_ih), ptr(dW_hh), ptr(db), ptr(dx))
    return {"out": y, "gates": gates, "c": c, "tc": tc, "hPrev": hPrev,
            "dW_ih": dW_ih, "dW_hh": dW_hh, "db": db, "dx": dx}


def worst_context(case, tensor, flat) -> dict:
    """The worst element's input x in an `activations` case (sigmoid and tanh are
    element-wise: element i of either is f(x[i])); nothing for the layer's own cases."""
    if case.params.get("kind") != "activations":
        return {}
    return {"input": {"x": json_value(case.inputs["x"], flat)}}


def outputs(case) -> list[str]:
    """The tensors run() returns (the pytorch fixture has references for fewer of them; the
    identity tier checks them all)."""
    if case.params.get("kind") == "activations":
        return ["sigmoid", "tanh"]
    return ["out", "gates", "c", "tc", "hPrev", "dW_ih", "dW_hh", "db", "dx"]
