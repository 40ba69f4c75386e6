"""The whole-model batch gradient through a port: crnn_model_sizes + crnn_step_gradients.

The port's gradient vector is split into the named parameter tensors with the sizes the port
reports; a port whose sizes differ from the config's parameter shapes fails the call."""
from __future__ import annotations

import math

import numpy as np

from ...ctypes_kernels import layer_table
from ...ctypes_kernels.abi import PortCallError

from ._ffi import call, f32, i32, out, ptr

LAYER = "step"
FIXTURES = layer_table.fixtures(LAYER)   # stems and tiers: ctypes_kernels/layer_table.py
TIERS = layer_table.tiers(LAYER)
INPUTS = ("cfg", "params", "widths", "images", "target_lens", "targets")


def required_inputs(case) -> list[str]:
    """INPUTS, and the PyTorch pooled values the flip rule reads (pytorch tier)."""
    return list(INPUTS) + (["pt_pooled"] if "pytorch" in case.expected else [])


def param_sizes(lib, cfg, shapes) -> np.ndarray:
    n = out(1, np.int32)
    call(lib, "crnn_model_sizes", ptr(cfg), ptr(n), None)
    sizes = out(max(int(n[0]), 0), np.int64)
    call(lib, "crnn_model_sizes", ptr(cfg), ptr(n), ptr(sizes))
    want = [math.prod(s) for s in shapes]
    if sizes.tolist() != want:
        raise PortCallError(f"crnn_model_sizes reports {len(sizes)} tensors {list(sizes)[:6]}...; "
                            f"the config has {len(want)} tensors {want[:6]}...")
    return sizes


def batch_gradient(lib, case, params) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """-> (flat gradient, losses[B], batch_loss[1]) for the case's batch at `params`."""
    inp = case.inputs
    cfg = i32(inp["cfg"])
    widths, images = i32(inp["widths"]), f32(inp["images"])
    lens, targets = i32(inp["target_lens"]), i32(inp["targets"])
    B = len(widths)
    grads = out(params.size)
    losses = out(B, np.float64)
    batch_loss = out(1, np.float64)
    call(lib, "crnn_step_gradients", ptr(cfg), ptr(params), B, ptr(widths), ptr(images), ptr(lens),
         ptr(targets) if targets.size else None, ptr(grads), ptr(losses), ptr(batch_loss))
    return grads, losses, batch_loss


def split(flat, names, shapes) -> dict:
    result, at = {}, 0
    for name, shape in zip(names, shapes):
        n = math.prod(shape)
        result[name] = flat[at:at + n].reshape(shape)
        at += n
    return result


def run(lib, case) -> dict:
    names, shapes = case.params["names"], case.params["shapes"]
    param_sizes(lib, i32(case.inputs["cfg"]), shapes)
    grads, losses, batch_loss = batch_gradient(lib, case, f32(case.inputs["params"]))
    result = split(grads, names, shapes)
    result["losses"] = losses
    result["batch_loss"] = batch_loss
    if "pytorch" in getattr(case, "expected", {}):   # the flip rule: the port's pool decisions
        from ..flips import port_pool_outputs
        result.update(port_pool_outputs(lib, case))
    return result


def outputs(case) -> list[str]:
    """The tensors run() returns: the gradients, the losses and, with a pytorch tier, the
    port's pool decisions (winners, conv_out)."""
    pool = ["winners", "conv_out"] if "pytorch" in getattr(case, "expected", {}) else []
    return [*case.params["names"], "losses", "batch_loss", *pool]


def tier_verdict(case, tier, ours, ref, arrays):
    """The pool-flip verdict of the case in the pytorch tier (harness/flips/), made once for
    all its tensors (the one flip a gradient may use is the case's, not the tensor's) by the
    caller that compares them all; None in the other tiers, which have no flip rule."""
    if tier != "pytorch" or "winners" not in ref or "winners" not in ours:
        return None
    from ..flips import step_verdict
    return step_verdict(case, ours, ref, arrays)


def compare_tier(case, tier, tensor, ours, ref, tol, floor, verdict=None):
    """The pytorch tier judges pool flips (harness/flips/) under the case's `verdict`
    (tier_verdict; made here when not given); every other tier compares as usual."""
    if tier == "pytorch" and "winners" in ref:
        from ..flips import compare_step
        return compare_step(case, tensor, ours, ref, tol, floor, verdict)
    from ..compare import compare
    return compare(ours[tensor], ref[tensor], tier, tol.atol if tol else 0.0,
                   tol.rtol if tol else 0.0, floor or 0.0)
