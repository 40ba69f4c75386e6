"""CTC edge cases (fixtures/ctc_edges.h5): exact tier only (docs/edge-cases.md).

One line each:
  T9_2L_plus_1_distinct   T = 2L + 1 with 4 distinct labels: every entry of the extended
                          sequence on the one path that visits them all
  T9_2L_plus_1_repeats    T = 2L + 1 with the target 2 2 3 3 (repeats need their blank)
  T4_minimal_repeats      the target 2 2 3 in T = 4 = L + 1 repeat: exactly one alignment
  T3_infeasible_repeats   the target 2 2 3 in T = 3: no alignment, loss +inf, gradient +0
  K1_empty_T4             one class (blank only), empty target: logP is the sum of lp = 0
  T0_K3                   no steps at all: loss +inf, an empty gradient
many_tiny (kind `many`): every target of length 0..3 over every alphabet of K = 1..4 classes,
  at T = 1, 2, 3 (180 combinations; 32 lines each of the 66 that have an alignment, one each
  of the 114 that have none), with logits drawn from
  N(0, 1), N(0, 4), integers in -3..3, all equal, saturated (+30 on one class, -30 on the
  rest), gaps near logadd's cut (0, -37 .. -42) and N(0, 100), and scales 1/B for
  B = 1, 2, 3, 4, 7: 2226 lines, small enough that single DetMath exp and log results
  reach the loss's last bits.
rounding_T1_K2 (kind `many`): 120 lines z = (0, d), loss log(1 + e^d), with d chosen (from
  float32 values in [-0.69, 0]) where DetMath's exp or log is not the correctly rounded value
  and the loss with correctly rounded exp and log differs from the spec's: a port whose exp and
  log are the C library's (about correctly rounded) fails them whatever its library's version.
  Found with mpmath (the dev and pytorch extras), which regenerating this fixture needs.
"""
from __future__ import annotations

import itertools

import numpy as np

from .. import draw, exact

NAME = "ctc_edges"
LAYER = "ctc"
SEED = 5007
F32 = np.float32


def _line(name, logits, target, scale, note):
    logits = np.ascontiguousarray(logits, F32)
    target = np.ascontiguousarray(target, np.int32)
    inputs = {"logits": logits, "target": target, "scale": np.array([scale], np.float64)}
    T, K = logits.shape
    return exact.case(LAYER, name, {"T": T, "K": K, "L": int(target.size), "scale": scale,
                                    "note": note}, inputs)


def logits_kind(rng, kind, T, K) -> np.ndarray:
    if kind == "normal1":
        return rng.normal(0, 1, (T, K))
    if kind == "normal4":
        return rng.normal(0, 4, (T, K))
    if kind == "integers":
        return rng.integers(-3, 4, (T, K)).astype(float)
    if kind == "equal":
        return np.full((T, K), float(rng.integers(-2, 3)))
    if kind == "saturated":
        z = np.full((T, K), -30.0)
        z[np.arange(T), rng.integers(0, K, T)] = 30.0
        return z
    if kind == "cut":
        return -rng.choice([0.0, 37.0, 38.0, 39.0, 40.0, 41.0, 42.0], (T, K)) + rng.uniform(-0.01, 0.01, (T, K))
    return rng.normal(0, 100, (T, K))


# lines per (T, K, target) that has an alignment: enough that single DetMath exp and log
# results reach the loss in thousands of lines (docs/edge-cases.md), few enough for the gate's 10 s
FEASIBLE_LINES = 32
KINDS = ("normal1", "normal4", "integers", "equal", "saturated", "cut", "wide")


def targets(K):
    for L in range(4):
        yield from itertools.product(range(1, K), repeat=L)


def many(rng):
    lines = []
    for T in (1, 2, 3):
        for K in (1, 2, 3, 4):
            for tgt in targets(K):
                repeats = sum(a == b for a, b in zip(tgt, tgt[1:]))
                for i in range(FEASIBLE_LINES if len(tgt) + repeats <= T else 1):
                    kind = KINDS[i % len(KINDS)] if i < len(KINDS) else str(rng.choice(KINDS))
                    scale = 1.0 / float(rng.choice([1, 2, 3, 4, 7]))
                    lines.append((logits_kind(rng, kind, T, K), tgt, scale))
    return _many("many_tiny", lines)


