"""The one comparison path for every tier. A tier differs only in the allowance it computes.

    exact, identity : allowance 0 — every bit equal; usage is the max ulp distance
    float64         : allowance = Atol + Rtol*|ref|
    pytorch         : allowance = 2*Atol + 2*Floor + 2*Rtol*|ref|

usage = max over elements of |ours - ref| / allowance; a tensor passes at usage <= 1 (and, for
the bit tiers, zero mismatches). The tolerance tiers also give the check's resolution: the
smallest uniform relative error of the port's output that the check would detect,
min over elements with a finite, nonzero reference of (allowance - |ours - ref|) / |ref|
(0 when the check already fails; None for the bit tiers, or when no element qualifies). NaN or Inf from the port where the reference is finite is a
failure of that element, and so is the poison value a port never overwrote.

The ulp distance (ulp_distance) is counted between two finite values only. A differing
element that is NaN, Inf or poison on either side has no distance: the record's note and its
worst element say what it is in words ("NaN where the reference is finite", "poison left
(never written)"), its usage is unbounded (inf), and the bit tiers' max_ulp is over the other
differing elements (None when there are none).

A tensor that fails or uses more than DETAIL_USAGE of its allowance also gets a compact picture
of its elements for the reports (docs/report-schema.md): `hist`, a histogram of the
per-element measure (usage for the tolerance tiers, ulp distance for the bit tiers) over fixed
log-spaced bins, and `heatmap`, the max of that measure over a grid of row x column groups of
the tensor seen as 2-D (rows = its first axis), at most HEATMAP_ROWS x HEATMAP_COLS cells.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

POISON_F32 = np.uint32(0x7FE5A5A5)         # a quiet NaN with a recognisable payload
POISON_F64 = np.uint64(0x7FFDA5A5A5A5A5A5)
POISON_I32 = np.int32(0x5A5A5A5A)
BIT_TIERS = ("exact", "identity")

DETAIL_USAGE = 0.5
# Right-closed bins (e_i, e_i+1]: 4 per decade from 1e-3 to 1e2 for usage (1.0 is an edge);
# powers of two from 1 to 2^20 for ulp distances (and integer differences).
HIST_EDGES = {
    "usage": [float(10.0 ** (-3 + i / 4)) for i in range(21)],
    "ulp": [float(2 ** i) for i in range(21)],
}
HEATMAP_ROWS, HEATMAP_COLS = 64, 32


def poisoned(shape, dtype) -> np.ndarray:
    dtype = np.dtype(dtype)
    if dtype == np.float32:
        return np.full(shape, POISON_F32, np.uint32).view(np.float32)
    if dtype == np.float64:
        return np.full(shape, POISON_F64, np.uint64).view(np.float64)
    if dtype == np.int32:
        return np.full(shape, POISON_I32, np.int32)
    raise TypeError(f"no poison for {dtype}")


def is_poison(a: np.ndarray) -> np.ndarray:
    a = np.asarray(a)
    if a.dtype == np.float32:
        return a.view(np.uint32) == POISON_F32
    if a.dtype == np.float64:
        return a.view(np.uint64) == POISON_F64
    if a.dtype == np.int32:
        return a == POISON_I32
    return np.zeros(a.shape, bool)


def allowance(tier: str, ref: np.ndarray, atol: float, rtol: float, floor: float = 0.0):
    absref = np.abs(np.asarray(ref, np.float64))
    absref = np.where(np.isfinite(absref), absref, 0.0)  # an infinite ref is matched exactly
    if tier == "float64":
        return atol + rtol * absref
    if tier == "pytorch":
        return 2 * atol + 2 * floor + 2 * rtol * absref
    return np.zeros_like(absref)


def ulp_distance(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Distance in units in the last place: how many representable values lie between a and
    b, counted across zero, so +0 and -0 are 1 apart (-0 sits one step below +0) and a bit
    check that failed never shows 0 ulp. Exact integers: float32 in int64, float64 in uint64
    (any two float64 bit patterns are less than 2^64 steps apart, so the larger ordered
    integer minus the smaller, taken modulo 2^64, is the distance itself: nothing is clamped).
    Meaningful between two finite values; compare() describes NaN, Inf and poison in words.
    Integer tensors: |a - b|."""
    if a.dtype.kind != "f":
        return np.abs(a.astype(np.int64) - b.astype(np.int64))
    if a.dtype == np.float32:
        return np.abs(_ordered(a, np.int32, 0x7FFFFFFF) - _ordered(b, np.int32, 0x7FFFFFFF))
    oa = _ordered(a, np.int64, 0x7FFFFFFFFFFFFFFF)
    ob = _ordered(b, np.int64, 0x7FFFFFFFFFFFFFFF)
    hi = np.atleast_1d(np.maximum(oa, ob)).astype(np.uint64)   # two's complement: the
    lo = np.atleast_1d(np.minimum(oa, ob)).astype(np.uint64)   # difference wraps to the exact
    return (hi - lo).reshape(np.shape(a))                      # value, which is < 2^64


