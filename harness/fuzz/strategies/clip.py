"""clip: 1..4 tensors of 0..40 elements at any scale (overflowing squares included: norm +inf,
factor 0, signed zeros), the limit drawn below the norm, exactly at it, a double above or below
it, or clipping off."""
from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from crnn_conformance.generators.spec import clip as spec

from ..values import array, f32_specials, ints, sampled


FRACTION = st.floats(0.001, 1.0)


@st.composite
def cases(draw):
    count = draw(ints(1, 4))
    tensors = [draw(array(draw(ints(0, 40)), specials=f32_specials(), huge_exp=100))
               for _ in range(count)]
    with np.errstate(over="ignore"):   # an overflowing dot16(g, g) is the +inf norm it means
        norm = spec.global_norm(tensors)
    how = draw(sampled(("fraction", "equal", "ulp_below", "ulp_above", "off", "fixed")))
    limit = {"fraction": norm * draw(FRACTION), "equal": norm,
             "ulp_below": float(np.nextafter(norm, 0.0)), "ulp_above": float(np.nextafter(norm, np.inf)),
             "off": 1.0, "fixed": draw(sampled((1.0, 5.0, 0.0)))}[how]
    if not np.isfinite(limit):
        limit = 1.0
    names = [f"t{i}" for i in range(count)]
    return ({"names": names, "shapes": [[t.size] for t in tensors], "limit": limit},
            {"grads": np.concatenate(tensors).astype(np.float32),
             "sizes": np.array([t.size for t in tensors], np.int64),
             "limit": np.array([limit], np.float64),
             "enabled": np.array([int(how != "off")], np.int32)})
