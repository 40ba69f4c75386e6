"""Resolution: the smallest uniform relative error a tolerance check would detect.

Its definition, tested directly: a perturbation of every element by at most eps*|ref| (any
signs) passes when eps is below the resolution; the one that pushes each element away from
the reference by eps*|ref| fails as soon as eps is above it. Then: bit tiers have none, a
failing check's is 0, zero references and masked elements do not count, and every
tolerance-tier record of the gate carries one.
"""
from __future__ import annotations

import numpy as np
import pytest
from crnn_conformance.generators.h5io import read_fixture
from crnn_conformance.harness.compare import compare
from crnn_conformance.harness.runner import FIXTURES_DIR
from crnn_conformance.harness.case_checks import tier_tolerance


def _case(tensor="dW"):
    fx = read_fixture(FIXTURES_DIR / "linear.h5")
    case = fx.cases[0]
    ours = np.asarray(case.expected["exact"][tensor], np.float64)   # the spec's bits
    ref = np.asarray(case.expected["float64"][tensor], np.float64)
    tol = tier_tolerance("linear", case, "float64", tensor, ref.shape)   # Atol per element
    return ours, ref, tol


@pytest.mark.parametrize("tensor", ["y", "dW", "db"])
def test_resolution_is_the_detection_threshold(tensor):
    ours, ref, tol = _case(tensor)
    c = compare(ours, ref, "float64", tol.atol, tol.rtol)
    assert c.passed and c.resolution is not None and c.resolution > 0
    away = np.sign(ours - ref)
    away[away == 0] = 1.0
    rng = np.random.default_rng(0)
    for f, passes in ((0.99, True), (1.01, False)):
        eps = f * c.resolution
        worst = ours + away * eps * np.abs(ref)                 # each element pushed away
        assert compare(worst, ref, "float64", tol.atol, tol.rtol).passed is passes, f
    for _ in range(5):                                          # any signs below it pass
        signs = rng.choice([-1.0, 1.0], size=ours.shape)
        noisy = ours + signs * 0.99 * c.resolution * np.abs(ref)
        assert compare(noisy, ref, "float64", tol.atol, tol.rtol).passed


def test_bit_tiers_have_none_failing_checks_zero():
    ours, ref, tol = _case()
    assert compare(ours.astype(np.float32), ref.astype(np.float32), "exact").resolution is None
    assert compare(ours.astype(np.float32), ref.astype(np.float32), "identity").resolution is None
    bad = ours.copy()
    atol = np.broadcast_to(tol.atol, ref.shape)
    bad.flat[3] += 10 * (atol.flat[3] + tol.rtol * abs(ref.flat[3]))
    c = compare(bad, ref, "float64", tol.atol, tol.rtol)
    assert not c.passed and c.resolution == 0.0
    bad.flat[5] = np.nan
    assert compare(bad, ref, "float64", tol.atol, tol.rtol).resolution == 0.0


def test_zero_references_and_masked_elements_do_not_count():
    ref = np.array([0.0, 1.0, 2.0, np.inf])
    ours = np.array([1e-7, 1.0, 2.0 + 1e-6, np.inf])
    c = compare(ours, ref, "float64", 1e-6, 1e-5)
    # element 1: (1e-6 + 1e-5) / 1 = 1.1e-5; element 2: (1e-6 + 2e-5 - 1e-6) / 2 = 1e-5
    assert c.resolution == pytest.approx(1e-5, rel=1e-6)
    mask = np.array([True, True, False, True])
    assert compare(ours, ref, "float64", 1e-6, 1e-5, mask=mask).resolution == \
        pytest.approx(1.1e-5, rel=1e-6)
    assert compare(np.zeros(3), np.zeros(3), "float64", 1e-6, 1e-5).resolution is None
    # pytorch: allowance 2*Atol + 2*Floor + 2*Rtol*|pt|
    c = compare(np.array([1.0]), np.array([1.0]), "pytorch", 1e-6, 1e-5, floor=1e-7)
    assert c.resolution == pytest.approx(2e-6 + 2e-7 + 2e-5, rel=1e-9)


def test_every_tolerance_record_of_the_gate_carries_one():
    """None only where no element has a finite, nonzero reference (CTC's cases without an
    alignment: loss 0, gradient 0) and for the bit tiers."""
    from crnn_conformance.harness.runner import GateOptions, run_gate
    res = run_gate(GateOptions(layers=["linear", "ctc"], threads=(1,)))
    tol = [r for r in res.records if r.tier in ("float64", "pytorch")]
    assert tol and all(r.resolution is None or r.resolution > 0 for r in tol)
    cases = {c.name: c for c in read_fixture(FIXTURES_DIR / "ctc.h5").cases}
    none = [r for r in tol if r.resolution is None]
    assert none and {r.case for r in none} <= set(cases)
    for r in none:
        ref = np.asarray(cases[r.case].expected[r.tier][r.tensor], np.float64)
        assert not (np.isfinite(ref) & (ref != 0)).any(), (r.case, r.tensor)
    assert all(r.resolution is None for r in res.records if r.tier in ("exact", "identity"))
