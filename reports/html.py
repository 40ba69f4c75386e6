"""index.html: one self-contained allowance report, rendered from a results.json document.

Everything is inline (CSS in <style>, plots as inline SVG); there is no script and nothing is
fetched, so the file can be archived as a CI artifact and opened offline. Sections:
verdict, an overview plot per layer (reports/overview.py: usage and resolution of every
tensor), the per-layer status table, per-layer tensor x tier tables (usage number + bar,
resolution), per-element histograms and heat maps for every failing or > 0.5-usage tensor,
the ISA x threads identity matrix, pool flips (only when the results carry any), failures with
the command that reproduces each, provenance. Counts are in checks and tensors, as in every
report (reports/json_report.py).
"""
from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path

from jinja2 import Environment, FileSystemLoader, select_autoescape
from markupsafe import Markup, escape

from .console import bit_figure, failure_message, worst_context
from .json_report import layer_status, summary, tensor_key
from .overview import layer_svg

TEMPLATES = Path(__file__).with_name("templates")
TIER_COLS = ("exact", "float64", "pytorch", "identity", "contract")
GREEN, AMBER = 0.5, 1.0   # usage thresholds: green <= 0.5 < amber <= 1 < red
COLORS = {"g": "#2e9d4e", "a": "#e0a100", "r": "#d1342f", "n": "#c9ced6"}


def _env() -> Environment:
    env = Environment(loader=FileSystemLoader(str(TEMPLATES)),
                      autoescape=select_autoescape(["html", "j2"]),
                      trim_blocks=True, lstrip_blocks=True)
    env.filters["usage"] = fmt_usage
    return env


def render(doc: dict) -> str:
    return _env().get_template("report.html.j2").render(**context(doc))


def write(doc: dict, directory) -> Path:
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    path = d / "index.html"
    path.write_text(render(doc), encoding="utf-8")
    return path


# ---- formatting -------------------------------------------------------------------------

def _inf(u) -> float:
    return math.inf if u is None else float(u)


def fmt_usage(u) -> str:
    u = _inf(u)
    if math.isinf(u) or u != u:
        return "∞"
    if u == 0:
        return "0"
    if u < 0.001:
        return f"{u:.1e}"
    return f"{u:.3f}" if u < 1000 else f"{u:.2e}"


def band(usage, tier: str, passed: bool) -> str:
    """g / a / r: the colour of a usage value (bit tiers: any difference is red)."""
    if not passed:
        return "r"
    if tier in ("exact", "identity", "contract"):
        return "g"
    u = _inf(usage)
    return "g" if u <= GREEN else "a" if u <= AMBER else "r"


def _bar_width(usage, tier, passed) -> float:
    if tier in ("exact", "identity", "contract"):
        return 0.0 if passed else 100.0
    u = _inf(usage)
    return 100.0 if math.isinf(u) else round(min(u, 1.0) * 100, 1)


# ---- the view model ---------------------------------------------------------------------

def context(doc: dict) -> dict:
    recs = doc.get("tensors", [])
    meta = doc.get("meta", {})
    details, detail_of, details_omitted = _details(recs)
    status = doc.get("layers") or layer_status(recs, meta)
    layers = _layers(recs, meta, detail_of, status)
    failures = [{"title": f"{r['layer']}/{r['case']}/{r['tensor']} [{r['tier']}] "
                          f"{r['isa']} × {r['threads']}",
                 "message": failure_message(r), "repro": r.get("repro", ""),
                 "anchor": detail_of.get(id(r))}
                for r in recs if not r["passed"]]
    n_rows = sum(len(l["rows"]) for l in layers)
    overview = [{"name": l["name"], "svg": Markup(svg)} for l in layers
                if (svg := layer_svg(recs, l["name"])) is not None]
    return {
        "passed": doc.get("passed", all(r["passed"] for r in recs)),
        "summary": doc.get("summary") or summary(recs), "overview": overview,
        "not_implemented": [l["name"] for l in layers if l["status"] == "not implemented"],
        "n_records": len(recs), "n_failed": len(failures), "n_rows": n_rows,
        "meta": meta, "layers": layers, "details": details, "failures": failures,
        "details_omitted": details_omitted,
        "identity": _identity(recs, meta),
        "flips": meta.get("flips") if isinstance(meta.get("flips"), list) else None,
        "provenance": _provenance(meta), "fixtures": _fixtures(meta),
        "outputs": _outputs(recs, meta),
        "schema_version": doc.get("schema_version"), "colors": COLORS,
        "tier_cols": [t for t in TIER_COLS if any(r["tier"] == t for r in recs)] or list(TIER_COLS),
    }


