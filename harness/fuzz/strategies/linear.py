"""linear: T, I, O in 1..24 (tails of every length); ordinary or underflowing products."""
from __future__ import annotations

from hypothesis import strategies as st

from ..values import array, f32_specials, ints, sampled


@st.composite
def cases(draw):
    T, I, O = (draw(ints(1, 24)) for _ in range(3))
    kinds = draw(sampled((None, ("tiny",))))   # None: every kind
    kw = {"specials": f32_specials(), **({"kinds": kinds} if kinds else {})}
    x, W, dY = draw(array((T, I), **kw)), draw(array((O, I), **kw)), draw(array((T, O), **kw))
    b = draw(array(O, specials=f32_specials()))
    return {"T": T, "I": I, "O": O}, {"x": x, "W": W, "b": b, "dY": dY}
