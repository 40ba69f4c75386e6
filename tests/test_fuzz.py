"""`crnn-conformance fuzz` (docs/fuzz.md): it passes the bundled port, finds a mutant, shrinks
the case, writes it as a fixture the gate runs, replays it from its database first, is
deterministic for a seed, reports a crash as a finding, and refuses bad options with exit 2.
The slow tests are the evidence of docs/mutants.md: `fuzz --seconds 60` alone kills every edge
mutant, and a longer fuzz of the bundled port finds nothing."""
from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import strategies as st

from crnn_conformance.ctypes_kernels.build import build
from crnn_conformance.generators.h5io import read_fixture
from crnn_conformance.harness import fuzz as F
from crnn_conformance.harness import mutants as M
from crnn_conformance.harness.fuzz import engine, strategies

sys.path.insert(0, str(Path(__file__).resolve().parent / "ports"))
from testports import build_port  # noqa: E402

EDGE_MUTANTS = [m.name for m in M.CATALOGUE[M.CATALOGUE.index(M.BY_NAME["ctc_libm"]):]]


def cli(*args, **kw):
    return subprocess.run([sys.executable, "-m", "crnn_conformance.harness.cli", *args],
                          capture_output=True, text=True, **kw)


def test_bundled_port_passes_a_short_fuzz(tmp_path):
    r = cli("fuzz", "--seconds", "4", "--layers", "dot16,clip", "--seed", "3", "--no-database",
            "--out", str(tmp_path / "out"))
    assert r.returncode == 0, r.stdout + r.stderr
    lines = {l.split()[1]: l for l in r.stdout.splitlines() if l.startswith("fuzz ")}
    assert set(lines) == {"dot16", "clip"}
    assert all(int(l.split()[2]) > 0 and "no failure" in l for l in lines.values())
    assert r.stdout.splitlines()[-1].startswith("PASS: no failure in ")
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").glob("*.h5"))


def test_a_mutant_is_found_shrunk_and_written_as_a_fixture(tmp_path):
    port = build(mutant="pool_maxps")
    out = tmp_path / "found"
    r = cli("fuzz", "--port", str(port), "--layers", "conv", "--seconds", "30", "--seed", "1",
            "--no-database", "--out", str(out))
    assert r.returncode == 1, r.stdout + r.stderr
    assert re.search(r"^FOUND conv after [\d.]+ s", r.stdout, re.M), r.stdout
    assert re.search(r"^FAIL conv/fuzz_\w+/\w+ tier=exact isa=\w+ threads=\d+ ", r.stdout, re.M)
    assert "__REPRO: crnn-conformance gate --port" in r.stdout and f"--fixtures {out}" in r.stdout
    files = list(out.glob("fuzz-conv-*.h5"))
    assert len(files) == 1
    fx = read_fixture(files[0])                         # checksummed, the fixtures format
    assert fx.attrs["layer"] == "conv" and len(fx.cases) == 1
    c = fx.cases[0]
    assert c.inputs["dPooled"].size <= 4 and c.params["Out"] == 1    # shrunk to a window or so
    assert cli("gate", "--port", str(port), "--fixtures", str(out), "--layers", "conv",
               "-q").returncode == 1
    assert cli("gate", "--fixtures", str(out), "--layers", "conv", "-q").returncode == 0


def test_cached_strategies_tell_signed_zeros_apart():
    """The strategy objects are made once per arguments (harness/fuzz/values.py), keyed so
    that options or specials differing only in the sign of a zero get their own."""
    from crnn_conformance.harness.fuzz import values
    a, b = values.sampled((0.0, -0.0)), values.sampled((-0.0, 0.0))
    assert a is not b and values.sampled((0.0, -0.0)) is a
    assert (values.array(2, specials=(np.float32(0.0),))
            is not values.array(2, specials=(np.float32(-0.0),)))


def names_of_a_chunk(opts, layer, seed):
    fz = engine.Fuzzer(opts, [layer])
    seen = []
    real = fz.check
    fz.check = lambda la, p, i: (seen.append(engine.case_name(la, p, i)), real(la, p, i))[1]
    try:
        assert fz.chunk(layer, 15, seed, time.monotonic() + 60) is None
    finally:
        fz.close()
    return seen


@pytest.mark.parametrize("name", ["thread_split", "avx2_tail_drop", "avx2_tail_overread",
                                  "vec_tail_zero_pad"])
def test_a_port_whose_bits_depend_on_the_path_or_the_threads_is_a_finding(tmp_path, name, isas):
    """The identity-only mutants (their base run passes): the fuzzer's per-case identity check,
    with the worker's "same as the first run" answers and the all-golden short cut, still sees a
    path or a thread count that differs (thread_split needs a dot of 256 terms or more)."""
    if name.startswith("avx2") and "avx2" not in isas:
        pytest.skip("no AVX2 on this CPU")
    r = cli("fuzz", "--port", str(build(mutant=name)), "--layers", "dot16", "--seconds", "30",
            "--seed", "16", "--no-database", "--first", "--out", str(tmp_path))
    assert r.returncode == 1, r.stdout + r.stderr
    assert re.search(r"^FAIL dot16/fuzz_\w+/dot tier=identity isa=\w+ threads=\d+ .*"
                     r"differs from \w+ x 1 thread", r.stdout, re.M), r.stdout


