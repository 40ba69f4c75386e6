"""The console table: one row per (layer, case, tensor), one column per tier.

exact: `=` all bits equal, else mismatches and the max ulp distance; float64 / pytorch: the
allowance usage (pass at <= 1); identity: ISA x thread runs equal to the base run / total.
Every failing record is then listed with its worst element and the command that reproduces it.
"""
from __future__ import annotations

from collections import defaultdict

import click

TIER_COLS = ("exact", "float64", "pytorch", "identity")


def _cell(tier, recs):
    if not recs:
        return "-"
    if tier == "identity":
        ok = sum(r.passed for r in recs)
        return f"{ok}/{len(recs)}"
    r = recs[0]
    if tier == "exact":
        return "=" if r.passed else f"{r.mismatches}x{r.max_ulp}ulp"
    return _usage(r.usage)


def _usage(u):
    if u is None or u != u or u == float("inf"):
        return "inf"
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


def render(result, quiet: bool = False) -> str:
    rows = defaultdict(lambda: defaultdict(list))
    for r in result.records:
        rows[(r.layer, r.case, r.tensor)][r.tier].append(r)
    lines = []
    if not quiet:
        head = f"{'layer':<7} {'case':<24} {'tensor':<16} " + " ".join(f"{t:>9}" for t in TIER_COLS)
        lines += [head, "-" * len(head)]
        for (layer, case, tensor), tiers in rows.items():
            ok = all(r.passed for recs in tiers.values() for r in recs)
            line = (f"{layer:<7} {case[:24]:<24} {tensor[:16]:<16} "
                    + " ".join(f"{_cell(t, tiers.get(t, [])):>9}" for t in TIER_COLS))
            lines.append(line if ok else click.style(line, fg="red"))
    fails = [r for r in result.records if not r.passed]
    lines += [failure_line(r) for r in fails]
    n = len(result.records)
    m = result.meta
    verdict = "PASS" if result.passed else "FAIL"
    lines.append(f"{verdict}: {n - len(fails)} of {n} checks passed "
                 f"({len(rows)} tensors; ISA {','.join(m.get('isas', []))}; threads "
                 f"{','.join(map(str, m.get('threads', [])))}; {m.get('wall_s', 0):.1f} s)")
    return "\n".join(lines)
