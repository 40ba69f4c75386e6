"""Which random inputs the builders draw: the checked-in draw, or a fresh one.

Every builder in generators/cases/ takes its Generator from `rng(SEED)`. Outside a fresh
draw that is NumPy's Generator seeded with SEED alone, so the checked-in fixtures come out
byte for byte as before. Inside `drawing(seed)` (`regen-fixtures --seed N --out DIR`) it is
seeded with the pair (SEED, N): the same cases under the same names, other data (and another
size where the builder draws one), so knowing the published fixtures' answers does not pass
it; a port that can read the draw's own files can still read its answers (docs/fixtures.md,
"A fresh draw").
"""
from __future__ import annotations

import contextlib

import numpy as np

_draw: int | None = None


def current() -> int | None:
    """The fresh draw's number, or None for the checked-in draw."""
    return _draw


def rng(base: int) -> np.random.Generator:
    """A builder's Generator for its seed `base` (the builder's SEED, or SEED + i)."""
    return np.random.default_rng(base if _draw is None else np.random.SeedSequence([base, _draw]))


@contextlib.contextmanager
def drawing(seed: int | None):
    """Builders called inside draw with `seed` (None: the checked-in draw)."""
    global _draw
    if seed is not None and (not isinstance(seed, int) or seed < 0):
        raise ValueError(f"a draw's seed is a non-negative integer, not {seed!r}")
    saved, _draw = _draw, seed
    try:
        yield
    finally:
        _draw = saved
