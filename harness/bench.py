"""`crnn-conformance bench`: the whole training step of a port against PyTorch fp32.

One step = what training does per batch: crnn_step_gradients (per line forward, CTC with
scale 1/B, backward; the line gradients summed in line order), crnn_clip_gradients (global
norm, limit 5) and crnn_adamw on every tensor. PyTorch runs the same network in fp32 on the
same weights and lines (generators/torch_model.py): forward, nn.CTCLoss(reduction='none')
then mean, backward, clip_grad_norm_(5), torch.optim.AdamW(foreach=False).

Both run in this process, one after the other inside each repetition (so a busy machine
slows both alike), at the same thread count (crnn_set_threads / torch.set_num_threads),
after warm-up repetitions; the reported time is the median. Also measured: the port's layer
entry points on one line of the batch (median of repeated calls), the step's arithmetic rate
(2 flops per multiply-add of every dot, counted from the config), the peak memory of a step
and the gate's own wall time (docs/performance.md describes every method).
"""
from __future__ import annotations

import ctypes
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from crnn_conformance import fixtures
from crnn_conformance.ctypes_kernels import abi
from crnn_conformance.generators import model
from crnn_conformance.harness.runner import cpu_info

MODEL_PATH = fixtures.model_path()
CLIP_LIMIT = 5.0
ADAMW = {"lr": 1e-3, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "wd": 1e-4}


# ------------------------------------------------------------------------------ inputs

@dataclass
class Inputs:
    config: dict
    params: dict                  # name -> float32 array (param_specs order)
    images: list                  # [H][W] float32 per line
    targets: list                 # int32 class ids per line
    weights: str                  # where the weights came from

    @property
    def batch(self) -> int:
        return len(self.images)


