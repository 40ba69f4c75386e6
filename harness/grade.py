"""`grade`: a case bundle's results, made by a runner on another machine, judged by the gate's
own per-case path (case_checks._run_case), so the records are the gate's: the same tiers,
allowances, worst elements and reports (docs/case-bundle.md).

A run's outputs are rebuilt in this process: the layer module's `run(lib, case)` runs on the
fixture's case in a guard.Arena, as in the gate's worker, with a _Shim for `lib` whose entry
points, called in the bundle's order, check that the call is the bundle's call k (same
entry point, integers, doubles, buffers and offsets), copy the bytes the runner recorded
after call k into the buffers given and return its rc. A run that ended early (a crash, a
hang, a missing symbol, a failed check) raises at the call where it ended what the gate's
worker raises there. ResultsSource answers case_checks._run_case as an Executor does.

Runs are named by machine and ISA ("x86_64:avx2"): identity compares every run of every
results file with the base run (the first file's first ISA at 1 thread, or at its fewest
threads when the file has no 1-thread run), bit for bit.
"""
from __future__ import annotations

import ctypes as C
import fnmatch
import struct
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from functools import partial
from pathlib import Path

import numpy as np

from ..ctypes_kernels import abi
from ..generators.h5io import read_fixture
from . import bundle as B
from .sandbox import guard
from . import layers as L
from . import case_checks
from .sandbox.executor import PortCrash
from .provenance import fixture_info, sha256, tool_info
from .records import GateOptions, GateResult, _shell_quote, fixture_args


@dataclass
class GradeOptions(GateOptions):
    bundle: str = ""
    results: tuple = ()
    isa_filter: list | None = None       # --isa: labels ("aarch64:scalar") or ISA names
    thread_filter: list | None = None    # --threads

    def repro(self, layer, case, tier, isa, threads, runs=None) -> str:
        """The __REPRO: command: the same check graded alone (rerunning the port's run is the
        runner's, on its machine: docs/case-bundle.md); `runs`, an identity check's base and
        own run: both graded (--isa and --threads name each once)."""
        if runs:
            isa = ",".join(dict.fromkeys(str(i) for i, _ in runs))
            threads = ",".join(dict.fromkeys(str(t) for _, t in runs))
        cmd = ["crnn-conformance", "grade", str(self.bundle), *map(str, self.results)]
        cmd += fixture_args(self)
        cmd += ["--layers", layer, "--case", case, "--tiers", tier, "--isa", isa,
                "--threads", str(threads)]
        return " ".join(map(_shell_quote, cmd))


def _flagged(flags: int) -> str:
    """What a call's flag bits 0 to 2 say, for a runner that gave no message."""
    said = [what for bit, what in ((B.CANARY, "a canary zone next to a buffer was overwritten "
                                              "(a write out of bounds)"),
                                   (B.CONST_INPUT, "a const input was modified"),
                                   (B.FP_ENV, "the floating-point environment changed"))
            if flags & bit]
    return "the runner flagged the call: " + "; ".join(said)


class _Diverged(abi.PortCallError):
    """The layer module asked for another call than the bundle's next one."""


