"""conv: one block of any geometry the ABI takes (kernels and pools 1..3, padding below the
kernel, inputs up to 12 x 12, C up to 64 and Out up to 68), forward then backward with the
winners. Most cases are small: C and Out are 1..8 but in about one case in eight, which
keeps the bundled port's 64-channel pool blocks (Out 65, 68) and its listed sparse dW (C >= 8)
in reach without their cost in every case.

Families: ordinary data (NaN, ±0 among the specials of x, b and W's padding columns: the pool
rules; nothing that overflows, so every NaN is an input's); integer data (exact sums: ties
between twins and non-twins); underflowing forward products (x > 0 tiny against tiny weights,
b = ±0: the dots' signed zeros, padding terms included); underflowing backward products
(channel 0 ordinary, the others tiny, dPooled tiny: dW's lanes over p end at signed zeros,
listed and dense, and so do dcol's over o); sparse winners (one per window, placed by one
channel: the zero terms a sparse dW leaves out)."""
from __future__ import annotations

import numpy as np

from ....generators.geometry import conv_size
from ....generators.model import kpadded

from ..values import Choice, Reader, array, cases as from_bytes, f32_specials, rng

F32 = np.float32
SIZE = 82           # bytes a case at most (ordinary's: family, geometry, 5 arrays)
FAMILY = Choice(("ordinary", "integers", "forward_underflow", "backward_underflow",
                 "sparse_winners"), (3, 2, 2, 2, 2))
KERNELS = Choice((1, 2, 3))
POOLS = Choice((1, 2, 3))
CHANNELS = Choice((1, 2, 3, 4, 5, 8, 16, 32, 64), (40, 40, 34, 26, 20, 30, 4, 3, 3))
OUTS = Choice((1, 2, 3, 4, 5, 8, 16, 20, 65, 68), (40, 40, 34, 26, 20, 30, 3, 2, 3, 2))
NAN_SPECIALS = f32_specials(nan=True, big=False)


def geometry(r: Reader, channels=CHANNELS, kernels=KERNELS) -> dict:
    kh, kw = kernels.read(r), kernels.read(r)
    padH, padW = r.below(kh), r.below(kw)
    poolH, poolW = POOLS.read(r), POOLS.read(r)
    # H + 2 padH - kh + 1 >= poolH: the smallest H (at least 1) and some more
    H = max(1, poolH + kh - 1 - 2 * padH) + r.size(0, 8)
    W = max(1, poolW + kw - 1 - 2 * padW) + r.size(0, 8)
    return dict(H=H, W=W, C=channels.read(r), Out=OUTS.read(r), kh=kh, kw=kw, padH=padH,
                padW=padW, poolH=poolH, poolW=poolW, dx=r.flag(0.5))


def sizes(g):
    Hc, Wc = conv_size(g["H"], g["W"], g["kh"], g["kw"], g["padH"], g["padW"])
    return Hc // g["poolH"], Wc // g["poolW"], g["kh"] * g["kw"] * g["C"]


def padded(taps, pad=None) -> np.ndarray:
    """W with its rows padded to kpadded(K) columns (zeros, or `pad`)."""
    out, K = taps.shape
    W = np.zeros((out, kpadded(K)), F32)
    W[:, :K] = taps
    if pad is not None:
        W[:, K:] = pad
    return W


def ordinary(r: Reader):
    g = geometry(r)
    Hp, Wp, K = sizes(g)
    x = array(r, (g["H"], g["W"], g["C"]), specials=NAN_SPECIALS)
    W = padded(array(r, (g["Out"], K), specials=NAN_SPECIALS),
               array(r, (g["Out"], kpadded(K) - K), kinds=("zero",), specials=NAN_SPECIALS))
    b = array(r, g["Out"], specials=NAN_SPECIALS)
    return g, x, W, b, array(r, (Hp, Wp, g["Out"]), specials=NAN_SPECIALS)


def integers(r: Reader):
    g = geometry(r)
    Hp, Wp, K = sizes(g)
    x = array(r, (g["H"], g["W"], g["C"]), kinds=("one", "int"), scales=False)
    W = padded(array(r, (g["Out"], K), kinds=("zero", "one", "int"), scales=False))
    b = array(r, g["Out"], kinds=("zero", "int"), scales=False)
    return g, x, W, b, array(r, (Hp, Wp, g["Out"]))


FU_CHANNELS = Choice((2, 3, 5, 16), (5, 5, 4, 1))
FU_KERNELS = Choice((2, 3))
FU_SIGNS = Choice(((0, 0), (1, -1), (-1, 1), (1, 1)), (1, 2, 2, 1))   # of x, of W; 0: mixed
FU_BIAS = Choice((0.0, -0.0), (1, 2))


