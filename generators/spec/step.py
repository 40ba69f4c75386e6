"""The whole model's per-line loss and gradients and the batch gradient, bit-exact float32
(docs/backward.md, "Batch gradient, clipping").

Per line: the conv blocks (forward, pool winners kept) -> the sequence x[t = w][h*C + c] of the
last block's map -> the bidirectional LSTM layers -> the classifier (linear) -> CTC with
scale 1/B -> the backward pass through all of them into the line's own gradients (the first
block's input gradient is not computed). A line with no alignment (loss +inf) has an all-+0
gradient and its backward pass is skipped. Then the batch sum g = g_0, g = g + g_1, ... in line
order (binary32 additions; no +0 start), and the batch loss: the binary64 sum of the finite
line losses in line order, divided by B (a line without alignment counts 0 and stays in B).

Parameters are named as in crnn_conformance.generators.model.param_specs; the spec layers are the same
functions the per-layer fixtures check, composed in this order.
"""
from __future__ import annotations

import numpy as np

from .. import model
from . import conv, ctc, linear, lstm

F32 = np.float32


def _lstm_weights(params, layer):
    pre = f"lstm{layer}"
    return tuple(np.ascontiguousarray(np.stack([np.asarray(params[f"{pre}.{d}.{n}"], F32)
                                                for d in ("fwd", "rev")]))
                 for n in ("W_ih", "W_hh", "b"))


def to_sequence(pooled) -> np.ndarray:
    """map[h][w][c] -> x[t = w][h*C + c]."""
    Hp, Wp, C = pooled.shape
    return np.ascontiguousarray(pooled.transpose(1, 0, 2).reshape(Wp, Hp * C))


def from_sequence(dseq, Hp, C) -> np.ndarray:
    """dx[t][h*C + c] -> dmap[h][w][c] (the inverse permutation; no arithmetic)."""
    return np.ascontiguousarray(dseq.reshape(dseq.shape[0], Hp, C).transpose(1, 0, 2))


def zero_grads(config) -> dict:
    return {s.name: np.zeros(s.shape, F32) for s in model.param_specs(config)}


def _geo(blk):
    return blk["kh"], blk["kw"], blk["padH"], blk["padW"], blk["poolH"], blk["poolW"]


def line_forward(config, params, image) -> dict:
    """The forward pass of one line; returns everything the backward pass needs."""
    x = np.asarray(image, F32)
    if x.ndim == 2:
        x = x[:, :, None]
    if x.shape[0] != config["input_height"] or x.shape[2] != config["input_channels"]:
        raise ValueError(f"image shape {x.shape} does not match the config")
    st = {"conv_in": [], "winners": []}
    for n, blk in enumerate(config["blocks"]):
        _, pooled, winners = conv.forward(x, params[f"conv{n}.W"], params[f"conv{n}.b"], *_geo(blk))
        st["conv_in"].append(x)
        st["winners"].append(winners)
        x = pooled
    st["map_shape"] = x.shape
    seq = to_sequence(x)
    st["lstm_in"], st["lstm_saved"] = [], []
    for layer in range(config["lstm_layers"]):
        saved = lstm.forward(seq, *_lstm_weights(params, layer))
        st["lstm_in"].append(seq)
        st["lstm_saved"].append(saved)
        seq = np.ascontiguousarray(saved["out"], F32)
    st["top"] = seq
    st["logits"] = linear.forward(seq, params["fc.W"], params["fc.b"])
    return st


def line_backward(config, params, st, dlogits) -> dict:
    grads = {}
    dseq, grads["fc.W"], grads["fc.b"] = linear.backward(st["top"], params["fc.W"], dlogits)
    for layer in reversed(range(config["lstm_layers"])):
        W_ih, W_hh, _ = _lstm_weights(params, layer)
        g = lstm.backward(st["lstm_in"][layer], W_ih, W_hh, st["lstm_saved"][layer], dseq)
        for d, name in enumerate(("fwd", "rev")):
            grads[f"lstm{layer}.{name}.W_ih"] = g["dW_ih"][d]
            grads[f"lstm{layer}.{name}.W_hh"] = g["dW_hh"][d]
            grads[f"lstm{layer}.{name}.b"] = g["db"][d]
        dseq = g["dx"]
    Hp, _, C = st["map_shape"]
    dPooled = from_sequence(dseq, Hp, C)
    for n in reversed(range(len(config["blocks"]))):
        dW, db, dx = conv.backward(st["conv_in"][n], params[f"conv{n}.W"], *_geo(config["blocks"][n]),
                                   dPooled, st["winners"][n], want_dx=n > 0)
        grads[f"conv{n}.W"], grads[f"conv{n}.b"] = dW, db
        dPooled = dx
    return {s.name: np.asarray(grads[s.name], F32) for s in model.param_specs(config)}


def line_forward_backward(config, params, image, target, scale):
    """One line: -> (loss (+inf: no alignment), grads dict name -> float32 array, state)."""
    st = line_forward(config, params, image)
    loss, dlogits = ctc.ctc(st["logits"], target, scale)
    if not np.isfinite(loss):
        return loss, zero_grads(config), st
    return loss, line_backward(config, params, st, dlogits), st


def batch_gradient(config, params, images, targets, return_lines=False):
    """-> (grads: g_0 + g_1 + ... in line order, losses[B] float64, batch loss float).

    With return_lines, also the per-line state (winners, logits) as a fourth element."""
    B = len(images)
    if B == 0 or len(targets) != B:
        raise ValueError("need one target per image and at least one line")
    scale = 1.0 / B
    losses = np.zeros(B)
    grads, lines = None, []
    for n, (image, target) in enumerate(zip(images, targets)):
        losses[n], g, st = line_forward_backward(config, params, image, target, scale)
        grads = g if grads is None else {k: grads[k] + g[k] for k in grads}
        if return_lines:
            lines.append(st)
    total = 0.0
    for loss in losses:
        if np.isfinite(loss):
            total = total + float(loss)
    batch_loss = total / B
    if return_lines:
        return grads, losses, batch_loss, lines
    return grads, losses, batch_loss
