"""PyTorch references for the pytorch tier: the trained crnn-v0 in fp32 and in float64.

Every pytorch-tier fixture (generators/cases/pytorch_*.py) is built from this package
(torch_env, provenance, data, floors, layers, network, training: one idea each):

- the weights are the trained container's fp16 values (fixtures/model/crnn-v0.h5) widened to
  fp32, and to float64 for the float64 run (both widenings are exact);
- the lines are real synthetic lines (generators/lines.py), the targets their texts;
- a run of one line keeps every intermediate the per-layer fixtures need: each conv block's
  input, conv output, pooled output and PyTorch's pool indices, each LSTM layer's input and
  output, the classifier's input and the logits, and the gradient of the loss with respect
  to each of them (the layers' real upstream gradients);
- each layer can be rerun alone, in either dtype, on given inputs (the per-layer fixtures
  give the fp32 and the float64 run the same fp32 inputs, so a layer's Floor is that
  layer's own rounding);
- Floor(tensor) = max |fp32 - float64| over the tensor's elements.

The network is generators/torch_model.py's (conv -> ReLU -> max_pool2d blocks, the (h, c)
sequence map, bidirectional nn.LSTM with bias_hh fixed at 0, Linear), written here as a
functional forward so the intermediates are reachable: one single-layer bidirectional
nn.LSTM per layer (same weights; tests/test_pytorch_tier.py checks that the log-probs equal
torch_model.CRNN's). The loss is nn.functional.ctc_loss with reduction='none' (blank 0), and
the batch loss is the plain mean over the lines (sum / B), as in the spec: each line's logit
gradient is scaled by 1/B, not by 1/(B * target length) as reduction='mean' would.

Determinism: one torch thread (torch.set_num_threads(1)) while a fixture is built, no
randomness. On the same machine and torch version a rebuild is bit for bit the same; on
another CPU or torch version the fp32 values may differ within their Floors, which is what
`regen-fixtures --check` then allows, on the same inputs (generators/fixture_compare.py).
"""
from __future__ import annotations

# the names the case builders use as pytorch_ref.<name>; regen-fixtures --retrain sets
# data.MODEL_PATH, so it is read from there, not re-exported
from .data import (BATCH_SEED, BATCH_WIDTHS, LAYER_LINES, batch_data, params64,  # noqa: F401
                   real_lines, trained_model)
from .floors import floor, floors  # noqa: F401
from .layers import adamw, conv_block, ctc_line, linear_layer, lstm_layer, lstm_module  # noqa: F401
from .network import Model  # noqa: F401
from .provenance import ROOT, cpu_flags, git_revision, provenance  # noqa: F401
from .torch_env import DTYPES, deterministic, np_dtype, tdtype  # noqa: F401
from .training import (MASK_FACTOR, TRAIN_B, TRAIN_CLIP, TRAIN_HP, TRAIN_SEEDS,  # noqa: F401
                       train_data, train_mask, train_steps)
