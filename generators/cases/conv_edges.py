"""Conv-block edge cases (fixtures/conv_edges.h5): exact tier only (docs/edge-cases.md).

Pool rules (a NaN, -0, +0 or a negative never wins; a window without a positive value gives
+0 and winner -1; of equal maxima the first wins):
  pool_nan_x_O4, pool_nan_x_O5   two input pixels NaN: the conv values that see them are NaN
  pool_nan_x_O16, pool_nan_x_O32 and lose; dW's columns that read them are NaN (0 * NaN); 16
                                 and 32 channels fill a 512- or 256-bit register per window
  pool_nan_bias                  one channel's bias NaN: every window of it is dead
  pool_signed_zeros_C16          conv values exactly -0 (a dot of underflowing negative
  pool_signed_zeros_C16_O16      products plus b = -0), exactly +0, negative, and mixed (8 and
                                 16 channels)
  ties_nontwin_O6                small-integer inputs and weights: exact sums, so windows tie
                                 between cells whose input windows differ (not twins)
  ties_pool3x2_C3_O32            the same under a 3 x 2 pool, 32 channels out
  tall_ties_pool3x2_C1_O70       and on one input channel of an image taller than wide
                                 (13 x 6: H and W mixed up in a bound), 70 channels out (past
                                 a 64-channel block)
Padding columns (W's are terms of the dot, used as stored):
  k_padding_neg_zero             K = 27: real taps' products underflow to -0, the five padding
                                 terms fma(+0, +0, -0) = +0 turn those lanes +0 (b = -0)
  k_padding_nan                  one channel's padding columns NaN: +0 * NaN makes its conv NaN
  k_padding_neg_zero_zero_x      the same with a third of the input pixels +0, as after a ReLU
                                 and pool: a port that leaves out the zero window terms (and the
                                 padding's) keeps every lane -0 and must redo such dots
Underflow in the backward's dots over p (dW, db) and o (dcol), dense and listed:
  listed_dW_neg_zero_C16_O4      a selector channel fixes one winner per window so that every
  listed_dW_neg_zero_C8_O5       lane mod 16 of the dots over p has one winner; its product with
  dense_dW_neg_zero_C3_O4        the tiny other channels underflows to -0, and the losers after
  dense_dW_neg_zero_C2_nodx      it (dC = +0) turn most lanes back to +0: the dot is +0. A port
                                 that leaves out the zero terms keeps -0 in every lane and
                                 must redo such dots with all terms. C = 16 takes the bundled
                                 port's listed dW over x directly, C = 8, 3 and 2 over im2col
                                 rows (5, 2 and 2 chunks; the names of the last two are from when
                                 it ran the dense dots below four chunks); C = 16 also its sparse
                                 dcol (products underflow there too). The last one is called
                                 without dx.
Many taps (many_taps()):
  k9x9_C33                       a 9 x 9 kernel over 33 channels: each cell of dx sums up to 81
                                 taps (a port that gathers them in batches must carry its
                                 running sums from one batch to the next), over three groups
                                 of channels
Found by the operator sweep (docs/mutants.md), signed_zeros_zero_x(), selector_col0() and
nan_padding_ends():
  pool_signed_zeros_C16_zero_x   pool_signed_zeros_C16 with every third pixel +0: a port that
                                 leaves out the +0 window terms runs its K = 16 dots sparse
                                 and must redo the -0 ones with every term (one a lane)
  listed_dW_neg_zero_col0_C16_O4 an unpadded 10 x 10 input, the tiny channel first: only
                                 column 0 of each 16 columns of dW has -0 lanes to redo
  k_padding_nan_O0_k3x3_C1       k_padding_nan_k3x3_C1 with the NaN padding in the first
  k_padding_nan_Olast_k3x3_C1    channel, then in the last: each channel's padding checked
  dropped_rows_cols_O64, _O48,   a 7 x 9 image under a 2 x 2 pool (a dropped partial row and
  _O32, _O16                     column of windows, whose dC is +0 and a term of db and dW),
                                 16 to 64 channels: four cases in a row, so that each ISA
                                 leads the runs of one (harness/runner.rotated) on memory
                                 another case used
A NaN weight meeting +0 values (nan_meets_zeros()):
  nan_W_zero_x_C1, _C3, _C16     channel 1 holds one NaN weight (the centre tap): +0 * NaN is
                                 NaN, a term of every dot, so the channel's conv values are
                                 NaN everywhere and lose every window; its dC is then +0
                                 everywhere, and every dcol that reads the NaN is NaN, so dx is.
                                 Half the image is +0 (whole windows), as after a ReLU and pool,
                                 and the channel's bias is positive: a port that leaves out the
                                 +0 terms of x (forward) or of dC (dcol) without checking that
                                 W is finite has the bias win those windows and a finite dx.
"""
from __future__ import annotations

