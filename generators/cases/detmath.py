"""DetMath on its own (fixtures/detmath.h5, read by the ctc layer as case kind `detmath`:
crnn_detmath_exp and crnn_detmath_log): exact tier only (docs/edge-cases.md).

exp inputs:
  binades       every float64 binade of both signs up to 2^9 (|x| > 745 is a special case
                anyway), subnormal ones included: first, last and one value between
  specials      ±0, ±inf, NaNs of both signs with payloads and a signalling NaN (returned
                unchanged, bit for bit)
  thresholds    O_THRESH (largest finite result) and U_THRESH (smallest nonzero), 8
                neighbours a side
  reductions    the points where n = round(x 32/ln 2) steps, x = (n + 1/2) ln 2 / 32, for
                n = -34400..34400 in steps of 97 and all n in [-64, 64], 2 neighbours a side
  subnormal     the m = -1022 boundary (x = -1022 ln 2) and 2^-1022's (x = log 2^-1022), 8
                neighbours a side; 3000 uniform in [-745.14, -708.3] (the subnormal branch
                and its y < 1 rounding step)
  ranges        2000 uniform in [-50, 0] (the CTC's log-sum-exp), 2000 in [-746, 710]
log inputs:
  binades       every positive float64 binade (subnormal ones included): first, last, one
                between
  specials      ±0, ±inf, negative numbers, NaNs (as for exp), 1 and 1 ± 1..8 ulps
  table         the boundaries of the 32-entry table (mantissa 1 + j/32) and the halving
                threshold (j = 13, mantissa 1.40625), 2 neighbours a side, in 40 binades
  ranges        2000 uniform in [1, 1e4] (softmax sums), 2000 in [1, 2] (logadd's 1 + e),
                1000 subnormals with uniform bit patterns
"""
from __future__ import annotations

import numpy as np

from .. import draw, exact
from ..edge_values import binades, float_specials, nan64_variants, neighbours
from ..spec import detmath as D

NAME = "detmath"
LAYER = "ctc"
SEED = 5006
F64 = np.float64
LN2 = np.log(2.0)


def exp_inputs(rng) -> dict:
    b = binades(F64, rng, per=3)
    n = np.concatenate([np.arange(-34400, 34401, 97), np.arange(-64, 65)])
    return {
        "binades": b[np.abs(b) <= 1024.0],
        "specials": np.concatenate([float_specials(F64), nan64_variants()]),
        "thresholds": np.concatenate([neighbours(D.O_THRESH, 8, F64), neighbours(D.U_THRESH, 8, F64)]),
        "reductions": neighbours((n + 0.5) * LN2 / 32, 2, F64),
        "subnormal": np.concatenate([neighbours(-1022 * LN2, 8, F64),
                                     neighbours(np.log(2.0 ** -1022), 8, F64),
                                     rng.uniform(-745.14, -708.3, 3000)]),
        "ranges": np.concatenate([rng.uniform(-50, 0, 2000), rng.uniform(-746, 710, 2000)]),
    }


def log_inputs(rng) -> dict:
    mant = np.concatenate([1 + np.arange(32) / 32, [1.40625]])
    e = rng.integers(-1070, 1020, 40)
    table = (mant[None, :] * np.exp2(e.astype(F64))[:, None]).ravel()
    table = table[np.isfinite(table) & (table > 0)]
    sub_bits = rng.integers(1, 1 << 52, 1000, dtype=np.uint64)
    return {
        "binades": binades(F64, rng, per=3, signs=(1.0,)),
        "specials": np.concatenate([float_specials(F64), nan64_variants(), [-1.0, -1e-300],
                                    neighbours(1.0, 8, F64)]),
        "table": neighbours(table, 2, F64),
        "ranges": np.concatenate([rng.uniform(1, 1e4, 2000), rng.uniform(1, 2, 2000),
                                  sub_bits.view(F64)]),
    }


def build():
    rng = draw.rng(SEED)
    ge, gl = exp_inputs(rng), log_inputs(rng)
    inputs = {"x_exp": np.concatenate(list(ge.values())).astype(F64),
              "x_log": np.concatenate(list(gl.values())).astype(F64)}
    params = {"kind": "detmath", "exp_groups": {k: int(v.size) for k, v in ge.items()},
              "log_groups": {k: int(v.size) for k, v in gl.items()}}
    return [exact.case(LAYER, "exp_log", params, inputs)]
