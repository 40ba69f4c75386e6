"""Pool flips against PyTorch: the rule (rule.py: pure functions of the arrays), the port's
pool decisions it judges (port.py) and the comparisons the pytorch tier calls (compare.py).
The names callers use are re-exported here."""
from .compare import compare_layer_winners, compare_step, judge, step_verdict
from .port import port_pool_outputs
from .rule import (DEAD, FLIP, NEAR, TWIN, DeadWindows, Verdict, WindowDiff, analyse_step,
                   classify_block, conv_bound_fn, excused_mask, layout, legal_fn, patches)

__all__ = ["DEAD", "FLIP", "NEAR", "TWIN", "DeadWindows", "Verdict", "WindowDiff",
           "analyse_step", "classify_block", "compare_layer_winners", "compare_step",
           "conv_bound_fn", "excused_mask", "judge", "layout", "legal_fn", "patches",
           "port_pool_outputs", "step_verdict"]
