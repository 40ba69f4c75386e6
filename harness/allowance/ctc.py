"""The CTC loss's error model (docs/tolerances.md, "CTC").

The port computes in binary64 and rounds the gradient to binary32 once. Against the float64
reference (libm exp/log, exact logaddexp) the binary64 work errs by at most a few ulps of the
largest |alpha|, |beta| per step of the recursion (DetMath's exp and log are within one ulp,
logadd's cut at -40 drops at most log(1 + e^-40) = 4.3e-18): a deterministic bound E64 on the
log-domain quantities, evaluated per case. The gradient scale*(p - occ) then carries
scale*(p + occ)*E64 (occ = exp(acc - lp - logP), p = exp(lp)) and its own binary32 rounding.

In the whole model (step) the logits carry binary32 errors; the gradient moves with them
through the CTC's Jacobian (the Hessian of the loss in the logits, times scale), computed here
exactly by forward-mode differentiation of the float64 recursion, and the loss by its gradient.
"""
from __future__ import annotations

import numpy as np
from ...generators.float64 import ctc as ctc64

from .errors import TINY2, U2, ULP, ULP_TINY, Err

U64 = 2.0 ** -53
OPS_PER_STEP = 6          # binary64 roundings (and DetMath ulps) per entry per step
CUT = 3 * 4.3e-18         # logadd's cut at -40, three logadds per entry per step
CUT_RANGE = 41.0          # entries further below a step's largest do not reach logP's roundings


def binary64_bound(logits, target) -> float:
    """E64: a bound on the binary64 error of alpha, beta, logP and lp (absolute, log domain).
    Per step, the entries that matter are those within CUT_RANGE of the step's largest (the
    others enter logadd's sum below e^-40 of it): their |alpha| (|beta|) and their emission's
    |lp|, plus 1 for log(s) of the softmax's sum s >= 1 (an absolute error of s's rounding),
    each with OPS_PER_STEP binary64 roundings; z - max(z) is exact."""
    z = np.asarray(logits, np.float64)
    lp = ctc64.log_softmax(z)
    T = lp.shape[0]
    ext = ctc64._extend(np.asarray(target, np.int64).ravel())
    alpha, beta = ctc64.alpha_beta(lp, ext)
    big = 0.0
    for a in (alpha, beta):
        top = np.max(np.where(np.isfinite(a), a, -np.inf), 1, keepdims=True)
        near = np.isfinite(a) & (a >= top - CUT_RANGE)
        mag = np.where(near, np.abs(a) + np.abs(lp[:, ext]), 0.0).max(1) + 1.0
        big = max(big, float(mag.max()) if mag.size else 0.0)
    return T * (OPS_PER_STEP * 2 * U64 * big + CUT)


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
    E64 = binary64_bound(logits.v, target)
    Jf = J.reshape(T * K, T * K) * scale
    J2, Ja = Jf * Jf, np.abs(Jf)
    flat = lambda a: np.broadcast_to(a, (T, K)).reshape(-1)
    dv = scale * v
    occ_p = np.abs(scale) * (np.abs(v) + 2.0 * np.exp(ctc64.log_softmax(logits.v)))
    a = np.abs(dv)
    d = Err(dv, (J2 @ flat(logits.g)).reshape(T, K) + U2 * a * a + TINY2,
            (Ja @ flat(logits.s)).reshape(T, K) + occ_p * E64,
            (Ja @ flat(logits.w)).reshape(T, K) + ULP * a + ULP_TINY)
    gl = v.reshape(-1)                                            # d loss / d logits
    L = Err(np.array(loss), np.array(gl * gl @ flat(logits.g)),
            np.array(np.abs(gl) @ flat(logits.s) + E64), np.array(np.abs(gl) @ flat(logits.w)))
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
    E64 = binary64_bound(z, target)
    p = np.exp(ctc64.log_softmax(z))
    a = np.abs(d)
    dl = Err(d, U2 * a * a + TINY2, np.abs(scale) * (a / abs(scale) + 2 * p) * E64,
             ULP * a + ULP_TINY)
    z1 = np.zeros(1)
    return {"loss": Err(np.array([loss]), z1, np.array([E64]), z1), "dlogits": dl}
