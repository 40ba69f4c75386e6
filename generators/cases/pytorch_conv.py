"""PyTorch-tier conv block cases: each of crnn-v0's three blocks on its real input.

The trained model (fixtures/model/crnn-v0.h5, fp16 widened) runs two real lines
(crnn_conformance.generators.pytorch_ref.LAYER_LINES: widths 78 and 257) in fp32; each block's real input x
(the image, then the previous block's pooled output) and the real gradient of its pooled
output dPooled are this fixture's inputs. The block is then rerun alone in PyTorch, fp32 and
float64, on those same fp32 inputs (weights widened exactly): conv2d -> relu ->
max_pool2d(return_indices=True), and its backward from dPooled.

Expected (pytorch tier, fp32 values): conv [P][Out] (before ReLU), pooled [Hp][Wp][Out],
winners (PyTorch's indices as our flat p*Out + o; a dead window keeps PyTorch's index of a
cell holding 0, which the harness does not count as a difference: the spec says -1), dW
[Out][KPadded] (padding columns exact zeros), db, and dx for blocks 2 and 3. Floor = max
|fp32 - float64| per tensor; the floors of the inputs (their own fp32 - float64 difference
in the whole-model run) are kept as "inputs/<name>" for regen --check on another CPU.
"""
from __future__ import annotations

import numpy as np

from .. import pytorch_ref as R
from ..geometry import conv_size
from ..h5io import Case

NAME = "pytorch_conv"
LAYER = "conv"
SEED = R.BATCH_SEED
EXTRA_ATTRS: dict | None = None
GEOMETRY = ("kh", "kw", "padH", "padW", "poolH", "poolW")


def rerun(inputs: dict, params: dict) -> tuple[dict, dict]:
    """The block alone in PyTorch on a case's inputs: -> (fp32 outputs, float64 outputs).
    regen-fixtures --check reruns the checked-in inputs with it on another CPU."""
    x, W, b, dP = (np.asarray(inputs[k]) for k in ("x", "W", "b", "dPooled"))
    geo = {k: params[k] for k in GEOMETRY}
    f64 = [a.astype(np.float64) for a in (x, W, b)]
    return (R.conv_block(x, W, b, geo, dP, "fp32", params["dx"]),
            R.conv_block(*f64, geo, dP.astype(np.float64), "f64", params["dx"]))


def build() -> list[Case]:
    global EXTRA_ATTRS
    EXTRA_ATTRS = R.provenance()
    d = R.batch_data()
    config, params = d["config"], d["params"]
    cases = []
    with R.deterministic():
        for n, blk in enumerate(config["blocks"]):
            for line in R.LAYER_LINES:
                t32, t64 = d["fp32"]["traces"][line], d["f64"]["traces"][line]
                x = np.ascontiguousarray(t32["block_in"][n], np.float32)
                dP = np.ascontiguousarray(t32["dPooled"][n], np.float32)
                W, b = params[f"conv{n}.W"], params[f"conv{n}.b"]
                want_dx = n > 0
                e32, e64 = rerun({"x": x, "W": W, "b": b, "dPooled": dP},
                                 {**{k: blk[k] for k in GEOMETRY}, "dx": want_dx})
                fl = R.floors(e32, e64)
                fl["inputs/x"] = R.floor(x, t64["block_in"][n])
                fl["inputs/dPooled"] = R.floor(dP, t64["dPooled"][n])
                H, Wd, C = x.shape
                Hc, Wc = conv_size(H, Wd, blk["kh"], blk["kw"], blk["padH"], blk["padW"])
                dead = int((e32["pooled"] == 0).sum())
                params_ = {"block": n + 1, "line": line, "H": H, "W": Wd, "C": C,
                           "Out": blk["out"], **{k: blk[k] for k in GEOMETRY}, "dx": want_dx,
                           "Hc": Hc, "Wc": Wc, "P": Hc * Wc, "KPadded": int(W.shape[1]),
                           "dead": dead, "windows": int(e32["pooled"].size),
                           "winners_fp32_vs_f64": int((e32["winners"] != e64["winners"]).sum()),
                           "tier": "pytorch", "note": "trained crnn-v0, real line input"}
                cases.append(Case(f"b{n + 1}_line{line}_W{d['images'][line].shape[1]}", params_,
                                  {"x": x, "W": W, "b": b, "dPooled": dP}, {"pytorch": e32}, fl))
    return cases
