"""The whole-model batch gradient (crnn_step_gradients): C == the executable spec bit for bit
on every ISA path x threads {1, 2, 3, 7}, on a small config and on crnn-v0; parameter sizes;
no-alignment lines; argument checks; the step tolerances equal the derived error bound; and
`crnn-conformance gate --layers ctc,step,clip,adamw,train3` exits 0."""
from __future__ import annotations

import ctypes
import subprocess
import sys

import numpy as np
import pytest

from crnn_conformance.generators import model
from crnn_conformance.generators.cases import step as cases
from crnn_conformance.generators.h5io import read_fixture
from crnn_conformance.generators.spec import step as spec
from crnn_conformance.harness.runner import FIXTURES_DIR, THREADS
from crnn_conformance.harness.case_checks import tier_tolerance

ISA_IDS = {"scalar": 0, "sse": 1, "avx2": 2, "avx512": 3}


@pytest.fixture
def restore(lib):
    isa, threads = lib.crnn_get_isa(), lib.crnn_get_threads()
    yield
    lib.crnn_set_isa(isa)
    lib.crnn_set_threads(threads)


def c_step(lib, config, params, images, targets):
    cfg = model.cfg_array(config)
    flat = model.flatten(config, params)
    B = len(images)
    widths = np.array([im.shape[1] for im in images], np.int32)
    imgs = np.concatenate([np.asarray(im, np.float32).ravel() for im in images])
    lens = np.array([len(t) for t in targets], np.int32)
    tg = np.concatenate([np.asarray(t, np.int32) for t in targets] + [np.zeros(0, np.int32)])
    grads = np.full(flat.size, np.nan, np.float32)
    losses, bl = np.full(B, np.nan), np.full(1, np.nan)
    rc = lib.crnn_step_gradients(cfg.ctypes.data, flat.ctypes.data, B, widths.ctypes.data,
                                 imgs.ctypes.data, lens.ctypes.data,
                                 tg.ctypes.data if tg.size else None, grads.ctypes.data,
                                 losses.ctypes.data, bl.ctypes.data)
    return rc, model.unflatten(config, grads), losses, float(bl[0])


