"""crnn-v0 (or any config of its family) in PyTorch, and conversion to and from our params.

The network, read from the config (generators/model.py):

- per block: conv kh x kw, stride 1, padding (padH, padW) -> ReLU -> max_pool2d with
  kernel = stride = (poolH, poolW) (trailing partial windows dropped). NCHW internally;
  our weights are [Out][KPadded] with k = (ky*kw + kx)*C + c, i.e.
  W_torch[o][c][ky][kx] = W[o][(ky*kw + kx)*C + c]; padding columns K.. are not in torch
  and come back as exact zeros.
- sequence map: after the last block map[h][w][c] becomes x[t = w][h*C + c] (channels
  fastest within the feature vector).
- nn.LSTM, `lstm_layers` layers, bidirectional, hidden H, gate rows [i|f|g|o] (PyTorch's
  own order). Our cell has one bias, so bias_hh is fixed at zero (requires_grad False)
  and b = bias_ih. Our lstm{L}.fwd.* are PyTorch's *_l{L}, lstm{L}.rev.* are *_l{L}_reverse.
- Linear 2H -> classes, log_softmax over classes; CTC with blank 0.

Images are channels-last like everywhere in the project: [N][H][W] (C = 1) or [N][H][W][C].
The module returns log-probabilities [T][N][K] (the layout nn.CTCLoss wants).
"""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from . import model
from .torch_layout import conv_weight_from_torch, conv_weight_to_torch

_NP = {torch.float32: np.float32, torch.float64: np.float64}


