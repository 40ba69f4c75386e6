"""Conv-block fixture cases: crnn-v0's three blocks on random weights, widths with and without
tails, tie-rich inputs, and two small standalone geometries.

Blocks (all 3x3, pad 1): 1 -> 16 pool 2x2 at height 32 (no dx: the first block's input
gradient is not computed), 16 -> 32 pool 2x2 at height 16, 32 -> 64 pool 2x1 at height 8.
Weights and biases ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in)), PyTorch's default conv init, with
fan_in = kh*kw*C; the padding columns of W are zero, as the container stores them.
dPooled ~ U(-1, 1).

- random cases: block 1 images ~ U(0, 1); blocks 2, 3 inputs max(0, U(-0.5, 1.5)) (a pooled
  ReLU output: non-negative, a quarter exact zeros). Widths are chosen so that conv widths
  are odd (a trailing partial pool window dropped) or even, and P = Hc*Wc is or is not a
  multiple of 16 (block 3 at odd width; the small cases).
- tie-rich cases: piecewise-constant quantized images (multiples of 1/4) made of rectangles
  on a background, so that twin cells (identical input windows) give exactly equal maxima
  inside pool windows; half of the channels get a bias that makes the background dead, and
  all-zero regions give windows whose every cell equals the bias exactly.
- small cases: C = 3, odd sizes (a dropped row and column); and kh x kw = 2 x 3, pad (0, 1),
  pool 2 x 3, Out = 20 (a 4-term tail in the dots over o).

Near-ties: the float64 reference picks winners in float64. So that it picks the same cell as
the float32 spec wherever the two are not exactly tied, every window's margin (its maximum,
the +0 start included, minus the largest strictly smaller candidate, in float64) must be at
least NEAR_TIE; inputs are redrawn from the same generator until that holds. The margin is
also what makes a float64-tier flip meaningful: a port whose conv values are within their conv
allowances (below 1e-5 on these data, tests/test_conv.py) cannot reorder candidates 2e-5 apart.

params of each case record the geometry, the dx flag, the counts of tied windows (a positive
maximum attained by >= 2 cells), dead windows (nothing positive: winner -1), dropped conv
positions, the smallest margin, and a-priori (dot16-order, worst-case) rounding-error bounds of each
tensor (see error_bounds; the gate's allowances are harness/allowance/conv.py's).
"""
from __future__ import annotations

import numpy as np

from .. import draw
from ..float64 import conv as ref
from ..float64 import exactsum as xs
from ..geometry import conv_size
from ..h5io import Case
from ..spec import conv as spec

NAME = "conv"
LAYER = "conv"
SEED = 3303

NEAR_TIE = 2e-5          # minimum float64 margin between a window's winner and the runner-up
MAX_DRAWS = 400
U = 2.0 ** -24           # binary32 unit roundoff

# the blocks of crnn-v0 (generators/model.py), with the input height each one sees
BLOCKS = {
    1: dict(H=32, C=1, Out=16, kh=3, kw=3, padH=1, padW=1, poolH=2, poolW=2, dx=False),
    2: dict(H=16, C=16, Out=32, kh=3, kw=3, padH=1, padW=1, poolH=2, poolW=2, dx=True),
    3: dict(H=8, C=32, Out=64, kh=3, kw=3, padH=1, padW=1, poolH=2, poolW=1, dx=True),
}
SMALL = {
    "small_C3_7x11": dict(H=7, W=11, C=3, Out=5, kh=3, kw=3, padH=1, padW=1, poolH=2, poolW=2,
                          dx=True),
    "small_k2x3_6x10_O20": dict(H=6, W=10, C=2, Out=20, kh=2, kw=3, padH=0, padW=1, poolH=2,
                                poolW=3, dx=True),
}
GEOMETRY = ("kh", "kw", "padH", "padW", "poolH", "poolW")


def kpadded(k: int) -> int:
    return (k + 15) // 16 * 16


def init_weights(rng, g):
    K = g["kh"] * g["kw"] * g["C"]
    bound = 1.0 / np.sqrt(K)
    W = np.zeros((g["Out"], kpadded(K)), np.float32)
    W[:, :K] = rng.uniform(-bound, bound, (g["Out"], K))
    b = rng.uniform(-bound, bound, g["Out"]).astype(np.float32)
    return W, b


