"""The float64 reference (generators/float64/) checked against mathematics, not against itself:

(a) central finite differences in float64 on small random shapes (linear, conv, LSTM, CTC),
(b) PyTorch float64 autograd (conv2d+relu+max_pool2d, nn.LSTM, F.ctc_loss, optim.AdamW,
    and the whole model built here from the definitions),
(c) hand-derivable cases: brute-force CTC over all alignments, the first AdamW step of a
    scalar, clipping (3, 4) to norm 1, the spec's pool rule on ties / dead windows / NaN.

Discrepancies against PyTorch are reported normwise: max|ours - torch| / max|torch| per tensor.
"""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from crnn_conformance.generators import model
from crnn_conformance.generators.float64 import adamw, clip, conv, ctc, linear, lstm, step

H_FD = 1e-6  # central-difference step; truncation O(h^2) ~ 1e-12, rounding ~ 1e-10


def rel_err(ours, ref):
    ours, ref = np.asarray(ours, np.float64), np.asarray(ref, np.float64)
    assert ours.shape == ref.shape, (ours.shape, ref.shape)
    scale = max(float(np.max(np.abs(ref))), 1e-300) if ref.size else 1.0
    return float(np.max(np.abs(ours - ref))) / scale if ref.size else 0.0


def assert_close(ours, ref, tol, label=""):
    e = rel_err(ours, ref)
    print(f"DISCREPANCY {label}: {e:.3e}")
    assert e <= tol, f"{label}: relative discrepancy {e:.3e} > {tol:.1e}"


def fd_grad(f, arr, idx_list=None):
    """Central differences of scalar f() w.r.t. entries of arr (modified in place, restored)."""
    out = np.zeros_like(arr)
    idx_list = list(np.ndindex(arr.shape)) if idx_list is None else idx_list
    for idx in idx_list:
        keep = arr[idx]
        arr[idx] = keep + H_FD
        fp = f()
        arr[idx] = keep - H_FD
        fm = f()
        arr[idx] = keep
        out[idx] = (fp - fm) / (2 * H_FD)
    return out


# ---------------------------------------------------------------- linear

def test_linear_finite_differences():
    rng = np.random.default_rng(1)
    T, I, O = 5, 7, 3
    x, W, b, R = rng.normal(size=(T, I)), rng.normal(size=(O, I)), rng.normal(size=O), rng.normal(size=(T, O))
    assert np.allclose(linear.forward(x, W, b), x @ W.T + b)
    loss = lambda: float(np.sum(R * linear.forward(x, W, b)))
    dx, dW, db = linear.backward(x, W, R)
    assert_close(dx, fd_grad(loss, x), 1e-8, "fd linear dx")
    assert_close(dW, fd_grad(loss, W), 1e-8, "fd linear dW")
    assert_close(db, fd_grad(loss, b), 1e-8, "fd linear db")


# ---------------------------------------------------------------- conv

def test_pool_rule_ties_dead_windows_nan():
    # conv output as a 2x4 grid of one channel, pooled 2x2: windows {0,1,4,5}, {2,3,6,7}
    Hc, Wc = 2, 4
    grid = np.array([[1.0, 3.0, -1.0, -2.0],
                     [3.0, 2.0, -5.0, 0.0]])
    pooled, winners = conv.relu_maxpool(grid.reshape(Hc * Wc, 1), Hc, Wc, 2, 2)
    assert pooled.ravel().tolist() == [3.0, 0.0]
    assert winners.ravel().tolist() == [1, -1]  # first of equal maxima (row 0 before row 1); dead -> -1
    assert winners.dtype == np.int32
    grid = np.array([[np.nan, 0.5], [np.nan, 0.25]])
    pooled, winners = conv.relu_maxpool(grid.reshape(4, 1), 2, 2, 2, 2)
    assert pooled.ravel().tolist() == [0.5] and winners.ravel().tolist() == [1]  # NaN never wins
    # partial trailing windows dropped: Hc=3, Wc=5 with 2x2 -> 1x2 windows
    pooled, winners = conv.relu_maxpool(np.arange(15.0).reshape(15, 1), 3, 5, 2, 2)
    assert pooled.shape == (1, 2, 1) and pooled.ravel().tolist() == [6.0, 8.0]


