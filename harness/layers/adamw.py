"""AdamW through a port: three crnn_adamw steps on the stored gradients, beta^t kept here."""
from __future__ import annotations

from ._ffi import call, copy, f32, ptr, zeros

LAYER = "adamw"
FIXTURE = "adamw"
FIXTURES = ["adamw", "pytorch_adamw"]   # the second: the pytorch tier (trained crnn-v0)
INPUTS = ("p", "grads", "hparams", "decay")


def run(lib, case) -> dict:
    p = copy(f32(case.inputs["p"]))
    grads = f32(case.inputs["grads"])
    lr, beta1, beta2, eps, wd = (float(x) for x in case.inputs["hparams"])
    decay = int(case.inputs["decay"][0])
    m, v = zeros(p.shape), zeros(p.shape)
    b1t = b2t = 1.0
    for t in range(grads.shape[0]):
        b1t, b2t = b1t * beta1, b2t * beta2
        g = f32(grads[t])
        call(lib, "crnn_adamw", ptr(p), ptr(m), ptr(v), ptr(g), p.size, lr, beta1, beta2, eps, wd,
             decay, b1t, b2t)
    return {"p": p, "m": m, "v": v}
