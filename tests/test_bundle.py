"""Case bundles (docs/case-bundle.md): export -> a runner -> grade gives the gate's records.

The runner here is tests/bundle_runner.py (stdlib only, written from the format's
description, no harness code), which runs a port through ctypes as crnn-run runs it on a
machine without Python. The gate loads the same port in its worker; both record sets must be
the same records (verdicts, usage, worst elements), the isa field naming the machine too.
"""
from __future__ import annotations

import json
import platform
import re
import shlex
import shutil
import struct
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from crnn_conformance.ctypes_kernels import abi
from crnn_conformance.harness import bundle as B

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
from testports import build_port, cannot_run, gate  # noqa: E402

import bundle_runner  # noqa: E402

# a subset of every layer kind the bundle must carry: slices of one buffer (dot16, the
# `many` cases of ctc and adamw), copies between buffers (train3), f64 and i64 buffers
SUBSET = "dot16,linear,ctc,adamw"


def cli(*args, timeout=300):
    """crnn-conformance ARGS in a subprocess from the repository root."""
    return gate(*args[1:], command=args[0], timeout=timeout)


def run_runner(bundle, port, out, *extra):
    bundle_runner.main([str(port), str(bundle), str(out), *extra])
    return out


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return tmp_path_factory.mktemp("bundle")


@pytest.fixture(scope="module")
def bundled_port():
    from crnn_conformance.ctypes_kernels.build import build
    return build()


@pytest.fixture(scope="module")
def subset(work):
    r = cli("export", "--out", str(work / "subset"), "--layers", SUBSET)
    assert r.returncode == 0, r.stderr
    return work / "subset"


@pytest.fixture(scope="module")
def lin(work):
    """dot16 and linear: the layers tests/ports/testport.c implements."""
    r = cli("export", "--out", str(work / "lin"), "--layers", "dot16,linear")
    assert r.returncode == 0, r.stderr
    return work / "lin"


def records(path) -> list[dict]:
    """A results.json's records, without what depends on the process (seconds, the port's
    printed output) or on the command (repro), the isa without its machine."""
    out = []
    for r in json.loads(Path(path).read_text())["tensors"]:
        r = {k: v for k, v in r.items() if k not in ("seconds", "output", "repro")}
        r["isa"] = r["isa"].split(":")[-1]
        out.append(r)
    return out


def gate_and_grade(work, bundle, port, name, *args, threads="1,2,3,7"):
    """(gate's records, grade's records, grade's doc) for `port` on the bundle's layers."""
    res = run_runner(bundle, port, work / f"{name}.res", "--threads", threads)
    layers = ",".join(json.loads((bundle / "bundle.json").read_text())["layers"])
    sel = ["--layers", "available"] if "--available" in args else ["--layers", layers]
    g = gate("--port", str(port), *sel, "--threads", threads, "-q", "--tiers",
             "exact,float64,pytorch,identity", "--json",
             str(work / f"{name}.gate.json"))
    assert g.returncode in (0, 1), g.stderr
    r = cli("grade", str(bundle), str(res), *sel, "-q", "--json", str(work / f"{name}.grade.json"))
    assert r.returncode == g.returncode, (r.stdout[-2000:], r.stderr)
    doc = json.loads((work / f"{name}.grade.json").read_text())
    return records(work / f"{name}.gate.json"), records(work / f"{name}.grade.json"), doc, r


def test_bundled_port_graded_as_the_gate_grades_it(work, subset, bundled_port):
    g, r, doc, out = gate_and_grade(work, subset, bundled_port, "bundled", threads="1,3")
    assert len(g) > 1000
    assert r == g                         # every record: verdict, usage, worst element, ...
    isas = {t["isa"] for t in doc["tensors"]}
    arch = doc["meta"]["machines"][0]["arch"]
    assert all(i.startswith(f"{arch}:") for i in isas), isas
    assert doc["meta"]["bundle"]["digest"] == json.loads(
        (subset / "bundle.json").read_text())["digest"]
    valid(doc)