class _Shim:
    """The port as the layer module sees it while one recorded run is rebuilt."""

    def __init__(self, arena, bc: B.BundleCase, run: B.Run):
        self._arena, self._bc, self._run, self._k = arena, bc, run, 0
        self._calls = bc.calls

    def __getattr__(self, name):
        if name not in abi.SIGNATURES:
            raise AttributeError(name)
        fn = partial(self._call, name)
        setattr(self, name, fn)
        return fn

    def _call(self, name, *args):
        k, run = self._k, self._run
        self._k += 1
        if k >= len(self._calls) or self._calls[k].name != name:
            want = self._calls[k].name if k < len(self._calls) else "no call"
            raise self._diverged(name, k, f"the bundle has {want} there")
        self._match(self._calls[k], k, args)
        if k >= len(run.calls):
            self._ended(name)
        rc, flags, written = run.calls[k]
        touched = self._arena.before(name, args)
        for b, offset, data in written:
            C.memmove(self._arena.buffers[b].lo + offset, data, len(data))
        if flags & (B.CANARY | B.CONST_INPUT | B.FP_ENV):   # whatever the run's status
            said = run.msg if run.status == B.CHECK and run.msg else _flagged(flags)
            if flags & B.FP_ENV:
                raise abi.PortError(f"the floating-point environment changed in {name} "
                                    f"({self._where()}): {said}")
            raise guard.Violation(f"{name}: {said} (the runner's check after the call)")
        self._arena.after(name, touched, rc)
        return rc

    def _where(self) -> str:
        return f"case {self._bc.name}, {self._run.isa} x {self._run.threads} thread(s)"

    def _diverged(self, name, k, why) -> _Diverged:
        return _Diverged(f"{name}, call {k} of the run, is not the bundle's call {k} ({why}): "
                         "the port's earlier outputs changed what the layer calls next, which a "
                         "bundle cannot follow (gate the port in-process to see it)")

    def _match(self, call: B.Call, k: int, args) -> None:
        if len(args) != len(call.args):
            raise self._diverged(call.name, k, "another number of arguments")
        for i, ((t, v), a) in enumerate(zip(call.args, args)):
            if t == B.A_PTR:
                b = self._arena.find(a) if isinstance(a, int) and a else None
                want = self._bc.buffers[v[0]]
                if (b is None or b.index != v[0] or a - b.lo != v[1] * want.dtype.itemsize
                        or b.nbytes != want.nbytes or b.dtype != want.dtype):
                    raise self._diverged(call.name, k, f"argument {i} is another buffer")
            elif t == B.A_NULL:
                if a:
                    raise self._diverged(call.name, k, f"argument {i} is not NULL")
            elif t == B.A_F64:
                if struct.pack("<d", float(a)) != struct.pack("<d", v):
                    raise self._diverged(call.name, k, f"argument {i} is {a!r}, not {v!r}")
            elif int(a) != v:
                raise self._diverged(call.name, k, f"argument {i} is {a}, not {v}")

    def _ended(self, name):
        """The run ended before call `name` returned: what the gate's worker reports there."""
        run = self._run
        if not run.complete or run.status == B.CRASH:
            raise PortCrash(f"the port crashed in {name}: {run.msg}")
        if run.status == B.TIMEOUT:
            raise PortCrash(f"hang: no answer in {name} within the runner's timeout "
                            f"({run.msg}); run stopped")
        if run.status == B.MISSING:
            also = f" ({run.msg})" if run.msg and run.msg != name else ""
            raise abi.PortCallError(f"{name} is not exported by the port{also}: "
                                    "not implemented")
        raise abi.PortCallError(f"{name}: the run ended before this call "
                                f"({B.STATUSES[run.status]}: {run.msg})")

    def finish(self) -> None:
        """After the layer module returned: the run's end as the gate's worker checks it."""
        run = self._run
        if self._k != len(self._calls):
            raise self._diverged("the run's end", self._k,
                                 f"the bundle has {len(self._calls)} calls")
        if not run.complete or run.status in (B.CRASH, B.TIMEOUT):
            raise PortCrash(f"the port crashed after its last call returned: {run.msg}")
        if run.status == B.CHECK:
            raise guard.Violation(f"after the run: {run.msg} (the runner's check)")


def rebuild(module, case, bc: B.BundleCase, run: B.Run) -> dict:
    """The outputs the layer module returns for `run`; raises what the gate's worker would
    (abi.PortCallError with .partial, PortCrash, abi.PortError)."""
    arena = guard.Arena()
    shim = _Shim(arena, bc, run)
    guard.activate(arena)
    try:
        out = module.run(shim, guard.PrivateCase(case, arena))
        shim.finish()
        return {k: np.array(v, copy=True) for k, v in out.items()}
    except abi.PortCallError as e:
        wanted = {t for ts in case.expected.values() for t in ts} if case.expected else None
        e.partial = arena.partial(wanted)
        raise
    finally:
        guard.activate(None)
        arena.release()


class ResultsSource:
    """Answers case_checks._run_case as an Executor does, from the recorded runs."""

    def __init__(self, bundle: B.Bundle, runs: dict, modules: dict):
        self.bundle, self.runs, self.modules = bundle, runs, modules
        self.last_output, self.last_seconds = "", 0.0

    def run(self, layer, fixture_path, case_name, isa, threads) -> dict:
        key = (layer, Path(fixture_path).stem, case_name)
        bc, case = self.modules[key]
        t0 = time.perf_counter()
        run = self.runs.get((bc.index, isa, threads))
        try:
            if run is None:
                raise abi.PortCallError(f"the results hold no run of {bc.name} at {isa} x "
                                        f"{threads} thread(s)")
            return rebuild(L.module(layer), case, bc, run)
        finally:
            self.last_seconds = time.perf_counter() - t0


def machine_labels(results: list) -> list[str]:
    """Each results file's machine: its platform's arch, with #n (its place) when two files
    name the same arch."""
    arches = [str(r.platform.get("arch") or "unknown").replace(":", "_").replace(" ", "_")
              for r in results]
    return [a if arches.count(a) == 1 else f"{a}#{i + 1}" for i, a in enumerate(arches)]