def _cell(tier: str, rs: list[dict]) -> dict:
    if tier == "identity":
        ok = sum(r["passed"] for r in rs)
        worst = max(rs, key=lambda r: (not r["passed"], _inf(r["usage"])))
        passed = ok == len(rs)
        text = f"{ok}/{len(rs)}"
        title = ("every ISA × thread run identical to the base run" if passed else
                 f"{len(rs) - ok} run(s) differ; worst {worst['isa']} × {worst['threads']}: "
                 f"{worst['mismatches']} element(s), farthest {bit_figure(worst, ' ')}")
    elif tier == "contract":
        worst = rs[0]
        passed = worst["passed"]
        text = "ok" if passed else "failed"
        title = ("returned its documented code and wrote nothing it may not" if passed
                 else failure_message(worst))
    else:
        worst = rs[0]
        passed = worst["passed"]
        if tier == "exact":
            text = "=" if passed else (f"{worst['mismatches']}× {bit_figure(worst, ' ')}"
                                       if worst["elements"] else "no result")
            title = ("all bits equal" if passed else failure_message(worst))
        else:
            text = fmt_usage(worst["usage"])
            title = (f"usage {fmt_usage(worst['usage'])} of the allowance "
                     f"(Atol {worst.get('atol')}, Rtol {worst.get('rtol')}"
                     + (f", Floor {worst.get('floor')}" if tier == "pytorch" else "") + ")")
            if worst.get("resolution") is not None:
                title += f"; resolution {worst['resolution']:.3g}"
            if not passed:
                title = failure_message(worst)
    return {"text": text, "band": band(worst["usage"], tier, passed), "passed": passed,
            "width": _bar_width(worst["usage"], tier, passed), "title": title,
            "mismatches": sum(r["mismatches"] for r in rs)}


def _headline(by_tier: dict) -> dict:
    """The record a row's mismatches / worst element columns describe: the first failing
    record (tier order), else the tolerance record with the highest usage, else exact."""
    order = [r for t in TIER_COLS for r in by_tier.get(t, [])]
    failing = [r for r in order if not r["passed"]]
    if failing:
        return failing[0]
    tol = [r for r in order if r["tier"] in ("float64", "pytorch")]
    return max(tol, key=lambda r: _inf(r["usage"])) if tol else order[0]


def worst_text(r: dict) -> str:
    w = r.get("worst") or {}
    if not w:
        return "—"          # the note (crash, hang, error code) is shown under it
    idx = ",".join(map(str, w.get("index", [])))
    s = f"[{idx}] ours {_num(w.get('ours'))} ref {_num(w.get('ref'))}"
    if r["tier"] in ("float64", "pytorch"):
        s += f" allow {_short(w.get('allowance'))}"
    return s + worst_context(w) + (f": {w['unbounded']}" if w.get("unbounded") else "")


def _num(x) -> str:
    """9 significant digits: enough to tell float32 values apart, short enough to read."""
    return f"{x:.9g}" if isinstance(x, float) else str(x)


def _short(x) -> str:
    return f"{x:.3g}" if isinstance(x, (int, float)) else str(x)


def _resolution(by_tier) -> str:
    """The resolution of a row's tolerance checks, e.g. `f64 2.1e-06 · pt 3.4e-05`."""
    short = {"float64": "f64", "pytorch": "pt"}
    parts = [f"{short[t]} {r['resolution']:.1e}" for t in short for r in by_tier.get(t, [])[:1]
             if r.get("resolution") is not None]
    return " · ".join(parts) or "—"


