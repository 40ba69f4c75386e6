"""PyTorch-tier whole-model batch gradient: the trained crnn-v0 on a batch of four real lines.

The lines (crnn_conformance.generators.pytorch_ref.BATCH_*: widths 78, 99, 33, 257, all with an alignment) and
the trained weights (fp16 widened) are the inputs of crnn_step_gradients, as in the step
fixture. PyTorch runs each line (conv -> ReLU -> max_pool2d blocks, sequence map, nn.LSTM
layers with bias_hh = 0, Linear, log_softmax, ctc_loss reduction='none') and backpropagates
loss / B, accumulating in line order: the plain-mean batch gradient. fp32 and float64.

Expected (pytorch tier): every parameter gradient (named by model.param_specs), the per-line
losses [B] (fp32 values as float64), the batch loss [1] (fp32 sum / B), and `winners`:
PyTorch's pool indices (as our flat p*Out + o) of every block of every line, concatenated
line by line, block by block ([Hp][Wp][Out] each, raveled). For the flip rule the harness
also needs PyTorch's pooled values (a dead window's index points at a cell holding 0), the
input `pt_pooled` in the same layout, and the Floor of each block's conv values
(params.conv_floor): see harness/flips/rule.py.
"""
from __future__ import annotations

import numpy as np

from .. import model
from .. import pytorch_ref as R
from ..h5io import Case

NAME = "pytorch_step"
LAYER = "step"
SEED = R.BATCH_SEED
EXTRA_ATTRS: dict | None = None


def concat(traces, key, dtype):
    return np.concatenate([np.asarray(a, dtype).ravel() for tr in traces for a in tr[key]])


def build() -> list[Case]:
    global EXTRA_ATTRS
    EXTRA_ATTRS = R.provenance()
    d = R.batch_data()
    config, params = d["config"], d["params"]
    images, targets = d["images"], d["targets"]
    specs = model.param_specs(config)
    names = [s.name for s in specs]
    r32, r64 = d["fp32"], d["f64"]
    e32 = {n: r32["grads"][n] for n in names}
    e64 = {n: r64["grads"][n] for n in names}
    e32["losses"], e64["losses"] = r32["losses"], r64["losses"]
    e32["batch_loss"] = np.array([r32["batch_loss"]], np.float64)
    e64["batch_loss"] = np.array([r64["batch_loss"]], np.float64)
    fl = R.floors(e32, e64)
    e32["winners"] = concat(r32["traces"], "winners", np.int32)
    pt_pooled = concat(r32["traces"], "pooled", np.float32)
    fl["inputs/pt_pooled"] = R.floor(pt_pooled, concat(r64["traces"], "pooled", np.float64))
    nb = len(config["blocks"])
    conv_floor = [max(R.floor(t32["conv"][n], t64["conv"][n])
                      for t32, t64 in zip(r32["traces"], r64["traces"])) for n in range(nb)]
    w64 = concat(r64["traces"], "winners", np.int32)
    dead = (pt_pooled == 0) & (concat(r64["traces"], "pooled", np.float64) == 0)
    inputs = {"cfg": model.cfg_array(config), "params": model.flatten(config, params),
              "widths": np.array([im.shape[1] for im in images], np.int32),
              "images": np.concatenate([np.asarray(im, np.float32).ravel() for im in images]),
              "target_lens": np.array([len(t) for t in targets], np.int32),
              "targets": np.concatenate([np.asarray(t, np.int32) for t in targets]),
              "pt_pooled": pt_pooled}
    p = {"config": config, "names": names, "shapes": [list(s.shape) for s in specs],
         "B": len(images), "widths": [int(im.shape[1]) for im in images],
         "steps": [int(model.steps_for_width(config, im.shape[1])) for im in images],
         "target_lens": [len(t) for t in targets], "conv_floor": conv_floor,
         "winners_fp32_vs_f64": int(((e32["winners"] != w64) & ~dead).sum()),
         "dead_windows": int((pt_pooled == 0).sum()), "windows": int(pt_pooled.size),
         "tier": "pytorch",
         "note": "trained crnn-v0, 4 real lines (widths 78/99/33/257), plain-mean CTC"}
    return [Case("crnn_v0_trained_b4", p, inputs, {"pytorch": e32}, fl)]
