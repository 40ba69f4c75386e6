"""Three real training steps through a port: per batch crnn_step_gradients, then
crnn_clip_gradients, then crnn_adamw on every tensor (the running beta products kept here).

Returns the weights (named by parameter), their moments ("<name>.m", "<name>.v"), the losses
[3][B] and the norms [3]. The float64 tier compares the weights only where the fixture's
mask says the float64 gradient is large enough in every step (compare_tier)."""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from ...ctypes_kernels import layer_table
from ..compare import compare

from . import step as step_layer
from ._ffi import assign, call, copy, f32, i32, out, ptr, zeros

LAYER = "train3"
FIXTURES = layer_table.fixtures(LAYER)   # stems and tiers: ctypes_kernels/layer_table.py
TIERS = layer_table.tiers(LAYER)
INPUTS = ("cfg", "params", "hparams", "clip")
BATCH_INPUTS = ("widths", "images", "target_lens", "targets")


def required_inputs(case) -> list[str]:
    """INPUTS and each step's batch (batch<t>_widths, ...)."""
    return list(INPUTS) + [f"batch{t}_{k}" for t in range(int(case.params["steps"]))
                           for k in BATCH_INPUTS]


class _Batch:
    """The view of one batch that step_layer.batch_gradient reads."""

    def __init__(self, case, t):
        self.inputs = {"cfg": case.inputs["cfg"], **{k: case.inputs[f"batch{t}_{k}"] for k in
                                                    ("widths", "images", "target_lens", "targets")}}


def run(lib, case) -> dict:
    names, shapes, decay = case.params["names"], case.params["shapes"], case.params["decay"]
    cfg = i32(case.inputs["cfg"])
    sizes = step_layer.param_sizes(lib, cfg, shapes)
    lr, beta1, beta2, eps, wd = (float(x) for x in case.inputs["hparams"])
    limit, enabled = float(case.inputs["clip"][0]), int(case.inputs["clip"][1])
    params = copy(f32(case.inputs["params"]))
    offs = np.concatenate([[0], np.cumsum(sizes)])
    # each tensor's p, m, v in buffers of their own, so a write past one hits a guard zone
    p = [copy(params[a:b]) for a, b in zip(offs[:-1], offs[1:])]
    m, v = [zeros(len(x)) for x in p], [zeros(len(x)) for x in p]
    steps = int(case.params["steps"])
    losses, norms = [], np.empty(steps, np.float64)
    b1t = b2t = 1.0
    for t in range(steps):
        grads, line_losses, _ = step_layer.batch_gradient(lib, _Batch(case, t), params)
        losses.append(line_losses)
        norm = out(1, np.float64)
        call(lib, "crnn_clip_gradients", ptr(grads), ptr(sizes), len(sizes), limit, enabled,
             ptr(norm))
        norms[t] = norm[0]
        b1t, b2t = b1t * beta1, b2t * beta2
        for i in range(len(sizes)):
            a, b = int(offs[i]), int(offs[i + 1])
            call(lib, "crnn_adamw", ptr(p[i]), ptr(m[i]), ptr(v[i]), ptr(grads[a:b]),
                 b - a, lr, beta1, beta2, eps, wd, int(decay[i]), b1t, b2t)
            assign(params[a:b], p[i])
    result = {}
    for i, (name, shape) in enumerate(zip(names, shapes)):
        result[name] = p[i].reshape(shape)
        result[f"{name}.m"] = m[i].reshape(shape)
        result[f"{name}.v"] = v[i].reshape(shape)
    result["losses"] = np.stack(losses)
    result["norms"] = norms
    return result


def outputs(case) -> list[str]:
    """The tensors run() returns: each weight with its moments, the losses and the norms."""
    return [n for name in case.params["names"] for n in (name, f"{name}.m", f"{name}.v")] + \
        ["losses", "norms"]


def compare_tier(case, tier, tensor, ours, ref, tol, floor):
    """The float64 tier compares weights only where the gradient was large in all 3 steps."""
    mask = None
    if tier == "float64" and f"mask_{tensor}" in case.inputs:
        mask = case.inputs[f"mask_{tensor}"].astype(bool)
    pt_note = None
    if tier == "pytorch" and f"grad0.{tensor}" in case.inputs:
        mask, pt_note = pytorch_mask(case, tensor)
    c = compare(ours[tensor], ref[tensor], tier, tol.atol if tol else 0.0, tol.rtol if tol else 0.0,
                floor or 0.0, mask=mask)
    if mask is not None:
        note = pt_note or (f"{int(mask.sum())} of {mask.size} elements compared (gradient >= 50 "
                           "bounds in every step)")
        c = replace(c, note=f"{c.note}; {note}" if c.note else note)
    return c


def pytorch_mask(case, tensor):
    """pytorch_train3: compared where |grad<t>| >= 50 Floors of grad<t> in every step t (the
    kept PyTorch fp32 gradients and their Floors;
    crnn_conformance.generators.pytorch_ref.training.train_mask)."""
    from ...generators.pytorch_ref.training import MASK_FACTOR, train_mask
    steps = int(case.params["steps"])
    mask = train_mask([case.inputs[f"grad{t}.{tensor}"] for t in range(steps)],
                      [case.floor[f"inputs/grad{t}.{tensor}"] for t in range(steps)])
    n = int(mask.sum())
    return mask, (f"{n} of {mask.size} elements compared, {mask.size - n} masked (|gradient| < "
                  f"{MASK_FACTOR:g} Floors in some step); Floor over the compared elements")
