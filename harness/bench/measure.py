"""A bench run: the step per ISA x threads against PyTorch, the layers, memory, the gate's
wall time and the fuzzer's throughput; and the paired comparison of two ports."""
from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from ...ctypes_kernels import abi
from ..runner import cpu_info

from .inputs import entry_macs, make_inputs, step_macs
from .memory import step_memory
from .ours import OursStep, layer_calls
from .peak import fma_peak
from .timing import DEFAULT_ROUNDS, _median_time, _timed_blocks
from .torch_step import TorchStep, torch_available


# the CPU-only wheel: the default index's torch is a CUDA build of several GB
TORCH_MISSING = ("PyTorch not installed (its CPU-only wheel: pip install torch==2.13.0 "
                 "--index-url https://download.pytorch.org/whl/cpu)")


def gate_wall_time() -> tuple[float, int]:
    """Seconds of `crnn-conformance gate -q` (defaults: every layer, ISA and thread count)
    in a subprocess, and its exit code."""
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "crnn_conformance.harness.cli", "gate", "-q"], capture_output=True,
                       text=True, check=False)
    return time.perf_counter() - t0, r.returncode



@dataclass
class BenchResult:
    cases: list = field(default_factory=list)
    memory: dict = field(default_factory=dict)
    gate: dict | None = None
    meta: dict = field(default_factory=dict)
    fuzz: dict | None = None      # layer -> cases per second (harness/bench/fuzz.py)
    peak: dict | None = None      # isa -> threads -> GFLOP/s of fma chains (harness/bench/peak.py)

    def to_json(self) -> dict:
        return {"cases": self.cases, "memory": self.memory, "gate": self.gate, "meta": self.meta,
                "fuzz": self.fuzz, "peak": self.peak}


def run(isas=None, threads=(1, 2), width=256, batch=4, reps=10, warmup=3, port=None,
        cc=None, opt=None, with_torch=True, layers=True, memory=True, gate=True,
        progress=None, fuzz_seconds=0.0, fuzz_jobs=2, rounds=DEFAULT_ROUNDS) -> BenchResult:
    from ...ctypes_kernels import build as B
    opt = opt or B.DEFAULT_OPT
    rounds = max(1, min(rounds, reps))      # (a round of no repetitions would not be one)
    path = Path(port) if port else B.build(cc=cc, opt=opt)
    lib = abi.load(path, layers=("conv", "lstm", "linear", "ctc", "step", "clip", "adamw"))
    available = abi.available_isas(lib)
    isas = list(isas or available)
    missing = [i for i in isas if i not in available]
    if missing:
        raise abi.PortError(f"ISA path(s) {', '.join(missing)} not available (this CPU and port: "
                            f"{', '.join(available)})")
    inp = make_inputs(width, batch)
    macs = step_macs(inp.config, width, batch)
    flops = 2 * sum(macs.values())
    use_torch = with_torch and torch_available()
    res = BenchResult()
    res.meta = {
        "width": width, "batch": batch, "reps": reps, "warmup": warmup, "rounds": rounds,
        "weights": inp.weights,
        "port": str(path), "build": None if port else {**B.describe(cc, opt)},
        "torch": None, "step_flops": flops, "macs_by_layer": macs,
        "cpu": cpu_info()["model"], "nproc": os.cpu_count(),
    }
    if use_torch:
        import torch
        res.meta["torch"] = torch.__version__
    res.meta["torch_note"] = (None if use_torch else TORCH_MISSING if with_torch
                              else "PyTorch not run (--no-torch)")
    if progress:
        progress("fma peak")
    res.peak = fma_peak(isas, threads, cc=cc)
    one_line = entry_macs(inp.config, width)
    isa0, th0 = lib.crnn_get_isa(), lib.crnn_get_threads()
    try:
        for isa in isas:
            abi.check(lib.crnn_set_isa(abi.ISA_NAMES.index(isa)), "crnn_set_isa")
            for t in threads:
                if progress:
                    progress(f"{isa} x {t} thread{'s' if t > 1 else ''}")
                abi.check(lib.crnn_set_threads(t), "crnn_set_threads")
                ours = OursStep(lib, inp)
                theirs = TorchStep(inp, t) if use_torch else None
                rto, rtt = _timed_blocks(ours, theirs, reps, warmup, rounds)
                to, tt = sum(rto, []), sum(rtt, [])
                case = {"isa": isa, "threads": t, "ours_s": statistics.median(to),
                        "torch_s": statistics.median(tt) if tt else None}
                case["ratio"] = case["ours_s"] / case["torch_s"] if tt else None
                case["ours_min_s"] = min(to)
                case["torch_min_s"] = min(tt) if tt else None
                # a round's two blocks run seconds apart, so a phase of the host that slows
                # one slows the other: the rounds' ratios show how far the phases moved it
                case["ours_rounds_s"] = [statistics.median(b) for b in rto]
                case["torch_rounds_s"] = [statistics.median(b) for b in rtt] if tt else None
                case["ratio_rounds"] = ([a / b for a, b in zip(case["ours_rounds_s"], case["torch_rounds_s"])]
                                        if tt else None)
                case["gflops"] = flops / case["ours_s"] / 1e9
                peak = (res.peak or {}).get(isa, {}).get(t)
                case["peak_gflops"] = peak
                case["of_peak"] = case["gflops"] / peak if peak else None
                if layers:
                    time.sleep(0.25)
                    calls = layer_calls(lib, inp)
                    case["layers_s"] = {k: _median_time(f, 7, 0.02) for k, f in calls.items()}
                    case["layers_gflops"] = {k: 2 * one_line[k] / s / 1e9
                                             for k, s in case["layers_s"].items() if k in one_line}
                res.cases.append(case)
    finally:
        lib.crnn_set_isa(isa0)
        lib.crnn_set_threads(th0)
    if memory:
        best = isas[-1]
        res.memory = {"method": "heap bytes in use (preloaded malloc counter), peak during the "
                                "first step of a fresh process above its inputs",
                      "isa": best, "batch": batch, "width": width, "by_threads": {}}
        for t in sorted({1, max(threads)}):
            one, full = step_memory(path, best, width, 1, t), step_memory(path, best, width, batch, t)
            res.memory["by_threads"][str(t)] = {"line": one, "batch": full}
    if gate:
        if progress:
            progress("gate")
        secs, rc = gate_wall_time()
        res.gate = {"wall_s": secs, "exit_code": rc}
    if fuzz_seconds > 0:
        from .fuzz import TARGET_PER_S, fuzz_rates
        res.fuzz = {"seconds_per_layer": fuzz_seconds, "jobs": fuzz_jobs,
                    "target_per_s": TARGET_PER_S,
                    "layers": fuzz_rates(port, fuzz_seconds, fuzz_jobs, progress=progress)}
    return res


