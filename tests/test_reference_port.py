"""The reference port (generators/spec/c/, harness/reference.py): the executable spec in scalar
C, which the fuzzer may use for golden bits. It must give the NumPy spec's bits:

- on every packaged fixture, through the gate's exact tier (golden bits the NumPy spec made),
  every exact tensor of every case compared; a reference built with a deliberate mistake
  (-DSPEC_BREAK_DOT16_ZERO_PAD: dot16's tail padded with zero terms) fails it;
- on random cases of every layer drawn by the fuzzer's strategies (fixed seed), byte for byte
  against generators.exact.expected, NaN payloads and signed zeros included; the mean time
  per case of both is printed;
- and it returns the bundled port's error codes for bad arguments.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import h5py
import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, seed, settings

from crnn_conformance.ctypes_kernels import abi
from crnn_conformance.ctypes_kernels.build import BuildError, build_reference, find_compiler
from crnn_conformance.generators import exact, model
from crnn_conformance.harness import layers as L
from crnn_conformance.harness import reference
from crnn_conformance.harness.records import FIXTURES_DIR

ROOT = Path(__file__).resolve().parent.parent
BROKEN = "-DSPEC_BREAK_DOT16_ZERO_PAD"


@pytest.fixture(scope="module")
def ref_port() -> Path:
    try:
        find_compiler()
    except BuildError as e:
        pytest.skip(str(e))
    return build_reference()      # a compile error fails here


@pytest.fixture(scope="module")
def ref_lib(ref_port):
    return reference.library()


def gate(port, tmp_path, *args) -> tuple[subprocess.CompletedProcess, dict]:
    out = tmp_path / "results.json"
    r = subprocess.run([sys.executable, "-m", "crnn_conformance.harness.cli", "gate",
                        "--port", str(port), "--tiers", "exact", "--isa", "scalar",
                        "--threads", "1", "-q", "--json", str(out), *args],
                       cwd=ROOT, capture_output=True, text=True, timeout=900)
    return r, (json.loads(out.read_text()) if out.exists() else {})


def exact_tensors() -> set:
    """(layer, fixture, case, tensor) of every exact golden tensor of the packaged fixtures."""
    found = set()
    for layer in L.LAYERS:
        mod = L.module(layer)
        for name in mod.FIXTURES:
            with h5py.File(FIXTURES_DIR / f"{name}.h5", "r") as f:
                for case in json.loads(f.attrs["case_names"]):
                    tiers = f[case]["expected"]
                    found |= {(layer, name, case, t) for t in tiers.get("exact", {})}
    return found


# ---- the gate's exact tier on the fixtures --------------------------------------------------

def test_the_reference_passes_the_exact_tier_on_every_fixture(ref_port, tmp_path):
    r, results = gate(ref_port, tmp_path)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr
    records = {(t["layer"], t["fixture"], t["case"], t["tensor"]) for t in results["tensors"]
               if t["tier"] == "exact" and t["passed"]}
    want = exact_tensors()
    assert len(want) > 500 and {k[0] for k in want} == set(L.LAYERS)
    assert records == want, (sorted(want - records)[:5], sorted(records - want)[:5])
    assert all(results["layers"][layer]["status"] == "passed" for layer in L.LAYERS)


def test_a_broken_reference_fails_the_exact_tier(ref_port, tmp_path):
    """Zero-padded dot16 tails flip signed zeros: the dot16, linear and lstm fixtures show it."""
    broken = build_reference(defines=[BROKEN])
    assert broken != ref_port
    r, results = gate(broken, tmp_path, "--layers", "dot16,linear,lstm")
    assert r.returncode == 1, r.stdout[-3000:] + r.stderr
    for layer in ("dot16", "linear", "lstm"):
        assert results["layers"][layer]["failed"] > 0, (layer, results["layers"][layer])


# ---- random cases against the NumPy spec ----------------------------------------------------

def _differs(want, got) -> str | None:
    """None when `got` has want's dtype, shape and bytes; else what differs."""
    want, got = np.asarray(want), np.asarray(got)
    if want.dtype != got.dtype or want.shape != got.shape:
        return f"{got.dtype}{list(got.shape)} where the spec has {want.dtype}{list(want.shape)}"
    if want.tobytes() == got.tobytes():
        return None
    u = f"u{want.itemsize}"
    w, g = (np.ascontiguousarray(a).reshape(-1).view(u) for a in (want, got))
    bad = np.nonzero(w != g)[0]
    i = bad[0]
    at = [int(j) for j in np.unravel_index(i, want.shape)]
    return (f"{bad.size} of {want.size} element(s) differ; first at {at}: reference "
            f"{got.reshape(-1)[i]!r} (0x{int(g[i]):x}), spec {want.reshape(-1)[i]!r} "
            f"(0x{int(w[i]):x})")


