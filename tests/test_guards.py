"""What a hostile port cannot get past (docs/port-abi.md, "What the
gate guarantees"). Each test builds a variant of tests/ports/testport.c that misbehaves in
one way, on the linear case T16_I37_O37 unless its header says otherwise, and gates it.
"""
from __future__ import annotations

import ctypes
import json
import re
from pathlib import Path

import numpy as np
import pytest

from testports import ROOT, cannot_run, gate  # noqa: E402

LAYERS = ["--layers", "dot16,linear"]
BAD = "linear/T16_I37_O37"


def failures(r) -> list[str]:
    return [line for line in r.stdout.splitlines() if line.startswith("FAIL ")]


def results(d: Path) -> dict:
    return json.loads((d / "results.json").read_text())


# ---- 1. out-of-bounds writes ------------------------------------------------------------------

OOB = {
    "one float past db": ("-DTP_OOB_DB=1", BAD, "crnn_linear_backward wrote outside output db "
                          "(float32[37]): bytes +0..+3 past its end (element 37; it has 37)"),
    "4 floats past y": ("-DTP_OOB_Y=4", BAD, "crnn_linear_forward wrote outside output y "
                        "(float32[16, 37]): bytes +12..+15 past its end (element 595; it has 592)"),
    "64 floats past y": ("-DTP_OOB_Y=64", BAD, "crnn_linear_forward wrote outside output y "
                         "(float32[16, 37]): bytes +252..+255 past its end (element 655"),
    "one float before y": ("-DTP_OOB_Y=-1", BAD, "crnn_linear_forward wrote outside output y "
                           "(float32[16, 37]): bytes -4..-1 before its start (element -1)"),
    "16 KiB past dW": ("-DTP_OOB_DW_FAR", "linear/T16_I128_O48",
                       "the port crashed in crnn_linear_backward: killed by signal SIGSEGV (a "
                       "write at byte +16384 past the end of dW (in its guard region))"),
}


@pytest.mark.parametrize("what", list(OOB))
def test_an_out_of_bounds_write_fails_its_case_naming_call_buffer_and_offset(what, ports, tmp_path):
    define, case, message = OOB[what]
    r = gate("--port", str(ports(define)), *LAYERS, "-q", "--report-dir", str(tmp_path))
    assert r.returncode == 1, r.stdout + r.stderr
    fails = failures(r)
    assert fails and all(line.startswith(f"FAIL {case}/* ") for line in fails), fails
    assert all(message in line for line in fails), (message, fails)
    # the gate went on: every other case ran and passed
    bad = {(t["layer"], t["case"]) for t in results(tmp_path)["tensors"] if not t["passed"]}
    assert bad == {tuple(case.split("/"))}


# ---- 2. inputs are private copies, checked after every call ------------------------------------

def test_a_modified_const_input_fails_its_case_and_names_the_element(ports, tmp_path):
    r = gate("--port", str(ports("-DTP_MODIFY_W=0")), *LAYERS, "-q", "--report-dir", str(tmp_path))
    assert r.returncode == 1, r.stdout + r.stderr
    fails = failures(r)
    assert fails and all(line.startswith(f"FAIL {BAD}/* ") for line in fails), fails
    assert all("crnn_linear_forward modified input W (float32[37, 37]) at [3, 5] (0.12838706 "
               "-> 1.1283871); it is const" in line for line in fails), fails
    assert not any("differs from" in line for line in fails)     # not blamed on identity
    r = gate("--port", str(ports("-DTP_MODIFY_B")), *LAYERS, "-q")
    assert r.returncode == 1 and "modified input b (float32[37]) at [2]" in r.stdout, r.stdout


def test_a_modified_input_cannot_damage_the_next_run(ports, tmp_path):
    """The port changes W only when run with 2 threads: that run fails, naming the input, and
    the runs with 3 and 7 threads after it (the same worker, the same cached fixture) pass."""
    r = gate("--port", str(ports("-DTP_MODIFY_W=2")), *LAYERS, "-q", "--report-dir", str(tmp_path))
    assert r.returncode == 1, r.stdout + r.stderr
    recs = [t for t in results(tmp_path)["tensors"] if t["case"] == "T16_I37_O37"]
    bad = [t for t in recs if not t["passed"]]
    assert [(t["tier"], t["threads"]) for t in bad] == [("identity", 2)], bad
    assert "modified input W" in bad[0]["note"]
    later = [t for t in recs if t["tier"] == "identity" and t["threads"] in (3, 7)]
    assert later and all(t["passed"] for t in later)


