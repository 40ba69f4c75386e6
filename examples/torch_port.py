"""A port of crnn-v0's training numerics in PyTorch float32 (docs/python-ports.md).

torch.nn.functional for the layers (conv2d, max_pool2d with indices, linear, the LSTM cell's
gates, ctc_loss in float64 as the spec requires) and autograd for their backward (the LSTM's
by hand: the ABI gives its backward the saved states, not the bias); AdamW by
hand in torch's float32 ops. Each method returns torch tensors, which the gate reads through
DLPack. The whole-model step composes the same functions.

    crnn-conformance gate --port examples/torch_port.py:Port --tiers float64,pytorch
"""
import torch
import torch.nn.functional as F

from _checks import checked     # the ABI's argument checks (docs/port-abi.md), shared
from _model import model_config, tensor_shapes   # the ABI's cfg vector, shared

F32, F64 = torch.float32, torch.float64


def t(a, dtype=None):
    """A NumPy argument as a tensor of its own (the argument itself is read-only)."""
    return torch.tensor(a, dtype=dtype, device=DEVICE[0])


DEVICE = ["cpu"]


def host(x):
    return x.detach().to("cpu")


def linear_forward(x, W, b):
    return F.linear(x, W, b)


def linear_backward(x, W, dY):
    x, W = x.clone().requires_grad_(), W.clone().requires_grad_()
    b = torch.zeros(W.shape[0], dtype=F32, device=x.device, requires_grad=True)
    F.linear(x, W, b).backward(dY)
    return x.grad, W.grad, b.grad


def _weights(Wt, C, kh, kw):
    """W[Out][KPadded] (taps (ky, kx, c) then zero columns) as conv2d's [Out][C][kh][kw]."""
    return Wt[:, :kh * kw * C].reshape(-1, kh, kw, C).permute(0, 3, 1, 2)


def _conv(x, w, b, padH, padW):
    """x[H][W][C] -> conv[Hc][Wc][Out]."""
    y = F.conv2d(x.permute(2, 0, 1)[None], w, b, padding=(padH, padW))
    return y[0].permute(1, 2, 0)


def conv_forward(x, Wt, b, kh, kw, padH, padW, poolH, poolW):
    C, Out = x.shape[2], Wt.shape[0]
    conv = _conv(x, _weights(Wt, C, kh, kw), b, padH, padW)
    Hc, Wc = conv.shape[:2]
    relu = torch.where(conv > 0, conv, torch.zeros_like(conv))   # NaN, -0 and below: +0
    pooled, idx = F.max_pool2d(relu.permute(2, 0, 1)[None], (poolH, poolW), return_indices=True)
    pooled, idx = pooled[0].permute(1, 2, 0), idx[0].permute(1, 2, 0)
    o = torch.arange(Out, device=x.device)
    winners = torch.where(pooled > 0, idx * Out + o, torch.full_like(idx, -1)).to(torch.int32)
    return conv.reshape(Hc * Wc, Out), pooled.contiguous(), winners


def conv_backward(x, Wt, dPooled, winners, kh, kw, padH, padW, poolH, poolW, want_dx):
    C, Out = x.shape[2], Wt.shape[0]
    x = x.clone().requires_grad_(want_dx)
    w = _weights(Wt, C, kh, kw).clone().requires_grad_()
    b = torch.zeros(Out, dtype=F32, device=x.device, requires_grad=True)
    conv = _conv(x, w, b, padH, padW)
    dC = torch.zeros(conv.numel(), dtype=F32, device=x.device)
    live = winners.reshape(-1) >= 0
    dC[winners.reshape(-1)[live].long()] = dPooled.reshape(-1)[live]
    conv.backward(dC.reshape(conv.shape))
    dW = torch.zeros_like(Wt)
    dW[:, :kh * kw * C] = w.grad.permute(0, 2, 3, 1).reshape(Out, -1)
    return dW, b.grad, x.grad if want_dx else None


