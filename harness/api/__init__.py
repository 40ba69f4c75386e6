"""The references as a Python API: check a tensor of any port (NumPy, JAX, PyTorch, ...) from a
prompt or a test suite. docs/python-api.md is the guide; in short:

    from crnn_conformance.harness.api import conv_block
    r = conv_block(x, W, b, pool=(2, 2))       # forward: a result with conv, pooled, winners
    r["pooled"].covers(t)                       # bool per element: within the float64 allowance
    g = r.backward(grad)                        # the gradients, named grad_x, grad_W, grad_b
    g = conv_block.backward(x, W, b, grad, pool=(2, 2))   # the same, standalone
    g["grad_W"].usage(t, tier="exact")          # the gate's usage (exact tier: max ulp distance)

Every tensor of a result carries both references, `.exact` (the executable spec's bits,
generators/spec) and `.float64` (generators/float64), and its allowance: the error model's
Atol per element on these inputs (harness/allowance, the gate's) with the tolerance table's
entry (harness/tolerances.toml). covers(), usage() and compare() judge a candidate with the
gate's own code (crnn_conformance.harness.compare.within and .compare), so they agree element
for element with what the gate reports for the same tensors.

The package, by responsibility: inputs.py (the dtype and shape rules: no silent casts, no
broadcasting), result.py (Result, Tensors), layers.py (linear, conv_block, lstm_layer, ctc,
adamw_step), model.py (model_step).
"""
from __future__ import annotations

from .layers import (
                     adamw_step,
                     conv_block,
                     ctc,
                     from_torch_conv_weight,
                     linear,
                     lstm_layer,
                     to_torch_conv_weight,
)
from .model import model_step
from .result import TIERS, Result, Tensors

__all__ = [
                     "TIERS",
                     "Result",
                     "Tensors",
                     "adamw_step",
                     "conv_block",
                     "ctc",
                     "from_torch_conv_weight",
                     "linear",
                     "lstm_layer",
                     "model_step",
                     "to_torch_conv_weight",
]
