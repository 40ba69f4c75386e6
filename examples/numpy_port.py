"""A port of crnn-v0's training numerics in plain NumPy float32 (docs/python-ports.md).

Ordinary library calls: np.matmul for every product, NumPy's own sum, exp and tanh, so
the bits are not the spec's (the exact tier fails) while every value is within the float64
and pytorch tiers' allowances. The CTC loss is float64, as the spec requires. The whole-model
step composes the same layer functions.

    crnn-conformance gate --port examples/numpy_port.py:Port --tiers float64,pytorch
"""
import numpy as np

from _checks import checked     # the ABI's argument checks (docs/port-abi.md), shared
from _model import model_config, tensor_shapes   # the ABI's cfg vector, shared

F32, F64 = np.float32, np.float64


def sigmoid(z):
    with np.errstate(over="ignore"):
        return (F32(1) / (F32(1) + np.exp(-z))).astype(F32)


def linear_forward(x, W, b):
    return np.matmul(x, W.T) + b


def linear_backward(x, W, dY):
    return np.matmul(dY, W), np.matmul(dY.T, x), dY.sum(axis=0, dtype=F32)


def _geometry(H, W, kh, kw, padH, padW, poolH, poolW):
    Hc, Wc = H + 2 * padH - kh + 1, W + 2 * padW - kw + 1
    return Hc, Wc, Hc // poolH, Wc // poolW


def im2col(x, kh, kw, padH, padW, KP):
    H, W, C = x.shape
    xp = np.pad(x, ((padH, padH), (padW, padW), (0, 0)))
    Hc, Wc = H + 2 * padH - kh + 1, W + 2 * padW - kw + 1
    taps = [xp[ky:ky + Hc, kx:kx + Wc, :] for ky in range(kh) for kx in range(kw)]
    col = np.stack(taps, axis=2).reshape(Hc * Wc, kh * kw * C)
    return np.pad(col, ((0, 0), (0, KP - col.shape[1])))


def conv_forward(x, Wt, b, kh, kw, padH, padW, poolH, poolW):
    H, W, _ = x.shape
    Out, KP = Wt.shape
    Hc, Wc, Hp, Wp = _geometry(H, W, kh, kw, padH, padW, poolH, poolW)
    conv = np.matmul(im2col(x, kh, kw, padH, padW, KP), Wt.T) + b
    cells = conv.reshape(Hc, Wc, Out)[:Hp * poolH, :Wp * poolW]
    windows = cells.reshape(Hp, poolH, Wp, poolW, Out).transpose(0, 2, 1, 3, 4)
    windows = windows.reshape(Hp, Wp, poolH * poolW, Out)
    positive = np.where(windows > 0, windows, F32(0))       # ReLU; NaN, -0 never win
    first = np.argmax(positive, axis=2)                     # the first of equal maxima
    pooled = np.take_along_axis(positive, first[:, :, None, :], axis=2)[:, :, 0, :]
    dy, dx = np.divmod(first, poolW)
    oy, ox, o = np.meshgrid(np.arange(Hp), np.arange(Wp), np.arange(Out), indexing="ij")
    p = (oy * poolH + dy) * Wc + ox * poolW + dx
    winners = np.where(pooled > 0, p * Out + o, -1).astype(np.int32)
    return conv, pooled + F32(0), winners


def conv_backward(x, Wt, dPooled, winners, kh, kw, padH, padW, poolH, poolW, want_dx):
    H, W, C = x.shape
    Out, KP = Wt.shape
    Hc, Wc, _, _ = _geometry(H, W, kh, kw, padH, padW, poolH, poolW)
    w = winners.reshape(-1).astype(np.int64)
    live = w >= 0
    dC = np.zeros((Hc * Wc, Out), F32)
    dC.reshape(-1)[w[live]] = dPooled.reshape(-1)[live]
    col = im2col(x, kh, kw, padH, padW, KP)
    dW, db = np.matmul(dC.T, col), dC.sum(axis=0, dtype=F32)
    if not want_dx:
        return dW, db, None
    dcol = np.matmul(dC, Wt)[:, :kh * kw * C].reshape(Hc, Wc, kh * kw, C)
    dxp = np.zeros((H + 2 * padH, W + 2 * padW, C), F32)
    for ky in range(kh):
        for kx in range(kw):
            dxp[ky:ky + Hc, kx:kx + Wc] += dcol[:, :, ky * kw + kx]
    return dW, db, dxp[padH:padH + H, padW:padW + W] + F32(0)


