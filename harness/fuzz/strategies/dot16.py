"""dot16: one dot of 0..80 terms, ordinary, underflowing (signed-zero lanes) or overflowing; or a
long one (256..1100 terms: a port may split those across its threads, which no rule allows)."""
from __future__ import annotations

from functools import lru_cache

import numpy as np
from hypothesis import strategies as st

from ..values import array, f32_specials, ints


@lru_cache(maxsize=None)   # one strategy object (values.sampled says why)
@st.composite
def ordinary(draw):
    n = draw(ints(0, 80))
    sp = f32_specials()
    return draw(array(n, specials=sp, huge_exp=127)), draw(array(n, specials=sp, huge_exp=127))


@lru_cache(maxsize=None)
@st.composite
def underflow(draw):
    """Every product about 2^-160: each lane ends at a zero with its last product's sign."""
    n = draw(ints(0, 80))
    a = draw(array(n, kinds=("tiny",), specials=f32_specials()))
    b = draw(array(n, kinds=("tiny",), specials=f32_specials()))
    return a, b


@lru_cache(maxsize=None)
@st.composite
def long(draw):
    n = draw(ints(256, 1100))
    return draw(array(n, specials=f32_specials())), draw(array(n, specials=f32_specials()))


@lru_cache(maxsize=None)
def families():
    return st.one_of(ordinary(), underflow(), long())


@st.composite
def cases(draw):
    a, b = draw(families())
    return {"count": 1}, {"a": a, "b": b, "lengths": np.array([a.size], np.int64)}

