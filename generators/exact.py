"""The exact tier of a case: the executable spec (generators/spec/) run on a case's inputs the
way the harness runs the port on them (harness/layers/<layer>.py), one function per layer.

    expected(layer, params, inputs) -> {tensor: array}

A case's params may name a `kind` when its layer runs it with other calls than the layer's
standard ones: `activations` (lstm: crnn_sigmoid, crnn_tanh), `detmath` (ctc:
crnn_detmath_exp, crnn_detmath_log) and `many` (ctc, clip, adamw: many small independent
problems packed into one case, each its own port call). The edge-case builders
(generators/cases/*_edges.py, activations.py, detmath.py) and the fuzzer (harness/fuzz/) both
compute their golden bits here, so a fixture and a fuzz finding mean the same thing.
"""
from __future__ import annotations

import numpy as np

from ..ctypes_kernels import layer_table
from .spec import activations, adamw, clip, conv, ctc, detmath
from .spec import dot16, linear, lstm
from .spec import step as step_spec

F32 = np.float32
CONV_GEOMETRY = ("kh", "kw", "padH", "padW", "poolH", "poolW")


def _dot16(params, inputs):
    a, b = (np.asarray(inputs[k], F32) for k in ("a", "b"))
    out, at = [], 0
    for n in np.asarray(inputs["lengths"], np.int64):
        out.append(dot16.dot16(a[at:at + n], b[at:at + n]))
        at += int(n)
    return {"dot": np.array(out, F32)}


def _linear(params, inputs):
    x, W, b, dY = (np.asarray(inputs[k], F32) for k in ("x", "W", "b", "dY"))
    dx, dW, db = linear.backward(x, W, dY)
    return {"y": linear.forward(x, W, b), "dx": dx, "dW": dW, "db": db}


def _conv(params, inputs):
    x, W, b, dP = (np.asarray(inputs[k], F32) for k in ("x", "W", "b", "dPooled"))
    geo = [int(params[k]) for k in CONV_GEOMETRY]
    want_dx = bool(params.get("dx", True))
    cv, pooled, winners = conv.forward(x, W, b, *geo)
    dW, db, dx = conv.backward(x, W, *geo, dP, winners, want_dx=want_dx)
    out = {"conv": cv, "pooled": pooled, "winners": winners, "dW": dW, "db": db}
    if want_dx:
        out["dx"] = dx
    return out


def _activations(params, inputs):
    x = np.asarray(inputs["x"], F32)
    return {"sigmoid": activations.sigmoid(x), "tanh": activations.tanh(x)}


def _lstm(params, inputs):
    if params.get("kind") == "activations":
        return _activations(params, inputs)
    args = [np.asarray(inputs[k], F32) for k in ("x", "W_ih", "W_hh", "b")]
    s = lstm.forward(*args)
    s.update(lstm.backward(args[0], args[1], args[2], s, np.asarray(inputs["dOut"], F32)))
    return {k: s[k] for k in ("out", "gates", "c", "tc", "hPrev", "dW_ih", "dW_hh", "db", "dx")}


def ctc_lines(inputs):
    """The lines of a `many` CTC case: (logits[T][K], target[L], scale) each."""
    shapes = np.asarray(inputs["shapes"], np.int64).reshape(-1, 3)
    logits, targets = np.asarray(inputs["logits"], F32), np.asarray(inputs["targets"], np.int32)
    at = ta = 0
    for (T, K, L), scale in zip(shapes, np.asarray(inputs["scales"], np.float64)):
        yield logits[at:at + T * K].reshape(T, K), targets[ta:ta + L], float(scale)
        at += int(T * K)
        ta += int(L)


def _ctc(params, inputs):
    kind = params.get("kind")
    if kind == "detmath":
        return {"exp": np.asarray(detmath.exp(np.asarray(inputs["x_exp"], np.float64)), np.float64),
                "log": np.asarray(detmath.log(np.asarray(inputs["x_log"], np.float64)), np.float64)}
    if kind == "many":
        losses, grads = [], []
        for loss, d in ctc.ctc_many(list(ctc_lines(inputs))):
            losses.append(loss)
            grads.append(d.ravel())
        return {"loss": np.array(losses, np.float64),
                "dlogits": np.concatenate(grads + [np.zeros(0, F32)]).astype(F32)}
    loss, d = ctc.ctc(inputs["logits"], inputs["target"], float(inputs["scale"][0]))
    return {"loss": np.array([loss], np.float64), "dlogits": d}


def _step(params, inputs):
    from . import model
    from .cases.step import case_inputs

    class _C:   # case_inputs reads .params and .inputs
        pass
    c = _C()
    c.params, c.inputs = params, inputs
    config, weights, images, targets = case_inputs(c)
    grads, losses, batch_loss = step_spec.batch_gradient(config, weights, images, targets)
    out = {s.name: grads[s.name] for s in model.param_specs(config)}
    out["losses"] = np.asarray(losses, np.float64)
    out["batch_loss"] = np.array([batch_loss], np.float64)
    return out


def clip_problems(inputs):
    """The problems of a `many` clip case: ([tensors], limit, enabled) each."""
    grads = np.asarray(inputs["grads"], F32)
    sizes = np.asarray(inputs["sizes"], np.int64)
    at = si = 0
    for count, limit, enabled in zip(np.asarray(inputs["counts"], np.int64),
                                     np.asarray(inputs["limits"], np.float64),
                                     np.asarray(inputs["enabled"], np.int32)):
        tensors = []
        for n in sizes[si:si + count]:
            tensors.append(grads[at:at + n])
            at += int(n)
        si += int(count)
        yield tensors, float(limit), int(enabled)