def _wanted_isa(label, isa, opts) -> bool:
    return opts.isa_filter is None or label in opts.isa_filter or isa in opts.isa_filter


def collect_runs(results: list, opts) -> tuple[dict, list, list, tuple | None]:
    """-> ({(case, "machine:isa", threads): Run}, the labels in order, the thread counts in
    order, the base run (label, threads)). Each file holds one record of a case, ISA and
    threads (read_results refuses two complete ones; a later record replaces an earlier one
    only when that one was cut short), and each file is a machine of its own label.

    The base run is the first label's run at 1 thread, or at its fewest threads when the
    results have no 1-thread run. As in the gate, --threads selects the identity tier's runs
    and never drops the base run the tiers are judged on."""
    runs, isas, every = {}, [], []
    for label, res in zip(machine_labels(results), results):
        for run in res.runs:
            name = f"{label}:{run.isa}"
            every += [] if name in every else [name]
            if _wanted_isa(name, run.isa, opts):
                runs[(run.case, name, run.threads)] = run
                if name not in isas:
                    isas.append(name)
    if opts.isa_filter is not None:
        named = {n for label in every for n in (label, label.split(":")[-1])}
        lack = [i for i in opts.isa_filter if i not in named]
        if lack:
            raise ValueError(f"no checks selected: the results hold no run of "
                             f"{', '.join(lack)} (they have {', '.join(every) or 'none'})")
    if not isas:
        return {}, [], [], None
    base = (isas[0], min(t for (_, i, t) in runs if i == isas[0]))
    if opts.thread_filter is not None:
        have = sorted({k[2] for k in runs})
        lack = [t for t in opts.thread_filter if t not in have]
        if lack:
            raise ValueError(f"no checks selected: the results hold no run at "
                             f"{', '.join(map(str, lack))} thread(s) (they have "
                             f"{', '.join(map(str, have))})")
        runs = {k: r for k, r in runs.items()
                if k[2] in opts.thread_filter or k[1:] == base}
        isas = [i for i in isas if any(k[1] == i for k in runs)]
    threads = list(dict.fromkeys(k[2] for k in runs))
    return runs, isas, threads, base


def _fixture(opts, bundle, module, stem, cache) -> object:
    """The fixture the bundle's case came from, checked against the digest it was exported
    with."""
    if stem not in cache:
        path = Path(opts.fixtures) / f"{stem}.h5"
        want = (bundle.meta.get("fixtures") or {}).get(f"{stem}.h5")
        got = sha256(path)
        if got is None:
            raise B.BundleError(f"fixture {path} not found (the bundle's cases come from it; "
                                "--fixtures names the directory it was exported from)")
        if want and got != want:
            cmd = (bundle.meta.get("tool") or {}).get("command")
            raise B.BundleError(f"fixture {path} is not the one the bundle was exported from "
                                f"(sha256 {got[:12]}..., the bundle's {want[:12]}...)"
                                + (f"; the bundle was exported by: {cmd}" if cmd else ""))
        cache[stem] = L.check_fixture(module, read_fixture(path))
    return cache[stem]


def grade(opts: GradeOptions, progress=None) -> GateResult:
    """Raises BundleError / FixtureError / ValueError / abi.PortError (exit 2)."""
    t0 = time.perf_counter()
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    bundle = B.read_bundle(opts.bundle)
    results = [B.read_results(p, bundle) for p in opts.results]
    empty = [str(r.path) for r in results if not r.runs]
    if empty:
        raise ValueError(f"results file(s) {', '.join(empty)} hold no run at all (the runner "
                         "stopped before its first run?): nothing of that machine to judge")
    runs, isas, threads, base = collect_runs(results, opts)
    if not isas:
        raise ValueError("no checks selected: the results hold no run"
                         + (" of the ISA / thread counts asked for" if opts.isa_filter
                            or opts.thread_filter else ""))
    present = list(dict.fromkeys(c.layer for c in bundle.cases))
    layer_names = present if opts.layers is None else list(opts.layers)
    absent = [n for n in layer_names if n not in present]
    if absent:
        raise ValueError(f"no checks selected: the bundle has no case of {', '.join(absent)}")
    opts.threads = tuple(threads)
    not_implemented = _not_implemented(bundle, runs, layer_names) if opts.available else {}
    jobs, fixtures, modules = [], {}, {}
    for bc in bundle.cases:
        if bc.layer not in layer_names or (opts.case and not fnmatch.fnmatch(bc.case, opts.case)):
            continue
        m = L.module(bc.layer)
        fx = _fixture(opts, bundle, m, bc.fixture, fixtures)
        case = next((c for c in fx.cases if c.name == bc.case), None)
        if case is None:
            raise B.BundleError(f"fixture {fx.path} has no case {bc.case} (bundle case {bc.index})")
        if "identity" in opts.tiers or set(opts.tiers) & set(case.expected):
            jobs.append((m, fx.path, case, bc))
            modules[(bc.layer, bc.fixture, bc.case)] = (bc, case)
    if not jobs:
        raise ValueError("no checks selected: no case of the bundle matches the selection")
    source = ResultsSource(bundle, runs, modules)
    try:
        _prefetch(opts, jobs, not_implemented)
        records = _records(opts, jobs, source, runs, isas, threads, base, not_implemented,
                           progress)
    finally:
        from . import allowance
        allowance.shutdown()
    meta = _meta(opts, bundle, results, isas, layer_names, fixtures, not_implemented, started,
                 time.perf_counter() - t0)
    return GateResult(records, meta)


