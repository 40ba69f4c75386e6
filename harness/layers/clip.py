"""Clipping through a port: crnn_clip_gradients on a copy of the stored gradients."""
from __future__ import annotations

import numpy as np

from ._ffi import call, copy, f32, out, ptr

LAYER = "clip"
FIXTURE = "clip"
INPUTS = ("grads", "sizes", "limit", "enabled")


def run(lib, case) -> dict:
    grads = copy(f32(case.inputs["grads"]))
    sizes = np.ascontiguousarray(case.inputs["sizes"], np.int64)
    limit = float(case.inputs["limit"][0])
    enabled = int(case.inputs["enabled"][0])
    norm = out(1, np.float64)
    call(lib, "crnn_clip_gradients", ptr(grads), ptr(sizes), len(sizes), limit, enabled, ptr(norm))
    result, at = {}, 0
    for name, shape, n in zip(case.params["names"], case.params["shapes"], sizes):
        result[name] = grads[at:at + int(n)].reshape(shape)
        at += int(n)
    result["norm"] = norm
    return result
