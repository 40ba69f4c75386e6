"""dot16: one dot of 0..80 terms, ordinary, underflowing (signed-zero lanes) or overflowing; or a
long one (256..1100 terms: a port may split those across its threads, which no rule allows)."""
from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from ..values import array, f32_specials


@st.composite
def ordinary(draw):
    n = draw(st.integers(0, 80))
    sp = f32_specials()
    return draw(array(n, specials=sp, huge_exp=127)), draw(array(n, specials=sp, huge_exp=127))


@st.composite
def underflow(draw):
    """Every product about 2^-160: each lane ends at a zero with its last product's sign."""
    n = draw(st.integers(0, 80))
    a = draw(array(n, kinds=("tiny",), specials=f32_specials()))
    b = draw(array(n, kinds=("tiny",), specials=f32_specials()))
    return a, b


@st.composite
def long(draw):
    n = draw(st.integers(256, 1100))
    return draw(array(n, specials=f32_specials())), draw(array(n, specials=f32_specials()))


@st.composite
def cases(draw):
    a, b = draw(st.one_of(ordinary(), underflow(), long()))
    return {"count": 1}, {"a": a, "b": b, "lengths": np.array([a.size], np.int64)}

