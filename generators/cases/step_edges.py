"""Whole-model edge cases (fixtures/step_edges.h5): exact tier only (docs/edge-cases.md).

Zeros whose sign must survive the batch sum (g = g_0, then g = g + g_b: no +0 start). A small
config (height 8, one conv block, one BiLSTM layer of hidden 2, 5 classes) whose LSTM rows of
the g and o gates are zero with biases -5 and -103: g = tanh(-5) ~ -1, so |tanh(c)| > 1/2,
and o = sigmoid(-103) = 2^-149, the smallest subnormal; every LSTM output is then
h = o * tanh(c) = -2^-149. The classifier's dW = dot16 over t of dlogits * h: for a class
absent from the target dlogits is in (0, 1/2), every product underflows to -0, and with
T >= 16 all 16 lanes end at -0. Those rows are -0 in every line, so their sum is -0; a port
that sums from +0 (or loses a zero's sign on the way) returns +0.

  neg_zero_fc_b2   two lines (T = 16, 20), classes 3 and 4 in neither target
  neg_zero_fc_b1   one line (T = 18): g = g_0 with no addition at all

and configs no other fixture has (shapes()): odd conv heights, a dead unit feeding a second
LSTM layer, two long lines of one length at a hidden size no vector fills (each direction's
packed weights must stay its own while the other direction runs).

  channels3_k1x1_k2x3  three input channels, a 1 x 1 kernel and pool, then a 2 x 3 kernel
                       padded in width only (channels_and_kernels())
  nan_conv1_W_zero_x   a NaN weight in the second conv block where its input is +0 (the
                       image's left half is +0 and the first block's biases are negative):
                       the NaN's channel loses every window (the forward stays finite) and
                       every dcol reading it is NaN, so the first block's gradients are NaN.
                       A port that leaves out +0 terms without checking W is finite there
                       gets other windows and finite gradients.
"""
from __future__ import annotations

import numpy as np

from .. import draw
from .. import exact, model
from ..edge_values import qnan32

NAME = "step_edges"
LAYER = "step"
SEED = 9010
F32 = np.float32


def config() -> dict:
    return {"name": "tiny-signed-zero", "input_height": 8, "input_channels": 1,
            "blocks": [{"out": 2, "kh": 3, "kw": 3, "padH": 1, "padW": 1, "poolH": 2, "poolW": 2}],
            "lstm_layers": 1, "hidden": 2, "classes": 5, "alphabet": "abcd"}


def weights(rng, cfg) -> dict:
    p = model.init_params(cfg, rng)
    H = cfg["hidden"]
    for d in ("fwd", "rev"):
        for gate, bias in ((2, -5.0), (3, -103.0)):   # rows [i|f|g|o]: g and o
            rows = slice(gate * H, (gate + 1) * H)
            p[f"lstm0.{d}.W_ih"][rows] = 0.0
            p[f"lstm0.{d}.W_hh"][rows] = 0.0
            p[f"lstm0.{d}.b"][rows] = bias
        p[f"lstm0.{d}.b"][0:H] = 5.0                 # i ~ 1: c ~ -1 from the first step
    p["fc.b"] = rng.uniform(-0.3, 0.3, cfg["classes"]).astype(F32)
    return p


def _case(name, rng, widths, targets):
    cfg = config()
    c = _plain(name, cfg, weights(rng, cfg), rng, widths, targets,
               "classifier dW rows of absent classes: -0 in every line")
    fcW = c.expected["exact"]["fc.W"]
    c.params["negative_zero_fc_W"] = int(np.sum((fcW == 0) & np.signbit(fcW)))
    if not c.params["negative_zero_fc_W"]:
        raise RuntimeError(f"step edge case {name}: no -0 in the classifier's gradient")
    return c


def build():
    rng = draw.rng(SEED)
    return [_case("neg_zero_fc_b2", rng, [32, 40], [[1, 2], [2, 1, 2]]),
            _case("neg_zero_fc_b1", rng, [36], [[2, 1]]),
            *shapes(draw.rng(SEED + 1)), nan_meets_zeros(draw.rng(SEED + 2)),
            channels_and_kernels(draw.rng(SEED + 3))]