def test_conv_layout_and_padding_columns():
    rng = np.random.default_rng(2)
    H, W, C, Out, kh, kw = 4, 5, 3, 2, 3, 3
    K, KP = kh * kw * C, model.kpadded(kh * kw * C)
    x = rng.normal(size=(H, W, C))
    Wt = np.zeros((Out, KP))
    Wt[:, :K] = rng.normal(size=(Out, K))
    b = rng.normal(size=Out)
    cv, _, _ = conv.forward(x, Wt, b, kh, kw, 1, 1, 2, 2)
    # direct definition: conv[y*Wc+x][o] = b[o] + sum W[o][(ky*kw+kx)*C+c] x[y+ky-1][x+kx-1][c]
    direct = np.zeros((H * W, Out))
    for y, xx, o in itertools.product(range(H), range(W), range(Out)):
        s = b[o]
        for ky, kx, c in itertools.product(range(kh), range(kw), range(C)):
            iy, ix = y + ky - 1, xx + kx - 1
            if 0 <= iy < H and 0 <= ix < W:
                s += Wt[o, (ky * kw + kx) * C + c] * x[iy, ix, c]
        direct[y * W + xx, o] = s
    assert_close(cv, direct, 1e-13, "conv forward vs direct sum")
    _, pooled, winners = conv.forward(x, Wt, b, kh, kw, 1, 1, 2, 2)
    dW, db, dx = conv.backward(x, Wt, kh, kw, 1, 1, 2, 2, np.ones_like(pooled), winners)
    assert np.all(dW[:, K:] == 0)
    assert dx.shape == (H, W, C)
    assert conv.backward(x, Wt, kh, kw, 1, 1, 2, 2, pooled, winners, want_dx=False)[2] is None


CONV_CASES = [  # H, W, C, Out, kh, kw, padH, padW, poolH, poolW
    (5, 7, 3, 4, 3, 3, 1, 1, 2, 2),   # Hc, Wc odd: partial windows dropped; K=27 -> 32
    (6, 5, 2, 3, 3, 2, 1, 0, 2, 1),   # asymmetric kernel and padding, pool 2x1
]


@pytest.mark.parametrize("case", CONV_CASES)
def test_conv_finite_differences(case):
    H, W, C, Out, kh, kw, padH, padW, poolH, poolW = case
    rng = np.random.default_rng(3)
    K, KP = kh * kw * C, model.kpadded(kh * kw * C)
    x = rng.normal(size=(H, W, C))
    Wt = np.zeros((Out, KP))
    Wt[:, :K] = rng.normal(size=(Out, K))
    b = rng.normal(size=Out)
    geo = (kh, kw, padH, padW, poolH, poolW)
    _, pooled, winners = conv.forward(x, Wt, b, *geo)
    R = rng.normal(size=pooled.shape)
    dW, db, dx = conv.backward(x, Wt, *geo, R, winners)

    def fd_same_winners(arr):
        """FD only where neither perturbation flips a pool winner (max is not differentiable there)."""
        out, ok = np.zeros_like(arr), np.zeros(arr.shape, bool)
        for idx in np.ndindex(arr.shape):
            keep, vals = arr[idx], []
            for s in (1, -1):
                arr[idx] = keep + s * H_FD
                _, pl, wn = conv.forward(x, Wt, b, *geo)
                vals.append((float(np.sum(R * pl)), np.array_equal(wn, winners)))
            arr[idx] = keep
            ok[idx] = vals[0][1] and vals[1][1]
            out[idx] = (vals[0][0] - vals[1][0]) / (2 * H_FD)
        return out, ok

    for name, ours, arr in (("dW", dW, Wt), ("db", db, b), ("dx", dx, x)):
        fd, ok = fd_same_winners(arr)
        assert ok.mean() > 0.95, f"too many winner flips for {name}"
        assert_close(ours[ok], fd[ok], 1e-7, f"fd conv {name}")
    assert np.all(dW[:, K:] == 0)


# ---------------------------------------------------------------- LSTM

