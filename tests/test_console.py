"""The console: by default a row per layer and tier with every failure in full, with -v a row
per tensor and each check's resolution, a legend under the table, `report RESULTS.json`
printing the same table, `gate --json FILE`, and the cold-cache notice."""
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


def _tier_rows(stdout: str) -> dict:
    """{(layer, tier): row fields} of the default table (a row per layer and tier)."""
    rows, layer = {}, None
    for line in stdout.splitlines():
        m = re.match(r"^\[(\w+)\] ", line)
        if m:
            layer = m.group(1)
        elif layer and re.match(r"^  (exact|float64|pytorch|identity|contract) ", line):
            rows[(layer, line.split()[0])] = line.split()
        elif not line.strip():
            layer = None
    return rows


def test_the_default_is_a_row_per_layer_and_tier(run):
    """Without -v: no row per tensor; a row per layer and tier whose checks, passed, worst
    usage / ulp and worst resolution are those of the run's records (-v's per-tensor rows are
    pinned by the tests above)."""
    _, doc, path = run
    r = cli("report", str(path))
    assert r.returncode == 0, r.stderr
    assert not [l for l in r.stdout.splitlines()
                if l.startswith(("dot16 ", "linear ", "pytorch_linear "))]   # -v's rows
    rows = _tier_rows(r.stdout)
    want = {(t["layer"], t["tier"]) for t in doc["tensors"]}
    assert set(rows) == want and len(r.stdout.splitlines()) < 40
    for (layer, tier), row in rows.items():
        recs = [t for t in doc["tensors"] if t["layer"] == layer and t["tier"] == tier]
        assert row[1:3] == [str(len(recs)), str(sum(t["passed"] for t in recs))], row
        if tier in ("float64", "pytorch"):
            assert float(row[3]) == pytest.approx(max(t["usage"] for t in recs), abs=5e-4)
            assert row[4] == f"{max(t['resolution'] for t in recs):.1e}"
        elif tier == "contract":
            assert row[3:] == ["ok", "-"], row
        else:
            assert row[3:] == ["=", "-"], row
    assert "legend" in r.stdout and r.stdout.splitlines()[-1].startswith("PASS")
    g = cli("gate", *LAYERS)                               # the gate prints the same
    assert g.returncode == 0
    assert [l for l in g.stdout.splitlines() if not l.startswith("wrote ")][:-1] == \
        r.stdout.splitlines()[:-1]


def test_the_default_prints_every_failure_in_full(ports):
    """A failing port: the tier's row counts the failure and shows its worst usage, and every
    failing check has its whole failure line with __REPRO:, as under -q."""
    port = ports("-DTP_NAN")
    r = cli("gate", "--port", str(port), "--layers", "linear", "--tiers", "exact,float64",
            "--threads", "1", "--isa", "scalar")
    assert r.returncode == 1, r.stdout + r.stderr
    fails = [l for l in r.stdout.splitlines() if l.startswith("FAIL ")]
    assert fails and all(re.match(r"FAIL linear/\S+/dW tier=(exact|float64) isa=scalar "
                                  r"threads=1 ", l) for l in fails), fails
    assert r.stdout.count("  __REPRO: crnn-conformance gate --port") == len(fails)
    rows = _tier_rows(r.stdout)
    for tier in ("exact", "float64"):
        n = len([l for l in fails if f" tier={tier} " in l])
        checks, passed = int(rows[("linear", tier)][1]), int(rows[("linear", tier)][2])
        assert checks - passed == n > 0, rows
    assert rows[("linear", "float64")][3] == "inf"                   # the NaN
    q = cli("gate", "--port", str(port), "--layers", "linear", "--tiers", "exact,float64",
            "--threads", "1", "--isa", "scalar", "-q")
    assert [l for l in q.stdout.splitlines() if l.startswith(("FAIL ", "  __REPRO"))] == \
        [l for l in r.stdout.splitlines() if l.startswith(("FAIL ", "  __REPRO"))]
    assert not _tier_rows(q.stdout)


def test_a_layer_not_implemented_names_the_cases_it_did_answer():
    """A port whose lstm entry points return CRNN_E_UNSUPPORTED still answers the activation
    cases (crnn_sigmoid, crnn_tanh): the status line says which cases those checks were."""
    from crnn_conformance.reports.console import _layer_line
    st = {"status": "not implemented", "checks": 8,
          "reason": "crnn_lstm_forward returned -4 (CRNN_E_UNSUPPORTED)"}
    recs = [{"layer": "lstm", "fixture": "activations", "case": "sigmoid_tanh"}] * 8 + [
        {"layer": "dot16", "fixture": "dot16", "case": "order_n0_100"}]
    assert _layer_line("lstm", st, recs).endswith(
        "; 8 check(s) of the cases it did answer ran (activations/sigmoid_tanh)")
    many = [{"layer": "lstm", "fixture": "f", "case": f"c{i}"} for i in range(5)]
    assert _layer_line("lstm", {**st, "checks": 5}, many).endswith("(f/c0, f/c1, f/c2 and 2 more)")
    assert _layer_line("lstm", {**st, "checks": 0}, []) == \
        "[lstm] not implemented: crnn_lstm_forward returned -4 (CRNN_E_UNSUPPORTED)"


def test_regen_fixtures_under_the_main_command_shows_its_options():
    """`crnn-conformance regen-fixtures --help` listed no options (the wrapper's own help)."""
    r = subprocess.run([sys.executable, "-m", "crnn_conformance.harness.cli", "regen-fixtures",
                        "--help"], capture_output=True, text=True)
    assert r.returncode == 0 and "--only NAME" in r.stdout and "--seed N" in r.stdout


def test_a_reader_that_goes_away_ends_the_command_quietly():
    """`crnn-conformance info | head -1`: was 'internal error (BrokenPipeError)', exit 2."""
    p = subprocess.Popen([sys.executable, "-m", "crnn_conformance.harness.cli", "info"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    p.stdout.read(1)
    p.stdout.close()
    err = p.stderr.read().decode()
    assert p.wait(timeout=60) in (0, 141) and "internal error" not in err, err