def _differential(layer: str, examples: int, capsys, record_property) -> None:
    from crnn_conformance.harness.fuzz import strategies   # the fuzzer's own strategies
    times = {"reference": 0.0, "numpy": 0.0, "cases": 0}

    @seed(20240601)
    @settings(max_examples=examples, database=None, deadline=None,
              phases=[Phase.generate], suppress_health_check=list(HealthCheck))
    @given(strategies.module(layer).cases())
    def check(case):
        params, inputs = case
        t0 = time.perf_counter()
        want = exact.expected(layer, params, inputs)
        t1 = time.perf_counter()
        got = reference.expected(layer, params, inputs)
        times["numpy"] += t1 - t0
        times["reference"] += time.perf_counter() - t1
        times["cases"] += 1
        bad = {k: "missing" if k not in got else _differs(want[k], got[k]) for k in want}
        bad = {k: d for k, d in bad.items() if d}
        assert not bad, f"{layer} {params}: {bad}"

    check()
    n = times["cases"]
    assert n >= examples // 2, n
    ms = {k: 1e3 * times[k] / n for k in ("reference", "numpy")}
    record_property("mean_ms_reference", ms["reference"])
    record_property("mean_ms_numpy", ms["numpy"])
    with capsys.disabled():
        print(f"\n  {layer}: {n} cases, mean per case: reference {ms['reference']:.3f} ms, "
              f"NumPy spec {ms['numpy']:.2f} ms ({ms['numpy'] / ms['reference']:.0f}x)")


@pytest.mark.parametrize("layer", L.LAYERS)
def test_the_reference_gives_the_spec_bits_on_random_cases(layer, ref_lib, capsys,
                                                            record_property):
    _differential(layer, 30, capsys, record_property)


@pytest.mark.slow
@pytest.mark.parametrize("layer", L.LAYERS)
def test_the_reference_gives_the_spec_bits_on_many_random_cases(layer, ref_lib, capsys,
                                                                record_property):
    _differential(layer, 600, capsys, record_property)


def test_every_layer_has_a_strategy():
    from crnn_conformance.harness.fuzz import strategies
    assert strategies.available() == L.LAYERS


# ---- the ABI around the numerics -------------------------------------------------------------

def test_the_reference_exports_the_abi_and_nothing_else(ref_port):
    lib = abi.load(ref_port)
    assert all(hasattr(lib, name) for name in abi.SIGNATURES)
    assert not hasattr(lib, "spec_dot16") and not hasattr(lib, "spec_fma_nan")
    assert lib.crnn_abi_version() == 1 and lib.crnn_isa_available() == 1
    assert lib.crnn_set_isa(1) == -2 and lib.crnn_set_isa(3) == -2 and lib.crnn_set_isa(4) == -2 \
        and lib.crnn_set_isa(5) == -1   # 4 is neon: a path it lacks
    assert lib.crnn_set_threads(7) == 0 and lib.crnn_get_threads() == 7
    assert lib.crnn_set_threads(0) == -1 and lib.crnn_set_threads(257) == -1
    assert lib.crnn_get_threads() == 7 and lib.crnn_set_threads(1) == 0
    assert lib.crnn_set_isa(0) == 0 and lib.crnn_get_isa() == 0


