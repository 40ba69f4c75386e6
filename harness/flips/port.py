"""The port's side of the flip rule: its pool decisions on a whole-model step case.

The ABI's step returns gradients, not winners; the rule needs the port's own decisions, so
they come from the port's conv forward (the entry point its step runs on the same data)."""
from __future__ import annotations

import numpy as np
from ...generators import model
from ..layers._ffi import call, f32, out, ptr


def port_pool_outputs(lib, case) -> dict:
    """The port's pool decisions on a step case, for the flip rule: per line, block by block,
    crnn_conv_forward on the line (then on the port's own pooled output) with the case's
    weights. -> {"winners": int32, "conv_out": float32}, concatenated line by line, block by
    block (rule.layout())."""
    config = case.params["config"]
    params = model.unflatten(config, f32(case.inputs["params"]))
    H, C = config["input_height"], config["input_channels"]
    wins, convs, at = [], [], 0
    for w in (int(v) for v in case.inputs["widths"]):
        x = f32(np.asarray(case.inputs["images"][at:at + H * w * C]).reshape(H, w, C))
        at += H * w * C
        for n, g in enumerate(model.block_geometry(config, w)):
            conv, x, win = conv_block(lib, x, params[f"conv{n}.W"], params[f"conv{n}.b"], g)
            wins.append(win.ravel())
            convs.append(conv.ravel())
    return {"winners": np.concatenate(wins), "conv_out": np.concatenate(convs)}


def conv_block(lib, x, W, b, g: dict):
    """One block through the port's crnn_conv_forward, geometry `g` (model.block_geometry)
    -> (conv [P][Out], pooled [Hp][Wp][Out], winners [Hp][Wp][Out]); the pooled output is the
    next block's input."""
    Wt, bt = f32(W), f32(b)
    conv = out((g["Hc"] * g["Wc"], g["out"]))
    pooled = out((g["Hp"], g["Wp"], g["out"]))
    win = out((g["Hp"], g["Wp"], g["out"]), np.int32)
    call(lib, "crnn_conv_forward", ptr(x), g["H"], g["W"], g["C"], ptr(Wt), ptr(bt),
         g["out"], g["kh"], g["kw"], g["padH"], g["padW"], g["poolH"], g["poolW"],
         ptr(conv), ptr(pooled), ptr(win))
    return conv, pooled, win
