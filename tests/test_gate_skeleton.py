"""The gate end to end on dot16 and linear: the bundled port passes, a mutant fails."""
from __future__ import annotations

import json
import subprocess
import sys

from crnn_conformance.ctypes_kernels.build import build


def gate(*args, **kw):
    return subprocess.run([sys.executable, "-m", "crnn_conformance.harness.cli", "gate", *args],
                          capture_output=True, text=True, **kw)


def test_bundled_port_passes_every_tier_and_path(tmp_path, isas):
    r = gate("--layers", "dot16,linear", "--report-dir", str(tmp_path))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "PASS" in r.stdout
    data = json.loads((tmp_path / "results.json").read_text())
    assert data["passed"] is True
    seen = {(t["tier"], t["isa"], t["threads"]) for t in data["tensors"]}
    for tier in ("exact", "float64"):
        assert any(s[0] == tier for s in seen), tier
    for isa in isas:
        for threads in (1, 2, 3, 7):
            assert ("identity", isa, threads) in seen or (isa, threads) == (isas[0], 1)
    usage = [t["usage"] for t in data["tensors"] if t["tier"] == "float64"]
    assert usage and max(usage) <= 0.5


def test_sequential_sum_mutant_fails_exact_tier():
    so = build(mutant="sequential")
    r = gate("--port", str(so), "--layers", "dot16,linear", "--tiers", "exact,float64",
             "--threads", "1")
    assert r.returncode == 1, r.stdout + r.stderr
    fails = [l for l in r.stdout.splitlines() if l.startswith("FAIL ")]
    assert any("tier=exact" in l and l.startswith("FAIL linear/") for l in fails), r.stdout
    assert not any("tier=float64" in l for l in fails), "a summation order is within rounding"
    assert "__REPRO: crnn-conformance gate --port" in r.stdout


def test_unknown_layer_cannot_run():
    r = gate("--layers", "nosuch")
    assert r.returncode == 2
    assert "unknown layer" in r.stderr and "Traceback" not in r.stderr
