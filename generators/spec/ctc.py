"""CTC loss of one line and its logit gradient, bit-exact double (docs/backward.md, "CTC loss").

Blank is class 0, targets use 1..K-1. Everything is binary64 with the DetMath exp and log
(generators/spec/detmath.py), so C and NumPy give the same bits:

1. log softmax per step: m = max logit (the first one: replaced only by a greater); s = +0, then s = s + exp(z[k] - m) for k ascending;
   lp[k] = (z[k] - m) - log(s).
2. alpha/beta over the 2L+1 blank-extended entries (ext[2i] = 0, ext[2i+1] = target[i]), both
   including their own step's emission:
       alpha[0][s] = lp[0][ext[s]] for s < 2, -inf otherwise;
       alpha[t][s] = logadd(logadd(alpha[t-1][s], alpha[t-1][s-1]), alpha[t-1][s-2]) + lp[t][ext[s]]
       beta[T-1][s] = lp[T-1][ext[s]] for s >= S-2, -inf otherwise;
       beta[t][s]  = logadd(logadd(beta[t+1][s], beta[t+1][s+1]), beta[t+1][s+2]) + lp[t][ext[s]]
   A missing predecessor (s-1 < 0, s+1 >= S) is -inf, and so is the skip term unless the skip
   joins two different non-blank labels (ext[s] != 0 and ext[s] != ext[s-2] for alpha,
   ext[s+2] != 0 and ext[s+2] != ext[s] for beta).
3. logP = logadd(alpha[T-1][S-1], alpha[T-1][S-2]) (S = 1, an empty target: alpha[T-1][0]);
   loss = -logP. logP = -inf (no alignment, or T = 0) gives loss +inf and an all-+0 gradient.
4. acc[t][k] = -inf, then acc = logadd(acc, alpha[t][s] + beta[t][s]) for the entries s with
   ext[s] = k in ascending s. Because alpha and beta both include the emission lp[t][ext[s]],
   alpha + beta is log(occupancy * P) + lp, hence the subtraction of lp:
       dlogits[t][k] = float32(scale * (exp(lp[t][k]) - exp((acc[t][k] - lp[t][k]) - logP)))

logadd(a, b) orders its arguments (hi = the larger, lo = the smaller) and returns hi when lo is
-inf or lo - hi < -40, else hi + log(1 + exp(lo - hi)).

The arrays are evaluated a whole time step (alpha, beta) or a whole line (softmax, gradient) at
a time; every element is the same sequence of double operations the scalar C code performs.
Logits must be finite.
"""
from __future__ import annotations

import numpy as np

from . import detmath

NEG_INF = -np.inf
CUT = -40.0


def logadd(a, b) -> np.ndarray:
    """hi + log(1 + exp(lo - hi)) with hi/lo the larger/smaller; hi when lo is -inf or
    lo - hi < -40. Element-wise on float64 arrays."""
    a = np.asarray(a, np.float64)
    b = np.asarray(b, np.float64)
    hi = np.maximum(a, b)
    lo = np.minimum(a, b)
    with np.errstate(invalid="ignore"):
        d = lo - hi                       # NaN when both are -inf: masked below
        keep = (lo == NEG_INF) | (d < CUT)
        d = np.where(keep, 0.0, d)
        r = hi + detmath.log(1.0 + detmath.exp(d))
    return np.where(keep, hi, r)


def log_softmax(logits) -> np.ndarray:
    """lp[t][k] = (z[t][k] - m[t]) - log(s[t]), classes summed in ascending order."""
    z = np.asarray(logits, np.float32).astype(np.float64)
    m = z[:, 0].copy()                   # the first maximum (decides +0 versus -0)
    for k in range(1, z.shape[1]):
        m = np.where(z[:, k] > m, z[:, k], m)
    ez = detmath.exp(z - m[:, None])     # element-wise, so one call for every class
    s = np.zeros(z.shape[0])
    for k in range(z.shape[1]):
        s = s + ez[:, k]
    return (z - m[:, None]) - detmath.log(s)[:, None]


def extend(target) -> np.ndarray:
    ext = np.zeros(2 * len(target) + 1, np.int64)
    ext[1::2] = target
    return ext


