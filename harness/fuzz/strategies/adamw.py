"""adamw: one tensor of 1..24 elements, 1..12 steps, drawn hyper-parameters (the defaults
first, then values over their whole ranges: beta1 = 0, beta2 near 1, tiny and large lr and
eps, weight decay on or off). Every scalar is rounded once from a double: many draws are what
shows a scalar rounded another way."""
from __future__ import annotations

from functools import lru_cache

import numpy as np
from hypothesis import strategies as st

from ..values import BOOLEANS, array, f32_specials, ints, sampled

DEFAULTS = (1e-3, 0.9, 0.999, 1e-8, 0.01)
_HYPER = (st.floats(-6, 0),                                                        # log10 lr
          st.one_of(sampled((0.9, 0.0, 0.5, 0.99)), st.floats(0, 0.999)),          # beta1
          st.one_of(sampled((0.999, 0.9, 0.99, 0.9999)), st.floats(0.5, 0.99999)), # beta2
          st.floats(-12, -3),                                                      # log10 eps
          st.one_of(st.floats(0, 1), st.just(0.01), st.just(0.0)))                 # weight decay


@lru_cache(maxsize=None)
@st.composite
def hyper(draw):
    if draw(ints(0, 3)) == 0:
        return list(DEFAULTS)
    lr, beta1, beta2, eps, wd = (draw(s) for s in _HYPER)
    return [10.0 ** lr, beta1, beta2, 10.0 ** eps, wd]


@st.composite
def cases(draw):
    n, steps = draw(ints(1, 24)), draw(ints(1, 12))
    sp = f32_specials()
    p = draw(array(n, specials=sp, huge_exp=40))
    grads = draw(array((steps, n), specials=sp, huge_exp=40))
    hp = draw(hyper())
    return ({"steps": steps, "shape": [n]},
            {"p": p, "grads": grads, "hparams": np.array(hp, np.float64),
             "decay": np.array([int(draw(BOOLEANS))], np.int32)})