def _arrays() -> dict:
    """Buffers for the calls of _bad_calls (a conv case is 8x8x1, 3x3 kernel, padding 1, 2x2
    pools, 4 channels: 4x4x4 windows)."""
    bad_winners = np.full(64, -1, np.int32)
    bad_winners[0] = 5                       # window (0, 0), channel 0: a cell of channel 1
    base = model.default_config()
    cfgs = {"v0": base, "classes1": dict(base, classes=1), "hidden0": dict(base, hidden=0),
            "blocks0": dict(base, blocks=[]), "height1": dict(base, input_height=1)}
    return {"f": np.full(1 << 16, 0.5, np.float32), "d": np.zeros(64),
            "target": np.array([1, 2], np.int32), "label0": np.array([0], np.int32),
            "label2": np.array([2], np.int32), "bad_winners": bad_winners,
            "dead": np.full(64, -1, np.int32), "sizes": np.array([4], np.int64),
            "neg_size": np.array([-1], np.int64), "n": np.zeros(1, np.int32),
            **{f"cfg_{k}": model.cfg_array(c) for k, c in cfgs.items()}}


def _bad_calls(a: dict) -> dict:
    """name -> (entry point, arguments): bad shapes, NULLs, out-of-range values, and a few
    legal edge calls (empty shapes) that must succeed alike."""
    p = {k: v.ctypes.data for k, v in a.items()}
    P, D = p["f"], p["d"]
    adamw = (1e-3, 0.9, 0.999, 1e-8, 0.01)
    pmv = (P, P + 64, P + 128, P + 192, 4)
    calls = {
        "dot16 n<0": ("crnn_dot16", (P, P, -1, P)),
        "dot16 n=0 NULL": ("crnn_dot16", (None, None, 0, P)),
        "dot16 NULL a": ("crnn_dot16", (None, P, 3, P)),
        "linear T=-1": ("crnn_linear_forward", (P, P, P, -1, 3, 2, P)),
        "linear T=0": ("crnn_linear_backward", (P, P, P, 0, 3, 2, P, P, P)),
        "linear NULL x": ("crnn_linear_forward", (None, P, P, 2, 3, 2, P)),
        "linear NULL dx": ("crnn_linear_backward", (P, P, P, 2, 3, 2, None, P, P)),
        "conv C=0": ("crnn_conv_forward", (P, 8, 8, 0, P, P, 4, 3, 3, 1, 1, 2, 2, P, P, p["n"])),
        "conv no row": ("crnn_conv_forward", (P, 2, 8, 1, P, P, 4, 3, 3, 0, 0, 1, 1, P, P, P)),
        "conv pool > Hc": ("crnn_conv_forward", (P, 3, 8, 1, P, P, 4, 3, 3, 1, 1, 4, 2, P, P, P)),
        "conv NULL winners": ("crnn_conv_forward", (P, 8, 8, 1, P, P, 4, 3, 3, 1, 1, 2, 2, P, P,
                                                    None)),
        "conv bwd bad winner": ("crnn_conv_backward", (P, 8, 8, 1, P, 4, 3, 3, 1, 1, 2, 2, P,
                                                        p["bad_winners"], P, P, None)),
        "conv bwd dead windows": ("crnn_conv_backward", (P, 8, 8, 1, P, 4, 3, 3, 1, 1, 2, 2, P,
                                                          p["dead"], P + 4096, P + 8192,
                                                          P + 12288)),
        "lstm H=0": ("crnn_lstm_forward", (P, 2, 3, 0, P, P, P, P, P, P, P, P)),
        "lstm T=0": ("crnn_lstm_forward", (P, 0, 3, 2, P, P, P, P, P, P, P, P)),
        "lstm NULL gates": ("crnn_lstm_backward", (P, 2, 3, 2, P, P, None, P, P, P, P, P, P, P,
                                                   None)),
        "sigmoid n<0": ("crnn_sigmoid", (P, -1, P)), "tanh NULL x": ("crnn_tanh", (None, 4, P)),
        "tanh n=0 NULL": ("crnn_tanh", (None, 0, None)),
        "exp NULL y": ("crnn_detmath_exp", (D, 1, None)),
        "log n<0": ("crnn_detmath_log", (D, -1, D)),
        "ctc label 0": ("crnn_ctc", (P, 3, 3, p["label0"], 1, 1.0, D, P + 4096)),
        "ctc label K": ("crnn_ctc", (P, 3, 2, p["label2"], 1, 1.0, D, P + 4096)),
        "ctc K=0": ("crnn_ctc", (None, 0, 0, None, 0, 1.0, D, None)),
        "ctc T=0": ("crnn_ctc", (None, 0, 3, p["target"], 2, 1.0, D, None)),
        "ctc NULL loss": ("crnn_ctc", (P, 3, 3, p["target"], 2, 1.0, None, P + 4096)),
        "clip size<0": ("crnn_clip_gradients", (P, p["neg_size"], 1, 1.0, 1, D)),
        "clip enabled=2": ("crnn_clip_gradients", (P, p["sizes"], 1, 1.0, 2, D)),
        "clip limit NaN": ("crnn_clip_gradients", (P, p["sizes"], 1, float("nan"), 1, D)),
        "clip limit<0 off": ("crnn_clip_gradients", (P, p["sizes"], 1, -1.0, 0, D)),
        "adamw decay=2": ("crnn_adamw", (*pmv, *adamw, 2, 0.9, 0.999)),
        "adamw b1t=1": ("crnn_adamw", (*pmv, *adamw, 1, 1.0, 0.999)),
        "adamw b2t NaN": ("crnn_adamw", (*pmv, *adamw, 1, 0.9, float("nan"))),
        "adamw b1t<0": ("crnn_adamw", (*pmv, *adamw, 1, -0.5, 0.999)),
        "adamw n=0 NULL": ("crnn_adamw", (None, None, None, None, 0, *adamw, 1, 0.9, 0.999)),
        "set_isa 7": ("crnn_set_isa", (7,)),
        "set_threads 0": ("crnn_set_threads", (0,)),
        "model_sizes NULL nTensors": ("crnn_model_sizes", (p["cfg_v0"], None, None)),
    }
    for name in (k for k in a if k.startswith("cfg_")):
        calls[f"model_sizes {name}"] = ("crnn_model_sizes", (p[name], p["n"], None))
    return calls


