"""Clipping edge cases (fixtures/clip_edges.h5): exact tier only (docs/edge-cases.md).

  norm_equals_limit          (3, 4) with limit 5: the norm equals the limit, nothing changes
                             (clipping needs norm > limit, strictly)
  limit_one_ulp_below        limit = the double below 5: clipped
  limit_one_ulp_above        limit = the double above 5: unchanged
  norm4_equals_limit_n64     64 halves in two tensors (norm exactly 4), limit 4
  overflow_inf_norm          a dot16(g, g) overflows: norm = +inf, factor 0, every element
                             becomes a zero with its own sign (-0 for the negative ones)
  neg_zero_kept              -0 elements, clipped: -0 * f stays -0
  neg_zero_disabled          -0 elements, clipping off: unchanged
  empty_tensors              tensors of 0 elements among the others
  many_factors               (kind `many`) 1000 small problems, each its own call: 1-3 tensors
                             of 1-40 elements at a random scale (2^-60 .. 2^60), the limit
                             below the norm by a random factor (the factor rounded once from
                             the double quotient; any other rounding shows in every element),
                             at the norm exactly, a double above or below it, or off
  limit_zero                 limit 0: factor 0, every element a zero of its own sign
  nan_norm_unclipped         one NaN element: the norm is NaN, and NaN > limit is false, so
                             nothing is clipped (a port testing !(norm <= limit) multiplies
                             every element by a NaN factor)
"""
from __future__ import annotations

import numpy as np

from .. import draw, exact
from ..edge_values import qnan32
from ..spec import clip as spec

NAME = "clip_edges"
LAYER = "clip"
SEED = 7008
F32 = np.float32


def _case(name, tensors, limit, enabled, note):
    tensors = [np.ascontiguousarray(t, F32) for t in tensors]
    names = [f"t{i}" for i in range(len(tensors))]
    inputs = {"grads": np.concatenate([t.ravel() for t in tensors] + [np.zeros(0, F32)]),
              "sizes": np.array([t.size for t in tensors], np.int64),
              "limit": np.array([limit], np.float64), "enabled": np.array([int(enabled)], np.int32)}
    params = {"names": names, "shapes": [list(t.shape) for t in tensors], "limit": limit,
              "enabled": bool(enabled), "note": note}
    c = exact.case(LAYER, name, params, inputs)
    c.params["triggered"] = bool(enabled and c.expected["exact"]["norm"][0] > limit)
    return c


def _problem(rng):
    """One `many` problem: (tensors, limit, enabled, what)."""
    count = int(rng.integers(1, 4))
    scale = float(np.exp2(rng.integers(-60, 61)))
    tensors = [(rng.normal(0, 1, int(rng.integers(1, 41))) * scale).astype(F32) for _ in range(count)]
    norm = spec.global_norm(tensors)
    what = rng.choice(["below", "below", "below", "equal", "ulp_below", "ulp_above", "off"])
    if what == "below":
        limit = norm * float(rng.uniform(0.001, 1.0))
    elif what == "equal":
        limit = norm
    elif what == "ulp_below":
        limit = float(np.nextafter(norm, 0.0))
    elif what == "ulp_above":
        limit = float(np.nextafter(norm, np.inf))
    else:
        limit = norm * 0.5
    return tensors, limit, int(what != "off"), str(what)


def many(rng, n) -> object:
    problems = [_problem(rng) for _ in range(n)]
    flat = [t for p in problems for t in p[0]]
    inputs = {"grads": np.concatenate(flat).astype(F32),
              "sizes": np.array([t.size for t in flat], np.int64),
              "counts": np.array([len(p[0]) for p in problems], np.int64),
              "limits": np.array([p[1] for p in problems], np.float64),
              "enabled": np.array([p[2] for p in problems], np.int32)}
    kinds = [p[3] for p in problems]
    params = {"kind": "many", "problems": n, "limits": {k: kinds.count(k) for k in sorted(set(kinds))}}
    return exact.case(LAYER, "many_factors", params, inputs)


def build():
    rng = draw.rng(SEED)
    three_four = [np.array([3.0]), np.array([4.0])]
    halves = [np.full(40, 0.5), np.full((4, 6), 0.5)]
    big = np.concatenate([[3e19, -2.5e19], rng.normal(0, 1, 30), [-0.0, 0.0, -1e-30]])
    signed = rng.normal(0, 1, 37)
    signed[::3] = -0.0
    return [
        _case("norm_equals_limit", three_four, 5.0, True, "norm 5 = limit 5: not clipped"),
        _case("limit_one_ulp_below", three_four, float(np.nextafter(5.0, 0.0)), True,
              "norm 5 > limit: clipped"),
        _case("limit_one_ulp_above", three_four, float(np.nextafter(5.0, 6.0)), True,
              "norm 5 < limit: not clipped"),
        _case("norm4_equals_limit_n64", halves, 4.0, True, "norm 4 = limit 4: not clipped"),
        _case("overflow_inf_norm", [big, rng.normal(0, 1, 17)], 1.0, True,
              "norm +inf: factor 0, every element a signed zero"),
        _case("neg_zero_kept", [signed, [-0.0]], 0.5, True, "-0 * f = -0"),
        _case("neg_zero_disabled", [signed], 0.5, False, "clipping off: -0 unchanged"),
        _case("empty_tensors", [np.zeros(0), rng.normal(0, 2, 5), np.zeros(0)], 1.0, True,
              "tensors of 0 elements"),
        many(rng, 1000),
        _case("limit_zero", [np.array([3.0, -4.0]), np.array([-0.0, 0.5])], 0.0, True,
              "limit 0: factor 0, every element a zero of its own sign"),
        _case("nan_norm_unclipped", [np.array([3.0, qnan32(), -4.0]), np.array([2.0, -0.0])],
              1.0, True, "norm NaN: NaN > limit is false, nothing clipped"),
    ]
