"""One layer in PyTorch, in one dtype, on given inputs (our layouts in and out): the per-layer
fixtures rerun each layer alone so that a layer's Floor is its own rounding."""
from __future__ import annotations

import numpy as np

from ..torch_layout import (conv_weight_from_torch, conv_weight_to_torch,
                            winners_from_torch)

from .torch_env import _np, _t, _torch, np_dtype, tdtype


def conv_block(x, W, b, geo: dict, dPooled, kind: str, want_dx: bool = True) -> dict:
    """One conv block in PyTorch (conv2d -> relu -> max_pool2d(return_indices=True)) and its
    backward from dPooled. x [H][W][C], W [Out][KPadded], b [Out], dPooled [Hp][Wp][Out].
    -> conv [P][Out] (before ReLU), pooled [Hp][Wp][Out], winners (our flat index,
    PyTorch's choice), dW [Out][KPadded], db [Out], dx [H][W][C] (when want_dx)."""
    torch = _torch()
    F = torch.nn.functional
    x = np.asarray(x)
    H, Wd, C = x.shape
    KP = np.shape(W)[1]
    kh, kw, padH, padW = geo["kh"], geo["kw"], geo["padH"], geo["padW"]
    xt = _t(x.transpose(2, 0, 1)[None], kind, grad=want_dx)
    Wt = _t(conv_weight_to_torch(W, C, kh, kw), kind, grad=True)
    bt = _t(b, kind, grad=True)
    conv = F.conv2d(xt, Wt, bt, padding=(padH, padW))
    conv.retain_grad()
    pooled, idx = F.max_pool2d(F.relu(conv), (geo["poolH"], geo["poolW"]), return_indices=True)
    pooled.backward(_t(np.asarray(dPooled).transpose(2, 0, 1)[None], kind))
    Out = conv.shape[1]
    out = {"conv": _np(conv[0].permute(1, 2, 0).reshape(-1, Out), kind),
           "pooled": _np(pooled[0].permute(1, 2, 0), kind),
           "winners": winners_from_torch(idx[0].numpy(), Out),
           "dW": conv_weight_from_torch(_np(Wt.grad, kind), KP, np_dtype(kind)),
           "db": _np(bt.grad, kind)}
    if want_dx:
        out["dx"] = _np(xt.grad[0].permute(1, 2, 0), kind)
    return out


def lstm_module(W_ih, W_hh, b, kind: str):
    """One bidirectional single-layer nn.LSTM with our weights ([2][4H][I], [2][4H][H],
    [2][4H]; direction 0 forward), bias_hh fixed at 0 (b = bias_ih)."""
    torch = _torch()
    W_ih, W_hh, b = np.asarray(W_ih), np.asarray(W_hh), np.asarray(b)
    I, H = W_ih.shape[2], W_hh.shape[2]
    m = torch.nn.LSTM(I, H, num_layers=1, bidirectional=True, dtype=tdtype(kind))
    with torch.no_grad():
        for d, sfx in enumerate(("_l0", "_l0_reverse")):
            getattr(m, "weight_ih" + sfx).copy_(_t(W_ih[d], kind))
            getattr(m, "weight_hh" + sfx).copy_(_t(W_hh[d], kind))
            getattr(m, "bias_ih" + sfx).copy_(_t(b[d], kind))
            bh = getattr(m, "bias_hh" + sfx)
            bh.zero_()
            bh.requires_grad_(False)
    return m


def lstm_layer(x, W_ih, W_hh, b, dOut, kind: str) -> dict:
    """One bidirectional LSTM layer and its backward from dOut. x [T][I] -> out [T][2H],
    dW_ih [2][4H][I], dW_hh [2][4H][H], db [2][4H] (the gradient of bias_ih), dx [T][I]."""
    m = lstm_module(W_ih, W_hh, b, kind)
    xt = _t(np.asarray(x)[:, None, :], kind, grad=True)
    y, _ = m(xt)
    y.backward(_t(np.asarray(dOut)[:, None, :], kind))
    g = lambda name: _np(getattr(m, name).grad, kind)
    return {"out": _np(y[:, 0], kind),
            "dW_ih": np.stack([g("weight_ih_l0"), g("weight_ih_l0_reverse")]),
            "dW_hh": np.stack([g("weight_hh_l0"), g("weight_hh_l0_reverse")]),
            "db": np.stack([g("bias_ih_l0"), g("bias_ih_l0_reverse")]),
            "dx": _np(xt.grad[:, 0], kind)}


def linear_layer(x, W, b, dY, kind: str) -> dict:
    """The classifier (F.linear) and its backward from dY: y, dx, dW, db."""
    F = _torch().nn.functional
    xt, Wt, bt = _t(x, kind, True), _t(W, kind, True), _t(b, kind, True)
    y = F.linear(xt, Wt, bt)
    y.backward(_t(dY, kind))
    return {"y": _np(y, kind), "dx": _np(xt.grad, kind), "dW": _np(Wt.grad, kind),
            "db": _np(bt.grad, kind)}


def ctc_line(logits, target, scale: float, kind: str) -> dict:
    """CTC of one line on logits [T][K]: log_softmax -> ctc_loss(reduction='none', blank 0);
    the gradient is that of scale * loss (scale = 1/B: the line's share of the plain mean).
    -> loss [1] (float64 array holding the dtype's value), dlogits [T][K]."""
    torch = _torch()
    F = torch.nn.functional
    z = _t(logits, kind, True)
    lp = F.log_softmax(z, dim=-1)[:, None, :]
    T = z.shape[0]
    tgt = torch.as_tensor(np.asarray(target, np.int64))[None]
    loss = F.ctc_loss(lp, tgt, torch.tensor([T]), torch.tensor([len(target)]), blank=0,
                      reduction="none", zero_infinity=False)
    (loss[0] * scale).backward()
    return {"loss": np.array([float(loss[0].detach())], np.float64), "dlogits": _np(z.grad, kind)}


def adamw(p, grads, decay: bool, hp: dict, kind: str) -> dict:
    """torch.optim.AdamW (foreach=False, the single-tensor loop) for len(grads) steps from
    m = v = 0. weight_decay = hp['wd'] when decay else 0. -> p, m (exp_avg), v (exp_avg_sq)."""
    torch = _torch()
    pt = torch.nn.Parameter(_t(p, kind).clone())
    opt = torch.optim.AdamW([pt], lr=hp["lr"], betas=(hp["beta1"], hp["beta2"]), eps=hp["eps"],
                            weight_decay=hp["wd"] if decay else 0.0, foreach=False)
    for g in grads:
        pt.grad = _t(g, kind).clone()
        opt.step()
    st = opt.state[pt]
    return {"p": _np(pt, kind), "m": _np(st["exp_avg"], kind), "v": _np(st["exp_avg_sq"], kind)}