class CRNN(nn.Module):
    def __init__(self, config: dict, dtype: torch.dtype = torch.float32):
        super().__init__()
        self.config = config
        C = config["input_channels"]
        self.convs = nn.ModuleList()
        for blk in config["blocks"]:
            self.convs.append(nn.Conv2d(C, blk["out"], (blk["kh"], blk["kw"]),
                                        padding=(blk["padH"], blk["padW"]), dtype=dtype))
            C = blk["out"]
        H = config["hidden"]
        self.lstm = nn.LSTM(model.sequence_features(config), H,
                            num_layers=config["lstm_layers"], bidirectional=True,
                            dtype=dtype)
        for name, p in self.lstm.named_parameters():
            if name.startswith("bias_hh"):
                with torch.no_grad():
                    p.zero_()
                p.requires_grad_(False)
        self.fc = nn.Linear(2 * H, config["classes"], dtype=dtype)

    def to_nchw(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() == 3:                       # [N][H][W], one channel
            return x.unsqueeze(1)
        if x.dim() == 4:                       # [N][H][W][C] channels-last
            return x.permute(0, 3, 1, 2)
        raise ValueError(f"images must be [N][H][W] or [N][H][W][C], got {tuple(x.shape)}")

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """Conv blocks + sequence map: images -> x [T][N][Hf*C]."""
        y = self.to_nchw(x)
        for conv, blk in zip(self.convs, self.config["blocks"]):
            y = F.max_pool2d(F.relu(conv(y)), (blk["poolH"], blk["poolW"]))
        # y[n][c][h][w] -> x[t = w][n][h*C + c]
        N, C, Hf, Wf = y.shape
        return y.permute(3, 0, 2, 1).reshape(Wf, N, Hf * C)

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        seq, _ = self.lstm(self.features(x))
        return self.fc(seq)                    # [T][N][K]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.log_softmax(self.logits(x), dim=-1)


def _torch_name(name: str) -> tuple[str, str]:
    """Our lstm parameter name -> (torch parameter name, kind)."""
    layer, d, kind = name.split(".")
    L = int(layer[len("lstm"):])
    suffix = f"_l{L}" + ("_reverse" if d == "rev" else "")
    return {"W_ih": "weight_ih", "W_hh": "weight_hh", "b": "bias_ih"}[kind] + suffix, kind


def load_params(module: CRNN, params: dict[str, np.ndarray]) -> CRNN:
    """Copy our params (model.param_specs names and layouts) into `module`, in its dtype."""
    config = module.config
    specs = model.param_specs(config)
    for s in specs:
        if tuple(np.shape(params[s.name])) != tuple(s.shape):
            raise ValueError(f"{s.name}: shape {np.shape(params[s.name])}, expected {s.shape}")
    tp = dict(module.lstm.named_parameters())
    with torch.no_grad():
        C = config["input_channels"]
        for n, (conv, blk) in enumerate(zip(module.convs, config["blocks"])):
            kh, kw, O = blk["kh"], blk["kw"], blk["out"]
            Wt = conv_weight_to_torch(params[f"conv{n}.W"], C, kh, kw)
            conv.weight.copy_(torch.from_numpy(Wt))
            conv.bias.copy_(torch.from_numpy(np.asarray(params[f"conv{n}.b"])))
            C = O
        for s in specs:
            if s.name.startswith("lstm"):
                tname, _ = _torch_name(s.name)
                tp[tname].copy_(torch.from_numpy(np.asarray(params[s.name])))
        for name, p in tp.items():
            if name.startswith("bias_hh"):
                p.zero_()
        module.fc.weight.copy_(torch.from_numpy(np.asarray(params["fc.W"])))
        module.fc.bias.copy_(torch.from_numpy(np.asarray(params["fc.b"])))
    return module


def build(config: dict, params: dict[str, np.ndarray] | None = None,
          dtype: torch.dtype = torch.float32) -> CRNN:
    """A CRNN for `config` in `dtype` (torch.float32 or torch.float64), with `params` loaded
    when given (otherwise PyTorch's default init, bias_hh zero)."""
    m = CRNN(config, dtype=dtype)
    if params is not None:
        load_params(m, params)
    return m


def to_params(module: CRNN, dtype=np.float32) -> dict[str, np.ndarray]:
    """The module's weights as our params dict (param_specs order and layouts), conv
    padding columns exactly zero. dtype: np.float32 or np.float64 (values are converted
    from the module's dtype by NumPy's rounding)."""
    config = module.config
    tp = {k: v.detach().cpu().numpy() for k, v in module.lstm.named_parameters()}
    for k, v in tp.items():
        if k.startswith("bias_hh") and np.any(v != 0):
            raise ValueError(f"{k} is not zero: our LSTM has one bias (b = bias_ih)")
    out = {}
    C = config["input_channels"]
    for n, (conv, blk) in enumerate(zip(module.convs, config["blocks"])):
        kh, kw, O = blk["kh"], blk["kw"], blk["out"]
        Wt = conv.weight.detach().cpu().numpy()          # [O][C][kh][kw]
        out[f"conv{n}.W"] = conv_weight_from_torch(Wt, model.kpadded(kh * kw * C), dtype)
        out[f"conv{n}.b"] = conv.bias.detach().cpu().numpy().astype(dtype)
        C = O
    for s in model.param_specs(config):
        if s.name.startswith("lstm"):
            out[s.name] = tp[_torch_name(s.name)[0]].astype(dtype)
    out["fc.W"] = module.fc.weight.detach().cpu().numpy().astype(dtype)
    out["fc.b"] = module.fc.bias.detach().cpu().numpy().astype(dtype)
    return {s.name: np.ascontiguousarray(out[s.name]) for s in model.param_specs(config)}


def greedy_decode(log_probs) -> list[list[int]]:
    """Best path: argmax per step, collapse repeats, drop blanks (0).
    log_probs: [T][K] (one line) or [T][N][K]; returns one list of class ids per line."""
    a = log_probs.detach().cpu().numpy() if isinstance(log_probs, torch.Tensor) \
        else np.asarray(log_probs)
    if a.ndim == 2:
        a = a[:, None, :]
    best = a.argmax(axis=2)                              # [T][N]
    out = []
    for n in range(best.shape[1]):
        seq, prev = [], 0
        for k in best[:, n]:
            k = int(k)
            if k != prev and k != 0:
                seq.append(k)
            prev = k
        out.append(seq)
    return out


def edit_distance(a, b) -> int:
    a, b = list(a), list(b)
    prev = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        cur = [i] + [0] * len(b)
        for j, y in enumerate(b, 1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (x != y))
        prev = cur
    return prev[-1]


def cer(refs, hyps) -> float:
    """Character error rate: total edit distance / total reference length. refs and hyps
    are sequences of strings or of class-id sequences (one per line)."""
    refs, hyps = list(refs), list(hyps)
    if len(refs) != len(hyps):
        raise ValueError("refs and hyps differ in length")
    total = sum(len(r) for r in refs)
    if total == 0:
        raise ValueError("no reference characters")
    return sum(edit_distance(r, h) for r, h in zip(refs, hyps)) / total
