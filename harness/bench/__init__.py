"""`crnn-conformance bench`: the whole training step of a port against PyTorch fp32.

One step = what training does per batch: crnn_step_gradients (per line forward, CTC with
scale 1/B, backward; the line gradients summed in line order), crnn_clip_gradients (global
norm, limit 5) and crnn_adamw on every tensor. PyTorch runs the same network in fp32 on the
same weights and lines (generators/torch_model.py): forward, nn.CTCLoss(reduction='none')
then mean, backward, clip_grad_norm_(5), torch.optim.AdamW(foreach=False).

Both run in this process, one after the other inside each repetition (so a busy machine
slows both alike), at the same thread count (crnn_set_threads / torch.set_num_threads),
after warm-up repetitions; the reported time is the median. Also measured: the port's layer
entry points on one line of the batch (median of repeated calls), the step's and each entry
point's arithmetic rate (2 flops per multiply-add of every dot, counted from the config) and
its share of the path's fma peak (chains of fmas on the same threads), the peak memory of a
step and the gate's own wall time, and the fuzzer's cases per second per layer
(docs/performance.md describes every method).

The package, by responsibility: inputs.py (model, lines, multiply-adds), ours.py (the port's
step and layer calls), torch_step.py (PyTorch's), timing.py, memory.py, peak.py (the fma
peak), fuzz.py (the fuzzer's cases per second), measure.py (a run and the paired
comparison), render.py (the tables).
"""
from __future__ import annotations

from .fuzz import fuzz_rates  # noqa: F401
from .inputs import ADAMW, CLIP_LIMIT, MODEL_PATH, Inputs, entry_macs, make_inputs, step_macs  # noqa: F401
from .memory import HEAP_COUNTER_SOURCE, step_memory  # noqa: F401
from .peak import FMA_PEAK_SOURCE, fma_peak  # noqa: F401
from .ours import OursStep, _p, layer_calls  # noqa: F401
from .render import render, render_paired  # noqa: F401
from .measure import BenchResult, gate_wall_time, paired, run  # noqa: F401
from .timing import DEFAULT_ROUNDS, _median_time, _timed_blocks  # noqa: F401
from .torch_step import TorchStep, torch_available  # noqa: F401
