"""A port that implements some layers: the default gate is strict (exit 2, the missing symbols
grouped by layer, a hint), `--layers available` gates what the port exports and reports every
other layer as "not implemented" in the console, results.json, the HTML and the plugin; an
entry point returning CRNN_E_UNSUPPORTED is "not implemented" there and a failure elsewhere.

Ports (tests/ports/testport.c): -DTP_DOT16_ONLY exports the core and crnn_dot16 only; the
plain build implements dot16 and linear and returns CRNN_E_UNSUPPORTED from every other entry
point.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from crnn_conformance.ctypes_kernels.abi import LAYER_SYMBOLS
from crnn_conformance.harness.layers import LAYERS

from testports import build_port  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
OTHERS = [l for l in LAYERS if l != "dot16"]


def gate(*args, cwd=ROOT):
    return subprocess.run([sys.executable, "-m", "crnn_conformance.harness.cli", "gate", *args],
                          cwd=cwd, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def ports(tmp_path_factory):
    d = tmp_path_factory.mktemp("ports")
    return {"dot16": build_port(d, "-DTP_DOT16_ONLY"), "stubs": build_port(d)}


def test_default_is_strict_missing_symbols_grouped_by_layer(ports):
    r = gate("--port", str(ports["dot16"]))
    assert r.returncode == 2, r.stdout + r.stderr
    line = r.stderr.strip()
    assert len(line.splitlines()) == 1 and "Traceback" not in r.stderr
    n = len({s for l in OTHERS for s in LAYER_SYMBOLS[l]})
    assert f"is missing {n} symbol(s), by layer: " in line
    for layer in OTHERS:   # each layer named with its own symbols
        assert f"{layer}: {', '.join(LAYER_SYMBOLS[layer])}" in line, layer
    assert "dot16:" not in line
    assert line.endswith("(to gate only the layers it implements: --layers available)")


def test_available_gates_what_the_port_exports(ports, tmp_path):
    r = gate("--port", str(ports["dot16"]), "--layers", "available", "--report-dir", str(tmp_path))
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout
    assert "[dot16] passed: " in out
    for layer in OTHERS:
        assert f"[{layer}] not implemented: missing symbol(s) " in out, layer
    verdict = [l for l in out.splitlines() if l.startswith("PASS")][0]
    assert f"in 1 layer; not implemented: {', '.join(OTHERS)};" in verdict
    doc = json.loads((tmp_path / "results.json").read_text())
    assert doc["passed"] and {t["layer"] for t in doc["tensors"]} == {"dot16"}
    assert doc["layers"]["dot16"]["status"] == "passed"
    for layer in OTHERS:
        st = doc["layers"][layer]
        assert st["status"] == "not implemented" and st["checks"] == 0
        assert st["reason"] == f"missing symbol(s) {', '.join(LAYER_SYMBOLS[layer])}"
    html = (tmp_path / "index.html").read_text()
    assert html.count('data-status="not implemented"') == len(OTHERS)
    assert html.count('class="notimpl"') == len(OTHERS)


def test_unsupported_is_not_implemented_only_under_available(ports, tmp_path):
    stub_layers = [l for l in LAYERS if l not in ("dot16", "linear")]
    r = gate("--port", str(ports["stubs"]), "--layers", "available", "-q",
             "--json", str(tmp_path / "a.json"))
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads((tmp_path / "a.json").read_text())
    assert {l for l, st in doc["layers"].items() if st["status"] == "passed"} == {"dot16", "linear"}
    for layer in stub_layers:
        st = doc["layers"][layer]
        assert st["status"] == "not implemented", (layer, st)
        assert "returned -4 (CRNN_E_UNSUPPORTED)" in st["reason"], (layer, st)
    # the default gate: the same stubs are failures of their cases (exit 1)
    r = gate("--port", str(ports["stubs"]), "-q", "--json", str(tmp_path / "s.json"))
    assert r.returncode == 1, r.stdout + r.stderr
    doc = json.loads((tmp_path / "s.json").read_text())
    for layer in stub_layers:
        assert doc["layers"][layer]["status"] == "failed", layer
    assert "CRNN_E_UNSUPPORTED" in r.stdout


def test_no_check_at_all_cannot_run(ports):
    """Nothing implemented is not a pass: every selected case is a stub (clip, step, train3),
    or the port exports none of the layers' symbols."""
    r = gate("--port", str(ports["stubs"]), "--layers", "available", "--case", "crnn_v0_*")
    assert r.returncode == 2, r.stdout + r.stderr
    assert "no check ran" in r.stderr and "clip: crnn_clip_gradients returned -4" in r.stderr
    r = gate("--port", str(ports["dot16"]), "--layers", "available", "--case", "crnn_v0_*")
    assert r.returncode == 2, r.stdout + r.stderr


def test_plugin_skips_what_is_not_implemented(ports, tmp_path):
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    env = dict(os.environ)
    env.pop("PYTEST_ADDOPTS", None)
    env.pop("PYTEST_XDIST_WORKER", None)
    r = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rs",
                        f"--port={ports['dot16']}", "--crnn-layers", "available"], cwd=tmp_path, capture_output=True, text=True,
                       timeout=300, env=env)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr
    tail = r.stdout.strip().splitlines()[-1]
    from testports import dot16_fixture_checks
    from crnn_conformance.harness.contract import calls   # dot16's and the control functions'
    n = dot16_fixture_checks() + len(calls("dot16", core=True))
    assert tail.startswith(f"{n} passed, ") and "skipped" in tail and "failed" not in tail, tail
    assert "not implemented: missing symbol(s) crnn_linear_forward" in r.stdout


def test_a_partial_port_at_a_path_that_is_not_utf8(ports, tmp_path):
    """ctypes' message for a missing symbol cannot be decoded when the library's path holds
    the byte 0xff: the port is still a partial port (exit 2 naming the missing symbols, or
    its layers gated under --layers available), not a crash while loading."""
    so = Path(os.fsdecode(bytes(tmp_path) + b"/lib\xff.so"))
    so.write_bytes(ports["dot16"].read_bytes())
    r = subprocess.run([sys.executable, "-m", "crnn_conformance.harness.cli", "gate", "--port",
                        so, "-q"], cwd=ROOT, capture_output=True, timeout=300)
    assert r.returncode == 2 and b"is missing" in r.stderr and b"crashed" not in r.stderr, r.stderr
    r = subprocess.run([sys.executable, "-m", "crnn_conformance.harness.cli", "gate", "--port",
                        so, "--layers", "available", "-q"], cwd=ROOT, capture_output=True,
                       timeout=300)
    assert r.returncode == 0 and b"not implemented: linear" in r.stdout, r.stdout + r.stderr
