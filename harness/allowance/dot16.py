"""dot16's error model: each result one binary32 sum of its n products, in any order."""
from __future__ import annotations

import numpy as np

from .errors import Err, stack
from .sums import products, rounded


def case_errors(case) -> dict:
    a, b = (np.asarray(case.inputs[k], np.float64) for k in ("a", "b"))
    out, at = [], 0
    for n in (int(v) for v in case.inputs["lengths"]):
        out.append(rounded(products(Err.exact(a[None, at:at + n]), Err.exact(b[at:at + n, None])))
                   .reshape(()))
        at += n
    return {"dot": stack(out)}