import numpy as np

from .. import draw, exact
from .conv import kpadded
from ..edge_values import qnan32, tiny
from ..geometry import conv_size
from ..spec import conv as spec

NAME = "conv_edges"
LAYER = "conv"
SEED = 3304
F32 = np.float32
G33 = dict(kh=3, kw=3, padH=1, padW=1, poolH=2, poolW=2)


def _case(name, x, W, b, dPooled, g, note, dx=True):
    x = np.ascontiguousarray(x, F32)
    H, Wd, C = x.shape
    params = {"H": H, "W": Wd, "C": C, "Out": int(W.shape[0]), **g, "dx": dx,
              "KPadded": int(W.shape[1]), "note": note}
    c = exact.case(LAYER, name, params, {"x": x, "W": np.ascontiguousarray(W, F32),
                                         "b": np.ascontiguousarray(b, F32),
                                         "dPooled": np.ascontiguousarray(dPooled, F32)})
    e = c.expected["exact"]
    c.params["dead_windows"] = int(np.sum(e["winners"] < 0))
    c.params["negative_zero"] = {k: int(np.sum((v == 0) & np.signbit(v))) for k, v in e.items()
                                 if np.asarray(v).dtype.kind == "f"}
    return c


def pooled_shape(H, W, g):
    Hc, Wc = conv_size(H, W, g["kh"], g["kw"], g["padH"], g["padW"])
    return Hc // g["poolH"], Wc // g["poolW"]


def weights(rng, C, Out, g, scale=None):
    K = g["kh"] * g["kw"] * C
    W = np.zeros((Out, kpadded(K)), F32)
    W[:, :K] = rng.uniform(-1, 1, (Out, K)) * (scale or 1.0 / np.sqrt(K))
    return W


def nan_pixels(rng, Out):
    H, Wd, C = 6, 7, 2
    x = rng.uniform(-1, 1, (H, Wd, C)).astype(F32)
    x[1, 2, 0] = qnan32()
    x[4, 5, 1] = qnan32()
    Hp, Wp = pooled_shape(H, Wd, G33)
    return x, weights(rng, C, Out, G33), rng.uniform(-0.3, 0.3, Out).astype(F32), \
        rng.uniform(-1, 1, (Hp, Wp, Out)).astype(F32)


def signed_zeros(rng, Out=8, name="pool_signed_zeros_C16"):
    """1x1 conv, C = 16 = K = KPadded: x tiny > 0; channel o % 4 == 0: W tiny < 0 and b = -0
    (conv -0), 1: W tiny > 0, b = -0 (+0 + -0 = +0), 2: W = 0, b = +0, 3: W random, b = 0."""
    g = dict(kh=1, kw=1, padH=0, padW=0, poolH=2, poolW=2)
    H, Wd, C = 4, 6, 16
    x = tiny(rng, H * Wd * C).reshape(H, Wd, C)
    W = np.zeros((Out, 16), F32)
    b = np.zeros(Out, F32)
    for o in range(Out):
        kind = o % 4
        W[o] = (tiny(rng, 16, -80, -1.0) if kind == 0 else tiny(rng, 16) if kind == 1
                else 0.0 if kind == 2 else rng.uniform(-1, 1, 16) * np.ldexp(1.0, 80))
        b[o] = -0.0 if kind in (0, 1) else 0.0
    return _case(name, x, W, b, rng.uniform(-1, 1, (2, 3, Out)), g,
                 "conv values -0, +0, negative: dead windows give +0 and -1")