def _layers(recs, meta, detail_of, status) -> list[dict]:
    rows = defaultdict(lambda: defaultdict(list))   # (layer, fixture, case, tensor) -> tier -> records
    for r in recs:
        rows[tensor_key(r)][r["tier"]].append(r)
    out = []
    for layer, st in status.items():
        lrows = []
        for (l, fixture, case, tensor), by_tier in rows.items():
            if l != layer:
                continue
            head = _headline(by_tier)
            anchors = [detail_of[id(r)] for t in TIER_COLS for r in by_tier.get(t, [])
                       if id(r) in detail_of]
            lrows.append({
                "fixture": fixture, "case": case, "tensor": tensor, "elements": head["elements"],
                "resolution": _resolution(by_tier),
                "cells": {t: _cell(t, by_tier[t]) for t in TIER_COLS if t in by_tier},
                "passed": all(r["passed"] for rs in by_tier.values() for r in rs),
                "head_tier": head["tier"], "mismatches": head["mismatches"],
                "worst": worst_text(head), "note": head.get("note", ""),
                "anchor": anchors[0] if anchors else None,
                "max_usage": max((_inf(r["usage"]) for t in ("float64", "pytorch")
                                  for r in by_tier.get(t, [])), default=None),
            })
        failed = sum(not row["passed"] for row in lrows)
        mu = [row["max_usage"] for row in lrows if row["max_usage"] is not None]
        out.append({"name": layer, "rows": lrows, "failed": failed,
                    "passed": st["status"] != "failed", "status": st["status"],
                    "reason": st.get("reason", ""), "checks": st["checks"],
                    "failed_checks": st["failed"],
                    "cases": len({(row["fixture"], row["case"]) for row in lrows}),
                    "max_usage": max(mu) if mu else None})
    return out


MAX_DETAILS = 150


def _details(recs) -> tuple[list[dict], dict, int]:
    """One card per record with a histogram or heat map; identity: only the worst run of each
    tensor. Failing records first; at most MAX_DETAILS cards (the rest stay in results.json)."""
    chosen, worst_identity = [], {}
    for r in recs:
        if not (r.get("hist") or r.get("heatmap")):
            continue
        if r["tier"] == "identity":
            k = (r["layer"], r["case"], r["tensor"])
            if k not in worst_identity or _inf(r["usage"]) > _inf(worst_identity[k]["usage"]):
                worst_identity[k] = r
            continue
        chosen.append(r)
    chosen += list(worst_identity.values())
    pos = {id(r): i for i, r in enumerate(recs)}
    chosen.sort(key=lambda r: (r["passed"], pos[id(r)]))
    details, detail_of = [], {}
    for r in chosen[:MAX_DETAILS]:
        anchor = f"d{len(details)}"
        detail_of[id(r)] = anchor
        details.append({
            "anchor": anchor, "passed": r["passed"],
            "title": f"{r['layer']}/{r['case']}/{r['tensor']}",
            "sub": f"tier {r['tier']} · {r['isa']} × {r['threads']} thread(s)",
            "usage": (fmt_usage(r["usage"]) if r["tier"] in ("float64", "pytorch")
                      else f"{r['mismatches']} of {r['elements']} differ, farthest {bit_figure(r, ' ')}"),
            "band": band(r["usage"], r["tier"], r["passed"]),
            "message": failure_message(r) if not r["passed"] else "",
            "hist": Markup(hist_svg(r["hist"])) if r.get("hist") else None,
            "heatmap": Markup(heatmap_svg(r["heatmap"], r["hist"]["unit"] if r.get("hist") else "usage"))
            if r.get("heatmap") else None,
            "repro": r.get("repro", ""),
        })
    return details, detail_of, len(chosen) - len(details)


def _identity(recs, meta) -> dict | None:
    idr = [r for r in recs if r["tier"] == "identity"]
    isas = list(meta.get("isas") or sorted({r["isa"] for r in idr}))
    threads = list(meta.get("threads") or sorted({r["threads"] for r in idr}))
    if not isas or (not idr and "identity" not in (meta.get("tiers") or [])):
        return None
    base = tuple(meta["runs"][0]) if meta.get("runs") else (isas[0], 1)
    grid = []
    for isa in isas:
        row = []
        for t in threads:
            rs = [r for r in idr if r["isa"] == isa and r["threads"] == t]
            if (isa, t) == base:
                row.append({"text": "base", "band": "n", "title": "the run every other is compared with"})
            elif not rs:
                row.append({"text": "—", "band": "n", "title": "not run"})
            else:
                ok = sum(r["passed"] for r in rs)
                bad_layers = sorted({r["layer"] for r in rs if not r["passed"]})
                row.append({"text": f"{ok}/{len(rs)}", "band": "g" if ok == len(rs) else "r",
                            "title": "identical tensors / tensors" +
                            (f"; differs in {', '.join(bad_layers)}" if bad_layers else "")})
        grid.append({"isa": isa, "cells": row})
    return {"threads": threads, "rows": grid,
            "base": f"{base[0]} × {base[1]} thread{'' if base[1] == 1 else 's'}",
            "layers": sorted({r["layer"] for r in idr})}