# ---- 3. the floating-point environment, before and after every call ---------------------------

@pytest.mark.parametrize("define, found", [("-DTP_FTZ_IN_BACKWARD", "flush-to-zero (FTZ)"),
                                           ("-DTP_ROUND_IN_BACKWARD", "rounding toward zero")])
def test_fp_state_left_changed_by_the_last_call_of_the_run(define, found, ports):
    """One case, one ISA, one thread: crnn_linear_backward is the run's last call."""
    cannot_run(gate("--port", str(ports(define)), "--layers", "linear", "--case", "T16_I37_O37",
                    "--isa", "scalar", "--threads", "1"),
               found, "after crnn_linear_backward returned (linear, case T16_I37_O37, scalar x 1")


# ---- 4. what the port prints is captured, never mixed into the gate's output -------------------

def test_port_output_is_captured_and_attached(ports, tmp_path):
    r = gate("--port", str(ports("-DTP_PRINT")), *LAYERS, "--report-dir", str(tmp_path))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "testport" not in r.stdout + r.stderr
    doc = results(tmp_path)
    assert "loaded (stdout)" in doc["meta"]["port_load_output"]
    assert "loaded (stderr)" in doc["meta"]["port_load_output"]
    outs = {(t["case"], t["isa"], t["threads"]): t["output"] for t in doc["tensors"] if "output" in t}
    base = outs[("T16_I37_O37", "scalar", 1)]
    assert base == ("testport: linear_forward T=16 I=37 O=37\ntestport: linear_forward on stderr\n"
                    "testport: linear_backward T=16 I=37 O=37\ntestport: linear_backward on stderr\n")
    assert ("T16_I37_O37", "scalar", 7) in outs             # each run's own record
    assert sum(1 for t in doc["tensors"] if t.get("output")) == len(outs)   # once per run
    html = (tmp_path / "index.html").read_text()
    assert "What the port printed" in html and "linear_backward T=16 I=37 O=37" in html
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.validate(doc, json.loads((ROOT / "reports" / "results.schema.json").read_text()))


def test_port_output_is_truncated(ports, tmp_path):
    from crnn_conformance.harness.sandbox.executor import OUTPUT_LIMIT
    r = gate("--port", str(ports("-DTP_PRINT_BYTES=10000")), "--layers", "linear", "-q",
             "--case", "T16_I37_O37", "--threads", "1", "--report-dir", str(tmp_path))
    assert r.returncode == 0 and "xxx" not in r.stdout, r.stdout
    out = [t["output"] for t in results(tmp_path)["tensors"] if "output" in t]
    assert len(out) == 1
    assert out[0].startswith("x" * 63 + "\n")
    assert out[0].endswith(f"[... {10000 - OUTPUT_LIMIT} more byte(s) not kept]")


# ---- 5. a port that reports no ISA path -----------------------------------------------------------

def test_isa_available_without_scalar_is_exit_2(ports):
    cannot_run(gate("--port", str(ports("-DTP_ISA_NONE")), *LAYERS),
               "crnn_isa_available() returned 0x0", "bit 0 (scalar)")


# ---- 12. a crashed case, the repro line, a failed backward -----------------------------------------

def test_a_crashed_case_shows_no_result_in_the_table(ports):
    r = gate("--port", str(ports("-DTP_SEGV")), *LAYERS, "--timeout", "30", "-v")
    assert r.returncode == 1
    assert "None" not in r.stdout
    row = next(line for line in r.stdout.splitlines() if re.match(r".*T16_I37_O37\s+\*\s", line))
    assert "no result" in row, row
    assert "--timeout 30" in next(line for line in r.stdout.splitlines() if "__REPRO:" in line)


