"""One case's checks: the base run against each tier the case holds and every other ISA x
thread count against the base run bit for bit, as records (the gate's runner schedules the
cases; the fuzzer and the grader call check_case / _run_case directly)."""
from __future__ import annotations

import time
from dataclasses import replace

import numpy as np

from ..ctypes_kernels import abi
from .compare import Comparison, compare
from .records import Record, failure, of_run, record, repro_command
from .sandbox.executor import PortCrash
from .tolerances import elementwise, lookup

def tier_tolerance(layer: str, case, tier: str, tensor: str, shape=None, arrays=None):
    """The allowance of one tensor in a tolerance tier: the error model's per-element Atol on
    the case's inputs (harness/allowance/) joined with the table's entry; None for the bit
    tiers. `shape`: the reference's, when it holds the model's elements in another shape
    (the Python API's 0-d loss against the fixtures' [1]); `arrays`: the case's
    _model_allowances(), when the caller has them."""
    if tier not in ("float64", "pytorch"):
        return None
    arrays = _model_allowances(layer, case) if arrays is None else arrays
    model = arrays.get(tensor)
    if model is not None and shape is not None and model.size == int(np.prod(shape)):
        model = model.reshape(shape)
    return elementwise(lookup(layer, tensor), model, arrays)


def _model_allowances(layer: str, case) -> dict:
    """{tensor: the error model's per-element Atol} of a case ({} for a layer without one)."""
    from . import allowance
    return allowance.allowances(layer, case) if layer in allowance.LAYERS else {}


def _tier_records(opts, module, case, tier, ours, isa, threads=1, fixture="") -> list[Record]:
    """The base run's records in one tier: each tensor the case holds a reference for,
    compared under its allowance (tolerance tiers) or bit for bit (`fixture`: record()'s)."""
    out = []
    ref = case.expected[tier]
    # once per case and tier: finding them keys the cache with a digest of every input
    arrays = _model_allowances(module.LAYER, case) if tier in ("float64", "pytorch") else None
    compare_tensor = _tensor_comparer(module, case, tier, ours, ref, arrays)
    for tensor, r in ref.items():
        if tensor not in ours:
            continue
        tol = tier_tolerance(module.LAYER, case, tier, tensor, np.shape(r), arrays)
        floor = float(case.floor.get(tensor, 0.0)) if tier == "pytorch" else None
        c = _worst_context(module, case, tensor, np.shape(r), compare_tensor(tensor, tol, floor))
        out.append(record(opts, module.LAYER, case.name, tensor, tier, isa, threads, c, tol, floor,
                          fixture=fixture))
    return out


def _tensor_comparer(module, case, tier, ours, ref, arrays):
    """fn(tensor, tol, floor) -> the Comparison of one tensor of this case and tier: the layer
    module's compare_tier when it has one, given what it judges once for the whole case and
    tier (tier_verdict: the step's pool-flip verdict, which every gradient may draw on), else
    compare() with the layer's heat map columns."""
    hook = getattr(module, "compare_tier", None)
    if hook is None:
        return lambda tensor, tol, floor: compare(
            ours[tensor], ref[tensor], tier, tol.atol if tol else 0.0, tol.rtol if tol else 0.0,
            floor or 0.0, heatmap_cols=_heatmap_cols(module, case, tensor, ref[tensor]))
    judge_case = getattr(module, "tier_verdict", None)
    if judge_case is None:
        return lambda tensor, tol, floor: hook(case, tier, tensor, ours, ref, tol, floor)
    verdict = judge_case(case, tier, ours, ref, arrays)
    return lambda tensor, tol, floor: hook(case, tier, tensor, ours, ref, tol, floor, verdict)


class NotImplementedByPort(Exception):
    """Under --layers available: the base run of a case returned CRNN_E_UNSUPPORTED."""


def _attempt(ex, layer, fixture_path, case, isa, threads):
    """One run -> (outputs, error or None, the port's output text, its seconds); on an error,
    the outputs are those of the calls that completed (e.g. the forward's when the backward
    failed)."""
    try:
        outputs, error = ex.run(layer, fixture_path, case, isa, threads), None
    except (PortCrash, abi.PortCallError) as e:
        outputs, error = getattr(e, "partial", {}), e
    return outputs, error, ex.last_output, ex.last_seconds


def _run_case(opts, ex, m, fixture_path, case, runs, fixture: str = "") -> list[Record]:
    """The records of one case: its base run against each tier, then its identity checks;
    `fixture`: the records' fixture name (the file's stem; "" for the fuzzer's cases)."""
    base_run = runs[0]
    base, error, text, seconds = _attempt(ex, m.LAYER, fixture_path, case.name, *base_run)
    if error is not None and opts.available and getattr(error, "code", None) == abi.E_UNSUPPORTED:
        raise NotImplementedByPort(str(error)) from None
    # The identity runs first: meanwhile the error model may still be computing the
    # allowances of the tolerance tiers (harness/allowance.prefetch). The records keep the
    # tiers' order.
    identity = [] if error is not None else _identity_records(opts, ex, m, fixture_path, case,
                                                              runs, base, fixture)
    t0 = time.perf_counter()
    records = []
    for tier in case.expected:
        if tier in opts.tiers:
            records += _tier_records(opts, m, case, tier, base, *base_run, fixture=fixture)
    if error is not None:   # no (complete) base run: every tier of the case fails
        records += [failure(opts, m.LAYER, case.name, t, *base_run, str(error), fixture=fixture)
                    for t in case.expected if t in opts.tiers]
        if "identity" in opts.tiers and len(runs) > 1:
            records.append(failure(opts, m.LAYER, case.name, "identity", *base_run, str(error),
                                   repro=_every_run_repro(opts, m.LAYER, case.name, runs),
                                   fixture=fixture))
    return of_run(records, seconds + time.perf_counter() - t0, text) + identity


