"""The sharpness of the tolerance tiers, measured: allowance usage per layer x tier and the
resolution of every float64 / pytorch check (docs/tolerances.md, "Measured").

    python -m crnn_conformance.reports.summary                    # gate the bundled port
    python -m crnn_conformance.reports.summary --port libport.so  # another port
    python -m crnn_conformance.reports.summary results.json       # a saved run with resolution
    python -m crnn_conformance.reports.summary --json out.json    # also the rows, as JSON

Resolution of a check (the record's, harness/compare.resolution): the smallest uniform
relative error of the port's output that the check would detect, min over compared elements
with a finite nonzero reference of (allowance - |ours - ref|) / |ref| (the element fails first
when the output is scaled by 1 + eps). Without a results file, the command runs the gate's base
run (first ISA, 1 thread, tiers float64 and pytorch).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

TOLERANCE_TIERS = ("float64", "pytorch")


def gate_rows(port=None, layers=None) -> list[dict]:
    """Runs the base run of the gate (first ISA, 1 thread, the tolerance tiers) and returns
    one row per record of a floating-point tensor: layer, case, tensor, tier, usage,
    resolution (the record's: harness/compare.resolution), elements, passed."""
    from ..harness.runner import GateOptions, GateSession
    opts = GateOptions(port=port, tiers=TOLERANCE_TIERS, threads=(1,), layers=layers)
    rows = []
    with GateSession(opts) as s:
        for job in s.jobs:
            for r in s.run_case(job):
                ref = job.case.expected.get(r.tier, {}).get(r.tensor)
                if ref is None or np.asarray(ref).dtype.kind != "f":
                    continue   # the pool decisions (integers, compared for equality)
                rows.append({"layer": r.layer, "case": r.case, "tensor": r.tensor,
                             "tier": r.tier, "usage": r.usage, "resolution": r.resolution,
                             "elements": r.elements, "passed": r.passed})
    return rows


def file_rows(path) -> list[dict]:
    doc = json.loads(Path(path).read_text())
    rows = [r for r in doc["tensors"] if r["tier"] in TOLERANCE_TIERS]
    if rows and "resolution" not in rows[0]:
        raise SystemExit(f"{path}: its records carry no resolution; run without a file to gate "
                         "the port and compute it")
    return rows


def _q(values, qs):
    v = np.asarray([x for x in values if x is not None and np.isfinite(x)], np.float64)
    return [float(np.quantile(v, q)) if v.size else float("nan") for q in qs]


def summarize(rows) -> dict:
    """Usage per layer x tier (max, median), usage median / max per tier, resolution
    percentiles per tier and the shares at or below 1e-5 and 1e-4."""
    out = {"per_layer": {}, "tiers": {}}
    for tier in TOLERANCE_TIERS:
        tr = [r for r in rows if r["tier"] == tier]
        if not tr:
            continue
        layers = sorted({r["layer"] for r in tr}, key=[r["layer"] for r in tr].index)
        for layer in layers:
            u = [r["usage"] for r in tr if r["layer"] == layer]
            out["per_layer"][f"{layer}/{tier}"] = {"tensors": len(u), "max": _q(u, [1])[0],
                                                   "median": _q(u, [0.5])[0]}
        u = [r["usage"] for r in tr]
        res = [r["resolution"] for r in tr]
        finite = [x for x in res if x is not None and np.isfinite(x)]
        out["tiers"][tier] = {
            "tensors": len(tr), "usage_median": _q(u, [0.5])[0], "usage_max": _q(u, [1])[0],
            "resolution_p50": _q(res, [0.5])[0], "resolution_p95": _q(res, [0.95])[0],
            "resolution_max": _q(res, [1])[0],
            "resolution_le_1e-5": sum(x <= 1e-5 for x in finite) / max(len(finite), 1),
            "resolution_le_1e-4": sum(x <= 1e-4 for x in finite) / max(len(finite), 1),
            "worst_resolution": sorted(((r["resolution"], r["layer"], r["case"], r["tensor"])
                                        for r in tr if r["resolution"] is not None
                                        and np.isfinite(r["resolution"])), reverse=True)[:5]}
    return out


def render(s: dict) -> str:
    lines = [f"{'layer/tier':<18} {'tensors':>7} {'max usage':>10} {'median':>10}"]
    for k, v in s["per_layer"].items():
        lines.append(f"{k:<18} {v['tensors']:>7} {v['max']:>10.3g} {v['median']:>10.3g}")
    lines.append("")
    for tier, t in s["tiers"].items():
        lines.append(f"{tier}: {t['tensors']} tensors; usage median {t['usage_median']:.3g}, "
                     f"max {t['usage_max']:.3g}; resolution p50 {t['resolution_p50']:.2g}, "
                     f"p95 {t['resolution_p95']:.2g}, max {t['resolution_max']:.2g}; "
                     f"{100 * t['resolution_le_1e-5']:.1f} % <= 1e-5, "
                     f"{100 * t['resolution_le_1e-4']:.1f} % <= 1e-4")
        for res, layer, case, tensor in t["worst_resolution"]:
            lines.append(f"    {res:.2g}  {layer}/{case}/{tensor}")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m crnn_conformance.reports.summary",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("results", nargs="?", help="a results.json whose records carry resolution")
    ap.add_argument("--port", help="gate this port (default: the bundled kernels)")
    ap.add_argument("--layers", help="comma-separated layers (default: all)")
    ap.add_argument("--json", help="also write the rows and the summary to this file")
    a = ap.parse_args(argv)
    rows = (file_rows(a.results) if a.results else
            gate_rows(a.port, a.layers.split(",") if a.layers else None))
    s = summarize(rows)
    print(render(s))
    if a.json:
        Path(a.json).write_text(json.dumps({"summary": s, "rows": rows}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
