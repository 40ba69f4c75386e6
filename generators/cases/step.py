"""Whole-model batch gradient fixture cases (`crnn_step_gradients`).

crnn_v0_b4: random crnn-v0 weights (model.init_params, rounded to fp16 through the model
container, as a fine-tuning run starts from), four synthetic lines (generators/lines.py) of
widths 64, 100, 257 (16-tails in T = 25 and 64 -> 25, 64; the conv rows 100 and 257 are not
multiples of 16) and 48, with targets including repeated labels; the last line's target has 13
labels for T = 12 steps: no alignment (loss +inf, zero gradient, still counted in B).
small_b3: a small config (height 16, two blocks of other kernel/pool shapes, one LSTM layer of
hidden 8, 7 classes) on random images: nothing in the port may hard-code crnn-v0.
big_kernels_b9: nine lines on a config of two 9 x 9 blocks (81 taps, C = 3 in the second:
K = 243), one LSTM layer of hidden 4: a batch sum and a dx tap sum longer than a port's
unrolling or blocking is likely to be (past 4 and 8 lines, past 64 taps).

Tensors: every parameter gradient (named by model.param_specs), the per-line losses and the
batch loss; exact tier from generators/spec/step.py, float64 tier from generators/float64/step.py.
"""
from __future__ import annotations

import math
import os
import tempfile

import numpy as np

from .. import draw, model
from ..float64 import conv as conv64
from ..float64 import step as ref
from ..geometry import conv_size
from ..h5io import Case
from ..bounds import (U, col2im, colsum, lstm_backward, lstm_forward, m_of,
                      mm, round_up)
from ..spec import step as spec

NAME = "step"
LAYER = "step"
SEED = 9009


def fp16_params(config, params):
    """The weights as the fp16 container stores them, widened back to fp32 master copies."""
    try:
        from .. import container
    except ImportError:
        container = None
    if container is None:
        return {k: np.asarray(v, np.float32).astype(np.float16).astype(np.float32)
                for k, v in params.items()}
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "model.h5")
        container.save_container(path, config, params)
        _, loaded = container.load_container(path)
    return loaded


def small_config() -> dict:
    return {"name": "small", "input_height": 16, "input_channels": 1,
            "blocks": [{"out": 4, "kh": 3, "kw": 3, "padH": 1, "padW": 1, "poolH": 2, "poolW": 2},
                       {"out": 6, "kh": 3, "kw": 2, "padH": 1, "padW": 0, "poolH": 2, "poolW": 1}],
            "lstm_layers": 1, "hidden": 8, "classes": 7, "alphabet": "abcdef"}


def winner_flips(config, params, images, lines_state) -> list:
    """Pool windows whose winner differs between the spec and the float64 reference,
    as (line, block, flat index, spec winner, float64 winner)."""
    out = []
    for n_line, (image, st) in enumerate(zip(images, lines_state)):
        x = np.asarray(image, np.float64)
        x = x[:, :, None] if x.ndim == 2 else x
        for n, blk in enumerate(config["blocks"]):
            geo = (blk["kh"], blk["kw"], blk["padH"], blk["padW"], blk["poolH"], blk["poolW"])
            _, x, w64 = conv64.forward(x, params[f"conv{n}.W"], params[f"conv{n}.b"], *geo)
            ws = st["winners"][n]
            for i in np.flatnonzero(ws.ravel() != w64.ravel()):
                out.append((n_line, n, int(i), int(ws.ravel()[i]), int(w64.ravel()[i])))
    return out