def _every_run_repro(opts, layer, case, runs) -> str:
    """The repro of an identity check that had no base run: it reruns every run of the case
    (`--runs` as given, else each ISA of `runs` over the gate's thread counts)."""
    if opts.runs:
        return repro_command(opts, layer, case, "identity", *runs[0], runs=runs)
    return repro_command(opts, layer, case, "identity", ",".join(dict.fromkeys(i for i, _ in runs)),
                         ",".join(map(str, opts.threads)))


def _identity_records(opts, ex, m, fixture_path, case, runs, base, fixture="") -> list[Record]:
    """Every run after the first compared bit for bit with the first (the base); a failing
    record names both runs and its repro reruns exactly those two (`--runs BASE,RUN`)."""
    records = []
    if "identity" not in opts.tiers:
        return records
    for isa, threads in runs[1:]:
        pair = [runs[0], (isa, threads)]
        t0 = time.perf_counter()
        other, error, text, seconds = _attempt(ex, m.LAYER, fixture_path, case.name, isa, threads)
        run = []
        for tensor, a in base.items():
            if tensor not in other:
                continue
            c = compare(other[tensor], a, "identity", heatmap_cols=_heatmap_cols(m, case, tensor, a))
            if not c.passed:
                c = replace(c, note=(c.note + "; " if c.note else "")
                            + f"{run_name(isa, threads)} differs from {run_name(*runs[0])}"
                            + _made_after(ex, m.LAYER, fixture_path, case.name))
            c = _worst_context(m, case, tensor, np.shape(a), c)
            run.append(record(opts, m.LAYER, case.name, tensor, "identity", isa, threads, c,
                              runs=pair, fixture=fixture))
        if error is not None:
            run.append(failure(opts, m.LAYER, case.name, "identity", isa, threads, str(error),
                               runs=pair, fixture=fixture))
        records += of_run(run, seconds + time.perf_counter() - t0, text)
    return records


def _made_after(ex, layer, fixture_path, case_name) -> str:
    """Which case the worker ran just before this one (runner.rotated: the first ISA's runs
    meet what that case left in the port's memory), for a repro that passes alone."""
    before = getattr(ex, "after", {}).get((layer, str(fixture_path), case_name))
    if before is None:
        return ""
    return (f" (the worker ran {before[0]}/{before[2]} just before this case; a difference "
            "its repro alone does not show is state the port keeps across calls)")


def run_name(isa: str, threads: int) -> str:
    """`avx2 x 7 threads`, `scalar x 1 thread`: one ISA x threads run in words."""
    return f"{isa} x {threads} thread{'' if threads == 1 else 's'}"


def run_list(opts: GateOptions, isas) -> list[tuple]:
    """The (isa, threads) runs of a case, the base run first: `opts.runs` as given (gate
    --runs), else the first ISA x 1 thread then every other ISA x thread count of `isas` x
    opts.threads; the base run alone when the identity tier is not asked for."""
    runs = ([tuple(r) for r in opts.runs] if opts.runs else
            [(isas[0], 1)] + [(i, t) for i in isas for t in opts.threads if (i, t) != (isas[0], 1)])
    return runs if "identity" in opts.tiers else runs[:1]


def _worst_context(module, case, tensor, shape, c: Comparison) -> Comparison:
    """c with what the layer module knows of its worst element added to c.worst (the module's
    worst_context(case, tensor, flat index), e.g. an element-wise case's input, a packed
    case's sub-case): the record names the element in the case's own terms."""
    fn = getattr(module, "worst_context", None)
    index = c.worst.get("index") if c.worst else None
    if fn is None or index is None or len(index) != len(shape) or not shape:
        return c
    return replace(c, worst={**c.worst, **fn(case, tensor, int(np.ravel_multi_index(index, shape)))})


def check_case(opts: GateOptions, executor, module, fixture_path, case, isas) -> list[Record]:
    """The gate's records of one case (every tier it holds, identity over isas x threads):
    what run_gate does per case, for a caller with its own cases (harness/fuzz)."""
    return _run_case(opts, executor, module, fixture_path, case, run_list(opts, isas))


def _heatmap_cols(module, case, tensor, ref):
    """A layer module may define heatmap_columns(case, tensor, shape) -> column group starts
    (e.g. one group per conv tap) so its heat maps follow its layout; else compare's default."""
    fn = getattr(module, "heatmap_columns", None)
    return fn(case, tensor, getattr(ref, "shape", ())) if fn else None
