"""The bench's inputs: crnn-v0 (the trained weights when bundled) on synthetic lines, and the
multiply-adds of one training step."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from ... import fixtures
from ...generators import model

MODEL_PATH = fixtures.model_path()
CLIP_LIMIT = 5.0
ADAMW = {"lr": 1e-3, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "wd": 1e-4}


@dataclass
class Inputs:
    config: dict
    params: dict                  # name -> float32 array (param_specs order)
    images: list                  # [H][W] float32 per line
    targets: list                 # int32 class ids per line
    weights: str                  # where the weights came from

    @property
    def batch(self) -> int:
        return len(self.images)


def make_inputs(width: int = 256, batch: int = 4, seed: int = 1) -> Inputs:
    """crnn-v0 with the bundled trained weights (random ones if the container is absent)
    and `batch` synthetic text lines of 32 x width."""
    from ...generators import lines
    if MODEL_PATH.exists():
        from ...generators.container import load_container
        config, params = load_container(str(MODEL_PATH))
        where = f"the trained model ({MODEL_PATH.name})"
    else:
        config = model.default_config()
        params = model.init_params(config, np.random.default_rng(seed))
        where = f"random (seed {seed})"
    T = model.steps_for_width(config, width)
    max_len = max(1, min(lines.MAX_LEN, (T - 1) // 2))
    rng = np.random.default_rng(seed)
    texts = [lines.random_text(rng, min(lines.MIN_LEN, max_len), max_len) for _ in range(batch)]
    images, targets = lines.make_batch(seed, batch, width, texts)
    return Inputs(config, params, images, [np.asarray(t, np.int32) for t in targets], where)


def step_macs(config: dict, width: int, batch: int) -> dict:
    """Multiply-adds of every dot16 of one training step, per layer kind (per batch)."""
    geo = model.block_geometry(config, width)
    H, K = config["hidden"], config["classes"]
    T = geo[-1]["Wp"]
    out = {}
    for n, g in enumerate(geo):
        P, O, KP = g["Hc"] * g["Wc"], g["out"], model.kpadded(g["kh"] * g["kw"] * g["C"])
        out[f"conv{n}"] = P * O * KP * (2 + (n > 0)) + P * O     # fwd, dW, dx (n > 0), db
    inp = model.sequence_features(config)
    for layer in range(config["lstm_layers"]):
        G = 4 * H
        out[f"lstm{layer}"] = (T * 2 * G * inp * 3              # x·W_ih, dW_ih, dx
                               + 2 * T * G * H * 3              # recurrence fwd, bwd, dW_hh
                               + 2 * G * T)                     # db
        inp = 2 * H
    out["linear"] = T * K * 2 * H * 3 + K * T
    macs = {k: v * batch for k, v in out.items()}
    macs["clip"] = sum(int(np.prod(s.shape)) for s in model.param_specs(config))
    return macs


def entry_macs(config: dict, width: int) -> dict:
    """Multiply-adds of every dot16 in each layer entry point on one line of `width`, keyed as
    ours.layer_calls (the CTC has no dots: absent). The backward entry points compute every
    gradient the ABI names: dW, db and dx (none for the first conv block, whose input needs
    no gradient; every dx of an LSTM layer, dhRec's dots included)."""
    geo = model.block_geometry(config, width)
    H, K = config["hidden"], config["classes"]
    T, G = geo[-1]["Wp"], 4 * config["hidden"]
    out = {}
    for n, g in enumerate(geo):
        P, O, KP = g["Hc"] * g["Wc"], g["out"], model.kpadded(g["kh"] * g["kw"] * g["C"])
        out[f"conv{n} fwd"] = P * O * KP
        out[f"conv{n} bwd"] = P * O * KP * (1 + (n > 0)) + P * O    # dW, dcol, db
    inp = model.sequence_features(config)
    for layer in range(config["lstm_layers"]):
        out[f"lstm{layer} fwd"] = 2 * T * G * (inp + H)                # x·W_ihᵀ, h·W_hhᵀ
        out[f"lstm{layer} bwd"] = 2 * T * G * (2 * inp + 2 * H + 1)    # dW_ih, dx, dW_hh, dhRec, db
        inp = 2 * H
    out["linear fwd"] = T * K * inp
    out["linear bwd"] = 2 * T * K * inp + T * K                        # dW, dx, db
    return out
