"""The conv block: spec against float64 and a naive loop emulation, C against the spec on
every ISA path x thread count, the pool rule's edge cases, the dx flag, error codes, the
fixture's promises (winners agree with float64, margins, tie and dead counts) and the gate."""
from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest

from crnn_conformance.ctypes_kernels import abi, build
from crnn_conformance.generators.cases import conv as cases
from crnn_conformance.generators.float64 import conv as ref
from crnn_conformance.generators.h5io import read_fixture
from crnn_conformance.generators.regen import FIXTURES_DIR
from crnn_conformance.generators.spec import conv as spec
from crnn_conformance.generators.spec.fma import fma
from crnn_conformance.harness import allowance
from crnn_conformance.harness.layers import conv as hconv
from crnn_conformance.harness.tolerances import lookup

TENSORS = ("conv", "pooled", "winners", "dW", "db", "dx")
THREADS = (1, 2, 3, 7)


def geometry(H, W, C, Out, kh=3, kw=3, padH=1, padW=1, poolH=2, poolW=2, dx=True):
    return dict(H=H, W=W, C=C, Out=Out, kh=kh, kw=kw, padH=padH, padW=padW, poolH=poolH,
                poolW=poolW, dx=dx)


def random_block(seed, g, signed=False):
    rng = np.random.default_rng(seed)
    Wt, b = cases.init_weights(rng, g)
    lo = -1.0 if signed else -0.5
    x = np.maximum(-1.0 if signed else 0.0, rng.uniform(lo, 1.5, (g["H"], g["W"], g["C"])))
    return x.astype(np.float32), Wt, b, rng


def geo_args(g):
    return [g[k] for k in cases.GEOMETRY]


def spec_block(x, Wt, b, g, dPooled=None, rng=None):
    conv, pooled, winners = spec.forward(x, Wt, b, *geo_args(g))
    if dPooled is None:
        dPooled = rng.uniform(-1, 1, pooled.shape).astype(np.float32)
    dW, db, dx = spec.backward(x, Wt, *geo_args(g), dPooled, winners, want_dx=g["dx"])
    out = {"conv": conv, "pooled": pooled, "winners": winners, "dW": dW, "db": db}
    if g["dx"]:
        out["dx"] = dx
    return out, dPooled


@pytest.fixture(scope="module")
def lib():
    lib = build.load_bundled(layers=["conv"])
    isa, threads = lib.crnn_get_isa(), lib.crnn_get_threads()
    yield lib
    lib.crnn_set_isa(isa)          # the library is process-global: leave it as found
    lib.crnn_set_threads(threads)


def select(lib, isa, threads):
    abi.check(lib.crnn_set_isa(abi.ISA_NAMES.index(isa)), isa)
    abi.check(lib.crnn_set_threads(threads), "threads")


# ------------------------------------------------------------------ spec against float64

SMALL = [
    geometry(8, 9, 3, 5),                                            # odd: dropped row/column
    geometry(6, 10, 2, 20, kh=2, kw=3, padH=0, padW=1, poolH=2, poolW=3),
    geometry(8, 13, 16, 32, poolH=2, poolW=1),
    geometry(12, 17, 1, 16, dx=False),
]


@pytest.mark.parametrize("g", SMALL, ids=lambda g: f"{g['H']}x{g['W']}x{g['C']}_O{g['Out']}")
def test_spec_within_float64_bound(g):
    x, Wt, b, rng = random_block(11, g)
    ours, dPooled = spec_block(x, Wt, b, g, rng=rng)
    conv64, pooled64, winners64 = ref.forward(x, Wt, b, *geo_args(g))
    dW64, db64, dx64 = ref.backward(x, Wt, *geo_args(g), dPooled, winners64, want_dx=g["dx"])
    theirs = {"conv": conv64, "pooled": pooled64, "dW": dW64, "db": db64, "dx": dx64}
    np.testing.assert_array_equal(ours["winners"], winners64)
    bound = cases.error_bounds(x, Wt, b, g, dPooled, ours["winners"])
    case = SimpleNamespace(name="t", params={**g}, inputs={"x": x, "W": Wt, "b": b, "dPooled": dPooled})
    model = allowance.compute("conv", case)
    for t, a in ours.items():
        if t == "winners":
            continue
        err = np.abs(a.astype(np.float64) - theirs[t])
        # the a-priori bound of this data (rounded to 3 digits), and the per-element model
        assert float(err.max()) <= bound[t] * 1.01, (t, float(err.max()), bound[t])
        assert (err <= model[t]).all(), (t, float((err / model[t]).max()))


