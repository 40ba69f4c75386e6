"""AdamW fixture cases: weights, m and v after three steps on stored gradients, one tensor per
case (crnn-v0 shapes), with and without decay, bias decay by the setting, different
hyper-parameters and gradient scales (down to where sqrt(v) meets eps)."""
from __future__ import annotations

import numpy as np

from .. import draw, model
from ..float64 import adamw as ref
from ..h5io import Case
from ..spec import adamw as spec

NAME = "adamw"
LAYER = "adamw"
SEED = 8008
STEPS = 3
DEFAULT = {"lr": 1e-3, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "wd": 0.01}


def _case(name, p0, grads, hp, decay, note):
    p0 = np.ascontiguousarray(p0, np.float32)
    grads = np.ascontiguousarray(grads, np.float32)
    opt = spec.AdamW([p0], [decay], **hp)
    p64, m64, v64 = p0.astype(np.float64), np.zeros(p0.shape), np.zeros(p0.shape)
    for t in range(STEPS):
        opt.step([grads[t]])
        p64, m64, v64 = ref.step(p64, m64, v64, grads[t], t + 1, hp["lr"], hp["beta1"],
                                 hp["beta2"], hp["eps"], hp["wd"], decay)
    inputs = {"p": p0, "grads": grads,
              "hparams": np.array([hp[k] for k in ("lr", "beta1", "beta2", "eps", "wd")], np.float64),
              "decay": np.array([int(decay)], np.int32)}
    return Case(name, {**hp, "decay": bool(decay), "steps": STEPS, "shape": list(p0.shape),
                       "note": note}, inputs,
                {"exact": {"p": opt.p[0], "m": opt.m[0], "v": opt.v[0]},
                 "float64": {"p": p64, "m": m64, "v": v64}})


def build() -> list[Case]:
    rng = draw.rng(SEED)
    config = model.default_config()
    specs = {s.name: s for s in model.param_specs(config)}
    init = model.init_params(config, rng)
    cases = []
    for name, sigma in (("conv0.W", 0.05), ("conv0.b", 0.05), ("conv2.W", 0.01),
                        ("lstm1.fwd.W_ih", 0.002), ("lstm1.rev.W_hh", 0.002), ("lstm1.rev.b", 0.01),
                        ("fc.W", 0.02), ("fc.b", 0.1)):
        s = specs[name]
        g = rng.normal(0.0, sigma, (STEPS, *s.shape))
        cases.append(_case(name, init[name], g, DEFAULT, s.decay,
                           f"crnn-v0 {name}, defaults, decay {'on' if s.decay else 'off'}"))
    g = rng.normal(0.0, 0.05, (STEPS, 37))
    cases.append(_case("fc.b_bias_decay", init["fc.b"], g, DEFAULT, True,
                       "bias decay switched on (the setting)"))
    hp = {"lr": 3e-4, "beta1": 0.8, "beta2": 0.99, "eps": 1e-6, "wd": 0.05}
    g = rng.normal(0.0, 0.02, (STEPS, 64, 33))
    cases.append(_case("other_hparams", rng.uniform(-0.5, 0.5, (64, 33)), g, hp, True,
                       "lr 3e-4, betas 0.8/0.99, eps 1e-6, wd 0.05; 33 columns"))
    scales = 10.0 ** rng.uniform(-9, -1, (1, 40, 40))
    g = rng.normal(0.0, 1.0, (STEPS, 40, 40)) * scales
    cases.append(_case("gradient_scales", rng.uniform(-0.3, 0.3, (40, 40)), g, DEFAULT, True,
                       "gradients from 1e-9 to 1e-1 (sqrt(v) below and above eps)"))
    g = rng.normal(0.0, 0.01, (STEPS, 19))
    g[:, ::4] = 0.0
    g[1, 1::4] = -g[0, 1::4]
    cases.append(_case("zeros_and_sign_flips", rng.uniform(-0.3, 0.3, 19), g, DEFAULT, False,
                       "zero gradients (m = v = 0 stay) and a sign flip between steps"))
    return cases
