"""`crnn-conformance fuzz`: property-based differential testing of a port (docs/fuzz.md).

    strategies/<layer>.py  what a case of each layer looks like (Hypothesis strategies)
    values.py              arrays as short, shrinkable recipes; special values
    engine.py              the loop: draw, run in the gate's worker, compare, shrink
    writer.py              a finding as a one-case fixture and the gate's failure lines

`run(opts)` fuzzes every requested layer for opts.seconds, in opts.jobs processes, and returns
a FuzzResult; the command prints it and exits like the gate (0 nothing found, 1 found, 2 cannot
run)."""
from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from . import strategies, writer
from .engine import (CHUNK, Finding, Fuzzer, FuzzOptions, LayerStats,  # noqa: F401 (API)
                     ReferenceMismatch)


@dataclass
class FuzzResult:
    stats: dict                      # layer -> LayerStats
    seconds: float
    seed: int
    isas: list = field(default_factory=list)
    threads: list = field(default_factory=list)   # every process's thread counts, in order
    reference: bool = False          # golden bits from the reference port (harness/reference.py)
    written: list = field(default_factory=list)   # every finding written, one per fixture file

    @property
    def findings(self) -> list:
        return [s.finding for s in self.stats.values() if s.finding is not None]


def _job(opts: FuzzOptions, layers: list[str], started: float, end_wall: float,
         print_findings: bool, stop=None):
    """One process: fuzz `layers` until end_wall (time.time()); findings written to opts.out."""
    fz = Fuzzer(opts, layers, stop, started)
    end = time.monotonic() + max(0.0, end_wall - time.time())

    def found(f):
        writer.write(opts.out, f, opts.seed, opts.port)
        if print_findings:
            print("\n".join(writer.report(f, opts.port, opts.out)), flush=True)
    try:
        stats = fz.run(end, found)
    finally:
        fz.close()
    return stats, fz.isas, fz.gate.threads, fz.reference is not None


def split(layers: list[str], jobs: int) -> list[list[str]]:
    """Layers dealt to the processes in turn; with more processes than layers, every process
    fuzzes every layer (each with its own seed)."""
    if jobs > len(layers):
        return [list(layers) for _ in range(jobs)]
    return [layers[i::jobs] for i in range(max(1, jobs))]


def merge(parts: list[dict]) -> dict:
    """Per layer over the processes: cases summed, the wall time the longest, the earliest
    finding (a later one of the same layer is written too and counted in `written`, but not
    reported first)."""
    out = {}
    for stats in parts:
        for layer, s in stats.items():
            m = out.setdefault(layer, LayerStats(layer))
            m.cases += s.cases
            m.audited += s.audited
            m.seconds = max(m.seconds, s.seconds)
            if s.finding and (m.finding is None or s.finding.found_s < m.finding.found_s):
                m.finding = s.finding
    return out


def written(parts: list[dict]) -> list:
    """Every process's findings, one per fixture file written (two processes that shrink to
    the same case write one file), in the order of the processes and layers."""
    out, seen = [], set()
    for stats in parts:
        for s in stats.values():
            if s.finding is not None and s.finding.path not in seen:
                seen.add(s.finding.path)
                out.append(s.finding)
    return out


def run(opts: FuzzOptions, jobs: int = 1) -> FuzzResult:
    layers = opts.layers or strategies.available()
    unknown = [n for n in layers if n not in strategies.available()]
    if unknown:
        raise ValueError(f"no fuzz strategy for layer(s) {', '.join(unknown)}; fuzzable: "
                         f"{', '.join(strategies.available())}")
    opts = replace(opts, layers=list(layers), out=Path(opts.out))
    t0 = time.time()
    end_wall = t0 + opts.seconds
    parts = split(list(layers), jobs)
    if len(parts) == 1:
        import threading
        s, isas, threads, ref = _job(opts, parts[0], t0, end_wall, True, threading.Event())
        results = [s]
    else:
        import concurrent.futures as cf
        import multiprocessing as mp
        ctx = mp.get_context("spawn")
        with ctx.Manager() as manager, \
                cf.ProcessPoolExecutor(len(parts), mp_context=ctx) as pool:
            stop = manager.Event()
            futures = [pool.submit(_job, replace(opts, seed=opts.seed + i) if len(parts) > len(layers)
                                   else opts, p, t0, end_wall, True, stop)
                       for i, p in enumerate(parts)]
            results, threads = [], ()
            for f in futures:
                s, isas, more, ref = f.result()
                results.append(s)
                threads += more
    stats = merge(results)
    ordered = {layer: stats[layer] for layer in layers}
    return FuzzResult(ordered, time.time() - t0, opts.seed, isas,
                      list(dict.fromkeys(threads)), ref, written(results))


def render(result: FuzzResult) -> str:
    """A line per layer (cases, time, cases per second: with several processes on a layer,
    its time is the longest of theirs, so the rate is the layer's on all of them; its earliest
    finding and how many more were written), then the verdict, which counts the findings
    written."""
    lines = []
    for s in result.stats.values():
        more = sum(f.layer == s.layer for f in result.written) - 1
        what = (f"FOUND after {s.finding.found_s:.1f} s -> {s.finding.path}"
                + (f" (+{more} more written)" if more > 0 else "") if s.finding else "no failure")
        lines.append(f"fuzz {s.layer:<7} {s.cases:>7} cases in {s.seconds:6.1f} s "
                     f"({s.rate:6.1f}/s): {what}")
    total = sum(s.cases for s in result.stats.values())
    audited = sum(s.audited for s in result.stats.values())
    n = len(result.written) or len(result.findings)
    golden = (f"golden bits from the reference port, {audited} cases also from the NumPy spec"
              if result.reference else "golden bits from the NumPy spec")
    verdict = (f"FAIL: {n} finding(s)" if n else "PASS: no failure") + (
        f" in {total} cases ({result.seconds:.1f} s; ISA {','.join(result.isas)}; "
        f"threads {','.join(map(str, result.threads))}; seed {result.seed}; {golden})")
    return "\n".join(lines + [verdict])
