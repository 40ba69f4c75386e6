"""PyTorch references for the pytorch tier: the trained crnn-v0 in fp32 and in float64.

Every pytorch-tier fixture (generators/cases/pytorch_*.py) is built from this module:

- the weights are the trained container's fp16 values (fixtures/model/crnn-v0.h5) widened to
  fp32, and to float64 for the float64 run (both widenings are exact);
- the lines are real synthetic lines (generators/lines.py), the targets their texts;
- a run of one line keeps every intermediate the per-layer fixtures need: each conv block's
  input, conv output, pooled output and PyTorch's pool indices, each LSTM layer's input and
  output, the classifier's input and the logits, and the gradient of the loss with respect
  to each of them (the layers' real upstream gradients);
- each layer can be rerun alone, in either dtype, on given inputs (the per-layer fixtures
  give the fp32 and the float64 run the same fp32 inputs, so a layer's Floor is that
  layer's own rounding);
- Floor(tensor) = max |fp32 - float64| over the tensor's elements.

The network is generators/torch_model.py's (conv -> ReLU -> max_pool2d blocks, the (h, c)
sequence map, bidirectional nn.LSTM with bias_hh fixed at 0, Linear), written here as a
functional forward so the intermediates are reachable: one single-layer bidirectional
nn.LSTM per layer (same weights; tests/test_pytorch_tier.py checks that the log-probs equal
torch_model.CRNN's). The loss is nn.functional.ctc_loss with reduction='none' (blank 0), and
the batch loss is the plain mean over the lines (sum / B), as in the spec: each line's logit
gradient is scaled by 1/B, not by 1/(B * target length) as reduction='mean' would.

Determinism: one torch thread (torch.set_num_threads(1)) while a fixture is built, no
randomness. On the same machine and torch version a rebuild is bit for bit the same; on
another CPU or torch version the fp32 values may differ within their Floors, which is what
`regen-fixtures --check` then allows, on the same inputs (generators/fixture_compare.py).
"""
from __future__ import annotations

import contextlib
import json
import platform
import subprocess
from pathlib import Path

import numpy as np

from crnn_conformance import fixtures
from crnn_conformance.generators import container, lines, model
from crnn_conformance.generators.torch_layout import (conv_weight_from_torch, conv_weight_to_torch,
                                                      winners_from_torch)

ROOT = Path(__file__).resolve().parent.parent
MODEL_PATH = fixtures.model_path()
DTYPES = ("fp32", "f64")


def _torch():
    import torch
    return torch


def tdtype(kind: str):
    torch = _torch()
    return {"fp32": torch.float32, "f64": torch.float64}[kind]


def np_dtype(kind: str):
    return {"fp32": np.float32, "f64": np.float64}[kind]


@contextlib.contextmanager
def deterministic():
    """One torch thread for the duration (results do not depend on the thread count then)."""
    torch = _torch()
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


# ------------------------------------------------------------------ provenance


def cpu_flags() -> list[str]:
    """The SIMD-relevant CPU flags of this machine (the ones PyTorch's kernels dispatch on)."""
    keep = ("sse2", "ssse3", "sse4_1", "sse4_2", "fma", "avx", "avx2", "f16c", "avx512f",
            "avx512dq", "avx512cd", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16",
            "avx512_fp16", "amx_tile", "asimd", "sve")
    flags: list[str] = []
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() in ("flags", "Features"):
                flags = value.split()
                break
    except OSError:
        pass
    return [f for f in keep if f in flags]


def git_revision() -> str:
    """HEAD of the repository the generator runs from, '+dirty' when generators/ or the
    trained model have uncommitted changes; 'unknown' outside a git checkout. The environment
    variable CRNN_GENERATOR_REVISION overrides it (a build from an exported tree; tests that
    compare two builds while the working tree may change under them)."""
    import os
    if os.environ.get("CRNN_GENERATOR_REVISION"):
        return os.environ["CRNN_GENERATOR_REVISION"]
    try:
        rev = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                             text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "generators",
                                "fixtures/model"], cwd=ROOT, capture_output=True, text=True,
                               timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return (rev + ("+dirty" if dirty else "")) if rev else "unknown"