def _lstm_case(rng, T=4, I=3, H=2):
    return (rng.normal(size=(T, I)), rng.normal(size=(2, 4 * H, I)) * 0.7,
            rng.normal(size=(2, 4 * H, H)) * 0.7, rng.normal(size=(2, 4 * H)) * 0.5)


def test_lstm_saved_state_conventions():
    x, W_ih, W_hh, b = _lstm_case(np.random.default_rng(4), T=5)
    s = lstm.forward(x, W_ih, W_hh, b)
    H = W_hh.shape[2]
    out = s["out"]
    assert np.all(s["hPrev"][0, 0] == 0) and np.all(s["hPrev"][1, -1] == 0)
    assert np.allclose(s["hPrev"][0, 1:], out[:-1, :H])       # forward: state after step t-1
    assert np.allclose(s["hPrev"][1, :-1], out[1:, H:])       # reverse: state after step t+1
    assert np.allclose(s["tc"], np.tanh(s["c"]))
    for d in (0, 1):
        assert np.allclose(out[:, d * H:(d + 1) * H], s["gates"][d][:, 3 * H:] * s["tc"][d])
    assert np.allclose(lstm.sigmoid(np.array([-800.0, 0.0, 800.0])), [0.0, 0.5, 1.0])


def test_lstm_finite_differences():
    rng = np.random.default_rng(5)
    x, W_ih, W_hh, b = _lstm_case(rng)
    R = rng.normal(size=(x.shape[0], 2 * W_hh.shape[2]))
    s = lstm.forward(x, W_ih, W_hh, b)
    g = lstm.backward(x, W_ih, W_hh, s, R)
    loss = lambda: float(np.sum(R * lstm.forward(x, W_ih, W_hh, b)["out"]))
    for name, arr in (("dW_ih", W_ih), ("dW_hh", W_hh), ("db", b), ("dx", x)):
        assert_close(g[name], fd_grad(loss, arr), 1e-7, f"fd lstm {name}")


# ---------------------------------------------------------------- CTC

def test_log_softmax():
    z = np.array([[1.0, 2.0, 3.0], [1000.0, 0.0, -1000.0]])
    lp = ctc.log_softmax(z)
    assert np.allclose(np.exp(lp).sum(axis=1), 1.0)
    assert np.allclose(lp[0], z[0] - np.log(np.exp(z[0]).sum()))
    assert lp[1, 0] == 0.0


def _brute_force_loss(logits, target):
    """-log of the sum over all K^T paths that collapse (merge repeats, drop blanks) to target."""
    p = np.exp(ctc.log_softmax(logits))
    T, K = p.shape
    total = 0.0
    for path in itertools.product(range(K), repeat=T):
        merged = [k for i, k in enumerate(path) if i == 0 or k != path[i - 1]]
        if [k for k in merged if k != 0] == list(target):
            total += np.prod(p[np.arange(T), path])
    return -np.log(total) if total > 0 else np.inf


@pytest.mark.parametrize("T,target", [(1, []), (3, []), (2, [1]), (4, [1, 2]), (3, [1, 1]),
                                      (5, [1, 1]), (5, [2, 1, 2]), (5, [1, 1, 2]), (4, [2, 2])])
def test_ctc_brute_force(T, target):
    rng = np.random.default_rng(6 + T + len(target))
    logits = rng.normal(size=(T, 3)) * 2
    loss, _ = ctc.ctc(logits, target, 1.0)
    ref = _brute_force_loss(logits, target)
    assert abs(loss - ref) <= 1e-12 * max(1.0, abs(ref))


def test_ctc_no_alignment():
    logits = np.random.default_rng(7).normal(size=(2, 3))
    for target in ([1, 1], [1, 2, 1]):  # [1,1] needs T >= 3
        loss, d = ctc.ctc(logits, target, 0.5)
        assert loss == np.inf and _brute_force_loss(logits, target) == np.inf
        assert d.shape == (2, 3) and np.all(d == 0)