def make_case(name, config, params, images, targets, note) -> Case:
    grads, losses, batch_loss, lines_state = spec.batch_gradient(config, params, images, targets,
                                                                return_lines=True)
    g64, l64, bl64 = ref.batch_gradient(config, params, images, targets)
    flips = winner_flips(config, params, images, lines_state)
    specs = model.param_specs(config)
    inputs = {"cfg": model.cfg_array(config), "params": model.flatten(config, params),
              "widths": np.array([im.shape[1] for im in images], np.int32),
              "images": np.concatenate([np.asarray(im, np.float32).ravel() for im in images]),
              "target_lens": np.array([len(t) for t in targets], np.int32),
              "targets": np.concatenate([np.asarray(t, np.int32) for t in targets]
                                        + [np.zeros(0, np.int32)])}
    exact = {s.name: grads[s.name] for s in specs}
    exact["losses"] = np.asarray(losses, np.float64)
    exact["batch_loss"] = np.array([batch_loss], np.float64)
    f64 = {s.name: np.asarray(g64[s.name], np.float64) for s in specs}
    f64["losses"] = np.asarray(l64, np.float64)
    f64["batch_loss"] = np.array([bl64], np.float64)
    params_json = {"config": config, "names": [s.name for s in specs],
                   "shapes": [list(s.shape) for s in specs], "B": len(images),
                   "widths": [int(im.shape[1]) for im in images],
                   "steps": [int(model.steps_for_width(config, im.shape[1])) for im in images],
                   "target_lens": [len(t) for t in targets], "winner_flips": flips, "note": note}
    return Case(name, params_json, inputs, {"exact": exact, "float64": f64})


def crnn_v0_batch(rng, config):
    from .. import lines
    texts = ["hello", lines.random_text(rng, 6, 6), "aabbxy7700zz", lines.random_text(rng, 13, 13)]
    images, targets = [], []
    for text, width in zip(texts, (64, 100, 257, 48)):
        img, tgt = lines.make_line(rng, text, width)
        images.append(img)
        targets.append(tgt)
    return images, targets