def ties_nontwin(rng):
    H, Wd, C, Out = 8, 9, 3, 6
    x = rng.integers(0, 3, (H, Wd, C)).astype(F32)
    W = np.zeros((Out, 32), F32)
    W[:, :27] = rng.integers(-1, 2, (Out, 27))
    b = rng.integers(-1, 2, Out).astype(F32)
    Hp, Wp = pooled_shape(H, Wd, G33)
    c = _case("ties_nontwin_O6", x, W, b, rng.uniform(-1, 1, (Hp, Wp, Out)), G33,
              "integer sums: ties between cells with different input windows")
    conv = c.expected["exact"]["conv"].reshape(H, Wd, Out)[:Hp * 2, :Wp * 2]
    cells = conv.reshape(Hp, 2, Wp, 2, Out).transpose(0, 2, 4, 1, 3).reshape(Hp, Wp, Out, 4)
    top = cells.max(-1)
    c.params["tied_windows"] = int(np.sum((top > 0) & ((cells == top[..., None]).sum(-1) >= 2)))
    return c


def k_padding(rng, nan, zero_x=False):
    H, Wd, C, Out = 5, 6, 3, 4
    x = tiny(rng, H * Wd * C).reshape(H, Wd, C)
    if zero_x:
        x[rng.random((H, Wd)) < 0.4] = 0.0
    W = np.zeros((Out, 32), F32)
    if nan:
        x = rng.uniform(0, 1, (H, Wd, C)).astype(F32)
        W[:, :27] = rng.uniform(-0.5, 0.5, (Out, 27))
        W[2, 27:] = qnan32()
        b = rng.uniform(-0.1, 0.3, Out).astype(F32)
    else:
        W[:, :27] = tiny(rng, Out * 27, -80, -1.0).reshape(Out, 27)
        b = np.full(Out, -0.0, F32)
    Hp, Wp = pooled_shape(H, Wd, G33)
    name, note = (("k_padding_nan", "channel 2's padding columns NaN") if nan else
                  ("k_padding_neg_zero", "real taps -0, padding terms turn lanes +0"))
    if zero_x:
        name, note = "k_padding_neg_zero_zero_x", note + "; a third of the pixels +0"
    return _case(name, x, W, b, rng.uniform(-1, 1, (Hp, Wp, Out)), G33, note)


def selector(rng, name, C, Out, dx=True):
    """One winner per pool window, placed so that each lane p mod 16 of the 8x8 conv output
    gets one (window (oy, ox) takes cell (dy, dx) number (oy + ox) mod 4); channel 0 selects
    it (1 at the winner, weight 1 on the centre tap), channels 1.. are tiny."""
    H = Wd = 8
    x = np.zeros((H, Wd, C), F32)
    x[:, :, 1:] = tiny(rng, H * Wd * (C - 1)).reshape(H, Wd, C - 1)
    for oy in range(4):
        for ox in range(4):
            dy, ddx = divmod((oy + ox) % 4, 2)
            x[2 * oy + dy, 2 * ox + ddx, 0] = 1.0
    K = 9 * C
    W = np.zeros((Out, kpadded(K)), F32)
    taps = tiny(rng, Out * K).reshape(Out, 9, C) * rng.choice([-1, 1], (Out, 9, C)).astype(F32)
    taps[:, :, 0] = 0.0
    taps[:, 4, 0] = 1.0
    W[:, :K] = taps.reshape(Out, K)
    b = np.full(Out, 0.25, F32)
    dPooled = tiny(rng, 16 * Out, -80, -1.0).reshape(4, 4, Out)
    return _case(name, x, W, b, dPooled, G33, "winner products underflow to -0, losers after "
                 "them turn lanes +0", dx=dx)