@pytest.mark.parametrize("T,K,target", [(6, 4, [1, 3, 3]), (5, 3, []), (7, 5, [4, 1, 2, 1])])
def test_ctc_finite_differences(T, K, target):
    rng = np.random.default_rng(8)
    logits = rng.normal(size=(T, K))
    loss, d = ctc.ctc(logits, target, 1.0)
    assert_close(d, fd_grad(lambda: ctc.ctc(logits, target, 1.0)[0], logits), 1e-7, "fd ctc dlogits")
    _, d4 = ctc.ctc(logits, target, 0.25)
    assert np.allclose(d4, 0.25 * d, rtol=1e-15, atol=0)
    assert np.allclose(d.sum(axis=1), 0, atol=1e-12)  # softmax and occupancy both sum to 1 per step


# ---------------------------------------------------------------- AdamW and clipping

def test_adamw_first_step_by_hand():
    # p = 2.0, g = 0.1, lr = 0.01, wd = 0.01, betas 0.9 / 0.999, eps 1e-8, step t = 1:
    #   decay:  p = 2 * (1 - 0.01*0.01) = 1.9998
    #   m = 0.1 * 0.1 = 0.01;  v = 0.001 * 0.1^2 = 1e-5
    #   mhat = 0.01 / (1 - 0.9) = 0.1;  vhat = 1e-5 / (1 - 0.999) = 0.01, sqrt(vhat) = 0.1
    #   step = lr * mhat / (sqrt(vhat) + eps) = 0.01 * 0.1 / (0.1 + 1e-8) = 0.009999999900...
    #   p = 1.9998 - 0.0099999999 = 1.989800001 (to ~1e-9)
    p, m, v = adamw.step(2.0, 0.0, 0.0, 0.1, 1, 0.01, 0.9, 0.999, 1e-8, 0.01, True)
    assert abs(float(p) - 1.989800001) < 1e-9
    assert abs(float(m) - 0.01) < 1e-15 and abs(float(v) - 1e-5) < 1e-18
    p_nodecay, _, _ = adamw.step(2.0, 0.0, 0.0, 0.1, 1, 0.01, decay=False)
    assert abs(float(p_nodecay) - (2.0 - 0.001 / (0.1 + 1e-8))) < 1e-12


def test_clip():
    (g,), norm = clip.clip([np.array([3.0, 4.0])], 1.0)
    assert norm == 5.0
    assert np.allclose(g, [0.6, 0.8], atol=1e-6, rtol=0)
    assert np.allclose(g, np.array([3.0, 4.0]) / (5.0 + 1e-6), rtol=1e-15, atol=0)
    gs = [np.array([[1.0, 2.0]]), np.array([2.0])]
    assert clip.global_norm(gs) == 3.0
    out, norm = clip.clip(gs, 3.0)  # not strictly greater: unchanged
    assert norm == 3.0 and all(np.array_equal(a, b) for a, b in zip(out, gs))
    out, _ = clip.clip(gs, 1.0, enabled=False)
    assert all(np.array_equal(a, b) for a, b in zip(out, gs))


# ================================================================ PyTorch float64

def _torch():
    torch = pytest.importorskip("torch")
    torch.set_default_dtype(torch.float64)
    return torch


def conv_w_to_torch(torch, Wt, C, kh, kw):
    """W_torch[o][c][ky][kx] = Wt[o][(ky*kw + kx)*C + c]."""
    Out = Wt.shape[0]
    w = np.asarray(Wt, np.float64)[:, :kh * kw * C].reshape(Out, kh, kw, C).transpose(0, 3, 1, 2)
    return torch.tensor(np.ascontiguousarray(w), requires_grad=True)


def conv_w_from_torch(grad, KP):
    Out, C, kh, kw = grad.shape
    out = np.zeros((Out, KP))
    out[:, :kh * kw * C] = grad.numpy().transpose(0, 2, 3, 1).reshape(Out, -1)
    return out


def torch_block(torch, xt, w, b, blk):
    F = torch.nn.functional
    y = F.conv2d(xt, w, b, padding=(blk["padH"], blk["padW"]))
    return F.max_pool2d(F.relu(y), (blk["poolH"], blk["poolW"]))


