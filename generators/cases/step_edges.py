"""Whole-model edge cases (fixtures/step_edges.h5): exact tier only (docs/edge-cases.md).

Zeros whose sign must survive the batch sum (g = g_0, then g = g + g_b: no +0 start). A small
config (height 8, one conv block, one BiLSTM layer of hidden 2, 5 classes) whose LSTM rows of
the g and o gates are zero with biases -5 and -103: g = tanh(-5) ~ -1, so |tanh(c)| > 1/2,
and o = sigmoid(-103) = 2^-149, the smallest subnormal; every LSTM output is then
h = o * tanh(c) = -2^-149. The classifier's dW = dot16 over t of dlogits * h: for a class
absent from the target dlogits is in (0, 1/2), every product underflows to -0, and with
T >= 16 all 16 lanes end at -0. Those rows are -0 in every line, so their sum is -0; a port
that sums from +0 (or loses a zero's sign on the way) returns +0.

  neg_zero_fc_b2   two lines (T = 16, 20), classes 3 and 4 in neither target
  neg_zero_fc_b1   one line (T = 18): g = g_0 with no addition at all
"""
from __future__ import annotations

import numpy as np

from .. import draw
from .. import exact, model

NAME = "step_edges"
LAYER = "step"
SEED = 9010
F32 = np.float32


def config() -> dict:
    return {"name": "tiny-signed-zero", "input_height": 8, "input_channels": 1,
            "blocks": [{"out": 2, "kh": 3, "kw": 3, "padH": 1, "padW": 1, "poolH": 2, "poolW": 2}],
            "lstm_layers": 1, "hidden": 2, "classes": 5, "alphabet": "abcd"}


def weights(rng, cfg) -> dict:
    p = model.init_params(cfg, rng)
    H = cfg["hidden"]
    for d in ("fwd", "rev"):
        for gate, bias in ((2, -5.0), (3, -103.0)):   # rows [i|f|g|o]: g and o
            rows = slice(gate * H, (gate + 1) * H)
            p[f"lstm0.{d}.W_ih"][rows] = 0.0
            p[f"lstm0.{d}.W_hh"][rows] = 0.0
            p[f"lstm0.{d}.b"][rows] = bias
        p[f"lstm0.{d}.b"][0:H] = 5.0                 # i ~ 1: c ~ -1 from the first step
    p["fc.b"] = rng.uniform(-0.3, 0.3, cfg["classes"]).astype(F32)
    return p


def _case(name, rng, widths, targets):
    cfg = config()
    params = weights(rng, cfg)
    images = [rng.uniform(0, 1, (cfg["input_height"], w)).astype(F32) for w in widths]
    specs = model.param_specs(cfg)
    inputs = {"cfg": model.cfg_array(cfg), "params": model.flatten(cfg, params),
              "widths": np.array(widths, np.int32),
              "images": np.concatenate([im.ravel() for im in images]),
              "target_lens": np.array([len(t) for t in targets], np.int32),
              "targets": np.array([v for t in targets for v in t], np.int32)}
    meta = {"config": cfg, "names": [s.name for s in specs], "shapes": [list(s.shape) for s in specs],
            "B": len(widths), "widths": list(widths), "target_lens": [len(t) for t in targets],
            "steps": [model.steps_for_width(cfg, w) for w in widths],
            "note": "classifier dW rows of absent classes: -0 in every line"}
    c = exact.case(LAYER, name, meta, inputs)
    fcW = c.expected["exact"]["fc.W"]
    c.params["negative_zero_fc_W"] = int(np.sum((fcW == 0) & np.signbit(fcW)))
    if not c.params["negative_zero_fc_W"]:
        raise RuntimeError(f"step edge case {name}: no -0 in the classifier's gradient")
    return c


def build():
    rng = draw.rng(SEED)
    return [_case("neg_zero_fc_b2", rng, [32, 40], [[1, 2], [2, 1, 2]]),
            _case("neg_zero_fc_b1", rng, [36], [[2, 1]])]
