"""The bench's tables."""
from __future__ import annotations

from typing import TYPE_CHECKING

from .fuzz import TARGET_PER_S, against_target
from .timing import DEFAULT_ROUNDS

if TYPE_CHECKING:
    from .measure import BenchResult


def render_paired(rows, name_a, name_b) -> str:
    lines = [f"paired training steps, warm blocks: A = {name_a}", f"{'':30s}B = {name_b}", "",
             f"{'isa':8s} {'threads':>7s} {'A ms':>8s} {'B ms':>8s} {'B - A ms':>9s} "
             f"{'(quartiles)':>17s} {'pairs':>6s}", "-" * 66]
    for r in rows:
        lines.append(f"{r['isa']:8s} {r['threads']:7d} {r['a_s'] * 1e3:8.2f} {r['b_s'] * 1e3:8.2f} "
                     f"{r['diff_s'] * 1e3:+9.3f} {r['diff_q1_s'] * 1e3:+8.3f}/{r['diff_q3_s'] * 1e3:+.3f} "
                     f"{r['pairs']:6d}")
    return "\n".join(lines)


def _layer_rates(cases, keys, cols, w) -> list[str]:
    """The entry points' GFLOP/s, and their share of the path's peak where it was measured"""
    out = ["", "the same entry points: GFLOP/s (share of the fma peak):"]
    out.append(f"{'':<12}" + "".join(f"{c:>{w + 6}}" for c in cols))
    for k in keys:
        row = f"{k:<12}"
        for c in cases:
            r = c.get("layers_gflops", {}).get(k)
            share = f"({r / c['peak_gflops']:4.0%})" if r and c.get("peak_gflops") else " " * 6
            row += f"{r:{w}.1f}{share}" if r is not None else f"{'-':>{w}}{'':6}"
        out.append(row)
    return out


def render(res: BenchResult) -> str:
    m = res.meta
    lines = [f"crnn-v0 training step: batch {m['batch']} x 32x{m['width']} "
             f"(forward, CTC, backward, batch sum, clip, AdamW); weights {m['weights']}",
             f"median of {m['reps']} after {m['warmup']} warm-up, in {m.get('rounds', DEFAULT_ROUNDS)} rounds of one block "
             f"a side; {m['step_flops'] / 1e6:.0f} MFLOP "
             f"per step (2 per multiply-add of every dot); cpu {m['cpu']}, {m['nproc']} cores"]
    if m["torch"]:
        lines += [f"PyTorch {m['torch']} fp32 in the same process, same threads",
                  "rounds: the lowest and highest of the rounds' ratios (a round: a block of ours, "
                  "then one of PyTorch's, seconds apart)"]
    else:
        lines.append(f"{m.get('torch_note') or 'PyTorch not run'}: ours alone, no ratios")
    if res.peak:
        lines += ["peak: fused multiply-adds alone in the path's registers on as many threads "
                  "(2 flops a lane);",
                  "  'of peak' counts every term of every dot, those a kernel leaves out (exact "
                  "zeros) too, so it can pass 100 %"]
    else:
        lines.append("peak: not measured (no C compiler for the helper)")
    lines.append("")
    hdr = (f"{'isa':<8}{'threads':>8}{'ours ms':>10}{'torch ms':>10}{'ratio':>8}{'rounds':>12}"
           f"{'GFLOP/s':>9}{'peak':>8}{'of peak':>9}")
    lines += [hdr, "-" * len(hdr)]
    for c in res.cases:
        tt = f"{c['torch_s'] * 1e3:10.2f}" if c["torch_s"] else f"{'-':>10}"
        ra = f"{c['ratio']:8.2f}" if c["ratio"] else f"{'-':>8}"
        rr = c.get("ratio_rounds")
        ra += f"{min(rr):7.2f}-{max(rr):.2f}" if rr else f"{'-':>12}"
        pk = (f"{c['peak_gflops']:8.1f}{c['of_peak']:8.0%} " if c.get("peak_gflops")
              else f"{'-':>8}{'-':>9}")
        lines.append(f"{c['isa']:<8}{c['threads']:>8}{c['ours_s'] * 1e3:10.2f}{tt}{ra}"
                     f"{c['gflops']:9.1f}{pk}")
    if res.cases and "layers_s" in res.cases[0]:
        lines += ["", "layer entry points on one line (ms, median):"]
        keys = list(res.cases[0]["layers_s"])
        cols = [f"{c['isa']}x{c['threads']}" for c in res.cases]
        w = max(9, max(len(c) for c in cols) + 1)
        lines.append(f"{'':<12}" + "".join(f"{c:>{w}}" for c in cols))
        for k in keys:
            lines.append(f"{k:<12}" + "".join(f"{c['layers_s'][k] * 1e3:{w}.3f}" for c in res.cases))
        lines.append(f"{'sum':<12}" + "".join(f"{sum(c['layers_s'].values()) * 1e3:{w}.3f}"
                                               for c in res.cases))
        lines += _layer_rates(res.cases, keys, cols, w)
    if res.memory:
        mm = res.memory
        f = lambda d, k: "?" if not d else f"{d[k] / 2 ** 20:.1f} MiB"
        lines += ["", f"memory of a step ({mm['isa']}; {mm['method']}):"]
        for t, d in mm["by_threads"].items():
            lines.append(f"  {t} thread{'s' if t != '1' else ''}: peak {f(d['line'], 'peak')} for one line, "
                         f"{f(d['batch'], 'peak')} for the batch of {mm['batch']} "
                         f"(kept for the next step: {f(d['batch'], 'kept')})")
    if res.gate:
        lines.append(f"gate wall time (crnn-conformance gate -q, every layer x ISA x threads 1,2,3,7): "
                     f"{res.gate['wall_s']:.1f} s (exit {res.gate['exit_code']})")
    if res.fuzz:
        fz = res.fuzz
        threads = sorted({t for v in fz["layers"].values() for t in v.get("threads", (1, 2, 3, 7))})
        lines += ["", f"fuzz throughput (crnn-conformance fuzz, {fz['jobs']} processes, "
                      f"{fz['seconds_per_layer']:g} s a layer, every ISA x threads "
                      f"{','.join(map(str, threads))} per case, a process its own extra count):"]
        lines.append("  " + "  ".join(f"{k} {v['per_s']:.0f}/s" + (" (FOUND)" if v["found"] else "")
                                      for k, v in fz["layers"].items()))
        met, missed = against_target(fz["layers"])
        lines.append(f"  target {TARGET_PER_S}/s a layer: met by {', '.join(met) or 'none'}; "
                     f"missed by {', '.join(missed) or 'none'}")
    return "\n".join(lines)
