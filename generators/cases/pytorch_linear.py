"""PyTorch-tier classifier cases: crnn-v0's Linear 128 -> 37 on real inputs.

For two real lines (crnn_conformance.generators.pytorch_ref.LAYER_LINES): x is the top LSTM output of the
whole-model fp32 run, dY the real gradient of the logits (CTC, scale 1/B with B = 4). The
layer is rerun alone (F.linear) in fp32 and float64 on the same fp32 inputs.
Expected (pytorch tier): y, dx, dW, db; Floor = max |fp32 - float64| per tensor.
"""
from __future__ import annotations

import numpy as np

from .. import pytorch_ref as R
from ..h5io import Case

NAME = "pytorch_linear"
LAYER = "linear"
SEED = R.BATCH_SEED
EXTRA_ATTRS: dict | None = None


def rerun(inputs: dict, params: dict) -> tuple[dict, dict]:
    """The classifier alone in PyTorch on a case's inputs: -> (fp32 outputs, float64 outputs).
    regen-fixtures --check reruns the checked-in inputs with it on another CPU."""
    args = [np.asarray(inputs[k]) for k in ("x", "W", "b", "dY")]
    return (R.linear_layer(*args, "fp32"),
            R.linear_layer(*(a.astype(np.float64) for a in args), "f64"))


def build() -> list[Case]:
    global EXTRA_ATTRS
    EXTRA_ATTRS = R.provenance()
    d = R.batch_data()
    params = d["params"]
    W, b = params["fc.W"], params["fc.b"]
    cases = []
    with R.deterministic():
        for line in R.LAYER_LINES:
            t32, t64 = d["fp32"]["traces"][line], d["f64"]["traces"][line]
            x = np.ascontiguousarray(t32["lstm_out"][-1], np.float32)
            dY = np.ascontiguousarray(t32["dlogits"], np.float32)
            e32, e64 = rerun({"x": x, "W": W, "b": b, "dY": dY}, {})
            fl = R.floors(e32, e64)
            fl["inputs/x"] = R.floor(x, t64["lstm_out"][-1])
            fl["inputs/dY"] = R.floor(dY, t64["dlogits"])
            T, I = x.shape
            cases.append(Case(f"classifier_line{line}_T{T}",
                              {"T": T, "I": I, "O": int(W.shape[0]), "line": line,
                               "tier": "pytorch", "note": "trained crnn-v0 classifier, real input"},
                              {"x": x, "W": W, "b": b, "dY": dY}, {"pytorch": e32}, fl))
    return cases
