"""The references as a Python API: check a tensor of any port (NumPy, JAX, PyTorch, ...) from a
prompt or a test suite. docs/python-api.md is the guide; in short:

    from crnn_conformance.harness.api import conv_block
    r = conv_block(x, W, b, pool=(2, 2))       # forward: a result with conv, pooled, winners
    r["pooled"].covers(t)                       # bool per element: within the float64 allowance
    g = r.backward(grad)                        # the gradients, named grad_x, grad_W, grad_b
    g = conv_block.backward(x, W, b, grad, pool=(2, 2))   # the same, standalone
    g["grad_W"].usage(t, tier="exact")          # the gate's usage (exact tier: max ulp distance)

Every tensor of a result carries both references, `.exact` (the executable spec's bits,
generators/spec) and `.float64` (generators/float64), and the tolerance table's entry for its
tensor (harness/tolerances.toml). covers(), usage() and compare() judge a candidate with the
gate's own code (crnn_conformance.harness.compare.within and crnn_conformance.harness.compare.compare), so they agree element for
element with what the gate reports for the same tensors.

Dtype rules (no silent casts): every floating input becomes float32 first, and both references
compute on those float32 values (the spec as they are, the float64 reference widened exactly).
float32 inputs are taken as they are; float64 and integer inputs only when every value is a
float32 number (otherwise ValueError: round them yourself); float16 inputs only with
allow_float16=True (widened exactly; otherwise TypeError). No broadcasting: every input and
output gradient must have exactly its layout's shape (docs/architecture.md).
"""
from __future__ import annotations

import warnings

import numpy as np

from crnn_conformance.generators import model as _model
from crnn_conformance.generators.float64 import adamw as _adamw64
from crnn_conformance.generators.float64 import conv as _conv64
from crnn_conformance.generators.float64 import ctc as _ctc64
from crnn_conformance.generators.float64 import linear as _linear64
from crnn_conformance.generators.float64 import lstm as _lstm64
from crnn_conformance.generators.spec import adamw as _adamw32
from crnn_conformance.generators.spec import conv as _conv32
from crnn_conformance.generators.spec import ctc as _ctc32
from crnn_conformance.generators.spec import linear as _linear32
from crnn_conformance.generators.spec import lstm as _lstm32
from crnn_conformance.harness import tolerances as _tolerances
from crnn_conformance.harness.compare import Comparison
from crnn_conformance.harness.compare import compare as _compare
from crnn_conformance.harness.compare import within as _within

__all__ = ["linear", "conv_block", "lstm_layer", "ctc", "adamw_step", "model_step", "Result",
           "Tensors", "from_torch_conv_weight", "to_torch_conv_weight", "TIERS"]

TIERS = ("float64", "exact")


# ---------------------------------------------------------------------------------------------
# inputs


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


# ---------------------------------------------------------------------------------------------
# results


class Tensors:
    """Named arrays, by attribute (t.conv) or by key (t["conv"]); iterates over the names.
    A name with dots (a model parameter, "conv0.W") is also reachable with underscores."""

    def __init__(self, arrays: dict):
        object.__setattr__(self, "_arrays", dict(arrays))

    def __getitem__(self, name):
        return self._arrays[_resolve(self._arrays, name)]

    def __getattr__(self, name):
        try:
            return self._arrays[_resolve(self._arrays, name)]
        except KeyError:
            raise AttributeError(name) from None

    def __iter__(self):
        return iter(self._arrays)

    def __len__(self):
        return len(self._arrays)

    def __contains__(self, name):
        return _resolve(self._arrays, name, strict=False) is not None

    def keys(self):
        return self._arrays.keys()

    def items(self):
        return self._arrays.items()

    def __repr__(self):
        return "Tensors(" + ", ".join(f"{k}: {_describe(v)}" for k, v in self._arrays.items()) + ")"


def _resolve(d: dict, name: str, strict: bool = True):
    if name in d:
        return name
    for k in d:
        if k.replace(".", "_") == name:
            return k
    if strict:
        raise KeyError(f"no tensor {name!r}; this result holds {', '.join(d)}")
    return None


def _describe(a) -> str:
    a = np.asarray(a)
    return f"{a.dtype}{list(a.shape)}"


