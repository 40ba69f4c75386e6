"""ctc: one line (T 0..8, K 1..6, a target of 0..5 labels, repeats and infeasible ones
included), many tiny lines (case kind `many`, as fixtures/ctc_edges.h5's) and DetMath on its
own (case kind `detmath`: crnn_detmath_exp and _log).

Logits come from every value kind at scales up to 2^8 (finite: the ABI rejects others), or as
integer gaps near logadd's cut at -40; DetMath's inputs from every binade, the specials (NaNs
with payloads, ±inf, ±0), the overflow and underflow thresholds, the subnormal branch, the
range-reduction points and the log table's boundaries, each with neighbours."""
from __future__ import annotations

import numpy as np

from ....generators.edge_values import nan64_variants
from ....generators.spec import detmath as D

from ..values import Choice, Reader, array, cases as from_bytes, picks, rng

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

SIZE = 148          # bytes a case at most (`many`'s: 4, then 48 lines of 3)
FAMILY = Choice(("line", "many", "detmath"), (2, 3, 2))
GAPS = (0.0, -40.0, -37.0, -38.0, -39.0, -41.0, -42.0, -36.0)   # around logadd's cut at -40
LINE_SCALES = Choice((1.0, 1 / 2, 1 / 4, 1 / 3, 1 / 7))


def line(r: Reader):
    T, K, L = r.size(0, 8), 1 + r.below(6), r.size(0, 5)
    labels = [1 + r.below(max(K - 1, 1)) for _ in range(5)]
    L = L if K > 1 else 0
    gaps = r.flag(0.5)
    z = array(r, (T, K), huge_exp=60)
    run = picks(r, GAPS, T * K, T * K)
    if gaps:
        z = np.array(run, np.float32).reshape(T, K)
    scale = LINE_SCALES.read(r)
    return ({"T": T, "K": K, "L": L, "scale": scale},
            {"logits": z, "target": np.array(labels[:L], np.int32),
             "scale": np.array([scale], F64)})


# A tiny line's T, K and L, weighted by how often a C library's exp or log (rounded otherwise
# than DetMath's, about once in 270 calls) reaches its loss: measured with the ctc_libm
# mutant over 6000 random lines each, from never (T = 1, K = 1) to once in 110 (T = 3 or 4,
# K = 2, L = 1).
TKL = Choice(((1, 1, 0), (1, 2, 0), (1, 2, 1), (1, 3, 0), (1, 3, 1), (1, 4, 0), (1, 4, 1),
              (2, 2, 0), (2, 2, 1), (2, 2, 2), (2, 3, 1), (2, 3, 2), (2, 4, 1), (2, 4, 2),
              (3, 2, 0), (3, 2, 1), (3, 2, 2), (3, 3, 1), (3, 3, 2), (3, 4, 1), (3, 4, 2),
              (3, 4, 3), (4, 2, 1), (4, 2, 2), (4, 3, 1), (4, 3, 2), (4, 4, 2), (4, 4, 3)),
             (1, 1, 2, 1, 1, 1, 1,
              1, 4, 1, 3, 1, 2, 2,
              1, 8, 3, 3, 2, 2, 3,
              1, 9, 4, 3, 4, 3, 1))
LOOKS = Choice([(k, m, s) for k in ("zero", "normal", "uniform") for m in (1.0, 0.5, 0.25, 2.0)
                for s in (1.0, 1 / 2, 1 / 4, 1 / 3)],
               [{"zero": 1, "normal": 6, "uniform": 4}[k] for k in ("zero", "normal", "uniform")
                for _ in range(16)])
MAX_LINES = 48
LINES = Choice(range(1, MAX_LINES + 1), (1,) * (MAX_LINES - 1) + (MAX_LINES - 1,))
_TKL = np.array([TKL.lut[b] for b in range(256)], np.int64)            # byte -> T, K, L
_LOOK = np.array([(("zero", "normal", "uniform").index(k), m, s)
                  for k, m, s in (LOOKS.lut[b] for b in range(256))])   # byte -> kind, mult, scale
_POW = np.array([1, 3, 9])                                             # the labels' digits


def many(r: Reader):
    """1..48 tiny lines (half the cases 48): T <= 4, K <= 4, few enough operations that a
    single exp or log rounded otherwise reaches the loss's last bits. Three bytes a line (its
    T, K and L; its labels as digits of one number; its values' kind and scale and the loss
    scale); its logits are the line's own block of the case's random numbers, so a line does
    not depend on the others."""
    g = rng(r.u16())                # no repeats: every line its own values
    n = LINES.read(r)
    raw = np.frombuffer(r.take(3 * MAX_LINES), np.uint8)
    raw = raw.reshape(MAX_LINES, 3)[:n].astype(np.int64)
    T, K, L = _TKL[raw[:, 0]].T
    kind, mult, scale = _LOOK[raw[:, 2]].T
    values = np.where(kind[:, None] == 1, g.standard_normal((MAX_LINES, 16))[:n],
                      g.uniform(-1, 1, (MAX_LINES, 16))[:n]) * mult[:, None]
    values[kind == 0] = 0.0
    logits = values[np.arange(16) < (T * K)[:, None]]
    classes = np.maximum(K - 1, 1)[:, None]
    labels = 1 + raw[:, 1:2] // _POW % classes
    inputs = {"logits": logits.astype(np.float32),
              "shapes": np.stack([T, K, L], axis=1).astype(np.int64),
              "targets": labels[np.arange(3) < L[:, None]].astype(np.int32),
              "scales": scale.astype(F64)}
    return {"kind": "many", "lines": int(n)}, inputs


DM_EXPONENTS = Choice(sorted(range(-30, 11), key=lambda e: (abs(e), e < 0)))


def detmath(r: Reader):
    def one(points, critical=()):
        n = r.size(1, 40)
        x = array(r, n, dtype=F64, specials=points, slots=8, huge_exp=1024)
        scaled, e = r.flag(0.5), DM_EXPONENTS.read(r)
        if scaled:
            with np.errstate(all="ignore"):   # inf * 2^e, NaN * 2^e: as they are
                x = (x * 2.0 ** e).astype(F64)
        if critical:                          # the special-case bounds themselves
            at_bounds, bounds = r.flag(0.5), picks(r, critical, 1, n)
            if at_bounds:
                x[:len(bounds)] = bounds
        return x
    return {"kind": "detmath"}, {"x_exp": one(EXP_POINTS, EXP_CRITICAL), "x_log": one(LOG_POINTS)}


FAMILIES = {"line": line, "many": many, "detmath": detmath}


def decode(r: Reader):
    return FAMILIES[FAMILY.read(r)](r)


def cases():
    return from_bytes(decode, SIZE)
