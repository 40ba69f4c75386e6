"""linear: T, I, O in 1..24 (tails of every length, the small end favoured); ordinary values,
or x, W and dY tiny (underflowing products in y, dW and dx)."""
from __future__ import annotations

from ..values import Choice, Reader, array, cases as from_bytes, f32_specials

SIZE = 60           # bytes a case at most (the family, 3 sizes, four arrays)
FAMILY = Choice(("ordinary", "underflow"), (2, 1))
SPECIALS = f32_specials()


def ordinary(r: Reader, shape):
    return array(r, shape, specials=SPECIALS)


def underflow(r: Reader, shape):
    return array(r, shape, kinds=("tiny",), specials=SPECIALS)


FAMILIES = {"ordinary": ordinary, "underflow": underflow}


def decode(r: Reader):
    operand = FAMILIES[FAMILY.read(r)]
    T, I, O = r.size(1, 24), r.size(1, 24), r.size(1, 24)
    x, W, dY = operand(r, (T, I)), operand(r, (O, I)), operand(r, (T, O))
    b = array(r, O, specials=SPECIALS)
    return {"T": T, "I": I, "O": O}, {"x": x, "W": W, "b": b, "dY": dY}


def cases():
    return from_bytes(decode, SIZE)