class Result:
    """The output of a forward or a backward: named tensors, each with both references.

    r.names                  the tensor names, in order
    r["pooled"], r.pooled    a result holding just that tensor (gradients: g["grad_W"])
    r.exact, r.float64       the spec's float32 bits and the float64 reference: an array for a
                             one-tensor result, a Tensors (by attribute or key) otherwise
    r.tolerance              (one tensor) the tolerance table's entry: .atol, .rtol, .reason
    r.atol, r.rtol           (one tensor) its Atol and Rtol
    r.tolerances             {name: entry} for every tensor (None where the table has none)
    r.covers(t, tier=)       (one tensor) bool array: is each element within its allowance?
    r.usage(t, tier=)        (one tensor) the gate's usage: max |t - ref| / allowance
                             (exact tier: the max ulp distance; 0 means identical bits)
    r.compare(t, tier=)      (one tensor) the gate's whole crnn_conformance.harness.compare.Comparison
    r.backward(grad)         (a forward result) the gradients from the output gradient
    """

    def __init__(self, op: str, layer: str, exact: dict, float64: dict, table_names: dict,
                 backward=None):
        self._op = op
        self._layer = layer
        self._exact = {k: np.asarray(v, order="C") for k, v in exact.items()}
        self._float64 = {k: np.asarray(v, order="C") for k, v in float64.items()}
        self._table = dict(table_names)
        self._backward = backward

    # ---- access
    @property
    def names(self) -> tuple:
        return tuple(self._exact)

    @property
    def layer(self) -> str:
        """The tolerance table's layer of these tensors."""
        return self._layer

    def _one(self, what: str) -> str:
        if len(self._exact) != 1:
            raise ValueError(f"{what} needs one tensor, and this {self._op} result holds "
                             f"{', '.join(self._exact)}: pick one, e.g. "
                             f"r[{next(iter(self._exact))!r}].{what}")
        return next(iter(self._exact))

    @property
    def exact(self):
        if len(self._exact) == 1:
            return next(iter(self._exact.values()))
        return Tensors(self._exact)

    @property
    def float64(self):
        if len(self._float64) == 1:
            return next(iter(self._float64.values()))
        return Tensors(self._float64)

    def __getitem__(self, name: str) -> "Result":
        k = _resolve(self._exact, name)
        if len(self._exact) == 1:
            return self
        return Result(self._op, self._layer, {k: self._exact[k]}, {k: self._float64[k]},
                      {k: self._table[k]})

    def __getattr__(self, name: str) -> "Result":
        if name.startswith("_"):
            raise AttributeError(name)
        if _resolve(self.__dict__.get("_exact", {}), name, strict=False) is None:
            raise AttributeError(f"{type(self).__name__} of {self.__dict__.get('_op')} has no "
                                 f"attribute or tensor {name!r}")
        return self[name]

    def __iter__(self):
        return iter(self.names)

    def __len__(self):
        return len(self._exact)

    def __contains__(self, name):
        return _resolve(self._exact, name, strict=False) is not None

    def __repr__(self):
        parts = ", ".join(f"{k}: {_describe(v)}" for k, v in self._exact.items())
        return f"<{self._op} result: {parts}>"

    # ---- tolerances
    @property
    def tolerances(self) -> dict:
        out = {}
        for k, t in self._table.items():
            try:
                out[k] = _tolerances.lookup(self._layer, t)
            except KeyError:
                out[k] = None
        return out

    @property
    def tolerance(self):
        name = self._one("tolerance")
        return _tolerances.lookup(self._layer, self._table[name])

    @property
    def atol(self) -> float:
        return self.tolerance.atol

    @property
    def rtol(self) -> float:
        return self.tolerance.rtol

    # ---- judging a candidate
    def _prepare(self, t, tier: str, what: str):
        name = self._one(what)
        if tier not in TIERS:
            raise ValueError(f"tier must be one of {TIERS}, got {tier!r} (the pytorch tier needs "
                             "a PyTorch reference, which only the fixtures hold)")
        ref = self._exact[name] if tier == "exact" else self._float64[name]
        ours = _numpy(t)
        if ours.shape != ref.shape:
            raise ValueError(f"the candidate has shape {tuple(ours.shape)} but {name} has shape "
                             f"{tuple(ref.shape)} (no broadcasting)")
        if tier == "exact" and ours.dtype.kind == "f" and ours.dtype != ref.dtype:
            raise TypeError(f"tier='exact' compares bits: the candidate is {ours.dtype} and {name}'s "
                            f"exact reference is {ref.dtype}; cast explicitly if that is meant")
        if ours.dtype.kind not in "fiu":
            raise TypeError(f"the candidate has dtype {ours.dtype}; expected real numbers")
        if tier == "exact" or ours.dtype.kind in "iu" or ref.dtype.kind in "iu":
            atol = rtol = 0.0
        else:
            try:
                tol = _tolerances.lookup(self._layer, self._table[name])
            except KeyError:
                raise LookupError(f"harness/tolerances.toml has no entry for {self._layer}."
                                  f"{self._table[name]} (the tensor {name}), so the float64 tier "
                                  "cannot judge it; tier='exact' still can") from None
            atol, rtol = tol.atol, tol.rtol
        return ours, ref, atol, rtol

    def covers(self, t, tier: str = "float64") -> np.ndarray:
        """Per element of `t` (a NumPy array or a torch tensor of this tensor's shape): True
        where it is within the allowance of `tier` (float64: Atol + Rtol*|float64 reference|;
        exact: the same bits as the spec). The gate's own element test (compare.within)."""
        ours, ref, atol, rtol = self._prepare(t, tier, "covers")
        return _within(ours, ref, tier, atol, rtol)

    def compare(self, t, tier: str = "float64") -> Comparison:
        """The gate's comparison of `t` with this tensor (usage, mismatches, worst element)."""
        ours, ref, atol, rtol = self._prepare(t, tier, "compare")
        return _compare(ours, ref, tier, atol, rtol)

    def usage(self, t, tier: str = "float64") -> float:
        """The gate's usage of `t`: max over elements of |t - ref| / allowance (<= 1 passes);
        in the exact tier the max distance in ulps (0: identical bits)."""
        return self.compare(t, tier).usage

    # ---- backward
    def backward(self, grad, **kw) -> "Result":
        if self._backward is None:
            raise TypeError(f"this {self._op} result has no backward"
                            + ("" if self._op != "adamw_step" else
                               ": adamw_step is an optimizer update, not a differentiable layer"))
        return self._backward(grad, **kw)