def _rel(path) -> str:
    path = Path(path).resolve()
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def provenance() -> dict:
    """Fixture attributes of every pytorch-tier fixture (regen --check reads the first two)."""
    torch = _torch()
    attrs = container.read_attrs(str(MODEL_PATH))
    return {"torch_version": str(torch.__version__),
            "cpu_flags": json.dumps(cpu_flags()),
            "torch_cpu_capability": str(torch.backends.cpu.get_cpu_capability()),
            "machine": platform.machine(),
            "generator_git_revision": git_revision(),
            "model": _rel(MODEL_PATH),
            "model_cer": float(attrs.get("cer", -1.0)),
            "model_steps": int(attrs.get("steps", -1))}


# ------------------------------------------------------------------ model and data


def trained_model(path=None) -> tuple[dict, dict]:
    """(config, params): the trained container's fp16 weights widened to fp32 (MODEL_PATH
    unless given; regen-fixtures --retrain points MODEL_PATH at the new model)."""
    return container.load_container(str(path or MODEL_PATH))


def real_lines(seed: int, n: int, widths=None) -> tuple[list, list]:
    """n real lines: line i from SeedSequence(seed, (i,)); widths[i] None = natural width."""
    images, targets = [], []
    widths = list(widths) if widths is not None else [None] * n
    for i in range(n):
        rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(i,)))
        img, tgt = lines.make_line(rng, None, widths[i])
        images.append(img)
        targets.append(tgt)
    return images, targets


def floor(a32, a64) -> float:
    """max |fp32 - float64| over the elements (0 for an empty tensor)."""
    a32 = np.asarray(a32, np.float64)
    a64 = np.asarray(a64, np.float64)
    if a32.size == 0:
        return 0.0
    return float(np.max(np.abs(a32 - a64)))


# ------------------------------------------------------------------ torch tensors


def _np(t, kind):
    """A copy (never a view of torch's storage: optimizers and clipping work in place)."""
    return np.array(t.detach().cpu().numpy(), dtype=np_dtype(kind), copy=True)


def _t(a, kind, grad=False):
    torch = _torch()
    t = torch.from_numpy(np.array(a, dtype=np_dtype(kind), order="C", copy=True))
    return t.requires_grad_(True) if grad else t


# ------------------------------------------------------------------ one layer, one dtype


def conv_block(x, W, b, geo: dict, dPooled, kind: str, want_dx: bool = True) -> dict:
    """One conv block in PyTorch (conv2d -> relu -> max_pool2d(return_indices=True)) and its
    backward from dPooled. x [H][W][C], W [Out][KPadded], b [Out], dPooled [Hp][Wp][Out].
    -> conv [P][Out] (before ReLU), pooled [Hp][Wp][Out], winners (our flat index,
    PyTorch's choice), dW [Out][KPadded], db [Out], dx [H][W][C] (when want_dx)."""
    torch = _torch()
    F = torch.nn.functional
    x = np.asarray(x)
    H, Wd, C = x.shape
    KP = np.shape(W)[1]
    kh, kw, padH, padW = geo["kh"], geo["kw"], geo["padH"], geo["padW"]
    xt = _t(x.transpose(2, 0, 1)[None], kind, grad=want_dx)
    Wt = _t(conv_weight_to_torch(W, C, kh, kw), kind, grad=True)
    bt = _t(b, kind, grad=True)
    conv = F.conv2d(xt, Wt, bt, padding=(padH, padW))
    conv.retain_grad()
    pooled, idx = F.max_pool2d(F.relu(conv), (geo["poolH"], geo["poolW"]), return_indices=True)
    pooled.backward(_t(np.asarray(dPooled).transpose(2, 0, 1)[None], kind))
    Out = conv.shape[1]
    out = {"conv": _np(conv[0].permute(1, 2, 0).reshape(-1, Out), kind),
           "pooled": _np(pooled[0].permute(1, 2, 0), kind),
           "winners": winners_from_torch(idx[0].numpy(), Out),
           "dW": conv_weight_from_torch(_np(Wt.grad, kind), KP, np_dtype(kind)),
           "db": _np(bt.grad, kind)}
    if want_dx:
        out["dx"] = _np(xt.grad[0].permute(1, 2, 0), kind)
    return out


