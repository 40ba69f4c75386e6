"""step: the whole-model batch gradient on tiny configs (input height 4..8, one or two conv
blocks of 1..3 channels with kernels and pools 1..3, one BiLSTM layer of hidden 1..3, 2..5
classes), 1..3 lines of small widths with targets that may not fit.

Weights start from the model's initialisation and a few tensors are replaced by drawn arrays
(zeros, tiny, subnormal, integer, ... values). The signed-zero family sets the LSTM's g and o
rows to zero with biases near -5 and -103, so every LSTM output is a tiny negative subnormal
and the classifier's dW rows of the classes no target holds are -0 in every line
(generators/cases/step_edges.py): the batch sum must keep them -0."""
from __future__ import annotations

from functools import lru_cache

import numpy as np
from hypothesis import strategies as st

from crnn_conformance.generators import model

from ..values import BOOLEANS, array, ints, sampled

F32 = np.float32
SAFE = ("zero", "one", "int", "uniform", "normal", "pow2", "tiny", "subnormal")


def valid_width(config, width) -> bool:
    return all(g["Hc"] >= 1 and g["Wc"] >= 1 and g["Hp"] >= 1 and g["Wp"] >= 1
               for g in model.block_geometry(config, width))


@lru_cache(maxsize=None)   # one strategy object (values.sampled says why)
@st.composite
def block(draw):
    kh, kw = draw(ints(1, 3)), draw(ints(1, 3))
    return {"out": draw(ints(1, 3)), "kh": kh, "kw": kw,
            "padH": draw(ints(0, kh - 1)), "padW": draw(ints(0, kw - 1)),
            "poolH": draw(ints(1, 2)), "poolW": draw(ints(1, 3))}


@st.composite
def config(draw, hidden=None, blocks=None):
    classes = draw(ints(2, 5))
    c = {"name": "fuzz", "input_height": draw(sampled((4, 8, 6, 5))), "input_channels": 1,
         "blocks": blocks or [draw(block()) for _ in range(draw(ints(1, 2)))],
         "lstm_layers": 1, "hidden": hidden or draw(ints(1, 3)), "classes": classes,
         "alphabet": "abcd"[:classes - 1]}
    if not valid_width(c, 64):
        c["input_height"] = 8
        c["blocks"] = [{"out": 2, "kh": 3, "kw": 3, "padH": 1, "padW": 1, "poolH": 2, "poolW": 2}]
    return c


def min_width(c) -> int:
    return next(w for w in range(1, 200) if valid_width(c, w))


@st.composite
def weights(draw, c):
    p = model.init_params(c, np.random.default_rng(draw(ints(0, 2 ** 16))))
    names = list(p)
    for i in draw(st.lists(ints(0, len(names) - 1), max_size=3)):
        k = names[i]
        p[k] = draw(array(p[k].shape, kinds=SAFE, scales=False))
    return p


def signed_zero(p, c, b_i, b_g, b_o):
    H = c["hidden"]
    for d in ("fwd", "rev"):
        for gate, bias in ((2, b_g), (3, b_o)):
            rows = slice(gate * H, (gate + 1) * H)
            p[f"lstm0.{d}.W_ih"][rows] = 0.0
            p[f"lstm0.{d}.W_hh"][rows] = 0.0
            p[f"lstm0.{d}.b"][rows] = bias
        p[f"lstm0.{d}.b"][0:H] = b_i


@st.composite
def batch(draw, c, B, min_T=1):
    lines = []
    w0 = min_width(c)
    for _ in range(B):
        w = w0 + draw(ints(0, 8))
        while model.steps_for_width(c, w) < min_T:
            w += 1
        T = model.steps_for_width(c, w)
        img = draw(array((c["input_height"], w), kinds=SAFE, scales=False))
        L = draw(ints(0, min(T + 1, 5)))
        tgt = [draw(ints(1, c["classes"] - 1)) for _ in range(L)]
        lines.append((img, tgt))
    return lines


def inputs_of(c, p, lines) -> dict:
    return {"widths": np.array([im.shape[1] for im, _ in lines], np.int32),
            "images": np.concatenate([im.astype(F32).ravel() for im, _ in lines]),
            "target_lens": np.array([len(t) for _, t in lines], np.int32),
            "targets": np.array([v for _, t in lines for v in t], np.int32)}


def meta(c, lines) -> dict:
    specs = model.param_specs(c)
    return {"config": c, "names": [s.name for s in specs], "shapes": [list(s.shape) for s in specs],
            "B": len(lines), "widths": [int(im.shape[1]) for im, _ in lines],
            "target_lens": [len(t) for _, t in lines]}


@st.composite
def cases(draw):
    zero_family = draw(BOOLEANS)
    if zero_family:
        c = draw(config(blocks=[{"out": draw(ints(1, 2)), "kh": 3, "kw": 3, "padH": 1,
                                 "padW": 1, "poolH": 2, "poolW": 2}]))
        c["input_height"] = 8
    else:
        c = draw(config())
    p = draw(weights(c))
    B = draw(ints(1, 3))
    if zero_family:
        signed_zero(p, c, draw(sampled((5.0, 3.0, 8.0))),
                    draw(sampled((-5.0, -3.0, -8.0))),
                    draw(sampled((-103.0, -102.0, -104.0, -101.5))))
        p["fc.b"] = draw(array(c["classes"], kinds=("uniform", "zero"), scales=False)) * F32(0.3)
    lines = draw(batch(c, B, min_T=16 if zero_family else 1))
    inputs = {"cfg": model.cfg_array(c), "params": model.flatten(c, p), **inputs_of(c, p, lines)}
    return meta(c, lines), inputs