def test_a_failing_meanwhile_does_not_leave_the_batch_answer_unread():
    """prefetch reads the worker's answer even when the work done meanwhile (the spec) raises,
    so the next request gets its own answer, not the stale one."""
    from crnn_conformance.generators.h5io import Case
    from crnn_conformance.harness import runner
    from crnn_conformance.harness.executor import Executor
    a = np.arange(1, 21, dtype=np.float32)
    mk = lambda name, b: Case(name, {"count": 1}, {"a": a, "b": b,           # noqa: E731
                                                    "lengths": np.array([20], np.int64)})
    ex = Executor(runner._bundled(), ["dot16"], 30)
    try:
        def boom():
            raise ValueError("spec failed")
        with pytest.raises(ValueError):
            ex.prefetch("dot16", "<t>", "one", [("scalar", 1)],
                        case=mk("one", np.ones(20, np.float32)), meanwhile=boom)
        ex.prefetch("dot16", "<t>", "two", [("scalar", 1), ("scalar", 2)],
                    case=mk("two", np.full(20, 2, np.float32)))
        assert [k for k, _ in ex.prefetched()] == ["ok", "ok"]
        assert ex.run("dot16", "<t>", "two", "scalar", 1)["dot"].tolist() == [420.0]
    finally:
        ex.close()


def test_a_seed_makes_the_cases_deterministic(tmp_path):
    opts = engine.FuzzOptions(out=tmp_path, database=False, threads=(1,))
    a = names_of_a_chunk(opts, "linear", 5)
    assert a == names_of_a_chunk(opts, "linear", 5) and len(a) == 15
    assert a != names_of_a_chunk(opts, "linear", 6)


def test_found_failures_replay_first(tmp_path, monkeypatch):
    monkeypatch.setattr(engine, "database_dir", lambda: tmp_path / "db")
    opts = engine.FuzzOptions(port=str(build(mutant="clip_ge")), out=tmp_path, threads=(1,))
    fz = engine.Fuzzer(opts, ["clip"])
    try:
        first = next(f for f in (fz.chunk("clip", 150, s, time.monotonic() + 60) for s in range(5))
                     if f is not None)
        assert first.cases_before >= 1
        before = fz.stats["clip"].cases
        again = fz.chunk("clip", 150, 12345, time.monotonic() + 60)
    finally:
        fz.close()
    assert again is not None and again.cases_before == before + 1   # the saved one, run first
    assert again.case.name == first.case.name


def test_a_crash_is_a_finding(tmp_path, monkeypatch):
    """A port that segfaults on one shape: the worker dies, the case fails as a crash, the
    fuzzer goes on (shrinking reruns it) and reports it like any finding."""
    port = build_port(tmp_path, "-DTP_SEGV")
    rng = np.random.default_rng(0)
    u = lambda *s: rng.uniform(-1, 1, s).astype(np.float32)
    drawn = ({"T": 16, "I": 37, "O": 37},
             {"x": u(16, 37), "W": u(37, 37), "b": u(37), "dY": u(16, 37)})

    class Fixed:
        @staticmethod
        def cases():
            return st.just(drawn)
    monkeypatch.setattr(strategies, "module", lambda layer: Fixed)
    opts = engine.FuzzOptions(port=str(port), out=tmp_path, database=False, isas=["scalar"],
                              threads=(1,), timeout=20)
    fz = engine.Fuzzer(opts, ["linear"])
    try:
        f = fz.chunk("linear", 3, 0, time.monotonic() + 60)
    finally:
        fz.close()
    assert f is not None
    assert any("crashed" in r.note and "SIGSEGV" in r.note for r in f.records), \
        [r.note for r in f.records]


def test_bad_options_exit_2_without_a_traceback(tmp_path):
    for args, msg in ((["--layers", "nosuch"], "unknown layer nosuch"),
                      (["--port", str(tmp_path / "missing.so")], "port library not found"),
                      (["--seconds", "0"], "--seconds > 0"),
                      (["--threads", "0"], "between 1 and 256"),
                      (["--isa", "mmx"], "unknown ISA mmx")):
        r = cli("fuzz", *args, "--out", str(tmp_path))
        assert r.returncode == 2, (args, r.stdout, r.stderr)
        assert msg in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_jobs_share_the_layers():
    assert F.split(["a", "b", "c", "d", "e"], 2) == [["a", "c", "e"], ["b", "d"]]
    assert F.split(["a"], 3) == [["a"], ["a"], ["a"]]
    assert set(engine.CHUNK) == set(strategies.available())


@pytest.mark.slow
@pytest.mark.parametrize("name", EDGE_MUTANTS)
def test_fuzz_alone_kills_each_edge_mutant_within_60_s(tmp_path, name):
    r = cli("fuzz", "--port", str(build(mutant=name)), "--seconds", "60", "--jobs", "2",
            "--seed", "16", "--no-database", "--first", "--out", str(tmp_path))
    assert r.returncode == 1, r.stdout + r.stderr
    found = [float(m) for m in re.findall(r"FOUND after ([\d.]+) s", r.stdout)]
    assert found and min(found) < 60, r.stdout


@pytest.mark.slow
def test_bundled_port_passes_a_longer_fuzz(tmp_path):
    r = cli("fuzz", "--seconds", "300", "--jobs", "2", "--seed", "1616", "--no-database",
            "--out", str(tmp_path))
    assert r.returncode == 0, r.stdout + r.stderr
