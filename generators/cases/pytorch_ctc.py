"""PyTorch-tier CTC cases: the loss and logit gradient of each line of a real batch.

The four lines of the batch (crnn_conformance.generators.pytorch_ref.BATCH_*) with the trained model's fp32
logits (real logits: a confident, mostly correct recogniser) and their targets. PyTorch
computes log_softmax -> ctc_loss(reduction='none', blank 0) per line; the batch loss is the
plain mean over the B = 4 lines (sum / B, not PyTorch's reduction='mean', which also divides
by the target lengths), so each line's logit gradient is that of loss / B: scale = 1/B.
fp32 and float64 runs on the same fp32 logits.

Expected (pytorch tier): loss [1] (the fp32 loss, stored as float64: the port's loss is a
double), dlogits [T][K].
"""
from __future__ import annotations

import numpy as np

from .. import pytorch_ref as R
from ..h5io import Case

NAME = "pytorch_ctc"
LAYER = "ctc"
SEED = R.BATCH_SEED
EXTRA_ATTRS: dict | None = None


def rerun(inputs: dict, params: dict) -> tuple[dict, dict]:
    """CTC of one line in PyTorch on a case's inputs: -> (fp32 outputs, float64 outputs).
    regen-fixtures --check reruns the checked-in inputs with it on another CPU."""
    logits, target = np.asarray(inputs["logits"]), np.asarray(inputs["target"])
    scale = float(inputs["scale"][0])
    return (R.ctc_line(logits, target, scale, "fp32"),
            R.ctc_line(logits.astype(np.float64), target, scale, "f64"))


def build() -> list[Case]:
    global EXTRA_ATTRS
    EXTRA_ATTRS = R.provenance()
    d = R.batch_data()
    B = len(d["images"])
    scale = 1.0 / B
    cases = []
    with R.deterministic():
        for line, target in enumerate(d["targets"]):
            t32, t64 = d["fp32"]["traces"][line], d["f64"]["traces"][line]
            logits = np.ascontiguousarray(t32["logits"], np.float32)
            target = np.ascontiguousarray(target, np.int32)
            e32, e64 = rerun({"logits": logits, "target": target,
                              "scale": np.array([scale], np.float64)}, {})
            fl = R.floors(e32, e64)
            fl["inputs/logits"] = R.floor(logits, t64["logits"])
            T, K = logits.shape
            cases.append(Case(f"line{line}_T{T}_L{target.size}",
                              {"T": T, "K": K, "L": int(target.size), "scale": scale, "B": B,
                               "line": line, "tier": "pytorch",
                               "note": "trained crnn-v0 logits on a real line; scale 1/B"},
                              {"logits": logits, "target": target,
                               "scale": np.array([scale], np.float64)},
                              {"pytorch": e32}, fl))
    return cases
