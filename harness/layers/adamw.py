"""AdamW through a port: crnn_adamw steps on the stored gradients (one per row), beta^t kept
here. A case of kind `many` (fixtures/adamw_edges.h5) packs many small tensors, each with its
own hyper-parameters and number of steps, each on buffers of its own."""
from __future__ import annotations

import numpy as np

from ._ffi import call, copy, f32, ptr, zeros

LAYER = "adamw"
FIXTURE = "adamw"
FIXTURES = ["adamw", "pytorch_adamw",   # the second: the pytorch tier (trained crnn-v0)
            "adamw_edges"]             # exact tier: the scalars over many hyper-parameters
INPUTS = ("p", "grads", "hparams", "decay")
TIERS = {"adamw_edges": ("exact",)}


def required_inputs(case) -> list[str]:
    if case.params.get("kind") == "many":
        return ["p", "grads", "sizes", "steps", "hparams", "decay"]
    return list(INPUTS)


def steps(lib, p, grads, hparams, decay):
    """crnn_adamw once per row of grads on a copy of p -> (p, m, v)."""
    p = copy(f32(p))
    lr, beta1, beta2, eps, wd = (float(x) for x in hparams)
    m, v = zeros(p.shape), zeros(p.shape)
    b1t = b2t = 1.0
    for t in range(grads.shape[0]):
        b1t, b2t = b1t * beta1, b2t * beta2
        g = f32(grads[t])
        call(lib, "crnn_adamw", ptr(p), ptr(m), ptr(v), ptr(g), p.size, lr, beta1, beta2, eps, wd,
             int(decay), b1t, b2t)
    return p, m, v


def run(lib, case) -> dict:
    if case.params.get("kind") == "many":
        from crnn_conformance.generators.exact import adamw_problems
        parts = [steps(lib, p, f32(grads), hp, decay)
                 for p, grads, hp, decay in adamw_problems(case.inputs)]
        cat = lambda i: np.concatenate([np.array(x[i], np.float32) for x in parts]   # noqa: E731
                                       + [np.zeros(0, np.float32)])
        return {"p": cat(0), "m": cat(1), "v": cat(2)}
    p, m, v = steps(lib, case.inputs["p"], f32(case.inputs["grads"]), case.inputs["hparams"],
                    int(case.inputs["decay"][0]))
    return {"p": p, "m": m, "v": v}