def test_a_crash_in_one_run_of_a_batch_fails_that_run_only(ports, tmp_path):
    """The worker runs a case's 16 runs as one batch (harness/sandbox/executor.py). The port crashes
    only with 2 threads: each of those runs fails naming the crash, the runs answered before
    it are kept, and the runs after it are redone on a new worker and pass."""
    r = gate("--port", str(ports("-DTP_SEGV_THREADS=2")), *LAYERS, "-q", "--report-dir",
             str(tmp_path))
    assert r.returncode == 1, r.stdout + r.stderr
    recs = [t for t in results(tmp_path)["tensors"] if t["case"] == "T16_I37_O37"]
    bad = [t for t in recs if not t["passed"]]
    isas = sorted({t["isa"] for t in recs})
    assert sorted((t["tier"], t["isa"], t["threads"]) for t in bad) == [
        ("identity", isa, 2) for isa in isas], bad
    assert all("the port crashed in crnn_linear_backward: killed by signal SIGSEGV" in t["note"]
               for t in bad), bad
    good = {(t["tier"], t["isa"], t["threads"]) for t in recs if t["passed"]}
    assert {("identity", isa, n) for isa in isas for n in (3, 7)} <= good
    assert {t for t, _, _ in good} >= {"exact", "float64"}


def test_a_failed_backward_keeps_the_forward_results(ports, tmp_path):
    r = gate("--port", str(ports("-DTP_BACKWARD_ERR")), "--layers", "linear", "-q",
             "--case", "T16_I37_O37", "--report-dir", str(tmp_path))
    assert r.returncode == 1
    recs = results(tmp_path)["tensors"]
    y = {t["tier"]: t for t in recs if t["tensor"] == "y"}
    assert set(y) == {"exact", "float64"} and all(t["passed"] for t in y.values())
    failed = [t for t in recs if not t["passed"]]
    assert {t["tensor"] for t in failed} == {"*"}
    assert all("crnn_linear_backward returned -4" in t["note"] for t in failed)


# ---- the pieces, in process -------------------------------------------------------------------------

def test_the_argument_table_matches_the_header():
    """abi.ARGS (names, and * for a pointer the call writes) is crnn_port.h's declarations."""
    from crnn_conformance.ctypes_kernels import abi
    text = re.sub(r"/\*.*?\*/", "", (ROOT / "ctypes_kernels" / "crnn_port.h").read_text(), flags=re.S)
    decls = dict(re.findall(r"\b(crnn_\w+)\s*\(([^)]*)\)\s*;", text))
    for name, (_, types) in abi.SIGNATURES.items():
        params = [p.strip() for p in decls[name].split(",") if p.strip() not in ("", "void")]
        want = [("" if "const" in p or "*" not in p else "*") + re.findall(r"\w+", p)[-1]
                for p in params]
        assert abi.ARGS.get(name, "").split() == want, name
        assert len(want) == len(types), name


def test_the_buffer_table_matches_the_argument_table():
    """abi.BUFFERS names every pointer argument of abi.ARGS in order, writable exactly where
    ARGS marks it written, and every integer it sizes by is an argument or a derived size."""
    from crnn_conformance.ctypes_kernels import abi
    for name in abi.SIGNATURES:
        ptrs = abi.pointer_args(name)
        specs = abi.BUFFERS.get(name, "").split()
        assert [s.split(":")[0] for s in specs] == [a for _, a, _ in ptrs], name
        for spec, (_, arg, written) in zip(specs, ptrs):
            assert (":out" in spec or ":inout" in spec) == written, (name, arg)
    b = abi.buffers("crnn_linear_backward", {"T": 3, "I": 5, "O": 2})
    assert [(x.name, x.shape, x.role, x.nullable) for x in b] == [
        ("x", (3, 5), "in", False), ("W", (2, 5), "in", False), ("dY", (3, 2), "in", False),
        ("dx", (3, 5), "out", True), ("dW", (2, 5), "out", False), ("db", (2,), "out", False)]


