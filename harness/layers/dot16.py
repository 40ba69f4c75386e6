"""dot16 through a port: one crnn_dot16 call per (a, b) pair of the fixture."""
from __future__ import annotations

import numpy as np

from ...ctypes_kernels import layer_table

from ._ffi import call, f32, out, ptr

LAYER = "dot16"
FIXTURES = layer_table.fixtures(LAYER)   # stems and tiers: ctypes_kernels/layer_table.py
TIERS = layer_table.tiers(LAYER)
INPUTS = ("a", "b", "lengths")


def run(lib, case) -> dict:
    a, b = f32(case.inputs["a"]), f32(case.inputs["b"])
    lengths = case.inputs["lengths"]
    result = np.empty(len(lengths), np.float32)
    at = 0
    for i, n in enumerate(lengths):
        n = int(n)
        one = out(1)    # its own buffer: a write past out[0] hits a guard zone
        call(lib, "crnn_dot16", ptr(a[at:at + n]) if n else ptr(a), ptr(b[at:at + n]) if n else ptr(b),
             n, ptr(one))
        result[i] = one[0]
        at += n
    return {"dot": result}


def worst_context(case, tensor, flat) -> dict:
    """Each element of `dot` is a dot of its own: the worst one's n and where its terms start
    in a and b."""
    lengths = [int(n) for n in case.inputs["lengths"]]
    return {"subcase": {"name": "dot", "index": flat, "of": len(lengths), "element": [],
                        "params": {"n": lengths[flat], "start": sum(lengths[:flat])}}}
