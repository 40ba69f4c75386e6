"""crnn-run (ctypes_kernels/runner/crnn_run.c): a case bundle run on a port outside the gate.

Bundles come from tests/bundles.py (the reference port's recorded runs of fixture cases), so
every run's written buffers can be held to the reference's bits. The broken ports are
tests/ports/testport.c's switches; the aarch64 run is the bundled port cross-compiled and run
under qemu-user, compared byte for byte with the x86-64 run.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from crnn_conformance.ctypes_kernels import abi, build, crossbuild

import bundles  # noqa: E402
from testports import build_port  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
CROSS_CC = "aarch64-linux-gnu-gcc"
# a few cases of every layer (the step case is the small one): the default suite
LAYERS = [("dot16", "dot16", "order_n0_100"), ("dot16", "dot16_edges", "neg_zero_first*"),
          ("linear", "linear", "T16_I37_O37"), ("linear", "linear_edges", "T1_I1_O1"),
          ("conv", "conv", "b1_W64"), ("lstm", "lstm", "layer1_T16"),
          ("lstm", "activations", "*"), ("ctc", "ctc", "random_T16_L5"),
          ("ctc", "detmath", "*"), ("clip", "clip", "three_four"),
          ("adamw", "adamw", "conv0.b"), ("step", "step", "small_b3")]
LINEAR = [("dot16", "dot16", "order_n0_100"), ("linear", "linear", "T16_I128_O37"),
          ("linear", "linear", "T16_I37_O37"), ("linear", "linear", "T16_I37_O48"),
          ("linear", "linear", "T16_I128_O48")]


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return tmp_path_factory.mktemp("crnn_run")


@pytest.fixture(scope="module")
def runner(work):
    return crossbuild.build_runner(work / "crnn-run")


@pytest.fixture(scope="module")
def layers_bundle(work):
    recorded = bundles.write_bundle(work / "layers", bundles.fixture_cases(LAYERS))
    return work / "layers", recorded


@pytest.fixture(scope="module")
def linear_bundle(work):
    recorded = bundles.write_bundle(work / "linear", bundles.fixture_cases(LINEAR))
    return work / "linear", recorded


def run(runner, port, bundle, results, *args, prefix=(), timeout=300):
    return subprocess.run([*prefix, str(runner), str(port), str(bundle), str(results), *args],
                          capture_output=True, text=True, timeout=timeout)


def assert_reference_bits(results, recorded, bundle):
    """Every run ok, and every buffer its calls wrote ends with the reference's bits."""
    cases = bundles.read_bundle(bundle)
    for r in results["runs"]:
        assert r["status"] == 0, r
        want = bundles.reference_written(recorded[r["case"]])
        got = bundles.final_written(cases[r["case"]], r)
        assert got, r["case"]
        for buf, data in got.items():
            assert data == want[buf], (r["case"], r["isa"], r["threads"], buf)


def test_entry_table_is_generated_from_abi():
    """The checked-in table (for a build by hand) is what abi.py generates, and it names every
    entry point with its argument kinds and written pointers from SIGNATURES and ARGS."""
    text = crossbuild.ENTRIES_HEADER.read_text()
    assert text == crossbuild.entries_header(), "regenerate runner/crnn_entries.h from abi.py"
    for name, (_, args) in abi.SIGNATURES.items():
        row = next(line for line in text.splitlines() if line.startswith(f'    {{"{name}"'))
        kinds = row.split('"')[3]
        assert len(kinds) == len(args)
        written = [i for i, _, w in abi.pointer_args(name) if w]
        assert [i for i, c in enumerate(row.split('"')[5]) if c == "1"] == written, name


def test_native_run_gives_the_reference_bits(runner, layers_bundle, work):
    bundle, recorded = layers_bundle
    port = build.build()
    out = work / "native.bin"
    t0 = time.perf_counter()
    r = run(runner, port, bundle, out)
    seconds = time.perf_counter() - t0
    assert r.returncode == 0, r.stderr
    res = bundles.read_results(out)
    assert res["digest"] == hashlib.sha256((bundle / "cases.bin").read_bytes()).hexdigest()
    p = res["platform"]
    assert p["arch"] == "x86_64" and p["port"] == str(port)
    assert p["port_sha256"] == hashlib.sha256(Path(port).read_bytes()).hexdigest()
    isas = abi.available_isas(abi.load(port))
    assert {(x["case"], abi.ISA_NAMES[x["isa"]], x["threads"]) for x in res["runs"]} == {
        (c, i, t) for c in range(len(recorded)) for i in isas for t in (1, 2, 3, 7)}
    assert_reference_bits(res, recorded, bundle)
    print(f"native: {len(recorded)} cases x {len(isas)} ISAs x 4 thread counts in {seconds:.2f} s")