def lstm_forward(x, W_ih, W_hh, b):
    T, H = x.shape[0], W_hh.shape[2]
    out = np.empty((T, 2 * H), F32)
    gates, c_s, tc_s, hprev = (np.empty((2, T, n), F32) for n in (4 * H, H, H, H))
    for d in (0, 1):
        xw = np.matmul(x, W_ih[d].T)
        h, c = np.zeros(H, F32), np.zeros(H, F32)
        for t in (range(T) if d == 0 else range(T - 1, -1, -1)):
            z = (xw[t] + np.matmul(W_hh[d], h)) + b[d]
            i, f, o = sigmoid(z[:H]), sigmoid(z[H:2 * H]), sigmoid(z[3 * H:])
            g = np.tanh(z[2 * H:3 * H])
            hprev[d, t] = h
            c = f * c + i * g
            tc = np.tanh(c)
            h = o * tc
            gates[d, t] = np.concatenate([i, f, g, o])
            c_s[d, t], tc_s[d, t], out[t, d * H:(d + 1) * H] = c, tc, h
    return out, gates, c_s, tc_s, hprev


def lstm_backward(x, W_ih, W_hh, gates, c, tc, hPrev, dOut):
    T, H = x.shape[0], W_hh.shape[2]
    one = F32(1)
    dz = np.zeros((T, 8 * H), F32)
    for d in (0, 1):
        dh_rec, dc_next = np.zeros(H, F32), np.zeros(H, F32)
        for t in (range(T - 1, -1, -1) if d == 0 else range(T)):
            i, f, g, o = (gates[d, t, k * H:(k + 1) * H] for k in range(4))
            prev = t - 1 if d == 0 else t + 1
            c_prev = c[d, prev] if 0 <= prev < T else np.zeros(H, F32)
            dh = dOut[t, d * H:(d + 1) * H] + dh_rec
            dc = dc_next + dh * o * (one - tc[d, t] * tc[d, t])
            dc_next = dc * f
            dz[t, d * 4 * H:(d + 1) * 4 * H] = np.concatenate([
                dc * g * (i * (one - i)), dc * c_prev * (f * (one - f)),
                dc * i * (one - g * g), dh * tc[d, t] * (o * (one - o))])
            dh_rec = np.matmul(dz[t, d * 4 * H:(d + 1) * 4 * H], W_hh[d])
    dzs = dz.reshape(T, 2, 4 * H).transpose(1, 0, 2)
    dW_ih = np.stack([np.matmul(dzs[d].T, x) for d in (0, 1)])
    dW_hh = np.stack([np.matmul(dzs[d].T, hPrev[d]) for d in (0, 1)])
    db = dzs.sum(axis=1, dtype=F32)
    dx = np.matmul(dz, W_ih.reshape(8 * H, -1))
    return dW_ih, dW_hh, db, dx


