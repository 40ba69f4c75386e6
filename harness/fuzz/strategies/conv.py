"""conv: one block of any geometry the ABI takes (kernels and pools 1..3, padding below the
kernel, C and Out up to 32, inputs up to 12 x 12), forward then backward with the winners.

Families: ordinary data (NaN, ±0 among the specials of x, b and W's padding columns: the pool
rules); integer data (exact sums: ties between twins and non-twins); underflowing forward
products (x > 0 tiny against tiny weights, b = ±0: the dots' signed zeros, padding terms
included); underflowing backward products (channel 0 ordinary, the others tiny, dPooled tiny:
dW's lanes over p end at signed zeros, listed and dense, and so do dcol's over o); sparse
winners (one per window, placed by one channel: the zero terms a sparse dW leaves out)."""
from __future__ import annotations

from functools import lru_cache

import numpy as np
from hypothesis import strategies as st

from crnn_conformance.generators.model import kpadded

from ..values import BOOLEANS, array, f32_specials, ints, sampled

F32 = np.float32
CHANNELS = (1, 2, 3, 16, 4, 8, 5, 32, 64)
OUTS = (1, 4, 2, 3, 5, 8, 16, 20, 65, 68)


@lru_cache(maxsize=None)   # one strategy object (values.sampled says why)
@st.composite
def geometry(draw, channels=CHANNELS, kernels=None):
    """kernels: the kernel sizes to choose from (None: 1..3, shrinking to 1)."""
    size = sampled(kernels) if kernels else ints(1, 3)
    kh, kw = draw(size), draw(size)
    padH, padW = draw(ints(0, kh - 1)), draw(ints(0, kw - 1))
    poolH, poolW = draw(ints(1, 3)), draw(ints(1, 3))
    # H + 2 padH - kh + 1 >= poolH: the smallest H (at least 1) and some more
    H = max(1, poolH + kh - 1 - 2 * padH) + draw(ints(0, 8))
    W = max(1, poolW + kw - 1 - 2 * padW) + draw(ints(0, 8))
    return dict(H=H, W=W, C=draw(sampled(channels)), Out=draw(sampled(OUTS)),
                kh=kh, kw=kw, padH=padH, padW=padW, poolH=poolH, poolW=poolW,
                dx=draw(BOOLEANS))


def sizes(g):
    Hc, Wc = g["H"] + 2 * g["padH"] - g["kh"] + 1, g["W"] + 2 * g["padW"] - g["kw"] + 1
    return Hc // g["poolH"], Wc // g["poolW"], g["kh"] * g["kw"] * g["C"]


@lru_cache(maxsize=None)
@st.composite
def ordinary(draw):
    g = draw(geometry())
    Hp, Wp, K = sizes(g)
    sp = f32_specials(nan=True)
    x = draw(array((g["H"], g["W"], g["C"]), specials=sp))
    W = np.zeros((g["Out"], kpadded(K)), F32)
    W[:, :K] = draw(array((g["Out"], K), specials=sp))
    W[:, K:] = draw(array((g["Out"], kpadded(K) - K), kinds=("zero",), specials=sp))
    b = draw(array(g["Out"], specials=sp))
    dP = draw(array((Hp, Wp, g["Out"]), specials=sp))
    return g, x, W, b, dP


@lru_cache(maxsize=None)
@st.composite
def integers(draw):
    g = draw(geometry())
    Hp, Wp, K = sizes(g)
    W = np.zeros((g["Out"], kpadded(K)), F32)
    W[:, :K] = draw(array((g["Out"], K), kinds=("int", "one", "zero"), scales=False))
    return (g, draw(array((g["H"], g["W"], g["C"]), kinds=("int", "one"), scales=False)), W,
            draw(array(g["Out"], kinds=("int", "zero"), scales=False)),
            draw(array((Hp, Wp, g["Out"]))))