def window_stats(conv64, conv32, Hc, Wc, poolH, poolW) -> dict:
    """Margins (float64) and tie / dead counts (float32) over all pool windows."""
    Out = conv64.shape[1]
    Hp, Wp = Hc // poolH, Wc // poolW

    def cells(conv):
        g = conv.reshape(Hc, Wc, Out)[:Hp * poolH, :Wp * poolW]
        return g.reshape(Hp, poolH, Wp, poolW, Out).transpose(0, 2, 4, 1, 3).reshape(
            Hp, Wp, Out, poolH * poolW)

    c64 = cells(conv64.astype(np.float64))
    cand = np.concatenate([np.zeros(c64.shape[:3] + (1,)), c64], axis=-1)  # the +0 start
    m1 = cand.max(axis=-1, keepdims=True)
    m2 = np.where(cand < m1, cand, -np.inf).max(axis=-1)
    margin = m1[..., 0] - m2
    c32 = cells(conv32)
    top = c32.max(axis=-1)
    live = top > 0
    tied = live & ((c32 == top[..., None]).sum(axis=-1) >= 2)
    return {"windows": int(live.size), "tied": int(tied.sum()), "dead": int((~live).sum()),
            "min_margin": float(margin.min()),
            "dropped_positions": int(Hc * Wc - Hp * poolH * Wp * poolW)}