def _gradient_names(names, table=None) -> dict:
    """grad_<input> -> the table's tensor name (dW for grad_W, dlogits for grad_logits...)."""
    return {f"grad_{n}": (table or {}).get(n, f"d{n}") for n in names}


class _Op:
    """One layer: call it for the forward, .backward(inputs..., grad) for the gradients."""
    name = ""
    layer = ""

    def __repr__(self):
        return f"<crnn_conformance.harness.api.{self.name}>"


# ---------------------------------------------------------------------------------------------
# linear


class _Linear(_Op):
    """y = x Wᵀ + b, x[T][I], W[O][I], b[O] -> y[T][O]; gradients grad_x, grad_W, grad_b.

        r = linear(x, W, b)                  r.backward(grad)      (grad: dL/dy, [T][O])
        linear.backward(x, W, b, grad)
    """
    name, layer = "linear", "linear"

    def _inputs(self, x, W, b, allow_float16):
        x, W, b = (_f32(n, a, allow_float16) for n, a in (("x", x), ("W", W), ("b", b)))
        if x.ndim != 2:
            raise ValueError(f"x has shape {tuple(x.shape)}, expected (T, I)")
        T, I = x.shape
        if W.ndim != 2:
            raise ValueError(f"W has shape {tuple(W.shape)}, expected (O, {I})")
        _shape("W", W, (W.shape[0], I), "W[O][I]")
        _shape("b", b, (W.shape[0],), "b[O]")
        return x, W, b

    def __call__(self, x, W, b, *, allow_float16: bool = False) -> Result:
        x, W, b = self._inputs(x, W, b, allow_float16)
        y32 = _linear32.forward(x, W, b)
        y64 = _linear64.forward(x.astype(np.float64), W.astype(np.float64), b.astype(np.float64))
        return Result(self.name, self.layer, {"y": y32}, {"y": y64}, {"y": "y"},
                      backward=lambda grad, **kw: self._backward(x, W, grad, y32.shape, **kw))

    def backward(self, x, W, b, grad, *, allow_float16: bool = False) -> Result:
        x, W, b = self._inputs(x, W, b, allow_float16)
        return self._backward(x, W, grad, (x.shape[0], W.shape[0]), allow_float16=allow_float16)

    def _backward(self, x, W, grad, y_shape, allow_float16=False):
        dY = _grad(grad, "y", y_shape, allow_float16)
        dx, dW, db = _linear32.backward(x, W, dY)
        dx64, dW64, db64 = _linear64.backward(x.astype(np.float64), W.astype(np.float64),
                                              dY.astype(np.float64))
        return Result(self.name, self.layer, {"grad_x": dx, "grad_W": dW, "grad_b": db},
                      {"grad_x": dx64, "grad_W": dW64, "grad_b": db64},
                      _gradient_names(("x", "W", "b")))