def build():
    rng = draw.rng(SEED)
    cases = []
    for Out in (4, 5):
        x, W, b, dP = nan_pixels(rng, Out)
        cases.append(_case(f"pool_nan_x_O{Out}", x, W, b, dP, G33, "NaN pixels: NaN never wins"))
    x, W, b, dP = nan_pixels(rng, 4)
    x = rng.uniform(-1, 1, x.shape).astype(F32)
    b[1] = qnan32()
    cases.append(_case("pool_nan_bias", x, W, b, dP, G33, "channel 1 all NaN: dead windows"))
    cases.append(signed_zeros(rng))
    cases.append(ties_nontwin(rng))
    cases.append(k_padding(rng, nan=False))
    cases.append(k_padding(rng, nan=True))
    cases.append(selector(rng, "listed_dW_neg_zero_C16_O4", 16, 4))
    cases.append(selector(rng, "listed_dW_neg_zero_C8_O5", 8, 5))
    cases.append(selector(rng, "dense_dW_neg_zero_C3_O4", 3, 4))
    cases.append(selector(rng, "dense_dW_neg_zero_C2_nodx", 2, 4, dx=False))
    # the pool rules again where a window's channels fill 256- and 512-bit registers (the cases
    # above have 4, 5 and 8 channels); their own generator, so the cases above keep their values
    wide = draw.rng(SEED + 1)
    for Out in (16, 32):
        x, W, b, dP = nan_pixels(wide, Out)
        cases.append(_case(f"pool_nan_x_O{Out}", x, W, b, dP, G33, "NaN pixels: NaN never wins"))
    cases.append(signed_zeros(wide, 16, "pool_signed_zeros_C16_O16"))
    cases.append(k_padding(draw.rng(SEED + 2), nan=False, zero_x=True))
    geo = draw.rng(SEED + 3)
    cases.append(pool_ties(geo, "ties_pool3x2_C3_O32", 9, 8, 3, 32,
                           "a 3 x 2 pool over channels that fill every path's registers"))
    cases.append(pool_ties(geo, "tall_ties_pool3x2_C1_O70", 13, 6, 1, 70,
                           "one channel on an image taller than wide, 70 channels out (past a "
                           "64-channel block, 70 mod 4 = 2)"))
    cases += small_kernels(draw.rng(SEED + 4))
    cases += nan_meets_zeros(draw.rng(SEED + 5))
    cases.append(many_taps(draw.rng(SEED + 6)))
    late = draw.rng(SEED + 7)
    cases.append(signed_zeros_zero_x(late))
    cases.append(selector_col0(late))
    cases += nan_padding_ends(draw.rng(SEED + 8))
    cases += dropped_rows(draw.rng(SEED + 9))
    return cases


def dropped_rows(rng) -> list:
    """A 7 x 9 image under a 2 x 2 pool: the conv output's last row and column are a dropped
    partial window's, whose dC is +0 and is a term of db and dW. 16 to 64 channels out, so
    that every vector path scatters the winners in whole registers. Four cases in a row,
    largest first: the ISA that leads a case's runs changes from one case of a fixture to the
    next (harness/runner.rotated), so on up to four paths each leads one of them right after a
    case that used more of the port's memory, and a path that leaves the dropped rows as its
    scratch held them differs from the base run."""
    H, Wd = 7, 9
    Hp, Wp = pooled_shape(H, Wd, G33)
    cases = []
    for Out in (64, 48, 32, 16):
        x = rng.uniform(-1, 1, (H, Wd, 3)).astype(F32)
        cases.append(_case(f"dropped_rows_cols_O{Out}", x, weights(rng, 3, Out, G33),
                           rng.uniform(-0.3, 0.3, Out), rng.uniform(-1, 1, (Hp, Wp, Out)), G33,
                           f"a dropped partial row and column of windows, {Out} channels"))
    return cases


def nan_padding_ends(rng) -> list:
    """k_padding_nan_k3x3_C1 with the NaN padding in the first channel only, then in the last
    only: a port that checks the padding's finiteness channel by channel before taking the
    short dots (K = 9 of 16) must check every channel, the first and the last included."""
    Hp, Wp = pooled_shape(4, 6, G33)
    cases = []
    for name, o in (("k_padding_nan_O0_k3x3_C1", 0), ("k_padding_nan_Olast_k3x3_C1", 4)):
        x = rng.uniform(0, 1, (4, 6, 1)).astype(F32)
        W = weights(rng, 1, 5, G33, 1.0)
        W[o, 9:] = qnan32()
        cases.append(_case(name, x, W, rng.uniform(-0.1, 0.3, 5), rng.uniform(-1, 1, (Hp, Wp, 5)),
                           G33, f"channel {o}'s padding columns NaN (of 5): its conv values are NaN"))
    return cases


