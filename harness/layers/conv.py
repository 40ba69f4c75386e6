"""The conv block through a port: forward (conv, pooled, winners), backward (dW, db, dx).

The backward is called with the winners the port's own forward returned (the ABI's
contract: "winners as returned by the forward"); when they equal the reference's, as the
winners tensor checks, the backward sees the same dC as the reference. A case whose params
say `dx: false` (the first block) passes dx = NULL, and the port must not need it.

Winners are int32 and compared by equality in every tier. In the float64 tier a mismatch is
a decision flip; `compare_tier` reports each flipped window with both candidates' values as
the port computed them and their margin (docs/backward.md, "Convolution block").
"""
from __future__ import annotations

import inspect

import numpy as np

from crnn_conformance.harness.compare import Comparison, compare

from ._ffi import call, f32, i32, out, ptr

LAYER = "conv"
FIXTURE = "conv"
FIXTURES = ["conv", "pytorch_conv",   # the second: the pytorch tier (trained crnn-v0)
            "conv_edges"]   # exact tier: pool NaN/zeros/ties, underflow (docs/edge-cases.md)
INPUTS = ("x", "W", "b", "dPooled")
TIERS = {"conv_edges": ("exact",)}

GEOMETRY = ("kh", "kw", "padH", "padW", "poolH", "poolW")


def sizes(H, W, C, Out, kh, kw, padH, padW, poolH, poolW) -> dict:
    Hc, Wc = H + 2 * padH - kh + 1, W + 2 * padW - kw + 1
    return {"Hc": Hc, "Wc": Wc, "P": Hc * Wc, "Hp": Hc // poolH, "Wp": Wc // poolW,
            "KPadded": (kh * kw * C + 15) // 16 * 16}


def run(lib, case) -> dict:
    x, Wt, b, dPooled = (f32(case.inputs[k]) for k in ("x", "W", "b", "dPooled"))
    want_dx = bool(case.params.get("dx", True))
    return run_block(lib, x, Wt, b, dPooled, *(int(case.params[k]) for k in GEOMETRY),
                     want_dx=want_dx)


def run_block(lib, x, Wt, b, dPooled, kh, kw, padH, padW, poolH, poolW, want_dx=True) -> dict:
    """Forward then backward of one block; raises abi.PortCallError on an error code."""
    x, Wt, b, dPooled = f32(x), f32(Wt), f32(b), f32(dPooled)
    H, W, C = x.shape
    Out = Wt.shape[0]
    s = sizes(H, W, C, Out, kh, kw, padH, padW, poolH, poolW)
    conv = out((s["P"], Out))
    pooled = out((s["Hp"], s["Wp"], Out))
    winners = out((s["Hp"], s["Wp"], Out), np.int32)
    call(lib, "crnn_conv_forward", ptr(x), H, W, C, ptr(Wt), ptr(b), Out,
         kh, kw, padH, padW, poolH, poolW, ptr(conv), ptr(pooled), ptr(winners))
    dW, db = out(Wt.shape), out(Out)
    dx = out((H, W, C)) if want_dx else None
    call(lib, "crnn_conv_backward", ptr(x), H, W, C, ptr(Wt), Out,
         kh, kw, padH, padW, poolH, poolW, ptr(dPooled), ptr(i32(winners)),
         ptr(dW), ptr(db), ptr(dx))
    result = {"conv": conv, "pooled": pooled, "winners": winners, "dW": dW, "db": db}
    if want_dx:
        result["dx"] = dx
    return result


def _cell_value(conv, w):
    """The port's conv value of the cell w = p*Out + o; 'none' (the +0 start) for -1."""
    return 0.0 if w < 0 else float(conv.flat[w])


def flips(ours_winners, ref_winners, conv) -> list[dict]:
    """One entry per window whose winner differs: its [oy, ox, o], both winners, the port's
    conv values of both candidates and their margin |a - b|."""
    ours_winners, ref_winners = np.asarray(ours_winners), np.asarray(ref_winners)
    out_ = []
    for idx in zip(*np.nonzero(ours_winners != ref_winners)):
        a, r = int(ours_winners[idx]), int(ref_winners[idx])
        va, vr = _cell_value(conv, a), _cell_value(conv, r)
        out_.append({"window": [int(i) for i in idx], "ours": a, "ref": r,
                     "ours_value": va, "ref_value": vr, "margin": abs(va - vr)})
    return out_


def heatmap_columns(case, tensor, shape):
    """dW [Out][KPadded] grouped by tap (ky, kx), the padding columns as a last group."""
    if tensor != "dW" or len(shape) != 2:
        return None
    p = case.params
    C, taps = int(p["C"]), int(p["kh"]) * int(p["kw"])
    cols = [t * C for t in range(taps)]
    return cols + [taps * C] if taps * C < shape[1] else cols


def _heatmap_kw(case, tensor, shape) -> dict:
    if "heatmap_cols" not in inspect.signature(compare).parameters:
        return {}
    return {"heatmap_cols": heatmap_columns(case, tensor, shape)}


def compare_tier(case, tier, tensor, ours, ref, tol, floor) -> Comparison:
    if tensor == "winners" and tier == "pytorch":   # dead windows and twin ties: harness/flips.py
        from crnn_conformance.harness.flips import compare_layer_winners
        return compare_layer_winners(case, ours, ref)
    if tensor != "winners" or tier in ("exact", "identity"):
        return compare(ours[tensor], ref[tensor], tier, tol.atol if tol else 0.0,
                       tol.rtol if tol else 0.0, floor or 0.0,
                       **_heatmap_kw(case, tensor, np.shape(ref[tensor])))
    c = compare(ours["winners"], ref["winners"], "exact")
    if c.passed:
        c.usage = 0.0
        return c
    if np.shape(ours["winners"]) != np.shape(ref["winners"]):
        return c
    fl = flips(ours["winners"], ref["winners"], ours["conv"])
    shown = "; ".join(f"window {f['window']}: port cell {f['ours']} = {f['ours_value']!r}, "
                      f"reference cell {f['ref']} = {f['ref_value']!r}, margin {f['margin']:.3g}"
                      + (" (an exact tie: the first of equal maxima wins)"
                         if f["margin"] == 0 and f["ours"] >= 0 and f["ref"] >= 0 else "")
                      for f in fl[:8])
    more = f"; +{len(fl) - 8} more" if len(fl) > 8 else ""
    floor_note = case.params.get("min_margin")
    rule = (f" (this fixture's windows are at least {floor_note:.3g} from a near-tie, so no flip "
            "is explained by rounding)" if floor_note is not None else "")
    c.note = f"{len(fl)} decision flip(s) against float64: {shown}{more}{rule}"
    first = fl[0]
    c.worst = {"index": first["window"], "ours": first["ours"], "ref": first["ref"],
               "allowance": 0.0, "ours_value": first["ours_value"],
               "ref_value": first["ref_value"], "margin": first["margin"]}
    c.usage = float("inf")
    return c
