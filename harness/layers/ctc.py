"""CTC loss of one line through a port: crnn_ctc -> loss (float64) and dlogits."""
from __future__ import annotations

import numpy as np

from ._ffi import call, f32, i32, out, ptr

LAYER = "ctc"
FIXTURE = "ctc"
FIXTURES = ["ctc", "pytorch_ctc"]   # the second: the pytorch tier (trained crnn-v0)
INPUTS = ("logits", "target", "scale")


def run(lib, case) -> dict:
    logits = f32(case.inputs["logits"])
    target = i32(case.inputs["target"])
    scale = float(case.inputs["scale"][0])
    T, K = logits.shape
    loss = out(1, np.float64)
    dlogits = out((T, K))
    call(lib, "crnn_ctc", ptr(logits), T, K, ptr(target) if target.size else None, target.size,
         scale, ptr(loss), ptr(dlogits))
    return {"loss": loss, "dlogits": dlogits}