def _prefetch(opts, jobs, not_implemented) -> None:
    """As the gate: the error model's allowances the cache lacks start computing now."""
    if not any(t in opts.tiers for t in ("float64", "pytorch")):
        return
    from . import allowance
    allowance.prefetch([(m.LAYER, path, case) for m, path, case, _ in jobs
                        if m.LAYER not in not_implemented
                        and any(t in case.expected for t in ("float64", "pytorch"))])


def _records(opts, jobs, source, runs, isas, threads, base, not_implemented, progress) -> list:
    """Every job's records through the gate's per-case path, `base` (label, threads) the
    base run."""
    order = {name: i for i, name in enumerate(isas)}
    # every case on every configuration the results hold: a case a file lacks a run of is
    # that run's failure ("the results hold no run of ..."), as a case the gate could not run
    others = sorted({(i, t) for (_, i, t) in runs} - {base},
                    key=lambda r: (order[r[0]], threads.index(r[1])))
    records, skip = [], set(not_implemented)   # (as the gate: a layer found unsupported
    for n, (m, path, case, bc) in enumerate(jobs):   # by one case still runs its others)
        if progress:
            progress(n, len(jobs), f"{m.LAYER} {case.name}")
        if m.LAYER in skip:
            continue
        try:
            recs = case_checks._run_case(opts, source, m, path, case,
                                         [base] + (others if "identity" in opts.tiers else []),
                                         Path(path).stem)
        except case_checks.NotImplementedByPort as e:
            not_implemented.setdefault(m.LAYER, str(e))
            continue
        records += recs
    if progress:
        progress(len(jobs), len(jobs), "done")
    return records


def _not_implemented(bundle, runs, layer_names) -> dict:
    """--layers available: a layer none of whose cases has a run, or with a run whose entry
    point the port lacks."""
    out = {}
    for layer in layer_names:
        idx = {c.index for c in bundle.cases if c.layer == layer}
        mine = [r for (c, _, _), r in runs.items() if c in idx]
        missing = sorted({r.msg for r in mine if r.complete and r.status == B.MISSING})
        if missing:
            out[layer] = f"missing symbol(s) {', '.join(missing)}"
        elif not mine:
            out[layer] = "the results hold no run of its cases"
    return out


def _sha(v):
    return v if isinstance(v, str) and len(v) == 64 and all(c in "0123456789abcdef" for c in v) \
        else None


def _meta(opts, bundle, results, isas, layer_names, fixtures, not_implemented, started,
          wall) -> dict:
    machines = []
    for label, res in zip(machine_labels(results), results):
        p = res.platform
        machines.append({"machine": label, "results": str(res.path), "runs": len(res.runs),
                         **{k: p.get(k) for k in ("arch", "os", "cpu", "runner_version",
                                                  "compiler", "port")},
                         "port_sha256": _sha(p.get("port_sha256")),
                         "not_kept": list(p.get("not_kept") or [])})
    first = machines[0]
    return {
        "port": str(first.get("port") or "?"), "port_sha256": first["port_sha256"],
        "bundled": False, "abi_version": bundle.meta.get("abi_version"),
        "harness_abi_version": abi.ABI_VERSION, "build": None, "fpenv": None,
        "isas": isas, "isas_available": isas, "threads": list(opts.threads),
        "tiers": list(opts.tiers), "workers": 1, "layers": layer_names, "case": opts.case,
        "timeout_s": None, "started": started, "wall_s": round(wall, 3),
        "tool": tool_info(), "machines": machines,
        "bundle": {"path": str(bundle.path), "digest": bundle.digest,
                   "cases": len(bundle.cases), "refused": list(bundle.meta.get("refused") or [])},
        "fixtures": {f.path.name: fixture_info(f) for f in fixtures.values()},
        "available": opts.available, "not_implemented": dict(not_implemented),
    }