def test_train3_copies_between_buffers(work, bundled_port):
    """train3 copies each tensor's updated weights into the flat parameters between calls
    (a copy op of the bundle); its results written as version 1 (whole buffers)."""
    r = cli("export", "--out", str(work / "train3"), "--layers", "train3")
    assert r.returncode == 0, r.stderr
    b = B.read_bundle(work / "train3")
    assert any(isinstance(op, B.Copy) for c in b.cases for op in c.ops)
    res = run_runner(work / "train3", bundled_port, work / "train3.res", "--isa", "scalar,avx2",
                     "--threads", "1,3", "--results-version", "1")   # (whole buffers)
    g = gate("--port", str(bundled_port), "--layers", "train3", "--isa", "scalar,avx2",
             "--tiers", "exact,float64,pytorch,identity",
             "--threads", "1,3", "-q", "--json", str(work / "t3.gate.json"))
    r = cli("grade", str(work / "train3"), str(res), "-q", "--json", str(work / "t3.grade.json"))
    assert (g.returncode, r.returncode) == (0, 0), (g.stderr, r.stdout[-2000:], r.stderr)
    assert records(work / "t3.grade.json") == records(work / "t3.gate.json")


@pytest.mark.parametrize("mistake", ["-DTP_PERTURB=3e-6f", "-DTP_NAN", "-DTP_ERRCODE",
                                     "-DTP_UNWRITTEN", "-DTP_BACKWARD_ERR"])
def test_planted_mistake_reported_exactly_as_the_gate(work, lin, mistake):
    port = build_port(work, mistake)
    g, r, doc, out = gate_and_grade(work, lin, port, mistake.strip("-D").split("=")[0],
                                    "--available")
    assert r == g
    if mistake != "-DTP_BACKWARD_ERR":
        assert any(not x["passed"] for x in r)
        fail = next(line for line in out.stdout.splitlines() if line.startswith("FAIL "))
        assert "isa=" + doc["meta"]["machines"][0]["arch"] + ":scalar" in fail
        repro = out.stdout.splitlines()[out.stdout.splitlines().index(fail) + 1]
        assert repro.strip().startswith("__REPRO: crnn-conformance grade ")
        if "PERTURB" in mistake:   # it judges that case in that tier alone, with the same records
            again = cli(*shlex.split(repro.split("__REPRO: crnn-conformance ", 1)[1]),
                        "--json", str(work / "again.json"))
            assert again.returncode == 1, again.stderr
            first = next(x for x in r if not x["passed"])
            assert records(work / "again.json") == [
                x for x in r if (x["case"], x["tier"], x["threads"]) ==
                (first["case"], first["tier"], 1)]
    assert doc["layers"]["linear"]["status"] == ("not implemented" if "BACKWARD" in mistake
                                                 else "failed")


@pytest.mark.parametrize("mistake,words", [
    ("-DTP_SEGV", "crashed in crnn_linear_backward: killed by signal SIGSEGV"),
    ("-DTP_MODIFY_W=0", "const input"),
    ("-DTP_OOB_DB=1", "canary"),
])
def test_run_statuses_become_the_gates_failure_records(work, lin, mistake, words):
    """The runner's crash and check statuses: the same failure records (which checks fail,
    tensor '*', no result), the message the runner's."""
    port = build_port(work, mistake)
    g, r, _, _ = gate_and_grade(work, lin, port, mistake.strip("-D").split("=")[0],
                                "--available")
    key = lambda x: (x["layer"], x["fixture"], x["case"], x["tensor"], x["tier"], x["isa"],
                     x["threads"], x["passed"])
    assert [key(x) for x in r] == [key(x) for x in g]
    failed = [x for x in r if not x["passed"]]
    assert failed and all(x["tensor"] == "*" and words in x["note"] for x in failed)