def _lstm(x, W_ih, W_hh, b):
    """The recurrence: out[T][2H] and the saved states of docs/numerics.md."""
    T, H = x.shape[0], W_hh.shape[2]
    outs, saved = [None, None], []
    for d in (0, 1):
        h = c = torch.zeros(H, dtype=F32, device=x.device)
        hs, st = [None] * T, {"gates": [None] * T, "c": [None] * T, "tc": [None] * T,
                              "hPrev": [None] * T}
        xw = F.linear(x, W_ih[d])
        for step in (range(T) if d == 0 else range(T - 1, -1, -1)):
            z = xw[step] + F.linear(h, W_hh[d]) + b[d]
            i, f, g, o = z.chunk(4)
            i, f, g, o = torch.sigmoid(i), torch.sigmoid(f), torch.tanh(g), torch.sigmoid(o)
            st["hPrev"][step] = h
            c = f * c + i * g
            tc = torch.tanh(c)
            h = o * tc
            st["gates"][step], st["c"][step], st["tc"][step] = torch.cat([i, f, g, o]), c, tc
            hs[step] = h
        outs[d] = torch.stack(hs)
        saved.append({k: torch.stack(v) for k, v in st.items()})
    states = [torch.stack([saved[0][k], saved[1][k]]) for k in ("gates", "c", "tc", "hPrev")]
    return torch.cat(outs, dim=1), states


def lstm_forward(x, W_ih, W_hh, b):
    T, H = x.shape[0], W_hh.shape[2]
    if T == 0:                                    # (torch.stack takes no empty list)
        empty = lambda *shape: torch.zeros(shape, dtype=F32, device=x.device)  # noqa: E731
        return empty(0, 2 * H), empty(2, 0, 4 * H), empty(2, 0, H), empty(2, 0, H), empty(2, 0, H)
    with torch.no_grad():
        out, states = _lstm(x, W_ih, W_hh, b)
    return (out, *states)


def lstm_backward(x, W_ih, W_hh, gates, c, tc, hPrev, dOut):
    """The recurrence backward by hand in torch ops (the ABI gives the saved states, not the
    bias, so autograd cannot rebuild the forward)."""
    T, H = x.shape[0], W_hh.shape[2]
    dz = torch.zeros(T, 8 * H, dtype=F32, device=x.device)
    for d in (0, 1):
        dh_rec = dc_next = torch.zeros(H, dtype=F32, device=x.device)
        for step in (range(T - 1, -1, -1) if d == 0 else range(T)):
            i, f, g, o = gates[d, step].chunk(4)
            prev = step - 1 if d == 0 else step + 1
            c_prev = c[d, prev] if 0 <= prev < T else torch.zeros_like(dh_rec)
            dh = dOut[step, d * H:(d + 1) * H] + dh_rec
            dc = dc_next + dh * o * (1 - tc[d, step] * tc[d, step])
            dc_next = dc * f
            dz[step, d * 4 * H:(d + 1) * 4 * H] = torch.cat([
                dc * g * (i * (1 - i)), dc * c_prev * (f * (1 - f)),
                dc * i * (1 - g * g), dh * tc[d, step] * (o * (1 - o))])
            dh_rec = dz[step, d * 4 * H:(d + 1) * 4 * H] @ W_hh[d]
    dzs = dz.reshape(T, 2, 4 * H).transpose(0, 1)
    dW_ih = torch.stack([dzs[d].T @ x for d in (0, 1)])
    dW_hh = torch.stack([dzs[d].T @ hPrev[d] for d in (0, 1)])
    return dW_ih, dW_hh, dzs.sum(dim=1), dz @ W_ih.reshape(8 * H, -1)