def ctc(logits, target, scale):
    """The CTC loss of one line and its logit gradient, in float64."""
    T, K = logits.shape
    L = len(target)
    S = 2 * L + 1
    if T == 0:
        return np.inf, np.zeros((T, K), F32)
    z = logits.astype(F64)
    m = z.max(axis=1, keepdims=True)
    lp = (z - m) - np.log(np.exp(z - m).sum(axis=1, keepdims=True))
    ext = np.zeros(S, np.int64)
    ext[1::2] = target
    skip = np.zeros(S, bool)
    skip[2:] = (ext[2:] != 0) & (ext[2:] != ext[:-2])
    e = lp[:, ext]
    alpha, beta = np.full((T, S), -np.inf), np.full((T, S), -np.inf)
    alpha[0, :2] = e[0, :2]
    for t in range(1, T):
        a = alpha[t - 1]
        a1 = np.concatenate([[-np.inf], a[:-1]])
        a2 = np.where(skip, np.concatenate([[-np.inf, -np.inf], a])[:S], -np.inf)
        alpha[t] = np.logaddexp(np.logaddexp(a, a1), a2) + e[t]
    beta[T - 1, max(S - 2, 0):] = e[T - 1, max(S - 2, 0):]
    skip_b = np.concatenate([skip[2:], [False, False]])[:S]
    for t in range(T - 2, -1, -1):
        bn = beta[t + 1]
        b1 = np.concatenate([bn[1:], [-np.inf]])
        b2 = np.where(skip_b, np.concatenate([bn[2:], [-np.inf, -np.inf]])[:S], -np.inf)
        beta[t] = np.logaddexp(np.logaddexp(bn, b1), b2) + e[t]
    logp = alpha[T - 1, 0] if S == 1 else np.logaddexp(alpha[T - 1, S - 1], alpha[T - 1, S - 2])
    if logp == -np.inf:
        return np.inf, np.zeros((T, K), F32)
    acc = np.full((T, K), -np.inf)
    for s in range(S):
        acc[:, ext[s]] = np.logaddexp(acc[:, ext[s]], alpha[:, s] + beta[:, s])
    with np.errstate(invalid="ignore"):
        occupancy = np.exp((acc - lp) - logp)
    grad = scale * (np.exp(lp) - np.where(np.isneginf(acc), 0.0, occupancy))
    return -logp, grad.astype(F32)


def split(flat, shapes):
    out, at = [], 0
    for s in shapes:
        n = int(np.prod(s))
        out.append(flat[at:at + n].reshape(s))
        at += n
    return out


def line_gradients(cfg, params, image, target, scale):
    """(loss, [gradient per tensor]) of one line: the forward, CTC and backward passes."""
    _, _, blocks, nl, _, _ = model_config(cfg)
    P = split(params, tensor_shapes(cfg))
    x, saved = image, []
    for k, (_, kh, kw, padH, padW, poolH, poolW) in enumerate(blocks):
        _, pooled, winners = conv_forward(x, P[2 * k], P[2 * k + 1], kh, kw, padH, padW,
                                          poolH, poolW)
        saved.append((x, winners))
        x = pooled
    Hp, _, C = x.shape
    seq, states, at = x.transpose(1, 0, 2).reshape(x.shape[1], Hp * C), [], 2 * len(blocks)
    for n in range(nl):
        W_ih, W_hh, b = (np.stack([P[at + 3 * d + j] for d in (0, 1)]) for j in range(3))
        result = lstm_forward(seq, W_ih, W_hh, b)
        states.append((seq, W_ih, W_hh, result))
        seq, at = result[0], at + 6
    logits = linear_forward(seq, P[at], P[at + 1])
    loss, dlogits = ctc(logits, target, scale)
    grads = [np.zeros(p.shape, F32) for p in P]
    if not np.isfinite(loss):
        return loss, grads
    dseq, grads[at], grads[at + 1] = linear_backward(seq, P[at], dlogits)
    for n in range(nl - 1, -1, -1):
        inp, W_ih, W_hh, (_, gates, c, tc, hprev) = states[n]
        at -= 6
        dW_ih, dW_hh, db, dseq = lstm_backward(inp, W_ih, W_hh, gates, c, tc, hprev, dseq)
        for d in (0, 1):
            grads[at + 3 * d:at + 3 * d + 3] = [dW_ih[d], dW_hh[d], db[d]]
    dmap = dseq.reshape(dseq.shape[0], Hp, C).transpose(1, 0, 2)
    for k in range(len(blocks) - 1, -1, -1):
        _, kh, kw, padH, padW, poolH, poolW = blocks[k]
        xin, winners = saved[k]
        grads[2 * k], grads[2 * k + 1], dmap = conv_backward(
            xin, P[2 * k], dmap, winners, kh, kw, padH, padW, poolH, poolW, k > 0)
    return loss, grads


