"""The argument checks of the example ports: docs/port-abi.md, "The error contract".

One function per entry point, named like the port's method and taking the same arguments; it
says whether the ABI allows the call. `@checked` puts it in front of the method: a call it
refuses returns CRNN_E_ARG (-1) before anything is written. The gate's adapter has already
answered a NULL the ABI does not allow and a size that gives a buffer a negative extent
(docs/python-ports.md); everything else is the port's to check.
"""
import functools

import numpy as np

E_ARG = -1          # CRNN_E_ARG


def checked(method):
    """The port's `method` behind the check of the same name."""
    check = globals()[method.__name__]

    @functools.wraps(method)
    def entry(self, *args):
        return method(self, *args) if check(*args) else E_ARG
    return entry


def pool_extent(n, k, pad, pool):
    """The pooled extent of one axis of a conv block (docs/numerics.md, "Convolution block"):
    (n + 2 pad - k + 1) // pool; 0 for an axis the ABI refuses (n, k or pool below 1, pad
    below 0, the kernel larger than the padded input, no whole pool window)."""
    if min(n, k, pool) < 1 or pad < 0:
        return 0
    return max((n + 2 * pad - k + 1) // pool, 0)


def labels(a, K):
    """Every label in 1..K-1 (0 is the blank)."""
    return bool(np.all((a >= 1) & (a < K)))


def model(cfg):
    """(blocks, classes) of a config vector the ABI allows, else None: at least one conv block,
    each with sizes the conv rules allow and a pooled row, at least one LSTM layer, a hidden
    size and a class count of at least 1."""
    cfg = [int(v) for v in cfg]
    H, C, nb = cfg[:3]
    if nb < 1 or C < 1:
        return None
    blocks = [cfg[3 + 7 * k:10 + 7 * k] for k in range(nb)]
    for out, kh, kw, padH, padW, poolH, poolW in blocks:
        H = pool_extent(H, kh, padH, poolH)
        if H < 1 or min(out, kw, poolW) < 1 or padW < 0:
            return None
    nLstm, hidden, classes = cfg[3 + 7 * nb:6 + 7 * nb]
    return (blocks, classes) if min(nLstm, hidden, classes) >= 1 else None


def columns(blocks, width):
    """The pooled columns a line `width` wide leaves after the conv blocks (0: none)."""
    for _, _, kw, _, padW, _, poolW in blocks:
        width = pool_extent(width, kw, padW, poolW)
    return width


# ---- one check per entry point ----------------------------------------------------------

def dot16(a, b, n, out):
    return n >= 0


def linear_forward(x, W, b, T, I, O, y):
    return min(T, I, O) >= 0


def linear_backward(x, W, dY, T, I, O, dx, dW, db):
    return min(T, I, O) >= 0


def conv_geometry(H, W, C, Out, kh, kw, padH, padW, poolH, poolW):
    """At least one channel in and out and a pooled cell."""
    return (min(C, Out) >= 1
            and min(pool_extent(H, kh, padH, poolH), pool_extent(W, kw, padW, poolW)) >= 1)


def conv_forward(x, H, W, C, Wt, b, Out, kh, kw, padH, padW, poolH, poolW, conv, pooled,
                 winners):
    return conv_geometry(H, W, C, Out, kh, kw, padH, padW, poolH, poolW)


def conv_backward(x, H, W, C, Wt, Out, kh, kw, padH, padW, poolH, poolW, dPooled, winners,
                  dW, db, dx):
    """The forward's geometry, and every winner -1 or a cell of its own window and channel:
    winner = (cy * Wc + cx) * Out + o with (cy // poolH, cx // poolW) its window."""
    if not conv_geometry(H, W, C, Out, kh, kw, padH, padW, poolH, poolW):
        return False
    Wc = W + 2 * padW - kw + 1
    oy, ox, o = np.indices(winners.shape)
    w = winners.astype(np.int64)
    cell, channel = np.divmod(w, Out)
    cy, cx = np.divmod(cell, Wc)
    own = (w >= 0) & (channel == o) & (cy // poolH == oy) & (cx // poolW == ox)
    return bool(np.all(own | (w == -1)))


def lstm_forward(x, T, I, H, W_ih, W_hh, b, out, gates, c, tc, hPrev):
    return min(T, I) >= 0 and H >= 1


def lstm_backward(x, T, I, H, W_ih, W_hh, gates, c, tc, hPrev, dOut, dW_ih, dW_hh, db, dx):
    return min(T, I) >= 0 and H >= 1


def sigmoid(x, n, y):
    return n >= 0


tanh = detmath_exp = detmath_log = sigmoid


def ctc(logits, T, K, target, L, scale, loss, dlogits):
    """Labels in 1..K-1 and every logit finite (NaN or an infinity is refused)."""
    return (min(T, L) >= 0 and K >= 1 and labels(target, K)
            and bool(np.all(np.isfinite(logits))))


def model_sizes(cfg, nTensors, sizes):
    return model(cfg) is not None


def step_gradients(cfg, params, B, widths, images, targetLens, targets, grads, losses,
                   batchLoss):
    """A valid model, at least one line, each leaving a pooled column, no target length below
    0, and every label in 1..classes-1."""
    m = model(cfg)
    if m is None or B < 1:
        return False
    blocks, classes = m
    return (all(columns(blocks, w) >= 1 for w in widths.tolist())
            and bool(np.all(targetLens >= 0)) and labels(targets, classes))


def clip_gradients(grads, sizes, nTensors, limit, enabled, norm):
    """No tensor size below 0; `enabled` 0 or 1; when enabled, a limit of at least 0 (not
    NaN: every comparison with NaN is false)."""
    return (nTensors >= 0 and bool(np.all(sizes >= 0)) and enabled in (0, 1)
            and (not enabled or limit >= 0))


def adamw(p, m, v, g, n, lr, beta1, beta2, eps, wd, decay, b1t, b2t):
    """b1t and b2t in [0, 1): at 1 the bias correction divides by 0 (and NaN is refused)."""
    return n >= 0 and decay in (0, 1) and 0 <= b1t < 1 and 0 <= b2t < 1
