"""The flip rule's comparisons, as the tiers call them: the whole-model step's pytorch tier
(compare_step: its winners get the verdict, its conv gradients may use the one flip) and the
conv layer's pytorch tier (compare_layer_winners: a per-layer fixture permits no flip)."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
from ..allowance import allowances
from ..compare import Comparison, compare, within
from .rule import (DEAD, NEAR, TWIN, Verdict, analyse_step, classify_block, excused_mask,
                   foreign_described, foreign_note, foreign_windows, legal_fn)


def step_verdict(case, ours: dict, ref: dict, arrays=None) -> Verdict:
    """The verdict of a pytorch_step case under the error model's `arrays` (the case's
    allowances: each conv value's Atol and the legal pool decisions). Every tensor of the
    case is judged against it, so the caller that compares them all computes it once."""
    if "winners" not in ours or "conv_out" not in ours:   # the port's conv forward failed:
        return Verdict()                                 # no decision of its to excuse
    arrays = arrays or {}
    return analyse_step(case, ours, ref, arrays.get("conv_out"), arrays)


def compare_step(case, tensor: str, ours: dict, ref: dict, tol, floor,
                 verdict: Verdict | None = None) -> Comparison:
    """The step module's pytorch-tier hook: `winners` gets the flip verdict (and carries the
    flips for the report's meta), conv gradients may use the one flip, the rest compare
    normally. `verdict`: the case's (step_verdict), made here from tol's arrays when the
    caller compares this tensor alone."""
    if verdict is None:
        verdict = step_verdict(case, ours, ref, getattr(tol, "arrays", None))
    if tensor == "winners":
        return winners_comparison(case, ref, verdict)
    atol, rtol = (tol.atol, tol.rtol) if tol else (0.0, 0.0)
    return judge(tensor, ours[tensor], ref[tensor], atol, rtol, floor or 0.0, verdict)


def winners_comparison(case, ref: dict, v: Verdict) -> Comparison:
    """The step's `winners` record: the verdict itself (usage margin / bound of its one flip,
    unbounded for more than one), its first flip as the worst element and every flip for
    meta["flips"]."""
    f = v.flips
    usage = 0.0 if not f else (f[0].margin / f[0].bound if len(f) == 1 and f[0].bound > 0
                               else float("inf"))
    worst = {}
    if f:   # the schema's worst: the window, both winners; the note and meta say the rest
        d = f[0]
        worst = {"index": d.window, "ours": d.ours, "ref": d.pytorch, "allowance": d.bound}
    if v.foreign:       # the first window no decision can have chosen: its flat index
        k, ours, theirs, _ = v.foreign[0]
        usage, worst = float("inf"), {"index": [k], "ours": ours, "ref": theirs,
                                      "allowance": 0.0}
    return Comparison(usage, max((d.margin for d in f), default=0.0),
                      0 if v.passed else len(f) + len(v.foreign),
                      int(np.size(ref["winners"])), v.passed, None, worst, v.note(),
                      flips=v.to_meta("step", case.name))


def judge(tensor: str, ours_t, ref_t, atol: float, rtol: float, floor: float,
          verdict: Verdict) -> Comparison:
    """A gradient tensor in the pytorch tier under the flip rule: out-of-allowance elements
    are excused only when the verdict uses its one flip and every such element lies in the
    flip's channel of that block's weights or bias."""
    c = compare(ours_t, ref_t, "pytorch", atol, rtol, floor)
    if c.passed:
        return c
    used = verdict.used
    ex = excused_mask(tensor, np.shape(ref_t), used)
    if ex is None:
        return _noted(c, verdict.note()) if verdict.flips else c
    bad = ~within(ours_t, ref_t, "pytorch", atol, rtol, floor)
    outside = int((bad & ~ex).sum())
    if outside:
        return _noted(c, f"{outside} element(s) out of allowance outside channel "
                         f"{used.channel}: the flip does not excuse them", verdict.note())
    rest = compare(ours_t, ref_t, "pytorch", atol, rtol, floor, mask=~ex)
    return replace(rest, note=f"1 flip used: {int(bad.sum())} element(s) of channel "
                              f"{used.channel} excused (usage up to {c.usage:.3g} there); "
                              f"{used.describe()}",
                   excused={"elements": int(bad.sum()), "usage": c.usage})


def _noted(c: Comparison, *notes: str) -> Comparison:
    """c with `notes` after its own note: a failing gradient says what the verdict decided."""
    return replace(c, note="; ".join(x for x in (c.note, *notes) if x))


def compare_layer_winners(case, ours: dict, ref: dict, arrays=None) -> Comparison:
    """The conv layer's winners in the pytorch tier (pytorch_conv): equal up to dead windows,
    twin ties and the error model's near-ties (classify_block; `arrays`: the case's model
    arrays, allowance/conv.py); the per-layer fixtures permit no other flip, so any flip fails
    (with its window, both candidates and margin in the note)."""
    ow, pw = np.asarray(ours["winners"]), np.asarray(ref["winners"])
    if ow.shape != pw.shape:
        return compare(ow, pw, "exact")
    bad = _foreign(case, ow)
    if bad.size:
        return foreign_comparison(ow, pw, bad)
    v = _layer_verdict(case, ours, ref, arrays)
    f, c = v.flips, v.counts
    note = (f"{c[TWIN]} twin tie(s) and {c[DEAD]} dead window(s) differ in index only "
            "(PyTorch's index of a dead window points at a cell holding 0; the spec says -1)"
            + (f"; {c[NEAR]} near-tie(s) decided within rounding (the error model's legal "
               "decisions)" if c[NEAR] else ""))
    n = int(pw.size)
    if not f:
        return Comparison(0.0, 0.0, 0, n, True, None, {}, note)
    d = f[0]
    shown = "; ".join(x.describe(with_bound=False) for x in f[:5])
    return Comparison(float("inf"), max(x.margin for x in f), len(f), n, False, None,
                      {"index": d.window, "ours": d.ours, "ref": d.pytorch, "allowance": 0.0},
                      f"{len(f)} decision flip(s) against PyTorch (a per-layer fixture permits "
                      f"none): {shown}; " + note)


def _foreign(case, winners) -> np.ndarray:
    """The conv case's windows whose winner no pool decision can have chosen (foreign_windows)."""
    from ..layers.conv import sizes
    p = case.params
    x = np.asarray(case.inputs["x"])
    s = sizes(*x.shape[:2], x.shape[2] if x.ndim == 3 else 1, np.shape(winners)[-1],
              *(int(p[k]) for k in ("kh", "kw", "padH", "padW", "poolH", "poolW")))
    return foreign_windows(winners, s["Hc"], s["Wc"], int(p["poolH"]), int(p["poolW"]))