def test_the_buffer_table_sizes_the_model_as_param_specs_does():
    from crnn_conformance.ctypes_kernels import abi
    from crnn_conformance.generators import model
    for config in (model.default_config(), {**model.default_config(), "lstm_layers": 1}):
        cfg = model.cfg_array(config)
        sizes = [int(np.prod(s.shape)) for s in model.param_specs(config)]
        bufs = abi.buffers("crnn_step_gradients", {"B": 2},
                           lambda a, dt, n: {"cfg": cfg, "widths": [8, 12],
                                             "targetLens": [3, 0]}[a][:n])
        shapes = {x.name: x.shape for x in bufs}
        assert shapes["params"] == shapes["grads"] == (sum(sizes),)
        assert shapes["images"] == (20 * config["input_height"] * config["input_channels"],)
        assert shapes["targets"] == (3,)
        assert abi._cfg_sizes(cfg)["sizes"] == sizes


@pytest.fixture(params=["C helper", "memcmp"])
def checks(request):
    """The guard checks as the worker makes them (one call into the harness's C helper) and
    as they are made without a C compiler (memcmp per zone): the same verdicts."""
    from crnn_conformance.harness.sandbox import guard
    from crnn_conformance.harness.sandbox.fpenv import fpenv_helper
    helper = fpenv_helper() if request.param == "C helper" else None
    if request.param == "C helper" and helper is None:
        pytest.skip("no C compiler for the harness helper")
    guard.use_helper(helper)
    yield guard
    guard.use_helper(None)


def test_a_helper_without_the_guard_check_leaves_the_memcmp_way():
    """A harness helper built without crnn_h_guard_check (another version's) still loads;
    the guard then checks with memcmp."""
    from crnn_conformance.ctypes_kernels.build import BuildError, build_helper
    from crnn_conformance.harness.sandbox import fpenv, guard
    start = fpenv.FPENV_SOURCE.index("int32_t crnn_h_guard_check")
    end = fpenv.FPENV_SOURCE.index("#if defined(__x86_64__) || defined(__i386__)")
    try:
        path = build_helper("crnnfpenv_old", fpenv.FPENV_SOURCE[:start] + fpenv.FPENV_SOURCE[end:])
    except BuildError:
        pytest.skip("no C compiler for the harness helper")
    guard.use_helper(fpenv.load_helper(path))
    try:
        assert guard._CHECK is None
    finally:
        guard.use_helper(None)


def test_the_helper_is_built_from_fpenv_c_and_rebuilt_when_it_changes(tmp_path, monkeypatch):
    """The helper's C is the shipped fpenv.c (then replay.c); the build cache keys it by that
    text, so an edit of fpenv.c gives another library."""
    from crnn_conformance.ctypes_kernels.build import BuildError, build_helper
    from crnn_conformance.harness.sandbox import fpenv
    c = fpenv.SOURCE.read_text()
    assert fpenv.SOURCE.name == "fpenv.c" and fpenv.helper_source().startswith(c)
    monkeypatch.setenv("CRNN_CACHE_DIR", str(tmp_path / "cache"))
    try:
        a = build_helper("crnnfpenv", fpenv.helper_source())
    except BuildError:
        pytest.skip("no C compiler for the harness helper")
    assert build_helper("crnnfpenv", fpenv.helper_source()) == a
    edited = fpenv.helper_source().replace(c, c + "/* edited */\n", 1)
    assert build_helper("crnnfpenv", edited) != a


def test_guard_zones_and_const_checks(checks):
    guard = checks
    arena = guard.Arena()
    guard.activate(arena)
    try:
        y = guard.output((4, 3), np.float32)
        big = guard.output(1 << 14, np.float32)
        x = arena.private("x", np.arange(6, dtype=np.float32))
    finally:
        guard.activate(None)
    small, paged = arena.buffers[:2]
    assert not small.paged and paged.paged
    assert y.ctypes.data % guard.ALIGN == 0 and big.ctypes.data % guard.ALIGN == 0
    args = (x.ctypes.data, None, None, 0, 0, 0, y.ctypes.data)          # crnn_linear_forward
    touched = arena.before("crnn_linear_forward", args)
    arena.after("crnn_linear_forward", touched, 0)                     # nothing wrong
    ctypes.memset(y.ctypes.data + y.nbytes + 8, 0, 4)                  # 8 bytes past y's end
    touched = arena.before("crnn_linear_forward", args)
    with pytest.raises(guard.Violation, match=r"output y \(float32\[4, 3\]\): bytes \+8\.\.\+11 "
                                              r"past its end \(element 14; it has 12\)"):
        arena.after("crnn_linear_forward", touched, 0)
    x[4] = 7
    touched = arena.before("crnn_dot16", (x.ctypes.data + 8, None, 0, None))   # a slice of x
    with pytest.raises(guard.Violation, match=r"modified input x \(argument a; float32\[6\]\) at \[4\] "
                                              r"\(4\.0 -> 7\.0\)"):
        arena.after("crnn_dot16", touched, 0)
    arena.release()


