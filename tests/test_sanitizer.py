"""The bundled port under AddressSanitizer (slow: an instrumented build, then runs that are
several times slower). Out-of-bounds or freed memory read by a kernel does not always change
a bit or crash, so the gate alone cannot be trusted to find it:

- the gate on every layer, ISA path and thread count of the fixtures, with the instrumented
  build as the port;
- the bench's per-layer callables, called again after a garbage collection (they must hold
  every buffer they point into: a stacked bias that nothing held was read after being freed
  by every timed LSTM call, until this test);
- the conv backward's exact-zero paths (listed dW with its recompute, the dense fallback,
  the sparse dcol) on the cases of tests/test_conv.py that reach them.

Needs gcc and its libasan (the run preloads it into Python); skipped otherwise."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from crnn_conformance.ctypes_kernels import build as B

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parent.parent
ASAN = ["-fsanitize=address", "-fno-omit-frame-pointer"]


@pytest.fixture(scope="module")
def asan():
    gcc = shutil.which("gcc")
    if not gcc:
        pytest.skip("gcc not found")
    lib = subprocess.run([gcc, "-print-file-name=libasan.so"], capture_output=True, text=True).stdout.strip()
    if not lib or not os.path.isabs(lib) or not os.path.exists(lib):
        pytest.skip("libasan not found")
    so = B.build(cc=gcc, extra_defines=ASAN)
    env = dict(os.environ, LD_PRELOAD=lib, ASAN_OPTIONS="detect_leaks=0:halt_on_error=1:abort_on_error=0",
               PYTHONPATH=str(ROOT))
    return so, env


def run(env, *args, timeout=900):
    r = subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env,
                       cwd=ROOT, timeout=timeout, check=False)
    assert "AddressSanitizer" not in r.stderr, r.stderr[-4000:]
    return r


def test_gate_under_asan(asan):
    so, env = asan
    r = run(env, "-m", "crnn_conformance.harness.cli", "gate", "-q", "--port", str(so))
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]


def test_bench_layer_callables_hold_their_buffers(asan):
    so, env = asan
    code = f"""
import gc
from crnn_conformance.ctypes_kernels import abi
from crnn_conformance.harness import bench
lib = abi.load({str(so)!r}, layers=("conv", "lstm", "linear", "ctc", "step", "clip", "adamw"))
inp = bench.make_inputs(64, 2)
for isa in abi.available_isas(lib):
    for t in (1, 2):
        abi.check(lib.crnn_set_isa(abi.ISA_NAMES.index(isa)), "isa")
        abi.check(lib.crnn_set_threads(t), "threads")
        calls = bench.layer_calls(lib, inp)
        gc.collect()
        for f in calls.values():
            f(); f()
        step = bench.OursStep(lib, inp)
        step(); step()
print("ok")
"""
    r = run(env, "-c", code)
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr[-3000:]


def test_conv_escape_hatches_under_asan(asan):
    so, env = asan
    code = f"""
import numpy as np
import tests.test_conv as tc
from crnn_conformance.ctypes_kernels import abi
lib = abi.load({str(so)!r}, layers=["conv"])
tc.test_listed_dW_recomputes_rows_with_a_negative_zero_lane(lib)
tc.test_sparse_dcol_zero_signs_never_reach_dx(lib)
tc.test_listed_dW_falls_back_when_x_is_not_finite(lib)
for name, g, signed in tc.C_CASES:
    tc.test_c_equals_spec_every_isa_and_thread_count(lib, name, g, signed)
print("ok")
"""
    r = run(env, "-c", code)
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr[-3000:]
