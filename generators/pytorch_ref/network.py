"""The whole crnn-v0 in PyTorch as a functional forward (every intermediate reachable) with our
parameters as torch leaf tensors; the batch gradient of a batch of lines."""
from __future__ import annotations

import numpy as np

from .. import model
from ..torch_layout import (conv_weight_from_torch, conv_weight_to_torch,
                            winners_from_torch)

from .layers import lstm_module
from .torch_env import _np, _t, _torch, np_dtype


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
