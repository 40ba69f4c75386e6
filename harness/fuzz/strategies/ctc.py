"""ctc: one line (T 0..8, K 1..6, a target of 0..5 labels, repeats and infeasible ones
included), many tiny lines (case kind `many`, as fixtures/ctc_edges.h5's) and DetMath on its
own (case kind `detmath`: crnn_detmath_exp and _log).

Logits come from every value kind at scales up to 2^8 (finite: the ABI rejects others), or as
integer gaps near logadd's cut at -40; DetMath's inputs from every binade, the specials (NaNs
with payloads, ±inf, ±0), the overflow and underflow thresholds, the subnormal branch, the
range-reduction points and the log table's boundaries, each with neighbours."""
from __future__ import annotations

from functools import lru_cache

import numpy as np
from hypothesis import strategies as st

from crnn_conformance.generators.edge_values import nan64_variants
from crnn_conformance.generators.spec import detmath as D

from ..values import BOOLEANS, array, ints, picks, sampled

F64 = np.float64
LN2 = np.log(2.0)


def _near(points, k=2) -> np.ndarray:
    out, lo, hi = [points], points, points
    for _ in range(k):
        lo, hi = np.nextafter(lo, -np.inf), np.nextafter(hi, np.inf)
        out += [lo, hi]
    return np.concatenate(out)


EXP_CRITICAL = tuple(_near(np.array([D.O_THRESH, D.U_THRESH, -1022 * LN2, np.log(2.0 ** -1022)]),
                           1).tolist()) + (0.0, -0.0, float("inf"), float("-inf"))
EXP_POINTS = tuple(_near(np.concatenate([
    [D.O_THRESH, D.U_THRESH, -1022 * LN2, np.log(2.0 ** -1022), 0.0, 709.0, -708.0, -745.0],
    (np.arange(-64, 65) + 0.5) * LN2 / 32])).tolist()) + tuple(nan64_variants().tolist())
LOG_POINTS = tuple(_near(np.concatenate([
    np.ldexp(1 + np.arange(33) / 32, 0), np.ldexp(1.40625, np.arange(-3, 4)), [1.0, 2.0 ** -1022,
     5e-324, 2.0 ** 1023]])).tolist()) + tuple(nan64_variants().tolist()) + (
    0.0, -0.0, float("inf"), float("-inf"), -1.0)


GAPS = (0.0, -40.0, -37.0, -38.0, -39.0, -41.0, -42.0, -36.0)   # around logadd's cut at -40
TINY_SHAPES = ((1, 2), (2, 2), (1, 3), (1, 2), (3, 2), (1, 4), (2, 3), (1, 1), (3, 4), (2, 1))
TINY_SCALES = tuple((m, 1.0 / d) for d in (1, 2, 4, 3) for m in (2.0, 1.0, 4.0))


@st.composite
def detmath(draw):
    def one(points, critical=()):
        n = draw(ints(1, 40))
        x = draw(array(n, dtype=F64, specials=points, max_specials=8, huge_exp=1024))
        if draw(BOOLEANS):
            with np.errstate(all="ignore"):   # inf * 2^e, NaN * 2^e: as they are
                x = (x * np.ldexp(1.0, draw(ints(-30, 10)))).astype(F64)
        if critical and draw(BOOLEANS):   # the special-case bounds themselves
            bounds = picks(draw, critical, 1, n)
            x[:len(bounds)] = bounds
        return x
    return {"kind": "detmath"}, {"x_exp": one(EXP_POINTS, EXP_CRITICAL), "x_log": one(LOG_POINTS)}


@st.composite
def line(draw):
    T, K = draw(ints(0, 8)), draw(ints(1, 6))
    L = draw(ints(0, 5)) if K > 1 else 0
    target = np.array([draw(ints(1, K - 1)) for _ in range(L)], np.int32)
    if draw(BOOLEANS):
        z = draw(array((T, K), huge_exp=60)).astype(np.float32)
    else:
        gaps = picks(draw, GAPS, T * K, T * K)
        z = np.array(gaps, np.float32).reshape(T, K)
    scale = 1.0 / draw(sampled((1, 2, 4, 3, 7)))
    return ({"T": T, "K": K, "L": L, "scale": scale},
            {"logits": z, "target": target, "scale": np.array([scale], F64)})


@lru_cache(maxsize=None)   # one strategy object (values.sampled says why)
@st.composite
def tiny_line(draw):
    """T <= 3, K <= 4 (mostly T = 1, K = 2: the cheapest to check): few enough operations
    that a single exp or log rounded otherwise (a port with the C library's exp and log)
    reaches the loss's last bits, about once in 700 lines. Five choices a line: the shape,
    the target (its length, then its labels as one number), the logits' kind and look, and
    their scale with the loss scale."""
    T, K = draw(sampled(TINY_SHAPES))
    L = draw(ints(0, min(3, T))) if K > 1 else 0
    code = draw(ints(0, (K - 1) ** L - 1)) if L else 0
    target = [1 + code // (K - 1) ** i % (K - 1) for i in range(L)]
    z = draw(array((T, K), kinds=("normal", "uniform"), scales=False))
    mult, scale = draw(sampled(TINY_SCALES))
    return z * np.float32(mult), target, scale


@st.composite
def many(draw):
    """1..32 tiny lines, each drawn choice by choice. Lines made from one seed instead cost a
    third of the drawing but showed a libm exp or log in 1 case of 600 of the fuzzer's mix,
    where these show one in 12 (Hypothesis's own choices repeat values and whole lines,
    which a seed does not)."""
    lines = [draw(tiny_line()) for _ in range(draw(ints(1, 32)))]
    inputs = {"logits": np.concatenate([z.ravel() for z, _, _ in lines]).astype(np.float32),
              "shapes": np.array([[z.shape[0], z.shape[1], len(t)] for z, t, _ in lines], np.int64),
              "targets": np.array([v for _, t, _ in lines for v in t], np.int32),
              "scales": np.array([s for _, _, s in lines], F64)}
    return {"kind": "many", "lines": len(lines)}, inputs


def cases():
    return st.one_of(line(), many(), detmath())