def _shift(a, n):
    """a shifted along its last axis, right by n (n > 0: out[s] = a[s-n]) or left (n < 0:
    out[s] = a[s-n]); -inf fill."""
    out = np.full_like(a, NEG_INF)
    if n > 0:
        out[..., n:] = a[..., :-n]
    else:
        out[..., :n] = a[..., -n:]
    return out


def alpha_beta(lp, ext):
    """-> (alpha[T][S], beta[T][S]), both including their own step's emission."""
    T, S = lp.shape[0], len(ext)
    e = lp[:, ext]
    skip = np.zeros(S, bool)            # alpha: s-2 -> s allowed
    skip[2:] = (ext[2:] != 0) & (ext[2:] != ext[:-2])
    skip_b = np.zeros(S, bool)          # beta: s -> s+2 allowed
    skip_b[:-2] = skip[2:]
    alpha = np.full((T, S), NEG_INF)
    beta = np.full((T, S), NEG_INF)
    alpha[0, :min(2, S)] = e[0, :min(2, S)]
    beta[T - 1, max(0, S - 2):] = e[T - 1, max(0, S - 2):]
    # the two recursions are independent: alpha[t] and beta[T-1-t] go through one logadd
    # (alpha's S entries, then beta's), element by element the same operations
    skip2 = np.concatenate([skip, skip_b])
    for t in range(1, T):
        a, bn = alpha[t - 1], beta[T - t]
        one = np.concatenate([_shift(a, 1), _shift(bn, -1)])
        two = np.where(skip2, np.concatenate([_shift(a, 2), _shift(bn, -2)]), NEG_INF)
        r = logadd(logadd(np.concatenate([a, bn]), one), two) + \
            np.concatenate([e[t], e[T - 1 - t]])
        alpha[t], beta[T - 1 - t] = r[:S], r[S:]
    return alpha, beta


def _check(logits, target):
    z = np.asarray(logits, np.float32)
    if z.ndim != 2 or z.shape[1] < 1:
        raise ValueError(f"logits must be [T][K], got shape {z.shape}")
    t = np.asarray(target, np.int64).ravel()
    if np.any((t < 1) | (t >= z.shape[1])):
        raise ValueError("target labels must lie in 1..K-1 (blank = 0)")
    if not np.all(np.isfinite(z)):
        raise ValueError("logits must be finite")
    return z, t


def ctc(logits, target, scale=1.0):
    """-> (loss: float (+inf when no alignment), dlogits[T][K] float32)."""
    z, target = _check(logits, target)
    T, K = z.shape
    scale = float(scale)
    zero = np.zeros((T, K), np.float32)
    if T == 0:
        return float("inf"), zero
    lp = log_softmax(z)
    ext = extend(target)
    S = len(ext)
    alpha, beta = alpha_beta(lp, ext)
    logP = alpha[T - 1, 0] if S == 1 else logadd(alpha[T - 1, S - 1], alpha[T - 1, S - 2])
    logP = float(logP)
    if logP == NEG_INF:
        return float("inf"), zero
    acc = np.full((T, K), NEG_INF)
    ab = alpha + beta
    # per class in ascending s; the r-th entries of all classes go through one logadd
    occurrence = np.array([np.count_nonzero(ext[:s] == ext[s]) for s in range(S)])
    for r in range(occurrence.max() + 1):
        ss = np.flatnonzero(occurrence == r)         # entries of distinct classes
        acc[:, ext[ss]] = logadd(acc[:, ext[ss]], ab[:, ss])
    with np.errstate(invalid="ignore"):
        occ = detmath.exp((acc - lp) - logP)
    d = scale * (detmath.exp(lp) - occ)
    return -logP, d.astype(np.float32)


def ctc_many(lines) -> list:
    """ctc() of many lines at once: lines = [(logits[T][K], target, scale)] -> [(loss, dlogits)].

    Element by element the operations ctc() performs on each line alone; the lines of one K
    go through them together (the fuzzer's and the fixtures' `many` cases hold dozens of
    tiny lines). Shorter lines are padded to the longest T and extended target: a padded
    entry's emission is -inf, so it stays -inf and reaches no real entry (logadd(x, -inf)
    is x, as a missing predecessor is in ctc()); padded steps are computed and dropped. The
    backward recursion runs on each line's own reversed time, so every line starts at u = 0."""
    out = [None] * len(lines)
    groups = {}
    for i, (logits, target, scale) in enumerate(lines):
        z, t = _check(logits, target)
        if z.shape[0] == 0:
            out[i] = ctc(z, t, scale)
        else:
            groups.setdefault(z.shape[1], []).append((i, z, t, float(scale)))
    for group in groups.values():
        for i, result in zip([g[0] for g in group], _ctc_group(group)):
            out[i] = result
    return out