def signed_zeros_zero_x(rng):
    """signed_zeros() with every third pixel +0 (as after a ReLU and pool), so that a port that
    leaves out the +0 window terms runs this K = 16 product sparse: its -0 dots (channels
    o % 4 == 0) must be computed again with every term, one term a lane."""
    c = signed_zeros(rng, 8, "pool_signed_zeros_C16_zero_x")
    x = c.inputs["x"].copy()
    x.reshape(-1, 16)[::3] = 0.0
    return _case(c.name, x, c.inputs["W"], c.inputs["b"], c.inputs["dPooled"],
                 {k: c.params[k] for k in G33}, c.params["note"] + "; every third pixel +0")


def selector_col0(rng):
    """selector()'s winners on an unpadded 10 x 10 input (8 x 8 conv output) with the tiny
    channel first: column 0 of each 16 columns of dW is the only one whose winner products
    underflow to -0 (channel 1 selects, 1 at the winners and -0.5 elsewhere; channels 2-15
    are 0.5), so a port that looks for -0 lanes only past the first column keeps -0 there."""
    g = dict(kh=3, kw=3, padH=0, padW=0, poolH=2, poolW=2)
    H = Wd = 10
    C, Out = 16, 4
    x = np.full((H, Wd, C), 0.5, F32)
    x[:, :, 0] = tiny(rng, H * Wd).reshape(H, Wd)
    x[:, :, 1] = -0.5
    for oy in range(4):
        for ox in range(4):
            dy, ddx = divmod((oy + ox) % 4, 2)
            x[2 * oy + dy + 1, 2 * ox + ddx + 1, 1] = 1.0
    taps = tiny(rng, Out * 9 * C).reshape(Out, 9, C) * rng.choice([-1, 1], (Out, 9, C))
    taps[:, :, 1] = 0.0
    taps[:, 4, 1] = 1.0
    W = taps.reshape(Out, 9 * C).astype(F32)
    dPooled = tiny(rng, 16 * Out, -80, -1.0).reshape(4, 4, Out)
    return _case("listed_dW_neg_zero_col0_C16_O4", x, W, np.full(Out, 0.25, F32), dPooled, g,
                 "only column 0 of each chunk of dW has -0 lanes (winner products underflow)")


def small_kernels(rng) -> list:
    """Geometries where a kernel's or a pool's height and width differ and one of them is 1,
    and the first block's short dots (K <= 16) with a NaN padding column."""
    cases = []
    for name, H, Wd, C, kh, kw in (("k1x2_H1_C1", 1, 6, 1, 1, 2), ("k2x1_W1_C1", 6, 1, 1, 2, 1),
                                   ("k1x2_H1_C16_zero_x", 1, 6, 16, 1, 2),
                                   ("k1x3_H2_C3", 2, 7, 3, 1, 3)):
        g = dict(kh=kh, kw=kw, padH=0, padW=0, poolH=1, poolW=1)
        x = rng.uniform(-1, 1, (H, Wd, C)).astype(F32)
        if "zero_x" in name:
            x[rng.random((H, Wd, C)) < 0.4] = 0.0
        Hp, Wp = pooled_shape(H, Wd, g)
        cases.append(_case(name, x, weights(rng, C, 4, g), rng.uniform(-0.3, 0.3, 4),
                           rng.uniform(-1, 1, (Hp, Wp, 4)), g,
                           f"a {kh} x {kw} kernel on a {H} x {Wd} image: kh and kw apart"))
    for Out in (16, 24):
        g = dict(kh=1, kw=1, padH=0, padW=0, poolH=3, poolW=1)
        x = rng.uniform(0, 1, (6, 2, 1)).astype(F32)
        cases.append(_case(f"pool3x1_O{Out}", x, weights(rng, 1, Out, g, 1.0),
                           rng.uniform(-0.2, 0.2, Out), rng.uniform(-1, 1, (2, 2, Out)), g,
                           "a 3 x 1 pool (poolW = 1, poolH not 2) over full registers"))
    for name, kh, pad in (("k_padding_nan_k1x1_C1", 1, 0), ("k_padding_nan_k3x3_C1", 3, 1)):
        g = dict(kh=kh, kw=kh, padH=pad, padW=pad, poolH=2, poolW=2)
        x = rng.uniform(0, 1, (4, 6, 1)).astype(F32)
        W = weights(rng, 1, 3, g, 1.0)
        W[1, kh * kh:] = qnan32()
        Hp, Wp = pooled_shape(4, 6, g)
        cases.append(_case(name, x, W, rng.uniform(-0.1, 0.3, 3), rng.uniform(-1, 1, (Hp, Wp, 3)),
                           g, f"K = {kh * kh} real taps, channel 1's padding columns NaN: its "
                           "conv values are NaN (+0 * NaN is a term of every dot)"))
    return cases


