"""The Python API's input rules: no silent casts, no broadcasting (harness/api, docs/python-api.md).

Every floating input becomes float32 first, and both references compute on those float32
values. float32 inputs are taken as they are; float64 and integer inputs only when every value
is a float32 number (otherwise ValueError); float16 inputs only with allow_float16=True (widened
exactly; otherwise TypeError). Every input and output gradient must have exactly its layout's
shape (docs/architecture.md).
"""
from __future__ import annotations

import numpy as np


def _numpy(a):
    """A NumPy array from an array-like; a torch tensor (anything with .detach()) through
    .detach().cpu().numpy(), so torch is never imported here."""
    if hasattr(a, "detach") and hasattr(a, "cpu"):
        try:
            a = a.detach().cpu().numpy()
        except TypeError as e:      # bfloat16 and other dtypes NumPy has no equivalent of
            raise TypeError(f"a tensor of dtype {getattr(a, 'dtype', '?')} has no NumPy "
                            f"equivalent ({e}); convert it to float32 explicitly") from None
    return np.asarray(a)


def _f32(name: str, a, allow_float16: bool) -> np.ndarray:
    """The float32 values of input `name` under the dtype rules (module docstring)."""
    a = _numpy(a)
    kind = a.dtype.kind
    if a.dtype == np.float32:
        return np.ascontiguousarray(a)
    if a.dtype == np.float16:
        if not allow_float16:
            raise TypeError(
                f"{name} is float16: the references compute on float32 inputs. Pass "
                "allow_float16=True to widen float16 inputs to float32 (exact), knowing that "
                "both references then judge float32 arithmetic on those values")
        return a.astype(np.float32)
    if kind not in "fiub":
        raise TypeError(f"{name} has dtype {a.dtype}; the references take float32 inputs "
                        "(float16 with allow_float16=True): convert it explicitly")
    out = a.astype(np.float32)
    with np.errstate(all="ignore"):
        back = out.astype(a.dtype) if kind == "f" else out.astype(np.float64)
        orig = a if kind == "f" else a.astype(np.float64)
        ok = (back == orig) | (np.isnan(orig) & np.isnan(back))
    if kind in "iu":
        ok &= np.abs(orig) <= 2.0 ** 24        # an integer float32 holds exactly
    if not np.all(ok):
        i = tuple(int(j) for j in np.unravel_index(int(np.argmin(ok)), a.shape)) if a.ndim else ()
        raise ValueError(
            f"{name} is {a.dtype} and {name}{list(i) if i else ''} = {a[i].item()!r} is not a float32 "
            f"number; the references compute on float32 inputs and do not round silently: "
            f"pass {name}.astype(numpy.float32) (or a float32 tensor) if that is what you mean")
    return np.ascontiguousarray(out)


def _labels(name: str, a) -> np.ndarray:
    a = _numpy(a)
    if a.size == 0:
        return np.zeros(0, np.int32)
    if a.dtype.kind not in "iu":
        raise TypeError(f"{name} must hold integer labels, got dtype {a.dtype}")
    if a.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {tuple(a.shape)}")
    return np.ascontiguousarray(a, np.int32)


def _shape(name: str, a: np.ndarray, want: tuple, layout: str) -> None:
    if tuple(a.shape) != tuple(want):
        raise ValueError(f"{name} has shape {tuple(a.shape)}, expected {tuple(want)} ({layout})")


def _grad(grad, out_name: str, out_shape: tuple, allow_float16: bool) -> np.ndarray:
    if grad is None:
        raise TypeError(f"the output gradient is required (the gradient of {out_name}, shape "
                        f"{tuple(out_shape)}); there is no default of ones")
    g = _f32("grad", grad, allow_float16)
    if tuple(g.shape) != tuple(out_shape):
        raise ValueError(f"grad has shape {tuple(g.shape)} but the forward output {out_name} "
                         f"has shape {tuple(out_shape)}")
    return g


def _scalar_grad(grad, out_name: str) -> float:
    """The output gradient of a binary64 loss: a float (shape (), e.g. a 0-d tensor)."""
    if grad is None:
        raise TypeError(f"the output gradient is required (the gradient of {out_name}, shape ()); "
                        "there is no default of ones")
    g = _numpy(grad)
    if g.shape != ():
        raise ValueError(f"grad has shape {tuple(g.shape)} but the forward output {out_name} "
                         "has shape ()")
    if g.dtype.kind not in "fiu":
        raise TypeError(f"grad has dtype {g.dtype}; expected a real number")
    return float(g)


def _pair(name: str, v) -> tuple[int, int]:
    if isinstance(v, (int, np.integer)):
        return int(v), int(v)
    v = tuple(int(i) for i in v)
    if len(v) != 2:
        raise ValueError(f"{name} must be an int or a pair (rows, columns), got {v}")
    return v