def make_inputs(width: int = 256, batch: int = 4, seed: int = 1) -> Inputs:
    """crnn-v0 with the bundled trained weights (random ones if the container is absent)
    and `batch` synthetic text lines of 32 x width."""
    from crnn_conformance.generators import lines
    if MODEL_PATH.exists():
        from crnn_conformance.generators.container import load_container
        config, params = load_container(str(MODEL_PATH))
        where = f"the trained model ({MODEL_PATH.name})"
    else:
        config = model.default_config()
        params = model.init_params(config, np.random.default_rng(seed))
        where = f"random (seed {seed})"
    T = model.steps_for_width(config, width)
    max_len = max(1, min(lines.MAX_LEN, (T - 1) // 2))
    rng = np.random.default_rng(seed)
    texts = [lines.random_text(rng, min(lines.MIN_LEN, max_len), max_len) for _ in range(batch)]
    images, targets = lines.make_batch(seed, batch, width, texts)
    return Inputs(config, params, images, [np.asarray(t, np.int32) for t in targets], where)


# ------------------------------------------------------------------------------ flops

def step_macs(config: dict, width: int, batch: int) -> dict:
    """Multiply-adds of every dot16 of one training step, per layer kind (per batch)."""
    geo = model.block_geometry(config, width)
    H, K = config["hidden"], config["classes"]
    T = geo[-1]["Wp"]
    out = {}
    for n, g in enumerate(geo):
        P, O, KP = g["Hc"] * g["Wc"], g["out"], model.kpadded(g["kh"] * g["kw"] * g["C"])
        out[f"conv{n}"] = P * O * KP * (2 + (n > 0)) + P * O     # fwd, dW, dx (n > 0), db
    inp = model.sequence_features(config)
    for layer in range(config["lstm_layers"]):
        G = 4 * H
        out[f"lstm{layer}"] = (T * 2 * G * inp * 3              # x·W_ih, dW_ih, dx
                               + 2 * T * G * H * 3              # recurrence fwd, bwd, dW_hh
                               + 2 * G * T)                     # db
        inp = 2 * H
    out["linear"] = T * K * 2 * H * 3 + K * T
    macs = {k: v * batch for k, v in out.items()}
    macs["clip"] = sum(int(np.prod(s.shape)) for s in model.param_specs(config))
    return macs


# ------------------------------------------------------------------------------ ours

def _p(a):
    return a.ctypes.data


class OursStep:
    """The port's training step on fixed inputs; call() runs one step (weights change)."""

    def __init__(self, lib, inp: Inputs):
        self.lib = lib
        cfg = inp.config
        self.cfg = model.cfg_array(cfg)
        self.flat = model.flatten(cfg, inp.params)
        specs = model.param_specs(cfg)
        self.sizes = np.array([int(np.prod(s.shape)) for s in specs], np.int64)
        self.offs = np.concatenate([[0], np.cumsum(self.sizes)]).astype(np.int64)
        self.decay = [1 if s.decay else 0 for s in specs]
        self.widths = np.array([im.shape[1] for im in inp.images], np.int32)
        self.images = np.ascontiguousarray(np.concatenate([im.ravel() for im in inp.images]),
                                           np.float32)
        self.lens = np.array([len(t) for t in inp.targets], np.int32)
        self.tg = np.ascontiguousarray(np.concatenate(inp.targets), np.int32)
        self.B = inp.batch
        self.grads = np.zeros_like(self.flat)
        self.m = np.zeros_like(self.flat)
        self.v = np.zeros_like(self.flat)
        self.losses = np.zeros(self.B)
        self.bl = np.zeros(1)
        self.norm = np.zeros(1)
        self.b1t = self.b2t = 1.0

        # every call's arguments built once (the step itself is what is timed, not ctypes)
        a = ADAMW
        self._step = lib.crnn_step_gradients
        self._step_args = (_p(self.cfg), _p(self.flat), self.B, _p(self.widths), _p(self.images),
                           _p(self.lens), _p(self.tg), _p(self.grads), _p(self.losses), _p(self.bl))
        self._clip = lib.crnn_clip_gradients
        self._clip_args = (_p(self.grads), _p(self.sizes), len(self.sizes), CLIP_LIMIT, 1,
                           _p(self.norm))
        self._adamw = lib.crnn_adamw
        f = self.flat.itemsize
        self._adamw_args = [(_p(self.flat) + int(o) * f, _p(self.m) + int(o) * f,
                             _p(self.v) + int(o) * f, _p(self.grads) + int(o) * f, int(n),
                             a["lr"], a["beta1"], a["beta2"], a["eps"], a["wd"], d)
                            for o, n, d in zip(self.offs, self.sizes, self.decay)]

    def __call__(self):
        a = ADAMW
        abi.check(self._step(*self._step_args), "crnn_step_gradients")
        abi.check(self._clip(*self._clip_args), "crnn_clip_gradients")
        self.b1t *= a["beta1"]
        self.b2t *= a["beta2"]
        adamw, b1t, b2t = self._adamw, self.b1t, self.b2t
        for args in self._adamw_args:
            rc = adamw(*args, b1t, b2t)
            if rc:
                abi.check(rc, "crnn_adamw")


def layer_calls(lib, inp: Inputs) -> dict:
    """One line (the batch's first) through the port's layer entry points, keeping every
    intermediate; returns {label: zero-argument callable} for each entry point (the callables
    hold the buffers they point into)."""
    cfg, prm = inp.config, inp.params
    geo = model.block_geometry(cfg, inp.images[0].shape[1])
    f32 = lambda *s: np.zeros(s, np.float32)                      # noqa: E731
    calls, x = {}, np.ascontiguousarray(inp.images[0], np.float32)
    saved = []
    for n, g in enumerate(geo):
        P = g["Hc"] * g["Wc"]
        conv, pooled = f32(P, g["out"]), f32(g["Hp"], g["Wp"], g["out"])
        win = np.zeros((g["Hp"], g["Wp"], g["out"]), np.int32)
        W, b = prm[f"conv{n}.W"], prm[f"conv{n}.b"]
        args = (_p(x), g["H"], g["W"], g["C"], _p(W), _p(b), g["out"], g["kh"], g["kw"],
                g["padH"], g["padW"], g["poolH"], g["poolW"], _p(conv), _p(pooled), _p(win))
        calls[f"conv{n} fwd"] = (lambda a=args: lib.crnn_conv_forward(*a))
        abi.check(lib.crnn_conv_forward(*args), "crnn_conv_forward")
        saved.append((x, conv, pooled, win))
        x = pooled
    Hp, T, C = x.shape
    seq = np.ascontiguousarray(x.transpose(1, 0, 2).reshape(T, Hp * C))
    H = cfg["hidden"]
    lstm_saved, inp_l = [], seq
    for layer in range(cfg["lstm_layers"]):
        I = inp_l.shape[1]
        Wih = np.ascontiguousarray(np.stack([prm[f"lstm{layer}.fwd.W_ih"], prm[f"lstm{layer}.rev.W_ih"]]))
        Whh = np.ascontiguousarray(np.stack([prm[f"lstm{layer}.fwd.W_hh"], prm[f"lstm{layer}.rev.W_hh"]]))
        bb = np.ascontiguousarray(np.stack([prm[f"lstm{layer}.fwd.b"], prm[f"lstm{layer}.rev.b"]]))
        out, gates = f32(T, 2 * H), f32(2, T, 4 * H)
        c, tc, hp = f32(2, T, H), f32(2, T, H), f32(2, T, H)
        args = (_p(inp_l), T, I, H, _p(Wih), _p(Whh), _p(bb), _p(out), _p(gates), _p(c), _p(tc), _p(hp))
        # the callable holds bb: nothing else does (freed, its memory was read by every
        # timed call: AddressSanitizer found it, and it made a timed ctc fail once in ~10 runs)
        calls[f"lstm{layer} fwd"] = (lambda a=args, k=bb: lib.crnn_lstm_forward(*a))
        abi.check(lib.crnn_lstm_forward(*args), "crnn_lstm_forward")
        lstm_saved.append((inp_l, Wih, Whh, gates, c, tc, hp, out))
        inp_l = out
    K = cfg["classes"]
    logits = f32(T, K)
    args = (_p(inp_l), _p(prm["fc.W"]), _p(prm["fc.b"]), T, 2 * H, K, _p(logits))
    calls["linear fwd"] = (lambda a=args: lib.crnn_linear_forward(*a))
    abi.check(lib.crnn_linear_forward(*args), "crnn_linear_forward")
    dlog, loss = f32(T, K), np.zeros(1)
    tg = inp.targets[0]
    args = (_p(logits), T, K, _p(tg), len(tg), 1.0 / inp.batch, _p(loss), _p(dlog))
    calls["ctc"] = (lambda a=args: lib.crnn_ctc(*a))
    abi.check(lib.crnn_ctc(*args), "crnn_ctc")
    dW, db, dx = f32(K, 2 * H), f32(K), f32(T, 2 * H)
    args = (_p(inp_l), _p(prm["fc.W"]), _p(dlog), T, 2 * H, K, _p(dx), _p(dW), _p(db))
    calls["linear bwd"] = (lambda a=args: lib.crnn_linear_backward(*a))
    abi.check(lib.crnn_linear_backward(*args), "crnn_linear_backward")
    dout = dx
    for layer in reversed(range(cfg["lstm_layers"])):
        xin, Wih, Whh, gates, c, tc, hp, _ = lstm_saved[layer]
        I = xin.shape[1]
        gWih, gWhh, gb, dxl = f32(2, 4 * H, I), f32(2, 4 * H, H), f32(2, 4 * H), f32(T, I)
        args = (_p(xin), T, I, H, _p(Wih), _p(Whh), _p(gates), _p(c), _p(tc), _p(hp), _p(dout),
                _p(gWih), _p(gWhh), _p(gb), _p(dxl))
        calls[f"lstm{layer} bwd"] = (lambda a=args, k=(gWih, gWhh, gb, dxl, dout): lib.crnn_lstm_backward(*a))
        abi.check(lib.crnn_lstm_backward(*args), "crnn_lstm_backward")
        dout = dxl
    dp = np.ascontiguousarray(dout.reshape(T, Hp, C).transpose(1, 0, 2))
    for n in reversed(range(len(geo))):
        g = geo[n]
        xin, conv, pooled, win = saved[n]
        W = prm[f"conv{n}.W"]
        gW, gb = f32(*W.shape), f32(g["out"])
        gx = f32(g["H"], g["W"], g["C"]) if n > 0 else None
        args = (_p(xin), g["H"], g["W"], g["C"], _p(W), g["out"], g["kh"], g["kw"], g["padH"],
                g["padW"], g["poolH"], g["poolW"], _p(dp), _p(win), _p(gW), _p(gb),
                None if gx is None else _p(gx))
        calls[f"conv{n} bwd"] = (lambda a=args, k=(gW, gb, gx, dp): lib.crnn_conv_backward(*a))
        abi.check(lib.crnn_conv_backward(*args), "crnn_conv_backward")
        dp = gx
    order = [f"conv{n} fwd" for n in range(len(geo))] + \
            [f"lstm{i} fwd" for i in range(cfg["lstm_layers"])] + ["linear fwd", "ctc", "linear bwd"] + \
            [f"lstm{i} bwd" for i in reversed(range(cfg["lstm_layers"]))] + \
            [f"conv{n} bwd" for n in reversed(range(len(geo)))]
    keep = (saved, lstm_saved, seq, logits, dlog, loss, dW, db, dx, inp)

    def holding(fn, name):
        def call():          # an error code must not pass for a fast call
            rc = fn()
            if rc or keep is None:
                abi.check(rc, name)
            return rc
        return call
    return {k: holding(calls[k], k) for k in order}


def _timed_blocks(ours, theirs, reps: int, warmup: int, rounds: int = 2):
    """Per-repetition seconds of ours and theirs, in alternating blocks (ours, theirs, ours,
    theirs, ...), each block after its own warm-up and a pause: a runtime's idle threads
    spin for a while after their last parallel region (OpenMP, OpenBLAS, our pool), and
    would otherwise take the cores the other side needs."""
    to, tt = [], []
    per = [reps // rounds + (r < reps % rounds) for r in range(rounds)]
    for n in per:
        for fn, out in ((ours, to), (theirs, tt)):
            if fn is None or n == 0:
                continue
            time.sleep(0.25)
            for _ in range(warmup):
                fn()
            for _ in range(n):
                t0 = time.perf_counter()
                fn()
                out.append(time.perf_counter() - t0)
    return to, tt


def _median_time(fn, reps: int, min_time: float = 0.0) -> float:
    ts = []
    t_end = time.perf_counter() + min_time
    while len(ts) < reps or time.perf_counter() < t_end:
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
        if len(ts) >= 50 * reps:
            break
    return statistics.median(ts)


# ------------------------------------------------------------------------------ torch

class TorchStep:
    def __init__(self, inp: Inputs, threads: int):
        import torch
        from crnn_conformance.generators import torch_model
        self.torch = torch
        torch.set_num_threads(threads)
        cfg = inp.config
        self.net = torch_model.build(cfg, inp.params, torch.float32)
        decay, no_decay = [], []
        for name, p in self.net.named_parameters():
            if p.requires_grad:
                (decay if p.dim() > 1 else no_decay).append(p)
        a = ADAMW
        self.opt = torch.optim.AdamW([{"params": decay, "weight_decay": a["wd"]},
                                      {"params": no_decay, "weight_decay": 0.0}],
                                     lr=a["lr"], betas=(a["beta1"], a["beta2"]), eps=a["eps"],
                                     foreach=False)
        self.params = decay + no_decay
        self.x = torch.from_numpy(np.stack(inp.images))
        self.tg = torch.from_numpy(np.concatenate(inp.targets).astype(np.int64))
        self.tl = torch.tensor([len(t) for t in inp.targets], dtype=torch.long)
        T = model.steps_for_width(cfg, inp.images[0].shape[1])
        self.il = torch.full((inp.batch,), T, dtype=torch.long)
        self.ctc = torch.nn.CTCLoss(blank=0, reduction="none")

    def __call__(self):
        torch = self.torch
        self.opt.zero_grad(set_to_none=False)
        lp = self.net(self.x)
        loss = self.ctc(lp, self.tg, self.il, self.tl).mean()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.params, CLIP_LIMIT)
        self.opt.step()


def torch_available() -> bool:
    try:
        import torch  # noqa: F401
        return True
    except ImportError:
        return False


# ------------------------------------------------------------------------------ memory

# A malloc counter preloaded into a fresh process (glibc): every allocation and release of
# the process goes through it, so the heap bytes in use (malloc_usable_size of each live
# block) and their peak are known exactly. Thread stacks (mmap) are not heap and not counted.
HEAP_COUNTER_SOURCE = r"""
#include <stddef.h>
#include <malloc.h>
extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
extern void __libc_free(void *);
static long long cur, peak;
static void add(long long n)
{
    long long c = __atomic_add_fetch(&cur, n, __ATOMIC_RELAXED);
    long long p = __atomic_load_n(&peak, __ATOMIC_RELAXED);
    while (c > p && !__atomic_compare_exchange_n(&peak, &p, c, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {}
}
void *malloc(size_t n) { void *p = __libc_malloc(n); if (p) add((long long)malloc_usable_size(p)); return p; }
void *calloc(size_t a, size_t b) { void *p = __libc_calloc(a, b); if (p) add((long long)malloc_usable_size(p)); return p; }
void free(void *p) { if (p) add(-(long long)malloc_usable_size(p)); __libc_free(p); }
void *realloc(void *q, size_t n)
{
    long long old = q ? (long long)malloc_usable_size(q) : 0;
    void *p = __libc_realloc(q, n);
    if (p) add((long long)malloc_usable_size(p) - old);
    else if (q && n == 0) add(-old);
    return p;
}
void *memalign(size_t a, size_t n) { void *p = __libc_memalign(a, n); if (p) add((long long)malloc_usable_size(p)); return p; }
void *aligned_alloc(size_t a, size_t n) { return memalign(a, n); }
void *valloc(size_t n) { return memalign(4096, n); }
int posix_memalign(void **r, size_t a, size_t n)
{
    void *p = __libc_memalign(a, n);
    if (!p) return 12;
    add((long long)malloc_usable_size(p));
    *r = p;
    return 0;
}
long long crnn_h_heap_current(void) { return __atomic_load_n(&cur, __ATOMIC_RELAXED); }
long long crnn_h_heap_peak(void) { return __atomic_load_n(&peak, __ATOMIC_RELAXED); }
void crnn_h_heap_reset_peak(void) { __atomic_store_n(&peak, crnn_h_heap_current(), __ATOMIC_RELAXED); }
"""

_MEM_CHILD = r"""
import ctypes, json, sys
from crnn_conformance import fixtures
from crnn_conformance.ctypes_kernels import abi
from crnn_conformance.harness import bench
counter, path, isa, threads, width, batch = sys.argv[1:7]
h = ctypes.CDLL(counter)
for f in ("crnn_h_heap_current", "crnn_h_heap_peak"):
    getattr(h, f).restype = ctypes.c_longlong
lib = abi.load(path, layers=("step", "clip", "adamw"))
abi.check(lib.crnn_set_isa(abi.ISA_NAMES.index(isa)), "crnn_set_isa")
abi.check(lib.crnn_set_threads(int(threads)), "crnn_set_threads")
step = bench.OursStep(lib, bench.make_inputs(int(width), int(batch)))
base = h.crnn_h_heap_current()
h.crnn_h_heap_reset_peak()
step()
print(json.dumps({"peak": h.crnn_h_heap_peak() - base, "kept": h.crnn_h_heap_current() - base}))
"""


def step_memory(path, isa: str, width: int, batch: int, threads: int = 1) -> dict | None:
    """Heap bytes of one training step (the first, so every scratch buffer is allocated in
    it): a fresh process with a preloaded malloc counter loads the port and allocates every
    caller-owned buffer (weights, gradients, images, optimizer state); then the peak of heap
    bytes in use during the step above that baseline ("peak") and what the step keeps for
    the next one ("kept": the per-thread scratch buffers). None where it cannot be measured."""
    from crnn_conformance.ctypes_kernels.build import BuildError, build_helper
    try:
        counter = build_helper("crnnheapcount", HEAP_COUNTER_SOURCE)
    except BuildError:
        return None
    env = dict(os.environ, LD_PRELOAD=str(counter))
    r = subprocess.run([sys.executable, "-c", _MEM_CHILD, str(counter), str(path), isa,
                        str(threads), str(width), str(batch)],
                       capture_output=True, text=True, env=env, check=False)
    if r.returncode != 0 or not r.stdout.strip():
        return None
    return json.loads(r.stdout.strip().splitlines()[-1])


def gate_wall_time() -> tuple[float, int]:
    """Seconds of `crnn-conformance gate -q` (defaults: every layer, ISA and thread count)
    in a subprocess, and its exit code."""
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "crnn_conformance.harness.cli", "gate", "-q"], capture_output=True,
                       text=True, check=False)
    return time.perf_counter() - t0, r.returncode