def _provenance(meta) -> list[tuple[str, str]]:
    p = []
    def add(k, v):
        if v not in (None, "", [], {}):
            p.append((k, str(v)))
    add("port", meta.get("port"))
    add("port SHA-256", meta.get("port_sha256"))
    add("bundled port", "yes" if meta.get("bundled") else "no")
    if meta.get("abi_version") is not None:
        add("ABI version", f"{meta.get('abi_version')} (harness speaks "
                           f"{meta.get('harness_abi_version', '?')})")
    b = meta.get("build") or {}
    if b:
        add("compiler", f"{b.get('cc')} — {b.get('cc_version')}")
        add("flags", " ".join([b.get("opt", ""), *b.get("flags", [])]))
        add("ISA flags", "; ".join(f"{k}: {' '.join(v) or '(baseline)'}"
                                   for k, v in (b.get("isa_flags") or {}).items()))
    cpu = meta.get("cpu") or {}
    if cpu:
        add("CPU", f"{cpu.get('model')} ({cpu.get('machine')}, {cpu.get('logical_cpus')} logical CPUs)")
        add("CPU SIMD flags", " ".join(cpu.get("simd_flags", [])))
    fe = meta.get("fpenv") or {}
    if fe:
        add("FP environment", f"{fe.get('register')} — FTZ {'on' if fe.get('ftz') else 'off'}, "
                              f"DAZ {'on' if fe.get('daz') else 'off'} ({fe.get('method')})")
    add("ISA paths run", ", ".join(meta.get("isas", [])))
    add("ISA paths available", ", ".join(meta.get("isas_available", [])))
    add("thread counts", ", ".join(map(str, meta.get("threads", []))))
    add("tiers", ", ".join(meta.get("tiers", [])))
    add("case filter", meta.get("case"))
    add("per-call timeout", f"{meta['timeout_s']:g} s" if meta.get("timeout_s") else None)
    h = meta.get("host") or {}
    if h:
        add("host", f"{h.get('os')}; Python {h.get('python')}; NumPy {h.get('numpy')}; "
                    f"h5py {h.get('h5py')}")
    t = meta.get("tool") or {}
    if t:
        add("tool", f"{t.get('name')} {t.get('version')}")
        add("command", t.get("command"))
    add("started", meta.get("started"))
    if meta.get("wall_s") is not None:
        add("wall time", f"{meta['wall_s']:.2f} s")
    return p


def _outputs(recs, meta) -> list[dict]:
    """What the port printed: at load, then per case and run (record field `output`)."""
    out = [{"title": "while the port was loaded", "text": meta["port_load_output"]}] \
        if meta.get("port_load_output") else []
    return out + [{"title": f"{r['layer']}/{r['case']} · {r['isa']} × {r['threads']}",
                   "text": r["output"]} for r in recs if r.get("output")]


def _fixtures(meta) -> list[dict]:
    out = []
    for name, f in (meta.get("fixtures") or {}).items():
        out.append({"name": name, "layer": f.get("layer", ""), "cases": f.get("cases", ""),
                    "schema": f.get("schema_version", ""), "spec": f.get("spec_version", ""),
                    "generator": f.get("generator", ""), "seed": f.get("seed", ""),
                    "draw": f.get("draw", "—"), "sha256": f.get("sha256", "")})
    return out


# ---- plots (inline SVG) -----------------------------------------------------------------

def _bin_color(unit: str, lo: float, hi: float) -> str:
    if unit == "ulp":
        return COLORS["g"] if hi == 0 else COLORS["r"]
    if hi <= GREEN:
        return COLORS["g"]
    if hi <= AMBER:
        return COLORS["a"]
    return COLORS["r"]


def _edge_label(x: float, unit: str) -> str:
    if unit == "ulp":
        return f"{int(x)}" if x < 1024 else f"2^{int(round(math.log2(x)))}"
    e = math.log10(x)
    if abs(e - round(e)) < 1e-9:
        return {0: "1", 1: "10", 2: "100", -1: "0.1"}.get(round(e), f"1e{round(e)}")
    return ""


