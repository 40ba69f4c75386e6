"""results.json: the gate's records in the documented schema (docs/report-schema.md,
reports/results.schema.json). The other reports (HTML, JUnit, diff) read this document, so
`crnn-conformance report` re-renders exactly what the gate rendered."""
from __future__ import annotations

import json
from pathlib import Path

REPORT_SCHEMA_VERSION = 1
SCHEMA_FILE = Path(__file__).with_name("results.schema.json")
REQUIRED_RECORD_KEYS = ("case", "layer", "tensor", "tier", "isa", "threads", "usage",
                        "max_abs_diff", "mismatches", "elements", "passed")


class ReportError(ValueError):
    """A results file that cannot be read (not JSON, another schema version, keys missing)."""


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
        tier, ok = (r["tier"], r["passed"]) if isinstance(r, dict) else (r.tier, r.passed)
        t = by_tier.setdefault(tier, {"records": 0, "failed": 0})
        t["records"] += 1
        t["failed"] += not ok
    failed = sum(t["failed"] for t in by_tier.values())
    return {"records": sum(t["records"] for t in by_tier.values()), "failed": failed,
            "tiers": by_tier}


def dumps(doc: dict) -> str:
    return json.dumps(_clean(doc), indent=1, default=_default, allow_nan=False) + "\n"


def _clean(o):
    """JSON has no NaN or Inf: a non-finite float anywhere is written as null."""
    if isinstance(o, float):
        return o if o == o and o not in (float("inf"), float("-inf")) else None
    if isinstance(o, dict):
        return {k: _clean(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_clean(v) for v in o]
    return o


def write(result_or_doc, directory) -> Path:
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    path = d / "results.json"
    doc = result_or_doc if isinstance(result_or_doc, dict) else to_json(result_or_doc)
    path.write_text(dumps(doc))
    return path


def load(path) -> dict:
    """Reads a results.json, checking its schema version and the keys the reports need."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        raise ReportError(f"results file not found: {path}") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ReportError(f"{path} is not a readable JSON file ({e})") from None
    if not isinstance(doc, dict) or "schema_version" not in doc:
        raise ReportError(f"{path} is not a crnn-conformance results file (no schema_version)")
    if doc["schema_version"] != REPORT_SCHEMA_VERSION:
        raise ReportError(f"{path} has results schema version {doc['schema_version']}; this "
                          f"version of crnn-conformance reads version {REPORT_SCHEMA_VERSION}")
    tensors = doc.get("tensors")
    if not isinstance(tensors, list):
        raise ReportError(f"{path} has no `tensors` list")
    for i, r in enumerate(tensors):
        missing = [k for k in REQUIRED_RECORD_KEYS if not isinstance(r, dict) or k not in r]
        if missing:
            raise ReportError(f"{path}: tensors[{i}] lacks {', '.join(missing)}")
    doc.setdefault("meta", {})
    doc.setdefault("passed", all(r["passed"] for r in tensors))
    doc.setdefault("summary", summary(tensors))
    return doc


def _default(o):
    if hasattr(o, "item"):
        return o.item()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")
