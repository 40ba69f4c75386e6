"""The Python API's layers: linear, conv_block, lstm_layer, ctc, adamw_step (harness/api,
docs/python-api.md). Each computes both references and the error model's allowances with the
functions the gate uses (harness/allowance), on the same float32 inputs."""
from __future__ import annotations

import warnings
from types import SimpleNamespace

import numpy as np
from ...generators import model as _model
from ...generators import torch_layout as _layout
from ...generators.geometry import conv_size
from ...generators.float64 import adamw as _adamw64
from ...generators.float64 import conv as _conv64
from ...generators.float64 import ctc as _ctc64
from ...generators.float64 import linear as _linear64
from ...generators.float64 import lstm as _lstm64
from ...generators.spec import adamw as _adamw32
from ...generators.spec import conv as _conv32
from ...generators.spec import ctc as _ctc32
from ...generators.spec import linear as _linear32
from ...generators.spec import lstm as _lstm32
from ..allowance import adamw as _m_adamw
from ..allowance import conv as _m_conv
from ..allowance import ctc as _m_ctc
from ..allowance import linear as _m_linear
from ..allowance import lstm as _m_lstm
from ..allowance import params as _params
from ..allowance.errors import Err

from .inputs import _f32, _grad, _labels, _numpy, _pair, _scalar_grad, _shape
from .result import Result, _gradient_names, _Op


def _exact(*arrays):
    """The inputs as the error model takes them: exact binary32 values."""
    return tuple(Err.exact(np.asarray(a, np.float64)) for a in arrays)


def _atol(e: Err) -> np.ndarray:
    """The model's per-element Atol of an Err (what the gate's allowance module stores)."""
    return np.asarray(e.allowance(_params.lam()), np.float64)


def _ctc_errors(z, t, scale) -> dict:
    """The ctc layer's model on one line, as the gate runs it (harness/allowance/ctc.py)."""
    case = SimpleNamespace(inputs={"logits": z, "target": t, "scale": np.array([scale])})
    return _m_ctc.case_errors(case)


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
        _, I = x.shape
        if W.ndim != 2:
            raise ValueError(f"W has shape {tuple(W.shape)}, expected (O, {I})")
        _shape("W", W, (W.shape[0], I), "W[O][I]")
        _shape("b", b, (W.shape[0],), "b[O]")
        return x, W, b

    def __call__(self, x, W, b, *, allow_float16: bool = False) -> Result:
        x, W, b = self._inputs(x, W, b, allow_float16)
        y32 = _linear32.forward(x, W, b)
        y64 = _linear64.forward(x.astype(np.float64), W.astype(np.float64), b.astype(np.float64))
        allow = {"y": _atol(_m_linear.forward(*_exact(x, W, b)))}
        return Result(self.name, self.layer, {"y": y32}, {"y": y64}, {"y": "y"},
                      backward=lambda grad, **kw: self._backward(x, W, grad, y32.shape, **kw),
                      allowances=allow)

    def backward(self, x, W, b, grad, *, allow_float16: bool = False) -> Result:
        x, W, b = self._inputs(x, W, b, allow_float16)
        return self._backward(x, W, grad, (x.shape[0], W.shape[0]), allow_float16=allow_float16)

    def _backward(self, x, W, grad, y_shape, allow_float16=False):
        dY = _grad(grad, "y", y_shape, allow_float16)
        dx, dW, db = _linear32.backward(x, W, dY)
        dx64, dW64, db64 = _linear64.backward(x.astype(np.float64), W.astype(np.float64),
                                              dY.astype(np.float64))
        e = _m_linear.backward(*_exact(x, W, dY))
        allow = dict(zip(("grad_x", "grad_W", "grad_b"), map(_atol, e)))
        return Result(self.name, self.layer, {"grad_x": dx, "grad_W": dW, "grad_b": db},
                      {"grad_x": dx64, "grad_W": dW64, "grad_b": db64},
                      _gradient_names(("x", "W", "b")), allowances=allow)


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
    return _layout.conv_weight_from_torch(W)