linear = _Linear()


# ---------------------------------------------------------------------------------------------
# conv block


def from_torch_conv_weight(W) -> np.ndarray:
    """A PyTorch Conv2d weight [Out][C][kh][kw] -> this project's [Out][KPadded]:
    W[o][(ky*kw + kx)*C + c] = W_torch[o][c][ky][kx], then zero columns up to KPadded =
    kh*kw*C rounded up to a multiple of 16. Only moves values (no arithmetic, dtype kept)."""
    W = _numpy(W)
    if W.ndim != 4:
        raise ValueError(f"expected a [Out][C][kh][kw] weight, got shape {tuple(W.shape)}")
    Out, C, kh, kw = W.shape
    K = kh * kw * C
    out = np.zeros((Out, _model.kpadded(K)), W.dtype)
    out[:, :K] = W.transpose(0, 2, 3, 1).reshape(Out, K)
    return out


def to_torch_conv_weight(W, C: int, kh: int, kw: int) -> np.ndarray:
    """The inverse of from_torch_conv_weight: [Out][KPadded] -> [Out][C][kh][kw] (the padding
    columns dropped)."""
    W = _numpy(W)
    K = kh * kw * C
    if W.ndim != 2 or W.shape[1] < K:
        raise ValueError(f"W has shape {tuple(W.shape)}, expected (Out, >= {K})")
    return np.ascontiguousarray(W[:, :K].reshape(W.shape[0], kh, kw, C).transpose(0, 3, 1, 2))


