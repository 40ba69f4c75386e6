"""sigmoid and tanh on their own (fixtures/activations.h5, read by the lstm layer as case kind
`activations`: crnn_sigmoid and crnn_tanh): exact tier only (docs/edge-cases.md).

Inputs, each function on all of them:
  binades       every float32 binade of both signs (subnormal ones included): its first and
                last value and four between
  specials      ±0, ±inf, the extremes of each class, NaNs of both signs with payloads and a
                signalling NaN (returned quiet: x + x)
  clamps        sigmoid's clamp of -|x| at -104 (x = ±104) and tanh's of -2|x| (x = ±52), each
                with 8 neighbours a side
  tanh_branches TANH_SMALL (0.55) and TANH_TINY (2^-12), each with 8 neighbours a side, both
                signs
  reductions    exp_neg's range reduction: the float32 points where n = round(v log2 e) steps
                (v = -(k + 1/2) ln 2, k = 0..150) with 3 neighbours a side, as sigmoid sees v
                (x = ±(k + 1/2) ln 2) and as tanh does (x = ±(k + 1/2) ln 2 / 2); and the
                subnormal boundary of e^v (v = -126 ln 2)
  dense         40 000 uniform values in [-20, 20] and 20 000 in [-110, 110]

`lengths` cuts x into consecutive segments of 1, 2, .., 37 elements and the rest, one port call
each, so every vector path's tail (1..15 lanes) is taken.
"""
from __future__ import annotations

import numpy as np

from .. import draw, exact
from ..edge_values import (binades, float_specials, nan32_variants,
                           neighbours)
from ..spec import activations as A

NAME = "activations"
LAYER = "lstm"
SEED = 4005
F32 = np.float32
LN2 = np.log(2.0)


def groups(rng) -> dict:
    both = lambda v: np.concatenate([v, -v]).astype(F32)
    k = np.arange(151) + 0.5
    return {
        "binades": binades(F32, rng, per=6),
        "specials": np.concatenate([float_specials(F32), nan32_variants()]),
        "clamps": both(np.concatenate([neighbours(104.0, 8, F32), neighbours(52.0, 8, F32)])),
        "tanh_branches": both(np.concatenate([neighbours(A.TANH_SMALL, 8, F32),
                                              neighbours(A.TANH_TINY, 8, F32)])),
        "reductions": both(np.concatenate([neighbours(k * LN2, 3, F32),
                                           neighbours(k * LN2 / 2, 3, F32),
                                           neighbours(126 * LN2, 3, F32),
                                           neighbours(63 * LN2, 3, F32)])),
        "dense": np.concatenate([rng.uniform(-20, 20, 40000),
                                 rng.uniform(-110, 110, 20000)]).astype(F32),
    }


def segments(n: int) -> np.ndarray:
    """Lengths 1, 2, .., 37 (every tail of every vector width), then the rest in one call."""
    out = [k for k in range(1, 38)]
    return np.array(out + [n - sum(out)], np.int64)


def build():
    rng = draw.rng(SEED)
    g = groups(rng)
    x = np.concatenate(list(g.values())).astype(F32)
    counts = {name: int(v.size) for name, v in g.items()}
    return [exact.case(LAYER, "sigmoid_tanh", {"kind": "activations", "groups": counts},
                       {"x": x, "lengths": segments(x.size)})]
