"""What every pytorch fixture is built from: the trained model (MODEL_PATH; regen-fixtures
--retrain points it at a new one), the real lines, and the batch of four lines run through
the model in fp32 and float64 (cached per process)."""
from __future__ import annotations

import numpy as np

from ... import fixtures
from .. import container, lines

from .network import Model
from .torch_env import deterministic

MODEL_PATH = fixtures.model_path()


def trained_model(path=None) -> tuple[dict, dict]:
    """(config, params): the trained container's fp16 weights widened to fp32 (MODEL_PATH
    unless given; regen-fixtures --retrain points MODEL_PATH at the new model)."""
    return container.load_container(str(path or MODEL_PATH))


def real_lines(seed: int, n: int, widths=None) -> tuple[list, list]:
    """n real lines: line i from SeedSequence(seed, (i,)); widths[i] None = natural width."""
    images, targets = [], []
    widths = list(widths) if widths is not None else [None] * n
    for i in range(n):
        rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(i,)))
        img, tgt = lines.make_line(rng, None, widths[i])
        images.append(img)
        targets.append(tgt)
    return images, targets


# The batch of four real lines every pytorch fixture draws from: widths natural (78, 99, 33)
# and one wide line (257: conv rows with a dropped partial pool window, T = 64).
BATCH_SEED = 606
BATCH_WIDTHS = (None, None, None, 257)
# The per-layer fixtures use two of them: an even width with a 16-tail in T (78, T = 19) and
# the wide one (257, T = 64).
LAYER_LINES = (0, 3)


def params64(params: dict) -> dict:
    return {k: np.asarray(v, np.float64) for k, v in params.items()}


_CACHE: dict = {}


def batch_data() -> dict:
    """The trained model on the batch of four lines, in fp32 and float64 (cached per process):
    config, params, images, targets, and per dtype the gradients, losses, batch loss and the
    per-line traces (Model.line)."""
    key = ("batch", str(MODEL_PATH))
    if key not in _CACHE:
        config, params = trained_model()
        images, targets = real_lines(BATCH_SEED, len(BATCH_WIDTHS), BATCH_WIDTHS)
        d = {"config": config, "params": params, "images": images, "targets": targets}
        with deterministic():
            for kind, p in (("fp32", params), ("f64", params64(params))):
                m = Model(config, p, kind)
                g, losses, bl, tr = m.batch(images, targets, keep=True)
                d[kind] = {"grads": g, "losses": losses, "batch_loss": bl, "traces": tr}
        _CACHE[key] = d
    return _CACHE[key]
