"""AdamW edge cases (fixtures/adamw_edges.h5): exact tier only (docs/edge-cases.md).

  many_hparams   (kind `many`) 300 small tensors (1-12 elements), each its own crnn_adamw
                 calls with its own hyper-parameters and 1-16 steps (most of them few): lr log-uniform in
                 [1e-6, 1], beta1 in {0, 0.5, 0.9, 0.99} or uniform in (0, 0.999), beta2 in
                 {0.9, 0.99, 0.999, 0.9999} or uniform in (0.5, 0.99999), eps log-uniform in
                 [1e-12, 1e-3], wd 0 or uniform in [0, 0.5], decay on or off. Every scalar
                 (1 - beta1, beta2, 1 - beta2, eps, 1 - lr wd, lr / (1 - beta1^t),
                 sqrt(1 - beta2^t)) is computed in double and rounded once: over this many
                 draws a scalar rounded differently (computed in float, or rounded twice)
                 changes some element's bits. Weights and gradients include ±0, subnormals
                 and magnitudes up to 2^40 (g*g stays finite).
"""
from __future__ import annotations

import numpy as np

from .. import draw, exact

NAME = "adamw_edges"
LAYER = "adamw"
SEED = 8009
F32 = np.float32


def values(rng, n) -> np.ndarray:
    v = np.ldexp(rng.uniform(-2, 2, n), rng.integers(-40, 41, n))
    kind = rng.random(n)
    v = np.where(kind < 0.08, 0.0, v)
    v = np.where((kind >= 0.08) & (kind < 0.14), -0.0, v)
    v = np.where((kind >= 0.14) & (kind < 0.2), np.ldexp(rng.uniform(-2, 2, n), -140), v)
    return v.astype(F32)


def hparams(rng) -> list[float]:
    lr = float(10.0 ** rng.uniform(-6, 0))
    beta1 = float(rng.choice([0.0, 0.5, 0.9, 0.99])) if rng.random() < 0.5 else float(rng.uniform(0, 0.999))
    beta2 = float(rng.choice([0.9, 0.99, 0.999, 0.9999])) if rng.random() < 0.5 else float(rng.uniform(0.5, 0.99999))
    eps = float(10.0 ** rng.uniform(-12, -3))
    wd = 0.0 if rng.random() < 0.2 else float(rng.uniform(0, 0.5))
    return [lr, beta1, beta2, eps, wd]


def many(rng, n):
    sizes = rng.integers(1, 13, n)
    steps = np.floor(np.exp(rng.uniform(0, np.log(16), n))).astype(np.int64)
    p = [values(rng, int(k)) for k in sizes]
    g = [values(rng, int(k) * int(s)) for k, s in zip(sizes, steps)]
    inputs = {"p": np.concatenate(p), "grads": np.concatenate(g), "sizes": sizes.astype(np.int64),
              "steps": steps.astype(np.int64),
              "hparams": np.array([hparams(rng) for _ in range(n)], np.float64),
              "decay": rng.integers(0, 2, n).astype(np.int32)}
    return exact.case(LAYER, "many_hparams", {"kind": "many", "problems": n}, inputs)


def build():
    return [many(draw.rng(SEED), 300)]
