"""AdamW through a port: three crnn_adamw steps on the stored gradients, beta^t kept here."""
from __future__ import annotations

import numpy as np

from ._ffi import call, f32, ptr

LAYER = "adamw"
FIXTURE = "adamw"
FIXTURES = ["adamw", "pytorch_adamw"]   # the second: the pytorch tier (trained crnn-v0)


def run(lib, case) -> dict:
    p = f32(case.inputs["p"]).copy()
    grads = f32(case.inputs["grads"])
    lr, beta1, beta2, eps, wd = (float(x) for x in case.inputs["hparams"])
    decay = int(case.inputs["decay"][0])
    m, v = np.zeros_like(p), np.zeros_like(p)
    b1t = b2t = 1.0
    for t in range(grads.shape[0]):
        b1t, b2t = b1t * beta1, b2t * beta2
        g = f32(grads[t])
        call(lib, "crnn_adamw", ptr(p), ptr(m), ptr(v), ptr(g), p.size, lr, beta1, beta2, eps, wd,
             decay, b1t, b2t)
    return {"p": p, "m": m, "v": v}