# ------------------------------------------------------------------------------ run

@dataclass
class BenchResult:
    cases: list = field(default_factory=list)
    memory: dict = field(default_factory=dict)
    gate: dict | None = None
    meta: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        return {"cases": self.cases, "memory": self.memory, "gate": self.gate, "meta": self.meta}


def run(isas=None, threads=(1, 2), width=256, batch=4, reps=10, warmup=3, port=None,
        cc=None, opt=None, with_torch=True, layers=True, memory=True, gate=True,
        progress=None) -> BenchResult:
    from crnn_conformance.ctypes_kernels import build as B
    opt = opt or B.DEFAULT_OPT
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
        "width": width, "batch": batch, "reps": reps, "warmup": warmup, "weights": inp.weights,
        "port": str(path), "build": None if port else {**B.describe(cc, opt)},
        "torch": None, "step_flops": flops, "macs_by_layer": macs,
        "cpu": cpu_info()["model"], "nproc": os.cpu_count(),
    }
    if use_torch:
        import torch
        res.meta["torch"] = torch.__version__
    res.meta["torch_note"] = (None if use_torch else "PyTorch not installed (pip install -e "
                              "'.[pytorch]')" if with_torch else "PyTorch not run (--no-torch)")
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
                to, tt = _timed_blocks(ours, theirs, reps, warmup)
                case = {"isa": isa, "threads": t, "ours_s": statistics.median(to),
                        "torch_s": statistics.median(tt) if tt else None}
                case["ratio"] = case["ours_s"] / case["torch_s"] if tt else None
                case["ours_min_s"] = min(to)
                case["torch_min_s"] = min(tt) if tt else None
                case["gflops"] = flops / case["ours_s"] / 1e9
                if layers:
                    time.sleep(0.25)
                    calls = layer_calls(lib, inp)
                    case["layers_s"] = {k: _median_time(f, 7, 0.02) for k, f in calls.items()}
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
    return res