def hist_svg(h: dict) -> str:
    """Bars: [0] exactly zero, [≤ first edge], one per bin, [> last edge]; log-scaled counts."""
    unit, edges = h["unit"], h["edges"]
    bars = ([("0", 0.0, 0.0, h["zero"]), (f"≤{_edge_label(edges[0], unit) or edges[0]}",
                                           0.0, edges[0], h["below"])]
            + [(f"({edges[i]:.3g}, {edges[i + 1]:.3g}]", edges[i], edges[i + 1], c)
               for i, c in enumerate(h["counts"])]
            + [(f">{edges[-1]:.3g} (incl. NaN/Inf)", edges[-1], math.inf, h["above"])])
    W, H, left, top, bottom = 560, 170, 40, 14, 36
    bw = (W - left - 8) / len(bars)
    top_count = max((b[3] for b in bars), default=0)
    scale = math.log10(1 + top_count) or 1.0
    plot_h = H - top - bottom
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="plot" viewBox="0 0 {W} {H}" '
             f'width="{W}" height="{H}" role="img" aria-label="histogram of per-element {unit}">']
    parts.append(f'<line x1="{left}" y1="{top + plot_h}" x2="{W - 8}" y2="{top + plot_h}" class="axis"/>')
    for i, (label, lo, hi, c) in enumerate(bars):
        x = left + i * bw
        bh = plot_h * math.log10(1 + c) / scale if c else 0
        color = COLORS["g"] if i == 0 else _bin_color(unit, lo, hi)
        parts.append(f'<rect x="{x + 1:.1f}" y="{top + plot_h - bh:.1f}" width="{bw - 2:.1f}" '
                     f'height="{max(bh, 0):.1f}" fill="{color}"><title>{escape(label)}: {c} '
                     f'element(s)</title></rect>')
        if c:
            parts.append(f'<text x="{x + bw / 2:.1f}" y="{top + plot_h - bh - 2:.1f}" '
                         f'class="cnt">{c}</text>')
    # x labels at bin boundaries that fall on a decade (usage) or every 4th power of 2 (ulp)
    parts.append(f'<text x="{left + bw / 2:.1f}" y="{H - bottom + 14}" class="lbl">0</text>')
    for i, e in enumerate(edges):
        x = left + (i + 2) * bw
        lab = _edge_label(e, unit) if unit == "usage" else (f"{int(e)}" if i % 4 == 0 and e < 1024
                                                            else (f"2^{i}" if i % 4 == 0 else ""))
        if lab:
            parts.append(f'<line x1="{x:.1f}" y1="{top + plot_h}" x2="{x:.1f}" y2="{top + plot_h + 4}" class="axis"/>')
            parts.append(f'<text x="{x:.1f}" y="{H - bottom + 14}" class="lbl">{lab}</text>')
        if unit == "usage" and abs(e - 1.0) < 1e-12:
            parts.append(f'<line x1="{x:.1f}" y1="{top - 4}" x2="{x:.1f}" y2="{top + plot_h}" class="limit"/>'
                         f'<text x="{x + 3:.1f}" y="{top + 6}" class="lbl" text-anchor="start">allowance</text>')
    xlabel = ("per-element |diff| / allowance" if unit == "usage"
              else "per-element distance in ulps (differing elements)")
    parts.append(f'<text x="{(W + left) / 2:.0f}" y="{H - 4}" class="lbl">{xlabel}; '
                 f'bar height log-scaled</text>')
    parts.append(f'<text x="4" y="{top + 8}" class="lbl" text-anchor="start">n</text></svg>')
    return "".join(parts)


MAX_SVG_CELLS = 256


def _png(rows: list[list[str]]) -> str:
    """A base64 RGB PNG from rows of '#rrggbb' colours (no dependency: zlib + CRC chunks)."""
    import base64
    import struct
    import zlib
    h, w = len(rows), len(rows[0])
    raw = b"".join(b"\x00" + bytes.fromhex("".join(c[1:] for c in row)) for row in rows)

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))

    png = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
           + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))
    return base64.b64encode(png).decode("ascii")