def random_batch(rng, config, widths, with_no_alignment=True):
    images = [rng.uniform(0.0, 1.0, (config["input_height"], w, config["input_channels"]))
              .astype(np.float32) for w in widths]
    targets = []
    for i, w in enumerate(widths):
        T = model.steps_for_width(config, w)
        if with_no_alignment and i == len(widths) - 1:
            targets.append(rng.integers(1, config["classes"], T + 1))      # cannot fit
        elif i == 0:
            targets.append(np.repeat(rng.integers(1, config["classes"], 2), 2)[:max(0, (T - 1) // 2)])
        else:
            targets.append(rng.integers(1, config["classes"], int(rng.integers(0, (T + 1) // 2 + 1))))
    return images, [np.asarray(t, np.int32) for t in targets]


def check_every_path(lib, isas, config, params, images, targets):
    want, wl, wbl = spec.batch_gradient(config, params, images, targets)
    for isa in isas:
        for threads in THREADS:
            assert lib.crnn_set_isa(ISA_IDS[isa]) == 0 and lib.crnn_set_threads(threads) == 0
            rc, got, losses, bl = c_step(lib, config, params, images, targets)
            assert rc == 0
            bad = [k for k in want if got[k].tobytes() != want[k].tobytes()]
            assert not bad, f"{isa} x {threads}: {bad}"
            assert losses.tobytes() == np.asarray(wl, np.float64).tobytes(), (isa, threads)
            assert np.float64(bl).tobytes() == np.float64(wbl).tobytes(), (isa, threads)
    return wl


def test_small_config_every_isa_and_thread_count(lib, isas, restore):
    config = cases.small_config()
    rng = np.random.default_rng(11)
    params = model.init_params(config, rng)
    images, targets = random_batch(rng, config, (20, 16, 37, 9, 12))
    losses = check_every_path(lib, isas, config, params, images, targets)
    assert np.isinf(losses[-1]) and np.all(np.isfinite(losses[:-1]))


def test_crnn_v0_every_isa_and_thread_count(lib, isas, restore):
    config = model.default_config()
    rng = np.random.default_rng(12)
    params = cases.fp16_params(config, model.init_params(config, rng))
    images, targets = random_batch(rng, config, (33, 16, 48, 20))
    check_every_path(lib, isas, config, params, images, targets)


def test_lines_of_one_length_every_isa_and_thread_count(lib, isas, restore):
    """Four lines of one length go through each LSTM layer together; after the recurrence
    their gradients run as line x direction jobs, 2, 3 or 7 chunks of them on as many
    threads (dx's columns in halves) or one after another at 1 thread."""
    config = model.default_config()
    rng = np.random.default_rng(14)
    params = cases.fp16_params(config, model.init_params(config, rng))
    widths = (32, 33, 34, 35)
    assert len({model.steps_for_width(config, w) for w in widths}) == 1
    images, targets = random_batch(rng, config, widths, with_no_alignment=False)
    check_every_path(lib, isas, config, params, images, targets)


def narrow_lstm_config() -> dict:
    """The small config with hidden 2: the first LSTM layer's x (24 features) is wider than
    its 4H = 8 gates."""
    return {**cases.small_config(), "name": "narrow-lstm", "hidden": 2}


# the last block's channels made dead and live nearly everywhere, (first, count) each; on
# the narrow config more dense features (12) than gates (8)
DEAD_LIVE = {"crnn-v0": ((0, 16), (16, 16)), "narrow-lstm": ((0, 1), (1, 3))}


@pytest.mark.parametrize("which", sorted(DEAD_LIVE))
def test_first_lstm_dx_over_dead_dense_and_rare_features(lib, isas, restore, which):
    """The batch gradient computes the first LSTM layer's dx only where the pool passed a
    value: a feature live at half the batch's steps or more through one product at every
    step, one live at fewer steps by a dot at each of them, one never live not at all. The
    last block's channels are made dead (bias -8), live nearly everywhere (+4) and live at
    some steps (biases spread below 0), the mix asserted on the spec's own pool output; then
    every path x threads equals the spec bit for bit. On crnn-v0 x is as wide as the 4H
    gates, on the narrow config wider."""
    config = model.default_config() if which == "crnn-v0" else narrow_lstm_config()
    rng = np.random.default_rng(15)
    params = model.init_params(config, rng)
    if which == "crnn-v0":
        params = cases.fp16_params(config, params)
    last = len(config["blocks"]) - 1
    b = params[f"conv{last}.b"].copy()
    (d0, nd), (l0, nlive) = DEAD_LIVE[which]
    b[d0:d0 + nd], b[l0:l0 + nlive] = -8.0, 4.0
    b[l0 + nlive:] = np.linspace(-0.2, 0.0, b.size - l0 - nlive)
    params[f"conv{last}.b"] = b.astype(np.float16).astype(np.float32)
    T = model.steps_for_width(config, 32)
    widths = [w for w in range(24, 48) if model.steps_for_width(config, w) == T][:4]
    assert len(widths) >= 2
    images, targets = random_batch(rng, config, widths, with_no_alignment=False)
    live = np.stack([spec.line_forward(config, params, im)["lstm_in"][0] != 0 for im in images])
    count, steps = live.sum(axis=(0, 1)), live.shape[0] * live.shape[1]
    assert live.shape[1] == T and (~live).mean() >= 0.25
    dead, dense = (count == 0).sum(), (2 * count >= steps).sum()
    if which == "narrow-lstm":
        assert dense > 4 * config["hidden"], dense
    least = 20 if which == "crnn-v0" else 2
    assert min(dead, dense, count.size - dead - dense) >= least, (dead, dense)
    check_every_path(lib, isas, config, params, images, targets)


def test_single_line_and_sum_in_line_order(lib, restore):
    """B = 1 is that line's gradient; B = 3 is float32 (g0 + g1) + g2 of the lines at scale 1/3."""
    config = cases.small_config()
    rng = np.random.default_rng(13)
    params = model.init_params(config, rng)
    images, targets = random_batch(rng, config, (24, 30, 17), with_no_alignment=False)
    per_line = [spec.line_forward_backward(config, params, im, t, 1.0 / 3)[1]
                for im, t in zip(images, targets)]
    rc, got, _, _ = c_step(lib, config, params, images, targets)
    assert rc == 0
    for k in got:
        want = (per_line[0][k] + per_line[1][k]) + per_line[2][k]
        assert got[k].tobytes() == want.tobytes(), k
    rc, one, losses, bl = c_step(lib, config, params, images[:1], targets[:1])
    want = spec.line_forward_backward(config, params, images[0], targets[0], 1.0)
    assert rc == 0 and losses[0] == want[0] == bl
    assert all(one[k].tobytes() == want[1][k].tobytes() for k in one)


@pytest.mark.parametrize("bad,direction", [(np.inf, "rev"), (np.nan, "fwd")])
def test_non_finite_w_ih_keeps_every_zero_term(lib, isas, restore, bad, direction):
    """+0 * inf is NaN: with a non-finite W_ih the step's x*W_ih^T keeps the zero terms of x
    (the step learns W_ih's finiteness while it stacks the weights). A dead channel of the
    last conv block makes a column of x +0 at every step and its W_ih entry is inf or NaN:
    the spec's logits are NaN, which its CTC refuses, and the C step's CTC returns
    CRNN_E_ARG. Leaving the zero terms out would keep the logits finite and the step would
    return 0."""
    config = cases.small_config()
    rng = np.random.default_rng(15)
    params = model.init_params(config, rng)
    params["conv1.W"][2] = 0.0
    params["conv1.b"][2] = -1.0
    params[f"lstm0.{direction}.W_ih"][5, 2] = bad      # feature 2: row 0 of the map, channel 2
    images, targets = random_batch(rng, config, (24, 25, 26), with_no_alignment=False)
    with pytest.raises(ValueError, match="logits must be finite"):
        spec.batch_gradient(config, params, images, targets)
    for isa in isas:
        for threads in THREADS:
            assert lib.crnn_set_isa(ISA_IDS[isa]) == 0 and lib.crnn_set_threads(threads) == 0
            rc, _, _, _ = c_step(lib, config, params, images, targets)
            assert rc == -1, (isa, threads, rc)     # CRNN_E_ARG


def test_no_alignment_line_counts_zero_and_stays_in_B(lib):
    config = cases.small_config()
    rng = np.random.default_rng(14)
    params = model.init_params(config, rng)
    images, targets = random_batch(rng, config, (20, 20), with_no_alignment=True)
    rc, got, losses, bl = c_step(lib, config, params, images, targets)
    assert rc == 0 and np.isinf(losses[1]) and bl == losses[0] / 2
    alone = spec.line_forward_backward(config, params, images[0], targets[0], 0.5)[1]
    assert all(got[k].tobytes() == alone[k].tobytes() for k in got)   # g0 + (+0) = g0


@pytest.mark.parametrize("config", [model.default_config(), cases.small_config()],
                         ids=["crnn-v0", "small"])
def test_model_sizes_follow_the_config(lib, config):
    n = ctypes.c_int32(-1)
    cfg = model.cfg_array(config)
    assert lib.crnn_model_sizes(cfg.ctypes.data, ctypes.addressof(n), None) == 0
    sizes = np.zeros(n.value, np.int64)
    assert lib.crnn_model_sizes(cfg.ctypes.data, ctypes.addressof(n), sizes.ctypes.data) == 0
    assert list(sizes) == [int(np.prod(s.shape)) for s in model.param_specs(config)]


@pytest.mark.parametrize("what", ["width3", "label0", "labelK", "B0", "blocks0", "hidden0"])
def test_bad_arguments_are_rejected(lib, what):
    config = model.default_config()
    rng = np.random.default_rng(15)
    params = model.init_params(config, rng)
    images, targets = [rng.uniform(size=(32, 12)).astype(np.float32)], [np.array([1, 2], np.int32)]
    if what == "width3":
        images = [images[0][:, :3]]
    elif what == "label0":
        targets = [np.array([0, 2], np.int32)]
    elif what == "labelK":
        targets = [np.array([1, 37], np.int32)]
    elif what == "blocks0":
        config["blocks"] = []
    elif what == "hidden0":
        config["hidden"] = 0
    cfg = model.cfg_array(config)
    flat = np.zeros(400000, np.float32)
    widths = np.array([im.shape[1] for im in images], np.int32)
    imgs = np.concatenate([im.ravel() for im in images])
    lens = np.array([len(t) for t in targets], np.int32)
    tg = np.concatenate(targets)
    grads, losses, bl = np.zeros(400000, np.float32), np.zeros(1), np.zeros(1)
    rc = lib.crnn_step_gradients(cfg.ctypes.data, flat.ctypes.data, 0 if what == "B0" else 1,
                                 widths.ctypes.data, imgs.ctypes.data, lens.ctypes.data,
                                 tg.ctypes.data, grads.ctypes.data, losses.ctypes.data,
                                 bl.ctypes.data)
    assert rc == -1


def test_spec_within_half_the_per_element_allowance():
    """The spec's batch gradient, losses and batch loss use at most half of the gate's
    per-element float64 allowance (harness/allowance/step.py) on the step fixture."""
    fx = read_fixture(FIXTURES_DIR / "step.h5")
    for case in fx.cases:
        ex, f64 = case.expected["exact"], case.expected["float64"]
        for tensor in ex:
            tol = tier_tolerance("step", case, "float64", tensor)
            with np.errstate(invalid="ignore"):
                d = np.where(np.isfinite(f64[tensor]), np.abs(ex[tensor] - f64[tensor]), 0.0)
            assert (d <= 0.5 * tol.atol).all(), (case.name, tensor)


def test_gate_passes():
    r = subprocess.run([sys.executable, "-m", "crnn_conformance.harness.cli", "gate", "--layers",
                        "ctc,step,clip,adamw,train3", "-q"], capture_output=True, text=True,
                       cwd=FIXTURES_DIR.parent, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