def lstm_module(W_ih, W_hh, b, kind: str):
    """One bidirectional single-layer nn.LSTM with our weights ([2][4H][I], [2][4H][H],
    [2][4H]; direction 0 forward), bias_hh fixed at 0 (b = bias_ih)."""
    torch = _torch()
    W_ih, W_hh, b = np.asarray(W_ih), np.asarray(W_hh), np.asarray(b)
    I, H = W_ih.shape[2], W_hh.shape[2]
    m = torch.nn.LSTM(I, H, num_layers=1, bidirectional=True, dtype=tdtype(kind))
    with torch.no_grad():
        for d, sfx in enumerate(("_l0", "_l0_reverse")):
            getattr(m, "weight_ih" + sfx).copy_(_t(W_ih[d], kind))
            getattr(m, "weight_hh" + sfx).copy_(_t(W_hh[d], kind))
            getattr(m, "bias_ih" + sfx).copy_(_t(b[d], kind))
            bh = getattr(m, "bias_hh" + sfx)
            bh.zero_()
            bh.requires_grad_(False)
    return m


def lstm_layer(x, W_ih, W_hh, b, dOut, kind: str) -> dict:
    """One bidirectional LSTM layer and its backward from dOut. x [T][I] -> out [T][2H],
    dW_ih [2][4H][I], dW_hh [2][4H][H], db [2][4H] (the gradient of bias_ih), dx [T][I]."""
    m = lstm_module(W_ih, W_hh, b, kind)
    xt = _t(np.asarray(x)[:, None, :], kind, grad=True)
    y, _ = m(xt)
    y.backward(_t(np.asarray(dOut)[:, None, :], kind))
    g = lambda name: _np(getattr(m, name).grad, kind)
    return {"out": _np(y[:, 0], kind),
            "dW_ih": np.stack([g("weight_ih_l0"), g("weight_ih_l0_reverse")]),
            "dW_hh": np.stack([g("weight_hh_l0"), g("weight_hh_l0_reverse")]),
            "db": np.stack([g("bias_ih_l0"), g("bias_ih_l0_reverse")]),
            "dx": _np(xt.grad[:, 0], kind)}


def linear_layer(x, W, b, dY, kind: str) -> dict:
    """The classifier (F.linear) and its backward from dY: y, dx, dW, db."""
    F = _torch().nn.functional
    xt, Wt, bt = _t(x, kind, True), _t(W, kind, True), _t(b, kind, True)
    y = F.linear(xt, Wt, bt)
    y.backward(_t(dY, kind))
    return {"y": _np(y, kind), "dx": _np(xt.grad, kind), "dW": _np(Wt.grad, kind),
            "db": _np(bt.grad, kind)}


def ctc_line(logits, target, scale: float, kind: str) -> dict:
    """CTC of one line on logits [T][K]: log_softmax -> ctc_loss(reduction='none', blank 0);
    the gradient is that of scale * loss (scale = 1/B: the line's share of the plain mean).
    -> loss [1] (float64 array holding the dtype's value), dlogits [T][K]."""
    torch = _torch()
    F = torch.nn.functional
    z = _t(logits, kind, True)
    lp = F.log_softmax(z, dim=-1)[:, None, :]
    T = z.shape[0]
    tgt = torch.as_tensor(np.asarray(target, np.int64))[None]
    loss = F.ctc_loss(lp, tgt, torch.tensor([T]), torch.tensor([len(target)]), blank=0,
                      reduction="none", zero_infinity=False)
    (loss[0] * scale).backward()
    return {"loss": np.array([float(loss[0].detach())], np.float64), "dlogits": _np(z.grad, kind)}


def adamw(p, grads, decay: bool, hp: dict, kind: str) -> dict:
    """torch.optim.AdamW (foreach=False, the single-tensor loop) for len(grads) steps from
    m = v = 0. weight_decay = hp['wd'] when decay else 0. -> p, m (exp_avg), v (exp_avg_sq)."""
    torch = _torch()
    pt = torch.nn.Parameter(_t(p, kind).clone())
    opt = torch.optim.AdamW([pt], lr=hp["lr"], betas=(hp["beta1"], hp["beta2"]), eps=hp["eps"],
                            weight_decay=hp["wd"] if decay else 0.0, foreach=False)
    for g in grads:
        pt.grad = _t(g, kind).clone()
        opt.step()
    st = opt.state[pt]
    return {"p": _np(pt, kind), "m": _np(st["exp_avg"], kind), "v": _np(st["exp_avg_sq"], kind)}


# ------------------------------------------------------------------ the whole model


