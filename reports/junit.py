"""JUnit XML: one <testcase> per (case, tensor, tier), one <testsuite> per layer.

    <testsuites name="crnn-conformance" tests= failures= time=>
      <testsuite name="crnn.linear" tests= failures= errors="0" skipped="0" time=>
        <properties> port, port_sha256, abi_version, isas, threads, tool_version </properties>
        <testcase classname="crnn.linear.T16_I37_O37" name="dW[float64]" time="0">
          <failure type="float64" message="<worst element, one line>">every failing record
            (identity: each ISA x threads run that differs) with its repro command</failure>

The identity tier's records (one per ISA x thread count) are one testcase whose failure lists
every run that differs. A crash or hang is the testcase `*[tier]` of its case. GitHub (via a
JUnit action), GitLab and Jenkins show the failure message and text as they are.
"""
from __future__ import annotations

import xml.etree.ElementTree as ET
from collections import OrderedDict
from pathlib import Path

from .console import failure_message

TIER_ORDER = ("exact", "float64", "pytorch", "identity")


def testcases(doc: dict) -> "OrderedDict[tuple, list[dict]]":
    """(layer, case, tensor, tier) -> its records, in the order the gate ran them."""
    out: OrderedDict[tuple, list[dict]] = OrderedDict()
    for r in doc.get("tensors", []):
        out.setdefault((r["layer"], r["case"], r["tensor"], r["tier"]), []).append(r)
    return out


def testcase_name(tensor: str, tier: str) -> str:
    return f"{tensor}[{tier}]"


def to_xml(doc: dict) -> ET.Element:
    meta = doc.get("meta", {})
    cases = testcases(doc)
    layers: OrderedDict[str, list] = OrderedDict((l, []) for l in meta.get("layers") or [])
    for key, recs in cases.items():
        layers.setdefault(key[0], []).append((key, recs))
    wall = float(meta.get("wall_s") or 0.0)
    root = ET.Element("testsuites", name="crnn-conformance")
    total = failed = 0
    for layer, items in layers.items():
        if not items:
            continue
        n_fail = sum(any(not r["passed"] for r in recs) for _, recs in items)
        suite = ET.SubElement(root, "testsuite", name=f"crnn.{layer}", tests=str(len(items)),
                              failures=str(n_fail), errors="0", skipped="0",
                              time=f"{wall * len(items) / max(len(cases), 1):.3f}")
        props = ET.SubElement(suite, "properties")
        for k, v in _properties(meta).items():
            ET.SubElement(props, "property", name=k, value=v)
        for (l, case, tensor, tier), recs in items:
            tc = ET.SubElement(suite, "testcase", classname=f"crnn.{layer}.{case}",
                               name=testcase_name(tensor, tier), time="0")
            bad = [r for r in recs if not r["passed"]]
            if bad:
                worst = max(bad, key=lambda r: float("inf") if r["usage"] is None else r["usage"])
                msg = failure_message(worst)
                if len(bad) > 1:
                    msg += f" (+{len(bad) - 1} more run(s))"
                f = ET.SubElement(tc, "failure", type=tier, message=msg)
                f.text = "\n".join(f"{failure_message(r)}\n  reproduce: {r.get('repro', '')}"
                                   for r in bad)
            elif tier == "identity":
                ET.SubElement(tc, "system-out").text = (
                    f"{len(recs)} ISA x threads run(s) bit-identical to the base run")
        total += len(items)
        failed += n_fail
    root.set("tests", str(total))
    root.set("failures", str(failed))
    root.set("errors", "0")
    root.set("time", f"{wall:.3f}")
    return root


def _properties(meta: dict) -> dict:
    p = {"port": meta.get("port"), "port_sha256": meta.get("port_sha256"),
         "abi_version": meta.get("abi_version"), "isas": ",".join(meta.get("isas") or []),
         "threads": ",".join(map(str, meta.get("threads") or [])),
         "tool_version": (meta.get("tool") or {}).get("version"),
         "cpu": (meta.get("cpu") or {}).get("model")}
    return {k: str(v) for k, v in p.items() if v not in (None, "")}


def write(doc: dict, path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tree = ET.ElementTree(to_xml(doc))
    ET.indent(tree, space=" ")
    tree.write(path, encoding="utf-8", xml_declaration=True)
    return path
