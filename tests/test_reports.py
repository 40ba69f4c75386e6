"""The reports: results.json against its schema, index.html parsed (every tensor row, every
section, self-contained), JUnit XML parsed back, `report` re-rendering, `diff` between runs,
and the page in headless Chromium when it is installed."""
from __future__ import annotations

import json
import re
import os
import shutil
import struct
import subprocess
import sys
import zlib
from collections import defaultdict
from html.parser import HTMLParser
from pathlib import Path
from xml.etree import ElementTree as ET

import numpy as np
import pytest

from testports import build_port  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = ROOT / "reports" / "results.schema.json"


def cli(*args, timeout=120):
    return subprocess.run([sys.executable, "-m", "crnn_conformance.harness.cli", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two gate runs: the bundled port (passes) and a test port whose dW row 3 is off by
    2e-5 relative on every case and which writes a NaN on one case (fails)."""
    d = tmp_path_factory.mktemp("runs")
    good, bad = d / "good", d / "bad"
    r = cli("gate", "--layers", "dot16,linear", "-q", "--report-dir", str(good))
    assert r.returncode == 0, r.stdout + r.stderr
    so = build_port(d, "-DTP_PERTURB=2e-5f", "-DTP_NAN")
    r = cli("gate", "--port", str(so), "--layers", "dot16,linear", "-q", "--report-dir", str(bad),
            "--junit", str(d / "extra" / "bad.xml"))
    assert r.returncode == 1, r.stdout + r.stderr
    return {"good": good, "bad": bad, "junit": d / "extra" / "bad.xml", "dir": d}


def load(run) -> dict:
    return json.loads((run / "results.json").read_text())


# ---- JSON --------------------------------------------------------------------------------

def test_results_json_validates_against_the_schema(runs):
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads(SCHEMA.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    for name in ("good", "bad"):
        jsonschema.validate(load(runs[name]), schema, cls=jsonschema.Draft202012Validator)


def test_schema_rejects_a_record_without_usage(runs):
    jsonschema = pytest.importorskip("jsonschema")
    doc = load(runs["good"])
    del doc["tensors"][0]["usage"]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(doc, json.loads(SCHEMA.read_text()),
                            cls=jsonschema.Draft202012Validator)


def test_schema_version_is_documented():
    from crnn_conformance.reports.json_report import REPORT_SCHEMA_VERSION
    doc = (ROOT / "docs" / "report-schema.md").read_text()
    assert f"schema_version` is {REPORT_SCHEMA_VERSION}" in doc
    assert json.loads(SCHEMA.read_text())["properties"]["schema_version"]["const"] == \
        REPORT_SCHEMA_VERSION


def test_provenance_and_detail_data(runs):
    good, bad = load(runs["good"]), load(runs["bad"])
    m = good["meta"]
    assert len(m["port_sha256"]) == 64 and m["abi_version"] == 1 and m["bundled"] is True
    assert m["build"]["cc"] and "-ffp-contract=off" in m["build"]["flags"]
    assert m["cpu"]["model"] and m["tool"]["version"]
    assert m["fpenv"]["ftz"] is False and m["fpenv"]["daz"] is False
    for name in ("dot16.h5", "linear.h5"):
        assert len(m["fixtures"][name]["sha256"]) == 64
    assert all(t["hist"] is None for t in good["tensors"])   # nothing > 0.5, nothing failing
    assert bad["meta"]["bundled"] is False and bad["meta"]["build"] is None
    # the perturbed row 3 of dW stands out in the heat map of a float64 record
    rec = next(t for t in bad["tensors"] if t["tensor"] == "dW" and t["tier"] == "float64"
               and t["case"] == "T25_I128_O48")
    assert not rec["passed"] and rec["worst"]["index"][0] == 3
    hm = rec["heatmap"]
    row_max = [max(v if v is not None else float("inf") for v in row) for row in hm["max"]]
    assert hm["row_starts"][:5] == [0, 1, 2, 3, 4]
    assert row_max[3] > 1 and max(row_max[:3] + row_max[4:]) <= 1
    h = rec["hist"]
    assert h["zero"] + h["below"] + sum(h["counts"]) + h["above"] == rec["elements"]


# ---- HTML --------------------------------------------------------------------------------

class _Page(HTMLParser):
    def __init__(self):
        super().__init__()
        self.rows, self.ids, self.tags, self.urls = [], set(), defaultdict(int), []
        self.classes = defaultdict(int)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags[tag] += 1
        for c in (a.get("class") or "").split():
            self.classes[c] += 1
        if "id" in a:
            self.ids.add(a["id"])
        if tag == "tr" and "data-tensor" in a:
            self.rows.append((a["data-layer"], a["data-fixture"], a["data-case"], a["data-tensor"]))
        for k in ("src", "href"):
            if a.get(k):
                self.urls.append(a[k])


def parse(path) -> _Page:
    p = _Page()
    p.feed(Path(path).read_text(encoding="utf-8"))
    return p


@pytest.mark.parametrize("name", ["good", "bad"])
def test_html_has_a_row_for_every_tensor(runs, name):
    doc = load(runs[name])
    page = parse(runs[name] / "index.html")
    want = {(t["layer"], t["fixture"], t["case"], t["tensor"]) for t in doc["tensors"]}
    assert len(page.rows) == len(set(page.rows)) == len(want) == doc["summary"]["tensors"]
    assert set(page.rows) == want


def test_html_is_self_contained(runs):
    for name in ("good", "bad"):
        text = (runs[name] / "index.html").read_text(encoding="utf-8")
        page = parse(runs[name] / "index.html")
        assert page.tags["script"] == 0 and page.tags["link"] == 0
        assert page.tags["style"] == 1
        external = [u for u in page.urls if not (u.startswith("#") or u.startswith("data:"))]
        assert external == []
        assert "@import" not in text and "url(http" not in text


def test_html_sections(runs):
    good = parse(runs["good"] / "index.html")
    assert good.classes["verdict"] == 1 and good.classes["pass"] >= 1
    assert {"summary", "layer-dot16", "layer-linear", "identity", "provenance"} <= good.ids
    assert "failures" not in good.ids and "details" not in good.ids
    assert "flips" not in good.ids          # no flip information in the records: no section
    bad = parse(runs["bad"] / "index.html")
    assert {"details", "failures", "identity", "provenance"} <= bad.ids
    assert bad.classes["fail"] >= 1 and bad.tags["svg"] >= 2 and bad.classes["repro"] >= 1


def test_html_shows_provenance_and_every_repro(runs):
    from markupsafe import escape
    doc = load(runs["bad"])
    text = (runs["bad"] / "index.html").read_text(encoding="utf-8")
    m = doc["meta"]
    assert m["port_sha256"] in text and m["cpu"]["model"] in text
    for f in m["fixtures"].values():
        assert f["sha256"] in text
    fails = [t for t in doc["tensors"] if not t["passed"]]
    assert fails
    for t in fails:
        assert str(escape(t["repro"])) in text


def test_html_flip_section_only_when_the_results_carry_flips(runs, tmp_path):
    from crnn_conformance.reports import html
    doc = load(runs["good"])
    doc["meta"]["flips"] = [{"layer": "step", "case": "b4", "window": [3, 7, 12],
                             "ours": 0.25, "ref": 0.2500001, "margin": 1.2e-7}]
    page = parse(html.write(doc, tmp_path))
    assert "flips" in page.ids
    assert "0.2500001" in (tmp_path / "index.html").read_text()


# ---- JUnit -------------------------------------------------------------------------------

def _check_key(t) -> tuple:
    return (t["layer"], t["fixture"], t["case"], t["tensor"], t["tier"], t["isa"], t["threads"])


def test_junit_has_one_testcase_per_check(runs):
    doc = load(runs["bad"])
    keys = [_check_key(t) for t in doc["tensors"]]
    failing = {_check_key(t) for t in doc["tensors"] if not t["passed"]}
    for path in (runs["junit"], runs["bad"] / "junit.xml"):
        root = ET.parse(path).getroot()
        assert root.tag == "testsuites"
        cases = root.findall("./testsuite/testcase")
        assert len(cases) == len(set(keys)) == len(keys) == int(root.get("tests"))
        assert int(root.get("failures")) == len(failing) == doc["summary"]["failed"]
        names = [(tc.get("classname"), tc.get("name")) for tc in cases]
        assert len(set(names)) == len(names)                     # unique names
        got = set()
        for tc in cases:
            _, layer, fixture, case = tc.get("classname").split(".", 3)
            tensor, run = tc.get("name")[:-1].split("[")
            tier, isa, threads = run.split()
            key = (layer, fixture, case, tensor, tier, isa, int(threads[1:]))
            got.add(key)
            f = tc.find("failure")
            assert (f is not None) == (key in failing)
            if f is not None:
                assert f.get("message").startswith(f"{layer}/{case}/{tensor} tier={tier}")
                assert "worst [" in f.get("message") and "reproduce: crnn-conformance gate" in f.text
        assert got == set(keys)
        assert {s.get("name") for s in root.findall("testsuite")} == {"crnn.dot16", "crnn.linear"}


def test_junit_times_are_the_checks_own(runs):
    """Each testcase's time is its record's seconds (its share of a port run, timed in the
    worker, and of its compare, in the gate): not all zero, and together at most what the
    workers and the gate could spend side by side in the gate's wall time. (That they hold
    the port's runs, not only the compares: the next test.)"""
    doc = load(runs["good"])
    root = ET.parse(runs["good"] / "junit.xml").getroot()
    times = [float(tc.get("time")) for tc in root.iter("testcase")]
    assert times == [pytest.approx(t["seconds"], abs=1e-6) for t in doc["tensors"]]
    assert min(times) > 0
    wall, workers = doc["meta"]["wall_s"], doc["meta"]["workers"]
    assert sum(times) <= (workers + 1) * wall
    assert float(root.get("time")) == pytest.approx(sum(times), abs=1e-3)


def test_record_times_hold_the_port_runs(tmp_path):
    """A port that sleeps 20 ms in every linear backward: the records' seconds add up to at
    least one sleep per linear case, so they hold the port's runs and not only the
    compares. (A bound against the gate's wall time instead depends on how long the
    workers take to start, which a loaded machine stretches.)"""
    so = build_port(tmp_path, "-DTP_SLEEP_MS=20", "-DTP_EVERY_CASE")
    out = tmp_path / "out"
    r = cli("gate", "--port", str(so), "--layers", "linear", "-q", "--report-dir", str(out))
    assert r.returncode == 0, r.stdout + r.stderr
    doc = load(out)
    linear = [t for t in doc["tensors"] if t["layer"] == "linear"]
    cases = {t["case"] for t in linear}
    assert len(cases) >= 10
    assert sum(t["seconds"] for t in linear) >= 0.9 * 0.020 * len(cases)
    assert sum(t["seconds"] for t in linear) <= (doc["meta"]["workers"] + 1) * doc["meta"]["wall_s"]


# ---- report and diff ---------------------------------------------------------------------

def test_report_rerenders_the_same_html_and_junit(runs, tmp_path):
    r = cli("report", str(runs["bad"] / "results.json"), "--html", str(tmp_path / "html"),
            "--junit", str(tmp_path / "j.xml"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert (tmp_path / "html" / "index.html").read_text() == (runs["bad"] / "index.html").read_text()
    assert (tmp_path / "j.xml").read_text() == (runs["bad"] / "junit.xml").read_text()


def test_report_refuses_other_schema_versions(runs, tmp_path):
    doc = load(runs["good"])
    doc["schema_version"] = 99
    (tmp_path / "r.json").write_text(json.dumps(doc))
    r = cli("report", str(tmp_path / "r.json"), "--html", str(tmp_path))
    assert r.returncode == 2 and "schema version 99" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr


def test_diff_sorts_by_largest_increase(runs):
    r = cli("diff", str(runs["good"] / "results.json"), str(runs["bad"] / "results.json"),
            "--tiers", "float64")
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.strip().splitlines()
    rows = [l for l in lines[2:] if l.startswith(("dot16/", "linear/"))]
    assert rows[0].startswith("linear/T16_I37_O37/dW ") and "+inf" in rows[0]   # the NaN
    deltas = [float(l.split()[6]) for l in rows[1:]]
    assert deltas == sorted(deltas, reverse=True) and deltas[0] > 1
    assert "NOW FAILS" in rows[0]
    assert lines[-1].startswith("33 checks compared:")


def test_diff_fail_on_increase(runs):
    good, bad = str(runs["good"] / "results.json"), str(runs["bad"] / "results.json")
    assert cli("diff", good, bad, "--fail-on-increase", "0.5").returncode == 1
    r = cli("diff", good, good, "--fail-on-increase", "0")
    assert r.returncode == 0 and "0 increased" in r.stdout
    r = cli("diff", good, str(runs["dir"] / "missing.json"))
    assert r.returncode == 2 and "not found" in r.stderr


# ---- in a real browser ---------------------------------------------------------------------

def _chromium():
    for c in ("/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome"):
        if os.access(c, os.X_OK):
            return c
    return None


def _png_pixel(path, x, y):
    """RGB of one pixel of an 8-bit RGB/RGBA PNG (enough of a decoder for a screenshot)."""
    data = Path(path).read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, w = 8, b"", None
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            w, h, depth, ctype = struct.unpack(">IIBB", body[:10])
            assert depth == 8 and ctype in (2, 6)
            bpp = 3 if ctype == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    raw, stride = zlib.decompress(idat), w * bpp
    prev = bytearray(stride)
    for row in range(y + 1):
        f, line = raw[row * (stride + 1)], bytearray(raw[row * (stride + 1) + 1:(row + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        prev = line
    return tuple(prev[x * bpp:x * bpp + 3])


@pytest.mark.skipif(_chromium() is None, reason="headless Chromium is not installed")
@pytest.mark.parametrize("name,banner", [("good", "green"), ("bad", "red")])
def test_report_in_headless_chromium(runs, name, banner, tmp_path):
    shot = tmp_path / f"{name}.png"
    html_path = runs[name] / "index.html"
    r = subprocess.run([_chromium(), "--headless", "--no-sandbox", "--disable-gpu",
                        "--hide-scrollbars", "--window-size=1400,1600",
                        f"--user-data-dir={tmp_path / 'profile'}", f"--screenshot={shot}",
                        html_path.as_uri()], capture_output=True, text=True, timeout=90)
    assert shot.exists() and shot.stat().st_size > 20_000, r.stderr[-2000:]
    keep = os.environ.get("CRNN_SCREENSHOT_DIR")
    if keep:
        shutil.copy(shot, Path(keep) / shot.name)
    red, green, blue = _png_pixel(shot, 700, 20)          # inside the verdict banner
    if banner == "green":
        assert green > red and green > blue, (red, green, blue)
    else:
        assert red > green + 60 and red > blue + 60, (red, green, blue)
    white = _png_pixel(shot, 1390, 1500)                  # the page body is white
    assert min(white) > 230, white


def test_report_from_a_minimal_document(tmp_path):
    """Only the keys the readers require: the reports still render (meta is optional)."""
    rec = {"fixture": "linear", "case": "c", "layer": "linear", "tensor": "y", "tier": "float64",
           "isa": "scalar", "threads": 1, "usage": None, "max_abs_diff": None, "mismatches": 1,
           "elements": 4, "passed": False}
    (tmp_path / "r.json").write_text(json.dumps({"schema_version": 2, "tensors": [rec]}))
    r = cli("report", str(tmp_path / "r.json"), "--html", str(tmp_path / "h"),
            "--junit", str(tmp_path / "j.xml"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert parse(tmp_path / "h" / "index.html").rows == [("linear", "linear", "c", "y")]
    assert ET.parse(tmp_path / "j.xml").getroot().get("failures") == "1"


def test_passing_tensors_above_half_their_allowance_get_plots(runs, tmp_path):
    so = build_port(runs["dir"], "-DTP_PERTURB=8e-7f")       # dW row 3: usage about 0.4-0.8
    r = cli("gate", "--port", str(so), "--layers", "linear", "--tiers", "float64", "-q",
            "--report-dir", str(tmp_path))
    assert r.returncode == 0, r.stdout + r.stderr
    recs = load(tmp_path)["tensors"]
    amber = [t for t in recs if t["usage"] > 0.5]
    assert amber and all(t["passed"] and t["tensor"] == "dW" for t in amber)
    assert all(t["hist"] and t["heatmap"] for t in amber)
    assert all(t["hist"] is None for t in recs if t["usage"] <= 0.5)
    page = parse(tmp_path / "index.html")
    assert "details" in page.ids and page.classes["card"] == len(amber)
    assert page.classes["a"] >= len(amber)      # amber usage cells and chips


# ---- one unit everywhere; the overview -----------------------------------------------------

def test_every_report_states_the_same_counts(runs, tmp_path):
    """Console, results.json, HTML and JUnit: the same checks, failures and tensors."""
    doc = load(runs["bad"])
    s = doc["summary"]
    checks, failed, tensors = len(doc["tensors"]), sum(not t["passed"] for t in doc["tensors"]), \
        len({(t["layer"], t["fixture"], t["case"], t["tensor"]) for t in doc["tensors"]})
    assert (s["checks"], s["failed"], s["tensors"]) == (checks, failed, tensors)
    assert sum(st["checks"] for st in doc["layers"].values()) == checks
    assert sum(t["checks"] for t in s["tiers"].values()) == checks
    r = cli("report", str(runs["bad"] / "results.json"), "-q")
    assert f"{checks - failed} of {checks} checks passed ({tensors} tensors in 2 layers;" in r.stdout
    html = (runs["bad"] / "index.html").read_text()
    assert re.search(rf"{checks - failed} of {checks} checks passed\s+· {tensors} tensors in 2 layers", html)
    root = ET.parse(runs["bad"] / "junit.xml").getroot()
    assert (int(root.get("tests")), int(root.get("failures"))) == (checks, failed)


@pytest.mark.parametrize("name", ["good", "bad"])
def test_every_report_opens_with_an_overview_per_layer(runs, name):
    text = (runs[name] / "index.html").read_text(encoding="utf-8")
    main = text[text.index("<main>"):]
    assert main.index('id="overview"') < main.index('id="summary"')
    doc = load(runs[name])
    for layer in doc["layers"]:
        i = text.index(f'id="overview-{layer}"')
        svg = text[i:text.index("</svg>", i)]
        assert 'class="limit"' in svg                          # usage 1 marked
        tol = [t for t in doc["tensors"] if t["layer"] == layer and t["tier"] in ("float64", "pytorch")]
        # one dot per check in the usage panel and one per resolution
        assert svg.count("<title>") >= 2 * len(tol) and "resolution" in svg
    assert parse(runs[name] / "index.html").tags["svg"] >= len(doc["layers"])


def test_html_shows_resolution(runs):
    doc = load(runs["good"])
    text = (runs["good"] / "index.html").read_text(encoding="utf-8")
    t = next(t for t in doc["tensors"] if t["tier"] == "float64")
    assert f"f64 {t['resolution']:.1e}" in text


def test_results_json_holds_no_nan_and_only_utf8():
    """Non-finite floats anywhere (numpy's float64 too) are written as null; text holding
    bytes that are not UTF-8 (surrogates, in a str subclass too) shows them as U+FFFD; tuples
    become lists, and everything else stays as it was."""
    import numpy as np
    from crnn_conformance.reports import json_report

    class Text(str):
        pass

    doc = {"floats": [1.5, -0.0, float("nan"), float("inf"), -float("inf"), np.float64("nan"),
                      np.float64(2.5), np.float64("-inf")],
           "text": ("plain", "caf\u00e9", "bad \udcff byte", Text("sub \udc80"), Text("ok")),
           "nested": {"none": None, "flag": True, "n": 3, "deep": [{"x": float("nan")}, ()]}}
    got = json.loads(json_report.dumps(doc))
    assert got == {"floats": [1.5, -0.0, None, None, None, None, 2.5, None],
                   "text": ["plain", "caf\u00e9", "bad \ufffd byte", "sub \ufffd", "ok"],
                   "nested": {"none": None, "flag": True, "n": 3, "deep": [{"x": None}, []]}}


# ---- the worst element's figures: ulps, words, inputs and sub-cases -------------------------

FIGURE_RUNS = {   # mutant -> the one case it fails (docs/mutants.md) and that case's layer
    "ctc_libm": ("ctc", "rounding_T1_K2"),
    "sigmoid_clamp_88": ("lstm", "sigmoid_tanh"),
    "exp_threshold_ge": ("ctc", "exp_log"),
    "clip_ge": ("clip", "many_factors"),
    "adamw_decay_float": ("adamw", "many_hparams"),
}


@pytest.fixture(scope="module")
def figures(tmp_path_factory):
    """Each mutant's exact-tier gate of its case: {mutant: (results.json, index.html, stdout)}."""
    from crnn_conformance.ctypes_kernels.build import build
    out = {}
    for name, (layer, case) in FIGURE_RUNS.items():
        d = tmp_path_factory.mktemp(name)
        r = cli("gate", "--port", str(build(mutant=name)), "--layers", layer, "--case", case,
                "--tiers", "exact", "--isa", "scalar", "--threads", "1", "-q", "--report-dir", str(d))
        assert r.returncode == 1, r.stdout + r.stderr
        out[name] = (load(d), (d / "index.html").read_text(), r.stdout)
    return out


def _inputs(layer, fixture, case):
    from crnn_conformance.generators.h5io import read_fixture
    from crnn_conformance.harness.runner import FIXTURES_DIR
    fx = read_fixture(FIXTURES_DIR / f"{fixture}.h5")
    return next(c for c in fx.cases if c.name == case).inputs


def _failed(doc, tensor):
    return next(t for t in doc["tensors"] if t["tensor"] == tensor and not t["passed"])


def test_figure_records_validate_against_the_schema(figures):
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads(SCHEMA.read_text())
    for doc, _, _ in figures.values():
        jsonschema.validate(doc, schema, cls=jsonschema.Draft202012Validator)


def test_a_binary64_loss_off_by_ulps_shows_them(figures):
    """ctc_libm moves 113 of the 120 losses of rounding_T1_K2 by a few ulps: the record
    showed max_ulp 0, usage 0 and the table `113x0ulp` (float64 ulps were rounded)."""
    doc, html, out = figures["ctc_libm"]
    rec = _failed(doc, "loss")
    assert rec["max_ulp"] >= 1 and rec["usage"] == float(rec["max_ulp"])
    assert rec["worst"]["ours"] != rec["worst"]["ref"]
    import click
    from crnn_conformance.reports.console import table
    cell = next(l for l in map(click.unstyle, table(doc)) if " loss " in l).split()[3]
    assert cell == f"{rec['mismatches']}x{rec['max_ulp']}ulp" and not cell.endswith("x0ulp")
    assert f"max_ulp={rec['max_ulp']} " in out
    assert f"{rec['mismatches']}× {rec['max_ulp']} ulp" in html


def test_a_packed_ctc_line_is_named_with_its_parameters(figures):
    doc, html, out = figures["ctc_libm"]
    rec = _failed(doc, "loss")
    n = rec["worst"]["index"][0]
    inp = _inputs("ctc", "ctc_edges", "rounding_T1_K2")
    T, K, L = (int(v) for v in inp["shapes"][n])
    assert rec["worst"]["subcase"] == {
        "name": "line", "index": n, "of": len(inp["scales"]), "element": [],
        "params": {"T": T, "K": K, "L": L, "target": [], "scale": float(inp["scales"][n])}}
    line = f"in line {n} of {len(inp['scales'])} (T=1 K=2 L=0 target=[] scale=1.0)"
    assert line in out and line in html


def test_an_element_wise_case_shows_the_input(figures):
    doc, _, out = figures["sigmoid_clamp_88"]
    rec = _failed(doc, "sigmoid")
    x = _inputs("lstm", "activations", "sigmoid_tanh")["x"]
    i = rec["worst"]["index"][0]
    assert rec["worst"]["input"] == {"x": float(x[i])} and float(x[i]) < -88
    assert f"allowance=0.0 x={float(x[i])}" in out


def test_inf_where_the_reference_is_finite_is_said_in_words(figures):
    """exp_threshold_ge: exp of the overflow threshold is +inf (the spec: DBL_MAX-ish)."""
    doc, html, out = figures["exp_threshold_ge"]
    rec = _failed(doc, "exp")
    x = _inputs("ctc", "detmath", "exp_log")["x_exp"]
    w = rec["worst"]
    assert w["ours"] == "inf" and isinstance(w["ref"], float)
    assert w["unbounded"] == "inf where the reference is finite"
    assert w["input"] == {"x": float(x[w["index"][0]])}
    assert rec["usage"] is None and "1 element(s): inf where the reference is finite" in rec["note"]
    assert f"worst [{w['index'][0]}] ours=inf ref=" in out
    assert f"x={w['input']['x']}: inf where the reference is finite (1 element(s)" in out
    assert f"{rec['mismatches']}× inf" in html and "inf where the reference is finite" in html


def test_a_clip_problem_is_named_with_its_parameters(figures):
    doc, _, out = figures["clip_ge"]
    rec = _failed(doc, "grads")
    sub = rec["worst"]["subcase"]
    inp = _inputs("clip", "clip_edges", "many_factors")
    n, (j, e) = sub["index"], sub["element"]
    counts, sizes = list(map(int, inp["counts"])), list(map(int, inp["sizes"]))
    first = sum(counts[:n])
    mine = sizes[first:first + counts[n]]
    assert sum(sizes[:first]) + sum(mine[:j]) + e == rec["worst"]["index"][0] and e < mine[j]
    assert sub["name"] == "problem" and sub["of"] == len(counts)
    assert sub["params"] == {"sizes": mine, "limit": float(inp["limits"][n]),
                             "enabled": int(inp["enabled"][n])}
    assert f"in problem {n} of {len(counts)} (sizes=[{','.join(map(str, mine))}]" in out


def test_an_adamw_tensor_is_named_with_its_hyper_parameters(figures):
    doc, _, out = figures["adamw_decay_float"]
    rec = _failed(doc, "p")
    sub = rec["worst"]["subcase"]
    inp = _inputs("adamw", "adamw_edges", "many_hparams")
    n, (e,) = sub["index"], sub["element"]
    sizes = list(map(int, inp["sizes"]))
    assert sum(sizes[:n]) + e == rec["worst"]["index"][0] and e < sizes[n]
    lr, b1, b2, eps, wd = (float(v) for v in inp["hparams"][n])
    assert sub["params"] == {"n": sizes[n], "steps": int(inp["steps"][n]), "lr": lr,
                             "beta1": b1, "beta2": b2, "eps": eps, "wd": wd,
                             "decay": int(inp["decay"][n])}
    assert f"in tensor {n} of {len(sizes)} (n={sizes[n]} steps=" in out


def _case(fixture, name):
    from crnn_conformance.generators.h5io import read_fixture
    from crnn_conformance.harness.runner import FIXTURES_DIR
    return next(c for c in read_fixture(FIXTURES_DIR / f"{fixture}.h5").cases if c.name == name)


def test_a_ctc_gradient_element_is_placed_in_its_line():
    """dlogits of a `many` case: the lines' [T][K] gradients one after another."""
    from crnn_conformance.harness.layers import ctc
    case = _case("ctc_edges", "many_tiny")
    shapes = case.inputs["shapes"].reshape(-1, 3).astype(int)
    starts = np.concatenate([[0], np.cumsum(shapes[:, 0] * shapes[:, 1])])
    tstarts = np.concatenate([[0], np.cumsum(shapes[:, 2])])
    for n in (0, 17, int(np.argmax((shapes[:, 0] == 3) & (shapes[:, 1] == 4) & (shapes[:, 2] == 3))),
              len(shapes) - 1):
        T, K, L = shapes[n]
        t, k = T - 1, K // 2
        sub = ctc.worst_context(case, "dlogits", int(starts[n] + t * K + k))["subcase"]
        assert (sub["index"], sub["element"]) == (n, [t, k])
        assert sub["params"] == {"T": T, "K": K, "L": L, "scale": float(case.inputs["scales"][n]),
                                 "target": case.inputs["targets"][tstarts[n]:tstarts[n] + L].tolist()}
        assert ctc.worst_context(case, "loss", n)["subcase"]["params"] == sub["params"]
    assert ctc.worst_context(_case("ctc", case_name_of("ctc")), "loss", 0) == {}


def case_name_of(fixture):
    from crnn_conformance.generators.h5io import read_fixture
    from crnn_conformance.harness.runner import FIXTURES_DIR
    return read_fixture(FIXTURES_DIR / f"{fixture}.h5").cases[0].name


def test_element_wise_cases_give_each_function_its_own_input():
    from crnn_conformance.harness.layers import ctc, lstm
    act, dm = _case("activations", "sigmoid_tanh"), _case("detmath", "exp_log")
    assert lstm.worst_context(act, "tanh", 5) == {"input": {"x": float(act.inputs["x"][5])}}
    assert ctc.worst_context(dm, "log", 9) == {"input": {"x": float(dm.inputs["x_log"][9])}}
    assert ctc.worst_context(dm, "exp", 9) == {"input": {"x": float(dm.inputs["x_exp"][9])}}
    assert lstm.worst_context(_case("lstm", case_name_of("lstm")), "out", 0) == {}


def test_a_dot_is_named_with_its_length_and_first_term():
    """Every element of a dot16 case is a dot of its own: the worst one's n and where its
    terms start in a and b (the fixture's lengths, laid end to end)."""
    from crnn_conformance.harness.layers import dot16
    case = _case("dot16_zeros", case_name_of("dot16_zeros"))
    lengths = case.inputs["lengths"].astype(int)
    for i in (0, len(lengths) // 2, len(lengths) - 1):
        sub = dot16.worst_context(case, "dot", i)["subcase"]
        assert (sub["name"], sub["index"], sub["of"]) == ("dot", i, len(lengths))
        assert sub["params"] == {"n": int(lengths[i]), "start": int(lengths[:i].sum())}
    from crnn_conformance.reports.console import worst_context
    assert worst_context({"subcase": sub}) == (
        f" in dot {i} of {len(lengths)} (n={lengths[i]} start={int(lengths[:i].sum())})")