def foreign_comparison(ow, rw, bad) -> Comparison:
    """A failing winners record: the windows whose winner is no cell of theirs (first one the
    worst element), judged no further."""
    k = int(bad[0])
    window = [int(i) for i in np.unravel_index(k, ow.shape)]
    return Comparison(float("inf"), float("inf"), int(bad.size), int(ow.size), False, None,
                      {"index": window, "ours": int(ow.flat[k]), "ref": int(rw.flat[k]),
                       "allowance": 0.0}, foreign_note(foreign_described(ow, rw, bad)))


def _layer_verdict(case, ours: dict, ref: dict, arrays=None) -> Verdict:
    """classify_block on a pytorch_conv case's one block, with no rounding bound (no flip is
    permitted) and the legal decisions of `arrays` (the case's allowances when not given)."""
    p = case.params
    geo = {k: int(p[k]) for k in ("kh", "kw", "padH", "padW")}
    x = np.asarray(case.inputs["x"], np.float32)
    x = x[:, :, None] if x.ndim == 2 else x
    if arrays is None or "winners.cells" not in arrays:
        arrays = allowances("conv", case)
    return Verdict(classify_block(ours["winners"], ref["winners"], ref["pooled"], ours["conv"], x,
                                  geo, int(p.get("line", 0)), int(p.get("block", 1)) - 1,
                                  lambda a, b: float("nan"),
                                  legal_fn(arrays, int(np.size(ours["conv"])))))
