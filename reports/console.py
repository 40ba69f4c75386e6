"""The console: the allowance table, a legend, every failing check with its repro, the verdict.

Rendered from a results.json document (json_report), so `crnn-conformance report
RESULTS.json` prints what the gate printed. One row per tensor (layer, fixture, case, tensor),
one column per tier, grouped by layer under a line with the layer's status (passed, failed,
not implemented). With `verbose`, two more columns give the resolution of the float64 and
pytorch checks. Counts are in checks (json_report's docstring defines the unit).
"""
from __future__ import annotations

from collections import defaultdict

import click

from .json_report import layer_status, summary, tensor_key

TIER_COLS = ("exact", "float64", "pytorch", "identity")
RES_COLS = ("float64", "pytorch")
RES_HEAD = {"float64": "res f64", "pytorch": "res pt"}
W_FIXTURE, W_CASE, W_TENSOR, W_CELL = 14, 24, 16, 9

LEGEND = (
    "legend (a check = one tensor of one case compared in one tier on one ISA x threads run):",
    "  exact     =            every bit equals the executable spec",
    "            69x27898ulp  69 elements differ, the farthest by 27898 units in the last place",
    "  float64   0.012        allowance usage: max over elements of |ours - ref| / allowance;",
    "  pytorch                passes at <= 1 (pytorch: 2*Atol + 2*Floor + 2*Rtol*|pt|)",
    "  identity  15/15        ISA x thread runs bit-identical to the base run / runs compared",
    "  -                      no check of this tier for this tensor (no such reference)",
    "  no result              the port crashed, hung or returned an error (see its FAIL line)",
)
LEGEND_RES = (
    "  res f64   3.1e-06      resolution: the smallest uniform relative error of the port's",
    "  res pt                 output that the check would detect (0: it already fails)",
)


def _cell(tier, recs):
    if not recs:
        return "-"
    if any(r["tensor"] == "*" for r in recs):
        return "no result"
    if tier == "identity":
        ok = sum(r["passed"] for r in recs)
        return f"{ok}/{len(recs)}"
    r = recs[0]
    if tier == "exact":
        return "=" if r["passed"] else f"{r['mismatches']}x{r.get('max_ulp')}ulp"
    return _usage(r["usage"])


def _res_cell(recs):
    if not recs or recs[0].get("resolution") is None:
        return "-"
    return f"{recs[0]['resolution']:.1e}"


def _usage(u):
    if u is None or u != u or u == float("inf"):
        return "inf"
    if 0 < u < 0.001:
        return f"{u:.1e}"
    return f"{u:.3f}" if u < 1000 else f"{u:.2e}"


def _d(r) -> dict:
    return r if isinstance(r, dict) else r.to_dict()


def failure_message(r) -> str:
    """One line: what failed and its worst element (a Record or a results.json record)."""
    r = _d(r)
    if r["tensor"] == "*" and not r["elements"]:   # the port crashed, hung or returned an error
        return (f"{r['layer']}/{r['case']}/* tier={r['tier']} isa={r['isa']} "
                f"threads={r['threads']}: no result: {r.get('note') or 'unknown'}")
    w = r.get("worst") or {}
    where = f"[{','.join(map(str, w.get('index', [])))}]" if w else ""
    what = (f" worst {where} ours={w.get('ours')} ref={w.get('ref')} allowance={w.get('allowance')}"
            if w else "")
    usage = f"usage={_usage(r['usage'])}" if r["tier"] in ("float64", "pytorch") else (
        f"mismatches={r['mismatches']}/{r['elements']} max_ulp={r.get('max_ulp')}")
    note = f" ({r['note']})" if r.get("note") else ""
    return (f"{r['layer']}/{r['case']}/{r['tensor']} tier={r['tier']} isa={r['isa']} "
            f"threads={r['threads']} {usage}{what}{note}")


def failure_line(r) -> str:
    return f"FAIL {failure_message(r)}\n  __REPRO: {_d(r).get('repro', '')}"


def _layer_line(layer: str, st: dict) -> str:
    if st["status"] == "not implemented":
        ran = f"; {st['checks']} check(s) of other cases ran" if st["checks"] else ""
        return f"[{layer}] not implemented: {st.get('reason', '')}{ran}"
    failed = f", {st['failed']} failed" if st["failed"] else ""
    skipped = f"; {st['not_run']} case(s) {st['reason']}" if st.get("not_run") else ""
    return (f"[{layer}] {st['status']}: {st['checks']} checks{failed}, {st['tensors']} tensors"
            f"{skipped}")


def table(doc: dict, verbose: bool = False) -> list[str]:
    recs = doc.get("tensors", [])
    rows = defaultdict(lambda: defaultdict(list))
    for r in recs:
        rows[tensor_key(r)][r["tier"]].append(r)
    head = (f"{'fixture':<{W_FIXTURE}} {'case':<{W_CASE}} {'tensor':<{W_TENSOR}} "
            + " ".join(f"{t:>{W_CELL}}" for t in TIER_COLS))
    if verbose:
        head += " " + " ".join(f"{RES_HEAD[t]:>{W_CELL}}" for t in RES_COLS)
    lines = [head, "-" * len(head)]
    layers = doc.get("layers") or layer_status(recs, doc.get("meta", {}))
    for layer, st in layers.items():
        line = _layer_line(layer, st)
        lines.append(line if st["status"] != "failed" else click.style(line, fg="red"))
        for (l, fixture, case, tensor), tiers in rows.items():
            if l != layer:
                continue
            ok = all(r["passed"] for rs in tiers.values() for r in rs)
            line = (f"{fixture[:W_FIXTURE]:<{W_FIXTURE}} {case[:W_CASE]:<{W_CASE}} "
                    f"{tensor[:W_TENSOR]:<{W_TENSOR}} "
                    + " ".join(f"{_cell(t, tiers.get(t, [])):>{W_CELL}}" for t in TIER_COLS))
            if verbose:
                line += " " + " ".join(f"{_res_cell(tiers.get(t, [])):>{W_CELL}}" for t in RES_COLS)
            lines.append(line if ok else click.style(line, fg="red"))
    return lines + ["", *LEGEND, *(LEGEND_RES if verbose else ())]


def verdict(doc: dict) -> str:
    recs = doc.get("tensors", [])
    s = doc.get("summary") or summary(recs)
    m = doc.get("meta", {})
    layers = doc.get("layers") or layer_status(recs, m)
    passed = doc.get("passed", all(r["passed"] for r in recs))
    ni = [l for l, st in layers.items() if st["status"] == "not implemented"]
    gated = len(layers) - len(ni)
    tail = f"; not implemented: {', '.join(ni)}" if ni else ""
    return (f"{'PASS' if passed else 'FAIL'}: {s['checks'] - s['failed']} of {s['checks']} checks "
            f"passed ({s['tensors']} tensors in {gated} layer{'s' if gated != 1 else ''}{tail}; "
            f"ISA {','.join(m.get('isas', []))}; threads {','.join(map(str, m.get('threads', [])))}; "
            f"{m.get('wall_s') or 0:.1f} s)")


def render(doc: dict, quiet: bool = False, verbose: bool = False) -> str:
    """The table and legend (unless quiet), the failures, the verdict line."""
    lines = [] if quiet else table(doc, verbose)
    lines += [failure_line(r) for r in doc.get("tensors", []) if not r["passed"]]
    lines.append(verdict(doc))
    return "\n".join(lines)
