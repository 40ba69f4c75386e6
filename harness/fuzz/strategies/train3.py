"""train3: 1..3 real steps (batch gradient, clipping, AdamW) on a tiny config (the step
strategy's), with drawn hyper-parameters and clipping limits that do and do not clip."""
from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from crnn_conformance.generators import model

from ..values import BOOLEANS, ints, sampled
from . import step
from .adamw import hyper


@st.composite
def cases(draw):
    c = draw(step.config())
    p = draw(step.weights(c))
    B, steps = draw(ints(1, 2)), draw(ints(1, 3))
    inputs = {"cfg": model.cfg_array(c), "params": model.flatten(c, p),
              "hparams": np.array(draw(hyper()), np.float64),
              "clip": np.array([draw(sampled((1.0, 0.1, 5.0, 1e-3))),
                                float(draw(BOOLEANS))], np.float64)}
    for t in range(steps):
        lines = draw(step.batch(c, B))
        for k, v in step.inputs_of(c, p, lines).items():
            inputs[f"batch{t}_{k}"] = v
    specs = model.param_specs(c)
    params = {"config": c, "names": [s.name for s in specs],
              "shapes": [list(s.shape) for s in specs], "decay": [bool(s.decay) for s in specs],
              "steps": steps}
    return params, inputs
