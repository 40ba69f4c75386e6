"""The whole model's error model: a batch gradient, first-order through every layer
(docs/tolerances.md, "Whole model").

Per line: the conv blocks (the float64 reference's pool decisions), the sequence map, the
LSTM layers, the classifier, the CTC loss and gradient (its Jacobian carries the logits'
errors), and the backward in the reverse order. Each parameter gradient of the batch is one
sum of the terms of every line (line by line in the spec's order, then any order: a port may
add the lines' gradients in reverse or accumulate all lines in one sum). The weights may carry
errors of their own (the second and third step of train3).
"""
from __future__ import annotations

import numpy as np
from ...generators import model

from . import conv, ctc, linear, lstm
from .errors import Err, concat, stack
from .sums import merge, rounded


def _geo(blk):
    return (blk["kh"], blk["kw"], blk["padH"], blk["padW"], blk["poolH"], blk["poolW"])


def _lstm_weights(P, layer):
    return tuple(stack([P[f"lstm{layer}.{d}.{n}"] for d in ("fwd", "rev")]) for n in ("W_ih", "W_hh", "b"))


def line(config, P: dict, image, target, scale, decisions=None):
    """One line -> (loss Err, {parameter: statistics of its gradient sums}, the conv values
    of every block, flat, as Err); each block's pool Decisions appended to `decisions`."""
    x = np.asarray(image, np.float64)
    x = Err.exact(x[:, :, None] if x.ndim == 2 else x)
    kept, convs = [], []
    for n, blk in enumerate(config["blocks"]):
        col, cv, pooled, w = conv.forward(x, P[f"conv{n}.W"], P[f"conv{n}.b"], *_geo(blk))
        kept.append((x, col, w))
        convs.append(cv.reshape(-1))
        if decisions is not None:
            decisions.append((w, cv.v.size))
        x = pooled
    Hp, Wp, C = x.shape
    seq = x.map(lambda a: a.transpose(1, 0, 2).reshape(Wp, Hp * C))
    lstm_kept = []
    for layer in range(config["lstm_layers"]):
        W = _lstm_weights(P, layer)
        st = lstm.forward(seq, *W)
        lstm_kept.append((seq, W, st))
        seq = st["out"]
    logits = linear.forward(seq, P["fc.W"], P["fc.b"])
    loss, dl = ctc.gradient(logits, target, scale)
    if not np.isfinite(loss.v):
        return loss, None, convs
    parts = {}
    dseq, parts["fc.W"], parts["fc.b"] = linear.backward_parts(seq, P["fc.W"], dl)
    for layer in reversed(range(config["lstm_layers"])):
        xin, W, st = lstm_kept[layer]
        g, dseq = lstm.backward_parts(xin, W[0], W[1], st, dseq)
        for d, name in enumerate(("fwd", "rev")):
            for k, pk in (("dW_ih", "W_ih"), ("dW_hh", "W_hh"), ("db", "b")):
                parts[f"lstm{layer}.{name}.{pk}"] = _direction(g[k], d)
    dP = dseq.map(lambda a: a.reshape(Wp, Hp, C).transpose(1, 0, 2))
    for n in reversed(range(len(config["blocks"]))):
        blk = config["blocks"][n]
        xin, col, w = kept[n]
        dW, db, dP = conv.backward_parts(xin, col, P[f"conv{n}.W"], w, dP, *_geo(blk)[:4],
                                         want_dx=n > 0)
        parts[f"conv{n}.W"], parts[f"conv{n}.b"] = dW, db
    return loss, parts, convs


def _direction(parts: dict, d: int) -> dict:
    """One direction's share of [2]-batched sum statistics."""
    return {k: (v if np.ndim(v) == 0 else v[d]) for k, v in parts.items()}


def batch(config, P: dict, images, targets, scale=None, decisions=None) -> dict:
    """{parameter: gradient Err, "losses": [B], "batch_loss": [1], "conv_out": the conv values
    of every line and block (harness/flips.py's layout)} of a batch (each line's CTC gradient
    scaled by `scale`, 1/B by default)."""
    B = len(images)
    scale = 1.0 / B if scale is None else float(scale)
    names = [s.name for s in model.param_specs(config)]
    per_line, losses, convs = [], [], []
    for image, target in zip(images, targets):
        loss, parts, cv = line(config, P, image, target, scale, decisions)
        losses.append(loss)
        convs += cv
        if parts is not None:
            per_line.append(parts)
    out = {}
    for n in names:
        if not per_line:
            out[n] = Err.exact(np.zeros(P[n].shape))
            continue
        merged = per_line[0][n]
        for parts in per_line[1:]:
            merged = merge(merged, parts[n])
        out[n] = rounded(merged, products_rounded=not n.endswith(".b")).reshape(P[n].shape)
    out["losses"] = stack([loss.reshape(()) for loss in losses])
    finite = [loss for loss in losses if np.isfinite(loss.v)]
    total = Err.exact(np.array(0.0))
    for loss in finite:
        total = total.plus(loss.reshape(()))
    out["batch_loss"] = total.scaled(1.0 / B).reshape(1)
    out["conv_out"] = concat(convs)
    return out


def exact_params(config, flat) -> dict:
    return {k: Err.exact(v) for k, v in model.unflatten(config, np.asarray(flat, np.float32)).items()}


def decision_arrays(decisions) -> dict:
    """The legal pool decisions of every block (conv.Decisions.arrays) in the concatenations
    of the pytorch_step fixture (harness/flips.py, layout(): line by line, block by block)."""
    parts, w_at, c_at = [], 0, 0
    for d, n_cells in decisions:
        a = d.arrays()
        parts.append((a["winners.windows"] + w_at, a["winners.cells"] + c_at,
                      a["winners.none"] + w_at))
        w_at += d.winners.size
        c_at += n_cells
    cat = lambda i: np.concatenate([p[i] for p in parts]) if parts else np.zeros(0, np.int64)
    return {"winners.windows": cat(0), "winners.cells": cat(1), "winners.none": cat(2)}


def case_errors(case) -> dict:
    """{tensor: Err} of a step case, and the pool's legal decisions (decision_arrays)."""
    from ...generators.cases.step import case_inputs
    config, params, images, targets = case_inputs(case)
    dec = []
    out = batch(config, {k: Err.exact(v) for k, v in params.items()}, images, targets,
                decisions=dec)
    return {**out, **decision_arrays(dec)}
