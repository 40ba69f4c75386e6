"""CTC fixture cases: one line per case, the loss and the logit gradient.

Random logits (crnn-v0's 37 classes unless stated), lengths T with and without a 16-tail,
repeated labels, an empty target, lines with no valid alignment (the target needs more
steps than there are), saturated logits (softmax underflow, logP near 0 and far from it),
T = 1 and a two-class alphabet. scale = 1/B with B = 4 as in a batch, 1 elsewhere.
"""
from __future__ import annotations

import numpy as np

from .. import draw
from ..float64 import ctc as ref
from ..h5io import Case
from ..spec import ctc as spec

NAME = "ctc"
LAYER = "ctc"
SEED = 5005


def _case(name, logits, target, scale, note):
    logits = np.ascontiguousarray(logits, np.float32)
    target = np.ascontiguousarray(target, np.int32)
    loss, d = spec.ctc(logits, target, scale)
    loss64, d64 = ref.ctc(logits, target, scale)
    T, K = logits.shape
    return Case(name, {"T": T, "K": K, "L": int(target.size), "scale": scale, "note": note},
                {"logits": logits, "target": target, "scale": np.array([scale], np.float64)},
                {"exact": {"loss": np.array([loss], np.float64), "dlogits": d},
                 "float64": {"loss": np.array([loss64], np.float64), "dlogits": d64}})


def _aligned_logits(rng, T, K, target, high, low):
    """Logits that put `high` on one valid alignment (labels spread over T, blanks between)
    and `low` elsewhere: saturated softmax, logP close to 0."""
    z = np.full((T, K), low, np.float64)
    path = np.zeros(T, np.int64)
    L = len(target)
    for i, lab in enumerate(target):
        path[int((i + 0.5) * T / L)] = lab
    z[np.arange(T), path] = high
    return z + rng.uniform(-0.5, 0.5, (T, K))


def build() -> list[Case]:
    rng = draw.rng(SEED)
    K = 37
    cases = []
    for T, L in ((16, 5), (25, 7), (32, 10), (64, 10), (100, 3), (257, 12)):
        z = rng.normal(0.0, 2.0, (T, K))
        tgt = rng.integers(1, K, L)
        cases.append(_case(f"random_T{T}_L{L}", z, tgt, 0.25, "random logits N(0, 2)"))
    z = rng.normal(0.0, 2.0, (40, K))
    cases.append(_case("repeats_T40", z, [5, 5, 5, 12, 12, 7, 5, 5], 0.25,
                       "repeated labels: no skip between equal labels"))
    cases.append(_case("repeats_tight_T7", rng.normal(0.0, 2.0, (7, K)), [9, 9, 9, 9], 1.0,
                       "4 equal labels need exactly 7 steps: one alignment"))
    cases.append(_case("empty_target_T20", rng.normal(0.0, 2.0, (20, K)), [], 0.25,
                       "empty target: one entry, logP = alpha[T-1][0]"))
    cases.append(_case("empty_target_T1", rng.normal(0.0, 2.0, (1, K)), [], 1.0,
                       "empty target, one step"))
    cases.append(_case("no_alignment_T8", rng.normal(0.0, 2.0, (8, K)),
                       rng.integers(1, K, 9), 0.25, "target longer than T: loss +inf, zero gradient"))
    cases.append(_case("no_alignment_repeats_T6", rng.normal(0.0, 2.0, (6, K)), [3, 3, 3, 3], 0.25,
                       "4 equal labels need 7 steps, T = 6: loss +inf, zero gradient"))
    cases.append(_case("single_step_T1_L1", rng.normal(0.0, 2.0, (1, K)), [17], 1.0,
                       "T = 1, one label"))
    cases.append(_case("two_classes_T33", rng.normal(0.0, 2.0, (33, 2)), [1, 1, 1, 1, 1], 0.25,
                       "K = 2: blank and one label, all repeats"))
    tgt = rng.integers(1, K, 6)
    cases.append(_case("saturated_right_T48", _aligned_logits(rng, 48, K, tgt, 40.0, -40.0), tgt,
                       0.25, "logits +-40 on one alignment: softmax underflow, logP near 0"))
    tgt = rng.integers(1, K, 6)
    z = np.full((48, K), -30.0) + rng.uniform(-0.5, 0.5, (48, K))
    z[:, 0] = 30.0
    cases.append(_case("saturated_blank_T48", z, tgt, 0.25,
                       "blank at +30, labels at -30: large loss, alpha terms far apart (cut at -40)"))
    cases.append(_case("large_logits_T30", rng.normal(0.0, 200.0, (30, K)), rng.integers(1, K, 4),
                       0.25, "logits N(0, 200): most exp(z - m) underflow"))
    return cases