def _ctc_group(group) -> list:
    N, K = len(group), group[0][1].shape[1]
    Ts = np.array([z.shape[0] for _, z, _, _ in group])
    Ss = np.array([2 * len(t) + 1 for _, _, t, _ in group])
    T, S = int(Ts.max()), int(Ss.max())
    z = np.zeros((N, T, K), np.float32)
    ext = np.zeros((N, S), np.int64)
    for n, (_, zn, tn, _) in enumerate(group):
        z[n, :Ts[n]] = zn
        ext[n, :Ss[n]] = extend(tn)
    real = np.arange(S)[None, :] < Ss[:, None]
    lp = log_softmax(z.reshape(N * T, K)).reshape(N, T, K)
    e = np.where(real[:, None, :], np.take_along_axis(lp, ext[:, None, :], axis=2), NEG_INF)
    back = np.clip(Ts[:, None] - 1 - np.arange(T)[None, :], 0, None)     # u -> t = T_n-1-u
    e_rev = np.take_along_axis(e, back[:, :, None], axis=1)
    skip = np.zeros((N, S), bool)
    skip[:, 2:] = (ext[:, 2:] != 0) & (ext[:, 2:] != ext[:, :-2])
    skip_b = np.zeros((N, S), bool)
    skip_b[:, :-2] = skip[:, 2:]
    alpha = np.full((N, T, S), NEG_INF)
    beta_rev = np.full((N, T, S), NEG_INF)          # beta_rev[n][u] = beta[n][T_n-1-u]
    alpha[:, 0, :2] = e[:, 0, :2]
    last = np.arange(S)[None, :] >= Ss[:, None] - 2
    beta_rev[:, 0] = np.where(last, e_rev[:, 0], NEG_INF)
    skip2 = np.concatenate([skip, skip_b], axis=1)
    for t in range(1, T):
        a, bn = alpha[:, t - 1], beta_rev[:, t - 1]
        one = np.concatenate([_shift(a, 1), _shift(bn, -1)], axis=1)
        two = np.where(skip2, np.concatenate([_shift(a, 2), _shift(bn, -2)], axis=1),
                       NEG_INF)
        r = logadd(logadd(np.concatenate([a, bn], axis=1), one), two) + \
            np.concatenate([e[:, t], e_rev[:, t]], axis=1)
        alpha[:, t], beta_rev[:, t] = r[:, :S], r[:, S:]
    rows = np.arange(N)
    aT = alpha[rows, Ts - 1]                          # each line's last step
    one = Ss == 1
    logP = np.where(one, aT[:, 0], logadd(aT[rows, Ss - 1], aT[rows, np.maximum(Ss - 2, 0)]))
    beta = np.take_along_axis(beta_rev, back[:, :, None], axis=1)
    ab = alpha + beta
    acc = np.full((N, T, K), NEG_INF)
    same = ext[:, :, None] == ext[:, None, :]
    below = np.tri(S, k=-1, dtype=bool).T[None]       # [s'][s]: s' < s
    occurrence = np.sum(same & below & real[:, :, None] & real[:, None, :], axis=1)
    for r in range(int(occurrence[real].max()) + 1):
        ns, ss = np.nonzero((occurrence == r) & real)     # entries of distinct classes per line
        ks = ext[ns, ss]
        acc[ns, :, ks] = logadd(acc[ns, :, ks], ab[ns, :, ss])
    with np.errstate(invalid="ignore", over="ignore"):
        occ = detmath.exp((acc - lp) - logP[:, None, None])
        scale = np.array([g[3] for g in group])[:, None, None]
        d = scale * (detmath.exp(lp) - occ)
    results = []
    for n in range(N):
        if logP[n] == NEG_INF:
            results.append((float("inf"), np.zeros((Ts[n], K), np.float32)))
        else:
            results.append((-float(logP[n]), d[n, :Ts[n]].astype(np.float32)))
    return results