def nan_meets_zeros(rng) -> list:
    """One NaN weight of channel 1 (its centre tap) over an image whose top half is +0 (whole
    windows) and a third of the other pixels too, on 1, 3 and 16 input channels (the first
    block's short dots, chunks of mixed taps, a tap's channels a chunk)."""
    cases = []
    for C in (1, 3, 16):
        H, Wd, Out = 6, 8, 4
        x = rng.uniform(0, 1, (H, Wd, C)).astype(F32)
        x[:H // 2] = 0.0
        x[rng.random((H, Wd)) < 1 / 3] = 0.0
        W = weights(rng, C, Out, G33, 1.0)
        W[1, 4 * C] = qnan32()
        b = np.array([0.1, 0.3, -0.1, 0.2], F32)
        Hp, Wp = pooled_shape(H, Wd, G33)
        cases.append(_case(f"nan_W_zero_x_C{C}", x, W, b, rng.uniform(-1, 1, (Hp, Wp, Out)), G33,
                           "a NaN weight meets +0 pixels: +0 * NaN is NaN (the channel loses "
                           "every window, every dcol reading it is NaN)"))
    return cases


def many_taps(rng):
    """A 9 x 9 kernel (81 taps) over 33 channels: an input cell of dx gathers more taps than
    a port may hold at once, over channel groups past the first 16."""
    g = dict(kh=9, kw=9, padH=4, padW=4, poolH=2, poolW=2)
    H, Wd, C, Out = 10, 11, 33, 3
    x = rng.uniform(-1, 1, (H, Wd, C)).astype(F32)
    Hp, Wp = pooled_shape(H, Wd, g)
    return _case("k9x9_C33", x, weights(rng, C, Out, g), rng.uniform(-0.3, 0.3, Out),
                 rng.uniform(-1, 1, (Hp, Wp, Out)), g,
                 "81 taps over 33 channels: dx sums 81 taps a cell, channels in groups")


def pool_ties(rng, name, H, Wd, C, Out, note):
    """Integer inputs and weights under a 3 x 2 pool (no vector path made for it): the windows
    tie, and the first maximum must win."""
    g = dict(kh=3, kw=3, padH=1, padW=1, poolH=3, poolW=2)
    K = 9 * C
    x = rng.integers(0, 3, (H, Wd, C)).astype(F32)
    W = np.zeros((Out, kpadded(K)), F32)
    W[:, :K] = rng.integers(-1, 2, (Out, K))
    b = rng.integers(-1, 2, Out).astype(F32)
    Hp, Wp = pooled_shape(H, Wd, g)
    c = _case(name, x, W, b, rng.uniform(-1, 1, (Hp, Wp, Out)), g, note)
    conv = c.expected["exact"]["conv"].reshape(H, Wd, Out)[:Hp * 3, :Wp * 2]
    cells = conv.reshape(Hp, 3, Wp, 2, Out).transpose(0, 2, 4, 1, 3).reshape(Hp, Wp, Out, 6)
    top = cells.max(-1)
    c.params["tied_windows"] = int(np.sum((top > 0) & ((cells == top[..., None]).sum(-1) >= 2)))
    return c
