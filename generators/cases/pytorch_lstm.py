"""PyTorch-tier LSTM cases: both bidirectional layers of the trained crnn-v0 on real inputs.

For each of two real lines (crnn_conformance.generators.pytorch_ref.LAYER_LINES: T = 19 and 64) and each LSTM
layer: x is the layer's real input in the whole-model fp32 run (the conv features for layer 1,
layer 1's output for layer 2), dOut the real gradient of the layer's output. The layer is
rerun alone as a single-layer bidirectional torch.nn.LSTM (bias_hh fixed at 0, so b =
bias_ih), in fp32 and in float64 on the same fp32 inputs.

Expected (pytorch tier): out [T][2H], dW_ih [2][4H][I], dW_hh [2][4H][H], db [2][4H] (the
gradient of bias_ih), dx [T][I]. PyTorch does not expose the saved gates and states, so the
pytorch tier has no gates, c, tc, hPrev (the exact and float64 tiers check them).
"""
from __future__ import annotations

import numpy as np

from .. import pytorch_ref as R
from ..h5io import Case

NAME = "pytorch_lstm"
LAYER = "lstm"
SEED = R.BATCH_SEED
EXTRA_ATTRS: dict | None = None


def stacked(params, layer, dtype=np.float32):
    return [np.ascontiguousarray(np.stack([params[f"lstm{layer}.{d}.{k}"] for d in ("fwd", "rev")]),
                                 dtype) for k in ("W_ih", "W_hh", "b")]


def rerun(inputs: dict, params: dict) -> tuple[dict, dict]:
    """The layer alone in PyTorch on a case's inputs: -> (fp32 outputs, float64 outputs).
    regen-fixtures --check reruns the checked-in inputs with it on another CPU."""
    args = [np.asarray(inputs[k]) for k in ("x", "W_ih", "W_hh", "b", "dOut")]
    return (R.lstm_layer(*args, "fp32"),
            R.lstm_layer(*(a.astype(np.float64) for a in args), "f64"))


def build() -> list[Case]:
    global EXTRA_ATTRS
    EXTRA_ATTRS = R.provenance()
    d = R.batch_data()
    config, params = d["config"], d["params"]
    H = config["hidden"]
    cases = []
    with R.deterministic():
        for layer in range(config["lstm_layers"]):
            W_ih, W_hh, b = stacked(params, layer)
            for line in R.LAYER_LINES:
                t32, t64 = d["fp32"]["traces"][line], d["f64"]["traces"][line]
                x = np.ascontiguousarray(t32["lstm_in"][layer], np.float32)
                dOut = np.ascontiguousarray(t32["dlstm_out"][layer], np.float32)
                e32, e64 = rerun({"x": x, "W_ih": W_ih, "W_hh": W_hh, "b": b, "dOut": dOut}, {})
                fl = R.floors(e32, e64)
                fl["inputs/x"] = R.floor(x, t64["lstm_in"][layer])
                fl["inputs/dOut"] = R.floor(dOut, t64["dlstm_out"][layer])
                T, I = x.shape
                cases.append(Case(f"layer{layer + 1}_line{line}_T{T}",
                                  {"T": T, "I": I, "H": H, "layer": layer + 1, "line": line,
                                   "tier": "pytorch", "note": "trained crnn-v0, real line input"},
                                  {"x": x, "W_ih": W_ih, "W_hh": W_hh, "b": b, "dOut": dOut},
                                  {"pytorch": e32}, fl))
    return cases
