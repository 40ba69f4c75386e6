"""Three real training steps in PyTorch (batch gradient, clip_grad_norm_, AdamW) from the
trained model, in fp32 and float64, and the mask of the weights the train3 fixture compares."""
from __future__ import annotations

import numpy as np

from .. import model

from . import data
from .network import Model
from .torch_env import _torch, deterministic


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


_CACHE: dict = {}


def train_data() -> dict:
    """The 3-step trajectories from the trained model in fp32 and float64 (cached)."""
    key = ("train", str(data.MODEL_PATH))
    if key not in _CACHE:
        config, params = data.trained_model()
        batches = [data.real_lines(s, TRAIN_B) for s in TRAIN_SEEDS]
        d = {"config": config, "params": params, "batches": batches}
        with deterministic():
            d["fp32"] = train_steps(config, params, batches, "fp32")
            d["f64"] = train_steps(config, data.params64(params), batches, "f64")
        _CACHE[key] = d
    return _CACHE[key]
