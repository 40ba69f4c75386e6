"""Two machines graded as one: the port author's workflow of docs/case-bundle.md end to end.

`export` writes a bundle here; `build-runner` and `build-port` make crnn-run and the bundled
port natively (x86-64) and with the aarch64 cross compiler; crnn-run runs the bundle on each
(aarch64 under qemu-user); one `grade` judges both results files, so the identity tier
compares every ISA path of both machines with the base run bit for bit. Only the commands a
user types are used.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

CROSS_CC = "aarch64-linux-gnu-gcc"
QEMU = ("qemu-aarch64", "-L", "/usr/aarch64-linux-gnu")
# the step too: its first LSTM layer's dx takes its own kernel on 4-float paths (neon)
LAYERS = "dot16,linear,conv,step"


def cli(*args, timeout=900):
    return subprocess.run([sys.executable, "-m", "crnn_conformance.harness.cli", *map(str, args)],
                          capture_output=True, text=True, timeout=timeout)


def _cross_tools():
    missing = [t for t in (CROSS_CC, QEMU[0]) if not shutil.which(t)]
    if missing or not Path(QEMU[2]).is_dir():
        pytest.skip(f"no {', '.join(missing) or QEMU[2]} (apt-get install gcc-aarch64-linux-gnu "
                    "qemu-user libc6-dev-arm64-cross)")


@pytest.fixture(scope="module")
def machines(tmp_path_factory):
    """(bundle dir, x86-64 results, aarch64 results) of the bundled port on LAYERS."""
    _cross_tools()
    work = tmp_path_factory.mktemp("cross")
    bundle = work / "bundle"
    r = cli("export", "--out", bundle, "--layers", LAYERS, "-q")
    assert r.returncode == 0, r.stderr
    results = {}
    for arch, cc, prefix in (("x86_64", None, ()), ("aarch64", CROSS_CC, QEMU)):
        exe, port = work / f"crnn-run-{arch}", work / f"libport-{arch}.so"
        for cmd, out in (("build-runner", exe), ("build-port", port)):
            r = cli(cmd, *(("--cc", cc) if cc else ()), "--out", out)
            assert r.returncode == 0, r.stderr
        res = work / f"{arch}.res"
        run = subprocess.run([*prefix, str(exe), str(port), str(bundle), str(res),
                              "--threads", "1,3"], capture_output=True, text=True, timeout=900)
        assert run.returncode == 0, run.stderr
        results[arch] = res
    return work, bundle, results


def test_x86_64_and_aarch64_grade_as_identical(machines):
    work, bundle, results = machines
    out = work / "both.json"
    r = cli("grade", bundle, results["x86_64"], results["aarch64"], "-q", "--json", out)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr
    doc = json.loads(out.read_text())
    assert doc["passed"]
    assert {m["arch"] for m in doc["meta"]["machines"]} == {"x86_64", "aarch64"}
    ident = {t["isa"] for t in doc["tensors"] if t["tier"] == "identity"}
    assert {"aarch64:scalar", "aarch64:neon"} <= ident   # every aarch64 path compared
    assert any(i.startswith("x86_64:") for i in ident)
    tiers = {t["tier"] for t in doc["tensors"]}
    assert {"exact", "float64", "identity"} <= tiers
    exact = [t for t in doc["tensors"] if t["tier"] == "exact"]
    assert exact and all(t["isa"] == "x86_64:scalar" for t in exact)


def test_a_changed_bit_on_one_machine_fails_identity_naming_it(machines):
    """The aarch64 results with one byte of one written buffer changed (the file stays
    well-formed): grade fails the identity tier there, naming aarch64's run and the base."""
    work, bundle, results = machines
    data = bytearray(results["aarch64"].read_bytes())
    at = data.rindex(b"END_")            # the last run: flip a byte of its last written record
    data[at - 16] ^= 0x01
    edited = work / "aarch64-edited.res"
    edited.write_bytes(bytes(data))
    out = work / "edited.json"
    r = cli("grade", bundle, results["x86_64"], edited, "-q", "--json", out)
    assert r.returncode == 1, r.stdout + r.stderr
    bad = [t for t in json.loads(out.read_text())["tensors"] if not t["passed"]]
    assert bad and all(t["tier"] == "identity" and t["isa"].startswith("aarch64:") for t in bad)
    assert all("differs from x86_64:scalar x 1 thread" in t["note"] for t in bad), bad[0]["note"]
