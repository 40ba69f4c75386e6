"""The gate as a CI tool for any port: every bad input is one line on stderr and exit 2;
a port that crashes, aborts, hangs, leaves poison, returns NaN or an error code fails (exit 1)
with the layer and case named, and the gate goes on with the other cases.

The test ports (tests/ports/testport.c) implement the whole ABI, dot16 and linear correctly,
and misbehave only on the linear case T16_I37_O37 (in crnn_linear_backward).
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import h5py
import pytest

from testports import ROOT, cannot_run, gate  # noqa: E402

LAYERS = ["--layers", "dot16,linear"]
BAD_CASE = "linear/T16_I37_O37"


# ---- the good cases ------------------------------------------------------------------------

def test_bundled_port_passes(tmp_path):
    r = gate(*LAYERS, "-q", "--report-dir", str(tmp_path))
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.strip().splitlines()[-1].startswith("PASS")
    for name in ("results.json", "index.html", "junit.xml"):
        assert (tmp_path / name).stat().st_size > 0, name


def test_correct_test_port_passes(ports):
    r = gate("--port", str(ports()), *LAYERS, "-q")
    assert r.returncode == 0, r.stdout + r.stderr


def _checks(report_dir: Path) -> list[tuple]:
    keys = ("layer", "case", "tensor", "tier", "isa", "threads", "passed", "usage", "note")
    return [tuple(t.get(k) for k in keys)
            for t in json.loads((report_dir / "results.json").read_text())["tensors"]]


@pytest.mark.parametrize("port", ["good", "-DTP_SEGV_THREADS=3"])
def test_more_workers_make_the_same_records_in_the_same_order(port, ports, tmp_path):
    """--jobs 3 runs the cases on three workers side by side (a failing port too: its crash
    in one run of a case); the records, their verdicts and their order are those of --jobs 1."""
    args = ["--port", str(ports() if port == "good" else ports(port)), *LAYERS, "-q"]
    one, three = tmp_path / "one", tmp_path / "three"
    r1 = gate(*args, "--jobs", "1", "--report-dir", str(one))
    r3 = gate(*args, "--jobs", "3", "--report-dir", str(three))
    assert r1.returncode == r3.returncode == (0 if port == "good" else 1), r3.stdout + r3.stderr
    assert _checks(one) == _checks(three)
    assert json.loads((three / "results.json").read_text())["meta"]["workers"] == 3


# ---- bad input: one line, exit 2 -----------------------------------------------------------

@pytest.mark.parametrize("jobs", ["0", "65"])
def test_jobs_out_of_range_is_exit_2(jobs):
    cannot_run(gate(*LAYERS, "--jobs", jobs), f"--jobs must be between 1 and 64 (got {jobs})")


def test_jobs_not_a_number_is_a_usage_error():
    r = gate(*LAYERS, "--jobs", "two")
    assert r.returncode == 2 and "Invalid value for '--jobs': 'two'" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr + r.stdout


def test_no_c_compiler(tmp_path):
    line = cannot_run(gate(*LAYERS, env={"CC": "/nonexistent"}), "no C compiler", "CC=/nonexistent")
    assert "install gcc or clang" in line


def test_port_not_found(tmp_path):
    cannot_run(gate("--port", str(tmp_path / "libnothere.so"), *LAYERS), "port library not found",
               "libnothere.so")


def test_port_not_loadable(tmp_path):
    fake = tmp_path / "libfake.so"
    fake.write_text("this is a text file, not a shared library\n" * 20)
    cannot_run(gate("--port", str(fake), *LAYERS), "cannot be loaded", "libfake.so")


def test_missing_symbols_are_all_listed(ports):
    line = cannot_run(gate("--port", str(ports("-DTP_OMIT")), *LAYERS), "missing 3 symbol(s)")
    for sym in ("crnn_get_threads", "crnn_dot16", "crnn_linear_backward"):
        assert sym in line


def test_wrong_abi_version(ports):
    cannot_run(gate("--port", str(ports("-DTP_ABI=2")), *LAYERS), "ABI version 2",
               "speaks version 1")


def _fixture_copy(tmp_path) -> Path:
    d = tmp_path / "fixtures"
    d.mkdir()
    from crnn_conformance.harness.layers import dot16, linear
    for name in (*dot16.FIXTURES, *linear.FIXTURES):
        shutil.copy(ROOT / "fixtures" / f"{name}.h5", d / f"{name}.h5")
    return d


def test_fixture_with_bad_checksum(tmp_path):
    d = _fixture_copy(tmp_path)
    with h5py.File(d / "linear.h5", "r+") as f:
        ds = f["T16_I37_O37/inputs/x"]
        a = ds[()]
        a[0, 0] += 1.0
        ds[...] = a          # the stored SHA-256 now disagrees with the bytes
    cannot_run(gate("--fixtures", str(d), *LAYERS), "linear.h5", "SHA-256")


def test_fixture_of_unknown_schema_version(tmp_path):
    d = _fixture_copy(tmp_path)
    with h5py.File(d / "dot16.h5", "r+") as f:
        f.attrs["schema_version"] = 99
    cannot_run(gate("--fixtures", str(d), *LAYERS), "dot16.h5", "schema version 99")


def test_ftz_set_by_the_port_on_load(ports):
    cannot_run(gate("--port", str(ports("-DTP_FTZ_ON_LOAD")), *LAYERS),
               "flush-to-zero (FTZ)", "denormals-are-zero (DAZ)", "right after loading", "MXCSR=")


def test_ftz_left_set_by_a_port_call(ports):
    cannot_run(gate("--port", str(ports("-DTP_FTZ_IN_CALL")), *LAYERS),
               "flush-to-zero (FTZ)", "after crnn_linear_forward returned (linear, case")


def test_ftz_set_in_the_harness_process():
    code = ("import sys\n"
            "from crnn_conformance.harness.sandbox.executor import fpenv_helper\n"
            "h = fpenv_helper(); h.crnn_h_set_fpcsr(h.crnn_h_fpcsr() | 0x8040)\n"
            "sys.argv = ['crnn-conformance', 'gate', '--layers', 'dot16,linear']\n"
            "from crnn_conformance.harness.cli import main; main()\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                       timeout=120)
    cannot_run(r, "flush-to-zero (FTZ)", "in the harness process before loading the port")


def test_ftz_found_without_a_compiler(ports):
    """No C compiler for the MXCSR helper: the NumPy probe still finds FTZ/DAZ."""
    so = ports("-DTP_FTZ_ON_LOAD")
    line = cannot_run(gate("--port", str(so), *LAYERS, env={"CC": "/nonexistent"}),
                      "flush-to-zero (FTZ)", "right after loading")
    assert "no C compiler for the helper" in line


def test_a_port_runs_without_a_compiler(ports):
    so = ports()
    r = gate("--port", str(so), *LAYERS, "-q", env={"CC": "/nonexistent"})
    assert r.returncode == 0, r.stdout + r.stderr


# ---- a misbehaving port: a failure naming layer, case and cause; the gate goes on -------------

FAILURES = {
    "segv": ("-DTP_SEGV", ["the port crashed in crnn_linear_backward", "SIGSEGV"], "*"),
    "abort": ("-DTP_ABORT", ["the port crashed in crnn_linear_backward", "SIGABRT"], "*"),
    "hang": ("-DTP_HANG", ["hang: no answer in crnn_linear_backward within 2 s"], "*"),
    # (the kind's words once: after the worst element, then only the count)
    "poison": ("-DTP_UNWRITTEN", ["worst [36] ours=nan",
                                  ": poison left (never written) (1 element(s))"], "db"),
    "nan": ("-DTP_NAN", ["worst [1,2] ours=nan",
                         ": NaN where the reference is finite (1 element(s))"], "dW"),
    "errcode": ("-DTP_ERRCODE", ["crnn_linear_backward returned -3 (CRNN_E_NOMEM)"], "*"),
    # a thread of crnn_linear_forward writes y[0] 20 ms after the call returned
    "late write": ("-DTP_LATE_WRITE_MS=20", ["y changed after crnn_linear_forward returned at [0, 0]",
                                             "-> 12345.0", "a write after return"], "*"),
}


@pytest.mark.parametrize("mode", list(FAILURES))
def test_misbehaving_port_fails_and_the_gate_goes_on(mode, ports, tmp_path):
    define, fragments, tensor = FAILURES[mode]
    t0 = time.perf_counter()
    r = gate("--port", str(ports(define)), *LAYERS, "-q", "--timeout", "2",
             "--report-dir", str(tmp_path))
    wall = time.perf_counter() - t0
    assert r.returncode == 1, r.stdout + r.stderr
    assert "Traceback" not in r.stdout + r.stderr
    fails = [l for l in r.stdout.splitlines() if l.startswith("FAIL ")]
    assert fails and all(l.startswith(f"FAIL {BAD_CASE}/{tensor} ") for l in fails), fails
    for f in fragments:
        assert any(f in l for l in fails), (f, fails)
    if mode in ("poison", "nan"):   # words, not the ulp distance of a NaN's bit pattern
        exact = [l for l in fails if " tier=exact " in l]
        assert exact and all("max_ulp" not in l for l in exact), exact
    assert "__REPRO: crnn-conformance gate --port" in r.stdout
    data = json.loads((tmp_path / "results.json").read_text())
    bad = [t for t in data["tensors"] if not t["passed"]]
    assert {(t["layer"], t["case"]) for t in bad} == {tuple(BAD_CASE.split("/"))}
    if mode in ("poison", "nan"):   # unbounded, no ulp figure; the table says what it is
        import click
        from crnn_conformance.reports.console import table
        ex = [t for t in bad if t["tier"] == "exact"]
        assert [(t["usage"], t["max_ulp"], t["mismatches"]) for t in ex] == [(None, None, 1)]
        row = [l for l in map(click.unstyle, table(data))
               if l.split()[:3] == ["linear", "T16_I37_O37", tensor]]
        assert row and row[0].split()[3] == ("1xpoison" if mode == "poison" else "1xNaN"), row
    # every other case still ran and passed: dot16's three and linear's others (seven of the
    # linear fixture, and the pytorch tier's)
    ran = {(t["layer"], t["case"]) for t in data["tensors"] if t["passed"] and t["tier"] != "contract"}
    from crnn_conformance.generators.h5io import read_fixture
    from crnn_conformance.harness.layers import linear
    from crnn_conformance.harness.runner import FIXTURES_DIR
    n_linear = sum(len(read_fixture(FIXTURES_DIR / f"{n}.h5").cases) for n in linear.FIXTURES)
    assert len({c for l, c in ran if l == "linear"} - {"T16_I37_O37"}) == n_linear - 1
    from crnn_conformance.harness.layers import dot16
    n_dot16 = sum(len(read_fixture(FIXTURES_DIR / f"{n}.h5").cases) for n in dot16.FIXTURES)
    assert len({c for l, c in ran if l == "dot16"}) == n_dot16
    if mode == "hang":
        assert wall < 30, wall


def test_bad_options_are_exit_2():
    cannot_run(gate("--layers", "dot16", "--threads", "0"), "thread counts")
    cannot_run(gate("--layers", "dot16", "--timeout", "0"), "--timeout")
    cannot_run(gate("--layers", "dot16", "--tiers", "bits"), "unknown tier bits")


# ---- an identity failure names both runs and its repro reruns exactly those two -------------

def _failing(doc) -> list[tuple]:
    return [(t["case"], t["tensor"], t["tier"], t["isa"], t["threads"])
            for t in doc["tensors"] if not t["passed"]]


def _rerun(repro: str, json_path: Path):
    import shlex
    argv = shlex.split(repro)
    assert argv[:2] == ["crnn-conformance", "gate"], repro
    return gate(*argv[2:], "-q", "--json", str(json_path))


@pytest.mark.parametrize("defines", [("-DTP_LATE=7", "-DTP_NAN"), ("-DTP_SEGV_THREADS=7",)])
def test_a_thread_only_identity_failure_reruns_alone(defines, ports, tmp_path):
    """The port differs (a NaN) or crashes at 7 threads only, on one case. The identity
    record's line names scalar x 7 threads and the base scalar x 1 thread; its repro ran
    `--isa scalar --threads 7`, one run, which cannot fail identity (exit 2); it now runs
    exactly the two runs, and fails with that check alone."""
    so = ports(*defines)
    first = tmp_path / "first.json"
    r = gate("--port", str(so), "--layers", "linear", "-q", "--json", str(first))
    assert r.returncode == 1, r.stdout + r.stderr
    doc = json.loads(first.read_text())
    bad = [t for t in doc["tensors"] if not t["passed"]]
    assert {(t["tier"], t["isa"], t["threads"]) for t in bad} == {("identity", "scalar", 7)}
    for rec in bad:
        assert rec["repro"].endswith("--tiers identity --runs scalar:1,scalar:7"), rec["repro"]
        if rec["tensor"] != "*":
            assert "scalar x 7 threads differs from scalar x 1 thread" in rec["note"]
        again = tmp_path / "again.json"
        r2 = _rerun(rec["repro"], again)
        assert r2.returncode == 1, r2.stdout + r2.stderr
        redo = json.loads(again.read_text())
        assert _failing(redo) == [k for k in _failing(doc) if k[0] == rec["case"]]
        assert {(t["tier"], t["isa"], t["threads"]) for t in redo["tensors"]} == \
            {("identity", "scalar", 7)}
        assert redo["meta"]["runs"] == [["scalar", 1], ["scalar", 7]]


def test_an_isa_identity_failure_reruns_its_two_runs_only(tmp_path):
    """avx2 x 7 threads differs from scalar x 1 thread: the repro was `--isa scalar,avx2
    --threads 7`, four runs (avx2 x 1 thread failing too); now `--runs scalar:1,avx2:7`."""
    from crnn_conformance.ctypes_kernels.build import build
    so = build(mutant="avx2_tail_drop")
    first = tmp_path / "first.json"
    r = gate("--port", str(so), "--layers", "dot16", "--case", "order_long", "--tiers",
             "identity", "--threads", "1,7", "-q", "--json", str(first))
    doc = json.loads(first.read_text())
    if "avx2" not in doc["meta"]["isas"]:
        pytest.skip("no AVX2 on this CPU")
    assert r.returncode == 1, r.stdout + r.stderr
    rec = next(t for t in doc["tensors"] if not t["passed"] and t["isa"] == "avx2"
               and t["threads"] == 7)
    assert rec["note"].endswith("avx2 x 7 threads differs from scalar x 1 thread")
    assert "(avx2 x 7 threads differs from scalar x 1 thread)" in r.stdout
    assert rec["repro"].endswith("--runs scalar:1,avx2:7")
    again = tmp_path / "again.json"
    r2 = _rerun(rec["repro"], again)
    assert r2.returncode == 1, r2.stdout + r2.stderr
    redo = json.loads(again.read_text())
    assert _failing(redo) == [("order_long", "dot", "identity", "avx2", 7)]
    assert "runs scalar:1,avx2:7" in r2.stdout.splitlines()[-1]


def test_a_base_run_of_more_threads_is_named_by_runs(ports, tmp_path):
    """`--runs scalar:3`: the tiers judge the 3-thread run, and a failure's repro says so
    (`--isa scalar --threads 3` would judge scalar x 1 thread)."""
    first = tmp_path / "first.json"
    r = gate("--port", str(ports("-DTP_LATE=3", "-DTP_NAN")), "--layers", "linear", "--runs",
             "scalar:3", "--tiers", "exact", "-q", "--json", str(first))
    assert r.returncode == 1, r.stdout + r.stderr
    doc = json.loads(first.read_text())
    assert {t["threads"] for t in doc["tensors"]} == {3}
    rec = next(t for t in doc["tensors"] if not t["passed"])
    assert rec["repro"].endswith("--tiers exact --runs scalar:3")
    again = tmp_path / "again.json"
    assert _rerun(rec["repro"], again).returncode == 1
    assert _failing(json.loads(again.read_text())) == _failing(doc)


def test_runs_option_errors_are_exit_2():
    cannot_run(gate("--layers", "dot16", "--runs", "scalar:1", "--isa", "scalar"), "--runs")
    cannot_run(gate("--layers", "dot16", "--runs", "scalar:1", "--threads", "1"), "--runs")
    cannot_run(gate("--layers", "dot16", "--runs", "scalar:1,scalar:1"), "twice")
    cannot_run(gate("--layers", "dot16", "--runs", "scalar:0"), "ISA:THREADS")
    cannot_run(gate("--layers", "dot16", "--runs", "avx9:1"), "ISA path(s) avx9 not available")
    cannot_run(gate("--layers", "dot16", "--runs", "scalar:2", "--tiers", "identity"),
               "only scalar x 2 is selected")


# ---- a port that hangs in every case of a layer ----------------------------------------------

T16_CASES = ["--case", "T16_*"]      # five linear cases: T16_I128_O37 ... T16_I16_O16


def _linear_t16_cases() -> list[str]:
    from crnn_conformance.generators.h5io import read_fixture
    from crnn_conformance.harness.layers import linear
    from crnn_conformance.harness.runner import FIXTURES_DIR
    return [c.name for n in linear.FIXTURES for c in read_fixture(FIXTURES_DIR / f"{n}.h5").cases
            if c.name.startswith("T16_")]


@pytest.mark.parametrize("define", ["-DTP_HANG", "-DTP_HANG_THREADS=2"])
def test_after_two_hangs_in_one_entry_point_the_layers_other_cases_are_not_run(define, ports,
                                                                                 tmp_path):
    """The port hangs in crnn_linear_backward on every case (in the base run, or in the
    2-thread run): two hangs, then every other case of the layer is one failing record
    naming the two, not another timeout each; exit 1."""
    names = _linear_t16_cases()
    assert len(names) >= 4
    r = gate("--port", str(ports(define, "-DTP_EVERY_CASE")), "--layers", "linear", *T16_CASES,
             "-q", "--timeout", "1", "--report-dir", str(tmp_path))
    assert r.returncode == 1, r.stdout + r.stderr
    data = json.loads((tmp_path / "results.json").read_text())
    hung = sorted({t["case"] for t in data["tensors"] if t["note"].startswith("hang: no answer "
                                                                           "in crnn_linear_backward")})
    assert len(hung) == 2, hung
    skipped = [t for t in data["tensors"] if t["note"].startswith("not run:")]
    not_run = [n for n in names if n not in hung]
    assert {t["case"] for t in skipped} == set(not_run)
    why = (f"not run: crnn_linear_backward hung in 2 cases ({', '.join(n for n in names if n in hung)}); "
           "--keep-going runs every case")
    assert all(t["note"] == why and not t["passed"] and t["tensor"] == "*" for t in skipped)
    for case in not_run:    # a failing record for each tier the case has, and identity
        assert {t["tier"] for t in skipped if t["case"] == case} >= {"exact", "identity"}
    assert any(l.startswith("FAIL linear/") and why in l for l in r.stdout.splitlines())
    layer = data["layers"]["linear"]
    assert (layer["status"], layer["not_run"], layer["reason"]) == ("failed", len(not_run), why)
    assert data["meta"]["not_run"]["linear"]["cases"] == not_run
    table = gate(str(tmp_path / "results.json"), command="report").stdout
    assert f"tensors; {len(not_run)} case(s) {why}" in table


def test_keep_going_runs_every_case_of_a_hanging_layer(ports, tmp_path):
    names = _linear_t16_cases()
    r = gate("--port", str(ports("-DTP_HANG", "-DTP_EVERY_CASE")), "--layers", "linear",
             *T16_CASES, "-q", "--timeout", "1", "--keep-going", "--report-dir", str(tmp_path))
    assert r.returncode == 1, r.stdout + r.stderr
    data = json.loads((tmp_path / "results.json").read_text())
    assert not any(t["note"].startswith("not run:") for t in data["tensors"])
    assert {t["case"] for t in data["tensors"] if t["note"].startswith("hang:")} == set(names)
    assert "not_run" not in data["layers"]["linear"] and "not_run" not in data["meta"]


@pytest.mark.parametrize("target", ["/nonexistent/linear.h5", "linear.h5"])
def test_a_fixture_that_is_a_broken_link_is_exit_2(tmp_path, target):
    """--fixtures DIR with linear.h5 a dangling link or a loop: the layer's fixture is there
    and unreadable. Before, it was skipped and the gate passed on the other files."""
    (tmp_path / "linear.h5").symlink_to(target)
    cannot_run(gate("--fixtures", str(tmp_path), "--layers", "linear", "-q"),
               "is a symbolic link that leads to no file")



def test_a_draw_past_64_bits_is_a_bad_option():
    """--draw 2**64 was an internal error (HDF5 has no integer type for it), leaving an empty
    draw directory in the cache."""
    r = gate("--draw", str(2 ** 64), "-q")
    assert r.returncode == 2 and "is not in the range 0<=x<=9223372036854775807" in r.stderr
