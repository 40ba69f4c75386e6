"""step: the whole-model batch gradient on tiny configs (input height 4..8, one or two conv
blocks of 1..3 channels with kernels and pools 1..3, one BiLSTM layer of hidden 1..3, 2..5
classes), 1..3 lines of small widths with targets that may not fit.

Weights start from the model's initialisation (PyTorch's uniform ranges) and up to three
tensors are replaced by drawn arrays (zeros, tiny, subnormal, integer, ... values). The
signed-zero family sets the LSTM's g and o rows to zero with biases near -5 and -103, so
every LSTM output is a tiny negative subnormal and the classifier's dW rows of the classes no
target holds are -0 in every line (generators/cases/step_edges.py): the batch sum must keep
them -0."""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from ....generators import model
from ....generators.geometry import conv_extent
from ....generators.model import kpadded

from ..values import Choice, Reader, array, cases as from_bytes, recipe_bytes, rng

F32 = np.float32
SIZE = 86           # bytes a case at most (family, config, weights, 3 lines)
SAFE = ("zero", "one", "int", "uniform", "normal", "pow2", "tiny", "subnormal")
FAMILY = Choice(("ordinary", "signed_zero"))
KERNELS = Choice((1, 2, 3))
HEIGHTS = Choice((4, 8, 6, 5))
LINES = Choice((1, 2, 3), (2, 2, 1))
REPLACED = 3                                   # weight tensors replaced by drawn arrays, at most
RECIPE = recipe_bytes()
LINE_BYTES = 1 + RECIPE + 1 + 5                # width, image, target length, labels
FALLBACK = [{"out": 2, "kh": 3, "kw": 3, "padH": 1, "padW": 1, "poolH": 2, "poolW": 2}]


def valid_width(config, width) -> bool:
    return all(g["Hc"] >= 1 and g["Wc"] >= 1 and g["Hp"] >= 1 and g["Wp"] >= 1
               for g in model.block_geometry(config, width))


def block(r: Reader) -> dict:
    kh, kw = KERNELS.read(r), KERNELS.read(r)
    return {"out": r.size(1, 3), "kh": kh, "kw": kw, "padH": r.below(kh), "padW": r.below(kw),
            "poolH": 1 + r.below(2), "poolW": 1 + r.below(3)}


def config(r: Reader, blocks=None) -> dict:
    """A tiny config; `blocks` given, its block bytes are read all the same (14)."""
    classes = 2 + r.below(4)
    c = {"name": "fuzz", "input_height": HEIGHTS.read(r), "input_channels": 1,
         "hidden": r.size(1, 3), "lstm_layers": 1, "classes": classes,
         "alphabet": "abcd"[:classes - 1]}
    two = r.flag(0.5)
    drawn = [block(r), block(r)]
    c["blocks"] = blocks or drawn[:1 + two]
    if not valid_width(c, 64):
        c["input_height"], c["blocks"] = 8, FALLBACK
    return c


def first_width(c, min_T: int = 1) -> int:
    """The smallest width that gives at least min_T steps (and at least one column in every
    block): each block needs its pooled width, so its input width, from the last block back."""
    need = max(1, min_T)
    for blk in reversed(c["blocks"]):
        need = max(1, need * blk["poolW"] + blk["kw"] - 1 - 2 * blk["padW"])
    return need


def steps_for_width(c, width: int) -> int:
    for blk in c["blocks"]:
        width = conv_extent(width, blk["kw"], blk["padW"]) // blk["poolW"]
    return width


class Spec(NamedTuple):
    name: str
    shape: tuple
    decay: bool
    bound: float            # PyTorch's initialisation range (generators/model.init_params)
    columns: int            # the real columns of a conv weight (the rest are padding)


def specs_of(c) -> list:
    """generators/model.param_specs(c) (names, shapes, decay flags, in the parameter order),
    with each tensor's initialisation range: a third of the cost."""
    out, C, H = [], c["input_channels"], c["input_height"]
    for n, blk in enumerate(c["blocks"]):
        K = blk["kh"] * blk["kw"] * C
        bound = 1 / math.sqrt(K)
        out += [Spec(f"conv{n}.W", (blk["out"], kpadded(K)), True, bound, K),
                Spec(f"conv{n}.b", (blk["out"],), False, bound, 0)]
        C, H = blk["out"], conv_extent(H, blk["kh"], blk["padH"]) // blk["poolH"]
    hidden, inp = c["hidden"], H * C
    bound = 1 / math.sqrt(hidden)
    for layer in range(c["lstm_layers"]):
        for d in ("fwd", "rev"):
            out += [Spec(f"lstm{layer}.{d}.W_ih", (4 * hidden, inp), True, bound, 0),
                    Spec(f"lstm{layer}.{d}.W_hh", (4 * hidden, hidden), True, bound, 0),
                    Spec(f"lstm{layer}.{d}.b", (4 * hidden,), False, bound, 0)]
        inp = 2 * hidden
    bound = 1 / math.sqrt(2 * hidden)
    return out + [Spec("fc.W", (c["classes"], 2 * hidden), True, bound, 0),
                  Spec("fc.b", (c["classes"],), False, bound, 0)]


