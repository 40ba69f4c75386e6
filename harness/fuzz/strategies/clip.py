"""clip: 1..4 tensors of 0..40 elements at any scale (overflowing squares included: norm +inf,
factor 0, signed zeros), the limit drawn below the norm, exactly at it, a double above or below
it, or clipping off."""
from __future__ import annotations

import numpy as np

from ....generators.spec.dot16 import gemm16

from ..values import Choice, Reader, array, cases as from_bytes, f32_specials, recipe_bytes

SIZE = 67           # bytes a case at most (count, 4 tensor slots, the limit)
MAX_TENSORS = 4
SPECIALS = f32_specials()
TENSOR_BYTES = 1 + recipe_bytes(SPECIALS)
COUNT = Choice(range(1, MAX_TENSORS + 1))
HOW = Choice(("fraction", "equal", "ulp_below", "ulp_above", "off", "fixed"), (3, 2, 2, 2, 1, 1))
FIXED = Choice((1.0, 5.0, 0.0))


def tensors(r: Reader, count: int) -> list:
    """The first `count` of MAX_TENSORS fixed-size slots: a size (0..40), a recipe."""
    out = []
    for slot in range(MAX_TENSORS):
        s = r.sub(TENSOR_BYTES)
        if slot < count:
            out.append(array(s, s.size(0, 40), specials=SPECIALS, huge_exp=100))
    return out


def global_norm(ts) -> float:
    """generators/spec/clip.global_norm in one gemm16 call: the tensors as the rows of one
    matrix, zero-padded, each dotted with itself. Zero terms change no lane of a sum of
    squares (every lane is +0 or more, and fma(0, 0, p) = p), so each row's dot is the
    tensor's dot16(g, g)."""
    rows = np.zeros((len(ts), max(t.size for t in ts)), np.float32)
    for i, t in enumerate(ts):
        rows[i, :t.size] = t
    # an overflowing dot16(g, g) is the +inf norm it means; the dots of two different rows,
    # not used, may hold inf - inf
    with np.errstate(over="ignore", invalid="ignore"):
        sumsq = np.diagonal(gemm16(rows, rows)) if rows.size else np.zeros(len(ts), np.float32)
    total = 0.0
    for v in sumsq:
        total = total + float(v)
    return float(np.sqrt(total))


def limit_of(how: str, norm: float, fraction: float, fixed: float) -> float:
    limit = {"fraction": norm * fraction, "equal": norm,
             "ulp_below": float(np.nextafter(norm, 0.0)),
             "ulp_above": float(np.nextafter(norm, np.inf)), "off": 1.0, "fixed": fixed}[how]
    return limit if np.isfinite(limit) else 1.0


def decode(r: Reader):
    count = COUNT.read(r)
    ts = tensors(r, count)
    how = HOW.read(r)
    norm = global_norm(ts) if how in ("fraction", "equal", "ulp_below", "ulp_above") else 1.0
    limit = limit_of(how, norm, 0.001 + 0.999 * r.unit(), FIXED.read(r))
    names = [f"t{i}" for i in range(count)]
    return ({"names": names, "shapes": [[t.size] for t in ts], "limit": limit},
            {"grads": np.concatenate(ts).astype(np.float32),
             "sizes": np.array([t.size for t in ts], np.int64),
             "limit": np.array([limit], np.float64),
             "enabled": np.array([int(how != "off")], np.int32)})


def cases():
    return from_bytes(decode, SIZE)
