"""How a callable is timed: medians of repetitions, the two sides in alternating blocks."""
from __future__ import annotations

import statistics
import time

DEFAULT_ROUNDS = 3   # a side's repetitions in this many rounds of one block a side


def _timed_blocks(ours, theirs, reps: int, warmup: int, rounds: int = DEFAULT_ROUNDS):
    """Per-repetition seconds of ours and theirs, in alternating blocks (ours, theirs, ours,
    theirs, ...), each block after its own warm-up and a pause: a runtime's idle threads
    spin for a while after their last parallel region (OpenMP, OpenBLAS, our pool), and
    would otherwise take the cores the other side needs. `reps` repetitions a side in all,
    spread over `rounds` rounds of one block a side; returns the two sides' times, one list
    a round each (a side not run: empty lists)."""
    to, tt = [], []
    per = [reps // rounds + (r < reps % rounds) for r in range(rounds)]
    for n in per:
        for fn, out in ((ours, to), (theirs, tt)):
            if fn is None or n == 0:
                continue
            time.sleep(0.25)
            for _ in range(warmup):
                fn()
            block = []
            for _ in range(n):
                t0 = time.perf_counter()
                fn()
                block.append(time.perf_counter() - t0)
            out.append(block)
    return to, tt


def _median_time(fn, reps: int, min_time: float = 0.0) -> float:
    ts = []
    t_end = time.perf_counter() + min_time
    while len(ts) < reps or time.perf_counter() < t_end:
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
        if len(ts) >= 50 * reps:
            break
    return statistics.median(ts)
