"""The Python API's results: named tensors with both references and their allowances
(harness/api, docs/python-api.md)."""
from __future__ import annotations

import numpy as np
from .. import tolerances as _tolerances
from ..compare import Comparison
from ..compare import compare as _compare
from ..compare import within as _within

from .inputs import _numpy

TIERS = ("float64", "exact")


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
    r.tolerance              (one tensor) its allowance: .atol (the error model's Atol per
                             element plus the table's atol), .rtol, .reason (harness/tolerances)
    r.atol, r.rtol           (one tensor) that Atol array and Rtol
    r.tolerances             {name: allowance} for every tensor (None where the table has none)
    r.covers(t, tier=)       (one tensor) bool array: is each element within its allowance?
    r.usage(t, tier=)        (one tensor) the gate's usage: max |t - ref| / allowance
                             (exact tier: the max ulp distance; 0 means identical bits)
    r.compare(t, tier=)      (one tensor) the gate's whole crnn_conformance.harness.compare.Comparison
    r.backward(grad)         (a forward result) the gradients from the output gradient
    """

    def __init__(self, op: str, layer: str, exact: dict, float64: dict, table_names: dict,
                 backward=None, allowances=None):
        self._op = op
        self._layer = layer
        self._exact = {k: np.asarray(v, order="C") for k, v in exact.items()}
        self._float64 = {k: np.asarray(v, order="C") for k, v in float64.items()}
        self._table = dict(table_names)
        self._backward = backward
        # the error model's per-element Atol of each tensor (harness/allowance), as the gate
        # computes it on the same inputs; None for integer tensors (compared by equality)
        self._allow = {k: (None if allowances is None else allowances.get(k)) for k in self._exact}

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

    def __getitem__(self, name: str) -> Result:
        k = _resolve(self._exact, name)
        if len(self._exact) == 1:
            return self
        return Result(self._op, self._layer, {k: self._exact[k]}, {k: self._float64[k]},
                      {k: self._table[k]}, allowances={k: self._allow[k]})

    def __getattr__(self, name: str) -> Result:
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
    def _tolerance_of(self, k):
        return _tolerances.elementwise(_tolerances.lookup(self._layer, self._table[k]),
                                       self._allow[k])

    @property
    def tolerances(self) -> dict:
        out = {}
        for k in self._table:
            try:
                out[k] = self._tolerance_of(k)
            except KeyError:
                out[k] = None
        return out

    @property
    def tolerance(self):
        return self._tolerance_of(self._one("tolerance"))

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
                tol = self._tolerance_of(name)
            except KeyError:
                raise LookupError(f"harness/tolerances.toml has no entry for {self._layer}."
                                  f"{self._table[name]} (the tensor {name}), so the float64 tier "
                                  "cannot judge it; tier='exact' still can") from None
            atol, rtol = tol.atol, tol.rtol
        return ours, ref, atol, rtol

    def covers(self, t, tier: str = "float64") -> np.ndarray:
        """Per element of `t` (a NumPy array or a torch tensor of this tensor's shape): True
        where it is within the allowance of `tier` (float64: Atol + Rtol*|float64 reference|,
        Atol per element; exact: the same bits as the spec). The gate's own element test
        (compare.within)."""
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
    def backward(self, grad, **kw) -> Result:
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