def paired(path_a, path_b, isas=None, threads=(1,), width=256, batch=4, seconds=10.0,
           block=6, warm=2) -> list[dict]:
    """A paired comparison of two ports' training steps (e.g. a build before and after a
    change) in one process: blocks of `block` steps of A then of B, alternating, each block's
    median over its steps after the first `warm` (caches warm with that port's own buffers),
    for `seconds` per ISA x threads. The machine's drift hits both sides of a pair alike, so
    the median of the per-pair differences resolves changes well below the run-to-run spread
    of either side. Which port runs first alternates from pair to pair. A bias of the loading
    order can remain (the port loaded second, its code and data placed differently): running
    again with the two swapped tells it apart. Returns one dict per case: medians of A and B,
    and the difference's median and quartiles (B - A, seconds)."""
    inp = make_inputs(width, batch)
    libs = [abi.load(p, layers=("conv", "lstm", "linear", "ctc", "step", "clip", "adamw"))
            for p in (path_a, path_b)]
    common = [i for i in abi.available_isas(libs[0]) if i in abi.available_isas(libs[1])]
    out = []
    for isa in list(isas or common):
        if isa not in common:
            raise abi.PortError(f"ISA path {isa} not available in both ports (both have: "
                                f"{', '.join(common)})")
        for t in threads:
            steps = []
            for lib in libs:
                abi.check(lib.crnn_set_isa(abi.ISA_NAMES.index(isa)), "crnn_set_isa")
                abi.check(lib.crnn_set_threads(t), "crnn_set_threads")
                st = OursStep(lib, inp)
                st()
                steps.append(st)
            a, b = [], []
            t0 = time.perf_counter()
            while time.perf_counter() - t0 < seconds or len(a) < 3:
                # which port runs first alternates from pair to pair: a side that always
                # ran second was measured slower (a copy of one build against itself)
                first = len(a) % 2
                order = [(steps[0], a), (steps[1], b)][::-1 if first else 1]
                for st, acc in order:
                    ts = []
                    for i in range(block):
                        s0 = time.perf_counter()
                        st()
                        if i >= warm:
                            ts.append(time.perf_counter() - s0)
                    acc.append(statistics.median(ts))
            d = sorted(y - x for x, y in zip(a, b))
            out.append({"isa": isa, "threads": t, "pairs": len(d), "a_s": statistics.median(a),
                        "b_s": statistics.median(b), "diff_s": statistics.median(d),
                        "diff_q1_s": d[len(d) // 4], "diff_q3_s": d[(3 * len(d)) // 4]})
    return out
