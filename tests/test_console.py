"""The console: the table grouped by layer with a legend under it, resolution with -v, `report
RESULTS.json` printing the same table, `gate --json FILE`, and the cold-cache notice."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LAYERS = ["--layers", "dot16,linear"]


def cli(*args, env=None, timeout=300):
    e = dict(os.environ, **(env or {}))
    return subprocess.run([sys.executable, "-m", "crnn_conformance.harness.cli", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout, env=e)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    d = tmp_path_factory.mktemp("console")
    r = cli("gate", *LAYERS, "-v", "--json", str(d / "r.json"))
    assert r.returncode == 0, r.stdout + r.stderr
    return r, json.loads((d / "r.json").read_text()), d / "r.json"


def test_legend_under_the_table(run):
    r, _, _ = run
    lines = r.stdout.splitlines()
    at = next(i for i, l in enumerate(lines) if l.startswith("legend"))
    table = [l for l in lines[:at] if l.startswith(("dot16 ", "linear ", "pytorch_linear "))]
    assert table and all(lines.index(l) < at for l in table)
    legend = "\n".join(lines[at:])
    for sym in ("=", "69x27898ulp", "15/15", "-", "no result", "res f64"):
        assert re.search(rf"^\s+(\S+\s+)?{re.escape(sym)}\s", legend, re.M), sym
    assert "a check = one tensor of one case compared in one tier on one ISA x threads run" in legend
    q = cli("gate", "--layers", "dot16", "-q")
    assert "legend" not in q.stdout and q.stdout.strip().startswith("PASS")


def test_verbose_shows_each_checks_resolution(run):
    r, doc, _ = run
    res = {(t["fixture"], t["case"], t["tensor"]): t["resolution"] for t in doc["tensors"]
           if t["tier"] == "float64"}
    assert res and all(v is not None and v > 0 for v in res.values())
    rows = {tuple(l.split()[:3]): l.split() for l in r.stdout.splitlines()
            if l.startswith(("dot16 ", "linear "))}
    for key, v in res.items():
        assert rows[key][-2] == f"{v:.1e}", key          # the `res f64` column
    assert all(t["resolution"] is None for t in doc["tensors"] if t["tier"] in ("exact", "identity"))


def test_report_prints_the_table_without_output_flags(run):
    r, _, path = run
    rep = cli("report", str(path), "-v")
    assert rep.returncode == 0, rep.stderr
    gate_lines = [l for l in r.stdout.splitlines() if not l.startswith("wrote ")]
    assert rep.stdout.splitlines() == gate_lines
    assert cli("report", str(path), "-q").stdout.strip() == gate_lines[-1]


def test_json_option_writes_the_results_document(run, tmp_path):
    _, doc, _ = run
    assert doc["schema_version"] == 2 and doc["summary"]["checks"] == len(doc["tensors"])
    r = cli("gate", "--layers", "dot16", "-q", "--json", str(tmp_path / "sub" / "x.json"))
    assert r.returncode == 0 and (tmp_path / "sub" / "x.json").is_file()
    r = cli("gate", "--layers", "dot16", "-q", "--json", str(tmp_path))   # a directory
    assert r.returncode == 2 and "Traceback" not in r.stderr


@pytest.mark.slow
def test_cold_cache_says_it_is_building(tmp_path):
    """A cold cache compiles for tens of seconds: the gate says so on stderr, once."""
    env = {"CRNN_CACHE_DIR": str(tmp_path / "cache")}
    r = cli("gate", "--layers", "dot16", "-q", env=env, timeout=900)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stderr.splitlines().count("building the bundled kernels (first run)...") == 1
    assert "building" not in r.stdout
    r = cli("gate", "--layers", "dot16", "-q", env=env)
    assert r.returncode == 0 and "building" not in r.stderr
