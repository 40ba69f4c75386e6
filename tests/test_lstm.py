"""The bidirectional LSTM layer (docs/numerics.md and docs/backward.md, "LSTM layer").

- C == spec bit for bit on every ISA path x threads {1, 2, 3, 7}, on small shapes with tails and
  on the fixture's crnn-v0 cases;
- the spec stays within the float64 tier's per-element allowance (usage <= 0.5; the model is
  harness/allowance/lstm.py, tested in tests/test_allowance.py);
- `crnn-conformance gate --layers lstm` exits 0.
"""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from crnn_conformance.ctypes_kernels import abi, build
from crnn_conformance.generators.cases import lstm as cases
from crnn_conformance.generators.float64 import lstm as ref64
from crnn_conformance.generators.h5io import Case, read_fixture
from crnn_conformance.generators.spec import lstm as spec
from crnn_conformance.harness.compare import compare
from crnn_conformance.harness.layers import lstm as lstm_layer
from crnn_conformance.harness.runner import FIXTURES_DIR, THREADS
from crnn_conformance.harness.case_checks import tier_tolerance

TENSORS = cases.TENSORS

# ---------------------------------------------------------------- helpers

def small_inputs(seed, T, I, H, scale=1.0):
    return cases.make_inputs(np.random.default_rng(seed), T, I, H, scale)


def spec_all(inp):
    s = spec.forward(inp["x"], inp["W_ih"], inp["W_hh"], inp["b"])
    s.update(spec.backward(inp["x"], inp["W_ih"], inp["W_hh"], s, inp["dOut"]))
    return s


def same_bits(a, b):
    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    return a.shape == b.shape and np.array_equal(a.view(np.uint32), b.view(np.uint32))


@pytest.fixture(scope="module")
def lstm_lib():
    return build.load_bundled(layers=["lstm"])


@pytest.fixture(scope="module")
def fixture():
    return read_fixture(FIXTURES_DIR / "lstm.h5")


# ---------------------------------------------------------------- C == spec

SMALL = [(1, 5, 3, 0), (7, 19, 5, 1), (17, 33, 4, 2), (25, 40, 16, 3), (3, 16, 1, 4)]


@pytest.mark.parametrize("T,I,H,seed", SMALL)
def test_c_equals_spec_small_shapes(lstm_lib, T, I, H, seed):
    scale = 6.0 if seed % 2 else 1.0
    inp = small_inputs(seed, T, I, H, scale)
    equals_spec_everywhere(lstm_lib, inp, THREADS)


def equals_spec_everywhere(lib, inp, threads):
    """Every tensor of the C layer equals the spec's bits on every ISA path and thread count."""
    want = spec_all(inp)
    for isa in abi.available_isas(lib):
        for t in threads:
            lib.crnn_set_isa(abi.ISA_NAMES.index(isa))
            lib.crnn_set_threads(t)
            got = lstm_layer.run(lib, Case("spec", {}, inp))
            for k in TENSORS:
                assert same_bits(got[k], want[k]), (isa, t, k)
    lib.crnn_set_threads(1)


def test_c_equals_fixture_every_isa_and_thread_count(lstm_lib, fixture):
    for case in fixture.cases:
        for isa in abi.available_isas(lstm_lib):
            for threads in THREADS:
                lstm_lib.crnn_set_isa(abi.ISA_NAMES.index(isa))
                lstm_lib.crnn_set_threads(threads)
                got = lstm_layer.run(lstm_lib, case)
                for k in TENSORS:
                    c = compare(got[k], case.expected["exact"][k], "exact")
                    assert c.passed, (case.name, isa, threads, k, c)
    lstm_lib.crnn_set_threads(1)


def test_dx_optional_and_bad_arguments(lstm_lib):
    inp = small_inputs(9, 4, 6, 2)
    T, I, H = 4, 6, 2
    f = lambda a: np.ascontiguousarray(a, np.float32)
    x, Wi, Wh, b, dO = (f(inp[k]) for k in ("x", "W_ih", "W_hh", "b", "dOut"))
    y, gates = np.zeros((T, 2 * H), np.float32), np.zeros((2, T, 4 * H), np.float32)
    c, tc, hp = (np.zeros((2, T, H), np.float32) for _ in range(3))
    P = lambda a: a.ctypes.data
    assert lstm_lib.crnn_lstm_forward(P(x), T, I, H, P(Wi), P(Wh), P(b), P(y), P(gates), P(c),
                                      P(tc), P(hp)) == 0
    dWi, dWh, db = np.zeros((2, 4 * H, I), np.float32), np.zeros((2, 4 * H, H), np.float32), \
        np.zeros((2, 4 * H), np.float32)
    assert lstm_lib.crnn_lstm_backward(P(x), T, I, H, P(Wi), P(Wh), P(gates), P(c), P(tc), P(hp),
                                       P(dO), P(dWi), P(dWh), P(db), None) == 0
    want = spec_all(inp)
    assert same_bits(dWi, want["dW_ih"]) and same_bits(db, want["db"])
    assert lstm_lib.crnn_lstm_forward(P(x), T, I, 0, P(Wi), P(Wh), P(b), P(y), P(gates), P(c),
                                      P(tc), P(hp)) == -1
    assert lstm_lib.crnn_lstm_forward(P(x), -1, I, H, P(Wi), P(Wh), P(b), P(y), P(gates), P(c),
                                      P(tc), P(hp)) == -1
    assert lstm_lib.crnn_lstm_backward(P(x), T, I, H, P(Wi), P(Wh), None, P(c), P(tc), P(hp),
                                       P(dO), P(dWi), P(dWh), P(db), None) == -1