class Model:
    """crnn-v0 in one dtype with our parameters as torch leaf tensors (grads in our layouts)."""

    def __init__(self, config: dict, params: dict, kind: str):
        torch = _torch()
        self.config, self.kind = config, kind
        self.specs = model.param_specs(config)
        self.conv = []
        C = config["input_channels"]
        for n, blk in enumerate(config["blocks"]):
            W = _t(conv_weight_to_torch(params[f"conv{n}.W"], C, blk["kh"], blk["kw"]), kind, True)
            b = _t(params[f"conv{n}.b"], kind, True)
            self.conv.append((W, b, np.shape(params[f"conv{n}.W"])[1]))
            C = blk["out"]
        self.lstm = []
        for layer in range(config["lstm_layers"]):
            st = [np.stack([params[f"lstm{layer}.{d}.{k}"] for d in ("fwd", "rev")])
                  for k in ("W_ih", "W_hh", "b")]
            self.lstm.append(lstm_module(*st, kind))
        self.fcW = _t(params["fc.W"], kind, True)
        self.fcb = _t(params["fc.b"], kind, True)
        self._torch = torch

    def zero_grad(self):
        for t in self.leaves():
            t.grad = None

    def leaves(self):
        out = [t for W, b, _ in self.conv for t in (W, b)]
        for m in self.lstm:
            out += [p for p in m.parameters() if p.requires_grad]
        return out + [self.fcW, self.fcb]

    def line(self, image, target, scale: float, keep: bool = False):
        """Forward of one line, loss * scale backward (gradients accumulate in the leaves).
        -> (loss float, trace dict of numpy arrays when keep)."""
        torch = self._torch
        F = torch.nn.functional
        kind = self.kind
        x = np.asarray(image)
        x = x[:, :, None] if x.ndim == 2 else x
        y = _t(x.transpose(2, 0, 1)[None], kind)
        tr = {"block_in": [], "conv": [], "pooled": [], "winners": []}
        keep_t = []
        for (W, b, _), blk in zip(self.conv, self.config["blocks"]):
            if keep:
                y.requires_grad_(True) if y.is_leaf else y.retain_grad()
                keep_t.append(y)
            c = F.conv2d(y, W, b, padding=(blk["padH"], blk["padW"]))
            y, idx = F.max_pool2d(F.relu(c), (blk["poolH"], blk["poolW"]), return_indices=True)
            if keep:
                Out = c.shape[1]
                tr["conv"].append(_np(c[0].permute(1, 2, 0).reshape(-1, Out), kind))
                tr["winners"].append(winners_from_torch(idx[0].numpy(), Out))
        N, C, Hf, Wf = y.shape
        if keep:
            y.retain_grad()
            keep_t.append(y)
        seq = y.permute(3, 0, 2, 1).reshape(Wf, N, Hf * C)
        lstm_t = []
        for m in self.lstm:
            if keep:
                seq.retain_grad()
                lstm_t.append(seq)
            seq, _ = m(seq)
        if keep:
            seq.retain_grad()
            lstm_t.append(seq)
        logits = F.linear(seq[:, 0], self.fcW, self.fcb)
        if keep:
            logits.retain_grad()
        lp = F.log_softmax(logits, dim=-1)[:, None, :]
        tgt = torch.as_tensor(np.asarray(target, np.int64))[None]
        loss = F.ctc_loss(lp, tgt, torch.tensor([Wf]), torch.tensor([len(target)]), blank=0,
                          reduction="none", zero_infinity=False)
        (loss[0] * scale).backward()
        if not keep:
            return float(loss[0].detach()), None
        nhwc = lambda t: _np(t[0].permute(1, 2, 0), kind)
        tr["block_in"] = [nhwc(t) for t in keep_t[:-1]]
        tr["dblock_in"] = [nhwc(t.grad) if t.grad is not None else None for t in keep_t[:-1]]
        tr["pooled"] = [nhwc(t) for t in keep_t[1:]]
        tr["dPooled"] = [nhwc(t.grad) for t in keep_t[1:]]
        tr["lstm_in"] = [_np(t[:, 0], kind) for t in lstm_t[:-1]]
        tr["lstm_out"] = [_np(t[:, 0], kind) for t in lstm_t[1:]]
        tr["dlstm_out"] = [_np(t.grad[:, 0], kind) for t in lstm_t[1:]]
        tr["logits"] = _np(logits, kind)
        tr["dlogits"] = _np(logits.grad, kind)
        return float(loss[0].detach()), tr

    def grads(self) -> dict:
        """The leaves' accumulated gradients as our named parameters (our layouts)."""
        kind = self.kind
        out = {}
        for n, (W, b, KP) in enumerate(self.conv):
            out[f"conv{n}.W"] = conv_weight_from_torch(_np(W.grad, kind), KP, np_dtype(kind))
            out[f"conv{n}.b"] = _np(b.grad, kind)
        for layer, m in enumerate(self.lstm):
            for d, sfx in (("fwd", "_l0"), ("rev", "_l0_reverse")):
                out[f"lstm{layer}.{d}.W_ih"] = _np(getattr(m, "weight_ih" + sfx).grad, kind)
                out[f"lstm{layer}.{d}.W_hh"] = _np(getattr(m, "weight_hh" + sfx).grad, kind)
                out[f"lstm{layer}.{d}.b"] = _np(getattr(m, "bias_ih" + sfx).grad, kind)
        out["fc.W"] = _np(self.fcW.grad, kind)
        out["fc.b"] = _np(self.fcb.grad, kind)
        return {s.name: np.ascontiguousarray(out[s.name]) for s in self.specs}

    def params(self) -> dict:
        """The current weights as our named parameters."""
        kind = self.kind
        out = {}
        for n, (W, b, KP) in enumerate(self.conv):
            out[f"conv{n}.W"] = conv_weight_from_torch(_np(W, kind), KP, np_dtype(kind))
            out[f"conv{n}.b"] = _np(b, kind)
        for layer, m in enumerate(self.lstm):
            for d, sfx in (("fwd", "_l0"), ("rev", "_l0_reverse")):
                out[f"lstm{layer}.{d}.W_ih"] = _np(getattr(m, "weight_ih" + sfx), kind)
                out[f"lstm{layer}.{d}.W_hh"] = _np(getattr(m, "weight_hh" + sfx), kind)
                out[f"lstm{layer}.{d}.b"] = _np(getattr(m, "bias_ih" + sfx), kind)
        out["fc.W"] = _np(self.fcW, kind)
        out["fc.b"] = _np(self.fcb, kind)
        return {s.name: np.ascontiguousarray(out[s.name]) for s in self.specs}

    def named_leaves(self) -> list:
        """(our name, torch leaf) in parameter order (conv W leaves are in torch layout)."""
        out = []
        for n, (W, b, _) in enumerate(self.conv):
            out += [(f"conv{n}.W", W), (f"conv{n}.b", b)]
        for layer, m in enumerate(self.lstm):
            for d, sfx in (("fwd", "_l0"), ("rev", "_l0_reverse")):
                out += [(f"lstm{layer}.{d}.W_ih", getattr(m, "weight_ih" + sfx)),
                        (f"lstm{layer}.{d}.W_hh", getattr(m, "weight_hh" + sfx)),
                        (f"lstm{layer}.{d}.b", getattr(m, "bias_ih" + sfx))]
        return out + [("fc.W", self.fcW), ("fc.b", self.fcb)]

    def batch(self, images, targets, keep: bool = False):
        """The batch gradient: each line's loss * (1/B) backward, accumulated in line order.
        -> (grads dict, losses [B], batch loss = sum / B in the dtype, traces or None)."""
        self.zero_grad()
        B = len(images)
        losses, traces = [], []
        for image, target in zip(images, targets):
            loss, tr = self.line(image, target, 1.0 / B, keep)
            losses.append(loss)
            traces.append(tr)
        dt = np_dtype(self.kind)
        total = dt(0)
        for v in losses:
            total = dt(total + dt(v))
        return self.grads(), np.asarray(losses, np.float64), float(dt(total / dt(B))), \
            (traces if keep else None)


