"""The conv block through a port: forward (conv, pooled, winners), backward (dW, db, dx).

The backward is called with the winners the port's own forward returned (the ABI's
contract: "winners as returned by the forward"); when they equal the reference's, as the
winners tensor checks, the backward sees the same dC as the reference. A case whose params
say `dx: false` (the first block) passes dx = NULL, and the port must not need it.

Winners are int32, compared by equality in the exact and identity tiers. In the float64 tier
(`compare_tier`) they must be the first maximum of the port's own conv values in every window
(the pool rule needs no allowance), and where they differ from the reference's the port's
winner must be one the error model allows there: a near-tie candidate of
harness/allowance/conv.py (`near_ties`, whose decisions every downstream allowance already
includes). Anything else is a decision flip, reported with both candidates' values as the port
computed them and their margin (docs/backward.md, "Convolution block").
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from ...ctypes_kernels import layer_table
from ...generators.float64.conv import relu_maxpool
from ...generators.geometry import conv_size
from ..compare import Comparison, compare

from ._ffi import call, f32, i32, out, ptr

LAYER = "conv"
FIXTURES = layer_table.fixtures(LAYER)   # stems and tiers: ctypes_kernels/layer_table.py
TIERS = layer_table.tiers(LAYER)
INPUTS = ("x", "W", "b", "dPooled")

GEOMETRY = ("kh", "kw", "padH", "padW", "poolH", "poolW")


def sizes(H, W, C, Out, kh, kw, padH, padW, poolH, poolW) -> dict:
    Hc, Wc = conv_size(H, W, kh, kw, padH, padW)
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


def flips(ours_winners, ref_winners, conv, windows=None) -> list[dict]:
    """One entry per window whose winner differs (or per flat window of `windows`): its
    [oy, ox, o], both winners, the port's conv values of both candidates and their margin."""
    ours_winners, ref_winners = np.asarray(ours_winners), np.asarray(ref_winners)
    out_ = []
    at = (zip(*np.nonzero(ours_winners != ref_winners)) if windows is None else
          (np.unravel_index(int(w), ours_winners.shape) for w in windows))
    for idx in at:
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


def compare_tier(case, tier, tensor, ours, ref, tol, floor) -> Comparison:
    if tensor == "winners" and tier == "pytorch":   # dead, twin, near-tie: harness/flips/
        from ..flips import compare_layer_winners
        return compare_layer_winners(case, ours, ref, getattr(tol, "arrays", None))
    if tensor != "winners" or tier in ("exact", "identity"):
        return compare(ours[tensor], ref[tensor], tier, tol.atol if tol else 0.0,
                       tol.rtol if tol else 0.0, floor or 0.0,
                       heatmap_cols=heatmap_columns(case, tensor, np.shape(ref[tensor])))
    return compare_winners(case, ours, ref, getattr(tol, "arrays", None))


def own_first_max(case, conv) -> np.ndarray:
    """The pool rule on the port's own conv values [P][Out]: running max from +0, rows then
    columns, strictly greater replaces, -1 when nothing is positive."""
    p = case.params
    x = np.asarray(case.inputs["x"])
    H, W = x.shape[:2]
    s = sizes(H, W, x.shape[2] if x.ndim == 3 else 1, np.shape(conv)[-1],
              *(int(p[k]) for k in GEOMETRY))
    return relu_maxpool(np.asarray(conv, np.float64), s["Hc"], s["Wc"], int(p["poolH"]),
                        int(p["poolW"]))[1]


def compare_winners(case, ours, ref, arrays=None) -> Comparison:
    """The float64 tier's winners: each the first maximum of the port's own conv values, and
    each that differs from the reference's a legal decision of the error model (module
    docstring). usage: max over the windows decided otherwise of (ref_w - ref_c)/(A_w + A_c),
    the share of the two conv allowances the reference's gap between them takes (0 for twins)."""
    from ..allowance import allowances, conv as model
    c = compare(ours["winners"], ref["winners"], "exact")
    ow, rw = np.asarray(ours["winners"]), np.asarray(ref["winners"])
    if ow.shape != rw.shape:
        return c
    from ..flips.compare import _foreign, foreign_comparison
    bad = _foreign(case, ow)
    if bad.size:
        return foreign_comparison(ow, rw, bad)
    conv = np.asarray(ours["conv"])
    own = own_first_max(case, conv)
    unruly = np.flatnonzero((ow != own).ravel())
    differ = np.flatnonzero((ow != rw).ravel())
    if differ.size:
        arrays = arrays if arrays and "winners.cells" in arrays else allowances(LAYER, case)
        ok = model.legal(arrays, differ, ow.ravel()[differ], conv.size)
        other, flipped = differ[ok], differ[~ok]
    else:
        other = flipped = differ
    mismatches = int(np.union1d(unruly, flipped).size)
    notes, worst = [], c.worst
    if flipped.size:
        fl = flips(ow, rw, conv, flipped)
        notes.append(f"{len(fl)} decision flip(s) against float64: {_shown(fl)}{_margin_rule(case)}")
        worst = _worst(fl[0])
    if unruly.size:
        fl = flips(ow, own, conv, unruly)
        notes.append(f"{len(fl)} window(s) whose winner is not the first maximum of the port's "
                     f"own conv values (running max from +0, strictly greater replaces): "
                     + _shown(fl, "first maximum"))
        worst = worst if flipped.size else _worst(fl[0])
    if other.size:
        notes.append(f"{other.size} window(s) decided otherwise than the reference within "
                     "rounding (near-ties of the error model: either decision is legal)")
    passed = mismatches == 0
    # the exact comparison's counts, hist and heat map, judged again under the pool rule
    return replace(c, mismatches=mismatches, passed=passed, worst=worst, note="; ".join(notes),
                   usage=float("inf") if not passed else _tie_usage(ow, rw, ref, arrays, other))


def _tie_usage(ow, rw, ref, arrays, windows) -> float:
    if not windows.size or "conv" not in ref:
        return 0.0
    v, a = np.asarray(ref["conv"], np.float64).ravel(), np.asarray(arrays["conv"]).ravel()
    at = lambda arr, w: np.where(w >= 0, arr[np.maximum(w, 0)], 0.0)   # 'none': the exact +0
    r, o = rw.ravel()[windows], ow.ravel()[windows]
    gap, room = np.maximum(at(v, r) - at(v, o), 0.0), at(a, r) + at(a, o)
    return float(np.max(np.divide(gap, room, out=np.zeros_like(gap), where=room > 0)))


def _shown(fl, other="reference") -> str:
    shown = "; ".join(f"window {f['window']}: port cell {f['ours']} = {f['ours_value']!r}, "
                      f"{other} cell {f['ref']} = {f['ref_value']!r}, margin {f['margin']:.3g}"
                      + (" (an exact tie: the first of equal maxima wins)"
                         if f["margin"] == 0 and f["ours"] >= 0 and f["ref"] >= 0 else "")
                      for f in fl[:8])
    return shown + (f"; +{len(fl) - 8} more" if len(fl) > 8 else "")


def _margin_rule(case) -> str:
    floor_note = case.params.get("min_margin")
    return (f" (this fixture's windows are at least {floor_note:.3g} from a near-tie of "
            "distinct values, so no flip is explained by rounding)" if floor_note is not None
            else "")


def _worst(f) -> dict:
    """The schema's worst element (results.schema.json): the window and both winners; their
    values and margin are in the note."""
    return {"index": f["window"], "ours": f["ours"], "ref": f["ref"], "allowance": 0.0}