# ---------------------------------------------------------------- spec against float64

def test_spec_forward_rules():
    """Spot checks of the pinned details on the spec itself."""
    inp = small_inputs(11, 6, 5, 3)
    s = spec.forward(inp["x"], inp["W_ih"], inp["W_hh"], inp["b"])
    H = 3
    assert np.all(s["hPrev"][0, 0] == 0) and np.all(s["hPrev"][1, -1] == 0)
    assert same_bits(s["hPrev"][0, 1:], s["out"][:-1, :H])
    assert same_bits(s["hPrev"][1, :-1], s["out"][1:, H:])
    o = s["gates"][:, :, 3 * H:]
    assert same_bits(np.concatenate([o[0] * s["tc"][0], o[1] * s["tc"][1]], axis=1), s["out"])


def test_spec_within_float64_allowance(fixture):
    """Usage of the float64 tier by the spec's bits (= the port's) stays <= 0.5 per tensor."""
    worst = {}
    for case in fixture.cases:
        for k in TENSORS:
            tol = tier_tolerance("lstm", case, "float64", k)
            c = compare(case.expected["exact"][k], case.expected["float64"][k], "float64",
                        tol.atol, tol.rtol)
            worst[k] = max(worst.get(k, 0.0), c.usage)
            assert c.usage <= 0.5, (case.name, k, c.usage, c.worst)
    print("float64 usage:", {k: round(v, 4) for k, v in worst.items()})


def test_float64_reference_matches_fixture(fixture):
    case = fixture.cases[0]
    r = ref64.forward(*(case.inputs[k] for k in ("x", "W_ih", "W_hh", "b")))
    assert np.allclose(r["out"], case.expected["float64"]["out"], rtol=1e-12, atol=0)


# ---------------------------------------------------------------- the gate

def test_gate_lstm_passes():
    r = subprocess.run([sys.executable, "-m", "crnn_conformance.harness.cli", "gate", "--layers", "lstm", "--quiet"],
                       capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]


def relu_like(rng, x, dead=0.7):
    """x as a conv block's ReLU and pool leave it: most values +0, in runs along t"""
    z = rng.random(x.shape) < dead
    z[1:] = np.where(rng.random(z[1:].shape) < 0.8, z[:-1], z[1:])
    return np.where(z, np.float32(0), np.abs(x)).astype(np.float32)


@pytest.mark.parametrize("T,I,H,seed", [(17, 40, 5, 7), (33, 64, 8, 8), (64, 256, 4, 9)])
def test_c_equals_spec_when_x_is_mostly_zero(lstm_lib, T, I, H, seed):
    """x after a ReLU and pool (70 % +0): x·W_ihᵀ leaves out those terms (where W_ih is
    finite) and must still give the spec's bits; some values so small that their products
    round to -0, so some dots can come out -0 and be redone with every term."""
    rng = np.random.default_rng(seed)
    inp = small_inputs(seed, T, I, H)
    x = relu_like(rng, inp["x"])
    x[rng.random(x.shape) < 0.05] = np.float32(1e-30)
    inp["W_ih"][:, :, ::7] *= np.float32(1e-12)
    inp["x"] = x
    equals_spec_everywhere(lstm_lib, inp, (1, 2))


@pytest.mark.parametrize("bad", [np.inf, np.nan])
def test_mostly_zero_x_keeps_every_term_when_w_ih_is_not_finite(lstm_lib, bad):
    """+0 * inf is NaN: with a non-finite W_ih no zero term of x may be left out, so the
    outputs are NaN exactly where the spec's are."""
    rng = np.random.default_rng(10)
    inp = small_inputs(10, 20, 48, 4)
    inp["x"] = relu_like(rng, inp["x"])
    inp["W_ih"][1, 5, 3] = bad
    zero_col = inp["x"][:, 3] == 0
    assert zero_col.any()
    want = spec_all(inp)
    assert np.isnan(want["out"]).any()
    for isa in abi.available_isas(lstm_lib):
        lstm_lib.crnn_set_isa(abi.ISA_NAMES.index(isa))
        got = lstm_layer.run(lstm_lib, Case("bad_w", {}, inp))
        for k in ("out", "gates", "c"):
            assert np.array_equal(np.isnan(got[k]), np.isnan(want[k])), (isa, k)
            ok = ~np.isnan(want[k])
            assert same_bits(got[k][ok], want[k][ok]), (isa, k)
