"""train3: 1..3 real steps (batch gradient, clipping, AdamW) on a tiny config (the step
strategy's), 1..2 lines a step, with drawn hyper-parameters and clipping limits that do and
do not clip."""
from __future__ import annotations

import numpy as np

from ....generators import model

from ..values import Choice, Reader, cases as from_bytes
from . import step
from .adamw import hyper

SIZE = 140          # bytes a case at most (config, weights, training, 6 lines)
MAX_LINES, MAX_STEPS = 2, 3
LIMITS = Choice((1.0, 0.1, 5.0, 1e-3))


def decode(r: Reader):
    c = step.config(r)
    specs = step.specs_of(c)
    p = step.weights(r, specs)
    B, steps = 1 + r.below(MAX_LINES), 1 + r.below(MAX_STEPS)
    inputs = {"cfg": model.cfg_array(c), "params": p.flat,
              "hparams": np.array(hyper(r), np.float64),
              "clip": np.array([LIMITS.read(r), float(r.flag(0.5))], np.float64)}
    for t in range(MAX_STEPS):              # fixed-size slots: fewer steps only drop the last
        lines = step.batch(r, c, B if t < steps else 0, MAX_LINES)
        if lines:
            for k, v in step.inputs_of(lines).items():
                inputs[f"batch{t}_{k}"] = v
    params = {"config": c, "names": [s.name for s in specs],
              "shapes": [list(s.shape) for s in specs], "decay": [bool(s.decay) for s in specs],
              "steps": steps}
    return params, inputs


def cases():
    return from_bytes(decode, SIZE)
