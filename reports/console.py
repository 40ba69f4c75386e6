"""The console: the allowance table, a legend, every failing check with its repro, the verdict.

Rendered from a results.json document (json_report), so `crnn-conformance report
RESULTS.json` prints what the gate printed. By default one row per layer and tier (checks,
passed, the worst usage or ulp distance, the worst resolution) under a line with the layer's
status (passed, failed, not implemented). With `verbose`, one row per tensor (layer, fixture,
case, tensor) instead, one column per tier, and two more columns give the resolution of the
float64 and pytorch checks. Every failing check is printed in full either way. Counts are in
checks (json_report's docstring defines the unit).
"""
from __future__ import annotations

from collections import defaultdict

import click

from .json_report import layer_status, summary, tensor_key

TIER_COLS = ("exact", "float64", "pytorch", "identity", "contract")
RES_COLS = ("float64", "pytorch")
RES_HEAD = {"float64": "res f64", "pytorch": "res pt"}
W_FIXTURE, W_CASE, W_TENSOR, W_CELL = 14, 24, 16, 9

LEGEND = (
    "legend (a check = one tensor of one case compared in one tier on one ISA x threads run):",
    "  exact     =            every bit equals the executable spec",
    "            69x27898ulp  69 elements differ, the farthest by 27898 units in the last place",
    "            3xNaN        3 differ, the worst with no distance: NaN (inf, poison, ...) where",
    "                         the reference is finite (its FAIL line says it in words)",
    "  float64   0.012        allowance usage: max over elements of |ours - ref| / allowance;",
    "  pytorch                passes at <= 1 (pytorch: 2*Atol + 2*Floor + 2*Rtol*|pt|)",
    "  identity  15/15        ISA x thread runs bit-identical to the base run / runs compared",
    "  contract  ok           the call (the row's tensor: an entry point and what its arguments",
    "                         break or probe) returned its documented code and wrote nothing",
    "                         it may not (docs/port-abi.md, \"The error contract\")",
    "  -                      no check of this tier for this tensor (no such reference)",
    "  no result              the port crashed, hung or returned an error, or (grade) the",
    "                         results hold no run of the case there (see its FAIL line)",
)
LEGEND_LAYERS = (
    "legend (a check = one tensor of one case compared in one tier on one ISA x threads run):",
    "  checks     the layer's checks in this tier; passed: how many of them passed",
    "  worst      exact, identity: = every bit equal in every check; 69x27898ulp: the worst",
    "             check, 69 elements differ, the farthest by 27898 units in the last place",
    "             float64, pytorch: the largest allowance usage, max |diff| / allowance",
    "             (passes at <= 1); no result: the port crashed, hung or returned an error,",
    "             or (grade) the results hold no run of a case (its FAIL line says which)",
    "             contract: ok every call returned its documented code and wrote nothing",
    "  worst res  the largest resolution of the tier's checks: the smallest uniform relative",
    "             error of the port's output that the weakest check would detect; above 1,",
    "             a reference far below its absolute allowance (a loss near 0: -v names it)",
    "  -v         a row per tensor instead, with each check's resolution",
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
    if tier == "contract":
        return "ok" if r["passed"] else "failed"
    if tier == "exact":
        return "=" if r["passed"] else f"{r['mismatches']}x{bit_figure(r)}"
    return _usage(r["usage"])


def bit_figure(r, sep: str = "") -> str:
    """A failed bit check's farthest element: `3ulp`, or in one word what an element with no
    distance is (`NaN`, `inf`, `poison`, ...: compare.unbounded_word)."""
    words = (r.get("worst") or {}).get("unbounded")
    if words:
        return "poison" if words.startswith("poison") else words.split()[0]
    return f"{r.get('max_ulp')}{sep}ulp"


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
    if r["tier"] == "contract":                     # one call of the error contract
        return (f"{r['layer']}/{r['case']}/{r['tensor']} tier=contract isa={r['isa']} "
                f"threads={r['threads']}: {r.get('note') or 'unknown'}")
    w = r.get("worst") or {}
    where = f"[{','.join(map(str, w.get('index', [])))}]" if w else ""
    words = f": {w['unbounded']}" if w.get("unbounded") else ""
    what = (f" worst {where} ours={w.get('ours')} ref={w.get('ref')} "
            f"allowance={w.get('allowance')}{worst_context(w)}{words}" if w else "")
    usage = f"usage={_usage(r['usage'])}" if r["tier"] in ("float64", "pytorch") else (
        f"mismatches={r['mismatches']}/{r['elements']}"
        + (f" max_ulp={r['max_ulp']}" if r.get("max_ulp") is not None else ""))
    note = r.get("note") or ""
    if words and ";" not in note:   # one kind of element: its words are said once, above
        note = note.replace(f" element(s): {w['unbounded']}", " element(s)")
    note = f" ({note})" if note else ""
    return (f"{r['layer']}/{r['case']}/{r['tensor']} tier={r['tier']} isa={r['isa']} "
            f"threads={r['threads']} {usage}{what}{note}")


def worst_context(w: dict) -> str:
    """What the worst element of an element-wise or packed case came from: its input
    (` x=-88.5`) or its sub-case with that sub-case's parameters (` in line 17 of 2226 (T=1
    K=2 ...) at [0,1]`); "" for any other case."""
    text = "".join(f" {k}={v}" for k, v in (w.get("input") or {}).items())
    sub = w.get("subcase")
    if sub:
        params = " ".join(f"{k}={_param(v)}" for k, v in sub.get("params", {}).items())
        text += f" in {sub['name']} {sub['index']} of {sub['of']} ({params})"
        if sub.get("element"):
            text += f" at [{','.join(map(str, sub['element']))}]"
    return text


def _param(v) -> str:
    return f"[{','.join(map(str, v))}]" if isinstance(v, list) else str(v)


def failure_line(r) -> str:
    return f"FAIL {failure_message(r)}\n  __REPRO: {_d(r).get('repro', '')}"


def _layer_line(layer: str, st: dict, recs=()) -> str:
    if st["status"] == "not implemented":
        cases = list(dict.fromkeys(f"{r.get('fixture')}/{r['case']}" for r in recs
                                   if r["layer"] == layer))
        named = ", ".join(cases[:3]) + (f" and {len(cases) - 3} more" if len(cases) > 3 else "")
        ran = (f"; {st['checks']} check(s) of the cases it did answer ran ({named})"
               if st["checks"] else "")
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
        line = _layer_line(layer, st, recs)
        lines.append(line if st["status"] != "failed" else click.style(line, fg="red"))
        for (l, fixture, case, tensor), tiers in rows.items():
            if l != layer:
                continue
            ok = all(r["passed"] for rs in tiers.values() for r in rs)
            name = f"{case[:W_CASE]:<{W_CASE}} {tensor[:W_TENSOR]:<{W_TENSOR}}"
            if "contract" in tiers:    # (a call's name over the case and tensor columns)
                name = f"{tensor[:len(name)]:<{len(name)}}"
            line = (f"{fixture[:W_FIXTURE]:<{W_FIXTURE}} {name} "
                    + " ".join(f"{_cell(t, tiers.get(t, [])):>{W_CELL}}" for t in TIER_COLS))
            if verbose:
                line += " " + " ".join(f"{_res_cell(tiers.get(t, [])):>{W_CELL}}" for t in RES_COLS)
            lines.append(line if ok else click.style(line, fg="red"))
    return lines + ["", *LEGEND, *(LEGEND_RES if verbose else ())]


def _worst(tier, recs) -> str:
    """The worst check of a layer in one tier: the largest usage (tolerance tiers) or the
    failing check farthest in ulp (bit tiers)."""
    if any(r["tensor"] == "*" for r in recs):
        return "no result"
    if tier in RES_COLS:
        return _usage(max(float("inf") if r["usage"] is None or r["usage"] != r["usage"]
                          else r["usage"] for r in recs))
    bad = [r for r in recs if not r["passed"]]
    if tier == "contract":          # a call keeps the contract or not: no distance
        return f"{len(bad)} failed" if bad else "ok"
    if not bad:
        return "="
    r = max(bad, key=lambda r: (r.get("max_ulp") or 0, r.get("mismatches") or 0))
    return f"{r['mismatches']}x{r['max_ulp']}ulp" if r.get("max_ulp") is not None else "failed"


def _worst_res(recs) -> str:
    res = [r["resolution"] for r in recs if r.get("resolution") is not None
           and r["resolution"] == r["resolution"] and r["resolution"] != float("inf")]
    return f"{max(res):.1e}" if res else "-"


def layer_table(doc: dict) -> list[str]:
    """A row per layer and tier, under the layer's status line, then the legend."""
    recs = doc.get("tensors", [])
    per = defaultdict(lambda: defaultdict(list))
    for r in recs:
        per[r["layer"]][r["tier"]].append(r)
    head = (f"  {'tier':<{W_CELL}} {'checks':>{W_CELL}} {'passed':>{W_CELL}} "
            f"{'worst':>{W_FIXTURE}} {'worst res':>{W_CELL}}")
    lines = [head, "-" * len(head)]
    tiers = [*TIER_COLS, *sorted({r["tier"] for r in recs} - set(TIER_COLS))]
    for layer, st in (doc.get("layers") or layer_status(recs, doc.get("meta", {}))).items():
        line = _layer_line(layer, st, recs)
        lines.append(line if st["status"] != "failed" else click.style(line, fg="red"))
        for tier in tiers:
            rs = per[layer].get(tier)
            if not rs:
                continue
            ok = sum(r["passed"] for r in rs)
            row = (f"  {tier:<{W_CELL}} {len(rs):>{W_CELL}} {ok:>{W_CELL}} "
                   f"{_worst(tier, rs):>{W_FIXTURE}} "
                   f"{_worst_res(rs) if tier in RES_COLS else '-':>{W_CELL}}")
            lines.append(row if ok == len(rs) else click.style(row, fg="red"))
    return lines + ["", *LEGEND_LAYERS]


def verdict(doc: dict) -> str:
    recs = doc.get("tensors", [])
    s = doc.get("summary") or summary(recs)
    m = doc.get("meta", {})
    layers = doc.get("layers") or layer_status(recs, m)
    passed = doc.get("passed", all(r["passed"] for r in recs))
    ni = [l for l, st in layers.items() if st["status"] == "not implemented"]
    gated = len(layers) - len(ni)
    named = [f"{l} (partly: {layers[l]['checks']} checks of the cases it answered)"
             if layers[l].get("checks") else l for l in ni]
    tail = f"; not implemented: {', '.join(named)}" if ni else ""
    if m.get("no_fixture"):
        tail += f"; no fixture: {', '.join(m['no_fixture'])}"
    return (f"{'PASS' if passed else 'FAIL'}: {s['checks'] - s['failed']} of {s['checks']} checks "
            f"passed ({s['tensors']} tensors in {gated} layer{'s' if gated != 1 else ''}{tail}; "
            f"{_runs(m)}; "
            f"{m.get('wall_s') or 0:.1f} s)")


def _runs(m: dict) -> str:
    """`ISA scalar,avx2; threads 1,7`, or the runs of `gate --runs`: `runs scalar:1,avx2:7`."""
    if m.get("runs"):
        return "runs " + ",".join(f"{i}:{t}" for i, t in m["runs"])
    return f"ISA {','.join(m.get('isas', []))}; threads {','.join(map(str, m.get('threads', [])))}"


def render(doc: dict, quiet: bool = False, verbose: bool = False) -> str:
    """The table and legend (unless quiet: a row per layer and tier, with verbose a row per
    tensor), every failure in full, the verdict line."""
    lines = [] if quiet else table(doc, True) if verbose else layer_table(doc)
    lines += [failure_line(r) for r in doc.get("tensors", []) if not r["passed"]]
    lines.append(verdict(doc))
    return "\n".join(lines)
