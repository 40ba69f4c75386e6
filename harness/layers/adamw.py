"""AdamW through a port: crnn_adamw steps on the stored gradients (one per row), beta^t kept
here. A case of kind `many` (fixtures/adamw_edges.h5) packs many small tensors, each with its
own hyper-parameters and number of steps."""
from __future__ import annotations

import numpy as np

from ...ctypes_kernels import layer_table

from ._ffi import call, copy, f32, ptr, zeros

LAYER = "adamw"
FIXTURES = layer_table.fixtures(LAYER)   # stems and tiers: ctypes_kernels/layer_table.py
TIERS = layer_table.tiers(LAYER)
INPUTS = ("p", "grads", "hparams", "decay")


def required_inputs(case) -> list[str]:
    if case.params.get("kind") == "many":
        return ["p", "grads", "sizes", "steps", "hparams", "decay"]
    return list(INPUTS)


def steps(lib, p, m, v, grads, hparams, decay):
    """crnn_adamw once per row of grads on p, m, v (in place)."""
    lr, beta1, beta2, eps, wd = (float(x) for x in hparams)
    b1t = b2t = 1.0
    for t in range(grads.shape[0]):
        b1t, b2t = b1t * beta1, b2t * beta2
        g = f32(grads[t])
        call(lib, "crnn_adamw", ptr(p), ptr(m), ptr(v), ptr(g), p.size, lr, beta1, beta2, eps, wd,
             int(decay), b1t, b2t)


def worst_context(case, tensor, flat) -> dict:
    """In a `many` case, the worst element's tensor with its size, steps and
    hyper-parameters, and the element's index within it; nothing for a case of one tensor."""
    if case.params.get("kind") != "many":
        return {}
    from ...generators.exact import adamw_problems
    problems = list(adamw_problems(case.inputs))
    at = 0
    for n, (p, grads, hp, decay) in enumerate(problems):
        if flat < at + p.size:
            params = {"n": int(p.size), "steps": int(grads.shape[0]),
                      **dict(zip(("lr", "beta1", "beta2", "eps", "wd"), map(float, hp))),
                      "decay": int(decay)}
            return {"subcase": {"name": "tensor", "index": n, "of": len(problems),
                                "element": [int(flat - at)], "params": params}}
        at += p.size
    return {}


def run(lib, case) -> dict:
    p = copy(f32(case.inputs["p"]))
    m, v = zeros(p.shape), zeros(p.shape)
    if case.params.get("kind") == "many":   # one p, m, v for all the tensors, each on its part
        from ...generators.exact import adamw_problems
        at = 0
        for q, grads, hp, decay in adamw_problems(case.inputs):
            n = q.size
            steps(lib, p[at:at + n], m[at:at + n], v[at:at + n], f32(grads), hp, decay)
            at += n
    else:
        steps(lib, p, m, v, f32(case.inputs["grads"]), case.inputs["hparams"],
              int(case.inputs["decay"][0]))
    return {"p": p, "m": m, "v": v}
