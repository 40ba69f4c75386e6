"""Clipping through a port: crnn_clip_gradients on a copy of the stored gradients.

A case of kind `many` (fixtures/clip_edges.h5) packs many small problems, each its own
crnn_clip_gradients call with its own limit: the clipped gradients concatenated, one norm
each."""
from __future__ import annotations

import numpy as np

from ...ctypes_kernels import layer_table

from ._ffi import call, copy, f32, out, ptr

LAYER = "clip"
FIXTURES = layer_table.fixtures(LAYER)   # stems and tiers: ctypes_kernels/layer_table.py
TIERS = layer_table.tiers(LAYER)
INPUTS = ("grads", "sizes", "limit", "enabled")


def required_inputs(case) -> list[str]:
    if case.params.get("kind") == "many":
        return ["grads", "sizes", "counts", "limits", "enabled"]
    return list(INPUTS)


def run_many(lib, case) -> dict:
    """One copy of all the gradients and one norm buffer, each problem's call on its own part
    (as ctc.run_many: a buffer each would cost more than the problems)."""
    grads = copy(f32(case.inputs["grads"]))
    sizes = np.ascontiguousarray(case.inputs["sizes"], np.int64)
    counts = np.asarray(case.inputs["counts"], np.int64)
    norms = out(len(counts), np.float64)
    at = si = 0
    for n, (count, limit, enabled) in enumerate(zip(counts, case.inputs["limits"],
                                                    case.inputs["enabled"])):
        s = sizes[si:si + count]
        call(lib, "crnn_clip_gradients", ptr(grads[at:]) if grads.size > at else None,
             ptr(s) if s.size else None, int(count), float(limit), int(enabled),
             ptr(norms[n:n + 1]))
        at += int(s.sum())
        si += int(count)
    return {"grads": grads, "norm": norms}


def worst_context(case, tensor, flat) -> dict:
    """In a `many` case, the worst element's problem with its tensor sizes, limit and
    enabled flag, and for grads the element [tensor, i] within the problem; nothing for a
    case of one problem."""
    if case.params.get("kind") != "many":
        return {}
    from ...generators.exact import clip_problems
    problems = list(clip_problems(case.inputs))
    n, element, at = flat, [], 0
    if tensor == "grads":      # every problem's tensors one after another
        for n, (tensors, _, _) in enumerate(problems):
            size = sum(t.size for t in tensors)
            if flat < at + size:
                element = _within([t.size for t in tensors], flat - at)
                break
            at += size
    tensors, limit, enabled = problems[n]
    params = {"sizes": [int(t.size) for t in tensors], "limit": float(limit),
              "enabled": int(enabled)}
    return {"subcase": {"name": "problem", "index": n, "of": len(problems), "element": element,
                        "params": params}}


def _within(sizes, i) -> list[int]:
    """[tensor, element] of flat index i over tensors of these sizes, one after another."""
    for j, n in enumerate(sizes):
        if i < n:
            return [j, int(i)]
        i -= n
    raise IndexError(i)


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