def paired(path_a, path_b, isas=None, threads=(1,), width=256, batch=4, seconds=10.0,
           block=6, warm=2) -> list[dict]:
    """A paired comparison of two ports' training steps (e.g. a build before and after a
    change) in one process: blocks of `block` steps of A then of B, alternating, each block's
    median over its steps after the first `warm` (caches warm with that port's own buffers),
    for `seconds` per ISA x threads. The machine's drift hits both sides of a pair alike, so
    the median of the per-pair differences resolves changes well below the run-to-run spread
    of either side. Returns one dict per case: medians of A and B, and the difference's
    median and quartiles (B - A, seconds)."""
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
                for st, acc in zip(steps, (a, b)):
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


def render_paired(rows, name_a, name_b) -> str:
    lines = [f"paired training steps, warm blocks: A = {name_a}", f"{'':30s}B = {name_b}", "",
             f"{'isa':8s} {'threads':>7s} {'A ms':>8s} {'B ms':>8s} {'B - A ms':>9s} "
             f"{'(quartiles)':>17s} {'pairs':>6s}", "-" * 66]
    for r in rows:
        lines.append(f"{r['isa']:8s} {r['threads']:7d} {r['a_s'] * 1e3:8.2f} {r['b_s'] * 1e3:8.2f} "
                     f"{r['diff_s'] * 1e3:+9.3f} {r['diff_q1_s'] * 1e3:+8.3f}/{r['diff_q3_s'] * 1e3:+.3f} "
                     f"{r['pairs']:6d}")
    return "\n".join(lines)


