"""The fuzzer's throughput: cases per second per layer, every ISA x thread count checked on
each case as `crnn-conformance fuzz` does, in `jobs` processes (docs/performance.md)."""
from __future__ import annotations

import tempfile
from pathlib import Path

TARGET_PER_S = 200     # small cases a second per layer on 2 cores (docs/performance.md)


def against_target(layers: dict, target: float = TARGET_PER_S) -> tuple[list, list]:
    """(layers at or above `target` cases a second, layers below it), in the given order."""
    met = [k for k, v in layers.items() if v["per_s"] >= target]
    return met, [k for k in layers if k not in met]


def fuzz_rates(port=None, seconds: float = 2.0, jobs: int = 2, layers=None, progress=None) -> dict:
    """{layer: {"cases", "seconds", "per_s", "found"}} for `seconds` of fuzzing each layer
    alone (no database, seed 1: the same cases every run)."""
    from .. import fuzz as F
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for layer in layers or F.strategies.available():
            if progress:
                progress(f"fuzz {layer}")
            opts = F.FuzzOptions(port=str(port) if port else None, layers=[layer],
                                 seconds=seconds, seed=1, out=Path(tmp), database=False)
            result = F.run(opts, jobs)
            s = result.stats[layer]
            out[layer] = {"cases": s.cases, "seconds": round(s.seconds, 2),
                          "per_s": round(s.rate, 1), "found": s.finding is not None,
                          "threads": list(result.threads)}
    return out
