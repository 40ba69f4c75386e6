"""harness/compare.py against its definition, element by element: the bit tiers compare bytes
(any layout: views, empty tensors, the same array), the tolerance tiers count an element over
its allowance when |ours - ref| > Atol + Rtol*|ref| (pytorch: 2*Atol + 2*Floor + 2*Rtol*|ref|),
equal values, equal infinities and NaN against NaN being 0 apart and NaN or Inf against a
finite reference infinitely far; the resolution is the least (allowance - |diff|) / |ref| over
finite nonzero references (a NaN one counting as -inf), at least 0."""
from __future__ import annotations

import math

import numpy as np
import pytest
from crnn_conformance.harness.compare import compare


def test_bit_tiers_compare_bytes_in_any_layout():
    a = np.arange(24, dtype=np.float32).reshape(4, 6)
    for ours, ref in ((a, a), (a[:, ::2], a.copy()[:, ::2]), (a.T, np.ascontiguousarray(a.T)),
                      (np.zeros((0, 3), np.float32), np.zeros((0, 3), np.float32))):
        c = compare(ours, ref, "identity")
        assert c.passed and c.mismatches == 0 and c.elements == ours.size
    b = a.copy()
    b[1, 2] = -0.0 if a[1, 2] == 0 else np.nextafter(a[1, 2], np.float32(np.inf))
    c = compare(a[:, ::2], b[:, ::2], "exact")
    assert not c.passed and c.mismatches == 1 and c.max_ulp == 1
    c = compare(np.float32([0.0]), np.float32([-0.0]), "exact")
    assert not c.passed and c.mismatches == 1


def _by_definition(ours, ref, tier, atol, rtol, floor):
    """(mismatches, usage, max |diff|, resolution) element by element."""
    over, usage, mad, res = 0, 0.0, 0.0, math.inf
    for o, r, a in zip(ours.ravel().tolist(), ref.ravel().tolist(), np.broadcast_to(atol, ref.shape).ravel().tolist()):
        absref = abs(r) if math.isfinite(r) else 0.0
        allow = (a + rtol * absref if tier == "float64"
                 else 2 * a + 2 * floor + 2 * rtol * absref)
        if o == r or (math.isnan(o) and math.isnan(r)):
            diff = 0.0
        else:
            diff = abs(o - r)
            diff = math.inf if math.isnan(diff) else diff
        with np.errstate(all="ignore"):
            ratio = 0.0 if diff == 0 else float(np.float64(diff) / np.float64(allow))
        over += ratio > 1
        usage = ratio if ratio > usage or math.isnan(usage) else usage
        mad = max(mad, diff)
        if math.isfinite(r) and r != 0:
            with np.errstate(all="ignore"):
                slack = float((np.float64(allow) - np.float64(diff)) / np.float64(abs(r)))
            res = min(res, -math.inf if math.isnan(slack) else slack)
    return over, usage, mad, (None if res == math.inf and not _any_finite_nonzero(ref) else max(0.0, res))


def _any_finite_nonzero(ref):
    return bool((np.isfinite(ref) & (ref != 0)).any())


SPECIAL = [np.nan, np.inf, -np.inf, 0.0, -0.0]


@pytest.mark.parametrize("seed", range(40))
def test_tolerance_tiers_follow_the_element_rule(seed):
    rng = np.random.default_rng(seed)
    ref = rng.normal(0, 1, 50)
    ours = ref * (1 + rng.normal(0, 3e-6 if seed % 4 != 3 else 1e-8, 50))
    if seed % 4 == 3:                             # equal special values: a passing check
        for i in rng.choice(50, 8, replace=False):
            ours[i] = ref[i] = rng.choice(SPECIAL)
    elif seed % 2:                                # special values on either side, or both
        for i in rng.choice(50, 8, replace=False):
            pick = rng.integers(3)
            if pick != 1:
                ours[i] = rng.choice(SPECIAL)
            if pick != 0:
                ref[i] = ours[i] if rng.integers(2) else rng.choice(SPECIAL)
    tier = ("float64", "pytorch")[seed % 4 // 2]
    atol = np.abs(rng.normal(0, 2e-6, 50)) if seed % 3 else 1e-6
    ours32, ref32 = ours.astype(np.float32), ref.astype(np.float32)
    c = compare(ours32, ref32, tier, atol, 1e-6, 1e-7)
    over, usage, mad, res = _by_definition(ours32.astype(np.float64), ref32.astype(np.float64),
                                           tier, atol, 1e-6, 1e-7)
    assert c.mismatches == over and c.passed == (over == 0)
    assert c.usage == usage and c.max_abs_diff == mad
    assert c.resolution == res


def test_a_nan_slack_makes_the_resolution_zero():
    """An element whose allowance and difference are both infinite has no slack to give (NaN,
    counted as -inf): the check would detect any error, resolution 0."""
    ref = np.array([1.0, 2.0, 3.0])
    ours = np.array([1.0, np.nan, 3.0])
    atol = np.array([1e-6, np.inf, 1e-6])
    assert compare(ours, ref, "float64", atol, 0.0).resolution == 0.0
    assert compare(ref, ref, "float64", atol, 0.0).resolution == pytest.approx(1e-6 / 3)


@pytest.mark.parametrize("shape", [(0,), (0, 3), (3, 0)])
@pytest.mark.parametrize("tier", ["exact", "float64", "pytorch", "identity"])
def test_a_tensor_with_no_element_passes_every_tier(shape, tier):
    """(A zero-size 2-D tensor once raised in the tolerance tiers: its worst index.)"""
    z = np.zeros(shape, np.float32)
    c = compare(z, z.copy(), tier, np.zeros(shape), 0.0, 0.0)
    assert c.passed and c.usage == 0.0 and c.mismatches == 0
    assert compare(z, np.zeros((1,) + shape[1:], np.float32), tier).passed is False