def test_identity_across_machines_names_them(work, lin, bundled_port):
    """Two results files (here one made as 'aarch64' from a port whose dW differs) are
    compared bit for bit; the records name the machine of each run."""
    one = run_runner(lin, bundled_port, work / "m1.res", "--isa", "scalar", "--threads", "1,2")
    other = build_port(work, "-DTP_PERTURB=3e-6f")
    two = run_runner(lin, other, work / "m2.res", "--arch", "aarch64", "--isa", "scalar",
                     "--threads", "1,2")        # (an aarch64 file holds no x86 ISA's run)
    r = cli("grade", str(lin), str(one), str(two), "--layers", "linear", "--tiers",
            "identity", "--json", str(work / "m.json"))
    assert r.returncode == 1, r.stderr
    doc = json.loads((work / "m.json").read_text())
    bad = [x for x in doc["tensors"] if not x["passed"]]
    assert bad and {x["isa"] for x in bad} == {"aarch64:scalar"}
    assert {x["tensor"] for x in bad} == {"dW"}
    here = platform.machine()
    assert f"differs from {here}:scalar x 1 thread" in bad[0]["note"]
    assert [m["arch"] for m in doc["meta"]["machines"]] == [here, "aarch64"]
    assert f"--isa {here}:scalar,aarch64:scalar --threads 1" in bad[0]["repro"]
    valid(doc)
    # the same port on both "machines": identical
    three = run_runner(lin, bundled_port, work / "m3.res", "--isa", "scalar", "--arch",
                       "aarch64", "--threads", "1")
    r = cli("grade", str(lin), str(one), str(three), "--layers", "linear", "-q")
    assert r.returncode == 0, r.stdout[-2000:]


def valid(doc) -> None:
    """results.json's schema (reports/results.schema.json) holds for grade's documents."""
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.validate(doc, json.loads((ROOT / "reports" / "results.schema.json").read_text()))


def test_grade_has_no_contract_tier(work, subset):
    """The contract tier's invalid calls are not in a bundle: grade says so (exit 2)."""
    r = cli("grade", str(subset), str(work / "none.res"), "--tiers", "contract")
    assert r.returncode == 2 and "contract" in r.stderr and "Traceback" not in r.stderr


def test_layer_without_results(work, lin, bundled_port):
    """A layer the results hold no run of: not implemented under --layers available, else
    every case of it fails."""
    bc = B.read_bundle(lin)
    linear_cases = [c.index for c in bc.cases if c.layer == "linear"]
    res = run_runner(lin, bundled_port, work / "nolin.res", "--isa", "scalar", "--threads", "1")
    keep = B.read_results(res, bc)
    _write_results(work / "nolin2.res", bc, keep,
                   [r for r in keep.runs if r.case not in linear_cases])
    r = cli("grade", str(lin), str(work / "nolin2.res"), "--layers", "available", "-q",
            "--json", str(work / "nolin.json"))
    assert r.returncode == 0, r.stdout[-1500:]
    doc = json.loads((work / "nolin.json").read_text())
    assert doc["layers"]["linear"]["status"] == "not implemented"
    r = cli("grade", str(lin), str(work / "nolin2.res"), "--layers", "linear", "-q")
    assert r.returncode == 1
    assert "the results hold no run of linear/" in r.stdout


def _write_results(path, bundle, res, runs):
    p = json.dumps(res.platform).encode()
    out = [b"CRNNRS01", struct.pack("<I", 2), bundle.digest.encode(), struct.pack("<I", len(p)), p]
    for run in runs:
        out.append(b"RUN_" + struct.pack("<IiiI", run.case, abi.ISA_NAMES.index(run.isa),
                                          run.threads, len(run.calls)))
        for rc, flags, written in run.calls:
            out.append(struct.pack("<iII", rc, flags, len(written)))
            for b, offset, data in written:
                out.append(struct.pack("<IQQ", b, offset, len(data)) + data)
        m = run.msg.encode()
        out.append(struct.pack("<II", run.status, len(m)) + m + b"END_")
    Path(path).write_bytes(b"".join(out))