def build() -> list[Case]:
    rng = draw.rng(SEED)
    config = model.default_config()
    params = fp16_params(config, model.init_params(config, rng))
    images, targets = crnn_v0_batch(rng, config)
    cases = [make_case("crnn_v0_b4", config, params, images, targets,
                       "crnn-v0, widths 64/100/257/48; repeats; line 3 has no alignment")]
    small = small_config()
    params = fp16_params(small, model.init_params(small, rng))
    images = [rng.uniform(0.0, 1.0, (16, w)).astype(np.float32) for w in (20, 37, 16)]
    targets = [np.array([1, 1, 2], np.int32), np.array([3, 4, 5, 6, 6, 2], np.int32),
               np.array([], np.int32)]
    cases.append(make_case("small_b3", small, params, images, targets,
                           "small config; repeats, an empty target"))
    big = big_kernel_config()
    params = fp16_params(big, model.init_params(big, rng))
    widths = (8, 12, 9, 16, 10, 8, 21, 11, 8)
    images = [rng.uniform(0.0, 1.0, (16, w)).astype(np.float32) for w in widths]
    targets = [rng.integers(1, big["classes"], max(1, w // 4)).astype(np.int32) for w in widths]
    cases.append(make_case("big_kernels_b9", big, params, images, targets,
                           "9 lines (a batch sum past 4 and 8 lines); 9 x 9 kernels (81 taps: "
                           "the second block's dx sums past 64 taps)"))
    return cases


def big_kernel_config() -> dict:
    return {"name": "big-kernels", "input_height": 16, "input_channels": 1,
            "blocks": [{"out": 3, "kh": 9, "kw": 9, "padH": 4, "padW": 4, "poolH": 2, "poolW": 2},
                       {"out": 4, "kh": 9, "kw": 9, "padH": 4, "padW": 4, "poolH": 2, "poolW": 1}],
            "lstm_layers": 1, "hidden": 4, "classes": 5, "alphabet": "abcd"}


# ---------------------------------------------------------------- the derived error bound
#
# A first-order error bound of the whole-model gradients evaluated on the fixture data: it
# defines train3's comparison mask (generators/cases/train3.py: gradient >= 50 bounds in every
# step; the gate's allowances are harness/allowance/step.py's). The float64 model is rerun
# with every local binary32 error at its bound and of one sign s (then the other), and the
# bound is the deviation this causes:
#   - a dot16 of n terms moves by m(n)*u*sum|terms|, m(n) = ceil(n/16) + 4 (conv, LSTM,
#     classifier, every gradient dot);
#   - sigmoid / tanh move by their approximation's max abs error over all 2^32 inputs;
#   - every other binary32 operation (bias adds, cell updates, the dx tap sum, the batch sum)
#     moves by u*|result|; the CTC's binary64 work is exact at this scale, its final binary32
#     rounding of the logit gradient moves it by u*|value|;
#   - pool decisions are the reference's (a decision flip is not a rounding error: the gate
#     reports it as a flip, harness/flips/).
# derived_atols: the max over the fixture cases and elements of that bound, rounded up to two
# significant digits (the step entries of the tolerance table before the per-element model).

def _line(config, P, image, target, scale, s, winners=None):
    """One line in float64 with every local error at its bound of sign s (s = 0: the plain
    float64 model). winners: the reference's pool decisions (None: decide here).
    -> (loss, grads, winners)."""
    from ..float64 import ctc as ctc64
    r = lambda v: v + s * U * np.abs(v)
    x = np.asarray(image, np.float64)
    x = x[:, :, None] if x.ndim == 2 else x
    keep, win_out = [], []
    for n, blk in enumerate(config["blocks"]):
        W, b = P[f"conv{n}.W"], P[f"conv{n}.b"]
        H, Wd, C = x.shape
        Hc, Wc = conv_size(H, Wd, blk["kh"], blk["kw"], blk["padH"], blk["padW"])
        col = conv64.im2col(x, blk["kh"], blk["kw"], blk["padH"], blk["padW"], W.shape[1])
        conv = mm(col, W.T) + s * m_of(W.shape[1]) * U * mm(np.abs(col), np.abs(W).T)
        conv = r(conv + b)
        if winners is None:
            pooled, win = conv64.relu_maxpool(conv, Hc, Wc, blk["poolH"], blk["poolW"])
        else:
            win = winners[n]
            pooled = np.where(win >= 0, conv.ravel()[np.maximum(win, 0)], 0.0)
        keep.append((x, col, win, Hc, Wc))
        win_out.append(win)
        x = pooled
    Hp, Tn, Cl = x.shape
    seq = x.transpose(1, 0, 2).reshape(Tn, Hp * Cl)
    lstm_keep = []
    for layer in range(config["lstm_layers"]):
        Ws = [np.stack([P[f"lstm{layer}.{d}.{k}"] for d in ("fwd", "rev")])
              for k in ("W_ih", "W_hh", "b")]
        out, st = lstm_forward(seq, *Ws, s)
        lstm_keep.append((seq, Ws, st))
        seq = out
    Wf, bf = P["fc.W"], P["fc.b"]
    logits = r(mm(seq, Wf.T) + s * m_of(Wf.shape[1]) * U * mm(np.abs(seq), np.abs(Wf).T) + bf)
    loss, dl = ctc64.ctc(logits, target, scale)
    grads = {sp.name: np.zeros(sp.shape) for sp in model.param_specs(config)}
    if not np.isfinite(loss):
        return loss, grads, win_out
    dl = dl + s * U * np.abs(dl)
    adl = np.abs(dl)
    mT = m_of(Tn)
    grads["fc.W"] = mm(dl.T, seq) + s * mT * U * mm(adl.T, np.abs(seq))
    grads["fc.b"] = colsum(dl) + s * mT * U * colsum(adl)
    dseq = mm(dl, Wf) + s * m_of(Wf.shape[0]) * U * mm(adl, np.abs(Wf))
    for layer in reversed(range(config["lstm_layers"])):
        xin, Ws, st = lstm_keep[layer]
        dW_ih, dW_hh, db, dseq = lstm_backward(xin, Ws[0], Ws[1], st, dseq, s)
        for d, name in enumerate(("fwd", "rev")):
            grads[f"lstm{layer}.{name}.W_ih"] = dW_ih[d]
            grads[f"lstm{layer}.{name}.W_hh"] = dW_hh[d]
            grads[f"lstm{layer}.{name}.b"] = db[d]
    dP = dseq.reshape(Tn, Hp, Cl).transpose(1, 0, 2)
    for n in reversed(range(len(config["blocks"]))):
        blk = config["blocks"][n]
        xin, col, win, Hc, Wc = keep[n]
        W = P[f"conv{n}.W"]
        Out = W.shape[0]
        dC = np.zeros(Hc * Wc * Out)
        live = win.ravel() >= 0
        dC[win.ravel()[live]] = dP.ravel()[live]
        dC = dC.reshape(Hc * Wc, Out)
        adC = np.abs(dC)
        mP = m_of(Hc * Wc)
        grads[f"conv{n}.W"] = mm(dC.T, col) + s * mP * U * mm(adC.T, np.abs(col))
        grads[f"conv{n}.b"] = colsum(dC) + s * mP * U * colsum(adC)
        if n > 0:
            dcol = mm(dC, W) + s * m_of(Out) * U * mm(adC, np.abs(W))
            H, Wd, C = xin.shape
            geo = (H, Wd, C, blk["kh"], blk["kw"], blk["padH"], blk["padW"])
            dP = col2im(dcol, *geo) + s * blk["kh"] * blk["kw"] * U * col2im(np.abs(dcol), *geo)
    return loss, grads, win_out


def _batch(config, P, images, targets, s, winners=None):
    r = lambda v: v + s * U * np.abs(v)
    B = len(images)
    grads, losses, wins = None, np.zeros(B), []
    for n, (image, target) in enumerate(zip(images, targets)):
        losses[n], g, w = _line(config, P, image, target, 1.0 / B, s,
                                None if winners is None else winners[n])
        wins.append(w)
        grads = g if grads is None else {k: r(grads[k] + g[k]) for k in grads}
    out = dict(grads)
    out["losses"] = losses
    out["batch_loss"] = np.array([math.fsum(losses[np.isfinite(losses)]) / B])
    return out, wins


def propagated_error(config, params, images, targets) -> dict:
    """Per tensor, elementwise: max over s = +1, -1 of |perturbed(s) - float64 model|."""
    P = {k: np.asarray(v, np.float64) for k, v in params.items()}
    ref, wins = _batch(config, P, images, targets, 0.0)
    runs = [_batch(config, P, images, targets, s, wins)[0] for s in (1.0, -1.0)]
    out = {}
    for k, v in ref.items():
        with np.errstate(invalid="ignore"):
            d = [np.where(np.isfinite(v), np.abs(p[k] - v), 0.0) for p in runs]
        out[k] = np.maximum(*d)
    return out


def case_inputs(case):
    """(config, params dict, images, targets) of a step case, back from its stored inputs."""
    config = case.params["config"]
    params = model.unflatten(config, np.asarray(case.inputs["params"], np.float32))
    H, C = config["input_height"], config["input_channels"]
    images, targets, at, ta = [], [], 0, 0
    for w, n in zip(case.inputs["widths"], case.inputs["target_lens"]):
        size = H * int(w) * C
        images.append(case.inputs["images"][at:at + size].reshape(H, int(w), C))
        targets.append(case.inputs["targets"][ta:ta + int(n)])
        at += size
        ta += int(n)
    return config, params, images, targets


def derived_atols(cases) -> dict:
    """Per tensor: the max over the cases and elements of propagated_error, rounded up to two
    significant digits (the former step entries of harness/tolerances.toml)."""
    out = {}
    for case in cases:
        E = propagated_error(*case_inputs(case))
        for k, v in E.items():
            out[k] = max(out.get(k, 0.0), float(np.max(v)) if v.size else 0.0)
    return {k: round_up(v) for k, v in out.items()}
