"""`crnn-conformance bench`: runs, prints the table, writes the JSON with the documented
per-case fields; the flop count matches a count of every dot; the step it times is the
training step (same bits as the batch gradient + clip + AdamW done by hand); the memory
measurement sees the step's scratch; bad options exit 2. Timing targets are not tested
(they are measured by the bench itself, docs/performance.md)."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from crnn_conformance.ctypes_kernels import abi
from crnn_conformance.ctypes_kernels.build import build
from crnn_conformance.generators import model
from crnn_conformance.harness import bench
from crnn_conformance.harness.bench import timing as bench_timing


def test_macs_count_every_dot():
    """The analytic count equals the dots' terms counted layer by layer for crnn-v0."""
    cfg = model.default_config()
    W, B = 256, 4
    macs = bench.step_macs(cfg, W, B)
    # by hand: conv (fwd P*Out*KP, dW, dx for blocks > 0, db P*Out), LSTM, linear, clip
    conv = [(32 * 256, 16, 16), (16 * 128, 32, 144), (8 * 64, 64, 288)]
    want_conv = sum(P * O * KP * (2 + (n > 0)) + P * O for n, (P, O, KP) in enumerate(conv))
    T, H = 64, 64
    want_lstm = sum(T * 8 * H * I * 3 + 2 * T * 4 * H * H * 3 + 8 * H * T for I in (256, 128))
    want_lin = T * 37 * 128 * 3 + 37 * T
    assert sum(macs[f"conv{n}"] for n in range(3)) == B * want_conv
    assert macs["lstm0"] + macs["lstm1"] == B * want_lstm
    assert macs["linear"] == B * want_lin
    assert macs["clip"] == sum(int(np.prod(s.shape)) for s in model.param_specs(cfg))
    assert 2 * sum(macs.values()) > 8e8              # ~0.9 GFLOP per step


def test_entry_point_macs_add_up_to_the_step():
    """The one-line entry points' dots (counted per entry point) times the lines are the
    step's (counted per layer kind), the clip's norm dots aside: two counts written apart."""
    cfg = model.default_config()
    for width, batch in ((256, 4), (100, 3)):
        one = bench.entry_macs(cfg, width)
        step = bench.step_macs(cfg, width, batch)
        assert batch * sum(one.values()) == sum(step.values()) - step["clip"]
        assert "ctc" not in one
    # the first conv block has no dx: its backward is dW and db alone
    one = bench.entry_macs(cfg, 256)
    assert one["conv0 bwd"] == 32 * 256 * 16 * 16 + 32 * 256 * 16
    assert one["conv1 bwd"] == 2 * 16 * 128 * 32 * 144 + 16 * 128 * 32


def test_fma_peak_is_measured_on_every_path_the_cpu_has():
    isas = abi.available_isas(abi.load(build(), layers=()))
    peak = bench.fma_peak(isas, (1, 2), seconds=0.02)
    if peak is None:
        pytest.skip("no C compiler for the helper")
    assert set(peak) == set(isas)
    for isa, rates in peak.items():
        assert set(rates) == {1, 2}
        assert all(np.isfinite(r) and r > 0 for r in rates.values()), (isa, rates)
    assert bench.fma_peak(["neon"] if "neon" not in isas else ["avx2"], (1,), seconds=0.02) == {}


_PEAK_DRIVER = r"""
#include <stdio.h>
double crnn_h_fma_peak(int, int, double);
int main(void) { for (int i = 0; i < 5; i++) printf("%g\n", crnn_h_fma_peak(i, 1, 0.01)); return 0; }
"""


def test_fma_peak_on_a_cpu_without_fma_is_none_not_a_fault(tmp_path):
    """The scalar path runs on any x86-64, doing its fmas in software without FMA3: the peak
    helper must then measure nothing rather than fault. Run under qemu-x86_64 as a CPU
    without FMA3 or AVX (Nehalem); the same program on this CPU measures its paths."""
    import platform
    import shutil
    from crnn_conformance.ctypes_kernels.build import BuildError, find_compiler
    if platform.machine() != "x86_64" or not shutil.which("qemu-x86_64"):
        pytest.skip("needs an x86-64 host and qemu-x86_64 (qemu-user)")
    try:
        cc = find_compiler(None)
    except BuildError:
        pytest.skip("no C compiler")
    (tmp_path / "peak.c").write_text(bench.FMA_PEAK_SOURCE)
    (tmp_path / "main.c").write_text(_PEAK_DRIVER)
    exe = tmp_path / "peak"
    subprocess.run([cc, "-O1", "-std=gnu11", "-o", str(exe), str(tmp_path / "main.c"),
                    str(tmp_path / "peak.c"), "-lpthread"], check=True)
    old = subprocess.run(["qemu-x86_64", "-cpu", "Nehalem", str(exe)], capture_output=True,
                         text=True, timeout=120, check=False)
    assert old.returncode == 0, old.stderr
    assert [float(v) for v in old.stdout.split()] == [0.0] * 5
    here = [float(v) for v in subprocess.run([str(exe)], capture_output=True, text=True,
                                             check=True).stdout.split()]
    isas = abi.available_isas(abi.load(build(), layers=()))
    # the vector paths need the instructions the loops use; scalar runs anywhere
    assert [v > 0 for v in here[1:4]] == [i in isas for i in abi.ISA_NAMES[1:4]]


