"""The pytest plugin: `pytest --port PATH` collects one test per (case, tensor, tier) through the
gate's own code path; -k, --junitxml and -n 2 work; without its options it does nothing."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "ports"))
from testports import build_port  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
LAYERS = ["--crnn-layers", "dot16,linear"]
REGISTERED = any(e.value == "crnn_conformance.harness.pytest_plugin"
                 for e in metadata.entry_points(group="pytest11"))


def run_pytest(cwd, *args, timeout=180):
    """pytest in a fresh directory of its own (an empty pytest.ini makes it the rootdir)."""
    (Path(cwd) / "pytest.ini").write_text("[pytest]\n")
    plugin = [] if REGISTERED else ["-p", "crnn_conformance.harness.pytest_plugin"]
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("PYTEST_ADDOPTS", None)
    env.pop("PYTEST_XDIST_WORKER", None)
    # other installed plugins are switched off: they only slow each start-up down
    quiet = ["-p", "no:cacheprovider", "-p", "no:randomly", "-p", "no:hypothesispytest",
             "-p", "no:benchmark"]
    return subprocess.run([sys.executable, "-m", "pytest", *quiet, *plugin, *args], cwd=cwd,
                          capture_output=True, text=True, timeout=timeout, env=env)


@pytest.fixture(scope="module")
def nan_port(tmp_path_factory):
    return build_port(tmp_path_factory.mktemp("ports"), "-DTP_NAN")


@pytest.fixture(scope="module")
def gate_keys(nan_port, tmp_path_factory):
    """The (layer, case, tensor, tier) checks of the gate itself on the same port."""
    d = tmp_path_factory.mktemp("gate")
    r = subprocess.run([sys.executable, "-m", "crnn_conformance.harness.cli", "gate", f"--port={nan_port}",
                        "--layers", "dot16,linear", "-q", "--report-dir", str(d)], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 1, r.stdout + r.stderr
    recs = json.loads((d / "results.json").read_text())["tensors"]
    return ({(t["layer"], t["case"], t["tensor"], t["tier"]) for t in recs},
            {(t["layer"], t["case"], t["tensor"], t["tier"]) for t in recs if not t["passed"]})


def _junit_keys(path):
    root = ET.parse(path).getroot()
    keys, failed = set(), set()
    for tc in root.iter("testcase"):
        suite, layer, case = tc.get("classname").split(".")
        assert suite == "crnn-conformance"
        tensor, tier = tc.get("name")[:-1].split("[")
        keys.add((layer, case, tensor, tier))
        if tc.find("failure") is not None:
            failed.add((layer, case, tensor, tier))
    return keys, failed


def test_one_test_per_check_and_the_same_verdict_as_the_gate(nan_port, gate_keys, tmp_path):
    r = run_pytest(tmp_path, f"--port={nan_port}", *LAYERS, "-q",
                   f"--junitxml={tmp_path / 'j.xml'}")
    assert r.returncode == 1, r.stdout + r.stderr
    keys, failed = _junit_keys(tmp_path / "j.xml")
    assert (keys, failed) == gate_keys
    assert "2 failed" in r.stdout
    assert "FAILED crnn-conformance::linear::T16_I37_O37::dW[float64]" in r.stdout
    assert "worst [1,2] ours=nan" in r.stdout and "__REPRO: crnn-conformance gate" in r.stdout
    assert "Traceback" not in r.stdout


def test_selection_with_k(nan_port, tmp_path):
    r = run_pytest(tmp_path, f"--port={nan_port}", *LAYERS, "-q", "-k",
                   "T16_I37_O37 and dW and not identity")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "2 failed" in r.stdout and "passed" not in r.stdout.splitlines()[-1]
    r = run_pytest(tmp_path, f"--port={nan_port}", *LAYERS, "-q", "-k", "dot16")
    assert r.returncode == 0, r.stdout + r.stderr


def test_under_xdist(nan_port, gate_keys, tmp_path):
    pytest.importorskip("xdist")
    r = run_pytest(tmp_path, f"--port={nan_port}", *LAYERS, "-q", "-n", "2",
                   f"--junitxml={tmp_path / 'j.xml'}")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "bringing up nodes" in r.stdout or "2 workers" in r.stdout
    assert _junit_keys(tmp_path / "j.xml") == gate_keys


def test_bundled_port_with_the_flag(tmp_path):
    r = run_pytest(tmp_path, "--crnn-conformance", "--crnn-layers", "dot16", "-q")
    assert r.returncode == 0, r.stdout + r.stderr
    # 5 cases (dot16.h5's 3, dot16_zeros.h5's 2) x (exact, identity) + uniform_n0_100 float64
    assert "11 passed" in r.stdout


def test_inactive_without_its_options(tmp_path):
    (tmp_path / "test_own.py").write_text("def test_own():\n    pass\n")
    r = run_pytest(tmp_path, "-q")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "1 passed" in r.stdout and "crnn-conformance::" not in r.stdout


def test_a_port_that_cannot_run_is_a_usage_error(tmp_path):
    r = run_pytest(tmp_path, f"--port={tmp_path / 'libnothere.so'}", *LAYERS, "-q")
    assert r.returncode == 4, r.stdout + r.stderr      # pytest's usage-error exit code
    assert "cannot run: port library not found" in r.stderr
    assert "Traceback" not in r.stderr