def _ordered(x: np.ndarray, it, mag) -> np.ndarray:
    """The bit patterns as int64 in the order of the values: -0 one step below +0."""
    i = np.asarray(x).view(it).astype(np.int64)
    return np.where(i < 0, -(i & mag) - 1, i)


def _kinds(x: np.ndarray) -> np.ndarray:
    """0 finite, 1 NaN, 2 +inf, 3 -inf (integers: 0)."""
    if x.dtype.kind != "f":
        return np.zeros(x.shape, np.int8)
    with np.errstate(all="ignore"):
        return np.select([np.isnan(x), x == np.inf, x == -np.inf], [1, 2, 3], 0).astype(np.int8)


KIND_WORDS = ("finite", "NaN", "inf", "-inf")
POISON_WORDS = "poison left (never written)"


def unbounded_word(code: int) -> str:
    """The words for an element with no distance (code from _codes)."""
    if code >= 16:
        return POISON_WORDS
    o, r = divmod(code, 4)
    if o == r == 1:
        return "NaN with other bits than the reference's NaN"
    return f"{KIND_WORDS[o]} where the reference is {KIND_WORDS[r]}"


def _codes(ours: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """Per element: 16 for poison left in ours, else 4 * kind(ours) + kind(ref) (_kinds);
    0 is two finite values (or integers), the only pair with a distance."""
    c = 4 * _kinds(ours) + _kinds(ref)
    return np.where(is_poison(ours) & ~is_poison(ref), 16, c).astype(np.int8)


def _unbounded_note(codes: np.ndarray, sel: np.ndarray) -> str:
    """`N element(s): <words>` for each kind of element in `sel` that has no distance."""
    found, counts = np.unique(codes[sel & (codes != 0)], return_counts=True)
    order = sorted(zip(found.tolist(), counts.tolist()), key=lambda fc: (fc[0] != 16, fc[0]))
    return "; ".join(f"{n} element(s): {unbounded_word(f)}" for f, n in order)


@dataclass
class Comparison:
    usage: float
    max_abs_diff: float
    mismatches: int
    elements: int
    passed: bool
    max_ulp: int | None = None
    worst: dict = field(default_factory=dict)
    note: str = ""
    hist: dict | None = None       # per-element histogram (failing or > DETAIL_USAGE only)
    heatmap: dict | None = None    # per row x column group max (failing or > DETAIL_USAGE only)
    resolution: float | None = None   # tolerance tiers: resolution() of the check
    excused: dict | None = None    # pytorch tier: the elements a used pool flip excused
    flips: list | None = None      # the pool flips this check judged (meta["flips"])


def histogram(v: np.ndarray, unit: str) -> dict:
    """Counts of the per-element measure `v` (>= 0, inf for NaN/Inf/poison): `zero` (v == 0),
    `below` (0 < v <= edges[0]), `counts[i]` (edges[i] < v <= edges[i+1]), `above` (v > edges[-1],
    every non-finite element included)."""
    edges = HIST_EDGES[unit]
    v = np.asarray(v, np.float64).ravel()
    v = np.where(np.isnan(v), np.inf, v)
    pos = v[v > 0]
    # searchsorted(side="left") gives the i with edges[i-1] < x <= edges[i]
    idx = np.searchsorted(np.asarray(edges), pos, side="left")
    bins = np.bincount(idx, minlength=len(edges) + 1)
    return {"unit": unit, "edges": edges, "zero": int(v.size - pos.size), "below": int(bins[0]),
            "counts": [int(c) for c in bins[1:len(edges)]], "above": int(bins[len(edges)])}


def _groups(n: int, cap: int) -> list[int]:
    step = -(-n // cap)
    return list(range(0, n, step))


def heatmap(v: np.ndarray, shape, cols: list[int] | None = None) -> dict | None:
    """Max of `v` over row x column groups of the tensor as 2-D [shape[0]][rest]; `cols` may
    give the column group starts (a layer that knows its layout, e.g. one group per conv tap)."""
    if len(shape) < 2 or shape[0] < 2:
        return None
    R = int(shape[0])
    C = int(np.prod(shape[1:]))
    if C < 1:
        return None
    m = np.asarray(v, np.float64).reshape(R, C)
    m = np.where(np.isnan(m), np.inf, m)
    r0 = _groups(R, HEATMAP_ROWS)
    c0 = list(cols) if cols else _groups(C, HEATMAP_COLS)
    grid = np.maximum.reduceat(np.maximum.reduceat(m, r0, axis=0), c0, axis=1)
    return {"rows": R, "cols": C, "row_starts": r0, "col_starts": c0,
            "max": [[_sig(x) for x in row] for row in grid]}


def _sig(x: float):
    """3 significant digits; None stands for +inf (JSON has no Inf)."""
    x = float(x)
    if not np.isfinite(x):
        return None
    return float(f"{x:.3g}")


def _detail(c: "Comparison", v: np.ndarray, unit: str, shape, cols) -> "Comparison":
    if not c.passed or (c.usage > DETAIL_USAGE and unit == "usage"):
        c.hist = histogram(v, unit)
        c.heatmap = heatmap(v, shape, cols)
    return c


def _index(flat: int, shape) -> list[int]:
    """The multi-index of element `flat` ([] for a scalar or a tensor with no element)."""
    if not shape or 0 in shape:
        return []
    return [int(i) for i in np.unravel_index(flat, shape)]


def _same_bits(ours: np.ndarray, ref: np.ndarray) -> np.ndarray:
    if ours.dtype.kind == "f":
        ui = {4: np.uint32, 8: np.uint64}[ours.dtype.itemsize]
        return ours.view(ui) == ref.view(ui)
    return ours == ref


def _usage(o, r, tier, atol, rtol, floor):
    """Per element of float64 arrays o (ours) and r (ref): (allowance, |o - r|, usage =
    |o - r| / allowance). Equal values, infinities and NaN where the reference is NaN count
    as 0 apart; NaN or Inf against a finite reference as infinitely far."""
    allow = allowance(tier, r, atol, rtol, floor)
    with np.errstate(all="ignore"):
        diff = np.abs(o - r)
        if np.isnan(diff).any():   # (else neither side is NaN, no infinities are equal)
            same_special = (o == r) | (np.isnan(o) & np.isnan(r))  # inf == inf, NaN where ref NaN
            diff = np.where(same_special, 0.0, diff)
            diff = np.where(np.isnan(diff), np.inf, diff)            # NaN/Inf against finite ref
        ratio = np.where(diff == 0, 0.0, diff / allow)
    return allow, diff, ratio


def resolution(allow, diff, ref, mask=None) -> float | None:
    """The smallest uniform relative error eps that the check would detect: scaling the port's
    output by (1 + eps) moves element i by eps*|ref_i| more in the worst direction, so it fails
    once eps > (allow_i - |diff_i|) / |ref_i|. The minimum over elements whose reference is
    finite and nonzero (and inside `mask`), clamped at 0 (a failing check detects any eps)."""
    r = np.abs(np.asarray(ref, np.float64))
    ok = np.isfinite(r) & (r != 0)
    if mask is not None:
        ok &= mask
    if not ok.any():
        return None
    allow, diff = np.broadcast_to(allow, r.shape), np.broadcast_to(diff, r.shape)
    with np.errstate(all="ignore"):
        slack = (allow - diff) / r
    if not ok.all():
        slack = np.where(ok, slack, np.inf)
    least = float(np.min(slack))
    return 0.0 if least != least else max(0.0, least)   # a NaN slack counts as -inf


def _over(ratio) -> np.ndarray:
    return ratio > 1.0


def within(ours, ref, tier: str, atol: float = 0.0, rtol: float = 0.0,
           floor: float = 0.0) -> np.ndarray:
    """Per element, True where `ours` is within its allowance of `ref`: the element-wise test
    compare() applies (compare's mismatches are exactly the False elements). Bit equality for
    the bit tiers and integer tensors (a dtype that differs from the reference's fails every
    element), usage <= 1 otherwise. The shapes must be equal."""
    ours, ref = np.asarray(ours), np.asarray(ref)
    if ours.shape != ref.shape:
        raise ValueError(f"shape {list(ours.shape)} != reference {list(ref.shape)}")
    if ours.dtype.kind in "iu" or tier in BIT_TIERS:
        if ours.dtype.kind in "iu":
            ref = ref.astype(ours.dtype)
        if ours.dtype != ref.dtype:
            return np.zeros(ours.shape, bool)
        return _same_bits(ours, ref)
    _, _, ratio = _usage(ours.astype(np.float64), ref.astype(np.float64), tier, atol, rtol, floor)
    return ~_over(ratio)


def compare(ours, ref, tier: str, atol: float = 0.0, rtol: float = 0.0, floor: float = 0.0,
            mask: np.ndarray | None = None, heatmap_cols: list[int] | None = None) -> Comparison:
    """Compares one tensor. `mask` (bool, same shape) limits the elements compared;
    `heatmap_cols` optionally gives the column groups of the heat map (see heatmap())."""
    ours, ref = np.asarray(ours), np.asarray(ref)
    if ours.shape != ref.shape:
        return Comparison(float("inf"), float("inf"), int(ref.size), int(ref.size), False,
                          note=f"shape {list(ours.shape)} != reference {list(ref.shape)}")
    if ours.dtype.kind in "iu" or tier in BIT_TIERS:
        return _compare_bits(ours, ref.astype(ours.dtype) if ours.dtype.kind in "iu" else ref,
                             tier, mask, heatmap_cols)
    return _compare_tolerance(ours, ref, tier, atol, rtol, floor, mask, heatmap_cols)


def _same_bytes(a: np.ndarray, b: np.ndarray) -> bool:
    """a.tobytes() == b.tobytes() (same shape and dtype), without copying either."""
    if a is b:
        return True
    if a.size and a.flags.c_contiguous and b.flags.c_contiguous:
        return memoryview(a).cast("B") == memoryview(b).cast("B")
    return a.tobytes() == b.tobytes()


def _compare_bits(ours, ref, tier, mask, cols=None) -> Comparison:
    if ours.dtype != ref.dtype:
        return Comparison(float("inf"), float("inf"), int(ref.size), int(ref.size), False,
                          note=f"dtype {ours.dtype} != reference {ref.dtype}")
    if mask is None and _same_bytes(ours, ref):   # the common case, decided at once
        return Comparison(0.0, 0.0, 0, int(ours.size), True, max_ulp=0)
    bad = ~within(ours, ref, tier)
    if mask is not None:
        bad &= mask
    n = int(bad.sum())
    if n == 0:
        return Comparison(0.0, 0.0, 0, int(ours.size), True, max_ulp=0)
    codes = _codes(ours, ref)
    special = bad & (codes != 0)       # NaN, Inf or poison: no distance, described in words
    counted = bad & ~special
    with np.errstate(all="ignore"):
        ulps = np.where(counted, ulp_distance(ours, ref), 0)
        diff = np.abs(ours.astype(np.float64) - ref.astype(np.float64))
    ulp_max = int(np.max(ulps)) if counted.any() else None
    mad = float(np.max(np.where(counted & np.isfinite(diff), diff, 0.0)))
    w = int(np.argmax(special)) if special.any() else int(np.argmax(ulps))
    worst = {"index": _index(w, ours.shape), "ours": _scalar(ours.flat[w]),
             "ref": _scalar(ref.flat[w]), "allowance": 0.0}
    if special.flat[w]:
        worst["unbounded"] = unbounded_word(int(codes.flat[w]))
    usage = float("inf") if special.any() else float(ulp_max)
    v = np.where(special, np.inf, ulps.astype(np.float64))
    c = Comparison(usage, mad, n, int(ours.size), False, ulp_max, worst,
                   _unbounded_note(codes, special))
    return _detail(c, v, "ulp", ours.shape, cols)


def _compare_tolerance(ours, ref, tier, atol, rtol, floor, mask, cols=None) -> Comparison:
    o = ours.astype(np.float64)
    r = ref.astype(np.float64)
    allow, diff, ratio = _usage(o, r, tier, atol, rtol, floor)   # the test within() applies
    if mask is not None:
        ratio = np.where(mask, ratio, 0.0)
        diff = np.where(mask, diff, 0.0)
    over = _over(ratio)
    n = int(np.count_nonzero(over))
    w = int(np.argmax(ratio)) if ratio.size else 0
    usage = float(ratio.flat[w]) if ratio.size else 0.0
    codes = _codes(ours, ref) if n else None
    special = over & (codes != 0) if n else None   # NaN, Inf or poison: described in words
    worst = {"index": _index(w, ours.shape), "ours": _scalar(ours.flat[w]) if ours.size else None,
             "ref": _scalar(ref.flat[w]) if ref.size else None,
             "allowance": float(allow.flat[w]) if allow.size else 0.0}
    if n and special.flat[w]:
        worst["unbounded"] = unbounded_word(int(codes.flat[w]))
    mad = float(np.max(diff)) if diff.size else 0.0
    c = Comparison(usage, mad, n, int(ours.size), n == 0, None, worst,
                   _unbounded_note(codes, special) if n else "",
                   resolution=resolution(allow, diff, r, mask))
    return _detail(c, ratio, "usage", ours.shape, cols)


def json_value(a, flat: int):
    """Element `flat` of array `a` as a results.json value (a number; NaN and Inf as strings)."""
    return _scalar(np.asarray(a).flat[flat])


def _scalar(v):
    v = v.item() if hasattr(v, "item") else v
    if isinstance(v, float) and not np.isfinite(v):
        return repr(v)   # JSON cannot hold NaN/Inf
    return v
