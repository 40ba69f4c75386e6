"""The port's side: its whole training step, and its layer entry points one by one."""
from __future__ import annotations

import numpy as np
from ...ctypes_kernels import abi
from ...generators import model

from .inputs import ADAMW, CLIP_LIMIT, Inputs


def _p(a):
    return a.ctypes.data


class OursStep:
    """The port's training step on fixed inputs; call() runs one step (weights change)."""

    def __init__(self, lib, inp: Inputs):
        self.lib = lib
        cfg = inp.config
        self.cfg = model.cfg_array(cfg)
        self.flat = model.flatten(cfg, inp.params)
        specs = model.param_specs(cfg)
        self.sizes = np.array([int(np.prod(s.shape)) for s in specs], np.int64)
        self.offs = np.concatenate([[0], np.cumsum(self.sizes)]).astype(np.int64)
        self.decay = [1 if s.decay else 0 for s in specs]
        self.widths = np.array([im.shape[1] for im in inp.images], np.int32)
        self.images = np.ascontiguousarray(np.concatenate([im.ravel() for im in inp.images]),
                                           np.float32)
        self.lens = np.array([len(t) for t in inp.targets], np.int32)
        self.tg = np.ascontiguousarray(np.concatenate(inp.targets), np.int32)
        self.B = inp.batch
        self.grads = np.zeros_like(self.flat)
        self.m = np.zeros_like(self.flat)
        self.v = np.zeros_like(self.flat)
        self.losses = np.zeros(self.B)
        self.bl = np.zeros(1)
        self.norm = np.zeros(1)
        self.b1t = self.b2t = 1.0

        # every call's arguments built once (the step itself is what is timed, not ctypes)
        a = ADAMW
        self._step = lib.crnn_step_gradients
        self._step_args = (_p(self.cfg), _p(self.flat), self.B, _p(self.widths), _p(self.images),
                           _p(self.lens), _p(self.tg), _p(self.grads), _p(self.losses), _p(self.bl))
        self._clip = lib.crnn_clip_gradients
        self._clip_args = (_p(self.grads), _p(self.sizes), len(self.sizes), CLIP_LIMIT, 1,
                           _p(self.norm))
        self._adamw = lib.crnn_adamw
        f = self.flat.itemsize
        self._adamw_args = [(_p(self.flat) + int(o) * f, _p(self.m) + int(o) * f,
                             _p(self.v) + int(o) * f, _p(self.grads) + int(o) * f, int(n),
                             a["lr"], a["beta1"], a["beta2"], a["eps"], a["wd"], d)
                            for o, n, d in zip(self.offs, self.sizes, self.decay)]

    def __call__(self):
        a = ADAMW
        abi.check(self._step(*self._step_args), "crnn_step_gradients")
        abi.check(self._clip(*self._clip_args), "crnn_clip_gradients")
        self.b1t *= a["beta1"]
        self.b2t *= a["beta2"]
        adamw, b1t, b2t = self._adamw, self.b1t, self.b2t
        for args in self._adamw_args:
            rc = adamw(*args, b1t, b2t)
            if rc:
                abi.check(rc, "crnn_adamw")


