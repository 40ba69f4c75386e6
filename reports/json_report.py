"""results.json: the gate's records in the documented schema (docs/report-schema.md,
reports/results.schema.json). The other reports (console, HTML, JUnit, diff) read this
document, so `crnn-conformance report` re-renders exactly what the gate rendered.

A check is one tensor of one case compared in one tier on one ISA x threads run: one record
of `tensors`, one row of the JUnit XML. Every report counts checks in that unit, and tensors
as distinct (layer, fixture, case, tensor)."""
from __future__ import annotations

import json
from pathlib import Path

REPORT_SCHEMA_VERSION = 2
SCHEMA_FILE = Path(__file__).with_name("results.schema.json")
REQUIRED_RECORD_KEYS = ("fixture", "case", "layer", "tensor", "tier", "isa", "threads", "usage",
                        "max_abs_diff", "mismatches", "elements", "passed")
STATUSES = ("passed", "failed", "not implemented")


class ReportError(ValueError):
    """A results file that cannot be read (not JSON, another schema version, keys missing)."""


def to_json(result) -> dict:
    tensors = [r.to_dict() for r in result.records]
    return _clean({
        "schema_version": REPORT_SCHEMA_VERSION,
        "passed": result.passed,
        "summary": summary(tensors),
        "layers": layer_status(tensors, result.meta),
        "meta": result.meta,
        "tensors": tensors,
    })


def tensor_key(r: dict) -> tuple:
    """A tensor (a row of the console and HTML tables): (layer, fixture, case, tensor)."""
    return (r["layer"], r.get("fixture", ""), r["case"], r["tensor"])


def summary(records: list[dict]) -> dict:
    """Counts in checks (records): all, failed, per tier; and the distinct tensors."""
    by_tier = {}
    for r in records:
        t = by_tier.setdefault(r["tier"], {"checks": 0, "failed": 0})
        t["checks"] += 1
        t["failed"] += not r["passed"]
    return {"checks": len(records), "failed": sum(t["failed"] for t in by_tier.values()),
            "tensors": len({tensor_key(r) for r in records}), "tiers": by_tier}


def layer_status(records: list[dict], meta: dict) -> dict:
    """{layer: {status, checks, failed, tensors[, reason]}} in the run's layer order. A layer
    is `failed` when any of its checks failed, else `not implemented` when the port lacks its
    symbols or returned CRNN_E_UNSUPPORTED under `--layers available` (meta["not_implemented"]
    says which), else `passed`; a layer with no check and no such reason is left out. A
    layer some of whose cases were not run (two hangs in one entry point, meta["not_run"])
    also has `not_run`, their number, and the reason."""
    missing = meta.get("not_implemented") or {}
    skipped = meta.get("not_run") or {}
    order = list(meta.get("layers") or [])
    per: dict[str, list] = {}
    for r in records:
        per.setdefault(r["layer"], []).append(r)
        if r["layer"] not in order:
            order.append(r["layer"])
    out = {}
    for layer in order:
        recs = per.get(layer, [])
        if not recs and layer not in missing:
            continue
        failed = sum(not r["passed"] for r in recs)
        status = "failed" if failed else "not implemented" if layer in missing else "passed"
        out[layer] = {"status": status, "checks": len(recs), "failed": failed,
                      "tensors": len({tensor_key(r) for r in recs})}
        if layer in missing:
            out[layer]["reason"] = missing[layer]
        if layer in skipped:
            out[layer]["not_run"] = len(skipped[layer]["cases"])
            out[layer]["reason"] = skipped[layer]["reason"]
    return out


def dumps(doc: dict) -> str:
    return json.dumps(_clean(doc), indent=1, default=_default, allow_nan=False) + "\n"


def _clean(o):
    """JSON has no NaN or Inf: a non-finite float anywhere is written as null. A string holding
    bytes that are not UTF-8 (a path: Python keeps them as surrogates) shows them as U+FFFD."""
    return _cleaned((o,))[0]


