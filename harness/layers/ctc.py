"""CTC loss of one line through a port: crnn_ctc -> loss (float64) and dlogits.

Two more case kinds: `many` (fixtures/ctc_edges.h5) packs many small lines into one case, one
crnn_ctc call each with its own output buffers, their losses and gradients concatenated;
`detmath` (fixtures/detmath.h5) runs the layer's DetMath entry points crnn_detmath_exp and
crnn_detmath_log."""
from __future__ import annotations

import numpy as np

from ._ffi import call, f32, i32, out, ptr

LAYER = "ctc"
FIXTURE = "ctc"
FIXTURES = ["ctc", "pytorch_ctc",   # the second: the pytorch tier (trained crnn-v0)
            "ctc_edges", "detmath"]   # exact tier: special lines, tiny lines; DetMath
INPUTS = ("logits", "target", "scale")
TIERS = {"ctc_edges": ("exact",), "detmath": ("exact",)}
KIND_INPUTS = {"many": ("logits", "shapes", "targets", "scales"), "detmath": ("x_exp", "x_log")}


def required_inputs(case) -> list[str]:
    return list(KIND_INPUTS.get(case.params.get("kind"), INPUTS))


def line(lib, logits, target, scale):
    """One crnn_ctc call -> (loss[1], dlogits[T][K]) in buffers of their own."""
    T, K = logits.shape
    loss, dlogits = out(1, np.float64), out((T, K))
    call(lib, "crnn_ctc", ptr(logits) if logits.size else None, T, K,
         ptr(target) if target.size else None, target.size, scale, ptr(loss),
         ptr(dlogits) if dlogits.size else None)
    return loss, dlogits


def run_many(lib, case) -> dict:
    from crnn_conformance.generators.exact import ctc_lines
    losses, grads = [], []
    for z, target, scale in ctc_lines(case.inputs):
        loss, d = line(lib, f32(z), i32(target), scale)
        losses.append(float(loss[0]))
        grads.append(np.array(d, np.float32).ravel())
    return {"loss": np.array(losses, np.float64),
            "dlogits": np.concatenate(grads + [np.zeros(0, np.float32)])}


def run_detmath(lib, case) -> dict:
    result = {}
    for name in ("exp", "log"):
        x = np.ascontiguousarray(case.inputs[f"x_{name}"], np.float64)
        y = out(x.size, np.float64)
        call(lib, f"crnn_detmath_{name}", ptr(x), x.size, ptr(y))
        result[name] = y
    return result


def run(lib, case) -> dict:
    kind = case.params.get("kind")
    if kind == "many":
        return run_many(lib, case)
    if kind == "detmath":
        return run_detmath(lib, case)
    loss, dlogits = line(lib, f32(case.inputs["logits"]), i32(case.inputs["target"]),
                         float(case.inputs["scale"][0]))
    return {"loss": loss, "dlogits": dlogits}
