"""Clipping and AdamW: the C port equals the executable spec bit for bit; the hand examples."""
from __future__ import annotations

import numpy as np
import pytest

from crnn_conformance.generators.spec import adamw, clip

F = np.float32


def c_clip(lib, grads, limit, enabled):
    flat = np.concatenate([np.asarray(g, F).ravel() for g in grads]) if grads else np.zeros(0, F)
    sizes = np.array([np.size(g) for g in grads], np.int64)
    norm = np.full(1, np.nan)
    rc = lib.crnn_clip_gradients(flat.ctypes.data, sizes.ctypes.data, len(sizes), float(limit),
                                 int(enabled), norm.ctypes.data)
    assert rc == 0
    out, at = [], 0
    for g in grads:
        out.append(flat[at:at + np.size(g)].reshape(np.shape(g)))
        at += np.size(g)
    return out, float(norm[0])


def c_adamw(lib, p, m, v, g, lr, beta1, beta2, eps, wd, decay, b1t, b2t):
    p, m, v = (np.array(a, F) for a in (p, m, v))
    g = np.ascontiguousarray(g, F)
    rc = lib.crnn_adamw(p.ctypes.data, m.ctypes.data, v.ctypes.data, g.ctypes.data, p.size, lr,
                        beta1, beta2, eps, wd, int(decay), b1t, b2t)
    assert rc == 0
    return p, m, v


def bits(a):
    return np.asarray(a).tobytes()


def test_clip_three_four_to_unit_norm(lib):
    grads = [np.array([3.0], F), np.array([4.0], F)]
    for out, norm in (clip.clip(grads, 1.0), c_clip(lib, grads, 1.0, True)):
        assert norm == 5.0
        f = F(1.0 / (5.0 + 1e-6))
        assert out[0][0] == F(3.0) * f and out[1][0] == F(4.0) * f
        assert abs(out[0][0] - 0.6) < 1e-6 and abs(out[1][0] - 0.8) < 1e-6


def test_clip_is_strict_and_can_be_disabled(lib):
    grads = [np.array([3.0], F), np.array([4.0], F)]
    for limit, enabled in ((5.0, True), (1.0, False), (7.0, True)):
        out_s, n_s = clip.clip(grads, limit, enabled)
        out_c, n_c = c_clip(lib, grads, limit, enabled)
        assert n_s == n_c == 5.0
        assert [float(o[0]) for o in out_s] == [float(o[0]) for o in out_c] == [3.0, 4.0]


def test_clip_c_equals_spec_on_random_tensors(lib):
    rng = np.random.default_rng(71)
    for _ in range(25):
        n = int(rng.integers(1, 8))
        grads = [rng.normal(0.0, 10.0 ** rng.uniform(-4, 1), rng.integers(1, 300, 1 + rng.integers(0, 2)))
                 .astype(F) for _ in range(n)]
        limit, enabled = float(rng.uniform(0.1, 20.0)), bool(rng.random() < 0.8)
        out_s, n_s = clip.clip(grads, limit, enabled)
        out_c, n_c = c_clip(lib, grads, limit, enabled)
        assert bits(np.float64(n_s)) == bits(np.float64(n_c))
        assert all(bits(a) == bits(b) for a, b in zip(out_s, out_c))


def test_clip_norm_is_dot16_per_tensor_summed_in_double(lib):
    rng = np.random.default_rng(72)
    grads = [rng.normal(size=s).astype(F) for s in (37, 16, 100)]
    want = np.sqrt(sum(float(clip.tensor_sumsq(g)) for g in grads))
    assert c_clip(lib, grads, 1e9, True)[1] == want


@pytest.mark.parametrize("n_tensors", [3, 20, 100])
def test_clip_tensors_split_across_threads(lib, isas, n_tensors):
    """Each tensor's dot runs whole on one thread (runs of tensors of about equal size) and
    the sums follow in order: every ISA path and thread count gives the spec's norm and
    scaled gradients, with empty tensors, one tensor much larger than the rest, and more
    tensors than the kernel keeps on its stack."""
    from crnn_conformance.ctypes_kernels.abi import ISA_NAMES
    rng = np.random.default_rng(74 + n_tensors)
    sizes = rng.integers(0, 3000, n_tensors)
    sizes[rng.integers(0, n_tensors)] = 70000
    sizes[rng.random(n_tensors) < 0.1] = 0
    grads = [rng.normal(0.0, 10.0 ** rng.uniform(-3, 1), int(k)).astype(F) for k in sizes]
    out_s, n_s = clip.clip(grads, 1.0, True)
    isa0, th0 = lib.crnn_get_isa(), lib.crnn_get_threads()
    try:
        for isa in isas:
            assert lib.crnn_set_isa(ISA_NAMES.index(isa)) == 0
            for t in (1, 2, 3, 7):
                assert lib.crnn_set_threads(t) == 0
                out_c, n_c = c_clip(lib, grads, 1.0, True)
                assert bits(np.float64(n_s)) == bits(np.float64(n_c)), (isa, t)
                assert all(bits(a) == bits(b) for a, b in zip(out_s, out_c)), (isa, t)
    finally:
        lib.crnn_set_isa(isa0)
        lib.crnn_set_threads(th0)


