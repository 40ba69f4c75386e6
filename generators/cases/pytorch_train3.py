"""PyTorch-tier weights after three real training steps from the trained crnn-v0.

Three batches of four real lines (crnn_conformance.generators.pytorch_ref.TRAIN_SEEDS), each step: the batch
gradient (plain-mean CTC), torch.nn.utils.clip_grad_norm_ at 5, torch.optim.AdamW
(foreach=False; lr 1e-3, betas 0.9/0.999, eps 1e-8, weight decay 0.01 on weight matrices
only), in fp32 and in float64 (two trajectories from the same fp16-widened weights). The
inputs are those of the train3 fixture (so harness/layers/train3.py runs it unchanged), plus
each step's fp32 batch gradient, kept as "grad<t>.<name>" with its Floor (floor key
"inputs/grad<t>.<name>").

Expected (pytorch tier): the weights after the third step, by parameter name. The harness
compares them only where |grad<t>| >= 50 * Floor(grad<t>) in every step t
(crnn_conformance.generators.pytorch_ref.training.train_mask); each weight's Floor is max |fp32 - float64| over those
compared elements (elsewhere the sign of Adam's first steps is decided by rounding, and the
two trajectories legitimately differ by up to about 2*lr per step).
"""
from __future__ import annotations

import numpy as np

from .. import model
from .. import pytorch_ref as R
from ..h5io import Case

NAME = "pytorch_train3"
LAYER = "train3"
SEED = R.TRAIN_SEEDS[0]
EXTRA_ATTRS: dict | None = None


def compared(inputs: dict, floor: dict, params: dict, tensor: str) -> np.ndarray:
    """Where the weights `tensor` are compared: the 50-Floor mask of its gradients (the Floor
    of expected/pytorch/<tensor> is taken over it). regen-fixtures --check compares two
    builds where both masks hold."""
    steps = range(params["steps"])
    return R.train_mask([inputs[f"grad{t}.{tensor}"] for t in steps],
                        [floor[f"inputs/grad{t}.{tensor}"] for t in steps])


def build() -> list[Case]:
    global EXTRA_ATTRS
    EXTRA_ATTRS = R.provenance()
    d = R.train_data()
    config, params = d["config"], d["params"]
    specs = model.param_specs(config)
    names = [s.name for s in specs]
    steps = len(d["batches"])
    r32, r64 = d["fp32"], d["f64"]
    inputs = {"cfg": model.cfg_array(config), "params": model.flatten(config, params),
              "hparams": np.array([R.TRAIN_HP[k] for k in ("lr", "beta1", "beta2", "eps", "wd")]),
              "clip": np.array([R.TRAIN_CLIP, 1.0])}
    for t, (images, targets) in enumerate(d["batches"]):
        inputs[f"batch{t}_widths"] = np.array([im.shape[1] for im in images], np.int32)
        inputs[f"batch{t}_images"] = np.concatenate([im.ravel() for im in images]).astype(np.float32)
        inputs[f"batch{t}_target_lens"] = np.array([len(x) for x in targets], np.int32)
        inputs[f"batch{t}_targets"] = np.concatenate([np.asarray(x, np.int32) for x in targets])
    fl, compared, expected = {}, {}, {}
    for n in names:
        gs = [np.ascontiguousarray(r32["grads"][t][n], np.float32) for t in range(steps)]
        fs = [R.floor(r32["grads"][t][n], r64["grads"][t][n]) for t in range(steps)]
        for t in range(steps):
            inputs[f"grad{t}.{n}"] = gs[t]
            fl[f"inputs/grad{t}.{n}"] = fs[t]
        mask = R.train_mask(gs, fs)
        p32, p64 = r32["params"][n], r64["params"][n]
        expected[n] = np.ascontiguousarray(p32, np.float32)
        fl[n] = R.floor(p32[mask], p64[mask]) if mask.any() else 0.0
        compared[n] = int(mask.sum())
    p = {"config": config, "names": names, "shapes": [list(s.shape) for s in specs],
         "decay": [bool(s.decay) for s in specs], "steps": steps, **R.TRAIN_HP,
         "clip_limit": R.TRAIN_CLIP, "norms_fp32": [float(x) for x in r32["norms"]],
         "clipped": [bool(x > R.TRAIN_CLIP) for x in r32["norms"]],
         "mask_factor": R.MASK_FACTOR, "compared": compared,
         "compared_total": int(sum(compared.values())),
         "elements_total": int(sum(int(np.prod(s.shape)) for s in specs)),
         "widths": [[int(im.shape[1]) for im in b[0]] for b in d["batches"]],
         "losses_fp32": [[float(v) for v in x] for x in r32["losses"]], "tier": "pytorch",
         "note": "trained crnn-v0, 3 real steps (clip 5, AdamW), PyTorch fp32 vs float64"}
    return [Case("crnn_v0_trained_3steps", p, inputs, {"pytorch": expected}, fl)]