def test_bad_arguments_give_the_bundled_port_error_codes(lib, ref_lib):
    a = _arrays()
    codes = {}
    try:
        for name, (fn, args) in _bad_calls(a).items():
            codes[name] = []
            for port in (lib, ref_lib):
                a["f"][:] = 0.5
                codes[name].append(getattr(port, fn)(*args))
    finally:
        for port in (lib, ref_lib):
            port.crnn_set_isa(0)
            port.crnn_set_threads(1)
    assert {n: c for n, c in codes.items() if c[0] != c[1]} == {}
    assert sum(c == [-1, -1] for c in codes.values()) >= 25, codes   # mostly errors
    assert sum(c == [0, 0] for c in codes.values()) >= 6, codes      # the legal edge calls


def test_ctypes_kernels_finds_the_sources_without_importing_generators():
    code = ("import sys\nfrom crnn_conformance.ctypes_kernels import build\n"
            "d = build.reference_sources()\n"
            "assert 'crnn_conformance.generators' not in sys.modules, 'imported'\n"
            "print(d)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    src = Path(r.stdout.strip())
    names = {p.name for p in src.iterdir()}
    assert {f"{m}.c" for m in ("dot16", "linear", "conv", "lstm", "activations", "detmath", "ctc",
                               "step", "clip", "adamw", "port")} | {"spec.h"} <= names
    assert src == ROOT / "generators" / "spec" / "c" or "site-packages" in str(src)


def test_without_a_compiler_the_reference_is_unavailable_with_a_clear_error(tmp_path):
    """A fresh cache and no compiler: available() is False and expected() raises
    ReferenceUnavailable naming the cause (in a process of its own: the library is loaded
    once per process)."""
    code = ("import numpy as np\nfrom crnn_conformance.harness import reference\n"
            "assert not reference.available()\n"
            "try:\n    reference.expected('dot16', {}, {'a': np.ones(1, np.float32), "
            "'b': np.ones(1, np.float32), 'lengths': np.array([1])})\n"
            "except reference.ReferenceUnavailable as e:\n    print(e)\n")
    env = {**os.environ, "CC": "no-such-cc", "CRNN_CACHE_DIR": str(tmp_path)}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    assert "reference port is unavailable" in r.stdout and "no C compiler" in r.stdout, r.stdout