def test_step_is_the_training_step(lib):
    """OursStep == crnn_step_gradients, crnn_clip_gradients(5), crnn_adamw per tensor."""
    inp = bench.make_inputs(width=48, batch=2, seed=5)
    st = bench.OursStep(lib, inp)
    flat0 = st.flat.copy()
    st()
    cfg = model.cfg_array(inp.config)
    sizes = st.sizes
    grads = np.zeros_like(flat0)
    losses, bl, norm = np.zeros(2), np.zeros(1), np.zeros(1)
    P = bench._p
    assert lib.crnn_step_gradients(P(cfg), P(flat0), 2, P(st.widths), P(st.images), P(st.lens),
                                   P(st.tg), P(grads), P(losses), P(bl)) == 0
    assert lib.crnn_clip_gradients(P(grads), P(sizes), len(sizes), 5.0, 1, P(norm)) == 0
    p, m, v = flat0.copy(), np.zeros_like(flat0), np.zeros_like(flat0)
    a = bench.ADAMW
    for o, n, d in zip(st.offs, sizes, st.decay):
        o = int(o)
        assert lib.crnn_adamw(P(p[o:]), P(m[o:]), P(v[o:]), P(grads[o:]), int(n), a["lr"],
                              a["beta1"], a["beta2"], a["eps"], a["wd"], d, a["beta1"],
                              a["beta2"]) == 0
    assert np.array_equal(p.view(np.uint32), st.flat.view(np.uint32))
    assert np.array_equal(grads.view(np.uint32), st.grads.view(np.uint32))


def test_layer_calls_cover_every_entry_point(lib):
    calls = bench.layer_calls(lib, bench.make_inputs(width=32, batch=1))
    assert list(calls) == ["conv0 fwd", "conv1 fwd", "conv2 fwd", "lstm0 fwd", "lstm1 fwd",
                           "linear fwd", "ctc", "linear bwd", "lstm1 bwd", "lstm0 bwd",
                           "conv2 bwd", "conv1 bwd", "conv0 bwd"]
    for fn in calls.values():
        assert fn() == 0


def test_memory_sees_the_scratch():
    m = bench.step_memory(build(), "scalar", 64, 2)
    if m is None:
        pytest.skip("no malloc counter here (needs glibc and a C compiler)")
    assert m["peak"] > 100_000                 # the step's activations and gradients
    assert m["kept"] <= m["peak"]


