"""lstm: the bidirectional layer (T 1..6, I 1..20, H 1..5) and its element-wise functions
(case kind `activations`: crnn_sigmoid and crnn_tanh on arrays cut into segments).

Families: ordinary data; saturating biases (gates at exactly 0 and 1); underflowing backward
products (tiny x and W_ih against a tiny dOut: dW_ih's dots over t and dx's over 8H end at
signed zeros); and for the activations, values near every clamp, branch threshold and range
reduction point of docs/numerics.md, every binade, the specials (NaNs with payloads, ±inf)."""
from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from crnn_conformance.generators.edge_values import nan32_variants
from crnn_conformance.generators.spec import activations as A

from ..values import KINDS, array, f32_specials, ints, picks, sampled

F32 = np.float32
LN2 = np.log(2.0)


def thresholds() -> tuple:
    """The points where sigmoid's and tanh's arithmetic changes course, with neighbours."""
    k = np.arange(0, 151) + 0.5
    pts = np.concatenate([[104.0, 52.0, float(A.TANH_SMALL), float(A.TANH_TINY), 126 * LN2,
                           63 * LN2], k * LN2, k * LN2 / 2]).astype(F32)
    out = [pts]
    lo = hi = pts
    for _ in range(2):
        lo, hi = np.nextafter(lo, F32(-np.inf)), np.nextafter(hi, F32(np.inf))
        out += [lo, hi]
    v = np.concatenate(out)
    return tuple(F32(x) for x in np.concatenate([v, -v]))


THRESHOLDS = thresholds()
ACT_SPECIALS = f32_specials(nan=True, inf=True, extra=tuple(nan32_variants()))


@st.composite
def activations(draw):
    n = draw(ints(1, 70))
    pick = draw(sampled(("mixed", "thresholds")))
    x = draw(array(n, kinds=KINDS, specials=ACT_SPECIALS, huge_exp=128, max_specials=6))
    if pick == "thresholds":
        idx = picks(draw, THRESHOLDS, 1, n)
        x[:len(idx)] = idx
    cut = draw(ints(0, n))
    lengths = [v for v in (cut, n - cut) if v]
    return {"kind": "activations"}, {"x": x, "lengths": np.array(lengths, np.int64)}


@st.composite
def layer(draw):
    T, I, H = draw(ints(1, 6)), draw(ints(1, 20)), draw(ints(1, 5))
    family = draw(sampled(("ordinary", "saturated", "underflow")))
    sp = f32_specials()
    if family == "underflow":
        x = draw(array((T, I), kinds=("tiny",)))
        W_ih = draw(array((2, 4 * H, I), kinds=("tiny",)))
        W_hh = draw(array((2, 4 * H, H), kinds=("zero", "tiny")))
        b = draw(array((2, 4 * H), kinds=("one", "uniform", "normal")))
        dOut = draw(array((T, 2 * H), kinds=("tiny",)))
    else:
        x, W_ih = draw(array((T, I), specials=sp)), draw(array((2, 4 * H, I), specials=sp))
        W_hh = draw(array((2, 4 * H, H), specials=sp))
        b = draw(array((2, 4 * H), specials=sp))
        if family == "saturated":
            b = (np.sign(b) + (b == 0)) * F32(60.0)
        dOut = draw(array((T, 2 * H), specials=sp))
    return {"T": T, "I": I, "H": H}, {"x": x, "W_ih": W_ih, "W_hh": W_hh,
                                      "b": b.astype(F32), "dOut": dOut}


def cases():
    return st.one_of(layer(), activations())