class _ConvBlock(_Op):
    """Conv (stride 1) + ReLU + max pool, channels-last (docs/numerics.md, docs/backward.md).

        r = conv_block(x, W, b, pool=(2, 2))      -> conv[P][Out], pooled, winners [Hp][Wp][Out]
        r.backward(grad)                          grad: dL/dpooled, [Hp][Wp][Out]
        conv_block.backward(x, W, b, grad, pool=(2, 2))
                                                  -> grad_x [H][W][C], grad_W, grad_b [Out]

    x is [H][W][C] (or [H][W] for C = 1). W is [Out][KPadded] (KPadded = kh*kw*C rounded up to
    16), or a PyTorch [Out][C][kh][kw] weight, converted by from_torch_conv_weight; grad_W then
    comes back in that layout too. kernel defaults to (3, 3) (a PyTorch weight gives its own),
    pad to (1, 1): crnn-v0's blocks. The float64 gradients follow the float64 reference's own
    pool winners; a window whose winner differs from the spec's (a near-tie) is warned about.
    """
    name, layer = "conv_block", "conv"

    def _inputs(self, x, W, b, kernel, pad, pool, allow_float16):
        torch_layout = _numpy(W).ndim == 4
        x = _f32("x", x, allow_float16)
        if x.ndim not in (2, 3):
            raise ValueError(f"x has shape {tuple(x.shape)}, expected (H, W, C) or (H, W)")
        x3 = x[:, :, None] if x.ndim == 2 else x
        H, Wd, C = x3.shape
        Wf = _f32("W", W, allow_float16)
        if torch_layout:
            Out, Cw, kh, kw = Wf.shape
            if Cw != C:
                raise ValueError(f"W has shape {tuple(Wf.shape)} ([Out][C][kh][kw]) but x has "
                                 f"C = {C} channels")
            if kernel is not None and _pair("kernel", kernel) != (kh, kw):
                raise ValueError(f"kernel={tuple(_pair('kernel', kernel))} but W's kernel is "
                                 f"{(kh, kw)}")
            Wf = from_torch_conv_weight(Wf)
        else:
            kh, kw = _pair("kernel", (3, 3) if kernel is None else kernel)
            if Wf.ndim != 2:
                raise ValueError(f"W has shape {tuple(Wf.shape)}, expected [Out][KPadded] or "
                                 "[Out][C][kh][kw]")
            _shape("W", Wf, (Wf.shape[0], _model.kpadded(kh * kw * C)),
                   f"W[Out][KPadded], KPadded = {kh}*{kw}*{C} rounded up to 16")
        Out = Wf.shape[0]
        b = _f32("b", b, allow_float16)
        _shape("b", b, (Out,), "b[Out]")
        padH, padW = _pair("pad", pad)
        if pool is None:
            raise TypeError("pool=(rows, columns) is required (crnn-v0: (2, 2), (2, 2), (2, 1))")
        poolH, poolW = _pair("pool", pool)
        geo = (kh, kw, padH, padW, poolH, poolW)
        Hc, Wc = _conv32.conv_size(H, Wd, kh, kw, padH, padW)
        if Hc < 1 or Wc < 1 or Hc // poolH < 1 or Wc // poolW < 1:
            raise ValueError(f"x of {H}x{Wd} with kernel {kh}x{kw}, pad {padH}x{padW} and pool "
                             f"{poolH}x{poolW} leaves no pool window")
        layout = (C, kh, kw) if torch_layout else None
        return x, Wf, b, geo, layout

    def _forward(self, x, W, b, geo):
        c32, p32, w32 = _conv32.forward(x, W, b, *geo)
        c64, p64, w64 = _conv64.forward(x.astype(np.float64), W.astype(np.float64),
                                        b.astype(np.float64), *geo)
        return (c32, p32, w32), (c64, p64, w64)

    def __call__(self, x, W, b, *, pool=None, kernel=None, pad=(1, 1),
                 allow_float16: bool = False) -> Result:
        x, W, b, geo, layout = self._inputs(x, W, b, kernel, pad, pool, allow_float16)
        fwd = self._forward(x, W, b, geo)
        (c32, p32, w32), (c64, p64, w64) = fwd
        names = ("conv", "pooled", "winners")
        return Result(self.name, self.layer, dict(zip(names, (c32, p32, w32))),
                      dict(zip(names, (c64, p64, w64))), {n: n for n in names},
                      backward=lambda grad, **kw: self._backward(x, W, geo, layout, fwd, grad, **kw))

    def backward(self, x, W, b, grad, *, pool=None, kernel=None, pad=(1, 1),
                 allow_float16: bool = False) -> Result:
        x, W, b, geo, layout = self._inputs(x, W, b, kernel, pad, pool, allow_float16)
        return self._backward(x, W, geo, layout, self._forward(x, W, b, geo), grad,
                              allow_float16=allow_float16)

    def _backward(self, x, W, geo, layout, fwd, grad, allow_float16=False):
        (_, p32, w32), (_, _, w64) = fwd
        dP = _grad(grad, "pooled", p32.shape, allow_float16)
        flips = np.argwhere(w32 != w64)
        if len(flips):
            warnings.warn(f"{len(flips)} pool window(s) pick different winners in the spec and "
                          f"the float64 reference (near-ties), first {flips[0].tolist()}: the "
                          "float64 gradients follow the float64 winners", RuntimeWarning,
                          stacklevel=3)
        dW, db, dx = _conv32.backward(x, W, *geo, dP, w32, want_dx=True)
        dW64, db64, dx64 = _conv64.backward(x.astype(np.float64), W.astype(np.float64), *geo,
                                            dP.astype(np.float64), w64, want_dx=True)
        dx, dx64 = dx.reshape(x.shape), dx64.reshape(x.shape)
        if layout is not None:
            dW, dW64 = to_torch_conv_weight(dW, *layout), to_torch_conv_weight(dW64, *layout)
        return Result(self.name, self.layer, {"grad_x": dx, "grad_W": dW, "grad_b": db},
                      {"grad_x": dx64, "grad_W": dW64, "grad_b": db64},
                      _gradient_names(("x", "W", "b")))


conv_block = _ConvBlock()


# ---------------------------------------------------------------------------------------------
# LSTM layer


