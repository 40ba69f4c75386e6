"""dot16: one dot of 0..80 terms, ordinary (overflowing values too) or underflowing
(signed-zero lanes); or a long one (256..1100 terms: a port may split those across its
threads, which no rule allows). Lengths favour the short end; every tail length is drawn."""
from __future__ import annotations

import numpy as np

from ..values import Choice, Reader, array, cases as from_bytes, f32_specials

SIZE = 31           # bytes a case at most (the family, n, two arrays)
FAMILY = Choice(("ordinary", "underflow", "long"), (5, 2, 2))
SPECIALS = f32_specials()


def ordinary(r: Reader, n: int):
    return (array(r, n, specials=SPECIALS, huge_exp=127),
            array(r, n, specials=SPECIALS, huge_exp=127))


def underflow(r: Reader, n: int):
    """Every product about 2^-160: each lane ends at a zero with its last product's sign."""
    return (array(r, n, kinds=("tiny",), specials=SPECIALS),
            array(r, n, kinds=("tiny",), specials=SPECIALS))


def long(r: Reader, n: int):
    return array(r, n, specials=SPECIALS), array(r, n, specials=SPECIALS)


FAMILIES = {"ordinary": ordinary, "underflow": underflow, "long": long}


def decode(r: Reader):
    family = FAMILY.read(r)
    n = r.size(256, 1100, wide=True) if family == "long" else r.size(0, 80, wide=True)
    a, b = FAMILIES[family](r, n)
    return {"count": 1}, {"a": a, "b": b, "lengths": np.array([a.size], np.int64)}


def cases():
    return from_bytes(decode, SIZE)