def _heat_color(v, unit: str) -> str:
    if v is None:
        return "#6b0f0f"
    if v == 0:
        return "#eef1f4"
    if unit == "ulp":
        t = min(1.0, math.log2(1 + v) / 20)
        return _mix("#f6b9b2", "#9e1b16", t)
    if v <= GREEN:
        return _mix("#d7f0dc", "#2e9d4e", v / GREEN)
    if v <= AMBER:
        return _mix("#f8e3a3", "#e0a100", (v - GREEN) / (AMBER - GREEN))
    return _mix("#f6b9b2", "#9e1b16", min(1.0, math.log10(v) / 2))


def _mix(c0: str, c1: str, t: float) -> str:
    t = max(0.0, min(1.0, t))
    a = [int(c0[i:i + 2], 16) for i in (1, 3, 5)]
    b = [int(c1[i:i + 2], 16) for i in (1, 3, 5)]
    return "#" + "".join(f"{round(x + (y - x) * t):02x}" for x, y in zip(a, b))


def heatmap_svg(hm: dict, unit: str = "usage") -> str:
    """Rows (first axis, grouped) × column groups, each cell the max per-element measure,
    plus a strip with each row group's max on the right."""
    grid = hm["max"]
    nr, nc = len(grid), len(grid[0]) if grid else 0
    cw = int(max(4, min(18, 480 // max(nc, 1))))
    ch = int(max(4, min(14, 300 // max(nr, 1))))
    left, top = 46, 18
    W = left + nc * cw + 44
    H = top + nr * ch + 30
    rs, cs = hm["row_starts"], hm["col_starts"]

    def span(starts, i, n):
        a = starts[i]
        b = (starts[i + 1] if i + 1 < len(starts) else n) - 1
        return f"{a}" if a == b else f"{a}–{b}"

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="plot" viewBox="0 0 {W:.0f} {H:.0f}" '
             f'width="{W:.0f}" height="{H:.0f}" role="img" aria-label="heat map">']
    if nr * nc <= MAX_SVG_CELLS:      # small: one rect per cell, each with its value on hover
        parts.append(f'<rect x="{left}" y="{top}" width="{nc * cw}" height="{nr * ch}" '
                     f'fill="{_heat_color(0, unit)}"/>')
        for i, row in enumerate(grid):
            for j, v in enumerate(row):
                if v != 0:
                    parts.append(f'<rect x="{left + j * cw}" y="{top + i * ch}" width="{cw}" '
                                 f'height="{ch}" fill="{_heat_color(v, unit)}"><title>rows '
                                 f'{span(rs, i, hm["rows"])}, cols {span(cs, j, hm["cols"])}: '
                                 f'{"∞" if v is None else v}</title></rect>')
    else:                             # large: the grid as a PNG, one pixel per cell, scaled up
        png = _png([[_heat_color(v, unit) for v in row] for row in grid])
        parts.append(f'<image x="{left}" y="{top}" width="{nc * cw}" height="{nr * ch}" '
                     f'preserveAspectRatio="none" style="image-rendering:optimizeSpeed;'
                     f'image-rendering:crisp-edges;image-rendering:pixelated" '
                     f'href="data:image/png;base64,{png}"/>')
    for i, row in enumerate(grid):
        y = top + i * ch
        rmax = None if any(v is None for v in row) else max(row, default=0)
        parts.append(f'<rect x="{left + nc * cw + 8}" y="{y}" width="14" height="{ch}" '
                     f'fill="{_heat_color(rmax, unit)}"><title>rows {span(rs, i, hm["rows"])}: max '
                     f'{("∞" if rmax is None else rmax)}</title></rect>')
        if nr <= 16 or i % max(1, nr // 8) == 0:
            parts.append(f'<text x="{left - 4}" y="{y + ch / 2 + 3:.1f}" class="lbl" '
                         f'text-anchor="end">{rs[i]}</text>')
    parts.append(f'<text x="{left + nc * cw + 15:.1f}" y="{top - 5}" class="lbl">max</text>')
    for j in range(nc):
        if nc <= 16 or j % max(1, nc // 8) == 0:
            parts.append(f'<text x="{left + j * cw + cw / 2:.1f}" y="{top - 5}" class="lbl">{cs[j]}</text>')
    parts.append(f'<text x="{left + nc * cw / 2:.1f}" y="{H - 8:.0f}" class="lbl">columns '
                 f'(flattened trailing axes, {hm["cols"]} in {nc} groups) — rows: first axis '
                 f'({hm["rows"]} in {nr} groups)</text></svg>')
    return "".join(parts)