def ctc(logits, target, scale):
    """loss (float) and dlogits[T][K] float32: ctc_loss in float64 through autograd."""
    T, K = logits.shape
    if T == 0:
        return float("inf"), torch.zeros(T, K, dtype=F32)
    z = logits.to("cpu", F64).clone().requires_grad_()
    lp = F.log_softmax(z, dim=1)
    loss = F.ctc_loss(lp[:, None], target.to("cpu", torch.long)[None],
                      torch.tensor([T]), torch.tensor([target.numel()]), blank=0,
                      reduction="sum", zero_infinity=False)
    if not torch.isfinite(loss):
        return float("inf"), torch.zeros(T, K, dtype=F32)
    loss.backward()
    return float(loss), (scale * z.grad).to(F32)


def line_gradients(cfg, P, image, target, scale):
    """(loss, [gradient per tensor]) of one line, composing the layer functions above."""
    _, _, blocks, nl, _, _ = model_config(cfg)
    x, saved = image, []
    for k, (_, kh, kw, padH, padW, poolH, poolW) in enumerate(blocks):
        _, pooled, winners = conv_forward(x, P[2 * k], P[2 * k + 1], kh, kw, padH, padW,
                                          poolH, poolW)
        saved.append((x, winners))
        x = pooled
    Hp, _, C = x.shape
    seq, states, at = x.permute(1, 0, 2).reshape(x.shape[1], Hp * C), [], 2 * len(blocks)
    for _ in range(nl):
        W_ih, W_hh, b = (torch.stack([P[at + 3 * d + j] for d in (0, 1)]) for j in range(3))
        result = lstm_forward(seq, W_ih, W_hh, b)
        states.append((seq, W_ih, W_hh, result))
        seq, at = result[0], at + 6
    logits = linear_forward(seq, P[at], P[at + 1])
    loss, dlogits = ctc(logits, target, scale)
    grads = [torch.zeros_like(p) for p in P]
    if loss == float("inf"):
        return loss, grads
    dseq, grads[at], grads[at + 1] = linear_backward(seq, P[at], dlogits.to(seq.device))
    for n in range(nl - 1, -1, -1):
        inp, W_ih, W_hh, (_, gates, c, tc, hprev) = states[n]
        at -= 6
        dW_ih, dW_hh, db, dseq = lstm_backward(inp, W_ih, W_hh, gates, c, tc, hprev, dseq)
        for d in (0, 1):
            grads[at + 3 * d:at + 3 * d + 3] = [dW_ih[d], dW_hh[d], db[d]]
    dmap = dseq.reshape(dseq.shape[0], Hp, C).permute(1, 0, 2)
    for k in range(len(blocks) - 1, -1, -1):
        _, kh, kw, padH, padW, poolH, poolW = blocks[k]
        xin, winners = saved[k]
        grads[2 * k], grads[2 * k + 1], dmap = conv_backward(
            xin, P[2 * k], dmap, winners, kh, kw, padH, padW, poolH, poolW, k > 0)
    return loss, grads


