"""adamw: one tensor of 1..24 elements, 1..12 steps, drawn hyper-parameters (the defaults
in a quarter of the cases, else values over their whole ranges: beta1 = 0, beta2 near 1, tiny
and large lr and eps, weight decay on or off). Every scalar is rounded once from a double: many
draws are what shows a scalar rounded another way."""
from __future__ import annotations

import numpy as np

from ..values import Choice, Reader, array, cases as from_bytes, f32_specials

SIZE = 56           # bytes a case at most (sizes, 2 arrays, hyper-parameters)
DEFAULTS = (1e-3, 0.9, 0.999, 1e-8, 0.01)
SPECIALS = f32_specials()
# a table value or (None) a uniform one, half and half
BETA1 = Choice((0.9, 0.0, 0.5, 0.99, None), (1, 1, 1, 1, 4))        # uniform in [0, 0.999]
BETA2 = Choice((0.999, 0.9, 0.99, 0.9999, None), (1, 1, 1, 1, 4))   # in [0.5, 0.99999]
DECAY = Choice((0.01, 0.0, None), (1, 1, 2))                        # in [0, 1]
# log10(lr) uniform in [-6, 0], or in [-1, 0] for a quarter of the sets: the decay factor
# 1 - lr wd computed in float rounds otherwise than once from a double mostly when lr wd is
# large (measured with the adamw_decay_float mutant: in 36 of 153 sets with lr wd >= 0.1,
# 5 of 239 in [0.01, 0.1), 1 of 1013 below)
LR_EXPONENTS = Choice(((-6.0, 6.0), (-1.0, 1.0)), (3, 1))


def between(r: Reader, table: Choice, lo: float, hi: float) -> float:
    """A table value or (None) one uniform in [lo, hi]: 5 bytes either way."""
    v, u = table.read(r), r.unit()
    return v if v is not None else lo + (hi - lo) * u


def hyper(r: Reader) -> list:
    """[lr, beta1, beta2, eps, weight decay]: 25 bytes; the first 0 gives the defaults."""
    defaults = not r.flag(0.75)
    lo, span = LR_EXPONENTS.read(r)
    lr = 10.0 ** (lo + span * r.unit())
    beta1, beta2 = between(r, BETA1, 0.0, 0.999), between(r, BETA2, 0.5, 0.99999)
    eps = 10.0 ** (-12 + 9 * r.unit())
    wd = between(r, DECAY, 0.0, 1.0)
    return list(DEFAULTS) if defaults else [lr, beta1, beta2, eps, wd]


def decode(r: Reader):
    n, steps = r.size(1, 24), r.size(1, 12)
    p = array(r, n, specials=SPECIALS, huge_exp=40)
    grads = array(r, (steps, n), specials=SPECIALS, huge_exp=40)
    hp = hyper(r)
    return ({"steps": steps, "shape": [n]},
            {"p": p, "grads": grads, "hparams": np.array(hp, np.float64),
             "decay": np.array([int(r.flag(0.5))], np.int32)})


def cases():
    return from_bytes(decode, SIZE)