class _LSTMLayer(_Op):
    """One bidirectional LSTM layer (docs/architecture.md, docs/backward.md "LSTM layer").

        r = lstm_layer(x, W_ih, W_hh, b)      -> out[T][2H] and the saved gates, c, tc, hPrev
        r.backward(grad)                      grad: dL/dout, [T][2H]
        lstm_layer.backward(x, W_ih, W_hh, b, grad)
                                              -> grad_x, grad_W_ih, grad_W_hh, grad_b

    x[T][I], W_ih[2][4H][I], W_hh[2][4H][H], b[2][4H] (direction 0 forward, gate rows
    [i|f|g|o] as PyTorch's); b is the one bias (PyTorch's b_ih + b_hh), so grad_b is the
    gradient of either PyTorch bias.
    """
    name, layer = "lstm_layer", "lstm"

    def _inputs(self, x, W_ih, W_hh, b, allow_float16):
        x, W_ih, W_hh, b = (_f32(n, a, allow_float16) for n, a in
                            (("x", x), ("W_ih", W_ih), ("W_hh", W_hh), ("b", b)))
        if x.ndim != 2:
            raise ValueError(f"x has shape {tuple(x.shape)}, expected (T, I)")
        T, I = x.shape
        if W_hh.ndim != 3:
            raise ValueError(f"W_hh has shape {tuple(W_hh.shape)}, expected (2, 4H, H)")
        H = W_hh.shape[2]
        _shape("W_hh", W_hh, (2, 4 * H, H), "W_hh[2][4H][H]")
        _shape("W_ih", W_ih, (2, 4 * H, I), "W_ih[2][4H][I]")
        _shape("b", b, (2, 4 * H), "b[2][4H]")
        return x, W_ih, W_hh, b

    def _forward(self, x, W_ih, W_hh, b):
        s = _lstm32.forward(x, W_ih, W_hh, b)
        r = _lstm64.forward(*(a.astype(np.float64) for a in (x, W_ih, W_hh, b)))
        return s, r

    def __call__(self, x, W_ih, W_hh, b, *, allow_float16: bool = False) -> Result:
        x, W_ih, W_hh, b = self._inputs(x, W_ih, W_hh, b, allow_float16)
        s, r = self._forward(x, W_ih, W_hh, b)
        names = ("out", "gates", "c", "tc", "hPrev")
        return Result(self.name, self.layer, {n: s[n] for n in names}, {n: r[n] for n in names},
                      {n: n for n in names},
                      backward=lambda grad, **kw: self._backward(x, W_ih, W_hh, (s, r), grad, **kw))

    def backward(self, x, W_ih, W_hh, b, grad, *, allow_float16: bool = False) -> Result:
        x, W_ih, W_hh, b = self._inputs(x, W_ih, W_hh, b, allow_float16)
        return self._backward(x, W_ih, W_hh, self._forward(x, W_ih, W_hh, b), grad,
                              allow_float16=allow_float16)

    def _backward(self, x, W_ih, W_hh, fwd, grad, allow_float16=False):
        s, r = fwd
        dOut = _grad(grad, "out", s["out"].shape, allow_float16)
        g32 = _lstm32.backward(x, W_ih, W_hh, s, dOut)
        g64 = _lstm64.backward(x.astype(np.float64), W_ih.astype(np.float64),
                               W_hh.astype(np.float64), r, dOut.astype(np.float64))
        keys = {"grad_x": "dx", "grad_W_ih": "dW_ih", "grad_W_hh": "dW_hh", "grad_b": "db"}
        return Result(self.name, self.layer, {k: g32[v] for k, v in keys.items()},
                      {k: g64[v] for k, v in keys.items()}, keys)


lstm_layer = _LSTMLayer()


# ---------------------------------------------------------------------------------------------
# CTC