def test_cli_json_and_table(tmp_path):
    out = tmp_path / "b.json"
    isa = abi.available_isas(abi.load(build(), layers=()))[-1]
    r = subprocess.run([sys.executable, "-m", "crnn_conformance.harness.cli", "bench", "--isa", isa, "--threads", "1,2",
                        "--width", "32", "--batch", "2", "--reps", "3", "--rounds", "2", "--warmup", "1",
                        "--no-gate", "--no-memory", "--fuzz-seconds", "0", "--json", str(out)],
                       capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stderr
    assert "ratio" in r.stdout and "GFLOP/s" in r.stdout and "conv1 bwd" in r.stdout
    assert "of peak" in r.stdout and "share of the fma peak" in r.stdout
    doc = json.loads(out.read_text())
    assert [(c["isa"], c["threads"]) for c in doc["cases"]] == [(isa, 1), (isa, 2)]
    for c in doc["cases"]:
        assert {"isa", "threads", "ours_s", "torch_s", "ratio", "peak_gflops", "of_peak"} <= set(c)
        assert c["ours_s"] > 0
        if doc["peak"]:
            assert c["peak_gflops"] == doc["peak"][isa][str(c["threads"])]
            assert c["of_peak"] == pytest.approx(c["gflops"] / c["peak_gflops"])
        assert set(c["layers_gflops"]) == set(c["layers_s"]) - {"ctc"}
        macs = bench.entry_macs(model.default_config(), 32)
        for k, g in c["layers_gflops"].items():
            assert g == pytest.approx(2 * macs[k] / c["layers_s"][k] / 1e9)
        assert len(c["ours_rounds_s"]) == 2 and c["ours_min_s"] <= min(c["ours_rounds_s"])
        if c["torch_s"] is not None:
            assert c["ratio"] == pytest.approx(c["ours_s"] / c["torch_s"])
            assert c["ratio_rounds"] == pytest.approx(
                [a / b for a, b in zip(c["ours_rounds_s"], c["torch_rounds_s"])])
    assert doc["meta"]["step_flops"] > 0 and doc["meta"]["rounds"] == 2


def test_cli_without_torch(tmp_path):
    r = subprocess.run([sys.executable, "-m", "crnn_conformance.harness.cli", "bench", "--isa", "scalar", "--threads", "1",
                        "--width", "32", "--batch", "1", "--reps", "1", "--warmup", "0", "--no-torch",
                        "--no-layers", "--no-gate", "--no-memory", "--fuzz-seconds", "0",
                        "--json", str(tmp_path / "b.json")],
                       capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stderr
    assert "ours alone" in r.stdout
    c = json.loads((tmp_path / "b.json").read_text())["cases"][0]
    assert c["torch_s"] is None and c["ratio"] is None


@pytest.mark.parametrize("args", [["--isa", "avx9"], ["--threads", "0"], ["--width", "2"],
                                  ["--reps", "2", "--rounds", "3"], ["--rounds", "0"]])
def test_cli_bad_options_exit_2(args):
    r = subprocess.run([sys.executable, "-m", "crnn_conformance.harness.cli", "bench", *args, "--no-gate"],
                       capture_output=True, text=True, check=False)
    assert r.returncode == 2
    assert "cannot run" in r.stderr


def test_timed_blocks_alternate_in_rounds(monkeypatch):
    monkeypatch.setattr(bench_timing.time, "sleep", lambda s: None)
    calls = []
    ours, theirs = (lambda: calls.append("o")), (lambda: calls.append("t"))
    to, tt = bench_timing._timed_blocks(ours, theirs, reps=7, warmup=1, rounds=3)
    # 7 repetitions a side as 3 + 2 + 2, each block after its one warm-up step
    assert [len(b) for b in to] == [3, 2, 2] and [len(b) for b in tt] == [3, 2, 2]
    assert "".join(calls) == "oooo" "tttt" "ooo" "ttt" "ooo" "ttt"
    assert bench_timing._timed_blocks(ours, None, reps=2, warmup=0, rounds=2)[1] == []


def test_without_torch_installed_says_so(monkeypatch):
    monkeypatch.setattr("crnn_conformance.harness.bench.measure.torch_available", lambda: False)
    res = bench.run(["scalar"], (1,), width=32, batch=1, reps=1, warmup=0, layers=False,
                    memory=False, gate=False)
    assert res.cases[0]["torch_s"] is None and res.cases[0]["ratio"] is None
    out = bench.render(res)
    assert "not installed" in out
    assert "--index-url https://download.pytorch.org/whl/cpu" in out   # not the CUDA build


def test_fuzz_throughput_is_measured_and_shown():
    rates = bench.fuzz_rates(seconds=1.0, jobs=1, layers=["dot16", "clip"])
    assert set(rates) == {"dot16", "clip"}
    assert all(r["cases"] > 0 and r["per_s"] > 0 and not r["found"] for r in rates.values())
    res = bench.BenchResult(meta={"batch": 1, "width": 32, "weights": "-", "reps": 1, "warmup": 0,
                                  "step_flops": 1e6, "cpu": "-", "nproc": 2, "torch": None},
                            fuzz={"seconds_per_layer": 1.0, "jobs": 1, "layers": rates})
    assert "fuzz throughput" in bench.render(res) and "dot16 " in bench.render(res)


def test_fuzz_rates_are_shown_against_the_target():
    """bench's fuzz lines name the layers at and below 200 cases a second (docs/performance.md)."""
    layers = {name: {"cases": 1, "seconds": 1.0, "per_s": r, "found": False}
              for name, r in (("dot16", 316.0), ("conv", 102.0), ("clip", 200.0), ("lstm", 199.9))}
    res = bench.BenchResult(meta={"batch": 1, "width": 32, "weights": "-", "reps": 1, "warmup": 0,
                                  "step_flops": 1e6, "cpu": "-", "nproc": 2, "torch": None},
                            fuzz={"seconds_per_layer": 1.0, "jobs": 2, "layers": layers})
    assert "target 200/s a layer: met by dot16, clip; missed by conv, lstm" in bench.render(res)


def test_cli_against_another_port(tmp_path):
    """--against: the paired comparison; the bundled port against itself differs by noise
    only, and the JSON holds B - A with its quartiles around it. One second of pairs: with
    0.2 s (3-4 pairs) one disturbed block under the parallel suite's load moved the median
    by more than half a step."""
    so = str(build())
    r = subprocess.run([sys.executable, "-m", "crnn_conformance.harness.cli", "bench", "--against", so, "--isa",
                        "scalar", "--threads", "1", "--width", "32", "--batch", "1",
                        "--seconds", "1.0", "--json", str(tmp_path / "p.json")],
                       capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stderr
    assert "B - A ms" in r.stdout
    row = json.loads((tmp_path / "p.json").read_text())["paired"][0]
    assert row["isa"] == "scalar" and row["threads"] == 1 and row["pairs"] >= 3
    assert row["diff_q1_s"] <= row["diff_s"] <= row["diff_q3_s"]
    assert abs(row["diff_s"]) < 0.5 * row["a_s"]


def test_cli_against_missing_file_exit_2(tmp_path):
    r = subprocess.run([sys.executable, "-m", "crnn_conformance.harness.cli", "bench", "--against",
                        str(tmp_path / "nope.so")], capture_output=True, text=True, check=False)
    assert r.returncode == 2 and "not found" in r.stderr
