"""`report` and `diff` on results files that were edited, damaged or written by hand: every
field is checked against the schema (exit 2 naming the field, never an internal error), the
verdict comes from the records, and `diff --fail-on-increase` cannot be passed by NaN, by an
unusable threshold or by checks that vanished."""
from __future__ import annotations

import copy
import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def cli(*args, timeout=120):
    return subprocess.run([sys.executable, "-m", "crnn_conformance.harness.cli", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """A real results document: the bundled port, linear, float64 tier (passes)."""
    d = tmp_path_factory.mktemp("input")
    path = d / "base.json"
    r = cli("gate", "--layers", "linear", "--tiers", "float64", "--isa", "scalar", "-q",
            "--json", str(path))
    assert r.returncode == 0, r.stdout + r.stderr
    return path


def doc_of(base) -> dict:
    return json.loads(base.read_text())


def write(tmp_path, doc, name="r.json", text=None) -> str:
    p = tmp_path / name
    p.write_text(text if text is not None else json.dumps(doc))
    return str(p)


def clean_refusal(r, *words):
    """Exit 2 with one clear line: no traceback, no 'internal error'."""
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr and "internal error" not in r.stderr, r.stderr
    assert "cannot run" in r.stderr
    for w in words:
        assert w in r.stderr, (w, r.stderr)


# ---- diff --fail-on-increase -----------------------------------------------------------------

def test_diff_nan_usage_in_new_is_not_a_pass(base, tmp_path):
    doc = doc_of(base)
    doc["tensors"][0]["usage"] = float("nan")      # json.dumps writes NaN
    doc["tensors"][0]["passed"] = False
    new = write(tmp_path, doc)
    r = cli("diff", str(base), new, "--fail-on-increase", "0.5")
    clean_refusal(r, "tensors[0].usage", "NaN")


@pytest.mark.parametrize("text", ["Infinity", "-Infinity", "1e999"])
def test_diff_non_finite_usage_is_refused(base, tmp_path, text):
    doc = doc_of(base)
    doc["tensors"][2]["usage"] = 12345.5
    new = write(tmp_path, None, text=json.dumps(doc).replace("12345.5", text))
    clean_refusal(cli("diff", str(base), new, "--fail-on-increase", "0.5"), "tensors[2].usage")


def test_diff_nan_change_counts_as_an_increase():
    """The library: a NaN usage (a document built in memory) is an unbounded increase."""
    from crnn_conformance.reports import diff as D
    rec = {"layer": "linear", "fixture": "linear", "case": "c", "tensor": "y", "tier": "float64",
           "isa": "scalar", "threads": 1, "usage": 0.1, "passed": True}
    bad = dict(rec, usage=float("nan"), passed=False)
    d = D.diff({"tensors": [rec]}, {"tensors": [bad]})
    assert d.max_increase == float("inf") and d.fails(0.5)
    assert not D.diff({"tensors": [rec]}, {"tensors": [rec]}).fails(0.0)


@pytest.mark.parametrize("x", ["nan", "inf", "-inf", "-0.5"])
def test_diff_refuses_a_threshold_that_cannot_fail(base, x):
    r = cli("diff", str(base), str(base), f"--fail-on-increase={x}")
    clean_refusal(r, "--fail-on-increase")


def test_diff_check_missing_from_new_fails(base, tmp_path):
    doc = doc_of(base)
    gone = doc["tensors"].pop(0)
    new = write(tmp_path, doc)
    r = cli("diff", str(base), new, "--fail-on-increase", "0.5")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "missing from NEW" in r.stderr and "lost coverage" in r.stderr
    assert f"linear/{gone['case']}/{gone['tensor']}" in r.stdout
    r = cli("diff", str(base), new)                     # without the option: listed, exit 0
    assert r.returncode == 0 and "1 only in OLD" in r.stdout
    r = cli("diff", new, str(base), "--fail-on-increase", "0.5")   # a check added: not lost
    assert r.returncode == 0, r.stdout + r.stderr


def test_diff_refuses_a_check_held_twice(base, tmp_path):
    doc = doc_of(base)
    twin = copy.deepcopy(doc["tensors"][0])
    doc["tensors"][0].update(usage=3.0, passed=False, repro="x")
    doc["tensors"].append(twin)                   # the failing record hidden behind a copy
    new = write(tmp_path, doc)
    clean_refusal(cli("diff", str(base), new, "--fail-on-increase", "0.5"), "twice",
                  "tensors[0]", f"tensors[{len(doc['tensors']) - 1}]")


# ---- report: the verdict is the records' -----------------------------------------------------

def test_report_verdict_comes_from_the_records(base, tmp_path):
    doc = doc_of(base)
    n = len(doc["tensors"])
    doc["tensors"][0].update(passed=False, usage=2.0, repro="crnn-conformance gate ...")
    doc["summary"]["failed"] = 1
    assert doc["passed"] is True                     # the stored flag still says PASS
    path = write(tmp_path, doc)
    r = cli("report", path)
    assert r.returncode == 0, r.stderr
    last = r.stdout.strip().splitlines()[-1]
    assert last.startswith(f"FAIL: {n - 1} of {n} checks passed"), last
    assert "passed: true" in r.stderr and "1 of its" in r.stderr and "warning" in r.stderr
    r = cli("report", path, "--html", str(tmp_path / "h"), "--junit", str(tmp_path / "j.xml"))
    assert r.returncode == 0, r.stderr
    assert "<title>crnn-conformance: FAIL" in (tmp_path / "h" / "index.html").read_text()
    assert 'failures="1"' in (tmp_path / "j.xml").read_text()


def test_report_failing_record_without_repro_still_fails(base, tmp_path):
    """The red team's edit: one record set to failed, nothing else changed."""
    doc = doc_of(base)
    doc["tensors"][0]["passed"] = False
    r = cli("report", write(tmp_path, doc))
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1].startswith("FAIL: "), r.stdout
    assert "passed: true" in r.stderr


def test_report_calls_out_a_false_fail_flag_and_counts(base, tmp_path):
    doc = doc_of(base)
    doc["passed"] = False
    doc["summary"]["checks"] = 999
    r = cli("report", write(tmp_path, doc), "-q")
    assert r.returncode == 0, r.stderr
    n = len(doc["tensors"])
    assert r.stdout.strip().startswith(f"PASS: {n} of {n} checks passed")
    assert "passed: false" in r.stderr and "checks 999" in r.stderr


def test_report_of_an_untouched_file_has_no_warning(base):
    r = cli("report", str(base), "-q")
    assert r.returncode == 0 and r.stderr == "" and r.stdout.startswith("PASS")


# ---- report / diff: the schema, field by field -----------------------------------------------

def _set(doc, path, value):
    *head, last = path
    for k in head:
        doc = doc[k]
    if value is DELETE:
        del doc[last]
    else:
        doc[last] = value


class _Delete:
    def __repr__(self):
        return "<deleted>"


DELETE = _Delete()

BAD_FIELDS = [
    (("meta",), None, "meta"),
    (("meta",), "x", "meta"),
    (("tensors",), {"a": 1}, "tensors"),
    (("tensors",), None, "tensors"),
    (("tensors", 0), "rec", "tensors[0]"),
    (("passed",), "yes", "passed"),
    (("summary",), [], "summary"),
    (("summary", "checks"), "32", "summary.checks"),
    (("layers",), 5, "layers"),
    (("layers", "linear", "status"), "fine", "layers.linear.status"),
    (("layers", "linear", "checks"), -1, "layers.linear.checks"),
    (("tensors", 3, "usage"), "abc", "tensors[3].usage"),
    (("tensors", 3, "usage"), -1.0, "tensors[3].usage"),
    (("tensors", 3, "usage"), [1], "tensors[3].usage"),
    (("tensors", 3, "threads"), "many", "tensors[3].threads"),
    (("tensors", 3, "threads"), 1.5, "tensors[3].threads"),
    (("tensors", 3, "threads"), 0, "tensors[3].threads"),
    (("tensors", 3, "threads"), True, "tensors[3].threads"),
    (("tensors", 3, "passed"), "true", "tensors[3].passed"),
    (("tensors", 3, "passed"), 1, "tensors[3].passed"),
    (("tensors", 3, "layer"), "softmax", "tensors[3].layer"),
    (("tensors", 3, "tier"), 7, "tensors[3].tier"),
    (("tensors", 3, "isa"), None, "tensors[3].isa"),
    (("tensors", 3, "isa"), "a b", "tensors[3].isa"),
    (("tensors", 3, "case"), "", "tensors[3].case"),
    (("tensors", 3, "tensor"), {}, "tensors[3].tensor"),
    (("tensors", 3, "fixture"), 3, "tensors[3].fixture"),
    (("tensors", 3, "mismatches"), "0", "tensors[3].mismatches"),
    (("tensors", 3, "elements"), None, "tensors[3].elements"),
    (("tensors", 3, "max_abs_diff"), "0", "tensors[3].max_abs_diff"),
    (("tensors", 3, "max_ulp"), 0.5, "tensors[3].max_ulp"),
    (("tensors", 3, "note"), None, "tensors[3].note"),
    (("tensors", 3, "repro"), 5, "tensors[3].repro"),
    (("tensors", 3, "atol"), "big", "tensors[3].atol"),
    (("tensors", 3, "resolution"), "x", "tensors[3].resolution"),
    (("tensors", 3, "seconds"), None, "tensors[3].seconds"),
    (("tensors", 3, "output"), 1, "tensors[3].output"),
    (("tensors", 3, "worst"), [], "tensors[3].worst"),
    (("tensors", 3, "worst"), {"index": "0"}, "tensors[3].worst.index"),
    (("tensors", 3, "worst"), {"index": [0, "a"]}, "tensors[3].worst.index[1]"),
    (("tensors", 3, "worst"), {"ours": [1]}, "tensors[3].worst.ours"),
    (("tensors", 3, "worst"), {"subcase": {"name": "line"}}, "tensors[3].worst.subcase"),
    (("tensors", 3, "hist"), {"unit": "usage"}, "tensors[3].hist"),
    (("tensors", 3, "hist"), "h", "tensors[3].hist"),
    (("tensors", 3, "hist"), {"unit": "usage", "edges": [1, 2, 3], "zero": 0, "below": 0,
                              "counts": [1], "above": 0}, "tensors[3].hist.counts"),
    (("tensors", 3, "heatmap"), {"rows": 4, "cols": 2, "row_starts": [0, 2], "col_starts": [0],
                                 "max": [[1.0]]}, "tensors[3].heatmap.max"),
    (("tensors", 3, "heatmap"), {"rows": 4, "cols": 2, "row_starts": [0, 2], "col_starts": [0],
                                 "max": [[1.0], []]}, "tensors[3].heatmap.max[1]"),
    (("tensors", 3, "heatmap"), {"rows": 4, "cols": 2, "row_starts": [0, 9], "col_starts": [0],
                                 "max": [[1.0], [2.0]]}, "tensors[3].heatmap.row_starts"),
    (("tensors", 3, "usage"), DELETE, "tensors[3] lacks usage"),
    (("tensors", 3, "passed"), DELETE, "tensors[3] lacks passed"),
    (("schema_version",), "2", "schema version"),
    (("schema_version",), True, "schema version"),
    (("meta", "isas"), "scalar", "meta.isas"),
    (("meta", "threads"), ["1"], "meta.threads[0]"),
    (("meta", "wall_s"), "fast", "meta.wall_s"),
    (("meta", "runs"), [["scalar"]], "meta.runs[0]"),
    (("meta", "runs"), "scalar:1", "meta.runs"),
    (("meta", "fixtures"), [], "meta.fixtures"),
    (("meta", "not_implemented"), {"conv": 3}, "meta.not_implemented.conv"),
    (("meta", "not_run"), {"linear": {"reason": "hung"}}, "meta.not_run.linear"),
    (("meta", "tool"), None, "meta.tool"),
    (("meta", "cpu"), {"model": 1}, "meta.cpu"),
    (("meta", "no_fixture"), ["nonsense"], "meta.no_fixture[0]"),
    (("meta", "port_load_output"), 5, "meta.port_load_output"),
]


@pytest.mark.parametrize("path,value,named", BAD_FIELDS,
                         ids=[f"{'.'.join(map(str, p))}={v!r}"[:60] for p, v, _ in BAD_FIELDS])
def test_load_names_the_bad_field(base, tmp_path, path, value, named):
    from crnn_conformance.reports import json_report
    doc = doc_of(base)
    _set(doc, path, value)
    with pytest.raises(json_report.ReportError) as e:
        json_report.load(write(tmp_path, doc))
    assert named in str(e.value), str(e.value)


@pytest.mark.parametrize("path,value,named", [
    (("meta",), None, "meta is null"),
    (("tensors", 0, "usage"), "abc", "tensors[0].usage"),
    (("meta", "threads"), "1", "meta.threads"),
])
def test_report_refuses_bad_fields_cleanly(base, tmp_path, path, value, named):
    doc = doc_of(base)
    _set(doc, path, value)
    p = write(tmp_path, doc)
    clean_refusal(cli("report", p), named)
    clean_refusal(cli("report", p, "--html", str(tmp_path / "h")), named)


def test_report_shows_an_escaped_lone_surrogate(base, tmp_path):
    """A JSON escape of half a UTF-16 pair is valid JSON: it is shown as U+FFFD."""
    doc = doc_of(base)
    doc["tensors"][0].update(tensor="y\ud800", passed=False, repro="x")
    r = cli("report", write(tmp_path, doc), "-v")
    assert r.returncode == 0, r.stderr
    assert "y\ufffd" in r.stdout and "FAIL" in r.stdout and "\ud800" not in r.stdout


def test_diff_refuses_a_string_thread_count(base, tmp_path):
    doc = doc_of(base)
    doc["tensors"][0]["threads"] = "many"
    clean_refusal(cli("diff", str(base), write(tmp_path, doc)), "tensors[0].threads")


@pytest.mark.parametrize("text,words", [
    ("[" * 100000 + "]" * 100000, ["nests too deeply"]),
    ('{"schema_version": 2, "tensors": [], "meta": {"x": ' + "[" * 500 + "]" * 500 + "}}",
     ["meta.x", "levels deep"]),
    ('{"schema_version": 2, "tensors": [], "n": ' + "9" * 5000 + "}", ["not a readable JSON"]),
    ("\ud800", ["not a readable JSON"]),
    ("[]", ["no schema_version"]),
], ids=["deep-array", "deep-meta", "huge-int", "lone-surrogate", "not-an-object"])
def test_report_refuses_unreadable_documents(tmp_path, text, words):
    p = tmp_path / "r.json"
    p.write_text(text, errors="surrogatepass")
    clean_refusal(cli("report", str(p)), *words)
    clean_refusal(cli("diff", str(p), str(p)), *words)


def test_the_schema_file_is_what_the_reader_checks(base, tmp_path):
    """Every document the reader accepts from a real run validates against the schema file
    (jsonschema, when installed), and the reader takes the run's file unchanged."""
    from crnn_conformance.reports import json_report
    doc = json_report.load(base)
    assert doc["passed"] is True and doc["summary"] == doc_of(base)["summary"]
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads((ROOT / "reports" / "results.schema.json").read_text())
    run = doc_of(base)
    run["meta"]["runs"] = [["scalar", 1], ["avx2", 7]]
    run["meta"]["port_load_output"] = "hello\n"
    jsonschema.validate(run, schema, cls=jsonschema.Draft202012Validator)
    json_report.load(write(tmp_path, run))


def _mutations(doc, rng):
    """(path, value) pairs: each leaf and container of the document replaced by a value of
    another JSON type."""
    values = [None, True, 0, -1, 1.5, 1e300, "", "x", [], {}, [None], {"k": None}]
    paths = []

    def walk(v, path):
        paths.append(path)
        if isinstance(v, dict):
            for k, x in v.items():
                walk(x, path + (k,))
        elif isinstance(v, list):
            for i, x in enumerate(v[:2]):
                walk(x, path + (i,))
    walk(doc, ())
    for path in paths[1:]:
        yield path, rng.choice(values)


def test_every_field_either_renders_or_is_refused(base, tmp_path):
    """Replace any one field of a real document by a value of another type: the document is
    either refused with a ReportError naming a path, or every report renders it."""
    from crnn_conformance.reports import console, diff, html, json_report, junit
    rng = random.Random(5)
    original = doc_of(base)
    original["tensors"][1].update(hist={"unit": "usage", "edges": [0.001 * 2 ** i for i in range(21)],
                                        "zero": 1, "below": 0, "counts": [0] * 20, "above": 0},
                                  heatmap={"rows": 2, "cols": 3, "row_starts": [0, 1],
                                           "col_starts": [0, 2], "max": [[0.1, None], [0, 1.0]]})
    refused = 0
    for i, (path, value) in enumerate(_mutations(original, rng)):
        doc = copy.deepcopy(original)
        _set(doc, path, value)
        p = write(tmp_path, doc, f"m{i}.json")
        try:
            got = json_report.load(p, [])
        except json_report.ReportError as e:
            refused += 1
            assert str(e) and "\n" not in str(e)
            continue
        console.render(got, False, True)
        html.render(got) if hasattr(html, "render") else html.write(got, tmp_path / "h")
        junit.write(got, tmp_path / "j.xml")
        diff.render(diff.diff(got, got))
    assert refused > 50


def test_a_check_that_newly_fails_fails_the_diff_whatever_the_threshold(base, tmp_path):
    """Usage 0.9 -> 1.1 grows by 0.2, below --fail-on-increase 0.5, but the check now fails:
    a CI gate on drift must not let a new failure through."""
    old, new = doc_of(base), doc_of(base)
    old["tensors"][0]["usage"] = 0.9
    new["tensors"][0].update(usage=1.1, passed=False, mismatches=1)
    r = cli("diff", write(tmp_path, old, "old.json"), write(tmp_path, new, "new.json"),
            "--fail-on-increase", "0.5")
    assert r.returncode == 1 and "1 check(s) that passed in OLD fail in NEW" in r.stderr, \
        r.stdout + r.stderr
