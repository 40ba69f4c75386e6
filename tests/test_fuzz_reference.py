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
    real = reference.expected

    def drifted(layer, params, inputs):
        out = real(layer, params, inputs)
        if how == "error":
            raise reference.abi.PortCallError("crnn_linear_forward returned -1", -1)
        out["dW"] = out["dW"].copy()
        out["dW"].view(np.uint32)[0, 0] ^= 1          # one bit of one tensor
        return out
    monkeypatch.setattr(reference, "expected", drifted)
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