def error_bounds(x, W, b, g, dPooled, winners) -> dict:
    """A-priori bounds of the float32 rounding error, max over each tensor's elements.

    A dot16 of n terms rounds each lane ceil(n/16) times and then 4 times in the tree:
    |err| <= m*u*sum|terms| with m = ceil(n/16) + 4 (first order; m*u < 1e-4 here).
      conv, pooled: n = KPadded, plus the bias addition: (m + 1)*u*(sum_k |col*W| + |b|)
      db:           n = P: m*u*sum_p |dC|
      dW:           n = P: m*u*sum_p |dC*col|
      dx:           dcol's dots over n = Out, then up to kh*kw plain additions of the taps:
                    (m + kh*kw)*u*sum_taps sum_o |dC*W|
    """
    x64 = np.asarray(x, np.float64)
    H, Wd, C = x64.shape
    Out, KP = W.shape
    Hc, Wc = conv_size(H, Wd, g["kh"], g["kw"], g["padH"], g["padW"])
    P = Hc * Wc
    col = np.abs(ref.im2col(x64, g["kh"], g["kw"], g["padH"], g["padW"], KP))
    aW = np.abs(W.astype(np.float64))
    dC = np.abs(spec.pool_backward(dPooled, winners, P, Out).astype(np.float64))
    mP = -(-P // 16) + 4
    out = {"conv": (KP // 16 + 4 + 1) * U * float(xs.affine(col, aW, np.abs(b), False).max()),
           "db": mP * U * float(xs.total(dC, 0, False).max()),
           "dW": mP * U * float(xs.matmul(dC.T, col, False).max())}
    out["pooled"] = out["conv"]
    if g["dx"]:
        mO = -(-Out // 16) + 4 + g["kh"] * g["kw"]
        dcol = xs.matmul(dC, aW, False).reshape(Hc, Wc, KP)
        out["dx"] = mO * U * float(ref_col2im_abs(dcol, H, Wd, C, g).max())
    return {k: float(f"{v:.3g}") for k, v in out.items()}


def ref_col2im_abs(dcol, H, W, C, g):
    dxp = np.zeros((H + 2 * g["padH"], W + 2 * g["padW"], C))
    Hc, Wc, _ = dcol.shape
    for ky in range(g["kh"]):
        for kx in range(g["kw"]):
            k = (ky * g["kw"] + kx) * C
            dxp[ky:ky + Hc, kx:kx + Wc] += dcol[:, :, k:k + C]
    return dxp[g["padH"]:g["padH"] + H, g["padW"]:g["padW"] + W]


def _rectangles(rng, H, W, n, values):
    """A background with n random axis-aligned rectangles; values: (n_choices, C) rows."""
    C = values.shape[1]
    img = np.empty((H, W, C))
    img[:] = values[0]
    for _ in range(n):
        h, w = rng.integers(2, max(3, H // 2) + 1), rng.integers(2, 13)
        y, x0 = rng.integers(0, H - 1), rng.integers(0, W - 1)
        img[y:y + h, x0:x0 + w] = values[rng.integers(0, len(values))]
    return img


def tie_rich_input(rng, g, W, Wt):
    """Piecewise-constant quantized input, and a bias that kills the background in half of
    the channels (the rest get a bias that keeps it live, so its windows are 4-way ties)."""
    H, C, Out = g["H"], g["C"], g["Out"]
    if C == 1:
        values = np.array([[1.0], [0.0], [0.25], [0.5], [0.75]])   # paper first, then ink
    else:
        values = rng.integers(0, 7, (6, C)) * 0.25                  # multiples of 1/4 in [0, 1.5]
        values[rng.random((6, C)) < 0.4] = 0.0
        values[1] = 0.0                                            # an all-zero region kind
    x = _rectangles(rng, H, W, max(4, W // 6), values).astype(np.float32)
    K = g["kh"] * g["kw"] * C
    bg = np.tile(values[0], g["kh"] * g["kw"])                     # an interior background window
    s = xs.matmul(Wt[:, :K], bg)
    delta = rng.uniform(0.05, 0.3, Out)
    sign = np.where(np.arange(Out) % 2 == 0, -1.0, 1.0)            # even channels dead on background
    b = (-s + sign * delta).astype(np.float32)
    return x, b


def random_input(rng, g, W):
    if g["C"] == 1:
        return rng.uniform(0, 1, (g["H"], W, 1)).astype(np.float32)
    if g.get("signed"):
        return rng.uniform(-1, 1, (g["H"], W, g["C"])).astype(np.float32)
    return np.maximum(0.0, rng.uniform(-0.5, 1.5, (g["H"], W, g["C"]))).astype(np.float32)


def make_case(name, rng, g, W, kind, block) -> Case:
    geo = [g[k] for k in GEOMETRY]
    Wt, b = init_weights(rng, g)
    for draws in range(1, MAX_DRAWS + 1):
        if kind == "ties":
            x, b = tie_rich_input(rng, g, W, Wt)
        else:
            x = random_input(rng, g, W)
        Hc, Wc = conv_size(g["H"], W, g["kh"], g["kw"], g["padH"], g["padW"])
        # a cheap float64-only screen (plain sums, fixed order); the float32 stats and the
        # reference's own margin are taken below
        col = ref.im2col(x, g["kh"], g["kw"], g["padH"], g["padW"], Wt.shape[1])
        screen = xs.affine(col, Wt, b, compensated=False)
        if window_stats(screen, screen.astype(np.float32), Hc, Wc,
                        g["poolH"], g["poolW"])["min_margin"] >= NEAR_TIE:
            break
    else:
        raise RuntimeError(f"conv case {name}: no draw without near-ties in {MAX_DRAWS}")
    conv64, pooled64, winners64 = ref.forward(x, Wt, b, *geo)
    conv, pooled, winners = spec.forward(x, Wt, b, *geo)
    if not np.array_equal(winners, winners64):
        raise RuntimeError(f"conv case {name}: float32 and float64 winners differ")
    dPooled = rng.uniform(-1, 1, pooled.shape).astype(np.float32)
    dW, db, dx = spec.backward(x, Wt, *geo, dPooled, winners, want_dx=g["dx"])
    dW64, db64, dx64 = ref.backward(x, Wt, *geo, dPooled, winners64, want_dx=g["dx"])
    stats = window_stats(conv64, conv, Hc, Wc, g["poolH"], g["poolW"])
    params = {"block": block, "kind": kind, "H": g["H"], "W": W, "C": g["C"], "Out": g["Out"],
              **{k: g[k] for k in GEOMETRY}, "dx": bool(g["dx"]), "Hc": Hc, "Wc": Wc,
              "P": Hc * Wc, "KPadded": int(Wt.shape[1]), "draws": draws, **stats,
              "near_tie": NEAR_TIE,
              "error_bound": error_bounds(x, Wt, b, g, dPooled, winners)}
    exact = {"conv": conv, "pooled": pooled, "winners": winners, "dW": dW, "db": db}
    f64 = {"conv": conv64, "pooled": pooled64, "winners": winners64, "dW": dW64, "db": db64}
    if g["dx"]:
        exact["dx"], f64["dx"] = dx, dx64
    return Case(name, params, {"x": x, "W": Wt, "b": b, "dPooled": dPooled},
                {"exact": exact, "float64": f64})


def case_list():
    """(name, geometry, input width, kind, block) in fixture order."""
    out = []
    for block, widths, tie_width in ((1, (64, 100, 257), 101), (2, (32, 50, 129), 65),
                                     (3, (16, 25, 64), 33)):
        g = BLOCKS[block]
        out += [(f"b{block}_W{w}", g, w, "random", block) for w in widths]
        out.append((f"b{block}_ties_W{tie_width}", g, tie_width, "ties", block))
    for name, g in SMALL.items():
        out.append((name, {**g, "signed": True}, g["W"], "random", 0))
    return out


def build() -> list[Case]:
    rng = draw.rng(SEED)
    return [make_case(name, rng, g, W, kind, block)
            for name, g, W, kind, block in case_list()]
