"""CTC loss of one line through a port: crnn_ctc -> loss (float64) and dlogits.

Two more case kinds: `many` (fixtures/ctc_edges.h5) packs many small lines into one case, one
crnn_ctc call each, their losses and gradients concatenated;
`detmath` (fixtures/detmath.h5) runs the layer's DetMath entry points crnn_detmath_exp and
crnn_detmath_log."""
from __future__ import annotations

import numpy as np

from ...ctypes_kernels import layer_table
from ..compare import json_value

from ._ffi import call, f32, i32, out, ptr

LAYER = "ctc"
FIXTURES = layer_table.fixtures(LAYER)   # stems and tiers: ctypes_kernels/layer_table.py
TIERS = layer_table.tiers(LAYER)
INPUTS = ("logits", "target", "scale")
KIND_INPUTS = {"many": ("logits", "shapes", "targets", "scales"), "detmath": ("x_exp", "x_log")}


def required_inputs(case) -> list[str]:
    return list(KIND_INPUTS.get(case.params.get("kind"), INPUTS))


def line(lib, logits, target, scale, loss, dlogits) -> None:
    T, K = logits.shape
    call(lib, "crnn_ctc", ptr(logits) if logits.size else None, T, K,
         ptr(target) if target.size else None, target.size, scale, ptr(loss),
         ptr(dlogits) if dlogits.size else None)


def run_many(lib, case) -> dict:
    """One output buffer per tensor for all the lines, each line writing its own part (a
    write past a part lands in the next line's, which that line's call then overwrites, or,
    after the last, in the guard zone; a buffer each would cost more than the lines)."""
    from ...generators.exact import ctc_lines
    lines = list(ctc_lines(case.inputs))
    loss = out(len(lines), np.float64)
    dlogits = out(sum(z.size for z, _, _ in lines))
    at = 0
    for n, (z, target, scale) in enumerate(lines):
        line(lib, f32(z), i32(target), scale, loss[n:n + 1], dlogits[at:at + z.size])
        at += z.size
    return {"loss": loss, "dlogits": dlogits}


def run_detmath(lib, case) -> dict:
    result = {}
    for name in ("exp", "log"):
        x = np.ascontiguousarray(case.inputs[f"x_{name}"], np.float64)
        y = out(x.size, np.float64)
        call(lib, f"crnn_detmath_{name}", ptr(x), x.size, ptr(y))
        result[name] = y
    return result


def worst_context(case, tensor, flat) -> dict:
    """What the worst element came from: in a `detmath` case its input x (exp[i] is
    exp(x_exp[i])), in a `many` case its line with the line's T, K, L, target and scale, and
    for dlogits the element [t, k] within the line; nothing for a case of one line."""
    kind = case.params.get("kind")
    if kind == "detmath":
        return {"input": {"x": json_value(case.inputs[f"x_{tensor}"], flat)}}
    if kind != "many":
        return {}
    from ...generators.exact import ctc_lines
    lines = list(ctc_lines(case.inputs))
    n, element, at = flat, [], 0
    if tensor == "dlogits":    # the lines' [T][K] gradients one after another
        for n, (z, _, _) in enumerate(lines):
            if flat < at + z.size:
                element = [int(i) for i in np.unravel_index(flat - at, z.shape)]
                break
            at += z.size
    z, target, scale = lines[n]
    params = {"T": int(z.shape[0]), "K": int(z.shape[1]), "L": int(target.size),
              "target": [int(v) for v in target], "scale": float(scale)}
    return {"subcase": {"name": "line", "index": n, "of": len(lines), "element": element,
                        "params": params}}


def run(lib, case) -> dict:
    kind = case.params.get("kind")
    if kind == "many":
        return run_many(lib, case)
    if kind == "detmath":
        return run_detmath(lib, case)
    logits = f32(case.inputs["logits"])
    loss, dlogits = out(1, np.float64), out(logits.shape)
    line(lib, logits, i32(case.inputs["target"]), float(case.inputs["scale"][0]), loss, dlogits)
    return {"loss": loss, "dlogits": dlogits}
