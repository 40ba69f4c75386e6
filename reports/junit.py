"""JUnit XML: one <testcase> per check (one results.json record), one <testsuite> per layer.

    <testsuites name="crnn-conformance" tests= failures= time=>
      <testsuite name="crnn.linear" tests= failures= errors="0" skipped= time=>
        <properties> port, port_sha256, abi_version, isas, threads, tool_version, status </properties>
        <testcase classname="crnn.linear.linear.T16_I37_O37" name="dW[float64 scalar t1]" time=>
          <failure type="float64" message="<worst element, one line>">the check with the
            command that reproduces it</failure>

The classname is crnn.<layer>.<fixture>.<case>, the name <tensor>[<tier> <isa> t<threads>]: unique
per check. `time` is the check's share of the port run it compares plus its comparison
(records' `seconds`), so a suite's time is the wall time its cases took. A crash or hang is the
testcase `*[<tier> ...]` of its case. `tests` counts checks, as every report does: a layer
that is not implemented (`--layers available`) is a suite with no testcase whose properties
`status` and `reason` say so. GitHub (via a JUnit action), GitLab and Jenkins show the failure
message and text as they are.
"""
from __future__ import annotations

import xml.etree.ElementTree as ET
from collections import OrderedDict
from pathlib import Path

from .console import failure_message
from .json_report import layer_status

def classname(r: dict) -> str:
    return f"crnn.{r['layer']}.{r.get('fixture') or r['layer']}.{r['case']}"


def testcase_name(r: dict) -> str:
    return f"{r['tensor']}[{r['tier']} {r['isa']} t{r['threads']}]"


def to_xml(doc: dict) -> ET.Element:
    meta = doc.get("meta", {})
    recs = doc.get("tensors", [])
    status = doc.get("layers") or layer_status(recs, meta)
    layers: OrderedDict[str, list] = OrderedDict((l, []) for l in meta.get("layers") or [])
    for r in recs:
        layers.setdefault(r["layer"], []).append(r)
    root = ET.Element("testsuites", name="crnn-conformance")
    total = failed = 0
    seconds = 0.0
    for layer, items in layers.items():
        st = status.get(layer)
        if st is None:
            continue
        n_fail = sum(not r["passed"] for r in items)
        t = sum(float(r.get("seconds") or 0.0) for r in items)
        suite = ET.SubElement(root, "testsuite", name=f"crnn.{layer}",
                              tests=str(len(items)), failures=str(n_fail), errors="0",
                              skipped="0", time=f"{t:.6f}")
        props = ET.SubElement(suite, "properties")
        extra = {"status": st["status"], **({"reason": st["reason"]} if "reason" in st else {})}
        for k, v in {**_properties(meta), **extra}.items():
            ET.SubElement(props, "property", name=k, value=v)
        for r in items:
            tc = ET.SubElement(suite, "testcase", classname=classname(r), name=testcase_name(r),
                               time=f"{float(r.get('seconds') or 0.0):.6f}")
            if not r["passed"]:
                f = ET.SubElement(tc, "failure", type=r["tier"], message=failure_message(r))
                f.text = f"{failure_message(r)}\n  reproduce: {r.get('repro', '')}"
        total += len(items)
        failed += n_fail
        seconds += t
    root.set("tests", str(total))
    root.set("failures", str(failed))
    root.set("errors", "0")
    root.set("time", f"{seconds:.6f}")
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
