"""The Python API's whole model: model_step (harness/api, docs/python-api.md)."""
from __future__ import annotations

import numpy as np
from ...generators import model as _model

from .inputs import _f32, _labels, _scalar_grad, _shape
from .result import Result, _gradient_names, _Op


class _ModelStep(_Op):
    """The whole model's batch loss and gradient (docs/backward.md "Batch gradient, clipping").

        r = model_step(params, images, targets, config=None)   -> losses[B], batch_loss
        r.backward(grad)                                        grad: dL/dbatch_loss, a number
        model_step.backward(params, images, targets, grad, config=None)
                                        -> grad_<name> per parameter (grad_conv0.W, also
                                           reachable as grad_conv0_W), in parameter order

    params: {name: array} as crnn_conformance.generators.model.param_specs(config) names and shapes them
    (config defaults to crnn-v0); images: one [H][W] or [H][W][C] array per line; targets:
    one label sequence per line. With grad = 1 the gradient is the spec's batch gradient bit
    for bit (each line's CTC scale 1/B); another grad scales each line by grad/B (binary64).
    """
    name, layer = "model_step", "step"

    def _inputs(self, params, images, targets, config, allow_float16):
        config = _model.default_config() if config is None else config
        specs = _model.param_specs(config)
        missing = [s.name for s in specs if s.name not in params]
        if missing:
            raise ValueError(f"params lacks {', '.join(missing)} (crnn_conformance.generators.model.param_specs)")
        P = {}
        for s in specs:
            a = _f32(s.name, params[s.name], allow_float16)
            _shape(s.name, a, s.shape, "crnn_conformance.generators.model.param_specs")
            P[s.name] = a
        images = [_f32(f"images[{i}]", im, allow_float16) for i, im in enumerate(images)]
        targets = [_labels(f"targets[{i}]", t) for i, t in enumerate(targets)]
        if not images or len(images) != len(targets):
            raise ValueError("need one target per image and at least one line")
        return config, P, images, targets

    def __call__(self, params, images, targets, *, config=None,
                 allow_float16: bool = False) -> Result:
        from ...generators.spec import ctc as ctc32
        from ...generators.spec import step as step32
        config, P, images, targets = self._inputs(params, images, targets, config, allow_float16)
        states = [step32.line_forward(config, P, im) for im in images]
        losses = np.array([ctc32.ctc(st["logits"], t, 1.0)[0] for st, t in zip(states, targets)])
        # the float64 losses: the float64 step at scale 1 (its gradient is not used here)
        l64 = np.array([_step64_line(config, P, im, t, 1.0)[0] for im, t in zip(images, targets)])
        e = _model_errors(config, P, images, targets, 1.0 / len(images))
        return Result(self.name, self.layer,
                      {"losses": losses, "batch_loss": _batch_loss32(losses)},
                      {"losses": l64, "batch_loss": _batch_loss64(l64)},
                      {"losses": "losses", "batch_loss": "batch_loss"},
                      backward=lambda grad, **kw: self._backward(config, P, images, targets,
                                                                 states, grad),
                      allowances={"losses": e["losses"], "batch_loss": e["batch_loss"].reshape(())})

    def backward(self, params, images, targets, grad, *, config=None,
                 allow_float16: bool = False) -> Result:
        config, P, images, targets = self._inputs(params, images, targets, config, allow_float16)
        return self._backward(config, P, images, targets, None, grad)

    def _backward(self, config, P, images, targets, states, grad):
        from ...generators.spec import ctc as ctc32
        from ...generators.spec import step as step32
        g = _scalar_grad(grad, "batch_loss")
        B = len(images)
        scale = g / B       # 1/B at grad = 1, as the spec's batch_gradient
        names = [s.name for s in _model.param_specs(config)]
        total = None
        total64 = {n: np.zeros(P[n].shape) for n in names}
        for n_line, (im, t) in enumerate(zip(images, targets)):
            # the spec's line_forward_backward, with the forward reused when the result has it
            st = states[n_line] if states is not None else step32.line_forward(config, P, im)
            loss, dlogits = ctc32.ctc(st["logits"], t, scale)
            gl = (step32.zero_grads(config) if not np.isfinite(loss)
                  else step32.line_backward(config, P, st, dlogits))
            total = gl if total is None else {k: total[k] + gl[k] for k in total}
            _, g64 = _step64_line(config, P, im, t, scale)
            for k in names:
                total64[k] = total64[k] + g64[k]
        table = {n: n for n in names}
        e = _model_errors(config, P, images, targets, scale)
        return Result(self.name, self.layer, {f"grad_{n}": total[n] for n in names},
                      {f"grad_{n}": total64[n] for n in names}, _gradient_names(names, table),
                      allowances={f"grad_{n}": e[n] for n in names})


def _model_errors(config, P, images, targets, scale) -> dict:
    """The whole model's per-element Atol (harness/allowance/step.py, the gate's model)."""
    from ..allowance import params, step
    from ..allowance.errors import Err
    E = step.batch(config, {k: Err.exact(np.asarray(v, np.float64)) for k, v in P.items()},
                   [np.asarray(im, np.float64) for im in images], targets, scale)
    return {k: np.asarray(v.allowance(params.lam()), np.float64) for k, v in E.items()}


def _step64_line(config, P, image, target, scale):
    from ...generators.float64 import step as step64
    P64 = {k: v.astype(np.float64) for k, v in P.items()}
    return step64.line_forward_backward(config, P64, image.astype(np.float64), target, scale)


def _batch_loss32(losses) -> np.ndarray:
    """As the spec: the binary64 sum of the finite losses in line order, divided by B."""
    total = 0.0
    for loss in losses:
        if np.isfinite(loss):
            total = total + float(loss)
    return np.array(total / len(losses), np.float64)


def _batch_loss64(losses) -> np.ndarray:
    return np.array(float(np.sum(losses[np.isfinite(losses)])) / len(losses), np.float64)


model_step = _ModelStep()