def layer_calls(lib, inp: Inputs) -> dict:
    """One line (the batch's first) through the port's layer entry points, keeping every
    intermediate; returns {label: zero-argument callable} for each entry point (the callables
    hold the buffers they point into)."""
    cfg, prm = inp.config, inp.params
    geo = model.block_geometry(cfg, inp.images[0].shape[1])
    f32 = lambda *s: np.zeros(s, np.float32)
    calls, x = {}, np.ascontiguousarray(inp.images[0], np.float32)
    saved = []
    for n, g in enumerate(geo):
        P = g["Hc"] * g["Wc"]
        conv, pooled = f32(P, g["out"]), f32(g["Hp"], g["Wp"], g["out"])
        win = np.zeros((g["Hp"], g["Wp"], g["out"]), np.int32)
        W, b = prm[f"conv{n}.W"], prm[f"conv{n}.b"]
        args = (_p(x), g["H"], g["W"], g["C"], _p(W), _p(b), g["out"], g["kh"], g["kw"],
                g["padH"], g["padW"], g["poolH"], g["poolW"], _p(conv), _p(pooled), _p(win))
        calls[f"conv{n} fwd"] = (lambda a=args: lib.crnn_conv_forward(*a))
        abi.check(lib.crnn_conv_forward(*args), "crnn_conv_forward")
        saved.append((x, conv, pooled, win))
        x = pooled
    Hp, T, C = x.shape
    seq = np.ascontiguousarray(x.transpose(1, 0, 2).reshape(T, Hp * C))
    H = cfg["hidden"]
    lstm_saved, inp_l = [], seq
    for layer in range(cfg["lstm_layers"]):
        I = inp_l.shape[1]
        Wih = np.ascontiguousarray(np.stack([prm[f"lstm{layer}.fwd.W_ih"], prm[f"lstm{layer}.rev.W_ih"]]))
        Whh = np.ascontiguousarray(np.stack([prm[f"lstm{layer}.fwd.W_hh"], prm[f"lstm{layer}.rev.W_hh"]]))
        bb = np.ascontiguousarray(np.stack([prm[f"lstm{layer}.fwd.b"], prm[f"lstm{layer}.rev.b"]]))
        out, gates = f32(T, 2 * H), f32(2, T, 4 * H)
        c, tc, hp = f32(2, T, H), f32(2, T, H), f32(2, T, H)
        args = (_p(inp_l), T, I, H, _p(Wih), _p(Whh), _p(bb), _p(out), _p(gates), _p(c), _p(tc), _p(hp))
        # the callable holds bb: nothing else does (freed, its memory was read by every
        # timed call: AddressSanitizer found it, and it made a timed ctc fail once in ~10 runs)
        calls[f"lstm{layer} fwd"] = (lambda a=args, k=bb: lib.crnn_lstm_forward(*a))
        abi.check(lib.crnn_lstm_forward(*args), "crnn_lstm_forward")
        lstm_saved.append((inp_l, Wih, Whh, gates, c, tc, hp, out))
        inp_l = out
    K = cfg["classes"]
    logits = f32(T, K)
    args = (_p(inp_l), _p(prm["fc.W"]), _p(prm["fc.b"]), T, 2 * H, K, _p(logits))
    calls["linear fwd"] = (lambda a=args: lib.crnn_linear_forward(*a))
    abi.check(lib.crnn_linear_forward(*args), "crnn_linear_forward")
    dlog, loss = f32(T, K), np.zeros(1)
    tg = inp.targets[0]
    args = (_p(logits), T, K, _p(tg), len(tg), 1.0 / inp.batch, _p(loss), _p(dlog))
    calls["ctc"] = (lambda a=args: lib.crnn_ctc(*a))
    abi.check(lib.crnn_ctc(*args), "crnn_ctc")
    dW, db, dx = f32(K, 2 * H), f32(K), f32(T, 2 * H)
    args = (_p(inp_l), _p(prm["fc.W"]), _p(dlog), T, 2 * H, K, _p(dx), _p(dW), _p(db))
    calls["linear bwd"] = (lambda a=args: lib.crnn_linear_backward(*a))
    abi.check(lib.crnn_linear_backward(*args), "crnn_linear_backward")
    dout = dx
    for layer in reversed(range(cfg["lstm_layers"])):
        xin, Wih, Whh, gates, c, tc, hp, _ = lstm_saved[layer]
        I = xin.shape[1]
        gWih, gWhh, gb, dxl = f32(2, 4 * H, I), f32(2, 4 * H, H), f32(2, 4 * H), f32(T, I)
        args = (_p(xin), T, I, H, _p(Wih), _p(Whh), _p(gates), _p(c), _p(tc), _p(hp), _p(dout),
                _p(gWih), _p(gWhh), _p(gb), _p(dxl))
        calls[f"lstm{layer} bwd"] = (lambda a=args, k=(gWih, gWhh, gb, dxl, dout): lib.crnn_lstm_backward(*a))
        abi.check(lib.crnn_lstm_backward(*args), "crnn_lstm_backward")
        dout = dxl
    dp = np.ascontiguousarray(dout.reshape(T, Hp, C).transpose(1, 0, 2))
    for n in reversed(range(len(geo))):
        g = geo[n]
        xin, conv, pooled, win = saved[n]
        W = prm[f"conv{n}.W"]
        gW, gb = f32(*W.shape), f32(g["out"])
        gx = f32(g["H"], g["W"], g["C"]) if n > 0 else None
        args = (_p(xin), g["H"], g["W"], g["C"], _p(W), g["out"], g["kh"], g["kw"], g["padH"],
                g["padW"], g["poolH"], g["poolW"], _p(dp), _p(win), _p(gW), _p(gb),
                None if gx is None else _p(gx))
        calls[f"conv{n} bwd"] = (lambda a=args, k=(gW, gb, gx, dp): lib.crnn_conv_backward(*a))
        abi.check(lib.crnn_conv_backward(*args), "crnn_conv_backward")
        dp = gx
    order = [f"conv{n} fwd" for n in range(len(geo))] + \
            [f"lstm{i} fwd" for i in range(cfg["lstm_layers"])] + ["linear fwd", "ctc", "linear bwd"] + \
            [f"lstm{i} bwd" for i in reversed(range(cfg["lstm_layers"]))] + \
            [f"conv{n} bwd" for n in reversed(range(len(geo)))]
    keep = (saved, lstm_saved, seq, logits, dlog, loss, dW, db, dx, inp)

    def holding(fn, name):
        def call():          # an error code must not pass for a fast call
            rc = fn()
            if rc or keep is None:
                abi.check(rc, name)
            return rc
        return call
    return {k: holding(calls[k], k) for k in order}
