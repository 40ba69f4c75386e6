"""The fuzzer's throughput: cases per second per layer, every ISA x thread count checked on
each case as `crnn-conformance fuzz` does, in `jobs` processes (docs/performance.md)."""
from __future__ import annotations

import tempfile
from pathlib import Path


def fuzz_rates(port=None, seconds: float = 2.0, jobs: int = 2, layers=None, progress=None) -> dict:
    """{layer: {"cases", "seconds", "per_s", "found"}} for `seconds` of fuzzing each layer
    alone (no database, seed 1: the same cases every run)."""
    from crnn_conformance.harness import fuzz as F
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for layer in layers or F.strategies.available():
            if progress:
                progress(f"fuzz {layer}")
            opts = F.FuzzOptions(port=str(port) if port else None, layers=[layer],
                                 seconds=seconds, seed=1, out=Path(tmp), database=False)
            s = F.run(opts, jobs).stats[layer]
            out[layer] = {"cases": s.cases, "seconds": round(s.seconds, 2),
                          "per_s": round(s.rate, 1), "found": s.finding is not None}
    return out