def _cleaned(values) -> list:
    """[_clean(v) for v in values], the builtin types decided inline: a gate's records hold
    10^5 values, and a call for each cost more than the rest of the report."""
    out = []
    for v in values:
        kind = type(v)
        if kind is str:
            out.append(v if v.isascii() else _text(v))
        elif kind is float:
            out.append(v if v - v == 0.0 else None)    # inf - inf and NaN - NaN are NaN
        elif kind is int or kind is bool or v is None:
            out.append(v)
        elif kind is dict:
            out.append(dict(zip(v.keys(), _cleaned(v.values()))))
        elif kind is list or kind is tuple:
            out.append(_cleaned(v))
        else:
            out.append(_clean_subclass(v))
    return out


def _clean_subclass(o):
    """_clean of anything else: subclasses of float (numpy's float64), str, dict, list, tuple."""
    if isinstance(o, float):
        return o if o == o and o not in (float("inf"), float("-inf")) else None
    if isinstance(o, str):
        return _text(o)
    if isinstance(o, dict):
        return {k: _clean(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_clean(v) for v in o]
    return o


def _text(s: str) -> str:
    try:
        return s.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    except UnicodeEncodeError:      # half a UTF-16 pair (a JSON "\ud800" escape): U+FFFD too
        return s.encode("utf-8", "surrogatepass").decode("utf-8", "replace")


def write(result_or_doc, directory) -> Path:
    return write_file(result_or_doc, Path(directory) / "results.json")


def write_file(result_or_doc, path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = result_or_doc if isinstance(result_or_doc, dict) else to_json(result_or_doc)
    path.write_text(dumps(doc))
    return path


def load(path, notes: list | None = None) -> dict:
    """Reads a results.json: its schema version, then every field against the schema
    (reports/validate.py; a ReportError names the first bad field, `tensors[3].usage`). The
    verdict, `summary` and `layers` are then worked out from the records alone, as the gate
    works them out; where the file's own differ, the file's are replaced and `notes` (a list,
    when given) gets a sentence saying what the file claimed."""
    from . import validate
    path = Path(path)
    try:
        doc = validate.parse(path.read_text())
    except FileNotFoundError:
        raise ReportError(f"results file not found: {path}") from None
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise ReportError(f"{path} is not a readable JSON file ({e})") from None
    if not isinstance(doc, dict) or "schema_version" not in doc:
        raise ReportError(f"{path} is not a crnn-conformance results file (no schema_version)")
    version = doc["schema_version"]
    if type(version) is not int or version != REPORT_SCHEMA_VERSION:
        raise ReportError(f"{path} has results schema version {validate.show(version)}; this "
                          f"version of crnn-conformance reads version {REPORT_SCHEMA_VERSION}")
    try:
        validate.check(doc)
    except validate.Invalid as e:
        raise ReportError(f"{path}: {e} (docs/report-schema.md)") from None
    doc = _clean(doc)
    tensors = doc["tensors"]
    meta = doc.setdefault("meta", {})
    derived = {"passed": all(r["passed"] for r in tensors), "summary": summary(tensors),
               "layers": layer_status(tensors, meta)}
    for key, value in derived.items():
        if key in doc and doc[key] != value and notes is not None:
            notes.append(f"{path}: {_contradiction(key, doc[key], value, derived['summary'])}")
        doc[key] = value
    return doc


def _contradiction(key: str, claimed, found, counts: dict) -> str:
    """A sentence: what the file claims that its records do not say."""
    if key == "passed":
        n, bad = counts["checks"], counts["failed"]
        records = (f"{bad} of its {n} checks failed" if bad else
                   f"every one of its {n} checks passed")
        return (f"the file says passed: {json.dumps(claimed)}, but {records}; the verdict "
                f"shown is the records' ({'PASS' if found else 'FAIL'})")
    if key == "summary":
        diffs = [f"{k} {json.dumps(claimed.get(k))} where the records give {json.dumps(found[k])}"
                 for k in ("checks", "failed", "tensors", "tiers") if claimed.get(k) != found[k]]
        return "its summary says " + "; ".join(diffs) + "; the records' counts are shown"
    diffs = [layer for layer in dict.fromkeys([*claimed, *found])
             if claimed.get(layer) != found.get(layer)]
    return ("its `layers` do not match its records for " + ", ".join(diffs)
            + "; the status worked out from the records is shown")


def _default(o):
    if hasattr(o, "item"):
        return o.item()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")
