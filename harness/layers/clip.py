"""Clipping through a port: crnn_clip_gradients on a copy of the stored gradients.

A case of kind `many` (fixtures/clip_edges.h5) packs many small problems, each its own
crnn_clip_gradients call on its own copy with its own limit: the clipped gradients
concatenated, one norm each."""
from __future__ import annotations

import numpy as np

from ._ffi import call, copy, f32, out, ptr

LAYER = "clip"
FIXTURE = "clip"
FIXTURES = ["clip", "clip_edges"]   # the second: exact tier, boundaries and signed zeros
INPUTS = ("grads", "sizes", "limit", "enabled")
TIERS = {"clip_edges": ("exact",)}


def required_inputs(case) -> list[str]:
    if case.params.get("kind") == "many":
        return ["grads", "sizes", "counts", "limits", "enabled"]
    return list(INPUTS)


def run_many(lib, case) -> dict:
    from crnn_conformance.generators.exact import clip_problems
    grads, norms = [], []
    sizes = np.ascontiguousarray(case.inputs["sizes"], np.int64)
    si = 0
    for tensors, limit, enabled in clip_problems(case.inputs):
        g = copy(f32(np.concatenate([np.asarray(t, np.float32) for t in tensors]
                                    + [np.zeros(0, np.float32)])))
        norm = out(1, np.float64)
        s = sizes[si:si + len(tensors)]
        call(lib, "crnn_clip_gradients", ptr(g) if g.size else None,
             ptr(s) if s.size else None, len(tensors), limit, enabled, ptr(norm))
        grads.append(np.array(g, np.float32))
        norms.append(float(norm[0]))
        si += len(tensors)
    return {"grads": np.concatenate(grads + [np.zeros(0, np.float32)]),
            "norm": np.array(norms, np.float64)}


def run(lib, case) -> dict:
    if case.params.get("kind") == "many":
        return run_many(lib, case)
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
