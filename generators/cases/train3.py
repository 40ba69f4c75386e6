"""Weights after three real training steps: batch gradient -> clipping -> AdamW, three times.

crnn-v0 with random fp16-representable weights (as the step fixture), three batches of four
synthetic lines (widths 40..80, with and without 16-tails in the conv rows), clipping on with
limit 5 (the first steps' norms lie above it, later ones may not), AdamW lr 1e-3, betas
0.9/0.999, eps 1e-8, weight decay 0.01 on the weight matrices only (model.param_specs).

Tensors, exact tier: every weight (named by its parameter), its first and second moments
("<name>.m", "<name>.v"), the per-step losses [3][B] and norms [3].
Float64 tier: the weights of the float64 trajectory (float64 batch gradient, clipping and
AdamW), compared only where the float64 gradient is at least 50 times its error bound in every
one of the three steps (input "mask_<name>"): below that, the direction of Adam's first steps
is decided by rounding (docs/backward.md, "AdamW", three real steps). The error bound is
crnn_conformance.generators.cases.step.propagated_error on that step's batch and weights, per tensor (its max).
"""
from __future__ import annotations

import numpy as np

from .. import draw, model
from . import step as step_cases
from ..float64 import adamw as adamw64
from ..float64 import clip as clip64
from ..float64 import step as step64
from ..h5io import Case
from ..spec import adamw as adamw_spec
from ..spec import clip as clip_spec
from ..spec import step as step_spec

NAME = "train3"
LAYER = "train3"
SEED = 3003
STEPS = 3
WIDTHS = ((40, 57, 64, 80), (48, 64, 72, 33), (64, 45, 80, 56))
HP = {"lr": 1e-3, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "wd": 0.01}
CLIP = 5.0
MASK_FACTOR = 50.0


def make_batches(rng):
    from .. import lines
    batches = []
    for widths in WIDTHS:
        images, targets = [], []
        for w in widths:
            T = w // 4
            img, tgt = lines.make_line(rng, lines.random_text(rng, 2, (T - 1) // 2), w)
            images.append(img)
            targets.append(tgt)
        batches.append((images, targets))
    return batches


def build() -> list[Case]:
    rng = draw.rng(SEED)
    config = model.default_config()
    specs = model.param_specs(config)
    names = [s.name for s in specs]
    params = step_cases.fp16_params(config, model.init_params(config, rng))
    batches = make_batches(rng)

    # the executable spec
    opt = adamw_spec.AdamW([params[n] for n in names], [s.decay for s in specs], **HP)
    losses, norms = np.zeros((STEPS, 4)), np.zeros(STEPS)
    for t, (images, targets) in enumerate(batches):
        p = dict(zip(names, opt.p))
        grads, losses[t], _ = step_spec.batch_gradient(config, p, images, targets)
        clipped, norms[t] = clip_spec.clip([grads[n] for n in names], CLIP, True)
        opt.step(clipped)

    # the float64 trajectory and the comparison mask
    p64 = {n: params[n].astype(np.float64) for n in names}
    m64 = {n: np.zeros(params[n].shape) for n in names}
    v64 = {n: np.zeros(params[n].shape) for n in names}
    mask = {n: np.ones(params[n].shape, bool) for n in names}
    norms64 = np.zeros(STEPS)
    for t, (images, targets) in enumerate(batches):
        g64, _, _ = step64.batch_gradient(config, p64, images, targets)
        bound = step_cases.propagated_error(config, p64, images, targets)
        for n in names:
            mask[n] &= np.abs(g64[n]) >= MASK_FACTOR * float(np.max(bound[n]))
        clipped, norms64[t] = clip64.clip([g64[n] for n in names], CLIP, True)
        for n, g in zip(names, clipped):
            dec = next(s.decay for s in specs if s.name == n)
            p64[n], m64[n], v64[n] = adamw64.step(p64[n], m64[n], v64[n], g, t + 1, HP["lr"],
                                                 HP["beta1"], HP["beta2"], HP["eps"], HP["wd"], dec)

    inputs = {"cfg": model.cfg_array(config), "params": model.flatten(config, params),
              "hparams": np.array([HP[k] for k in ("lr", "beta1", "beta2", "eps", "wd")]),
              "clip": np.array([CLIP, 1.0])}
    for t, (images, targets) in enumerate(batches):
        inputs[f"batch{t}_widths"] = np.array([im.shape[1] for im in images], np.int32)
        inputs[f"batch{t}_images"] = np.concatenate([im.ravel() for im in images]).astype(np.float32)
        inputs[f"batch{t}_target_lens"] = np.array([len(x) for x in targets], np.int32)
        inputs[f"batch{t}_targets"] = np.concatenate([np.asarray(x, np.int32) for x in targets])
    for n in names:
        inputs[f"mask_{n}"] = mask[n].astype(np.uint8)

    exact = {}
    for n, p, m, v in zip(names, opt.p, opt.m, opt.v):
        exact[n] = p
        exact[f"{n}.m"] = m
        exact[f"{n}.v"] = v
    exact["losses"] = losses
    exact["norms"] = norms
    f64 = {n: p64[n] for n in names}
    compared = {n: round(float(mask[n].mean()), 4) for n in names}
    case_params = {"config": config, "names": names, "shapes": [list(s.shape) for s in specs],
                   "decay": [bool(s.decay) for s in specs], "steps": STEPS, **HP,
                   "clip_limit": CLIP, "clipped": [bool(x > CLIP) for x in norms],
                   "mask_factor": MASK_FACTOR, "compared_fraction": compared,
                   "widths": [list(w) for w in WIDTHS],
                   "note": "crnn-v0, 3 batches x 4 lines, clip 5, AdamW defaults"}
    return [Case("crnn_v0_3steps", case_params, inputs, {"exact": exact, "float64": f64})]