@lru_cache(maxsize=None)
@st.composite
def forward_underflow(draw):
    """x and W tiny, their products of one sign (negative: every lane ends at -0) or mixed,
    b = -0 (the dot's sign shows in conv) or +0; mostly C that leaves padding columns."""
    g = draw(geometry(channels=(3, 5, 2, 16), kernels=(3, 2)))
    Hp, Wp, K = sizes(g)
    sx, sw = draw(sampled(((1, -1), (-1, 1), (1, 1), (0, 0))))
    fix = lambda a, s: np.abs(a) * F32(s) if s else a          # noqa: E731
    W = np.zeros((g["Out"], kpadded(K)), F32)
    W[:, :K] = fix(draw(array((g["Out"], K), kinds=("tiny",))), sw)
    x = fix(draw(array((g["H"], g["W"], g["C"]), kinds=("tiny",))), sx)
    b = np.full(g["Out"], draw(sampled((-0.0, 0.0))), F32)
    return g, x, W, b, draw(array((Hp, Wp, g["Out"])))


@lru_cache(maxsize=None)
@st.composite
def backward_underflow(draw):
    g = draw(geometry(channels=(8, 16, 2, 3, 32)))
    Hp, Wp, K = sizes(g)
    x = draw(array((g["H"], g["W"], g["C"]), kinds=("tiny",)))
    x[:, :, 0] = draw(array((g["H"], g["W"])))
    taps = draw(array((g["Out"], g["kh"] * g["kw"], g["C"]), kinds=("tiny",)))
    taps[:, :, 0] = draw(array((g["Out"], g["kh"] * g["kw"])))
    W = np.zeros((g["Out"], kpadded(K)), F32)
    W[:, :K] = taps.reshape(g["Out"], K)
    b = draw(array(g["Out"], kinds=("one", "uniform")))
    return g, x, W, b, draw(array((Hp, Wp, g["Out"]), kinds=("tiny",)))


@lru_cache(maxsize=None)
@st.composite
def sparse_winners(draw):
    """One winner per window, placed by channel 0 (1 at the winner, a weight of 1 on the
    centre tap, bias 1/4); the other channels tiny and > 0, dPooled tiny and < 0. dW's dots
    over p then hold a few products that underflow to -0 among the losers' exact zero terms
    (+0, which turn a -0 lane back to +0): what a port that leaves out zero terms must still
    get right (generators/cases/conv_edges.py). C >= 8 takes the bundled port's listed dW."""
    C, Out = draw(sampled((8, 16, 32))), draw(sampled((4, 1, 5, 8)))
    poolH, poolW = draw(sampled(((1, 2), (2, 1), (2, 2))))
    Wd = draw(sampled((16, 8, 12)))
    H = draw(ints(4, 8)) * poolH
    Hp, Wp = H // poolH, Wd // poolW          # 3x3, pad 1: the conv output is H x Wd
    cells = poolH * poolW
    picks = np.random.default_rng(draw(ints(0, 2 ** 16))).integers(0, cells, Hp * Wp)
    x = np.zeros((H, Wd, C), F32)
    x[:, :, 1:] = np.abs(draw(array((H, Wd, C - 1), kinds=("tiny",))))
    for oy in range(Hp):
        for ox in range(Wp):
            cell = picks[oy * Wp + ox]
            x[oy * poolH + cell // poolW, ox * poolW + cell % poolW, 0] = 1.0
    taps = draw(array((Out, 9, C), kinds=("tiny",)))
    taps[:, :, 0] = 0.0
    taps[:, 4, 0] = 1.0
    W = np.zeros((Out, kpadded(9 * C)), F32)
    W[:, :9 * C] = taps.reshape(Out, 9 * C)
    g = dict(H=H, W=Wd, C=C, Out=Out, kh=3, kw=3, padH=1, padW=1, poolH=poolH, poolW=poolW,
             dx=draw(BOOLEANS))
    dP = -np.abs(draw(array((Hp, Wp, Out), kinds=("tiny",))))
    return g, x, W, np.full(Out, 0.25, F32), dP


@lru_cache(maxsize=None)
def families():
    return st.one_of(ordinary(), integers(), forward_underflow(), backward_underflow(),
                     sparse_winners())


@st.composite
def cases(draw):
    g, x, W, b, dP = draw(families())
    params = {**g, "KPadded": int(W.shape[1])}
    return params, {"x": x, "W": W, "b": b, "dPooled": dP}