def render(res: BenchResult) -> str:
    m = res.meta
    lines = [f"crnn-v0 training step: batch {m['batch']} x 32x{m['width']} "
             f"(forward, CTC, backward, batch sum, clip, AdamW); weights {m['weights']}",
             f"median of {m['reps']} after {m['warmup']} warm-up; {m['step_flops'] / 1e6:.0f} MFLOP "
             f"per step (2 per multiply-add of every dot); cpu {m['cpu']}, {m['nproc']} cores"]
    if m["torch"]:
        lines.append(f"PyTorch {m['torch']} fp32 in the same process, same threads")
    else:
        lines.append(f"{m.get('torch_note') or 'PyTorch not run'}: ours alone, no ratios")
    lines.append("")
    hdr = f"{'isa':<8}{'threads':>8}{'ours ms':>10}{'torch ms':>10}{'ratio':>8}{'GFLOP/s':>9}"
    lines += [hdr, "-" * len(hdr)]
    for c in res.cases:
        tt = f"{c['torch_s'] * 1e3:10.2f}" if c["torch_s"] else f"{'-':>10}"
        ra = f"{c['ratio']:8.2f}" if c["ratio"] else f"{'-':>8}"
        lines.append(f"{c['isa']:<8}{c['threads']:>8}{c['ours_s'] * 1e3:10.2f}{tt}{ra}{c['gflops']:9.1f}")
    if res.cases and "layers_s" in res.cases[0]:
        lines += ["", "layer entry points on one line (ms, median):"]
        keys = list(res.cases[0]["layers_s"])
        cols = [f"{c['isa']}x{c['threads']}" for c in res.cases]
        w = max(9, max(len(c) for c in cols) + 1)
        lines.append(f"{'':<12}" + "".join(f"{c:>{w}}" for c in cols))
        for k in keys:
            lines.append(f"{k:<12}" + "".join(f"{c['layers_s'][k] * 1e3:{w}.3f}" for c in res.cases))
        lines.append(f"{'sum':<12}" + "".join(f"{sum(c['layers_s'].values()) * 1e3:{w}.3f}"
                                               for c in res.cases))
    if res.memory:
        mm = res.memory
        f = lambda d, k: "?" if not d else f"{d[k] / 2 ** 20:.1f} MiB"   # noqa: E731
        lines += ["", f"memory of a step ({mm['isa']}; {mm['method']}):"]
        for t, d in mm["by_threads"].items():
            lines.append(f"  {t} thread{'s' if t != '1' else ''}: peak {f(d['line'], 'peak')} for one line, "
                         f"{f(d['batch'], 'peak')} for the batch of {mm['batch']} "
                         f"(kept for the next step: {f(d['batch'], 'kept')})")
    if res.gate:
        lines.append(f"gate wall time (crnn-conformance gate -q, every layer x ISA x threads 1,2,3,7): "
                     f"{res.gate['wall_s']:.1f} s (exit {res.gate['exit_code']})")
    return "\n".join(lines)