@pytest.mark.parametrize("case", CONV_CASES)
def test_conv_vs_torch(case):
    torch = _torch()
    H, W, C, Out, kh, kw, padH, padW, poolH, poolW = case
    blk = dict(kh=kh, kw=kw, padH=padH, padW=padW, poolH=poolH, poolW=poolW)
    rng = np.random.default_rng(9)
    K, KP = kh * kw * C, model.kpadded(kh * kw * C)
    x = rng.normal(size=(H, W, C))
    Wt = np.zeros((Out, KP))
    Wt[:, :K] = rng.normal(size=(Out, K))
    b = rng.normal(size=Out)
    geo = (kh, kw, padH, padW, poolH, poolW)
    cv, pooled, winners = conv.forward(x, Wt, b, *geo)
    R = rng.normal(size=pooled.shape)
    dW, db, dx = conv.backward(x, Wt, *geo, R, winners)

    xt = torch.tensor(x.transpose(2, 0, 1)[None].copy(), requires_grad=True)
    wt = conv_w_to_torch(torch, Wt, C, kh, kw)
    bt = torch.tensor(b, requires_grad=True)
    pt = torch_block(torch, xt, wt, bt, blk)
    (pt * torch.tensor(R.transpose(2, 0, 1)[None].copy())).sum().backward()
    assert_close(pooled, pt.detach()[0].numpy().transpose(1, 2, 0), 1e-13, "torch conv pooled")
    assert_close(dW, conv_w_from_torch(wt.grad, KP), 1e-12, "torch conv dW")
    assert_close(db, bt.grad.numpy(), 1e-12, "torch conv db")
    assert_close(dx, xt.grad[0].numpy().transpose(1, 2, 0), 1e-12, "torch conv dx")


def torch_lstm(torch, W_ih, W_hh, b):
    """nn.LSTM (bidirectional, one layer) holding our weights: bias_ih = b, bias_hh = 0."""
    I, H = W_ih.shape[2], W_hh.shape[2]
    m = torch.nn.LSTM(I, H, bidirectional=True, dtype=torch.float64)
    with torch.no_grad():
        for d, sfx in enumerate(("", "_reverse")):
            getattr(m, f"weight_ih_l0{sfx}").copy_(torch.tensor(np.asarray(W_ih[d], np.float64)))
            getattr(m, f"weight_hh_l0{sfx}").copy_(torch.tensor(np.asarray(W_hh[d], np.float64)))
            getattr(m, f"bias_ih_l0{sfx}").copy_(torch.tensor(np.asarray(b[d], np.float64)))
            getattr(m, f"bias_hh_l0{sfx}").zero_()
    return m


def test_lstm_vs_torch():
    torch = _torch()
    rng = np.random.default_rng(10)
    x, W_ih, W_hh, b = _lstm_case(rng, T=7, I=5, H=4)
    R = rng.normal(size=(7, 8))
    s = lstm.forward(x, W_ih, W_hh, b)
    g = lstm.backward(x, W_ih, W_hh, s, R)
    m = torch_lstm(torch, W_ih, W_hh, b)
    xt = torch.tensor(x[:, None, :], requires_grad=True)
    out, _ = m(xt)
    (out[:, 0] * torch.tensor(R)).sum().backward()
    assert_close(s["out"], out.detach()[:, 0].numpy(), 1e-13, "torch lstm out")
    for d, sfx in enumerate(("", "_reverse")):
        assert_close(g["dW_ih"][d], getattr(m, f"weight_ih_l0{sfx}").grad.numpy(), 1e-12, "torch lstm dW_ih")
        assert_close(g["dW_hh"][d], getattr(m, f"weight_hh_l0{sfx}").grad.numpy(), 1e-12, "torch lstm dW_hh")
        assert_close(g["db"][d], getattr(m, f"bias_ih_l0{sfx}").grad.numpy(), 1e-12, "torch lstm db")
        assert_close(g["db"][d], getattr(m, f"bias_hh_l0{sfx}").grad.numpy(), 1e-12, "torch lstm db(hh)")
    assert_close(g["dx"], xt.grad[:, 0].numpy(), 1e-12, "torch lstm dx")


@pytest.mark.parametrize("T,K,target", [(8, 5, [1, 2, 2, 3]), (6, 4, []), (10, 6, [5, 1, 5, 5, 2]),
                                        (3, 3, [1, 1])])