class Port:
    """The ABI's entry points over torch tensors; configs: the devices torch has."""

    configs = ["cpu"] + (["cuda:0"] if torch.cuda.is_available() else [])
    threads = [1, 2]

    def set_config(self, name):
        DEVICE[0] = name

    def set_threads(self, n):
        torch.set_num_threads(n)

    @checked
    def dot16(self, a, b, n, out):
        return host(torch.dot(t(a), t(b)))

    @checked
    def linear_forward(self, x, W, b, T, I, O, y):
        return host(linear_forward(t(x), t(W), t(b)))

    @checked
    def linear_backward(self, x, W, dY, T, I, O, dx, dW, db):
        return tuple(host(g) for g in linear_backward(t(x), t(W), t(dY)))

    @checked
    def conv_forward(self, x, H, W, C, Wt, b, Out, kh, kw, padH, padW, poolH, poolW,
                     conv, pooled, winners):
        with torch.no_grad():
            return tuple(host(r) for r in conv_forward(t(x), t(Wt), t(b), kh, kw, padH, padW,
                                                       poolH, poolW))

    @checked
    def conv_backward(self, x, H, W, C, Wt, Out, kh, kw, padH, padW, poolH, poolW,
                      dPooled, winners, dW, db, dx):
        grads = conv_backward(t(x), t(Wt), t(dPooled), t(winners), kh, kw, padH, padW,
                              poolH, poolW, dx is not None)
        return tuple(None if g is None else host(g) for g in grads)

    @checked
    def lstm_forward(self, x, T, I, H, W_ih, W_hh, b, out, gates, c, tc, hPrev):
        return tuple(host(r) for r in lstm_forward(t(x), t(W_ih), t(W_hh), t(b)))

    @checked
    def lstm_backward(self, x, T, I, H, W_ih, W_hh, gates, c, tc, hPrev, dOut,
                      dW_ih, dW_hh, db, dx):
        return tuple(host(g) for g in lstm_backward(*(t(a) for a in (x, W_ih, W_hh, gates, c,
                                                                      tc, hPrev, dOut))))

    @checked
    def sigmoid(self, x, n, y):
        return host(torch.sigmoid(t(x)))

    @checked
    def tanh(self, x, n, y):
        return host(torch.tanh(t(x)))

    @checked
    def detmath_exp(self, x, n, y):
        return host(torch.exp(t(x)))

    @checked
    def detmath_log(self, x, n, y):
        return host(torch.log(t(x)))

    @checked
    def ctc(self, logits, T, K, target, L, scale, loss, dlogits):
        value, grad = ctc(t(logits), t(target), scale)
        return torch.tensor(value, dtype=F64), host(grad)

    @checked
    def model_sizes(self, cfg, nTensors, sizes):
        shapes = tensor_shapes(cfg)
        counts = [int(torch.tensor(s).prod()) for s in shapes]
        return torch.tensor(len(shapes), dtype=torch.int32), torch.tensor(counts)

    @checked
    def step_gradients(self, cfg, params, B, widths, images, targetLens, targets,
                       grads, losses, batchLoss):
        H, C = int(cfg[0]), int(cfg[1])
        P, at = [], 0
        flat = t(params)
        for s in tensor_shapes(cfg):
            n = int(torch.tensor(s).prod())
            P.append(flat[at:at + n].reshape(s))
            at += n
        total, lines, px, lab = None, [], 0, 0
        for w, n in zip(widths.tolist(), targetLens.tolist()):
            image = t(images[px:px + H * w * C]).reshape(H, w, C)
            loss, g = line_gradients(cfg, P, image, t(targets[lab:lab + n]), 1.0 / B)
            g = torch.cat([x.reshape(-1) for x in g])
            total = g if total is None else total + g          # in line order
            lines.append(loss)
            px, lab = px + H * w * C, lab + n
        finite = sum((v for v in lines if v != float("inf")), 0.0)
        return host(total), torch.tensor(lines, dtype=F64), torch.tensor(finite / B, dtype=F64)

    @checked
    def clip_gradients(self, grads, sizes, nTensors, limit, enabled, norm):
        g, at, total = t(grads), 0, 0.0
        for n in sizes.tolist():
            total += float(torch.dot(g[at:at + n], g[at:at + n]))
            at += n
        value = total ** 0.5
        if enabled and value > limit:
            g *= torch.tensor(limit / (value + 1e-6), dtype=F32)
        return host(g), torch.tensor(value, dtype=F64)

    @checked
    def adamw(self, p, m, v, g, n, lr, beta1, beta2, eps, wd, decay, b1t, b2t):
        p_, m_, v_, g_ = t(p), t(m), t(v), t(g)
        if decay:
            p_.mul_(1 - lr * wd)
        m_.lerp_(g_, 1 - beta1)
        v_.mul_(beta2).addcmul_(g_, g_, value=1 - beta2)
        denom = (v_.sqrt() / (1 - b2t) ** 0.5).add_(eps)
        p_.addcdiv_(m_, denom, value=-lr / (1 - b1t))
        return host(p_), host(m_), host(v_)