def forward_underflow(r: Reader):
    """x and W tiny, their products of one sign (negative: every lane ends at -0) or mixed,
    b = -0 (the dot's sign shows in conv) or +0; mostly C that leaves padding columns."""
    g = geometry(r, channels=FU_CHANNELS, kernels=FU_KERNELS)
    Hp, Wp, K = sizes(g)
    sx, sw = FU_SIGNS.read(r)
    fix = lambda a, s: np.abs(a) * F32(s) if s else a          # noqa: E731
    x = fix(array(r, (g["H"], g["W"], g["C"]), kinds=("tiny",)), sx)
    W = padded(fix(array(r, (g["Out"], K), kinds=("tiny",)), sw))
    b = np.full(g["Out"], FU_BIAS.read(r), F32)
    return g, x, W, b, array(r, (Hp, Wp, g["Out"]))


BU_CHANNELS = Choice((2, 3, 8, 16, 32), (8, 8, 8, 2, 1))


def backward_underflow(r: Reader):
    g = geometry(r, channels=BU_CHANNELS)
    Hp, Wp, K = sizes(g)
    taps = g["kh"] * g["kw"]
    x = array(r, (g["H"], g["W"], g["C"]), kinds=("tiny",))
    x[:, :, 0] = array(r, (g["H"], g["W"]))
    w = array(r, (g["Out"], taps, g["C"]), kinds=("tiny",))
    w[:, :, 0] = array(r, (g["Out"], taps))
    b = array(r, g["Out"], kinds=("one", "uniform"))
    return g, x, padded(w.reshape(g["Out"], K)), b, \
        array(r, (Hp, Wp, g["Out"]), kinds=("tiny",))


SW_CHANNELS = Choice((8, 16, 32), (17, 2, 1))
SW_OUTS = Choice((1, 4, 5, 8), (2, 3, 2, 1))
SW_POOLS = Choice(((1, 2), (2, 1), (2, 2)))
SW_WIDTHS = Choice((8, 12, 16), (3, 2, 1))


def sparse_winners(r: Reader):
    """One winner per window, placed by channel 0 (1 at the winner, a weight of 1 on the
    centre tap, bias 1/4); the other channels tiny and > 0, dPooled tiny and < 0. dW's dots
    over p then hold a few products that underflow to -0 among the losers' exact zero terms
    (+0, which turn a -0 lane back to +0): what a port that leaves out zero terms must still
    get right (generators/cases/conv_edges.py). C >= 8 takes the bundled port's listed dW."""
    C, Out = SW_CHANNELS.read(r), SW_OUTS.read(r)
    poolH, poolW = SW_POOLS.read(r)
    Wd = SW_WIDTHS.read(r)
    H = (4 + r.size(0, 4)) * poolH
    Hp, Wp = H // poolH, Wd // poolW          # 3x3, pad 1: the conv output is H x Wd
    cell = np.floor(rng(r.seed()).uniform(0, poolH * poolW, Hp * Wp)).astype(np.int64)
    x = np.zeros((H, Wd, C), F32)
    x[:, :, 1:] = np.abs(array(r, (H, Wd, C - 1), kinds=("tiny",)))
    oy, ox = np.divmod(np.arange(Hp * Wp), Wp)
    x[oy * poolH + cell // poolW, ox * poolW + cell % poolW, 0] = 1.0
    taps = array(r, (Out, 9, C), kinds=("tiny",))
    taps[:, :, 0] = 0.0
    taps[:, 4, 0] = 1.0
    g = dict(H=H, W=Wd, C=C, Out=Out, kh=3, kw=3, padH=1, padW=1, poolH=poolH, poolW=poolW,
             dx=r.flag(0.5))
    dP = -np.abs(array(r, (Hp, Wp, Out), kinds=("tiny",)))
    return g, x, padded(taps.reshape(Out, 9 * C)), np.full(Out, 0.25, F32), dP


FAMILIES = {"ordinary": ordinary, "integers": integers, "forward_underflow": forward_underflow,
            "backward_underflow": backward_underflow, "sparse_winners": sparse_winners}


def decode(r: Reader):
    g, x, W, b, dP = FAMILIES[FAMILY.read(r)](r)
    params = {**g, "KPadded": int(W.shape[1])}
    return params, {"x": x, "W": W, "b": b, "dPooled": dP}


def cases():
    return from_bytes(decode, SIZE)