def _clip(params, inputs):
    if params.get("kind") == "many":
        outs, norms = [], []
        for tensors, limit, enabled in clip_problems(inputs):
            g, norm = clip.clip(tensors, limit, enabled)
            outs += [t.ravel() for t in g]
            norms.append(norm)
        return {"grads": np.concatenate(outs + [np.zeros(0, F32)]).astype(F32),
                "norm": np.array(norms, np.float64)}
    grads = np.asarray(inputs["grads"], F32)
    tensors, at = [], 0
    for n in np.asarray(inputs["sizes"], np.int64):
        tensors.append(grads[at:at + n])
        at += int(n)
    g, norm = clip.clip(tensors, float(inputs["limit"][0]), int(inputs["enabled"][0]))
    out = {name: t.reshape(shape) for name, shape, t in zip(params["names"], params["shapes"], g)}
    out["norm"] = np.array([norm], np.float64)
    return out


def adamw_problems(inputs):
    """The problems of a `many` AdamW case: (p, grads[steps][n], hparams, decay) each."""
    p, grads = np.asarray(inputs["p"], F32), np.asarray(inputs["grads"], F32)
    at = ga = 0
    for n, steps, hp, decay in zip(np.asarray(inputs["sizes"], np.int64),
                                   np.asarray(inputs["steps"], np.int64),
                                   np.asarray(inputs["hparams"], np.float64).reshape(-1, 5),
                                   np.asarray(inputs["decay"], np.int32)):
        yield (p[at:at + n], grads[ga:ga + steps * n].reshape(steps, n),
               [float(v) for v in hp], int(decay))
        at += int(n)
        ga += int(steps * n)


def adamw_run(p, grads, hp, decay):
    """Steps t = 1.. of one tensor, the running beta products in double as the caller keeps
    them (harness/layers/adamw.py) -> (p, m, v)."""
    lr, beta1, beta2, eps, wd = hp
    p = np.asarray(p, F32).copy()
    m, v = np.zeros_like(p), np.zeros_like(p)
    b1t = b2t = 1.0
    for g in grads:
        b1t, b2t = b1t * beta1, b2t * beta2
        p, m, v = adamw.step(p, m, v, g, lr, beta1, beta2, eps, wd, decay, b1t, b2t)
    return p, m, v


def _adamw(params, inputs):
    if params.get("kind") == "many":
        ps, ms, vs = [], [], []
        for p, grads, hp, decay in adamw_problems(inputs):
            a, b, c = adamw_run(p, grads, hp, decay)
            ps.append(a)
            ms.append(b)
            vs.append(c)
        cat = lambda xs: np.concatenate(xs + [np.zeros(0, F32)]).astype(F32)
        return {"p": cat(ps), "m": cat(ms), "v": cat(vs)}
    p, m, v = adamw_run(inputs["p"], np.asarray(inputs["grads"], F32),
                        [float(x) for x in inputs["hparams"]], int(inputs["decay"][0]))
    return {"p": p, "m": m, "v": v}


def _train3(params, inputs):
    """Per batch: the batch gradient, clipping, AdamW on every tensor (harness/layers/train3.py)."""
    from . import model
    names, config = params["names"], params["config"]
    lr, beta1, beta2, eps, wd = (float(v) for v in inputs["hparams"])
    limit, enabled = float(inputs["clip"][0]), int(inputs["clip"][1])
    weights = model.unflatten(config, np.asarray(inputs["params"], F32))
    opt = adamw.AdamW([weights[n] for n in names], [bool(d) for d in params["decay"]],
                      lr=lr, beta1=beta1, beta2=beta2, eps=eps, wd=wd)
    losses, norms = [], []
    for t in range(int(params["steps"])):
        batch = {"cfg": inputs["cfg"], "params": model.flatten(config, dict(zip(names, opt.p))),
                 **{k: inputs[f"batch{t}_{k}"] for k in ("widths", "images", "target_lens",
                                                          "targets")}}
        g = _step(params, batch)
        losses.append(g["losses"])
        clipped, norm = clip.clip([g[n] for n in names], limit, enabled)
        norms.append(norm)
        opt.step(clipped)
    out = {}
    for n, p, m, v in zip(names, opt.p, opt.m, opt.v):
        out[n], out[f"{n}.m"], out[f"{n}.v"] = p, m, v
    out["losses"] = np.stack(losses)
    out["norms"] = np.array(norms, np.float64)
    return out


# each layer's function, as the layer table names it
EXPECTED = {lay.name: globals()[lay.exact.rpartition(".")[2]] for lay in layer_table.LAYERS
            if lay.exact.rpartition(".")[0] == __name__}


def expected(layer: str, params: dict, inputs: dict) -> dict:
    """The spec's outputs for a case of `layer`, named like the port's (the exact tier)."""
    with np.errstate(all="ignore"):   # overflow to inf and NaN propagation are the point
        return EXPECTED[layer](params, inputs)


def case(layer: str, name: str, params: dict, inputs: dict):
    """A fixture Case whose only tier is the exact one (the gate adds identity)."""
    from .h5io import Case
    return Case(name, params, inputs, {"exact": expected(layer, params, inputs)})