@pytest.fixture(scope="module")
def small(work, bundled_port):
    """A one-layer bundle and its results, for the damaged-file tests."""
    r = cli("export", "--out", str(work / "small"), "--layers", "linear", "--case", "T16_I37*")
    assert r.returncode == 0, r.stderr
    res = run_runner(work / "small", bundled_port, work / "small.res", "--isa", "scalar",
                     "--threads", "1,2")
    return work / "small", res


def _damaged(work, res, name, edit) -> Path:
    data = bytearray(res.read_bytes())
    edit(data)
    out = work / name
    out.write_bytes(bytes(data))
    return out


def _first_written(data: bytes) -> int:
    """The offset of the first run's first written record's nbytes field."""
    plat = struct.unpack_from("<I", data, 76)[0]
    at = 80 + plat + 4 + 16          # RUN_, case, isa, threads, n_calls
    return at + 12 + 4 + 8           # rc, flags, n_written; buffer index, byte offset


@pytest.mark.parametrize("name,edit,words", [
    ("magic", lambda d: d.__setitem__(slice(0, 8), b"CRNNXX01"), "bad magic"),
    ("digest", lambda d: d.__setitem__(slice(12, 16), b"0000"), "for another bundle"),
    ("upper", lambda d: d.__setitem__(slice(12, 76), bytes(d[12:76]).upper()),
     "writes the bundle's digest in upper case"),
    ("header", lambda d: d.__delitem__(slice(40, None)), "header cannot be read"),
    ("end", lambda d: d.__setitem__(slice(len(d) - 4, len(d)), b"XXXX"), "bad magic"),
    ("size", lambda d: struct.pack_into("<Q", d, _first_written(d), 1 << 40), "sizes that do not "
     "match the bundle's buffers"),
    ("isa", lambda d: struct.pack_into("<i", d, _first_written(d) - 36, 7),
     "has ISA 7; an ISA is 0 to 4 (0 scalar, 1 sse, 2 avx2, 3 avx512, 4 neon)"),
    ("threads", lambda d: struct.pack_into("<i", d, _first_written(d) - 32, 300),
     "has 300 threads; a thread count is 1 to 256"),
    ("buffer", lambda d: struct.pack_into("<I", d, _first_written(d) - 12, 99),
     "records buffer 99, but the case has buffers 0 to"),
    ("platform", lambda d: d.__setitem__(80, ord("!")), "its platform record is not JSON"),
    ("msglen", lambda d: struct.pack_into("<I", d, d.find(b"END_") - 4, 1 << 20),
     "claims more bytes than the file holds, yet the file ends with a complete record"),
])
def test_damaged_results_cannot_run(work, small, name, edit, words):
    bundle, res = small
    r = cli("grade", str(bundle), str(_damaged(work, res, f"bad-{name}.res", edit)))
    cannot_run(r, words)


def test_a_deep_platform_record_and_a_device_are_refused(work, small):
    """A platform record nested 100 000 deep was an internal error (RecursionError); a path
    such as /dev/zero was read without end (MemoryError, or the machine out of memory)."""
    bundle, res = small
    bc = B.read_bundle(bundle)
    ok = B.read_results(res, bc)
    deep = work / "deep.res"
    _write_results(deep, bc, ok, ok.runs)
    data = deep.read_bytes()
    n = struct.unpack_from("<I", data, 76)[0]
    nest = b"[" * 100_000 + b"]" * 100_000
    deep.write_bytes(data[:76] + struct.pack("<I", len(nest)) + nest + data[80 + n:])
    cannot_run(cli("grade", str(bundle), str(deep)), "its platform record is nested too deeply")
    cannot_run(cli("grade", str(bundle), "/dev/zero"), "/dev/zero is not a regular file")


