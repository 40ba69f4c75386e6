"""Digests of every float64 module's results on small seeded cases (tests/test_reproducible.py).

    python tests/repro_digest.py      # prints one line per item: name sha256

Run in subprocesses with different BLAS kernels, thread counts and NumPy SIMD dispatch; the
lines must be identical. Each item exercises one module (generators/float64/*, the error
bounds written into fixtures), with float32-valued inputs (exact products) and with general
float64 inputs (the TwoProduct path), at sizes where BLAS kernels differ in their last bits.
"""
from __future__ import annotations

import hashlib

import numpy as np

from crnn_conformance.generators import bounds, model
from crnn_conformance.generators.cases import conv as conv_cases
from crnn_conformance.generators.cases import step as step_cases
from crnn_conformance.generators.float64 import adamw, clip, conv, ctc, elementary, exactsum, linear, lstm, step


def _digest(*arrays) -> str:
    h = hashlib.sha256()
    for a in arrays:
        a = np.ascontiguousarray(a)
        h.update(a.dtype.str.encode() + repr(a.shape).encode() + a.tobytes())
    return h.hexdigest()


def items():
    rng = np.random.default_rng(1414)
    f32 = lambda *s: rng.uniform(-1, 1, s).astype(np.float32).astype(np.float64)
    f64 = lambda *s: rng.normal(0.0, 1.0, s)
    out = {}

    A, B = f64(40, 300), f64(300, 33)
    out["exactsum"] = _digest(exactsum.matmul(A, B), exactsum.total(A, 0), exactsum.dot(A, A),
                              exactsum.matmul(A, B, compensated=False))
    z = np.concatenate([f64(500) * 8, np.ldexp(1.0, -rng.integers(1, 60, 100))])
    out["elementary"] = _digest(*(fn(z) for fn in (elementary.exp, elementary.tanh,
                                                    elementary.sigmoid, elementary.expm1)),
                                elementary.log1p(np.abs(z)), elementary.logaddexp(z, z[::-1]))

    for kind, gen in (("f32", f32), ("f64", f64)):
        x, W, b, dY = gen(25, 129), gen(48, 129), gen(48), gen(25, 48)
        out[f"linear_{kind}"] = _digest(linear.forward(x, W, b), *linear.backward(x, W, dY))

        geo = dict(kh=3, kw=3, padH=1, padW=1, poolH=2, poolW=2)
        xc, Wc, bc = np.abs(gen(8, 21, 16)), gen(32, 144), gen(32) * 0.1
        cv, pooled, winners = conv.forward(xc, Wc, bc, *geo.values())
        dP = gen(*pooled.shape)
        out[f"conv_{kind}"] = _digest(cv, pooled, winners,
                                      *conv.backward(xc, Wc, *geo.values(), dP, winners))

        H = 16
        xl, Wih, Whh, bl, dO = gen(19, 70), gen(2, 4 * H, 70), gen(2, 4 * H, H), gen(2, 4 * H), gen(19, 2 * H)
        s = lstm.forward(xl, Wih, Whh, bl)
        g = lstm.backward(xl, Wih, Whh, s, dO)
        out[f"lstm_{kind}"] = _digest(*s.values(), *g.values())
        out[f"bounds_lstm_{kind}"] = _digest(*bounds.lstm_forward(xl, Wih, Whh, bl, 1.0)[:1],
                                             *bounds.lstm_backward(xl, Wih, Whh, s, dO, -1.0))

        logits = gen(40, 37) * 3
        out[f"ctc_{kind}"] = _digest(*(np.atleast_1d(v) for v in ctc.ctc(logits, [5, 5, 9, 1, 30], 0.25)))

        grads = [gen(300, 7), gen(65)]
        g2, norm = clip.clip(grads, 1.0)
        out[f"clip_{kind}"] = _digest(*g2, np.array([norm]))
        p, m, v = gen(50), np.zeros(50), np.zeros(50)
        for t in range(1, 4):
            p, m, v = adamw.step(p, m, v, gen(50) * 0.01, t, 1e-3)
        out[f"adamw_{kind}"] = _digest(p, m, v)

    g = conv_cases.SMALL["small_C3_7x11"]
    Wt, bt = conv_cases.init_weights(rng, g)
    xs_ = conv_cases.random_input(rng, {**g, "signed": True}, g["W"])
    _, pl, wn = conv.forward(xs_, Wt, bt, *(g[k] for k in conv_cases.GEOMETRY))
    dPs = rng.uniform(-1, 1, pl.shape).astype(np.float32)
    out["conv_error_bounds"] = repr(conv_cases.error_bounds(xs_, Wt, bt, g, dPs, wn))

    config = step_cases.small_config()
    params = step_cases.fp16_params(config, model.init_params(config, rng))
    images = [rng.uniform(0.0, 1.0, (16, w)).astype(np.float32) for w in (20, 37)]
    targets = [np.array([1, 1, 2], np.int32), np.array([3, 4, 5], np.int32)]
    grads, losses, batch_loss = step.batch_gradient(config, params, images, targets)
    out["step"] = _digest(*grads.values(), losses, np.array([batch_loss]))
    E = step_cases.propagated_error(config, params, images, targets)
    out["step_propagated_error"] = _digest(*E.values())
    return out


if __name__ == "__main__":
    for name, d in items().items():
        print(name, d)
