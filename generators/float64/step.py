"""Float64 reference: the whole model's per-line loss and gradients and the batch gradient.

conv blocks (ReLU + max pool) -> sequence x[t = w][h*C + c] -> bidirectional LSTM layers
-> classifier -> CTC. Parameters are named as in crnn_conformance.generators.model.param_specs.
"""
from __future__ import annotations

import math

import numpy as np

from .. import model
from . import conv, ctc, linear, lstm


def _lstm_weights(params, layer):
    pre = f"lstm{layer}"
    return tuple(np.stack([np.asarray(params[f"{pre}.{d}.{n}"], np.float64) for d in ("fwd", "rev")])
                 for n in ("W_ih", "W_hh", "b"))


def to_sequence(pooled):
    """map[h][w][c] -> x[t = w][h*C + c]."""
    Hp, Wp, C = pooled.shape
    return pooled.transpose(1, 0, 2).reshape(Wp, Hp * C)


def from_sequence(dseq, Hp, C):
    """Inverse of to_sequence: dx[t][h*C + c] -> dmap[h][w][c]."""
    return dseq.reshape(dseq.shape[0], Hp, C).transpose(1, 0, 2)


def _zero_grads(config, params):
    return {s.name: np.zeros(np.shape(params[s.name])) for s in model.param_specs(config)}


def line_forward_backward(config, params, image, target, scale):
    """One line: -> (loss, grads dict name -> float64 array). No alignment: (+inf, zeros)."""
    x = np.asarray(image, np.float64)
    if x.ndim == 2:
        x = x[:, :, None]
    if x.shape[0] != config["input_height"] or x.shape[2] != config["input_channels"]:
        raise ValueError(f"image shape {x.shape} does not match the config")

    # forward
    conv_in, conv_winners = [], []
    for n, blk in enumerate(config["blocks"]):
        geo = (blk["kh"], blk["kw"], blk["padH"], blk["padW"], blk["poolH"], blk["poolW"])
        _, pooled, winners = conv.forward(x, params[f"conv{n}.W"], params[f"conv{n}.b"], *geo)
        conv_in.append(x)
        conv_winners.append(winners)
        x = pooled
    Hp, _, C = x.shape
    seq = to_sequence(x)
    lstm_in, lstm_saved = [], []
    for layer in range(config["lstm_layers"]):
        saved = lstm.forward(seq, *_lstm_weights(params, layer))
        lstm_in.append(seq)
        lstm_saved.append(saved)
        seq = saved["out"]
    logits = linear.forward(seq, params["fc.W"], params["fc.b"])
    loss, dlogits = ctc.ctc(logits, target, scale)
    grads = _zero_grads(config, params)
    if not np.isfinite(loss):
        return loss, grads

    # backward
    dseq, grads["fc.W"], grads["fc.b"] = linear.backward(seq, params["fc.W"], dlogits)
    for layer in reversed(range(config["lstm_layers"])):
        W_ih, W_hh, _ = _lstm_weights(params, layer)
        g = lstm.backward(lstm_in[layer], W_ih, W_hh, lstm_saved[layer], dseq)
        for d, name in enumerate(("fwd", "rev")):
            grads[f"lstm{layer}.{name}.W_ih"] = g["dW_ih"][d]
            grads[f"lstm{layer}.{name}.W_hh"] = g["dW_hh"][d]
            grads[f"lstm{layer}.{name}.b"] = g["db"][d]
        dseq = g["dx"]
    dPooled = from_sequence(dseq, Hp, C)
    for n in reversed(range(len(config["blocks"]))):
        blk = config["blocks"][n]
        geo = (blk["kh"], blk["kw"], blk["padH"], blk["padW"], blk["poolH"], blk["poolW"])
        dW, db, dx = conv.backward(conv_in[n], params[f"conv{n}.W"], *geo,
                                   dPooled, conv_winners[n], want_dx=n > 0)
        grads[f"conv{n}.W"], grads[f"conv{n}.b"] = dW, db
        dPooled = dx
    return loss, grads


def batch_gradient(config, params, images, targets):
    """-> (grads summed over lines with scale 1/B, per-line losses, batch loss).

    Lines with no alignment give loss +inf and zero gradients but stay in B;
    the batch loss is the sum of the finite losses divided by B."""
    B = len(images)
    if B == 0 or len(targets) != B:
        raise ValueError("need one target per image and at least one line")
    scale = 1.0 / B
    grads = _zero_grads(config, params)
    losses = np.zeros(B)
    for n, (image, target) in enumerate(zip(images, targets)):
        losses[n], g = line_forward_backward(config, params, image, target, scale)
        for name in grads:
            grads[name] = grads[name] + g[name]
    batch_loss = math.fsum(losses[np.isfinite(losses)]) / B
    return grads, losses, batch_loss