def test_adamw_first_step_of_a_scalar(lib):
    """p = 2.0, g = 0.1, lr = 0.01, wd = 0.01, betas 0.9/0.999: 1.989800001 in double."""
    args = (0.01, 0.9, 0.999, 1e-8, 0.01, True, 0.9, 0.999)
    p_s, m_s, v_s = adamw.step([2.0], [0.0], [0.0], [0.1], *args)
    p_c, m_c, v_c = c_adamw(lib, [2.0], [0.0], [0.0], [0.1], *args)
    assert p_s[0] == F(1.989800001) and p_c[0] == F(1.989800001)
    assert bits(m_s) == bits(m_c) and bits(v_s) == bits(v_c)


def test_adamw_c_equals_spec_over_steps(lib):
    rng = np.random.default_rng(73)
    for _ in range(12):
        shape = (int(rng.integers(1, 40)), int(rng.integers(1, 40)))
        hp = dict(lr=float(10 ** rng.uniform(-4, -2)), beta1=float(rng.choice([0.9, 0.8, 0.0])),
                  beta2=float(rng.choice([0.999, 0.99])), eps=float(rng.choice([1e-8, 1e-6])),
                  wd=float(rng.choice([0.0, 0.01, 0.1])))
        decay = bool(rng.random() < 0.5)
        p = rng.uniform(-1, 1, shape).astype(F)
        ps, ms, vs = p, np.zeros_like(p), np.zeros_like(p)
        pc, mc, vc = p, np.zeros_like(p), np.zeros_like(p)
        b1t = b2t = 1.0
        for _t in range(4):
            g = (rng.normal(size=shape) * 10.0 ** rng.uniform(-9, 0, shape)).astype(F)
            g[rng.random(shape) < 0.1] = 0.0
            b1t, b2t = b1t * hp["beta1"], b2t * hp["beta2"]
            args = (hp["lr"], hp["beta1"], hp["beta2"], hp["eps"], hp["wd"], decay, b1t, b2t)
            ps, ms, vs = adamw.step(ps, ms, vs, g, *args)
            pc, mc, vc = c_adamw(lib, pc, mc, vc, g, *args)
            assert bits(ps) == bits(pc) and bits(ms) == bits(mc) and bits(vs) == bits(vc)


def test_adamw_driver_keeps_running_products():
    opt = adamw.AdamW([np.ones(3, F)], [True], lr=0.1)
    for _ in range(3):
        opt.step([np.full(3, 0.5, F)])
    assert opt.b1t == 0.9 * 0.9 * 0.9 and opt.b2t == 0.999 * 0.999 * 0.999 and opt.t == 3


@pytest.mark.parametrize("what", ["clip_neg_size", "clip_bad_enabled", "adamw_bad_decay", "adamw_b1t_one"])
def test_bad_arguments_are_rejected(lib, what):
    g = np.ones(4, F)
    norm = np.zeros(1)
    if what.startswith("clip"):
        sizes = np.array([-1 if what == "clip_neg_size" else 4], np.int64)
        rc = lib.crnn_clip_gradients(g.ctypes.data, sizes.ctypes.data, 1, 1.0,
                                     2 if what == "clip_bad_enabled" else 1, norm.ctypes.data)
    else:
        p, m, v = np.ones(4, F), np.zeros(4, F), np.zeros(4, F)
        rc = lib.crnn_adamw(p.ctypes.data, m.ctypes.data, v.ctypes.data, g.ctypes.data, 4, 1e-3,
                            0.9, 0.999, 1e-8, 0.01, 2 if what == "adamw_bad_decay" else 1,
                            1.0 if what == "adamw_b1t_one" else 0.9, 0.999)
    assert rc == -1