def _plain(name, cfg, params, rng, widths, targets, note, blank=False):
    """A step case of `cfg` with its `params` and random lines (blank: each line's left half
    +0)."""
    H, C = cfg["input_height"], cfg["input_channels"]
    specs = model.param_specs(cfg)
    images = [rng.uniform(0, 1, (H, w, C)).astype(F32) for w in widths]
    for im in images if blank else ():
        im[:, :im.shape[1] // 2] = 0.0
    inputs = {"cfg": model.cfg_array(cfg), "params": model.flatten(cfg, params),
              "widths": np.array(widths, np.int32),
              "images": np.concatenate([im.ravel() for im in images]),
              "target_lens": np.array([len(t) for t in targets], np.int32),
              "targets": np.array([v for t in targets for v in t], np.int32)}
    meta = {"config": cfg, "names": [s.name for s in specs], "shapes": [list(s.shape) for s in specs],
            "B": len(widths), "widths": list(widths), "target_lens": [len(t) for t in targets],
            "steps": [model.steps_for_width(cfg, w) for w in widths], "note": note}
    return exact.case(LAYER, name, meta, inputs)


def shapes(rng) -> list:
    """odd_height_H7: conv outputs of odd height (7, then 3) under 2 x 2 pools, the partial
    row dropped at each block: the sequence's features are 1 x 3 channels, not 2 or 4.
    dead_lstm0_unit_nl2: two BiLSTM layers, the first one's unit 0 with its g rows zero in
    both directions, so that unit's h is +0 at every step of every line: the second layer's
    inputs hold columns of +0, whose gradient (the first layer's dOut) is still live."""
    blk = lambda out, pool: {"out": out, "kh": 3, "kw": 3, "padH": 1, "padW": 1,
                             "poolH": pool, "poolW": pool}
    odd = {"name": "odd-height", "input_height": 7, "input_channels": 1,
           "blocks": [blk(2, 2), blk(3, 2)], "lstm_layers": 1, "hidden": 3, "classes": 4,
           "alphabet": "abc"}
    cases = [_plain("odd_height_H7", odd, model.init_params(odd, rng), rng, [17, 23],
                    [[1, 2], [3]], "heights 7 -> 3 -> 1: a partial pool row dropped per block")]
    two = {"name": "two-layers", "input_height": 4, "input_channels": 1, "blocks": [blk(2, 2)],
           "lstm_layers": 2, "hidden": 2, "classes": 4, "alphabet": "abc"}
    p = model.init_params(two, rng)
    for d in ("fwd", "rev"):
        g0 = 2 * two["hidden"]                       # rows [i|f|g|o]: g's first unit
        for k in ("W_ih", "W_hh", "b"):
            p[f"lstm0.{d}.{k}"][g0] = 0.0
    cases.append(_plain("dead_lstm0_unit_nl2", two, p, rng, [12, 12, 9], [[1, 2], [2], [3, 1]],
                        "lstm0's unit 0 is +0 at every step: lstm1's dx there still matters"))
    long = {"name": "long-equal-lines", "input_height": 4, "input_channels": 1,
            "blocks": [blk(2, 2)], "lstm_layers": 1, "hidden": 3, "classes": 4,
            "alphabet": "abc"}
    cases.append(_plain("equal_lines_T1000_H3", long, model.init_params(long, rng), rng,
                        [2000, 2000], [[1, 2], [2, 1]],
                        "two lines of one length, 1000 steps, hidden 3: the directions of "
                        "both lines run side by side, long enough for a race between them"))
    return cases


def nan_meets_zeros(rng):
    """conv1's channel 1 holds one NaN weight (its centre tap, first input channel, a tap's 16
    channels a chunk of the dot) and a positive bias; conv0's biases are at most 0, so where
    the image is +0 every one of conv1's inputs is +0."""
    blk = lambda out: {"out": out, "kh": 3, "kw": 3, "padH": 1, "padW": 1, "poolH": 2,
                       "poolW": 2}
    cfg = {"name": "nan-weight", "input_height": 8, "input_channels": 1,
           "blocks": [blk(16), blk(4)], "lstm_layers": 1, "hidden": 2, "classes": 4,
           "alphabet": "abc"}
    p = model.init_params(cfg, rng)
    p["conv0.b"] = -np.abs(p["conv0.b"]) - F32(0.01)
    p["conv1.W"][1, 4 * 16] = qnan32()
    p["conv1.b"][1] = 0.3
    c = _plain("nan_conv1_W_zero_x", cfg, p, rng, [24, 20], [[1, 2], [3]],
               "a NaN weight meets +0 inputs: +0 * NaN is NaN, the channel loses every window",
               blank=True)
    return c


def channels_and_kernels(rng):
    """Three input channels (every other config has one), a 1 x 1 kernel under a 1 x 1 pool,
    then a 2 x 3 kernel padded in width only: C_in, kh, kw, padH, padW, poolH and poolW all
    read from the config, none of them 3 x 3 / 2 x 2."""
    cfg = {"name": "channels-kernels", "input_height": 5, "input_channels": 3,
           "blocks": [{"out": 4, "kh": 1, "kw": 1, "padH": 0, "padW": 0, "poolH": 1, "poolW": 1},
                      {"out": 3, "kh": 2, "kw": 3, "padH": 0, "padW": 1, "poolH": 2, "poolW": 2}],
           "lstm_layers": 1, "hidden": 3, "classes": 4, "alphabet": "abc"}
    return _plain("channels3_k1x1_k2x3", cfg, model.init_params(cfg, rng), rng, [9, 12],
                  [[1, 2], [3, 1, 2]], "3 input channels; a 1 x 1 kernel and pool, then 2 x 3")