def to_torch_conv_weight(W, C: int, kh: int, kw: int) -> np.ndarray:
    """The inverse of from_torch_conv_weight: [Out][KPadded] -> [Out][C][kh][kw] (the padding
    columns dropped)."""
    W = _numpy(W)
    K = kh * kw * C
    if W.ndim != 2 or W.shape[1] < K:
        raise ValueError(f"W has shape {tuple(W.shape)}, expected (Out, >= {K})")
    return _layout.conv_weight_to_torch(W, C, kh, kw)


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
        Hc, Wc = conv_size(H, Wd, kh, kw, padH, padW)
        if Hc < 1 or Wc < 1 or Hc // poolH < 1 or Wc // poolW < 1:
            raise ValueError(f"x of {H}x{Wd} with kernel {kh}x{kw}, pad {padH}x{padW} and pool "
                             f"{poolH}x{poolW} leaves no pool window")
        layout = (C, kh, kw) if torch_layout else None
        return x, Wf, b, geo, layout

    def _forward(self, x, W, b, geo):
        c32, p32, w32 = _conv32.forward(x, W, b, *geo)
        c64, p64, w64 = _conv64.forward(x.astype(np.float64), W.astype(np.float64),
                                        b.astype(np.float64), *geo)
        xe, We, be = _exact(x[:, :, None] if x.ndim == 2 else x, W, b)
        model = _m_conv.forward(xe, We, be, *geo)                # (col, conv, pooled, decisions)
        return (c32, p32, w32), (c64, p64, w64), model

    def __call__(self, x, W, b, *, pool=None, kernel=None, pad=(1, 1),
                 allow_float16: bool = False) -> Result:
        x, W, b, geo, layout = self._inputs(x, W, b, kernel, pad, pool, allow_float16)
        fwd = self._forward(x, W, b, geo)
        (c32, p32, w32), (c64, p64, w64), (_, conv_e, pooled_e, _) = fwd
        names = ("conv", "pooled", "winners")
        return Result(self.name, self.layer, dict(zip(names, (c32, p32, w32))),
                      dict(zip(names, (c64, p64, w64))), {n: n for n in names},
                      backward=lambda grad, **kw: self._backward(x, W, geo, layout, fwd, grad, **kw),
                      allowances={"conv": _atol(conv_e), "pooled": _atol(pooled_e)})

    def backward(self, x, W, b, grad, *, pool=None, kernel=None, pad=(1, 1),
                 allow_float16: bool = False) -> Result:
        x, W, b, geo, layout = self._inputs(x, W, b, kernel, pad, pool, allow_float16)
        return self._backward(x, W, geo, layout, self._forward(x, W, b, geo), grad,
                              allow_float16=allow_float16)

    def _backward(self, x, W, geo, layout, fwd, grad, allow_float16=False):
        (_, p32, w32), (_, _, w64), (col, _, _, dec) = fwd
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
        xe, We, dPe = _exact(x[:, :, None] if x.ndim == 2 else x, W, dP)
        eW, eb, ex = _m_conv.backward(xe, col, We, dec, dPe, *geo[:4], want_dx=True)
        aW, ax = _atol(eW), _atol(ex).reshape(x.shape)
        if layout is not None:
            dW, dW64 = to_torch_conv_weight(dW, *layout), to_torch_conv_weight(dW64, *layout)
            aW = to_torch_conv_weight(aW, *layout)
        return Result(self.name, self.layer, {"grad_x": dx, "grad_W": dW, "grad_b": db},
                      {"grad_x": dx64, "grad_W": dW64, "grad_b": db64},
                      _gradient_names(("x", "W", "b")),
                      allowances={"grad_x": ax, "grad_W": aW, "grad_b": _atol(eb)})


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
        _, I = x.shape
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
        return s, r, _m_lstm.forward(*_exact(x, W_ih, W_hh, b))

    def __call__(self, x, W_ih, W_hh, b, *, allow_float16: bool = False) -> Result:
        x, W_ih, W_hh, b = self._inputs(x, W_ih, W_hh, b, allow_float16)
        s, r, m = fwd = self._forward(x, W_ih, W_hh, b)
        names = ("out", "gates", "c", "tc", "hPrev")
        return Result(self.name, self.layer, {n: s[n] for n in names}, {n: r[n] for n in names},
                      {n: n for n in names},
                      backward=lambda grad, **kw: self._backward(x, W_ih, W_hh, fwd, grad, **kw),
                      allowances={n: _atol(m[n]) for n in names})

    def backward(self, x, W_ih, W_hh, b, grad, *, allow_float16: bool = False) -> Result:
        x, W_ih, W_hh, b = self._inputs(x, W_ih, W_hh, b, allow_float16)
        return self._backward(x, W_ih, W_hh, self._forward(x, W_ih, W_hh, b), grad,
                              allow_float16=allow_float16)

    def _backward(self, x, W_ih, W_hh, fwd, grad, allow_float16=False):
        s, r, m = fwd
        dOut = _grad(grad, "out", s["out"].shape, allow_float16)
        g32 = _lstm32.backward(x, W_ih, W_hh, s, dOut)
        g64 = _lstm64.backward(x.astype(np.float64), W_ih.astype(np.float64),
                               W_hh.astype(np.float64), r, dOut.astype(np.float64))
        keys = {"grad_x": "dx", "grad_W_ih": "dW_ih", "grad_W_hh": "dW_hh", "grad_b": "db"}
        xe, Wi, Wh, dO = _exact(x, W_ih, W_hh, dOut)
        e = _m_lstm.backward(xe, Wi, Wh, m, dO)
        return Result(self.name, self.layer, {k: g32[v] for k, v in keys.items()},
                      {k: g64[v] for k, v in keys.items()}, keys,
                      allowances={k: _atol(e[v]) for k, v in keys.items()})


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
        e = _ctc_errors(z, t, 1.0)
        return Result(self.name, self.layer, {"loss": np.array(loss32, np.float64)},
                      {"loss": np.array(loss64, np.float64)}, {"loss": "loss"},
                      backward=lambda grad, **kw: self._backward(z, t, grad),
                      allowances={"loss": _atol(e["loss"]).reshape(())})

    def backward(self, logits, target, grad, *, allow_float16: bool = False) -> Result:
        z, t = self._inputs(logits, target, allow_float16)
        return self._backward(z, t, grad)

    def _backward(self, z, t, grad):
        scale = _scalar_grad(grad, "loss")
        _, d32 = _ctc32.ctc(z, t, scale)
        _, d64 = _ctc64.ctc(z.astype(np.float64), t, scale)
        e = _ctc_errors(z, t, scale)
        return Result(self.name, self.layer, {"grad_logits": d32},
                      {"grad_logits": np.asarray(d64, np.float64)},
                      _gradient_names(("logits",)), allowances={"grad_logits": _atol(e["dlogits"])})


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
        e = _m_adamw.step(*_exact(p, m, v, g), lr, beta1, beta2, eps, wd, bool(decay), b1t, b2t)
        return Result(self.name, self.layer, dict(zip(names, s)),
                      {n: np.asarray(a, np.float64) for n, a in zip(names, r)},
                      {n: n for n in names}, allowances=dict(zip(names, map(_atol, e))))

    def backward(self, *args, **kw):
        raise TypeError("adamw_step is an optimizer update, not a differentiable layer: it has "
                        "no backward")


adamw_step = _AdamWStep()
