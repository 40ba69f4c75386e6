"""results.json: the gate's records in the documented schema (docs/report-schema.md)."""
from __future__ import annotations

import json
from pathlib import Path

REPORT_SCHEMA_VERSION = 1


def to_json(result) -> dict:
    return {
        "schema_version": REPORT_SCHEMA_VERSION,
        "passed": result.passed,
        "summary": summary(result.records),
        "meta": result.meta,
        "tensors": [r.to_dict() for r in result.records],
    }


def summary(records) -> dict:
    by_tier = {}
    for r in records:
        t = by_tier.setdefault(r.tier, {"records": 0, "failed": 0})
        t["records"] += 1
        t["failed"] += not r.passed
    return {"records": len(records), "failed": sum(not r.passed for r in records), "tiers": by_tier}


def write(result, directory) -> Path:
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    path = d / "results.json"
    path.write_text(json.dumps(to_json(result), indent=1, default=_default) + "\n")
    return path


def _default(o):
    if hasattr(o, "item"):
        return o.item()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")