class Port:
    """The ABI's entry points (without the crnn_ prefix) over NumPy arrays."""

    @checked
    def dot16(self, a, b, n, out):
        return np.dot(a, b)

    @checked
    def linear_forward(self, x, W, b, T, I, O, y):
        return linear_forward(x, W, b)

    @checked
    def linear_backward(self, x, W, dY, T, I, O, dx, dW, db):
        return linear_backward(x, W, dY)

    @checked
    def conv_forward(self, x, H, W, C, Wt, b, Out, kh, kw, padH, padW, poolH, poolW,
                     conv, pooled, winners):
        return conv_forward(x, Wt, b, kh, kw, padH, padW, poolH, poolW)

    @checked
    def conv_backward(self, x, H, W, C, Wt, Out, kh, kw, padH, padW, poolH, poolW,
                      dPooled, winners, dW, db, dx):
        return conv_backward(x, Wt, dPooled, winners, kh, kw, padH, padW, poolH, poolW,
                             dx is not None)

    @checked
    def lstm_forward(self, x, T, I, H, W_ih, W_hh, b, out, gates, c, tc, hPrev):
        return lstm_forward(x, W_ih, W_hh, b)

    @checked
    def lstm_backward(self, x, T, I, H, W_ih, W_hh, gates, c, tc, hPrev, dOut,
                      dW_ih, dW_hh, db, dx):
        return lstm_backward(x, W_ih, W_hh, gates, c, tc, hPrev, dOut)

    @checked
    def sigmoid(self, x, n, y):
        return sigmoid(x)

    @checked
    def tanh(self, x, n, y):
        return np.tanh(x)

    @checked
    def detmath_exp(self, x, n, y):
        return np.exp(x)

    @checked
    def detmath_log(self, x, n, y):
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.log(x)

    @checked
    def ctc(self, logits, T, K, target, L, scale, loss, dlogits):
        return ctc(logits, target, scale)

    @checked
    def model_sizes(self, cfg, nTensors, sizes):
        shapes = tensor_shapes(cfg)
        counts = np.array([int(np.prod(s)) for s in shapes], np.int64)
        return np.int32(len(shapes)), counts

    @checked
    def step_gradients(self, cfg, params, B, widths, images, targetLens, targets,
                       grads, losses, batchLoss):
        H, C = int(cfg[0]), int(cfg[1])
        total, lines, at_px, at_lab = None, [], 0, 0
        for w, n in zip(widths.tolist(), targetLens.tolist()):
            image = images[at_px:at_px + H * w * C].reshape(H, w, C)
            loss, g = line_gradients(cfg, params, image, targets[at_lab:at_lab + n], 1.0 / B)
            flat = np.concatenate([t.reshape(-1) for t in g])
            total = flat if total is None else total + flat    # in line order, no +0 start
            lines.append(loss)
            at_px, at_lab = at_px + H * w * C, at_lab + n
        finite = sum((v for v in lines if np.isfinite(v)), 0.0)
        return total, np.array(lines, F64), np.float64(finite / B)

    @checked
    def clip_gradients(self, grads, sizes, nTensors, limit, enabled, norm):
        at, total = 0, 0.0
        for n in sizes.tolist():
            g = grads[at:at + n]
            total += float(np.dot(g, g))
            at += n
        value = np.sqrt(total)
        if enabled and value > limit:
            grads *= F32(limit / (value + 1e-6))
        return np.float64(value)

    @checked
    def adamw(self, p, m, v, g, n, lr, beta1, beta2, eps, wd, decay, b1t, b2t):
        if decay:
            p *= F32(1 - lr * wd)
        m += F32(1 - beta1) * (g - m)
        v[...] = v * F32(beta2) + F32(1 - beta2) * (g * g)
        step = F32(lr / (1 - b1t))
        p -= step * (m / (np.sqrt(v) / F32(np.sqrt(1 - b2t)) + F32(eps)))
