"""dot16 through a port: one crnn_dot16 call per (a, b) pair of the fixture."""
from __future__ import annotations

import numpy as np

from ._ffi import call, f32, out, ptr

LAYER = "dot16"
FIXTURE = "dot16"
FIXTURES = ["dot16", "dot16_zeros"]   # the second: signed-zero tails (docs/mutants.md)


def run(lib, case) -> dict:
    a, b = f32(case.inputs["a"]), f32(case.inputs["b"])
    lengths = case.inputs["lengths"]
    result = out(len(lengths))
    at = 0
    for i, n in enumerate(lengths):
        n = int(n)
        call(lib, "crnn_dot16", ptr(a[at:at + n]) if n else ptr(a), ptr(b[at:at + n]) if n else ptr(b),
             n, ptr(result[i:i + 1]))
        at += n
    return {"dot": result}