def test_results_versions_1_and_2_hold_the_same_buffers(runner, layers_bundle, work):
    """Version 2 (the default) records the span each call changed, version 1 whole buffers:
    the buffers they rebuild are the same; a version 1 file resumes as version 1."""
    bundle, recorded = layers_bundle
    port, v1, v2 = build.build(), work / "v1.bin", work / "v2.bin"
    assert run(runner, port, bundle, v1, "--threads", "1", "--results-version", "1").returncode == 0
    assert run(runner, port, bundle, v2, "--threads", "1").returncode == 0
    a, b = bundles.read_results(v1), bundles.read_results(v2)
    assert (a["version"], b["version"]) == (1, 2)
    cases = bundles.read_bundle(bundle)
    for x, y in zip(a["runs"], b["runs"]):
        assert bundles.final_written(cases[x["case"]], x) == bundles.final_written(cases[y["case"]], y)
        for (_, _, whole), (_, _, span) in zip(x["calls"], y["calls"]):
            assert span.keys() <= whole.keys()
            assert all(len(span[k][1]) <= len(whole[k][1]) for k in span)
    data = v1.read_bytes()
    v1.write_bytes(data[:len(data) // 2])
    assert run(runner, port, bundle, v1, "--threads", "1", "--resume").returncode == 0
    assert bundles.read_results(v1) == a


def test_options_select_isa_threads_and_cases(runner, layers_bundle, work):
    bundle, recorded = layers_bundle
    out = work / "sel.bin"
    r = run(runner, build.build(), bundle, out, "--isa", "scalar", "--threads", "1,5",
            "--case", "linear/*")
    assert r.returncode == 0, r.stderr
    runs = bundles.read_results(out)["runs"]
    names = [f"{la}/{f}/{c.name}" for la, f, c in bundles.fixture_cases(LAYERS)]
    assert sorted({x["case"] for x in runs}) == [i for i, n in enumerate(names)
                                                 if n.startswith("linear/")]
    assert {(x["isa"], x["threads"]) for x in runs} == {(0, 1), (0, 5)}
    assert_reference_bits({"runs": runs}, recorded, bundle)


def statuses(results) -> dict:
    """{(case, threads): (status, msg)} of the scalar runs."""
    return {(x["case"], x["threads"]): (x["status"], x["msg"]) for x in results["runs"]
            if x["isa"] == 0}


TRIGGER = 2      # LINEAR's T16_I37_O37: the case testport.c's switches break


@pytest.mark.parametrize("define,status,fragment", [
    ("-DTP_SEGV", 2, "SIGSEGV (signal 11) in crnn_linear_backward"),
    ("-DTP_ABORT", 2, "SIGABRT (signal 6) in crnn_linear_backward"),
    ("-DTP_HANG", 3, "crnn_linear_backward did not return within 1 s"),
    ("-DTP_MODIFY_W=0", 5, "const input W modified by crnn_linear_forward"),
    ("-DTP_OOB_DB=1", 5, "canary after db broken by crnn_linear_backward"),
    ("-DTP_OOB_DW_FAR", 2, "SIGSEGV (signal 11) in crnn_linear_backward (call 1): a write at "
                           "byte +16384 past the end of dW (in its guard region)"),
    ("-DTP_OOB_Y=-1", 5, "canary before y broken by crnn_linear_forward"),
    ("-DTP_ERRCODE", 1, "crnn_linear_backward returned -3"),
    ("-DTP_FTZ_IN_BACKWARD", 5, "fpenv changed: FTZ by crnn_linear_backward"),
    ("-DTP_ROUND_IN_BACKWARD", 5, "fpenv changed: rounding (MXCSR) by crnn_linear_backward"),
])
def test_a_broken_case_loses_no_other_case(runner, linear_bundle, work, define, status, fragment):
    """The broken case's runs get their status and message; every other case's runs are ok
    and keep the reference's bits (the runner goes on after a crash or a hang)."""
    bundle, recorded = linear_bundle
    port = build_port(work, define)
    out = work / f"tp{define}.bin"
    r = run(runner, port, bundle, out, "--timeout", "1")
    res = bundles.read_results(out)
    got = statuses(res)
    assert len(got) == len(recorded) * 4
    broken = ({len(LINEAR) - 1} if define == "-DTP_OOB_DW_FAR"           # T16_I128_O48
              else set(range(1, len(LINEAR))) if "IN_BACKWARD" in define   # every linear case
              else {TRIGGER})
    for (case, threads), (st, msg) in got.items():
        if case in broken:
            assert st == status and fragment in msg, (case, threads, st, msg)
        else:
            assert st == 0, (case, st, msg)
    assert_reference_bits({"runs": [x for x in res["runs"] if x["case"] not in broken]},
                          recorded, bundle)
    assert r.returncode == (1 if status else 0), r.stderr
    if status:
        assert f"{bundles.fixture_cases(LINEAR)[min(broken)][2].name} isa scalar threads 1: " \
            in r.stderr


def test_flags_of_the_call_that_failed_a_check(runner, linear_bundle, work):
    """The failing call's record carries the check's flag bit; poison left in a written
    buffer is flagged but not a failure."""
    bundle, _ = linear_bundle
    for define, bit, status in (("-DTP_MODIFY_W=0", 2, 5), ("-DTP_OOB_DB=1", 1, 5),
                                ("-DTP_FTZ_IN_BACKWARD", 4, 5), ("-DTP_UNWRITTEN", 8, 0)):
        out = work / f"flags{define}.bin"
        run(runner, build_port(work, define), bundle, out, "--threads", "1")
        trig = next(x for x in bundles.read_results(out)["runs"] if x["case"] == TRIGGER)
        assert trig["status"] == status, (define, trig["msg"])
        assert trig["calls"][-1][1] & bit, (define, trig["calls"][-1][1])


@pytest.mark.parametrize("define", ["-DTP_SEGV", "-DTP_HANG"])
def test_a_crash_keeps_the_calls_before_it(runner, linear_bundle, work, define):
    """The run that dies in crnn_linear_backward keeps the forward's record (its y with the
    reference's bits), as the gate keeps a failed backward's forward records."""
    bundle, recorded = linear_bundle
    out = work / f"kept{define}.bin"
    run(runner, build_port(work, define), bundle, out, "--threads", "1", "--timeout", "1")
    trig = next(x for x in bundles.read_results(out)["runs"] if x["case"] == TRIGGER)
    assert trig["status"] in (2, 3) and len(trig["calls"]) == 1, trig
    (buf, y), = bundles.final_written(bundles.read_bundle(bundle)[TRIGGER], trig).items()
    assert y == bundles.reference_written(recorded[TRIGGER])[buf]


def test_a_crash_on_one_thread_count_only(runner, linear_bundle, work):
    bundle, _ = linear_bundle
    out = work / "segv3.bin"
    run(runner, build_port(work, "-DTP_SEGV_THREADS=3"), bundle, out)
    got = statuses(bundles.read_results(out))
    assert [t for (c, t), (st, _) in got.items() if st] == [3]
    assert got[(TRIGGER, 7)][0] == 0


def test_missing_symbols_are_not_implemented(runner, linear_bundle, work):
    """TP_OMIT drops crnn_dot16 and crnn_linear_backward: those cases are status 4 naming the
    symbol, and exit 0 (not a failure by itself)."""
    bundle, recorded = linear_bundle
    out = work / "omit.bin"
    r = run(runner, build_port(work, "-DTP_OMIT"), bundle, out)
    assert r.returncode == 0, r.stderr
    got = statuses(bundles.read_results(out))
    assert {v for (c, _), v in got.items() if c == 0} == {(4, "crnn_dot16")}
    assert {v for (c, _), v in got.items() if c > 0} == {(4, "crnn_linear_backward")}


def test_resume_after_the_runner_itself_died(runner, linear_bundle, work):
    """A results file cut in the middle of a record (the runner killed) is completed by
    --resume: the complete records stay as they were, the cut run and the rest are run."""
    bundle, recorded = linear_bundle
    port = build.build()
    full = work / "full.bin"
    assert run(runner, port, bundle, full, "--isa", "scalar").returncode == 0
    data = full.read_bytes()
    cut = work / "cut.bin"
    cut.write_bytes(data[:len(data) * 2 // 3])
    r = run(runner, port, bundle, cut, "--isa", "scalar", "--resume")
    assert r.returncode == 0, r.stderr
    a, b = bundles.read_results(full), bundles.read_results(cut)
    key = lambda x: (x["case"], x["isa"], x["threads"])   # noqa: E731
    assert sorted(map(key, a["runs"])) == sorted(map(key, b["runs"]))
    assert b["runs"] == a["runs"]        # the same records in the same order
    # a results file of another bundle is refused
    other = work / "other.bin"
    other.write_bytes(data[:12] + b"0" * 64 + data[76:200])
    r = run(runner, port, bundle, other, "--resume")
    assert r.returncode == 2 and "not a results file of this bundle" in r.stderr


def test_resume_after_killing_the_runner_mid_run(runner, linear_bundle, work):
    """The runner killed with -9 while a slow call runs; --resume finishes the file."""
    bundle, recorded = linear_bundle
    port = build_port(work, "-DTP_SLEEP_MS=300")
    out = work / "killed.bin"
    p = subprocess.Popen([str(runner), str(port), str(bundle), str(out), "--isa", "scalar"],
                         stderr=subprocess.DEVNULL, start_new_session=True)
    time.sleep(0.5)
    os.killpg(p.pid, 9)
    p.wait()
    r = run(runner, port, bundle, out, "--isa", "scalar", "--resume")
    assert r.returncode == 0, r.stderr
    res = bundles.read_results(out)
    assert len(res["runs"]) == len(recorded) * 4
    assert_reference_bits(res, recorded, bundle)


@pytest.mark.parametrize("what", ["truncated", "magic", "argtype", "no bundle", "no port",
                                  "abi", "ftz on load", "isa", "isa here", "threads", "timeout", "version",
                                  "arguments"])
def test_bad_input_is_one_line_and_exit_2(runner, linear_bundle, work, what):
    bundle, _ = linear_bundle
    data = (bundle / "cases.bin").read_bytes()
    bad = work / f"bad-{what.replace(' ', '_')}"
    bad.mkdir(exist_ok=True)
    port, args, fragment = build.build(), [], "cannot run: "
    if what == "truncated":
        (bad / "cases.bin").write_bytes(data[:len(data) // 2])
        fragment = "is malformed: it ends early"
    elif what == "magic":
        (bad / "cases.bin").write_bytes(b"NOTCASES" + data[8:])
        fragment = "is not a case bundle"
    elif what == "argtype":      # the first call's first argument (a pointer) made an i32
        at = data.index(b"crnn_dot16") + len(b"crnn_dot16") + 2
        (bad / "cases.bin").write_bytes(data[:at] + b"\x00" + data[at + 1:])
        fragment = "an argument whose type is not the ABI's"
    else:
        shutil.copy(bundle / "cases.bin", bad / "cases.bin")
    if what == "no bundle":
        bad = work / "nowhere"
        fragment = "cannot be read"
    elif what == "no port":
        port, fragment = work / "nothing.so", "cannot be loaded"
    elif what == "abi":
        port, fragment = build_port(work, "-DTP_ABI=2"), "has ABI version 2"
    elif what == "ftz on load":
        port = build_port(work, "-DTP_FTZ_ON_LOAD")
        fragment = "changed the floating-point environment when it was loaded: FTZ"
    elif what == "isa":
        args, fragment = ["--isa", "altivec"], "unknown ISA path 'altivec'"
    elif what == "isa here":
        args, fragment = ["--isa", "scalar,neon"], "the port does not offer neon here"
    elif what == "threads":
        args, fragment = ["--threads", "0"], "is not a count in 1..256"
    elif what == "timeout":
        args, fragment = ["--timeout", "-1"], "not a positive number"
    elif what == "version":
        args, fragment = ["--results-version", "3"], "is not 1 or 2"
    elif what == "arguments":
        args, fragment = ["--frobnicate"], "unknown or incomplete option"
    r = run(runner, port, bad, work / "bad.bin", *args)
    assert r.returncode == 2, (r.returncode, r.stderr)
    first = r.stderr.strip().splitlines()[0]
    assert first.startswith("crnn-run: cannot run: ") and fragment in first, first


def test_build_commands_with_a_missing_compiler_exit_2(work):
    for cmd in ("build-runner", "build-port"):
        r = subprocess.run([sys.executable, "-m", "crnn_conformance.harness.cli", cmd, "--cc",
                            "no-such-cc", "--out", str(work / "x")], capture_output=True,
                           text=True, cwd=ROOT)
        assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
        assert "no C compiler found (CC=no-such-cc)" in r.stderr


# ---- the other architecture: aarch64 under qemu-user --------------------------------------

def _cross_tools():
    missing = [t for t in (CROSS_CC, "qemu-aarch64") if not shutil.which(t)]
    if missing or not Path("/usr/aarch64-linux-gnu").is_dir():
        pytest.skip(f"no {', '.join(missing) or '/usr/aarch64-linux-gnu'} (apt-get install "
                    "gcc-aarch64-linux-gnu qemu-user libc6-dev-arm64-cross)")


QEMU = ("qemu-aarch64", "-L", "/usr/aarch64-linux-gnu")


def _aarch64_run(work, bundle, name, *args):
    _cross_tools()
    exe, port = work / "crnn-run-aarch64", work / "libcrnn-aarch64.so"
    for cmd, out in (("build-runner", exe), ("build-port", port)):
        if not out.exists():
            r = subprocess.run([sys.executable, "-m", "crnn_conformance.harness.cli", cmd,
                                "--cc", CROSS_CC, "--out", str(out)], capture_output=True,
                               text=True, cwd=ROOT)
            assert r.returncode == 0, r.stderr
            assert "for aarch64" in r.stdout
    out = work / name
    t0 = time.perf_counter()
    r = run(exe, port, bundle, out, *args, prefix=QEMU, timeout=900)
    seconds = time.perf_counter() - t0
    assert r.returncode == 0, r.stderr
    return bundles.read_results(out), seconds


def assert_same_bytes(arm, x86):
    """Every aarch64 run's call records equal the x86-64 scalar 1-thread run's, buffer for
    buffer and call for call."""
    base = {x["case"]: x for x in x86["runs"] if x["isa"] == 0 and x["threads"] == 1}
    for r in arm["runs"]:
        b = base[r["case"]]
        assert len(r["calls"]) == len(b["calls"]), r["case"]
        for k, (ours, theirs) in enumerate(zip(r["calls"], b["calls"])):
            assert ours[0] == theirs[0] and ours[2].keys() == theirs[2].keys(), (r["case"], k)
            for buf in ours[2]:
                assert ours[2][buf] == theirs[2][buf], (r["case"], r["threads"], k, buf)


def test_aarch64_under_qemu_equals_x86_64(runner, layers_bundle, work):
    """The bundled port cross-compiled for aarch64 advertises the scalar and neon paths (no x86
    path) and both give the x86-64 bits, call for call, on a few cases of every layer at
    threads 1, 2, 3, 7."""
    bundle, recorded = layers_bundle
    x86 = work / "x86.bin"
    assert run(runner, build.build(), bundle, x86, "--isa", "scalar", "--threads", "1").returncode == 0
    arm, seconds = _aarch64_run(work, bundle, "arm.bin")
    assert arm["platform"]["arch"] == "aarch64"
    assert {abi.ISA_NAMES[x["isa"]] for x in arm["runs"]} == {"scalar", "neon"}
    assert len(arm["runs"]) == 2 * 4 * len(recorded)
    assert_reference_bits(arm, recorded, bundle)
    assert_same_bytes(arm, bundles.read_results(x86))
    print(f"aarch64 under qemu: {len(recorded)} cases x scalar, neon x threads 1,2,3,7 in "
          f"{seconds:.1f} s")


@pytest.mark.slow
def test_aarch64_under_qemu_every_fixture_case(runner, work):
    """Every case of every fixture (a few minutes under qemu on 2 cores)."""
    from crnn_conformance.generators import h5io
    from crnn_conformance.harness.records import FIXTURES_DIR
    selection = [(h5io.read_fixture(p).attrs["layer"], p.stem, "*")
                 for p in sorted(Path(FIXTURES_DIR).glob("*.h5"))]
    bundle = work / "every"
    recorded = bundles.write_bundle(bundle, bundles.fixture_cases(selection))
    x86 = work / "x86-every.bin"
    assert run(runner, build.build(), bundle, x86, "--isa", "scalar", "--threads", "1").returncode == 0
    arm, seconds = _aarch64_run(work, bundle, "arm-every.bin", "--timeout", "600")
    assert len(arm["runs"]) == 2 * 4 * len(recorded)
    assert_reference_bits(arm, recorded, bundle)
    assert_same_bytes(arm, bundles.read_results(x86))
    print(f"aarch64 under qemu: {len(recorded)} cases x scalar, neon x threads 1,2,3,7 in "
          f"{seconds:.1f} s")
