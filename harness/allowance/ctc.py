"""The CTC loss's error model (docs/tolerances.md, "CTC").

The port computes in binary64 and rounds the gradient to binary32 once. Its binary64 work
errs by at most a few roundings (or DetMath ulps) per entry and step of the recursions, each
relative to the magnitudes involved, and logadd's cut at -40 drops at most
log(1 + e^-40) = 4.3e-18 a logadd: binary64_bounds() carries that bound entry by entry
through the recursions, as the errors themselves travel, and gives one for the loss and one
per gradient element, evaluated per case. The float64 reference's own binary64 work (exact
logaddexp, libm exp and log) errs within the same bounds, so the allowance is twice them. The
gradient also carries its own binary32 rounding.

In the whole model (step) the logits carry binary32 errors; the gradient moves with them
through the CTC's Jacobian (the Hessian of the loss in the logits, times scale), computed here
exactly by forward-mode differentiation of the float64 recursion, and the loss by its gradient.
"""
from __future__ import annotations

import numpy as np
from ...generators.float64 import ctc as ctc64

from .errors import TINY2, U2, ULP, ULP_TINY, Err

U64 = 2.0 ** -53
ULP64 = 2 * U64           # one binary64 rounding (or DetMath ulp), relative
OPS_PER_STEP = 6          # binary64 roundings (and DetMath ulps) per entry per step
CUT = 3 * 4.3e-18         # logadd's cut at -40, three logadds per entry per step


def _recursion_bound(v, e, E_e, preds):
    """B[t][s]: a bound on the binary64 error of the log-domain recursion's entries v (alpha
    or beta, with t the order of visiting), each entry a logadd of its predecessors at the
    step before (`preds(t)`: [(shift, allowed[S])]) plus its emission e (error E_e). A logadd
    is a weighted mean in its arguments' errors (weights >= 0 summing to 1), so an entry errs
    by at most its largest predecessor's bound plus its own roundings: OPS_PER_STEP of them,
    relative to |v| + |e| + 1, and the cut."""
    T, S = v.shape
    fin = np.isfinite(v)
    own = np.where(fin, OPS_PER_STEP * ULP64 * (np.abs(np.where(fin, v, 0.0)) + np.abs(e) + 1.0)
                   + CUT + E_e, 0.0)
    B = np.zeros((T, S))
    B[0] = own[0]
    for t in range(1, T):
        prev = np.where(fin[t - 1], B[t - 1], 0.0)
        worst = prev.copy()
        for shift, allowed in preds:
            moved = np.zeros(S)
            if shift > 0:
                moved[shift:] = prev[:-shift]
            else:
                moved[:shift] = prev[-shift:]
            worst = np.maximum(worst, np.where(allowed, moved, 0.0))
        B[t] = np.where(fin[t], worst + own[t], 0.0)
    return B


