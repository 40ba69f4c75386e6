"""Clipping fixture cases: the global norm and the clipped gradients.

Random gradients in crnn-v0's parameter shapes (conv weight padding columns zero, as a real
gradient has them) scaled so that clipping is triggered, and in the shapes of a small model
of the same structure (keeping the fixture small) with clipping not triggered or disabled; plus
the (3, 4) -> (0.6, 0.8) example, tensors of awkward sizes (16-tails, a single element), and
150 tensors (a model deeper than crnn-v0: the sum over tensors past 64 and 128 terms).
"""
from __future__ import annotations

import numpy as np

from .. import draw, model
from ..float64 import clip as ref
from ..h5io import Case
from ..spec import clip as spec

NAME = "clip"
LAYER = "clip"
SEED = 7007


def _case(name, names, grads, limit, enabled, note):
    grads = [np.ascontiguousarray(g, np.float32) for g in grads]
    out, norm = spec.clip(grads, limit, enabled)
    out64, norm64 = ref.clip(grads, limit, enabled)
    sizes = np.array([g.size for g in grads], np.int64)
    inputs = {"grads": np.concatenate([g.ravel() for g in grads]), "sizes": sizes,
              "limit": np.array([limit], np.float64), "enabled": np.array([int(enabled)], np.int32)}
    exact = {n: g for n, g in zip(names, out)}
    exact["norm"] = np.array([norm], np.float64)
    f64 = {n: np.asarray(g, np.float64) for n, g in zip(names, out64)}
    f64["norm"] = np.array([norm64], np.float64)
    params = {"limit": limit, "enabled": bool(enabled), "names": list(names),
              "shapes": [list(g.shape) for g in grads], "triggered": bool(enabled and norm > limit),
              "note": note}
    return Case(name, params, inputs, {"exact": exact, "float64": f64})


def _model_grads(rng, config, sigma):
    grads = []
    pads = {f"conv{n}.W": b["kh"] * b["kw"] * c for n, (b, c) in enumerate(
        zip(config["blocks"], [config["input_channels"]] + [b["out"] for b in config["blocks"]]))}
    for s in model.param_specs(config):
        g = rng.normal(0.0, sigma, s.shape).astype(np.float32)
        if s.name in pads:
            g[:, pads[s.name]:] = 0.0
        grads.append(g)
    return grads


def build() -> list[Case]:
    rng = draw.rng(SEED)
    config = model.default_config()
    names = [s.name for s in model.param_specs(config)]
    cases = []
    # sigma 0.01 over 291k elements: norm about 5.4
    cases.append(_case("crnn_v0_triggered", names, _model_grads(rng, config, 0.01), 1.0, True,
                       "norm about 5.4 > limit 1: every element scaled"))
    small = model.default_config()      # a small model: same structure, 1/8 of the widths
    small.update(name="small", hidden=8, classes=11)
    for b, out in zip(small["blocks"], (4, 8, 8)):
        b["out"] = out
    names_s = [s.name for s in model.param_specs(small)]
    cases.append(_case("small_not_triggered", names_s, _model_grads(rng, small, 0.05), 10.0, True,
                       "norm about 2.5 <= limit 10: unchanged"))
    cases.append(_case("small_disabled", names_s, _model_grads(rng, small, 0.2), 1.0, False,
                       "clipping off: unchanged, norm (about 10) still reported"))
    cases.append(_case("three_four", ["a", "b"], [np.array([3.0]), np.array([4.0])], 1.0, True,
                       "(3, 4) has norm 5: clipped to about (0.6, 0.8)"))
    odd = [rng.normal(0.0, s, n) for s, n in ((1.0, 1), (0.3, 17), (2.0, 33), (0.01, 250), (5.0, 15))]
    cases.append(_case("odd_sizes", [f"t{i}" for i in range(len(odd))], odd, 3.0, True,
                       "sizes 1, 17, 33, 250, 15: lanes without a term keep their value"))
    many = [rng.normal(0.0, rng.uniform(0.01, 1.0), int(n)) for n in rng.integers(1, 40, 150)]
    cases.append(_case("many_tensors_150", [f"t{i}" for i in range(len(many))], many, 2.0, True,
                       "150 tensors (crnn-v0 has 20): more than 64 and 128 terms of the norm's "
                       "sum over tensors, which a port may block or widen"))
    return cases
