"""lstm: the bidirectional layer (T 1..6, I 1..20, H 1..5, the small end favoured) and its
element-wise functions (case kind `activations`: crnn_sigmoid and crnn_tanh on arrays cut into
segments).

Families: ordinary data; saturating biases (gates at exactly 0 and 1); underflowing backward
products (tiny x and W_ih against a tiny dOut: dW_ih's dots over t and dx's over 8H end at
signed zeros); and for the activations, values near every clamp, branch threshold and range
reduction point of docs/numerics.md, every binade, the specials (NaNs with payloads, ±inf)."""
from __future__ import annotations

import numpy as np

from ....generators.edge_values import nan32_variants
from ....generators.spec import activations as A

from ..values import KINDS, Choice, Reader, array, cases as from_bytes, f32_specials, picks

F32 = np.float32
LN2 = np.log(2.0)
SIZE = 74           # bytes a case at most (the family, 3 sizes, five arrays)


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
SPECIALS = f32_specials()
FAMILY = Choice(("ordinary", "saturated", "underflow", "activations"), (3, 2, 2, 3))


def activations(r: Reader):
    """1..70 values of every kind with up to 6 specials; half the time a run of thresholds
    at the front; cut in two calls (or one)."""
    n = r.size(1, 70)
    at_thresholds = r.flag(0.5)
    x = array(r, n, kinds=KINDS, specials=ACT_SPECIALS, huge_exp=128, slots=6)
    run = picks(r, THRESHOLDS, 1, n)
    if at_thresholds:
        x[:len(run)] = run
    cut = r.below(n + 1)
    lengths = [v for v in (cut, n - cut) if v]
    return {"kind": "activations"}, {"x": x, "lengths": np.array(lengths, np.int64)}


def ordinary(r: Reader, T: int, I: int, H: int):
    x, W_ih = array(r, (T, I), specials=SPECIALS), array(r, (2, 4 * H, I), specials=SPECIALS)
    W_hh = array(r, (2, 4 * H, H), specials=SPECIALS)
    b = array(r, (2, 4 * H), specials=SPECIALS)
    return x, W_ih, W_hh, b, array(r, (T, 2 * H), specials=SPECIALS)


def saturated(r: Reader, T: int, I: int, H: int):
    x, W_ih, W_hh, b, dOut = ordinary(r, T, I, H)
    return x, W_ih, W_hh, (np.sign(b) + (b == 0)) * F32(60.0), dOut


def underflow(r: Reader, T: int, I: int, H: int):
    x = array(r, (T, I), kinds=("tiny",))
    W_ih = array(r, (2, 4 * H, I), kinds=("tiny",))
    W_hh = array(r, (2, 4 * H, H), kinds=("zero", "tiny"))
    b = array(r, (2, 4 * H), kinds=("one", "uniform", "normal"))
    return x, W_ih, W_hh, b, array(r, (T, 2 * H), kinds=("tiny",))


FAMILIES = {"ordinary": ordinary, "saturated": saturated, "underflow": underflow,
            "activations": activations}


def decode(r: Reader):
    family = FAMILY.read(r)
    if family == "activations":
        return FAMILIES[family](r)
    T, I, H = r.size(1, 6), r.size(1, 20), r.size(1, 5)
    x, W_ih, W_hh, b, dOut = FAMILIES[family](r, T, I, H)
    return {"T": T, "I": I, "H": H}, {"x": x, "W_ih": W_ih, "W_hh": W_hh,
                                      "b": b.astype(F32), "dOut": dOut}


def cases():
    return from_bytes(decode, SIZE)