def binary64_bounds(logits, target):
    """-> (E_loss, E_grad[T][K]): bounds on the binary64 error of one implementation of the
    CTC (absolute, log domain for the loss; of p - occ, the gradient at scale 1), in any of
    the recursions' legal orders: logP from alpha's last step or from beta's first.

    lp = (z - m) - log(s): z - m is exact, s (K exps within an ulp, K - 1 additions) errs by
    at most (K + 1) ulps relatively, log(s) by one ulp more, the subtraction by one of |lp|.
    alpha and beta: _recursion_bound. acc[k], a logadd over the n_k entries labelled k of
    alpha + beta: the largest entry's bound plus n_k logadds' roundings. The occupancy
    exp((acc - lp) - logP) then errs relatively by the exponent's error plus exp's ulp, p =
    exp(lp) by lp's plus an ulp, p - occ by those and its own rounding."""
    z = np.asarray(logits, np.float64)
    lp = ctc64.log_softmax(z)
    T, K = lp.shape
    ext = ctc64._extend(np.asarray(target, np.int64).ravel())
    S = len(ext)
    alpha, beta = ctc64.alpha_beta(lp, ext)
    log_s = -lp.max(1, keepdims=True)
    E_lp = ULP64 * ((K + 2) + np.abs(log_s) + np.abs(lp))                    # [T][K]
    e, E_e = lp[:, ext], E_lp[:, ext]
    skip = ctc64._skip_allowed(ext)
    skip_from = np.zeros(S, bool)
    skip_from[:-2] = skip[2:]
    every = np.ones(S, bool)
    Ba = _recursion_bound(alpha, e, E_e, [(1, every), (2, skip)])
    Bb = _recursion_bound(beta[::-1], e[::-1], E_e[::-1], [(-1, every), (-2, skip_from)])[::-1]
    ends = []
    for v, B, at in ((alpha, Ba, T - 1), (beta, Bb, 0)):
        cells = [s for s in ((S - 2, S - 1) if v is alpha else (0, 1)) if 0 <= s < S]
        fin = [s for s in cells if np.isfinite(v[at, s])]
        if fin:
            ends.append(max(B[at, s] for s in fin))
    logP = np.logaddexp.reduce(alpha[T - 1, max(0, S - 2):])
    if not np.isfinite(logP):
        return 0.0, np.zeros((T, K))
    E_loss = max(ends) + OPS_PER_STEP * ULP64 * (abs(logP) + 1.0) + CUT
    ab = alpha + beta
    fin = np.isfinite(ab)
    acc = np.full((T, K), -np.inf)
    E_acc, n = np.zeros((T, K)), np.zeros(K)
    for s in range(S):
        k = ext[s]
        acc[:, k] = np.logaddexp(acc[:, k], ab[:, s])
        E_acc[:, k] = np.maximum(E_acc[:, k], np.where(fin[:, s], Ba[:, s] + Bb[:, s] + ULP64 *
                                                       np.abs(np.where(fin[:, s], ab[:, s], 0.0)),
                                                       0.0))
        n[k] += 1
    live = np.isfinite(acc)
    a = np.where(live, acc, 0.0)
    x = (a - lp) - logP
    E_x = (E_acc + n * (OPS_PER_STEP * ULP64 * (np.abs(a) + 1.0) + CUT) + E_lp + E_loss
           + ULP64 * (np.abs(a - lp) + np.abs(x)))
    occ = np.exp(np.where(live, x, -np.inf))
    p = np.exp(lp)
    E_grad = p * (E_lp + ULP64) + occ * np.where(live, E_x + ULP64, 0.0) + ULP64 * np.abs(p - occ)
    return float(E_loss), E_grad


def jacobian(logits, target):
    """-> (dlogits at scale 1 [T][K], J [T][K][T*K] = d dlogits / d logits, loss) by
    forward-mode differentiation of the float64 CTC (ctc64's definitions)."""
    z = np.asarray(logits, np.float64)
    T, K = z.shape
    D = T * K
    target = np.asarray(target, np.int64).ravel()
    lp = ctc64.log_softmax(z)
    p = np.exp(lp)
    # d lp[t][k] / d z[t][j] = delta_kj - p[t][j]: tangents [T][K][D], block-diagonal in t
    dlp = np.zeros((T, K, D))
    for t in range(T):
        dlp[t, :, t * K:(t + 1) * K] = np.eye(K) - p[t][None, :]
    ext = ctc64._extend(target)
    S = len(ext)
    skip = ctc64._skip_allowed(ext)
    skip_from = np.zeros(S, bool)
    skip_from[:-2] = skip[2:]
    alpha, beta = ctc64.alpha_beta(lp, ext)
    da = np.zeros((T, S, D))
    db = np.zeros((T, S, D))
    de = dlp[:, ext]                                              # [T][S][D]
    da[0, :min(2, S)] = de[0, :min(2, S)]
    for t in range(1, T):
        da[t] = _lse_tangent(alpha[t - 1], da[t - 1], alpha[t] - lp[t, ext], (1, 2), skip) + de[t]
    db[T - 1, max(0, S - 2):] = de[T - 1, max(0, S - 2):]
    for t in range(T - 2, -1, -1):
        db[t] = _lse_tangent(beta[t + 1], db[t + 1], beta[t] - lp[t, ext], (-1, -2), skip_from) + de[t]
    last = alpha[T - 1, max(0, S - 2):]
    logP = np.logaddexp.reduce(last)
    if not np.isfinite(logP):
        return np.zeros((T, K)), np.zeros((T, K, D)), np.inf
    wP = np.exp(last - logP)
    dlogP = np.tensordot(wP, da[T - 1, max(0, S - 2):], axes=(0, 0))   # [D]
    ab = alpha + beta
    acc = np.full((T, K), -np.inf)
    for s in range(S):
        acc[:, ext[s]] = np.logaddexp(acc[:, ext[s]], ab[:, s])
    dacc = np.zeros((T, K, D))
    for s in range(S):
        with np.errstate(invalid="ignore"):
            w = np.where(np.isfinite(ab[:, s]), np.exp(ab[:, s] - acc[:, ext[s]]), 0.0)
        dacc[:, ext[s]] += w[:, None] * (da[:, s] + db[:, s])
    with np.errstate(invalid="ignore"):
        occ = np.where(np.isfinite(acc), np.exp(acc - lp - logP), 0.0)
    docc = occ[:, :, None] * (dacc - dlp - dlogP[None, None, :])
    dp = p[:, :, None] * dlp
    return p - occ, dp - docc, float(-logP)