# ------------------------------------------------------------------ shared fixture data

# The batch of four real lines every pytorch fixture draws from: widths natural (78, 99, 33)
# and one wide line (257: conv rows with a dropped partial pool window, T = 64).
BATCH_SEED = 606
BATCH_WIDTHS = (None, None, None, 257)
# The per-layer fixtures use two of them: an even width with a 16-tail in T (78, T = 19) and
# the wide one (257, T = 64).
LAYER_LINES = (0, 3)


def params64(params: dict) -> dict:
    return {k: np.asarray(v, np.float64) for k, v in params.items()}


_CACHE: dict = {}


def batch_data() -> dict:
    """The trained model on the batch of four lines, in fp32 and float64 (cached per process):
    config, params, images, targets, and per dtype the gradients, losses, batch loss and the
    per-line traces (Model.line)."""
    key = ("batch", str(MODEL_PATH))
    if key not in _CACHE:
        config, params = trained_model()
        images, targets = real_lines(BATCH_SEED, len(BATCH_WIDTHS), BATCH_WIDTHS)
        d = {"config": config, "params": params, "images": images, "targets": targets}
        with deterministic():
            for kind, p in (("fp32", params), ("f64", params64(params))):
                m = Model(config, p, kind)
                g, losses, bl, tr = m.batch(images, targets, keep=True)
                d[kind] = {"grads": g, "losses": losses, "batch_loss": bl, "traces": tr}
        _CACHE[key] = d
    return _CACHE[key]