def test_thread_and_isa_selection_keep_the_base_run(work, small):
    """--threads and --isa select the identity tier's runs, as in the gate: the base run (the
    first ISA at 1 thread) stays, and each tier is judged on it; a thread count or ISA that no
    run has is exit 2. Results without a 1-thread run take the first ISA's fewest threads as
    the base."""
    bundle, res = small                        # scalar x 1, 2
    r = cli("grade", str(bundle), str(res), "--threads", "2", "-q", "--json",
            str(work / "t2.json"))
    assert r.returncode == 0, r.stdout[-2000:]
    doc = json.loads((work / "t2.json").read_text())
    assert {x["threads"] for x in doc["tensors"] if x["tier"] == "exact"} == {1}
    ident = [x for x in doc["tensors"] if x["tier"] == "identity"]
    assert ident and {x["threads"] for x in ident} == {2}
    cannot_run(cli("grade", str(bundle), str(res), "--threads", "7"),
               "the results hold no run at 7 thread(s) (they have 1, 2)")
    cannot_run(cli("grade", str(bundle), str(res), "--isa", "scalar,avx512"),
               "the results hold no run of avx512 (they have ")
    bc = B.read_bundle(bundle)
    both = B.read_results(res, bc)
    _write_results(work / "only2.res", bc, both, [x for x in both.runs if x.threads == 2])
    r = cli("grade", str(bundle), str(work / "only2.res"), "-q", "--json",
            str(work / "only2.json"))
    assert r.returncode == 0, r.stdout[-2000:]
    doc = json.loads((work / "only2.json").read_text())
    assert doc["tensors"] and {x["threads"] for x in doc["tensors"]} == {2}


def test_a_run_missing_from_one_case_fails_it(work, small):
    """Every case is judged on every configuration the results hold: a case whose 2-thread
    run is missing fails that run with 'the results hold no run' (the summary names 2 threads,
    so a pass would claim a check never made). A file with no run at all cannot be graded.
    Before, both passed."""
    bundle, res = small
    bc = B.read_bundle(bundle)
    ok = B.read_results(res, bc)
    assert len(bc.cases) >= 2
    gone = next(x for x in ok.runs if x.threads == 2)
    _write_results(work / "gap.res", bc, ok, [x for x in ok.runs if x is not gone])
    r = cli("grade", str(bundle), str(work / "gap.res"), "-q")
    assert r.returncode == 1, r.stdout[-2000:] + r.stderr
    failed = [x for x in r.stdout.splitlines() if x.startswith("FAIL ")]
    assert len(failed) == 1 and f"the results hold no run of {bc.cases[gone.case].name} at " \
        "x86_64:scalar x 2 thread(s)" in failed[0], r.stdout
    _write_results(work / "none.res", bc, ok, [])
    cannot_run(cli("grade", str(bundle), str(res), str(work / "none.res")),
               "none.res hold no run at all")


def test_run_cut_short_is_a_crash(work, small):
    """A results file that ends inside a run (the runner was killed): that run is reported as
    a crash, the runs before it graded."""
    bundle, res = small
    cut = _damaged(work, res, "cut.res", lambda d: d.__delitem__(slice(d.rfind(b"RUN_") + 30,
                                                                        None)))
    r = cli("grade", str(bundle), str(cut), "-q", "--json", str(work / "cut.json"))
    assert r.returncode == 1, r.stderr
    doc = json.loads((work / "cut.json").read_text())
    bad = [x for x in doc["tensors"] if not x["passed"]]
    assert bad and all("the runner stopped during this run" in x["note"] for x in bad)
    assert len(bad) == 1 and bad[0]["threads"] == 2