class _CTC(_Op):
    """CTC loss of one line, blank = 0 (docs/backward.md "CTC loss").

        r = ctc(logits, target)          -> loss (binary64, shape ())
        r.backward(grad)                 grad: dL/dloss, a number (the harness's `scale`)
        ctc.backward(logits, target, grad)  -> grad_logits[T][K]

    logits[T][K] float32 (finite), target: labels in 1..K-1. grad_logits is
    float32(grad * (softmax - occupancy)) rounded once from binary64, exactly the spec's
    dlogits with scale = grad. A line with no alignment has loss +inf and a zero gradient.
    """
    name, layer = "ctc", "ctc"

    def _inputs(self, logits, target, allow_float16):
        z = _f32("logits", logits, allow_float16)
        if z.ndim != 2:
            raise ValueError(f"logits has shape {tuple(z.shape)}, expected (T, K)")
        t = _labels("target", target)
        if np.any((t < 1) | (t >= z.shape[1])):
            raise ValueError(f"target labels must lie in 1..{z.shape[1] - 1} (blank = 0)")
        if not np.all(np.isfinite(z)):
            raise ValueError("logits must be finite")
        return z, t

    def __call__(self, logits, target, *, allow_float16: bool = False) -> Result:
        z, t = self._inputs(logits, target, allow_float16)
        loss32, _ = _ctc32.ctc(z, t, 1.0)
        loss64, _ = _ctc64.ctc(z.astype(np.float64), t, 1.0)
        return Result(self.name, self.layer, {"loss": np.array(loss32, np.float64)},
                      {"loss": np.array(loss64, np.float64)}, {"loss": "loss"},
                      backward=lambda grad, **kw: self._backward(z, t, grad))

    def backward(self, logits, target, grad, *, allow_float16: bool = False) -> Result:
        z, t = self._inputs(logits, target, allow_float16)
        return self._backward(z, t, grad)

    def _backward(self, z, t, grad):
        scale = _scalar_grad(grad, "loss")
        _, d32 = _ctc32.ctc(z, t, scale)
        _, d64 = _ctc64.ctc(z.astype(np.float64), t, scale)
        return Result(self.name, self.layer, {"grad_logits": d32},
                      {"grad_logits": np.asarray(d64, np.float64)},
                      _gradient_names(("logits",)))


ctc = _CTC()


# ---------------------------------------------------------------------------------------------
# AdamW


class _AdamWStep(_Op):
    """One AdamW step on one tensor (docs/backward.md "AdamW"):

        r = adamw_step(p, m, v, g, t=1, lr=1e-3, beta1=0.9, beta2=0.999, eps=1e-8, wd=0.01,
                       decay=True)        -> p, m, v after step t (t counts from 1)

    m and v are the moments before the step (zeros before the first). The spec's bias
    corrections use beta^t as the harness keeps it: 1.0 multiplied by beta t times in binary64.
    Both references start from the same float32 p, m, v. An optimizer update has no backward.
    The table's Atol/Rtol were derived for three steps from zero moments (the fixture).
    """
    name, layer = "adamw_step", "adamw"

    def __call__(self, p, m, v, g, *, t: int = 1, lr: float = 1e-3, beta1: float = 0.9,
                 beta2: float = 0.999, eps: float = 1e-8, wd: float = 0.01, decay: bool = True,
                 allow_float16: bool = False) -> Result:
        p, m, v, g = (_f32(n, a, allow_float16) for n, a in (("p", p), ("m", m), ("v", v), ("g", g)))
        for n, a in (("m", m), ("v", v), ("g", g)):
            _shape(n, a, p.shape, "the shape of p")
        t = int(t)
        if t < 1:
            raise ValueError(f"t counts steps from 1, got {t}")
        b1t = b2t = 1.0
        for _ in range(t):
            b1t, b2t = b1t * beta1, b2t * beta2
        s = _adamw32.step(p, m, v, g, lr, beta1, beta2, eps, wd, bool(decay), b1t, b2t)
        r = _adamw64.step(p.astype(np.float64), m.astype(np.float64), v.astype(np.float64),
                          g.astype(np.float64), t, lr, beta1, beta2, eps, wd, bool(decay))
        names = ("p", "m", "v")
        return Result(self.name, self.layer, dict(zip(names, s)),
                      {n: np.asarray(a, np.float64) for n, a in zip(names, r)},
                      {n: n for n in names})

    def backward(self, *args, **kw):
        raise TypeError("adamw_step is an optimizer update, not a differentiable layer: it has "
                        "no backward")


adamw_step = _AdamWStep()


# ---------------------------------------------------------------------------------------------
# whole model