def _many(name, lines):
    """A case of kind `many`: each (logits [T][K], target, scale) line one call."""
    inputs = {"logits": np.concatenate([z.astype(F32).ravel() for z, _, _ in lines]),
              "shapes": np.array([[z.shape[0], z.shape[1], len(t)] for z, t, _ in lines], np.int64),
              "targets": np.array([v for _, t, _ in lines for v in t], np.int32),
              "scales": np.array([s for _, _, s in lines], np.float64)}
    c = exact.case(LAYER, name, {"kind": "many", "lines": len(lines)}, inputs)
    c.params["infeasible"] = int(np.sum(np.isinf(c.expected["exact"]["loss"])))
    return c


def rounding_lines(rng, want=120):
    """(0, d) lines whose loss log(1 + e^d) changes when exp and log are correctly rounded
    (the spec's loss of such a line is exactly DetMath's log(1 + exp(d)))."""
    import mpmath
    from ..spec import detmath
    mpmath.mp.prec = 120
    cr_exp = lambda x: float(mpmath.exp(mpmath.mpf(float(x))))            # noqa: E731
    cr_log = lambda x: float(mpmath.log(mpmath.mpf(float(x))))            # noqa: E731
    found = []
    while len(found) < want:
        d = rng.uniform(-0.69, 0.0, 4000).astype(F32).astype(np.float64)
        e = detmath.exp(d)
        s = 1.0 + e
        spec_loss = detmath.log(s)                 # -lp[0] for z = (0, d): -((0 - 0) - log s)
        for di, si, li in zip(d, s, spec_loss):
            if len(found) < want and cr_log(1.0 + cr_exp(di)) != float(li):
                found.append(di)
    return found


def published_rounding_lines() -> list:
    """The checked-in fixture's rounding lines: a fresh draw keeps them (they are found by a
    search with mpmath, which the package does not need, not drawn; docs/fixtures.md)."""
    from ... import fixtures
    from ..h5io import read_fixture
    fx = read_fixture(fixtures.directory() / "ctc_edges.h5")
    case = next(c for c in fx.cases if c.name == "rounding_T1_K2")
    return [float(d) for d in np.asarray(case.inputs["logits"], np.float64)[1::2]]


def rounding(rng):
    ds = rounding_lines(rng) if draw.current() is None else published_rounding_lines()
    z = np.array([[0.0, d] for d in ds], np.float32)
    inputs = {"logits": z.ravel(), "shapes": np.array([[1, 2, 0]] * len(ds), np.int64),
              "targets": np.zeros(0, np.int32), "scales": np.ones(len(ds))}
    return exact.case(LAYER, "rounding_T1_K2", {"kind": "many", "lines": len(ds)}, inputs)


def build():
    rng = draw.rng(SEED)
    n = lambda T, K: rng.normal(0, 2, (T, K))
    return [
        _line("T9_2L_plus_1_distinct", n(9, 6), [1, 2, 3, 4], 0.25, "T = 2L + 1, distinct labels"),
        _line("T9_2L_plus_1_repeats", n(9, 5), [2, 2, 3, 3], 0.25, "T = 2L + 1, repeats"),
        _line("T4_minimal_repeats", n(4, 5), [2, 2, 3], 1.0, "T = L + repeats: one alignment"),
        _line("T3_infeasible_repeats", n(3, 5), [2, 2, 3], 0.5, "no alignment"),
        _line("K1_empty_T4", n(4, 1), [], 1.0, "blank only"),
        _line("T0_K3", np.zeros((0, 3)), [], 1.0, "no steps"),
        many(rng),
        rounding(rng),
        many_short(draw.rng(SEED + 1)),
    ]


def many_short(rng, n=600):
    """Lines of 8 to 16 steps, 2 to 5 labels over 2 to 4 classes, logits of spread 10: a label
    holds several entries of comparable alpha + beta, and the blank often most of a step's
    probability, so p - occ cancels and the order of acc's logadds (ascending s) reaches the
    gradient's binary32 bits (measured: in 7.9 % of such lines reversing it changes one)."""
    lines = []
    while len(lines) < n:
        T, K = int(rng.integers(8, 17)), int(rng.integers(2, 5))
        tgt = [int(v) for v in rng.integers(1, K, int(rng.integers(2, 6)))]
        lines.append((rng.normal(0, 10.0, (T, K)), tgt, 1.0 / float(rng.choice([1, 2, 4]))))
    return _many("many_short_T8_16_K2_4", lines)