def test_a_run_recorded_twice_complete_is_refused(work, small):
    """A later record of the same case, ISA and threads replaces an earlier one only when that
    one was cut short (what crnn-run --resume runs again): a complete failing run followed by
    a complete passing one of the same case, ISA and threads is refused, naming both records'
    byte offsets, not graded on the later one."""
    bundle, res = small
    bc = B.read_bundle(bundle)
    ok = B.read_results(res, bc)
    first = ok.runs[0]
    rc, flags, written = first.calls[0]
    bad = replace(first, calls=[(rc, flags, [(b, o, bytes(len(d))) for b, o, d in written])]
                  + first.calls[1:])                     # zeros: a failing run of it
    _write_results(work / "twice.res", bc, ok, [bad] + ok.runs)
    line = cannot_run(cli("grade", str(bundle), str(work / "twice.res")),
                      f"case {bc.cases[first.case].name} on scalar x 1 thread(s) is recorded "
                      "twice, complete, at bytes ")
    data = (work / "twice.res").read_bytes()
    at = [int(x) for x in re.search(r"at bytes (\d+) and (\d+)", line).groups()]
    assert at[0] < at[1] and all(data[a:a + 4] == b"RUN_" for a in at)
    assert struct.unpack_from("<I", data, at[1] + 4)[0] == first.case


@pytest.mark.parametrize("flags, exit_code, words", [
    (1, 1, "a canary zone next to a buffer was overwritten"),
    (2, 1, "a const input was modified"),
    (4, 2, "the floating-point environment changed in crnn_linear_forward"),
])
def test_a_flagged_call_is_the_event_whatever_the_status(work, small, flags, exit_code, words):
    """Flag bits 0 to 2 fail the run (bit 2: exit 2, as the gate stops on a changed floating-
    point environment) also when the runner wrote status 0 and no message. Before, grade
    read them only with status 5 on the last call: a flagged run with status 0 passed."""
    bundle, res = small
    bc = B.read_bundle(bundle)
    ok = B.read_results(res, bc)
    first = ok.runs[0]
    rc, _, written = first.calls[0]
    flagged = replace(first, calls=[(rc, flags, written)] + first.calls[1:])
    out = work / f"flag{flags}.res"
    _write_results(out, bc, ok, [flagged] + ok.runs[1:])
    r = cli("grade", str(bundle), str(out), "-q")
    assert r.returncode == exit_code and words in r.stdout + r.stderr, r.stdout + r.stderr
    assert "Traceback" not in r.stderr


def test_undefined_flags_and_overlapping_records_are_refused(work, small):
    """Flag bits above 3 and two records of the same bytes in one call (two answers for them:
    which one the port wrote?) make a file grade cannot read. Before, both were accepted, the
    later record of the bytes silently winning."""
    bundle, res = small
    bc = B.read_bundle(bundle)
    ok = B.read_results(res, bc)
    first = ok.runs[0]
    rc, flags, written = first.calls[0]
    high = replace(first, calls=[(rc, 16, written)] + first.calls[1:])
    _write_results(work / "flag16.res", bc, ok, [high] + ok.runs[1:])
    cannot_run(cli("grade", str(bundle), str(work / "flag16.res")),
               "has flags 0x10; only bits 0 to 3 are defined")
    b, o, d = written[0]
    twice = replace(first, calls=[(rc, flags, [(b, o, bytes(len(d))), *written])]
                    + first.calls[1:])
    _write_results(work / "overlap.res", bc, ok, [twice] + ok.runs[1:])
    cannot_run(cli("grade", str(bundle), str(work / "overlap.res")),
               f"of buffer {b}: a call's records of a buffer do not overlap")


def test_a_run_cut_short_is_replaced_by_a_later_record():
    """The one record a later one may replace: an earlier run cut short (no END_)."""
    c = B.BundleCase(0, "linear", "linear", "c", [], [])
    bundle = B.Bundle(Path("b"), {}, [c], "0" * 64)
    cut = B.Run(0, "scalar", 1, [], B.CRASH, "", complete=False, at=100)
    B._check_replace(Path("r.res"), bundle, cut, B.Run(0, "scalar", 1, [], B.OK, "", at=200))
    with pytest.raises(B.BundleError, match="recorded twice, complete, at bytes 100 and 200"):
        B._check_replace(Path("r.res"), bundle, replace(cut, complete=True),
                         B.Run(0, "scalar", 1, [], B.OK, "", at=200))


