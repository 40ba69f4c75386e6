"""dot16 and the linear layer: the C port equals the spec on every ISA path x threads, and
the spec stays within the float64 tier's allowance."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from crnn_conformance.generators.float64 import linear as ref64
from crnn_conformance.generators.spec import linear as spec
from crnn_conformance.generators.spec.dot16 import dot16, gemm16
from crnn_conformance.harness.compare import compare
from crnn_conformance.harness.layers import linear as linear_layer
from crnn_conformance.harness.case_checks import tier_tolerance

from crnn_conformance.harness.runner import THREADS


def bits(a):
    a = np.asarray(a, np.float32)
    return a.view(np.uint32)


def c_dot16(lib, a, b):
    out = np.zeros(1, np.float32)
    assert lib.crnn_dot16(a.ctypes.data, b.ctypes.data, a.size, out.ctypes.data) == 0
    return out[0]


def order_data(rng, n):
    """Magnitudes over 2^-30..2^30 with cancelling pairs: any other order changes the bits."""
    a = (rng.choice([-1, 1], n) * np.exp2(rng.integers(-30, 31, n)) * rng.uniform(1, 2, n)).astype(np.float32)
    b = rng.uniform(-2, 2, n).astype(np.float32)
    if n > 2:
        k = rng.integers(0, n - 1, n // 3)
        a[k + 1], b[k + 1] = -a[k], b[k]
    return a, b


@pytest.mark.parametrize("isa_index", range(4))
def test_dot16_every_length(lib, isas, isa_index):
    names = ("scalar", "sse", "avx2", "avx512")
    if names[isa_index] not in isas:
        pytest.skip(f"{names[isa_index]} not on this CPU")
    assert lib.crnn_set_isa(isa_index) == 0
    rng = np.random.default_rng(isa_index)
    lengths = list(range(101)) + [int(n) for n in rng.integers(101, 5001, 40)]
    for n in lengths:
        a, b = order_data(rng, n)
        assert bits(c_dot16(lib, a, b)) == bits(dot16(a, b)), f"n={n}"


def test_order_is_visible():
    """The data is order-revealing: a sequential sum differs from dot16 on most lengths."""
    rng = np.random.default_rng(3)
    differ = 0
    for n in range(17, 200):
        a, b = order_data(rng, n)
        seq = np.float32(0)
        for x, y in zip(a, b):
            seq = np.float32(np.float64(x) * np.float64(y) + np.float64(seq))
        differ += bits(seq) != bits(dot16(a, b))
    assert differ > 100


def test_tail_is_not_zero_padded(lib, isas):
    """n = 17 products that round to -0: every lane holds -0, so the dot is -0. Padding the
    tail to 32 with zeros would turn lanes 1..15 into +0 and give +0."""
    a = np.full(17, -1e-30, np.float32)
    b = np.full(17, 1e-30, np.float32)
    assert bits(dot16(a, b)) == bits(np.float32(-0.0))
    padded = np.zeros(32, np.float32), np.zeros(32, np.float32)
    padded[0][:17], padded[1][:17] = a, b
    assert bits(dot16(*padded)) == bits(np.float32(0.0))
    for i, name in enumerate(("scalar", "sse", "avx2", "avx512")):
        if name in isas:
            lib.crnn_set_isa(i)
            assert bits(c_dot16(lib, a, b)) == bits(np.float32(-0.0)), name


def test_gemm16_is_rows_of_dot16():
    rng = np.random.default_rng(5)
    A = rng.standard_normal((3, 37)).astype(np.float32)
    B = rng.standard_normal((4, 37)).astype(np.float32)
    C = gemm16(A, B)
    for i in range(3):
        for j in range(4):
            assert bits(C[i, j]) == bits(dot16(A[i], B[j]))


class _Case:
    def __init__(self, **inputs):
        self.inputs = inputs


@pytest.mark.parametrize("T,I,O", [(16, 128, 37), (25, 37, 48), (1, 5, 3), (33, 300, 20)])
def test_linear_c_equals_spec_everywhere(lib, isas, T, I, O):
    rng = np.random.default_rng(T * I * O)
    x = rng.uniform(-1, 1, (T, I)).astype(np.float32)
    W = rng.uniform(-1, 1, (O, I)).astype(np.float32) / np.float32(np.sqrt(I))
    b = rng.uniform(-1, 1, O).astype(np.float32)
    dY = rng.uniform(-1, 1, (T, O)).astype(np.float32)
    y = spec.forward(x, W, b)
    dx, dW, db = spec.backward(x, W, dY)
    want = {"y": y, "dx": dx, "dW": dW, "db": db}
    for i, name in enumerate(("scalar", "sse", "avx2", "avx512")):
        if name not in isas:
            continue
        for threads in THREADS:
            lib.crnn_set_isa(i)
            lib.crnn_set_threads(threads)
            got = linear_layer.run(lib, _Case(x=x, W=W, b=b, dY=dY))
            for k, v in want.items():
                assert np.array_equal(bits(got[k]), bits(v)), f"{k} on {name} x {threads}"
    lib.crnn_set_threads(1)


def test_linear_spec_within_float64_allowance():
    rng = np.random.default_rng(9)
    T, I, O = 25, 128, 48
    x = rng.uniform(-1, 1, (T, I)).astype(np.float32)
    W = (rng.uniform(-1, 1, (O, I)) / np.sqrt(I)).astype(np.float32)
    b = (rng.uniform(-1, 1, O) / np.sqrt(I)).astype(np.float32)
    dY = rng.uniform(-1, 1, (T, O)).astype(np.float32)
    ours = dict(zip(("dx", "dW", "db"), spec.backward(x, W, dY)), y=spec.forward(x, W, b))
    ref = dict(zip(("dx", "dW", "db"), ref64.backward(x, W, dY)), y=ref64.forward(x, W, b))
    case = SimpleNamespace(name="t", params={}, inputs={"x": x, "W": W, "b": b, "dY": dY})
    for k in ours:
        tol = tier_tolerance("linear", case, "float64", k)
        c = compare(ours[k], ref[k], "float64", tol.atol, tol.rtol)
        assert c.passed and c.usage < 0.5, (k, c)


def test_linear_bad_shape_is_an_error_code(lib):
    x = np.zeros((2, 3), np.float32)
    assert lib.crnn_linear_forward(x.ctypes.data, x.ctypes.data, x.ctypes.data, -1, 3, 2,
                                   x.ctypes.data) == -1
    assert lib.crnn_linear_forward(None, x.ctypes.data, x.ctypes.data, 2, 3, 2, x.ctypes.data) == -1


def test_isa_selection_errors(lib):
    assert lib.crnn_set_isa(7) == -1
    assert lib.crnn_set_threads(0) == -1
    assert lib.crnn_set_threads(257) == -1
    assert lib.crnn_set_threads(1) == 0