def test_ctc_vs_torch(T, K, target):
    torch = _torch()
    F = torch.nn.functional
    logits = np.random.default_rng(11 + T).normal(size=(T, K)) * 3
    loss, d = ctc.ctc(logits, target, 1.0)
    zt = torch.tensor(logits, requires_grad=True)
    lt = F.ctc_loss(F.log_softmax(zt, dim=1)[:, None, :], torch.tensor([target], dtype=torch.long).reshape(1, -1),
                    torch.tensor([T]), torch.tensor([len(target)]), blank=0, reduction="none")
    lt.sum().backward()
    assert abs(loss - lt.item()) <= 1e-12 * abs(lt.item())
    print(f"DISCREPANCY torch ctc loss: {abs(loss - lt.item()) / abs(lt.item()):.3e}")
    assert_close(d, zt.grad.numpy(), 1e-11, "torch ctc dlogits")


def test_adamw_vs_torch():
    torch = _torch()
    rng = np.random.default_rng(12)
    for decay in (True, False):
        p0 = rng.normal(size=(3, 4))
        grads = [rng.normal(size=(3, 4)) * s for s in (1.0, 0.1, 3.0)]
        pt = torch.tensor(p0, requires_grad=True)
        opt = torch.optim.AdamW([pt], lr=0.003, betas=(0.9, 0.999), eps=1e-8,
                                weight_decay=0.01 if decay else 0.0, foreach=False)
        p, m, v = p0, np.zeros_like(p0), np.zeros_like(p0)
        for t, g in enumerate(grads, start=1):
            pt.grad = torch.tensor(g)
            opt.step()
            p, m, v = adamw.step(p, m, v, g, t, 0.003, 0.9, 0.999, 1e-8, 0.01, decay)
        st = opt.state[pt]
        assert_close(p, pt.detach().numpy(), 1e-14, "torch adamw p")
        assert_close(m, st["exp_avg"].numpy(), 1e-14, "torch adamw m")
        assert_close(v, st["exp_avg_sq"].numpy(), 1e-14, "torch adamw v")


# ---------------------------------------------------------------- whole model

TINY = {
    "name": "tiny", "input_height": 8, "input_channels": 1,
    "blocks": [{"out": 4, "kh": 3, "kw": 3, "padH": 1, "padW": 1, "poolH": 2, "poolW": 2},
               {"out": 8, "kh": 3, "kw": 3, "padH": 1, "padW": 1, "poolH": 2, "poolW": 1}],
    "lstm_layers": 2, "hidden": 8, "classes": 5,
}


def torch_batch(torch, config, params, images, targets):
    """The model built from the definitions in PyTorch float64; -> (batch loss, grads dict)."""
    F = torch.nn.functional
    B = len(images)
    convs, C = [], config["input_channels"]
    for n, blk in enumerate(config["blocks"]):
        convs.append((conv_w_to_torch(torch, params[f"conv{n}.W"], C, blk["kh"], blk["kw"]),
                      torch.tensor(np.asarray(params[f"conv{n}.b"], np.float64), requires_grad=True)))
        C = blk["out"]
    lstms = []
    for layer in range(config["lstm_layers"]):
        W_ih, W_hh, b = (np.stack([params[f"lstm{layer}.{d}.{k}"] for d in ("fwd", "rev")])
                         for k in ("W_ih", "W_hh", "b"))
        lstms.append(torch_lstm(torch, W_ih, W_hh, b))
    fcW = torch.tensor(np.asarray(params["fc.W"], np.float64), requires_grad=True)
    fcb = torch.tensor(np.asarray(params["fc.b"], np.float64), requires_grad=True)
    total, losses = 0.0, []
    for img, tgt in zip(images, targets):
        x = torch.tensor(np.asarray(img, np.float64)[None, None])
        for (w, b), blk in zip(convs, config["blocks"]):
            x = torch_block(torch, x, w, b, blk)
        _, Cf, Hp, Wp = x.shape
        seq = x[0].permute(2, 1, 0).reshape(Wp, Hp * Cf)     # x[t = w][h*C + c]
        for m in lstms:
            seq = m(seq[:, None, :])[0][:, 0]
        logits = seq @ fcW.T + fcb
        lp = F.log_softmax(logits, dim=1)[:, None, :]
        loss = F.ctc_loss(lp, torch.tensor(tgt, dtype=torch.long).reshape(1, -1), torch.tensor([Wp]),
                          torch.tensor([len(tgt)]), blank=0, reduction="none", zero_infinity=True)
        losses.append(loss)
        total = total + loss.sum() / B
    total.backward()
    grads = {}
    for n, (w, b) in enumerate(convs):
        grads[f"conv{n}.W"] = conv_w_from_torch(w.grad, np.shape(params[f"conv{n}.W"])[1])
        grads[f"conv{n}.b"] = b.grad.numpy()
    for layer, m in enumerate(lstms):
        for d, sfx in (("fwd", ""), ("rev", "_reverse")):
            grads[f"lstm{layer}.{d}.W_ih"] = getattr(m, f"weight_ih_l0{sfx}").grad.numpy()
            grads[f"lstm{layer}.{d}.W_hh"] = getattr(m, f"weight_hh_l0{sfx}").grad.numpy()
            grads[f"lstm{layer}.{d}.b"] = getattr(m, f"bias_ih_l0{sfx}").grad.numpy()
    grads["fc.W"], grads["fc.b"] = fcW.grad.numpy(), fcb.grad.numpy()
    return float(total.detach()), grads