def floors(e32: dict, e64: dict, names=None) -> dict:
    """{tensor: Floor} for the float tensors of e32 (integer tensors have no Floor)."""
    out = {}
    for k in (names or e32):
        a = np.asarray(e32[k])
        if a.dtype.kind == "f":
            out[k] = floor(a, e64[k])
    return out


# ------------------------------------------------------------------ three real training steps

# Three batches of four real lines each (natural widths), the hyper-parameters of the train3
# fixture: clipping at 5 (global norm), AdamW lr 1e-3, betas 0.9/0.999, eps 1e-8, weight
# decay 0.01 on the weight matrices only.
TRAIN_SEEDS = (607, 608, 609)
TRAIN_B = 4
TRAIN_HP = {"lr": 1e-3, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "wd": 0.01}
TRAIN_CLIP = 5.0
MASK_FACTOR = 50.0


def train_mask(grads_per_step: list, floors_per_step: list) -> np.ndarray:
    """Where the 3-step weights are compared: |g_t| >= MASK_FACTOR * Floor_t in every step t
    (g_t the fp32 batch gradient of step t, Floor_t its tensor's Floor). Below that, the sign
    of Adam's first steps (each moves a weight by about lr * sign(g)) is decided by rounding
    in either implementation."""
    mask = None
    for g, f in zip(grads_per_step, floors_per_step):
        m = np.abs(np.asarray(g, np.float64)) >= MASK_FACTOR * float(f)
        mask = m if mask is None else (mask & m)
    return mask


def train_steps(config: dict, params: dict, batches: list, kind: str) -> dict:
    """len(batches) real steps in PyTorch: batch gradient (Model.batch), clip_grad_norm_
    (limit TRAIN_CLIP), torch.optim.AdamW (foreach=False; decay on weight matrices only).
    -> {"grads": [per step, before clipping], "losses": [per step [B]], "norms": [...],
        "params": the weights after the last step}."""
    torch = _torch()
    net = Model(config, params, kind)
    decay = {s.name: s.decay for s in model.param_specs(config)}
    named = net.named_leaves()
    groups = [{"params": [t for n, t in named if decay[n]], "weight_decay": TRAIN_HP["wd"]},
              {"params": [t for n, t in named if not decay[n]], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=TRAIN_HP["lr"], betas=(TRAIN_HP["beta1"], TRAIN_HP["beta2"]),
                            eps=TRAIN_HP["eps"], foreach=False)
    out = {"grads": [], "losses": [], "norms": []}
    for images, targets in batches:
        g, losses, _, _ = net.batch(images, targets)
        out["grads"].append(g)
        out["losses"].append(losses)
        norm = torch.nn.utils.clip_grad_norm_([t for _, t in named], TRAIN_CLIP, foreach=False)
        out["norms"].append(float(norm))
        opt.step()
    out["params"] = net.params()
    return out


def train_data() -> dict:
    """The 3-step trajectories from the trained model in fp32 and float64 (cached)."""
    key = ("train", str(MODEL_PATH))
    if key not in _CACHE:
        config, params = trained_model()
        batches = [real_lines(s, TRAIN_B) for s in TRAIN_SEEDS]
        d = {"config": config, "params": params, "batches": batches}
        with deterministic():
            d["fp32"] = train_steps(config, params, batches, "fp32")
            d["f64"] = train_steps(config, params64(params), batches, "f64")
        _CACHE[key] = d
    return _CACHE[key]
