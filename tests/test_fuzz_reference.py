"""The fuzzer's golden bits from the reference port (harness/reference.py), held to the NumPy
spec: the first case of a layer and a share of the others are checked against both, a case
the port fails is always judged by the NumPy spec, and a reference that disagrees with the
spec ends the run as a harness error with the case written (docs/fuzz.md)."""
from __future__ import annotations

import time

import numpy as np
import pytest
from hypothesis import strategies as st

from crnn_conformance.ctypes_kernels.build import build
from crnn_conformance.generators.h5io import read_fixture
from crnn_conformance.harness import reference
from crnn_conformance.harness.fuzz import engine, strategies

pytestmark = pytest.mark.skipif(not reference.available(), reason="no C compiler")


def _linear_cases(n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    u = lambda *s: rng.uniform(-1, 1, s).astype(np.float32)   # noqa: E731
    return [({"T": 5, "I": 7 + i, "O": 3}, {"x": u(5, 7 + i), "W": u(3, 7 + i), "b": u(3),
                                             "dY": u(5, 3)}) for i in range(n)]


def _fixed(monkeypatch, drawn: list):
    class Fixed:
        @staticmethod
        def cases():
            return st.sampled_from(drawn)
    monkeypatch.setattr(strategies, "module", lambda layer: Fixed)


def _fuzzer(tmp_path, port=None, **kw):
    opts = engine.FuzzOptions(port=str(port) if port else None, out=tmp_path, database=False,
                              isas=["scalar"], threads=(1, 2), **kw)
    return engine.Fuzzer(opts, ["linear"])


def test_passing_cases_use_the_reference_and_a_share_is_audited(tmp_path, monkeypatch):
    _fixed(monkeypatch, _linear_cases(12))
    calls = []
    real = engine.exact.expected
    monkeypatch.setattr(engine.exact, "expected", lambda *a: calls.append(a) or real(*a))
    fz = _fuzzer(tmp_path)
    try:
        assert fz.reference is reference
        assert fz.chunk("linear", 12, 0, time.monotonic() + 60) is None
        stats = fz.stats["linear"]
        assert stats.cases >= 1 and stats.audited == len(calls) >= 1   # the first, at least
        # the share: by the case's digest, deterministic, about 1 in AUDIT_EVERY
        # and each case once (Hypothesis tries its simplest case again in every run)
        names = [engine.case_name("linear", {"i": i}, {}) for i in range(4000)]
        due = [n for n in names if fz._audit_due("linear", n)]
        assert not [n for n in names if fz._audit_due("linear", n)]
        fz.audited.clear()
        assert due == [n for n in names if fz._audit_due("linear", n)]
        assert abs(len(due) / len(names) - 1 / engine.AUDIT_EVERY["linear"]) < 0.03
    finally:
        fz.close()


def test_a_failing_case_is_judged_by_the_numpy_spec(tmp_path, monkeypatch):
    _fixed(monkeypatch, _linear_cases(3))
    port = build(mutant="bias_first")        # y = b + dot: a rounding away from the spec
    fz = _fuzzer(tmp_path, port)
    try:
        f = fz.chunk("linear", 3, 0, time.monotonic() + 60)
    finally:
        fz.close()
    assert f is not None and fz.mismatch is None
    assert "exact" in f.case.expected and {r.tier for r in f.records} == {"exact"}


@pytest.mark.parametrize("how", ["bit", "error"])
def test_a_reference_that_disagrees_with_the_spec_ends_the_run(tmp_path, monkeypatch, how):
    _fixed(monkeypatch, _linear_cases(4))
    real = reference.record

    def drifted(layer, params, inputs):
        rec = real(layer, params, inputs)
        if how == "error":
            raise reference.abi.PortCallError("crnn_linear_forward returned -1", -1)
        rec.outputs["dW"].view(np.uint32)[0, 0] ^= 1          # one bit of one tensor
        return rec
    monkeypatch.setattr(reference, "record", drifted)
    fz = _fuzzer(tmp_path)
    try:
        with pytest.raises(engine.ReferenceMismatch) as e:
            fz.run(time.monotonic() + 30)
    finally:
        fz.close()
    msg = str(e.value)
    assert "disagrees with the executable spec on linear case fuzz_" in msg
    assert ("dW" in msg) if how == "bit" else ("PortCallError" in msg)
    written = list(tmp_path.glob("reference-mismatch-linear-*.h5"))
    assert len(written) == 1 and read_fixture(written[0]).cases[0].expected["exact"]
    assert fz.stats["linear"].finding is None        # not reported as the port's finding


@pytest.mark.parametrize("flag, says", [((), "golden bits from the reference port, "),
                                        (("--numpy-spec",), "golden bits from the NumPy spec)")])
def test_the_verdict_says_where_the_golden_bits_came_from(tmp_path, flag, says):
    import subprocess
    import sys
    r = subprocess.run([sys.executable, "-m", "crnn_conformance.harness.cli", "fuzz", "--seconds",
                        "3", "--layers", "clip", "--seed", "2", "--no-database", "--out",
                        str(tmp_path), *flag], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert says in r.stdout.splitlines()[-1], r.stdout


def _drawn(layer: str, n: int, seed: int = 4) -> list:
    from hypothesis import HealthCheck, Phase, given, settings
    from crnn_conformance.harness.fuzz.strategies import module
    got = []

    @settings(max_examples=n, phases=(Phase.generate,), database=None,
              suppress_health_check=list(HealthCheck))
    @given(module(layer).cases())
    def draw(c):
        got.append(c)
    draw._hypothesis_internal_use_seed = seed
    draw()
    return got


@pytest.mark.parametrize("layer", ["dot16", "linear", "conv", "lstm", "ctc", "step", "clip",
                                   "adamw", "train3"])
def test_the_bundled_ports_runs_made_from_the_reference_tape_pass(tmp_path, layer):
    """Every run of the port is made from the tape of the case's reference run
    (worker._serve_symbolic), and the bundled port's written buffers equal the reference's."""
    fz = engine.Fuzzer(engine.FuzzOptions(out=tmp_path, database=False), [layer])
    seen = []
    real = fz._agrees_blob
    fz._agrees_blob = lambda blob: seen.append(real(blob)) or seen[-1]
    try:
        cases = _drawn(layer, 12)
        for params, inputs in cases:
            assert fz.check(layer, params, inputs)[1] == []
    finally:
        fz.close()
    assert seen == [True] * len(cases)


@pytest.mark.parametrize("late", [(), ("-DTP_LATE=3",)], ids=["first run", "late run"])
@pytest.mark.parametrize("mistake", ["-DTP_OOB_Y=1", "-DTP_MODIFY_B", "-DTP_NAN",
                                     "-DTP_UNWRITTEN", "-DTP_ERRCODE", "-DTP_PRINT_BYTES=100",
                                     "-DTP_FTZ_ON_TRIGGER", "-DTP_SEGV", "-DTP_HANG"])
def test_a_mistake_in_a_run_made_from_the_tape_is_reported_as_the_gate_reports_it(tmp_path,
                                                                                    mistake, late):
    """A run made from the reference's tape (the first, or a later one at 3 threads) meets
    the mistake: the fuzzer then runs the case as the gate does, and its failing records are
    those of a fuzzer that takes the NumPy spec's bits without any tape (--numpy-spec)."""
    from testports import build_port
    port = build_port(tmp_path, mistake, *late)
    rng = np.random.default_rng(0)
    u = lambda *s: rng.uniform(-1, 1, s).astype(np.float32)   # noqa: E731
    params, inputs = {"T": 16, "I": 37, "O": 37}, {"x": u(16, 37), "W": u(37, 37), "b": u(37),
                                                    "dY": u(16, 37)}
    found = []
    for numpy_spec in (False, True):
        opts = engine.FuzzOptions(port=str(port), out=tmp_path, database=False,
                                  isas=["scalar"], threads=(1, 3), numpy_spec=numpy_spec,
                                  timeout=2)
        fz = engine.Fuzzer(opts, ["linear"])
        try:
            _, fails = fz.check("linear", params, inputs)
            found.append([(r.tensor, r.tier, r.isa, r.threads, r.note) for r in fails])
        except reference.abi.PortError as e:     # FTZ left set: the gate's exit 2
            found.append(str(e))
        finally:
            fz.close()
    assert found[0] == found[1]
    if mistake != "-DTP_PRINT_BYTES=100":
        assert found[0]