class Weights:
    """Every tensor of a model as a view of one flat float32 array (the `params` input)."""

    def __init__(self, specs, flat: np.ndarray):
        self.flat, self.at = flat, {}
        at = 0
        for s in specs:
            n = math.prod(s.shape)
            self.at[s.name] = (at, at + n, s.shape)
            at += n

    def __getitem__(self, name: str) -> np.ndarray:
        lo, hi, shape = self.at[name]
        return self.flat[lo:hi].reshape(shape)

    def __setitem__(self, name: str, value) -> None:
        self[name][...] = value


def weights(r: Reader, specs) -> Weights:
    """The initialisation from a seed (one uniform draw for every tensor), then up to REPLACED
    tensors replaced by drawn arrays (slots of a tensor index and a recipe, the first `count`
    used)."""
    sizes = [math.prod(s.shape) for s in specs]
    scale = np.repeat([s.bound for s in specs], sizes)
    p = Weights(specs, (rng(r.seed()).uniform(-1, 1, scale.size) * scale).astype(F32))
    for s in specs:
        if s.columns:
            p[s.name][:, s.columns:] = 0.0             # the padding columns
    count = r.size(0, REPLACED)
    for slot in range(REPLACED):
        s, recipe = specs[r.below(len(specs))], r.sub(RECIPE)
        if slot < count:
            p[s.name] = array(recipe, s.shape, kinds=SAFE, scales=False)
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


def batch(r: Reader, c, B: int, slots: int, min_T: int = 1) -> list:
    """B lines from the first B of `slots` fixed-size slots: a width (the smallest the config
    takes, and up to 8 more), an image, a target that may not fit."""
    if B == 0:
        r.take(slots * LINE_BYTES)
        return []
    w0 = first_width(c, min_T)
    lines = []
    for slot in range(slots):
        s = r.sub(LINE_BYTES)
        if slot >= B:
            continue
        w = w0 + s.size(0, 8)
        T = steps_for_width(c, w)
        img = array(s, (c["input_height"], w), kinds=SAFE, scales=False)
        L = s.below(min(T + 1, 5) + 1)
        lines.append((img, [1 + (b * (c["classes"] - 1) >> 8) for b in s.take(5)[:L]]))
    return lines


def inputs_of(lines) -> dict:
    return {"widths": np.array([im.shape[1] for im, _ in lines], np.int32),
            "images": np.concatenate([im.astype(F32).ravel() for im, _ in lines]),
            "target_lens": np.array([len(t) for _, t in lines], np.int32),
            "targets": np.array([v for _, t in lines for v in t], np.int32)}


def meta(c, specs, lines) -> dict:
    return {"config": c, "names": [s.name for s in specs], "shapes": [list(s.shape) for s in specs],
            "B": len(lines), "widths": [int(im.shape[1]) for im, _ in lines],
            "target_lens": [len(t) for _, t in lines]}


def ordinary(r: Reader):
    c = config(r)
    specs = specs_of(c)
    p = weights(r, specs)
    return c, specs, p, batch(r, c, LINES.read(r), 3)


BIAS_I = Choice((5.0, 3.0, 8.0))
BIAS_G = Choice((-5.0, -3.0, -8.0))
BIAS_O = Choice((-103.0, -102.0, -104.0, -101.5))


def signed_zero_family(r: Reader):
    """One 3x3 block (8 rows, pool 2): lines of 16 steps or more, every LSTM output -2^-149."""
    blocks = [{"out": 1 + r.below(2), "kh": 3, "kw": 3, "padH": 1, "padW": 1, "poolH": 2,
               "poolW": 2}]
    c = config(r, blocks=blocks)
    c["input_height"] = 8
    specs = specs_of(c)
    p = weights(r, specs)
    B = LINES.read(r)
    signed_zero(p, c, BIAS_I.read(r), BIAS_G.read(r), BIAS_O.read(r))
    p["fc.b"] = array(r, c["classes"], kinds=("zero", "uniform"), scales=False) * F32(0.3)
    return c, specs, p, batch(r, c, B, 3, min_T=16)


FAMILIES = {"ordinary": ordinary, "signed_zero": signed_zero_family}


def decode(r: Reader):
    c, specs, p, lines = FAMILIES[FAMILY.read(r)](r)
    inputs = {"cfg": model.cfg_array(c), "params": p.flat, **inputs_of(lines)}
    return meta(c, specs, lines), inputs


def cases():
    return from_bytes(decode, SIZE)
