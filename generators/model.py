"""crnn-v0's configuration, parameter order and the fp16 HDF5 model container.

The config drives every shape: nothing else in the project hard-codes crnn-v0.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np

from .geometry import conv_size

CRNN_V0 = {
    "name": "crnn-v0",
    "input_height": 32,
    "input_channels": 1,
    "blocks": [
        {"out": 16, "kh": 3, "kw": 3, "padH": 1, "padW": 1, "poolH": 2, "poolW": 2},
        {"out": 32, "kh": 3, "kw": 3, "padH": 1, "padW": 1, "poolH": 2, "poolW": 2},
        {"out": 64, "kh": 3, "kw": 3, "padH": 1, "padW": 1, "poolH": 2, "poolW": 1},
    ],
    "lstm_layers": 2,
    "hidden": 64,
    "classes": 37,  # blank = 0, then 0-9, a-z
    "alphabet": "0123456789abcdefghijklmnopqrstuvwxyz",
}


def default_config() -> dict:
    return copy.deepcopy(CRNN_V0)


def kpadded(k: int) -> int:
    """K rounded up to a multiple of 16 (conv weight rows are stored padded)."""
    return (k + 15) // 16 * 16


@dataclass(frozen=True)
class ParamSpec:
    name: str
    shape: tuple
    decay: bool  # weight matrices decay; biases do not (AdamW default)


def block_geometry(config: dict, width: int) -> list[dict]:
    """Per conv block: input H, W, C and conv/pool output sizes for a line of `width`."""
    H, W, C = config["input_height"], width, config["input_channels"]
    out = []
    for blk in config["blocks"]:
        Hc, Wc = conv_size(H, W, blk["kh"], blk["kw"], blk["padH"], blk["padW"])
        Hp, Wp = Hc // blk["poolH"], Wc // blk["poolW"]
        out.append({"H": H, "W": W, "C": C, "Hc": Hc, "Wc": Wc, "Hp": Hp, "Wp": Wp, **blk})
        H, W, C = Hp, Wp, blk["out"]
    return out


def sequence_features(config: dict) -> int:
    """Features per time step after the last block: final height * final channels."""
    g = block_geometry(config, 64)[-1]
    return g["Hp"] * g["out"]


def steps_for_width(config: dict, width: int) -> int:
    return block_geometry(config, width)[-1]["Wp"]


def param_specs(config: dict) -> list[ParamSpec]:
    """All trainable tensors in the ABI's parameter order (docs/port-abi.md)."""
    specs = []
    C = config["input_channels"]
    for n, blk in enumerate(config["blocks"]):
        K = blk["kh"] * blk["kw"] * C
        specs.append(ParamSpec(f"conv{n}.W", (blk["out"], kpadded(K)), True))
        specs.append(ParamSpec(f"conv{n}.b", (blk["out"],), False))
        C = blk["out"]
    H = config["hidden"]
    inp = sequence_features(config)
    for layer in range(config["lstm_layers"]):
        for d in ("fwd", "rev"):
            specs.append(ParamSpec(f"lstm{layer}.{d}.W_ih", (4 * H, inp), True))
            specs.append(ParamSpec(f"lstm{layer}.{d}.W_hh", (4 * H, H), True))
            specs.append(ParamSpec(f"lstm{layer}.{d}.b", (4 * H,), False))
        inp = 2 * H
    specs.append(ParamSpec("fc.W", (config["classes"], 2 * H), True))
    specs.append(ParamSpec("fc.b", (config["classes"],), False))
    return specs


def cfg_array(config: dict) -> np.ndarray:
    """The int32 config vector of the port ABI (crnn_port.h)."""
    v = [config["input_height"], config["input_channels"], len(config["blocks"])]
    for b in config["blocks"]:
        v += [b["out"], b["kh"], b["kw"], b["padH"], b["padW"], b["poolH"], b["poolW"]]
    v += [config["lstm_layers"], config["hidden"], config["classes"]]
    return np.asarray(v, dtype=np.int32)


def init_params(config: dict, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Random float32 weights in PyTorch's default ranges; conv padding columns are zero."""
    params = {}
    C = config["input_channels"]
    for n, blk in enumerate(config["blocks"]):
        K = blk["kh"] * blk["kw"] * C
        bound = 1.0 / np.sqrt(K)
        W = np.zeros((blk["out"], kpadded(K)), np.float32)
        W[:, :K] = rng.uniform(-bound, bound, (blk["out"], K))
        params[f"conv{n}.W"] = W
        params[f"conv{n}.b"] = rng.uniform(-bound, bound, blk["out"]).astype(np.float32)
        C = blk["out"]
    H = config["hidden"]
    bound = 1.0 / np.sqrt(H)
    for spec in param_specs(config):
        if spec.name.startswith("lstm"):
            params[spec.name] = rng.uniform(-bound, bound, spec.shape).astype(np.float32)
    fb = 1.0 / np.sqrt(2 * H)
    params["fc.W"] = rng.uniform(-fb, fb, (config["classes"], 2 * H)).astype(np.float32)
    params["fc.b"] = rng.uniform(-fb, fb, config["classes"]).astype(np.float32)
    return {s.name: params[s.name] for s in param_specs(config)}


def flatten(config: dict, params: dict[str, np.ndarray]) -> np.ndarray:
    return np.concatenate([np.ascontiguousarray(params[s.name], np.float32).ravel()
                           for s in param_specs(config)])


def unflatten(config: dict, flat: np.ndarray) -> dict[str, np.ndarray]:
    out, at = {}, 0
    for s in param_specs(config):
        n = int(np.prod(s.shape))
        out[s.name] = flat[at:at + n].reshape(s.shape)
        at += n
    return out