class _ModelStep(_Op):
    """The whole model's batch loss and gradient (docs/backward.md "Batch gradient, clipping").

        r = model_step(params, images, targets, config=None)   -> losses[B], batch_loss
        r.backward(grad)                                        grad: dL/dbatch_loss, a number
        model_step.backward(params, images, targets, grad, config=None)
                                        -> grad_<name> per parameter (grad_conv0.W, also
                                           reachable as grad_conv0_W), in parameter order

    params: {name: array} as crnn_conformance.generators.model.param_specs(config) names and shapes them
    (config defaults to crnn-v0); images: one [H][W] or [H][W][C] array per line; targets:
    one label sequence per line. With grad = 1 the gradient is the spec's batch gradient bit
    for bit (each line's CTC scale 1/B); another grad scales each line by grad/B (binary64).
    """
    name, layer = "model_step", "step"

    def _inputs(self, params, images, targets, config, allow_float16):
        config = _model.default_config() if config is None else config
        specs = _model.param_specs(config)
        missing = [s.name for s in specs if s.name not in params]
        if missing:
            raise ValueError(f"params lacks {', '.join(missing)} (crnn_conformance.generators.model.param_specs)")
        P = {}
        for s in specs:
            a = _f32(s.name, params[s.name], allow_float16)
            _shape(s.name, a, s.shape, "crnn_conformance.generators.model.param_specs")
            P[s.name] = a
        images = [_f32(f"images[{i}]", im, allow_float16) for i, im in enumerate(images)]
        targets = [_labels(f"targets[{i}]", t) for i, t in enumerate(targets)]
        if not images or len(images) != len(targets):
            raise ValueError("need one target per image and at least one line")
        return config, P, images, targets

    def __call__(self, params, images, targets, *, config=None,
                 allow_float16: bool = False) -> Result:
        from crnn_conformance.generators.spec import ctc as ctc32
        from crnn_conformance.generators.spec import step as step32
        config, P, images, targets = self._inputs(params, images, targets, config, allow_float16)
        states = [step32.line_forward(config, P, im) for im in images]
        losses = np.array([ctc32.ctc(st["logits"], t, 1.0)[0] for st, t in zip(states, targets)])
        # the float64 losses: the float64 step at scale 1 (its gradient is not used here)
        l64 = np.array([_step64_line(config, P, im, t, 1.0)[0] for im, t in zip(images, targets)])
        return Result(self.name, self.layer,
                      {"losses": losses, "batch_loss": _batch_loss32(losses)},
                      {"losses": l64, "batch_loss": _batch_loss64(l64)},
                      {"losses": "losses", "batch_loss": "batch_loss"},
                      backward=lambda grad, **kw: self._backward(config, P, images, targets,
                                                                 states, grad))

    def backward(self, params, images, targets, grad, *, config=None,
                 allow_float16: bool = False) -> Result:
        config, P, images, targets = self._inputs(params, images, targets, config, allow_float16)
        return self._backward(config, P, images, targets, None, grad)

    def _backward(self, config, P, images, targets, states, grad):
        from crnn_conformance.generators.spec import ctc as ctc32
        from crnn_conformance.generators.spec import step as step32
        g = _scalar_grad(grad, "batch_loss")
        B = len(images)
        scale = g / B       # 1/B at grad = 1, as the spec's batch_gradient
        names = [s.name for s in _model.param_specs(config)]
        total = None
        total64 = {n: np.zeros(P[n].shape) for n in names}
        for n_line, (im, t) in enumerate(zip(images, targets)):
            # the spec's line_forward_backward, with the forward reused when the result has it
            st = states[n_line] if states is not None else step32.line_forward(config, P, im)
            loss, dlogits = ctc32.ctc(st["logits"], t, scale)
            gl = (step32.zero_grads(config) if not np.isfinite(loss)
                  else step32.line_backward(config, P, st, dlogits))
            total = gl if total is None else {k: total[k] + gl[k] for k in total}
            _, g64 = _step64_line(config, P, im, t, scale)
            for k in names:
                total64[k] = total64[k] + g64[k]
        table = {n: n for n in names}
        return Result(self.name, self.layer, {f"grad_{n}": total[n] for n in names},
                      {f"grad_{n}": total64[n] for n in names}, _gradient_names(names, table))


def _step64_line(config, P, image, target, scale):
    from crnn_conformance.generators.float64 import step as step64
    P64 = {k: v.astype(np.float64) for k, v in P.items()}
    return step64.line_forward_backward(config, P64, image.astype(np.float64), target, scale)


def _batch_loss32(losses) -> np.ndarray:
    """As the spec: the binary64 sum of the finite losses in line order, divided by B."""
    total = 0.0
    for loss in losses:
        if np.isfinite(loss):
            total = total + float(loss)
    return np.array(total / len(losses), np.float64)


def _batch_loss64(losses) -> np.ndarray:
    return np.array(float(np.sum(losses[np.isfinite(losses)])) / len(losses), np.float64)


model_step = _ModelStep()