@pytest.mark.parametrize("arch,isa,refused", [
    ("x86_64", "neon", True), ("aarch64", "avx2", True), ("arm64", "sse", True),
    ("AArch64", "avx512", True), ("i686", "neon", True), ("x86-64", "neon", True),
    ("x86_64", "avx512", False), ("aarch64", "neon", False), ("armv7l", "neon", False),
    ("riscv64", "neon", False), ("riscv64", "avx2", False), (None, "neon", False),
])
def test_a_run_on_an_isa_its_arch_lacks_is_refused(work, small, arch, isa, refused):
    """A results file whose platform names a known architecture holds runs of that
    architecture's ISA paths only (x86_64 has no neon, aarch64 / arm64 no sse, avx2, avx512):
    relabelled records are refused. An arch grade does not know may name any ISA."""
    bundle, res = small
    bc = B.read_bundle(bundle)
    ok = B.read_results(res, bc)
    ok.platform = {k: v for k, v in ok.platform.items() if k != "arch"}
    if arch is not None:
        ok.platform["arch"] = arch
    path = work / f"arch-{arch}-{isa}.res"
    _write_results(path, bc, ok, ok.runs + [replace(x, isa=isa) for x in ok.runs])
    if not refused:
        assert len(B.read_results(path, bc).runs) == 2 * len(ok.runs)
        return
    with pytest.raises(B.BundleError) as e:
        B.read_results(path, bc)
    assert f"its platform's arch is {arch}, but the run at byte " in str(e.value)
    assert f"is on ISA {isa}, which {arch} does not have" in str(e.value)
    if (arch, isa) == ("x86_64", "neon"):                # the command: exit 2, one line
        cannot_run(cli("grade", str(bundle), str(path)), "ISA neon, which x86_64 does not have")


@pytest.mark.parametrize("arch", [5, ["x86_64"], "aarch64 ", "", "x" * 33, "arm/v8"])
def test_an_arch_that_is_no_machine_name_is_refused(work, small, arch):
    """arch is a string of 1-32 letters, digits or _.+-. Before, 5 was taken (the machine
    shown as 5) and "aarch64 " (a trailing space) named no architecture, so its runs could
    claim any ISA."""
    bundle, res = small
    bc = B.read_bundle(bundle)
    ok = B.read_results(res, bc)
    ok.platform = {**ok.platform, "arch": arch}
    path = work / "arch-bad.res"
    _write_results(path, bc, ok, ok.runs)
    with pytest.raises(B.BundleError, match="a machine name is 1-32 letters, digits or"):
        B.read_results(path, bc)


def test_another_bundles_results_and_edited_bundle(work, small, lin):
    bundle, res = small
    cannot_run(cli("grade", str(lin), str(res)), "for another bundle")
    copy = work / "edited"
    shutil.copytree(bundle, copy, dirs_exist_ok=True)
    data = bytearray((copy / "cases.bin").read_bytes())
    data[-1] ^= 1
    (copy / "cases.bin").write_bytes(bytes(data))
    cannot_run(cli("grade", str(copy), str(res)), "does not match bundle.json's digest")
    cannot_run(cli("grade", str(work / "nowhere"), str(res)), "not a case bundle")