def _lse_tangent(prev, dprev, out, shifts, skip):
    """Tangent of out[s] = logaddexp(prev[s], prev[s - 1], prev[s - 2] if skip[s]) (shifts
    (1, 2)), or of the mirrored beta recursion (shifts (-1, -2))."""
    S = len(prev)
    terms = [(prev, dprev)]
    for k, sh in enumerate(shifts):
        a = np.full(S, -np.inf)
        d = np.zeros_like(dprev)
        if sh > 0:
            a[sh:], d[sh:] = prev[:-sh], dprev[:-sh]
        else:
            a[:sh], d[:sh] = prev[-sh:], dprev[-sh:]
        if k == 1:
            a = np.where(skip, a, -np.inf)
        terms.append((a, d))
    res = np.zeros_like(dprev)
    for a, d in terms:
        with np.errstate(invalid="ignore"):
            w = np.where(np.isfinite(a) & np.isfinite(out), np.exp(a - out), 0.0)
        res += w[:, None] * d
    return res


def gradient(logits: Err, target, scale: float):
    """-> (loss Err (shape ()), dlogits Err [T][K]) for logits carrying errors (the step)."""
    v, J, loss = jacobian(logits.v, target)
    T, K = v.shape
    if not np.isfinite(loss):
        zero = Err.exact(np.zeros((T, K)))
        return Err.exact(np.array(np.inf)), zero
    E_loss, E_grad = binary64_bounds(logits.v, target)
    Jf = J.reshape(T * K, T * K) * scale
    J2, Ja = Jf * Jf, np.abs(Jf)
    flat = lambda a: np.broadcast_to(a, (T, K)).reshape(-1)
    dv = scale * v
    a = np.abs(dv)
    d = Err(dv, (J2 @ flat(logits.g)).reshape(T, K) + U2 * a * a + TINY2,
            (Ja @ flat(logits.s)).reshape(T, K) + 2.0 * abs(scale) * E_grad,
            (Ja @ flat(logits.w)).reshape(T, K) + ULP * a + ULP_TINY)
    gl = v.reshape(-1)                                            # d loss / d logits
    L = Err(np.array(loss), np.array(gl * gl @ flat(logits.g)),
            np.array(np.abs(gl) @ flat(logits.s) + 2.0 * E_loss), np.array(np.abs(gl) @ flat(logits.w)))
    return L, d


def case_errors(case) -> dict:
    """The ctc fixture: logits are exact binary32 inputs."""
    z = np.asarray(case.inputs["logits"], np.float64)
    target = case.inputs["target"]
    scale = float(case.inputs["scale"][0])
    loss, d = ctc64.ctc(z, target, scale)
    T, K = z.shape
    if not np.isfinite(loss):
        return {"loss": Err.exact(np.array([loss])), "dlogits": Err.exact(np.zeros((T, K)))}
    E_loss, E_grad = binary64_bounds(z, target)
    a = np.abs(d)
    dl = Err(d, U2 * a * a + TINY2, 2.0 * abs(scale) * E_grad, ULP * a + ULP_TINY)
    z1 = np.zeros(1)
    return {"loss": Err(np.array([loss]), z1, np.array([2.0 * E_loss]), z1), "dlogits": dl}
