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
  constants     for a constant of the definitions changed by a few units in the last place
                (CONSTANT_WITNESSES), inputs on which it gives other bits where the groups
                above show none

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


# (constant, k): float32 bit patterns of inputs on which sigmoid or tanh gives other bits when
# that constant of the definitions (activations.h) is k units in the last place of its
# magnitude larger (k < 0: smaller). Listed for the changes of 1, 2, 4, 8, 16, 64 and 256 units
# that no other input of this fixture shows; found by visiting all 2^32 inputs with the C
# definitions (tests/act_witness_scan.py). A change no input shows is the same function
# (tests/test_edge_fixtures.py, SAME_FUNCTION).
CONSTANT_WITNESSES = {
    ("E5", +1): (0x3f7be605, 0x3e7afe39, 0xc23df280, 0xc0a3c115),
    ("E5", -1): (0xbe8b812d, 0xc08f92db, 0x3eb391c1, 0xbeb391c1),
    ("E5", +2): (0xbe5e0e07, 0x3f7be605, 0xbf9d584a, 0x3f9d584a),
    ("E5", +4): (0xc2434343, 0xbe5e0e07, 0x3f7be605, 0xbf9d584a),
    ("E5", +8): (0xc2434343, 0xc16e201e, 0xc1b89174, 0xbfce789a),
    ("E6", +1): (0xc0bada93, 0xc1413d77, 0xbea98d6a, 0x3f824f0b),
    ("E6", -1): (0xbef2191d, 0xbf7794c5, 0xbe8ba3bc, 0x3ea9f2c5),
    ("E6", +2): (0xc08f92db, 0xc23df280, 0xc0bada93, 0xc1413d77),
    ("E6", -2): (0xbef2191d, 0xbf7794c5, 0xc1b9bb26, 0xbe8ba3bc),
    ("E6", +4): (0xbe8b812d, 0xc08f92db, 0xc23df280, 0xbeb3b79b),
    ("E6", -4): (0xbeaab52d, 0xc04ab587, 0xbf7fd7ab, 0xc248e295),
    ("E6", +8): (0xc08f92db, 0xbe95d25b, 0xbe8b812d, 0xc23df280),
    ("E6", -8): (0xbeb391c1, 0x3eb391c1, 0xbeaab52d, 0xbe977acd),
    ("E6", +16): (0xc08f92db, 0xbe8b812d, 0xbe95d25b, 0xc23df280),
    ("E6", -16): (0xbeb391c1, 0x3eb391c1, 0xbeaab52d, 0xbe977acd),
    ("T6", +1): (0x3ecfa889, 0xbecfa889, 0x3ed3417c, 0xbf07a0b5),
    ("T6", +2): (0x3f02d296, 0xbf02d296, 0x3f08c30a, 0xbf08c30a),
    ("T8", +1): (0xbef3a577, 0x3ef3a577, 0xbef3ab84, 0x3ef3ab84),
    ("T8", -1): (0xbeedd9d5, 0x3eedd9d5, 0xbf0b7732, 0x3f0599c1),
    ("T8", +2): (0xbef3a577, 0x3ef3a577, 0xbef3ab84, 0x3ef3ab84),
    ("T8", -2): (0x3ef6227a, 0xbef6227a, 0xbeedd9d5, 0xbf0bdf92),
    ("T8", -4): (0xbed3417c, 0x3f07a0b5, 0x3f0badca, 0x3ed3417c),
    ("T8", -8): (0xbed3417c, 0x3f07a0b5, 0x3f0badca, 0xbefbac1a),
    ("T8", -16): (0x3f02d296, 0xbf02d296, 0x3f08c30a, 0xbf08c30a),
    ("T10", +1): (0x3efc7d70, 0xbefc7d70, 0x3ede7444, 0xbede7444),
    ("T10", -1): (0xbefdcf03, 0x3efdcf03, 0xbefa7d81, 0x3efa7d81),
    ("T10", +2): (0x3efc7d70, 0xbefc7d70, 0x3f023db1, 0xbf023db1),
    ("T10", -2): (0xbec4d9f1, 0x3ee77aa5, 0x3ec4d9f1, 0xbee77aa5),
    ("T10", +4): (0xbefc7d70, 0x3efc7d70, 0xbf023db1, 0x3f023db1),
    ("T10", -4): (0x3ec4d9f1, 0xbec4d9f1, 0xbee77aa5, 0x3ee77aa5),
    ("T10", +8): (0xbf0599c1, 0x3f0599c1, 0x3efc7d70, 0xbefa394a),
    ("T10", -8): (0xbec4d9f1, 0x3ee77aa5, 0x3ec4d9f1, 0xbee77aa5),
    ("T10", +16): (0x3f0b7732, 0xbf0b7732, 0xbf0599c1, 0x3f0599c1),
    ("T10", -16): (0xbef3a577, 0x3ef3a577, 0x3ef3ab84, 0xbef3ab84),
    ("T10", +64): (0xbf07a0b5, 0xbf0badca, 0x3f07a0b5, 0xbef6227a),
    ("T10", +256): (0x3f02d296, 0xbf02d296, 0x3f08c30a, 0xbf08c30a),
    ("NEG_LN2_LO", -16): (0xc286770c, 0xc286776e),
    ("NEG_LN2_LO", +64): (0xc2b7d1b3, 0xc2b7de7d, 0xc2b90f31, 0xc2b7d05c),
    ("NEG_LN2_LO", -64): (0xc286770c, 0xc286776e, 0xc25b09d6, 0xc173fd84),
    ("NEG_LN2_LO", +256): (0xc2b7d1b3, 0xc2b7de7d, 0xc2b90f31, 0xc247a803),
    ("NEG_LN2_LO", -256): (0xc2a92840, 0xc2a926b4, 0xc2a924fc, 0xc286770c),
}


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
        "constants": np.unique(np.array([b for w in CONSTANT_WITNESSES.values() for b in w],
                                        np.uint32)).view(F32),
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