def test_export_reports_a_refused_case(monkeypatch):
    """A layer module that passes a temporary (outside the run's buffers) cannot be bundled:
    the case is listed with the reason, not dropped."""
    from types import SimpleNamespace

    from crnn_conformance.generators.h5io import Case
    from crnn_conformance.harness import reference
    from crnn_conformance.harness.layers import _ffi, linear

    def run(lib, case):
        x = np.array(case.inputs["x"], np.float32)          # a plain copy: not in the arena
        W, b = _ffi.f32(case.inputs["W"]), _ffi.f32(case.inputs["b"])
        y = _ffi.out((x.shape[0], W.shape[0]))
        _ffi.call(lib, "crnn_linear_forward", _ffi.ptr(x), _ffi.ptr(W), _ffi.ptr(b),
                  x.shape[0], x.shape[1], W.shape[0], _ffi.ptr(y))
        return {"y": y}

    module = SimpleNamespace(LAYER="linear", run=run)
    rng = np.random.default_rng(1)
    case = Case("c", {}, {"x": rng.random((2, 3), np.float32), "W": rng.random((4, 3), np.float32),
                          "b": rng.random(4, np.float32)})
    cases, refused = B.export_cases([(module, Path("linear.h5"), case),
                                     (linear, Path("linear.h5"), Case("d", {}, {
                                         **case.inputs, "dY": rng.random((2, 4), np.float32)}))],
                                    reference.library())
    assert [c.case for c in cases] == ["d"]
    assert refused == [("linear", "linear", "c",
                        "crnn_linear_forward got a pointer outside the run's buffers")]


def test_writes_table_matches_the_abi():
    """docs/case-bundle.md's table of the arguments each call writes (which the runners read)
    is abi.ARGS; tests/bundle_runner.py's copy of it too."""
    text = (ROOT / "docs" / "case-bundle.md").read_text()
    table = {m.group(1): tuple(int(v) for v in m.group(2).split(","))
             for m in re.finditer(r"^\| `(crnn_\w+)` \| ([\d, ]+) \|", text, re.M)}
    want = {name: tuple(i for i, a in enumerate(args.split()) if a.startswith("*"))
            for name, args in abi.ARGS.items() if name in abi.BUFFERS}
    assert table == want
    assert bundle_runner.WRITES == want


def test_worked_example_of_the_docs(tmp_path, bundled_port):
    """The port author's workflow of docs/case-bundle.md, as written (crnn-run: the C runner
    when it is on PATH, else tests/bundle_runner.py, which takes the same arguments)."""
    text = (ROOT / "docs" / "case-bundle.md").read_text()
    block = re.search(r"<!-- worked example -->\n```sh\n(.*?)```", text, re.S).group(1)
    runner = shutil.which("crnn-run") or f"{sys.executable} {HERE / 'bundle_runner.py'}"
    script = block.replace("crnn-run ", runner + " ").replace(
        "crnn-conformance ", f"{sys.executable} -m crnn_conformance.harness.cli ")
    script = script.replace("path/to/libport.so", str(bundled_port))
    r = subprocess.run(["bash", "-ec", script], cwd=tmp_path, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, (r.stdout[-2000:], r.stderr[-2000:])
    assert "PASS:" in r.stdout
    assert (tmp_path / "report" / "index.html").exists()


def test_export_refuses_a_call_the_abi_sizes_beyond_its_buffer():
    """abi.BUFFERS sizes every pointer argument: one whose extent runs past its buffer (here
    crnn_dot16 told n = 4 on the last 2 elements) would make a correct port's reads or writes
    land outside it on the runner's machine, so the case is refused."""
    from types import SimpleNamespace

    from crnn_conformance.generators.h5io import Case
    from crnn_conformance.harness import reference
    from crnn_conformance.harness.layers import _ffi

    def run(lib, case):
        a = _ffi.f32(case.inputs["a"])
        one = _ffi.out(1)
        _ffi.call(lib, "crnn_dot16", _ffi.ptr(a[2:]), _ffi.ptr(a[2:]), 4, _ffi.ptr(one))
        return {"dot": one}

    case = Case("short", {}, {"a": np.ones(4, np.float32)})
    cases, refused = B.export_cases([(SimpleNamespace(LAYER="dot16", run=run),
                                      Path("dot16.h5"), case)], reference.library())
    assert cases == []
    assert refused == [("dot16", "dot16", "short", "crnn_dot16: argument a is 2 x float32 from "
                        "its pointer, the ABI says 4 x float32")]
