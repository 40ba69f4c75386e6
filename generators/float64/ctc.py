"""Float64 reference: CTC loss of one line (Graves et al. 2006), blank = 0.

Log domain with an exact logaddexp (no cut); alpha and beta both include their own step's
emission. loss = -logP; no alignment -> +inf and a zero gradient.
dlogits = scale * (softmax - occupancy), occupancy[t][k] = exp(acc[t][k] - lp[t][k] - logP).
exp, log and logaddexp are elementary.py's (DetMath-based, a few ulp) and the softmax
denominator a compensated sum (exactsum), so the bits do not depend on the machine.
"""
from __future__ import annotations

import numpy as np

from . import exactsum as xs
from .elementary import exp, log, logaddexp

NEG_INF = -np.inf


def log_softmax(logits):
    z = np.asarray(logits, np.float64)
    m = z.max(axis=-1, keepdims=True)
    return (z - m) - log(xs.total(exp(z - m), axis=-1))[..., None]


def _extend(target):
    ext = np.zeros(2 * len(target) + 1, np.int64)
    ext[1::2] = target
    return ext


def _skip_allowed(ext):
    """skip[s]: the step s-2 -> s is allowed (s non-blank and differs from s-2)."""
    skip = np.zeros(len(ext), bool)
    skip[2:] = (ext[2:] != 0) & (ext[2:] != ext[:-2])
    return skip


def _shift(a, n, fill=NEG_INF):
    """a shifted right by n (n > 0) or left by -n, filling with -inf."""
    out = np.full_like(a, fill)
    if n > 0:
        out[n:] = a[:-n]
    else:
        out[:n] = a[-n:]
    return out


def alpha_beta(lp, ext):
    T, S = lp.shape[0], len(ext)
    skip = _skip_allowed(ext)
    e = lp[:, ext]  # emission of entry s at step t
    alpha = np.full((T, S), NEG_INF)
    beta = np.full((T, S), NEG_INF)
    alpha[0, :min(2, S)] = e[0, :min(2, S)]
    for t in range(1, T):
        a = alpha[t - 1]
        two = np.where(skip, _shift(a, 2), NEG_INF)
        alpha[t] = logaddexp(logaddexp(a, _shift(a, 1)), two) + e[t]
    beta[T - 1, max(0, S - 2):] = e[T - 1, max(0, S - 2):]
    skip_from = np.zeros(S, bool)  # s -> s+2 allowed iff skip[s+2]
    skip_from[:-2] = skip[2:]
    for t in range(T - 2, -1, -1):
        bn = beta[t + 1]
        two = np.where(skip_from, _shift(bn, -2), NEG_INF)
        beta[t] = logaddexp(logaddexp(bn, _shift(bn, -1)), two) + e[t]
    return alpha, beta


def ctc(logits, target, scale=1.0):
    """-> (loss: float, dlogits[T][K] float64)."""
    lp = log_softmax(logits)
    T, K = lp.shape
    target = np.asarray(target, np.int64).ravel()
    if np.any((target < 1) | (target >= K)):
        raise ValueError("target labels must lie in 1..K-1 (blank = 0)")
    ext = _extend(target)
    S = len(ext)
    if T == 0:
        return np.inf, np.zeros((T, K))
    alpha, beta = alpha_beta(lp, ext)
    last = alpha[T - 1]
    logP = float(last[0] if S == 1 else logaddexp(last[S - 2], last[S - 1]))
    if logP == NEG_INF:
        return np.inf, np.zeros((T, K))
    acc = np.full((T, K), NEG_INF)
    ab = alpha + beta
    for s in range(S):
        acc[:, ext[s]] = logaddexp(acc[:, ext[s]], ab[:, s])
    dlogits = scale * (exp(lp) - exp(acc - lp - logP))
    return float(-logP), dlogits