def test_every_zone_and_every_const_buffer_is_checked(checks):
    """Each kind of damage, to each buffer in turn, is caught: a canary byte before the start
    or past the end (small and paged buffers), a const input changed, an earlier output
    passed back const (conv's winners) changed by the call, and after the run an input
    changed behind the calls' backs."""
    guard = checks
    W = np.arange(12, dtype=np.float32).reshape(3, 4)
    for victim in range(4):
        for where in ("before", "past", "data"):
            arena = guard.Arena()
            guard.activate(arena)
            try:
                x = arena.private("x", np.ones((2, 4), np.float32))
                w = arena.private("W", W)
                y = guard.output((2, 3), np.float32)
                big = guard.output(1 << 14, np.float32)
            finally:
                guard.activate(None)
            bufs = [x, w, y, big]
            args = (x.ctypes.data, w.ctypes.data, None, 2, 4, 3, y.ctypes.data)
            arena.after("crnn_linear_forward", arena.before("crnn_linear_forward", args), 0)
            a = bufs[victim]
            at = {"before": a.ctypes.data - 1, "past": a.ctypes.data + a.nbytes + 3,
                  "data": a.ctypes.data + 5}[where]
            touched = arena.before("crnn_linear_forward", args)
            ctypes.memset(at, 0x11, 1)
            if victim == 3 or (where == "data" and victim == 2):
                # big is not an argument, y is written: after() passes, finish() decides
                arena.after("crnn_linear_forward", touched, 0)
                if where == "data":
                    arena.finish()                   # y's data is the call's to write
                else:
                    with pytest.raises(guard.Violation, match="written out of bounds"):
                        arena.finish()
            else:
                msg = "modified input" if where == "data" else "wrote outside"
                with pytest.raises(guard.Violation, match=msg):
                    arena.after("crnn_linear_forward", touched, 0)
            arena.release()
    arena = guard.Arena()                            # an earlier output passed back const
    guard.activate(arena)
    try:
        out = guard.output(3, np.float32)
    finally:
        guard.activate(None)
    out[...] = 1.0
    touched = arena.before("crnn_dot16", (out.ctypes.data, out.ctypes.data, 3, None))
    out[1] = 2.0
    with pytest.raises(guard.Violation, match=r"modified output .* at \[1\] \(1\.0 -> 2\.0\)"):
        arena.after("crnn_dot16", touched, 0)
    out[1] = 1.0
    arena.after("crnn_dot16", arena.before("crnn_dot16", (out.ctypes.data, 0, 3, None)), 0)
    arena.finish()
    arena.private("x", np.zeros(2, np.float32))[0] = 3.0   # an input changed after its calls
    with pytest.raises(guard.Violation, match="input x was modified at \\[0\\]"):
        arena.finish()
    arena.release()


def test_partial_results_are_the_outputs_one_completed_call_wrote():
    from crnn_conformance.harness.sandbox import guard
    arena = guard.Arena()
    guard.activate(arena)
    try:
        y, dx = guard.output(3, np.float32), guard.output(3, np.float32)
    finally:
        guard.activate(None)
    fwd = (0, 0, 0, 0, 0, 0, y.ctypes.data)
    arena.after("crnn_linear_forward", arena.before("crnn_linear_forward", fwd), 0)
    bwd = (0, 0, 0, 0, 0, 0, dx.ctypes.data, 0, 0)
    arena.after("crnn_linear_backward", arena.before("crnn_linear_backward", bwd), -4)
    assert list(arena.partial({"y", "dx", "dW"})) == ["y"]
