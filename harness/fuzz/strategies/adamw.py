"""adamw: one tensor of 1..24 elements, 1..12 steps, drawn hyper-parameters (the defaults
first, then values over their whole ranges: beta1 = 0, beta2 near 1, tiny and large lr and
eps, weight decay on or off). Every scalar is rounded once from a double: many draws are what
shows a scalar rounded another way."""
from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from ..values import array, f32_specials

DEFAULTS = (1e-3, 0.9, 0.999, 1e-8, 0.01)


@st.composite
def hyper(draw):
    if draw(st.integers(0, 3)) == 0:
        return list(DEFAULTS)
    lr = 10.0 ** draw(st.floats(-6, 0))
    beta1 = draw(st.one_of(st.sampled_from((0.9, 0.0, 0.5, 0.99)), st.floats(0, 0.999)))
    beta2 = draw(st.one_of(st.sampled_from((0.999, 0.9, 0.99, 0.9999)), st.floats(0.5, 0.99999)))
    eps = 10.0 ** draw(st.floats(-12, -3))
    wd = draw(st.one_of(st.floats(0, 1), st.just(0.01), st.just(0.0)))
    return [lr, beta1, beta2, eps, wd]


@st.composite
def cases(draw):
    n, steps = draw(st.integers(1, 24)), draw(st.integers(1, 12))
    sp = f32_specials()
    p = draw(array(n, specials=sp, huge_exp=40))
    grads = draw(array((steps, n), specials=sp, huge_exp=40))
    hp = draw(hyper())
    return ({"steps": steps, "shape": [n]},
            {"p": p, "grads": grads, "hparams": np.array(hp, np.float64),
             "decay": np.array([int(draw(st.booleans()))], np.int32)})