def test_whole_model_vs_torch():
    torch = _torch()
    rng = np.random.default_rng(13)
    params = model.init_params(TINY, rng)
    # widths 12 (T=6), 9 (T=4, partial pool window dropped), 5 (T=2: target needs 4 -> no alignment)
    images = [rng.random((8, 12)), rng.random((8, 9)), rng.random((8, 5))]
    targets = [[1, 2, 2], [4, 3], [1, 1, 2]]
    grads, losses, batch_loss = step.batch_gradient(TINY, params, images, targets)
    assert losses[2] == np.inf and np.all(np.isfinite(losses[:2]))
    assert abs(batch_loss - (losses[0] + losses[1]) / 3) < 1e-15
    t_loss, t_grads = torch_batch(torch, TINY, params, images, targets)
    assert abs(batch_loss - t_loss) <= 1e-12 * abs(t_loss)
    print(f"DISCREPANCY torch step loss: {abs(batch_loss - t_loss) / abs(t_loss):.3e}")
    assert [s.name for s in model.param_specs(TINY)] == list(grads)
    for s in model.param_specs(TINY):
        assert grads[s.name].shape == s.shape
        assert_close(grads[s.name], t_grads[s.name], 1e-10, f"torch step {s.name}")
    # the unaligned line contributes zero gradients but stays in B
    lg = step.line_forward_backward(TINY, params, images[2], targets[2], 1 / 3)
    assert lg[0] == np.inf and all(np.all(g == 0) for g in lg[1].values())
    g01, _, _ = step.batch_gradient(TINY, params, images[:2], targets[:2])
    for name in grads:  # scale 1/3 vs 1/2 rounds differently: compare normwise
        assert rel_err(grads[name], g01[name] * 2 / 3) <= 1e-13, name


def test_whole_model_finite_differences_spot():
    """A few parameter entries per tensor of one line, by central differences of the loss."""
    rng = np.random.default_rng(14)
    params = {k: v.astype(np.float64) for k, v in model.init_params(TINY, rng).items()}
    image, target = rng.random((8, 10)), [2, 3]
    _, grads = step.line_forward_backward(TINY, params, image, target, 1.0)
    loss = lambda: step.line_forward_backward(TINY, params, image, target, 1.0)[0]
    geo = model.block_geometry(TINY, image.shape[1])
    for name, arr in params.items():
        view = arr
        if name.startswith("conv") and name.endswith(".W"):  # padding columns are not parameters
            g = geo[int(name[4:name.index(".")])]
            view = arr[:, :g["kh"] * g["kw"] * g["C"]]
        flat = [np.unravel_index(i, view.shape) for i in rng.choice(view.size, 3, replace=False)]
        fd = fd_grad(loss, arr, flat)
        for idx in flat:
            assert abs(grads[name][idx] - fd[idx]) <= 1e-6 * max(1.0, abs(fd[idx])), (name, idx)
