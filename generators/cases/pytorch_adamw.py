"""PyTorch-tier AdamW cases: three steps of torch.optim.AdamW (foreach=False) on stored real
gradients, one crnn-v0 tensor per case.

p0 is the trained weight (fp16 widened); the three gradients are the fp32 batch gradients of
the three real training steps (crnn_conformance.generators.pytorch_ref.train_data, before clipping). The
hyper-parameters are the train3 ones (lr 1e-3, betas 0.9/0.999, eps 1e-8, weight decay
0.01 on weight matrices only; a bias case with decay switched on covers the setting).
PyTorch runs in fp32 and in float64 on the same fp32 values. Its AdamW is not the spec's
order (lerp and addcmul use fma), so this is a tolerance comparison, never an exact one.

Expected (pytorch tier): p, m (exp_avg), v (exp_avg_sq) after three steps.
"""
from __future__ import annotations

import numpy as np

from .. import model
from .. import pytorch_ref as R
from ..h5io import Case

NAME = "pytorch_adamw"
LAYER = "adamw"
SEED = R.TRAIN_SEEDS[0]
EXTRA_ATTRS: dict | None = None
TENSORS = ("conv0.W", "conv0.b", "conv2.W", "lstm0.fwd.W_hh", "lstm1.rev.W_ih", "lstm1.rev.b",
           "fc.W", "fc.b")


def rerun(inputs: dict, params: dict) -> tuple[dict, dict]:
    """The three AdamW steps in PyTorch on a case's inputs: -> (fp32 outputs, float64 outputs).
    regen-fixtures --check reruns the checked-in inputs with it on another CPU."""
    p0, grads = np.asarray(inputs["p"]), np.asarray(inputs["grads"])
    hp = {k: params[k] for k in ("lr", "beta1", "beta2", "eps", "wd")}
    return (R.adamw(p0, grads, params["decay"], hp, "fp32"),
            R.adamw(p0.astype(np.float64), grads.astype(np.float64), params["decay"], hp, "f64"))


def _case(name, p0, grads, decay, floors_in, note):
    hp = R.TRAIN_HP
    p0 = np.ascontiguousarray(p0, np.float32)
    grads = np.ascontiguousarray(np.stack(grads), np.float32)
    e32, e64 = rerun({"p": p0, "grads": grads}, {**hp, "decay": bool(decay)})
    fl = R.floors(e32, e64)
    fl["inputs/grads"] = max(floors_in)
    inputs = {"p": p0, "grads": grads,
              "hparams": np.array([hp[k] for k in ("lr", "beta1", "beta2", "eps", "wd")],
                                  np.float64),
              "decay": np.array([int(decay)], np.int32)}
    return Case(name, {**hp, "decay": bool(decay), "steps": len(grads), "shape": list(p0.shape),
                       "max_abs_grad": float(np.abs(grads).max()), "tier": "pytorch",
                       "note": note}, inputs, {"pytorch": e32}, fl)


def build() -> list[Case]:
    global EXTRA_ATTRS
    EXTRA_ATTRS = R.provenance()
    d = R.train_data()
    specs = {s.name: s for s in model.param_specs(d["config"])}
    g32, g64 = d["fp32"]["grads"], d["f64"]["grads"]
    cases = []
    with R.deterministic():
        for name in TENSORS:
            grads = [g[name] for g in g32]
            fin = [R.floor(a[name], b[name]) for a, b in zip(g32, g64)]
            cases.append(_case(name, d["params"][name], grads, specs[name].decay, fin,
                               f"trained {name}, real gradients of 3 steps, decay "
                               f"{'on' if specs[name].decay else 'off'}"))
        name = "fc.b"
        cases.append(_case("fc.b_bias_decay", d["params"][name], [g[name] for g in g32], True,
                           [R.floor(a[name], b[name]) for a, b in zip(g32, g64)],
                           "fc.b with decay switched on (the setting)"))
    return cases
