"""The error model of three real training steps: batch gradient -> clipping -> AdamW, three
times (docs/tolerances.md, "Three steps").

Each step's batch gradient is step.py's model at that step's weights, the weights carrying
the errors of the steps before (so a weight's rounding moves the next gradients). AdamW's
own roundings and rounded scalars are adamw.py's. A gradient's error reaches the weights
through m and v together, which are the same gradient's functions: that dependence is carried
exactly, as first-order coefficients dp/dg_s, dm/dg_s, dv/dg_s of every step s (forward-mode
through AdamW's formulas), rather than as independent errors of m and v.
"""
from __future__ import annotations

import math

import numpy as np
from ...generators import model

from . import adamw, clip, step
from .errors import Err


class _Batch:
    def __init__(self, case, t):
        self.inputs = {"cfg": case.inputs["cfg"], "params": case.inputs["params"],
                       **{k: case.inputs[f"batch{t}_{k}"] for k in
                          ("widths", "images", "target_lens", "targets")}}
        self.params = case.params


def _batch_data(case, t):
    from ...generators.cases.step import case_inputs
    config, _, images, targets = case_inputs(_Batch(case, t))
    return config, images, targets


def _with_gradient_errors(p: Err, coef: list, gerr: list) -> Err:
    """p plus sum_s coef_s * (the error of g_s): the gradients' errors carried to p."""
    g, s, w = p.g, p.s, p.w
    for c, e in zip(coef, gerr):
        c2, ca = c * c, np.abs(c)
        g, s, w = g + c2 * e.g, s + ca * e.s, w + ca * e.w
    return Err(p.v, g, s, w)


def case_errors(case) -> dict:
    config = case.params["config"]
    specs = model.param_specs(config)
    names = [s.name for s in specs]
    decay = dict(zip(names, case.params["decay"]))
    lr, beta1, beta2, eps, wd = (float(x) for x in case.inputs["hparams"])
    limit, enabled = float(case.inputs["clip"][0]), bool(case.inputs["clip"][1])
    p0 = model.unflatten(config, np.asarray(case.inputs["params"], np.float32))
    P = {n: Err.exact(p0[n]) for n in names}                 # rounding errors, no g-errors
    M = {n: Err.exact(np.zeros(p0[n].shape)) for n in names}
    V = {n: Err.exact(np.zeros(p0[n].shape)) for n in names}
    dP = {n: [] for n in names}                              # dp/dg_s, dm/dg_s, dv/dg_s
    dM = {n: [] for n in names}
    dV = {n: [] for n in names}
    gerr = {n: [] for n in names}
    b1t = b2t = 1.0
    steps = int(case.params["steps"])
    for t in range(steps):
        _, images, targets = _batch_data(case, t)
        full = {n: _with_gradient_errors(P[n], dP[n], gerr[n]) for n in names}
        grads = step.batch(config, full, images, targets)
        clipped, _ = clip.clip_errors([grads[n] for n in names], limit, enabled)
        b1t, b2t = b1t * beta1, b2t * beta2
        c2 = math.sqrt(1.0 - b2t)
        for n, g in zip(names, clipped):
            P[n], M[n], V[n] = adamw.step(P[n], M[n], V[n], Err.exact(g.v), lr, beta1, beta2,
                                          eps, wd, decay[n], b1t, b2t)
            dP[n], dM[n], dV[n] = _tangents(dP[n], dM[n], dV[n], g.v, M[n].v, V[n].v, lr,
                                            beta1, beta2, eps, wd, decay[n], b1t, c2)
            gerr[n].append(g)
    return {n: _with_gradient_errors(P[n], dP[n], gerr[n]) for n in names}


def _tangents(dp, dm, dv, g, m, v, lr, beta1, beta2, eps, wd, decay, b1t, c2):
    """Forward-mode coefficients of one AdamW step for every gradient so far (the new one
    with dg = 1): m = b1 m + (1-b1) g, v = b2 v + (1-b2) g^2, p = p dec - a m / D,
    D = sqrt(v)/c2 + eps."""
    dec = 1.0 - lr * wd if decay else 1.0
    a = lr / (1.0 - b1t)
    sq = np.sqrt(v)
    D = sq / c2 + eps
    with np.errstate(divide="ignore", invalid="ignore"):
        dsq = np.where(sq > 0, 0.5 / sq, 0.0)
    out_p, out_m, out_v = [], [], []
    for s in range(len(dp) + 1):
        dg = 1.0 if s == len(dp) else 0.0
        dm_s = beta1 * (dm[s] if s < len(dm) else 0.0) + (1.0 - beta1) * dg
        dv_s = beta2 * (dv[s] if s < len(dv) else 0.0) + 2.0 * (1.0 - beta2) * g * dg
        dD = dsq * dv_s / c2
        dp_s = dec * (dp[s] if s < len(dp) else 0.0) - a * (dm_s / D - m * dD / (D * D))
        out_p.append(dp_s)
        out_m.append(dm_s)
        out_v.append(dv_s)
    return out_p, out_m, out_v
