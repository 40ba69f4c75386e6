"""The HTML report's opening plots: one inline SVG per layer, one row per tensor name.

Left panel: the allowance usage of every float64 and pytorch check of that tensor (one dot per
case, coloured by tier) on a log axis, with usage 1 (the allowance) marked; a check that
failed is drawn red, one off the axis is clamped to its edge. Right panel: the same checks'
resolution (the smallest uniform relative error each would detect) on its own log axis.
Two narrow columns give the bit tiers' verdicts over the tensor's cases: exact (all bits equal)
and identity (every ISA x threads run equal to the base run).
"""
from __future__ import annotations

import math
from collections import OrderedDict

from markupsafe import escape

TOLERANCE = ("float64", "pytorch")
TIER_COLOR = {"float64": "#2f6fd0", "pytorch": "#e07b00"}
FAIL_COLOR = "#d1342f"
USAGE_DECADES = (-6, 1)        # 1e-6 .. 10
RES_DECADES = (-9, -1)         # 1e-9 .. 0.1
ROW, LABEL, BITS, GAP = 16, 150, 86, 44
U_W, R_W, TOP, BOTTOM = 340, 260, 30, 40


def layer_rows(recs: list[dict], layer: str) -> OrderedDict[str, dict]:
    """tensor name -> {"points": [(tier, usage, resolution, passed, label)], "exact": [...],
    "identity": [...]} for one layer, tensors in the order the gate first reported them."""
    rows: OrderedDict[str, dict] = OrderedDict()
    for r in recs:
        if r["layer"] != layer or r["tensor"] == "*" or r["tier"] == "contract":
            continue          # (the contract tier's calls have no usage to plot)
        row = rows.setdefault(r["tensor"], {"points": [], "exact": [], "identity": []})
        if r["tier"] in TOLERANCE:
            label = f"{r.get('fixture') or layer}/{r['case']}"
            row["points"].append((r["tier"], r["usage"], r.get("resolution"), r["passed"], label))
        else:
            row[r["tier"]].append(r["passed"])
    return rows


def _x(v, decades, x0, width) -> tuple[float, bool]:
    """Position of v on a log axis over 10^lo .. 10^hi; clamped says it lies off the axis."""
    lo, hi = decades
    if v is None or v != v or v == math.inf:
        return x0 + width, True
    if v <= 0:
        return x0, True
    e = math.log10(v)
    clamped = e < lo or e > hi
    e = min(max(e, lo), hi)
    return x0 + width * (e - lo) / (hi - lo), clamped


def _fmt(v) -> str:
    if v is None or v != v or v == math.inf:
        return "unbounded"
    return f"{v:.3g}"


def _axis(parts, decades, x0, width, y0, y1, title) -> None:
    lo, hi = decades
    for e in range(lo, hi + 1):
        x = x0 + width * (e - lo) / (hi - lo)
        parts.append(f'<line x1="{x:.1f}" y1="{y0}" x2="{x:.1f}" y2="{y1}" class="grid"/>')
        label = {0: "1", 1: "10", -1: "0.1"}.get(e, f"1e{e}")
        parts.append(f'<text x="{x:.1f}" y="{y0 - 4}" class="lbl">{label}</text>')
    parts.append(f'<text x="{x0 + width / 2:.1f}" y="{y1 + 16}" class="lbl">{title}</text>')


def _bits(passed: list[bool]) -> tuple[str, str]:
    if not passed:
        return "–", "#8a93a3"
    bad = sum(not p for p in passed)
    return ("✓", "#1f7a3c") if not bad else (f"✗{bad}", FAIL_COLOR)


def layer_svg(recs: list[dict], layer: str) -> str | None:
    """The overview plot of one layer, or None when it has no tensor."""
    rows = layer_rows(recs, layer)
    if not rows:
        return None
    ux = LABEL + BITS
    rx = ux + U_W + GAP
    W = rx + R_W + 12
    H = TOP + ROW * len(rows) + BOTTOM
    y1 = TOP + ROW * len(rows)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="plot overview" viewBox="0 0 {W} {H}" '
             f'width="{W}" height="{H}" role="img" aria-label="usage and resolution of every '
             f'tensor of layer {escape(layer)}">']
    _axis(parts, USAGE_DECADES, ux, U_W, TOP, y1, "allowance usage (log; pass at ≤ 1)")
    _axis(parts, RES_DECADES, rx, R_W, TOP, y1, "resolution: smallest detected uniform relative error")
    one, _ = _x(1.0, USAGE_DECADES, ux, U_W)
    parts.append(f'<line x1="{one:.1f}" y1="{TOP - 2}" x2="{one:.1f}" y2="{y1}" class="limit"/>')
    parts.append(f'<text x="{LABEL + 18}" y="{TOP - 4}" class="lbl">exact</text>'
                 f'<text x="{LABEL + 50}" y="{TOP - 4}" class="lbl">ident.</text>')
    for i, (tensor, row) in enumerate(rows.items()):
        y = TOP + ROW * i + ROW / 2
        if i % 2:
            parts.append(f'<rect x="0" y="{TOP + ROW * i}" width="{W}" height="{ROW}" class="band"/>')
        parts.append(f'<text x="{LABEL - 6}" y="{y + 3.5:.1f}" class="tname">{escape(tensor[:22])}</text>')
        for col, tier in ((LABEL + 18, "exact"), (LABEL + 50, "identity")):
            text, color = _bits(row[tier])
            parts.append(f'<text x="{col}" y="{y + 3.5:.1f}" class="lbl" fill="{color}" '
                         f'style="fill:{color}">{text}<title>{tier}: {len(row[tier])} check(s)'
                         f'</title></text>')
        for tier, usage, res, passed, label in row["points"]:
            color = TIER_COLOR[tier] if passed else FAIL_COLOR
            tip = escape(f"{label} {tensor} [{tier}]: usage {_fmt(usage)}, resolution {_fmt(res)}")
            x, off = _x(usage, USAGE_DECADES, ux, U_W)
            shape = (f'<rect x="{x - 3:.1f}" y="{y - 3:.1f}" width="6" height="6" fill="{color}">'
                     if off else f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="{color}" '
                     'fill-opacity="0.75">')
            parts.append(f'{shape}<title>{tip}</title>{"</rect>" if off else "</circle>"}')
            if res is not None:
                x, off = _x(res, RES_DECADES, rx, R_W)
                parts.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="{color}" '
                             f'fill-opacity="0.75"><title>{tip}</title></circle>')
    lx = 12
    for k, (tier, color) in enumerate((*TIER_COLOR.items(), ("failed", FAIL_COLOR))):
        parts.append(f'<circle cx="{lx + 62 * k}" cy="{H - 6}" r="3" fill="{color}"/>'
                     f'<text x="{lx + 6 + 62 * k}" y="{H - 3}" class="lbl" '
                     f'style="text-anchor:start">{tier}</text>')
    parts.append("</svg>")
    return "".join(parts)