# ------------------------------------------------------------------ naive loop emulation

def naive_dot16(a, b):
    p = [np.float32(0.0)] * 16
    for k in range(len(a)):
        p[k % 16] = np.float32(fma(a[k], b[k], p[k % 16]))
    for s in (8, 4, 2, 1):
        for i in range(s):
            p[i] = np.float32(p[i] + p[i + s])
    return p[0]


def naive_block(x, Wt, b, g, dPooled):
    H, W, C = x.shape
    Out, KP = Wt.shape
    kh, kw, padH, padW, poolH, poolW = geo_args(g)
    Hc, Wc = H + 2 * padH - kh + 1, W + 2 * padW - kw + 1
    P = Hc * Wc
    col = np.zeros((P, KP), np.float32)
    for y in range(Hc):
        for xo in range(Wc):
            for ky in range(kh):
                for kx in range(kw):
                    iy, ix = y + ky - padH, xo + kx - padW
                    if 0 <= iy < H and 0 <= ix < W:
                        for c in range(C):
                            col[y * Wc + xo, (ky * kw + kx) * C + c] = x[iy, ix, c]
    conv = np.zeros((P, Out), np.float32)
    for p in range(P):
        for o in range(Out):
            conv[p, o] = naive_dot16(col[p], Wt[o]) + b[o]
    Hp, Wp = Hc // poolH, Wc // poolW
    pooled = np.zeros((Hp, Wp, Out), np.float32)
    winners = np.full((Hp, Wp, Out), -1, np.int32)
    dC = np.zeros((P, Out), np.float32)
    for oy in range(Hp):
        for ox in range(Wp):
            for o in range(Out):
                m, w = np.float32(0.0), -1
                for dy in range(poolH):
                    for dx_ in range(poolW):
                        p = (oy * poolH + dy) * Wc + ox * poolW + dx_
                        if conv[p, o] > m:
                            m, w = conv[p, o], p * Out + o
                pooled[oy, ox, o], winners[oy, ox, o] = m, w
                if w >= 0:
                    dC[w // Out, o] = dPooled[oy, ox, o]
    ones = np.ones(P, np.float32)
    db = np.array([naive_dot16(dC[:, o], ones) for o in range(Out)], np.float32)
    dW = np.array([[naive_dot16(dC[:, o], col[:, k]) for k in range(KP)] for o in range(Out)],
                  np.float32)
    dcol = np.array([[naive_dot16(dC[p], Wt[:, k]) for k in range(KP)] for p in range(P)],
                    np.float32)
    dxv = np.zeros((H, W, C), np.float32)
    for iy in range(H):
        for ix in range(W):
            for c in range(C):
                s = np.float32(0.0)
                for ky in range(kh):
                    for kx in range(kw):
                        py, px = iy + padH - ky, ix + padW - kx
                        if 0 <= py < Hc and 0 <= px < Wc:
                            s = np.float32(s + dcol[py * Wc + px, (ky * kw + kx) * C + c])
                dxv[iy, ix, c] = s
    return {"conv": conv, "pooled": pooled, "winners": winners, "dW": dW, "db": db, "dx": dxv}


def order_sensitive(rng, shape):
    """Magnitudes over 2^-12..2^12 with random signs: another lane or tree order changes bits."""
    mag = np.exp2(rng.integers(-12, 13, shape)).astype(np.float64)
    return (rng.choice([-1.0, 1.0], shape) * mag * rng.uniform(1, 2, shape)).astype(np.float32)


def test_spec_matches_naive_loops():
    g = geometry(5, 7, 3, 18, poolH=2, poolW=3)     # K = 27 -> KPadded 32, Out 18, P = 35
    rng = np.random.default_rng(5)
    x = order_sensitive(rng, (g["H"], g["W"], g["C"]))
    Wt = np.zeros((g["Out"], 32), np.float32)
    Wt[:, :27] = order_sensitive(rng, (g["Out"], 27))
    b = order_sensitive(rng, g["Out"])
    Hc, Wc = 5, 7
    dPooled = order_sensitive(rng, (Hc // 2, Wc // 3, g["Out"]))
    ours, _ = spec_block(x, Wt, b, g, dPooled)
    naive = naive_block(x, Wt, b, g, dPooled)
    for t in TENSORS:
        assert ours[t].tobytes() == naive[t].tobytes(), t
    assert (ours["winners"] >= 0).any() and (ours["winners"] < 0).any()


# ------------------------------------------------------------------ C against the spec

C_CASES = [
    ("odd_7x11_C3", geometry(7, 11, 3, 5), True),
    ("k2x3_O20", geometry(6, 10, 2, 20, kh=2, kw=3, padH=0, padW=1, poolH=2, poolW=3), True),
    ("block1_W37", geometry(32, 37, 1, 16, dx=False), False),
    ("block2_W23", geometry(16, 23, 16, 32), False),
    ("block3_W9", geometry(8, 9, 32, 64, poolW=1), False),
    # C % 16 != 0 with 5 chunks: the listed dW over im2col rows; Out % 4 != 0 as well
    ("C8_O24_listed_im2col", geometry(9, 14, 8, 24), True),
    ("C8_O18_listed_odd_out", geometry(10, 13, 8, 18, poolH=2, poolW=3), True),
    # 81 taps: more than the dx gather lists on its stack
    ("k9x9_taps81", geometry(12, 14, 4, 8, kh=9, kw=9, padH=4, padW=4), True),
    # one channel: the im2col writes a position's row at once, in 4-float moves where they fit
    ("C1_k4x4_K16", geometry(9, 13, 1, 8, kh=4, kw=4, padH=1, padW=2), True),
    ("C1_k7x2_K14", geometry(12, 11, 1, 6, kh=7, kw=2, padH=3, padW=0), True),
    ("C1_k2x5_wide_taps", geometry(6, 9, 1, 5, kh=2, kw=5, padH=0, padW=2), True),
    ("C1_W3_narrow", geometry(5, 3, 1, 4, poolH=1, poolW=1), True),
    ("C1_k10x1_tall", geometry(14, 7, 1, 4, kh=10, kw=1, padH=2, padW=0, poolH=1), True),
]


@pytest.mark.parametrize("name,g,signed", C_CASES, ids=[c[0] for c in C_CASES])
def test_c_equals_spec_every_isa_and_thread_count(lib, name, g, signed):
    x, Wt, b, rng = random_block(23, g, signed)
    want, dPooled = spec_block(x, Wt, b, g, rng=rng)
    for isa in abi.available_isas(lib):
        for threads in THREADS:
            select(lib, isa, threads)
            got = hconv.run_block(lib, x, Wt, b, dPooled, *geo_args(g), want_dx=g["dx"])
            assert set(got) == set(want)
            for t in want:
                assert got[t].tobytes() == want[t].tobytes(), (isa, threads, t)


def test_c_identity_on_a_tie_rich_block(lib):
    g = cases.BLOCKS[2]
    rng = np.random.default_rng(8)
    Wt, _ = cases.init_weights(rng, g)
    x, b = cases.tie_rich_input(rng, g, 40, Wt)
    want, dPooled = spec_block(x, Wt, b, g, rng=rng)
    stats = cases.window_stats(want["conv"], want["conv"], 16, 40, 2, 2)
    assert stats["tied"] > 0 and stats["dead"] > 0
    for isa in abi.available_isas(lib):
        for threads in THREADS:
            select(lib, isa, threads)
            got = hconv.run_block(lib, x, Wt, b, dPooled, *geo_args(g))
            for t in want:
                assert got[t].tobytes() == want[t].tobytes(), (isa, threads, t)


# ------------------------------------------------------------------ the listed dW

# dW and db are computed from the nonzero dC terms only where that is exact (core.h,
# crnn_gemm16_listed); these cases reach its two escape hatches.
def backward_equals_spec(lib, want, x, Wt, b, dPooled, g):
    """dW, db and dx of the C block equal the spec's bits on every ISA path, 1 and 3 threads."""
    for isa in abi.available_isas(lib):
        for threads in (1, 3):
            select(lib, isa, threads)
            got = hconv.run_block(lib, x, Wt, b, dPooled, *geo_args(g))
            for t in ("dW", "db", "dx"):
                assert got[t].tobytes() == want[t].tobytes(), (isa, threads, t)


def forward_equals_spec(lib, want, x, Wt, b, dPooled, g):
    """conv, pooled and winners of the C block equal the spec's bits on every ISA path, 1 and
    3 threads."""
    for isa in abi.available_isas(lib):
        for threads in (1, 3):
            select(lib, isa, threads)
            got = hconv.run_block(lib, x, Wt, b, dPooled, *geo_args(g), want_dx=False)
            for t in ("conv", "pooled", "winners"):
                assert got[t].tobytes() == want[t].tobytes(), (isa, threads, t)


def test_listed_dW_recomputes_rows_with_a_negative_zero_lane(lib):
    """Products of -1e-30 and ~1e-20 underflow to -0, so a lane partial sits at -0 until a
    left-out term (dC = +0 times a positive window value) turns it into +0. With tiny inputs
    every conv output is its (positive) bias, every window a tie won by its top cell, so each
    of the 16 lanes (the 16 columns) has terms and its last position (the bottom row) is a
    left-out zero: the definition's lanes end at +0, the listed terms' at -0."""
    g = geometry(8, 16, 16, 32, poolH=2, poolW=1)
    rng = np.random.default_rng(5)
    Wt, _ = cases.init_weights(rng, g)
    b = np.full(g["Out"], 0.25, np.float32)
    x = rng.uniform(1e-20, 2e-20, (g["H"], g["W"], g["C"])).astype(np.float32)
    _, pooled, winners = spec.forward(x, Wt, b, *geo_args(g))
    dPooled = np.full(pooled.shape, -1e-30, np.float32)
    want, _ = spec_block(x, Wt, b, g, dPooled=dPooled)
    assert (want["dW"] == 0).all() and not np.signbit(want["dW"]).any()   # all +0
    backward_equals_spec(lib, want, x, Wt, b, dPooled, g)


@pytest.mark.parametrize("poolW", [2, 1])
def test_listed_dW_slots_hold_their_bound(lib, poolW):
    """The dW lists' slot size is a bound: with Wc % 16 == 0 a lane's positions are every
    16th column of each row, so a slot holds at most one term per window row and lane column.
    Tiny inputs make every conv output its bias and every window a tie won by its first cell,
    so the slots of the lanes of those cells fill to exactly that bound (one term fewer of
    room would overwrite the next slot)."""
    g = geometry(8, 32, 16, 16, poolH=2, poolW=poolW)
    rng = np.random.default_rng(6)
    Wt, _ = cases.init_weights(rng, g)
    b = np.full(g["Out"], 0.25, np.float32)
    x = rng.uniform(1e-20, 2e-20, (g["H"], g["W"], g["C"])).astype(np.float32)
    _, pooled, winners = spec.forward(x, Wt, b, *geo_args(g))
    Wc = g["W"]
    cells = winners // g["Out"]                       # every window's first cell
    assert (cells % Wc % poolW == 0).all() and (cells // Wc % 2 == 0).all()
    dPooled = rng.uniform(0.5, 1.0, pooled.shape).astype(np.float32)
    want, _ = spec_block(x, Wt, b, g, dPooled=dPooled)
    backward_equals_spec(lib, want, x, Wt, b, dPooled, g)


def test_sparse_dcol_zero_signs_never_reach_dx(lib):
    """dcol (dots over the channels) leaves out the ±0 dC terms too, without redoing any row:
    its values can differ from the full dots only in the signs of zeros, and dx, a sum from
    +0, cannot show those. Channels 0-15 have weights -1e-20 and win the top cell of each 2x1
    window, channels 16-31 +1e-20 and the bottom cell; dPooled is +1e-30 / -1e-30, so every
    product underflows to -0: in a top row each lane's full dot is -0 + +0 = +0 and the
    shortened one -0, the case where the signs differ. dx must still be the spec's, bit for
    bit."""
    g = geometry(8, 16, 16, 32, poolH=2, poolW=1)
    Wt = np.zeros((32, 144), np.float32)
    Wt[:16] = -1e-20
    Wt[16:] = 1e-20
    b = np.where(np.arange(32) < 16, 100.0, 0.25).astype(np.float32)
    rows = 1e19 * (1.0 + np.arange(g["H"], dtype=np.float64) / 8.0)
    x = np.broadcast_to(rows[:, None, None], (g["H"], g["W"], g["C"])).astype(np.float32).copy()
    _, pooled, winners = spec.forward(x, Wt, b, *geo_args(g))
    dPooled = np.where(np.arange(32) < 16, 1e-30, -1e-30).astype(np.float32) * np.ones_like(pooled)
    want, _ = spec_block(x, Wt, b, g, dPooled=dPooled)
    assert (want["dx"] == 0).all() and not np.signbit(want["dx"]).all()
    backward_equals_spec(lib, want, x, Wt, b, dPooled, g)


@pytest.mark.parametrize("pad", [3.0, -2.5, np.inf, np.nan])
def test_forward_leaves_out_padding_terms_only_when_exact(lib, pad):
    """A one-chunk row (C = 1, K = 9 of KPadded 16): the padding columns' terms are alone in
    their lanes, fma(+0, w, +0) = +0 for a finite w, so the dots run over the 9 real taps.
    Padding weights as stored (finite, nonzero) leave the bits alone; an inf or NaN there
    makes every output NaN (+0 * inf), which only the dots over all 16 terms give."""
    g = geometry(12, 17, 1, 16, dx=False)
    x, Wt, b, rng = random_block(4, g, signed=True)
    Wt = Wt.copy()
    Wt[:, 9:] = pad
    Wt[5, 12] = -1.0 if np.isfinite(pad) else pad   # one more sign among the padding
    want, dPooled = spec_block(x, Wt, b, g, rng=rng)
    assert np.isfinite(want["conv"]).all() == bool(np.isfinite(pad))
    forward_equals_spec(lib, want, x, Wt, b, dPooled, g)


def test_listed_dW_falls_back_when_x_is_not_finite(lib):
    """+0 * inf is NaN: with an infinite input no zero term may be left out."""
    g = geometry(8, 13, 16, 32)           # KPadded 144: 9 chunks, the listed path
    x, Wt, b, rng = random_block(9, g)
    x[3, 4, 5] = np.inf
    x[6, 0, 15] = -np.inf
    want, dPooled = spec_block(x, Wt, b, g, rng=rng)
    assert np.isnan(want["dW"]).any()
    for isa in abi.available_isas(lib):
        select(lib, isa, 2)
        got = hconv.run_block(lib, x, Wt, b, dPooled, *geo_args(g))
        for t in ("dW", "db"):
            same_nan = np.isnan(got[t]) == np.isnan(want[t])
            assert same_nan.all(), (isa, t)
            ok = ~np.isnan(want[t])
            assert got[t][ok].tobytes() == want[t][ok].tobytes(), (isa, t)


# ------------------------------------------------------------------ the pool rule

NAN = np.float32(np.nan)
# one output channel, 2x2 windows over a 4 x 8 grid (+ a dropped row and column -> 5 x 9)
WINDOWS = [
    ([1.0, 2.0, 2.0, 1.0], 1),          # equal maxima: the first in row-then-column order
    ([2.0, 1.0, 1.0, 2.0], 0),
    ([0.0, -1.0, -0.0, -3.0], -1),      # nothing positive: dead, +0
    ([NAN, 0.5, NAN, 0.5], 1),          # NaN never wins
    ([NAN, NAN, NAN, NAN], -1),
    ([3.0, NAN, 5.0, 5.0], 2),
    ([1e-45, 0.0, 0.0, 0.0], 0),        # the smallest subnormal is positive
    ([-0.0, -0.0, -0.0, -0.0], -1),
]


def pool_grid():
    grid = np.full((5, 9), 7.0, np.float32)   # the last row / column: dropped, never winners
    for n, (vals, _) in enumerate(WINDOWS):
        oy, ox = divmod(n, 4)
        grid[2 * oy:2 * oy + 2, 2 * ox:2 * ox + 2] = np.array(vals, np.float32).reshape(2, 2)
    return grid


def expected_winner(n, cell):
    if cell < 0:
        return -1
    oy, ox = divmod(n, 4)
    dy, dx = divmod(cell, 2)
    return (2 * oy + dy) * 9 + 2 * ox + dx


def test_pool_rule_spec():
    grid = pool_grid()
    pooled, winners = spec.relu_maxpool(grid.reshape(45, 1), 5, 9, 2, 2)
    assert pooled.shape == (2, 4, 1)
    for n, (vals, cell) in enumerate(WINDOWS):
        oy, ox = divmod(n, 4)
        assert winners[oy, ox, 0] == expected_winner(n, cell), n
        if cell < 0:
            assert pooled[oy, ox, 0].tobytes() == np.float32(0.0).tobytes(), n   # +0, not -0
        else:
            assert pooled[oy, ox, 0] == np.float32(vals[cell])


def test_pool_rule_c(lib):
    """A 1x1 conv with weight 1 and bias +0 passes the grid through (fma(v, 1, +0) then the
    tree's +0 additions: -0 becomes +0, which the pool treats alike), so the C pool sees it."""
    grid = pool_grid()
    Wt = np.zeros((1, 16), np.float32)
    Wt[0, 0] = 1.0
    b = np.zeros(1, np.float32)
    x = grid.reshape(5, 9, 1)
    want_pooled, want_winners = spec.relu_maxpool(np.where(grid == 0, 0, grid).reshape(45, 1),
                                                  5, 9, 2, 2)
    dPooled = np.arange(1, 9, dtype=np.float32).reshape(2, 4, 1)
    for isa in abi.available_isas(lib):
        select(lib, isa, 1)
        got = hconv.run_block(lib, x, Wt, b, dPooled, 1, 1, 0, 0, 2, 2)
        np.testing.assert_array_equal(got["winners"], want_winners)
        assert got["pooled"].tobytes() == want_pooled.tobytes()
        # backward: dPooled reaches exactly the winners, dead windows pass nothing
        live = want_winners.ravel() >= 0
        assert got["db"][0] == np.float32(dPooled.ravel()[live].sum())
        dC = spec.pool_backward(dPooled, want_winners, 45, 1).reshape(5, 9)
        assert got["dx"][:, :, 0].tobytes() == dC.tobytes()   # 1x1 conv: dx = dC * 1


# ------------------------------------------------------------------ flag, errors

def test_dx_null_is_not_computed(lib):
    g = geometry(8, 10, 4, 6)
    x, Wt, b, rng = random_block(3, g)
    _, dPooled = spec_block(x, Wt, b, g, rng=rng)
    select(lib, abi.available_isas(lib)[-1], 2)
    with_dx = hconv.run_block(lib, x, Wt, b, dPooled, *geo_args(g), want_dx=True)
    without = hconv.run_block(lib, x, Wt, b, dPooled, *geo_args(g), want_dx=False)
    assert "dx" in with_dx and "dx" not in without
    for t in ("conv", "pooled", "winners", "dW", "db"):
        assert with_dx[t].tobytes() == without[t].tobytes(), t


def call_forward(lib, H, W, C, Out, kh, kw, padH, padW, poolH, poolW, null=None):
    x = np.zeros((max(H, 1), max(W, 1), max(C, 1)), np.float32)
    Wt = np.zeros((max(Out, 1), 64), np.float32)
    b = np.zeros(max(Out, 1), np.float32)
    buf = np.zeros(1 << 16, np.float32)
    wbuf = np.zeros(1 << 16, np.int32)
    args = [x, Wt, b, buf, buf.copy(), wbuf]
    if null is not None:
        args[null] = None
    x, Wt, b, conv, pooled, winners = (hconv.ptr(a) for a in args)
    return lib.crnn_conv_forward(x, H, W, C, Wt, b, Out, kh, kw, padH, padW, poolH, poolW,
                                 conv, pooled, winners)


@pytest.mark.parametrize("shape", [
    (2, 8, 1, 4, 3, 3, 0, 0, 1, 1),      # H < kh, pad 0: no conv row
    (8, 2, 1, 4, 3, 3, 0, 0, 1, 1),      # W < kw, pad 0
    (3, 8, 1, 4, 3, 3, 1, 1, 4, 2),      # poolH > Hc: no pooled row
    (8, 3, 1, 4, 3, 3, 1, 1, 2, 4),      # poolW > Wc
    (8, 8, 0, 4, 3, 3, 1, 1, 2, 2),      # C = 0
    (8, 8, 1, 0, 3, 3, 1, 1, 2, 2),      # Out = 0
    (8, 8, 1, 4, 0, 3, 1, 1, 2, 2),      # kh = 0
    (8, 8, 1, 4, 3, 3, -1, 1, 2, 2),     # negative padding
    (8, 8, 1, 4, 3, 3, 1, 1, 0, 2),      # pool 0
])
def test_bad_shape_is_e_arg(lib, shape):
    assert call_forward(lib, *shape) == -1


@pytest.mark.parametrize("null", range(6))
def test_null_pointer_is_e_arg(lib, null):
    assert call_forward(lib, 8, 8, 1, 4, 3, 3, 1, 1, 2, 2, null=null) == -1
    assert call_forward(lib, 8, 8, 1, 4, 3, 3, 1, 1, 2, 2) == 0


@pytest.mark.parametrize("Out", [3, 4, 8, 16, 32])
def test_backward_rejects_bad_winners(lib, Out):
    """A winner outside its window, of another channel, or below -1 is CRNN_E_ARG on every
    ISA path, with channel counts that take the bundled port's scalar scatter (3, and every
    count on the scalar path: its check four channels at a time where it can) and each vector
    path's at its width (4 to 32: one to eight registers a window; the test with 3 channels
    alone had never run the four-channel check)."""
    g = geometry(6, 6, 2, Out)
    x, Wt, b, rng = random_block(4, g)
    _, pooled, winners = spec.forward(x, Wt, b, *geo_args(g))
    dPooled = np.ones_like(pooled)
    dW, db = np.zeros_like(Wt), np.zeros(Out, np.float32)

    def bwd(w, H=6):
        return lib.crnn_conv_backward(hconv.ptr(x), H, 6, 2, hconv.ptr(Wt), Out, 3, 3, 1, 1, 2, 2,
                                      hconv.ptr(dPooled), hconv.ptr(np.ascontiguousarray(w)),
                                      hconv.ptr(dW), hconv.ptr(db), None)

    other = winners[1, 1, 0] if winners[1, 1, 0] >= 0 else (2 * 6 + 2) * Out   # window (1, 1)'s cell
    bad = []
    for at, value in [((0, 0, 0), other), ((0, 0, 1), 0), ((0, 0, 0), -2),
                      ((2, 2, Out - 1), (0 * 6 + 0) * Out + Out - 1)]:   # the last lane's channel
        w = winners.copy()
        w[at] = value
        bad.append(w)
    for isa in abi.available_isas(lib):
        select(lib, isa, 1)
        assert bwd(winners) == 0, isa
        assert bwd(winners, H=1) == -1, isa                  # Hc = 1 < poolH
        for w in bad:
            assert bwd(w) == -1, (isa, Out)


# ------------------------------------------------------------------ the fixture and the hook

@pytest.fixture(scope="module")
def fixture():
    return read_fixture(FIXTURES_DIR / "conv.h5")


def test_fixture_promises(fixture):
    blocks = set()
    for case in fixture.cases:
        p = case.params
        blocks.add(p["block"])
        ex, f64 = case.expected["exact"], case.expected["float64"]
        # the float64 reference and the spec pick the same winners everywhere, exact ties
        # included (decided by the same first-wins rule); near-ties are kept out of the data
        np.testing.assert_array_equal(ex["winners"], f64["winners"], err_msg=case.name)
        # no window of a random case is within rounding of a tie: the model finds no near-tie
        # (a candidate within both conv values' allowances of the winner) and no window whose
        # winner is within its allowance of the +0 start
        if p["kind"] != "ties":
            a = allowance.allowances("conv", case)
            assert a["winners.windows"].size == a["winners.none"].size == 0, case.name
        assert ("dx" in ex) == p["dx"] == (p["block"] != 1), case.name
        assert p["dead"] > 0, case.name
        if p["kind"] == "ties":
            assert p["tied"] > 0.05 * p["windows"] and p["dead"] > 0.05 * p["windows"], case.name
        if p["Wc"] % p["poolW"] or p["Hc"] % p["poolH"]:
            assert p["dropped_positions"] > 0
            Hp, Wp = p["Hc"] // p["poolH"], p["Wc"] // p["poolW"]
            pos = ex["winners"][ex["winners"] >= 0] // p["Out"]
            assert (pos // p["Wc"] < Hp * p["poolH"]).all()
            assert (pos % p["Wc"] < Wp * p["poolW"]).all()
    assert blocks == {0, 1, 2, 3}
    names = [c.name for c in fixture.cases]
    assert any(c.params["Wc"] % 2 for c in fixture.cases if c.params["block"] == 1)
    assert any(c.params["P"] % 16 for c in fixture.cases), names


def test_compare_tier_reports_a_flip(fixture):
    case = next(c for c in fixture.cases if c.name == "small_C3_7x11")
    ours = {k: v.copy() for k, v in case.expected["exact"].items()}
    ref_t = case.expected["float64"]
    tol = lookup("conv", "winners")
    ok = hconv.compare_tier(case, "float64", "winners", ours, ref_t, tol, None)
    assert ok.passed and ok.usage == 0.0
    w = ours["winners"]
    idx = tuple(int(i) for i in np.argwhere(w >= 0)[0])
    Out = case.params["Out"]
    w[idx] = -1                                           # the port says: dead window
    c = hconv.compare_tier(case, "float64", "winners", ours, ref_t, tol, None)
    assert not c.passed and c.mismatches == 1
    assert "1 decision flip" in c.note and f"window {list(idx)}" in c.note
    assert f"margin {float(ours['conv'].flat[ref_t['winners'][idx]]):.3g}" in c.note
    assert c.worst["ref"] == int(ref_t["winners"][idx]) and c.worst["ours"] == -1
    assert ref_t["winners"][idx] % Out == idx[2]


def test_gate_conv_passes():
    r = subprocess.run([sys.executable, "-m", "crnn_conformance.harness.cli", "gate", "--layers", "conv", "-q"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]


def mostly_zero_block(seed, g, dead=0.7):
    """an input as a previous block's ReLU and pool leave it: most values +0, some so small
    that their products round to -0"""
    x, Wt, b, rng = random_block(seed, g)
    x[rng.random(x.shape) < dead] = 0.0
    x[rng.random(x.shape) < 0.05] = np.float32(1e-30)
    Wt = Wt.copy()
    Wt[:, ::5] *= np.float32(1e-12)
    return x, Wt, b, rng


@pytest.mark.parametrize("C,Out", [(16, 32), (32, 64), (3, 20)])
def test_forward_with_mostly_zero_windows_equals_spec(lib, C, Out):
    """The forward leaves out the window terms that are ±0 in a whole block of positions
    (every W finite) and must still give the spec's bits on every path."""
    g = geometry(9, 23, C, Out, dx=False)
    x, Wt, b, rng = mostly_zero_block(11 + C, g)
    want, dPooled = spec_block(x, Wt, b, g, rng=rng)
    forward_equals_spec(lib, want, x, Wt, b, dPooled, g)


@pytest.mark.parametrize("bad", [np.inf, np.nan])
def test_forward_keeps_zero_window_terms_when_w_is_not_finite(lib, bad):
    """+0 * inf is NaN: with a non-finite W no zero window term may be left out."""
    g = geometry(8, 13, 16, 32, dx=False)
    x, Wt, b, rng = mostly_zero_block(12, g)
    Wt[7, 40] = bad
    want, dPooled = spec_block(x, Wt, b, g, rng=rng)
    assert np.isnan(want["conv"].reshape(-1, 32)[:, 7]).any()
    for isa in abi.available_isas(lib):
        select(lib, isa, 2)
        got = hconv.run_block(lib, x, Wt, b, dPooled, *geo_args(g), want_dx=False)
        assert np.array_equal(np.isnan(got["conv"]), np.isnan(want["conv"])), isa
        ok = ~np.isnan(want["conv"])
        assert got["conv"][ok].tobytes() == want["conv"][ok].tobytes(), isa
