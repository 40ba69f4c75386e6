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


# ---- the bit tiers' figures: ulp distances in integers, signed zeros, NaN/Inf/poison in words

def _bits(x: float) -> int:
    return int(np.float64(x).view(np.uint64))


def _ulps_by_counting(a: float, b: float) -> int:
    """The representable binary64 values stepped over from a to b (both finite): along one
    sign, the difference of the magnitudes' bit patterns; across zero, the steps of each to
    its zero plus the one step between -0 and +0."""
    sa, sb = math.copysign(1.0, a) < 0, math.copysign(1.0, b) < 0
    ma, mb = _bits(abs(a)), _bits(abs(b))
    return abs(ma - mb) if sa == sb else ma + mb + 1


def test_float64_ulp_distances_are_exact_integers():
    """A 1-ulp difference of a binary64 tensor (a CTC loss) was 0: the ordered integers were
    rounded to float64 before the subtraction. Any two finite values: the count of values
    between them, exact up to the whole range (more than 2^63 steps from -max to +max)."""
    from crnn_conformance.harness.compare import ulp_distance
    rng = np.random.default_rng(3)
    big = np.finfo(np.float64).max
    pairs = [(0.6351157964619758, np.nextafter(0.6351157964619758, 1.0)), (1.0, 2.0),
             (-big, big), (big, -5e-324), (-0.0, 0.0), (5e-324, -5e-324), (1e300, -1e-300)]
    bits = rng.integers(0, 2 ** 63 - 2 ** 52, (200, 2), dtype=np.int64).astype(np.uint64)
    signs = rng.integers(0, 2, (200, 2)).astype(np.uint64) << np.uint64(63)
    pairs += [tuple(p) for p in (bits | signs).view(np.float64)]
    a, b = (np.array(x, np.float64) for x in zip(*pairs))
    got = ulp_distance(a, b)
    assert [int(g) for g in got] == [_ulps_by_counting(x, y) for x, y in pairs]
    assert int(got[2]) > 2 ** 63


@pytest.mark.parametrize("tier", ["exact", "identity"])
def test_a_one_ulp_float64_mismatch_shows_one_ulp(tier):
    loss = np.array([0.6351157964619758, 2.5, 1e-300, 7.0])
    ours = loss.copy()
    ours[:3] = np.nextafter(loss[:3], np.inf)
    c = compare(ours, loss, tier)
    assert not c.passed and c.mismatches == 3
    assert c.max_ulp == 1 and c.usage == 1.0 and c.hist["below"] == 3


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("tier", ["exact", "identity"])
def test_signed_zeros_are_one_ulp_apart_and_fail_the_bit_tiers(dtype, tier):
    from crnn_conformance.harness.compare import ulp_distance
    ours, ref = np.array([-0.0, 1.0], dtype), np.array([0.0, 1.0], dtype)
    assert int(ulp_distance(ours, ref)[0]) == 1
    c = compare(ours, ref, tier)
    assert not c.passed and c.mismatches == 1 and c.max_ulp == 1 and c.usage == 1.0
    assert c.worst["index"] == [0] and "unbounded" not in c.worst


def test_the_signed_zero_rule_is_one_in_code_docstring_and_docs():
    """One rule everywhere: +0 and -0 are 1 ulp apart, so a failed bit check never reads 0."""
    from pathlib import Path
    from crnn_conformance.harness.compare import ulp_distance
    doc = (Path(__file__).resolve().parent.parent / "docs" / "report-schema.md").read_text()
    doc, code_doc = " ".join(doc.split()), " ".join(ulp_distance.__doc__.split())
    assert "+0 and −0 are 1 apart" in doc and "0 apart" not in doc.replace("1 apart", "")
    assert "+0 and -0 are 1 apart" in code_doc and "0 apart" not in code_doc.replace("1 apart", "")
    assert int(ulp_distance(np.float64([-0.0]), np.float64([0.0]))[0]) == 1


POISON = {np.float32: 0x7FE5A5A5, np.float64: 0x7FFDA5A5A5A5A5A5}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("tier", ["exact", "identity", "float64"])
def test_nan_inf_and_poison_are_named_in_words_not_ulps(dtype, tier):
    """An element that is NaN, Inf or poison where the reference's is not has no distance:
    it still fails (unbounded usage), the worst element and the note say what it is, and the
    bit tiers' max_ulp covers only the elements that have one."""
    ref = np.linspace(0.5, 1.5, 8).astype(dtype)
    ours = ref.copy()
    ours[1] = np.nextafter(ref[1], dtype(2))                # 1 ulp
    ours[3] = np.nan
    ours.view(np.uint64 if dtype == np.float64 else np.uint32)[5] = POISON[dtype]
    ours[6] = np.inf
    c = compare(ours, ref, tier, 1e-9, 0.0)
    assert not c.passed and c.usage == math.inf
    one_ulp_fails = tier != "float64" or dtype == np.float32   # 6e-8 > Atol 1e-9 > 1.1e-16
    assert c.mismatches == 3 + one_ulp_fails
    assert c.worst["index"] == [3] and c.worst["ours"] == "nan"
    assert c.worst["unbounded"] == "NaN where the reference is finite"
    assert c.note == ("1 element(s): poison left (never written); "
                      "1 element(s): NaN where the reference is finite; "
                      "1 element(s): inf where the reference is finite")
    if tier != "float64":
        assert c.max_ulp == 1 and c.hist["above"] == 3 and c.hist["below"] == 1
        only = compare(ours[3:7], ref[3:7], tier)          # no element with a distance
        assert only.max_ulp is None and only.usage == math.inf and only.mismatches == 3


def test_words_for_every_kind_of_element_without_a_distance():
    ours = np.array([1.0, np.inf, -np.inf, np.nan, 2.0, 3.0], np.float32)
    ref = np.array([np.inf, -np.inf, 1.0, -np.inf, np.nan, 3.0], np.float32)
    ours[5] = np.uint32(0x7FC00001).view(np.float32)
    ref[5] = np.uint32(0x7FC00000).view(np.float32)
    c = compare(ours, ref, "exact")
    assert c.mismatches == 6 and c.max_ulp is None and c.usage == math.inf
    assert set(c.note.split("; ")) == {
        "1 element(s): finite where the reference is inf",
        "1 element(s): inf where the reference is -inf",
        "1 element(s): -inf where the reference is finite",
        "1 element(s): NaN where the reference is -inf",
        "1 element(s): finite where the reference is NaN",
        "1 element(s): NaN with other bits than the reference's NaN"}
    assert c.worst["unbounded"] == "finite where the reference is inf"


def test_poison_left_in_an_integer_tensor_is_named_too():
    ref = np.array([3, 4, 5, 6], np.int32)
    ours = np.array([3, 0x5A5A5A5A, 7, 6], np.int32)
    c = compare(ours, ref, "exact")
    assert not c.passed and c.mismatches == 2 and c.max_ulp == 2 and c.usage == math.inf
    assert c.worst == {"index": [1], "ours": 0x5A5A5A5A, "ref": 4, "allowance": 0.0,
                       "unbounded": "poison left (never written)"}
    assert c.note == "1 element(s): poison left (never written)"
