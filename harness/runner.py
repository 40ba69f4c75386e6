"""The gate: runs a port on the fixtures, layer by layer, and yields one record per tensor.

For every case of every fixture of a layer:
  - the base run (the first ISA asked for, 1 thread) is compared with each tier the fixture
    holds (exact, float64, pytorch);
  - every other ISA x thread count is compared bit for bit with the base run (identity).
"""
from __future__ import annotations

import fnmatch
import time
from multiprocessing.connection import wait
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path

from ..ctypes_kernels import abi
from ..generators.h5io import read_fixture
from . import contract
from . import layers as L
from . import pyport
from .discovery import fixture_paths as _fixture_paths
from .discovery import layer_paths as _layer_paths
from .case_checks import NotImplementedByPort, _run_case, run_list
from .sandbox.executor import Executor
from .provenance import (build_info, cpu_info, fixture_info, host_info,
                         sha256, tool_info)
from .records import (FIXTURES_DIR, THREADS, TIERS, GateOptions,
                      GateResult, Record, failure, record, repro_command)

__all__ = ["FIXTURES_DIR", "THREADS", "TIERS", "GateOptions", "GateResult", "GateSession", "Job",
           "Record", "cpu_info", "host_info", "repro_command", "run_gate", "select_isas",
           "tool_info"]


DEPTH = 2      # batches a worker has waiting at most: the one it runs and the next
WINDOW = 8     # cases per worker that may be sent before their turn (their answers kept)
FAR = 64       # ... while the case whose turn it is waits only for its SETTLE check
SETTLE = 0.1   # seconds after a case's last run that its buffers are checked again (a write
               # after return: docs/port-abi.md, "What the gate guarantees")


@dataclass
class Job:
    """One case of one layer: the unit the worker runs (and the pytest plugin caches)."""
    module: object
    fixture: Path
    case: object
    rank: int = 0       # the case's place in its fixture (the order of its runs: rotated())

    @property
    def layer(self) -> str:
        return self.module.LAYER


class GateSession:
    """A gate run's set-up and its per-case step, shared by run_gate and the pytest plugin.

        s = GateSession(opts)       # reads the fixtures, builds the bundled port if needed
        with s:                     # starts the worker (loads and checks the port)
            for job in s.jobs:
                records += s.run_case(job)
        meta = s.meta()

    Raises abi.PortError / FixtureError / ValueError when the gate cannot run (exit 2).
    """

    def __init__(self, opts: GateOptions):
        self.opts = opts
        self.t0 = time.perf_counter()
        self.started = datetime.now(timezone.utc).isoformat(timespec="seconds")
        self.layer_names = L.available() if opts.layers is None else opts.layers
        _check_selection(opts)
        unknown = [n for n in self.layer_names if n not in L.LAYERS]
        if unknown:
            raise ValueError(f"unknown layer(s) {unknown}; known: {', '.join(L.LAYERS)}")
        missing = [n for n in self.layer_names if n not in L.available()]
        if missing:
            raise ValueError(f"layer(s) {missing} have no harness module in this version")
        paths = _layer_paths(opts, [L.module(n) for n in self.layer_names])
        # layers not named whose fixture directory holds no file of theirs: not run, listed
        self.no_fixture = [n for n in self.layer_names if not paths[n]]
        self.layer_names = [n for n in self.layer_names if paths[n]]
        self.modules = [L.module(n) for n in self.layer_names]
        self.fixtures = {m.LAYER: [L.check_fixture(m, read_fixture(p)) for p in paths[m.LAYER]]
                         for m in self.modules}
        self.port_path = (opts.port if pyport.is_python_port(opts.port) else Path(opts.port)
                          if opts.port else _bundled())
        self.jobs = [Job(m, fx.path, case, rank) for m in self.modules
                     for fx in self.fixtures[m.LAYER] for rank, case in enumerate(fx.cases)
                     if (opts.case is None or fnmatch.fnmatch(case.name, opts.case))
                     and ("identity" in opts.tiers or set(opts.tiers) & set(case.expected))]
        if not self.jobs and not contract.selected(opts):
            raise ValueError(f"no checks selected: no case of {', '.join(self.layer_names)}"
                             + (f" matches --case {opts.case!r}" if opts.case else "")
                             + f" with the tier(s) {', '.join(opts.tiers)}")
        self.executor = None                 # the first worker (its port info is the session's)
        self.executors: list = []
        self._worker_of: dict[tuple, int] = {}   # job key -> the worker it was sent to
        self.isas: list[str] = []
        # `--layers available`: layer -> why it is not implemented (missing symbols, or an
        # entry point that returned CRNN_E_UNSUPPORTED); meta["not_implemented"] holds it.
        self.not_implemented: dict[str, str] = {}
        # Pool flips used (the whole-model pytorch tier): None until a layer reports one;
        # then meta["flips"] lists them and the HTML report shows its flip section.
        self.flips: list[dict] | None = None
        # layer -> {"reason", "cases"}: the cases not run after two hangs in one entry point
        # (unless --keep-going); meta["not_run"] holds it
        self.not_run: dict[str, dict] = {}

    def open(self) -> "GateSession":
        # --layers available: the worker checks only the core symbols; the layers whose
        # symbols are missing are then "not implemented" and their cases are not run
        cases = {fx.path: {c.name: c for c in fx.cases} for fs in self.fixtures.values() for fx in fs}
        layers = [] if self.opts.available else self.layer_names
        self.executor = Executor(self.port_path, layers, self.opts.timeout, cases, SETTLE)
        self.executors = [self.executor]
        try:
            self.isas = select_isas(self.opts, self.executor.isas)
            self._declared_threads(self.executor.info.get("threads"))
            if self.opts.available:
                self._drop_missing(self.executor.info.get("symbols", []))
            if set(self.opts.tiers) == {"identity"} and len(self.runs()) < 2:
                isa, threads = self.runs()[0]
                raise ValueError("no checks selected: the identity tier compares ISA x thread "
                                 f"runs, and only {isa} x {threads} is selected")
            n = max(1, min(self.opts.workers, len(self.jobs)))
            self.executors += [Executor(self.port_path, layers, self.opts.timeout, cases,
                                        SETTLE) for _ in range(n - 1)]
        except BaseException:
            self.close(force=True)
            raise
        self._prefetch()   # (after _drop_missing: only the cases that will run)
        return self

    def _declared_threads(self, declared) -> None:
        """A Python port runs only the thread counts it declares (harness/pyport.py); without
        1 among them its base run is its first config at the fewest it runs."""
        if declared is None:
            return
        only = (f"no checks selected: port {self.port_path} runs thread count(s) "
                f"{', '.join(map(str, declared))} only")
        if self.opts.runs:
            bad = [f"{i}:{t}" for i, t in self.opts.runs if t not in declared]
            if bad:
                raise ValueError(f"{only} (--runs {','.join(bad)})")
            return
        keep = tuple(t for t in self.opts.threads if t in declared)
        if not keep:
            raise ValueError(f"{only} (--threads)")
        self.opts = replace(self.opts, threads=keep)
        if 1 not in keep:
            base = (self.isas[0], min(keep))
            self.opts = replace(self.opts, runs=[base] + [(i, t) for i in self.isas for t in keep
                                                          if (i, t) != base])

    def _drop_missing(self, symbols) -> None:
        for layer in self.layer_names:
            lacks = [s for s in abi.LAYER_SYMBOLS[layer] if s not in symbols]
            if lacks:
                self.not_implemented[layer] = f"missing symbol(s) {', '.join(lacks)}"
        if len(self.not_implemented) == len(self.layer_names):
            raise abi.PortError(abi.missing_message(self.port_path, symbols, self.layer_names,
                                                    hint=False) + "; it implements none of the "
                                "layers asked for")
        self.jobs = [j for j in self.jobs if j.layer not in self.not_implemented]

    def _prefetch(self) -> None:
        """Starts computing the error model's allowances the cache lacks (harness/allowance)."""
        if not any(t in self.opts.tiers for t in ("float64", "pytorch")):
            return
        from . import allowance
        allowance.prefetch([(j.layer, j.fixture, j.case) for j in self.jobs
                            if any(t in j.case.expected for t in ("float64", "pytorch"))])

    def close(self, force: bool = False) -> None:
        for ex in self.executors:
            ex.close(force)
        from . import allowance
        allowance.shutdown()

    def __enter__(self):
        return self.open()

    def __exit__(self, *exc):
        self.close(force=exc[0] is not None)   # a signal or an error: kill the worker at once

    def runs(self) -> list[tuple]:
        """The (isa, threads) runs of a case: the base run, then the identity tier's."""
        return run_list(self.opts, self.isas)

    def _submit(self, job: Job):
        """Sends a case's runs as one batch to the worker with the fewest waiting (once)."""
        key = _key(job)
        if key not in self._worker_of:
            self._worker_of[key] = min(range(len(self.executors)),
                                       key=lambda k: self.executors[k].running())
            self.executors[self._worker_of[key]].submit(*key, rotated(self.runs(), job.rank))
        return self.executors[self._worker_of[key]]

    def _dispatch(self, ahead) -> None:
        """Sends the next cases of `ahead` while some worker has fewer than DEPTH batches
        waiting: a worker that finished a long case takes the next ones (their answers wait
        in the gate until their turn)."""
        for job in ahead:
            if _key(job) in self._worker_of:
                continue
            if min(e.running() for e in self.executors) >= DEPTH:
                return
            # (a layer that hung once waits for its turn: a second hang stops it, _stopped)
            if job.layer not in self.not_implemented and not self._hung(job.layer):
                self._submit(job)

    def _await(self, ex, key, ahead) -> None:
        """Reads every worker's answers as they come until batch `key` of `ex` is complete
        (no worker waits on a full pipe while the gate waits for another), sending cases of
        `ahead` to the workers that become free: the first WINDOW a worker, and all of
        `ahead` while the batch waits only for the check after its last run (SETTLE seconds,
        which a window of short cases would leave the workers idle for)."""
        near = ahead[:WINDOW * len(self.executors)]
        self._dispatch(near)
        while ex.queued(key):
            busy = [e for e in self.executors if e.queued()]
            ends = [d for d in (e.deadline() for e in busy) if d is not None]
            wait([e.conn for e in busy], max(0.0, min(ends) - time.monotonic()) if ends else None)
            for e in busy:
                e.receive(0)       # one answer if it came; a hang if its run is overdue
            self._dispatch(near if ex.running(key) else ahead)

    def run_case(self, job: Job, ahead=()) -> list[Record]:
        """The records of one case, its runs sent to a worker as one batch. The cases in
        `ahead` (the next ones, in order) are sent as workers become free, before this
        one's records are made, so the workers run them meanwhile."""
        why = self._stopped(job.layer)
        ran = self._worker_of.get(_key(job))
        if why and (ran is None or not self.executors[ran].submitted(*_key(job))):
            return self._not_run(job, why)
        ex = self._submit(job)
        self._await(ex, _key(job), ahead)
        try:
            records = _run_case(self.opts, ex, job.module, job.fixture, job.case, self.runs(),
                                Path(job.fixture).stem)
        except NotImplementedByPort as e:
            self.not_implemented.setdefault(job.layer, str(e))
            return []
        finally:
            ex.drop(*_key(job))
        for r in records:   # a record that judged pool flips reports them (possibly none)
            if r.flips is not None:
                self.flips = (self.flips or []) + r.flips
        return records

    def _stopped(self, layer: str) -> str | None:
        """Why the rest of a layer's cases are not run: two of its cases hung in the same
        entry point (each cost --timeout; the next would too), or None (--keep-going: always
        None)."""
        for entry, names in self._hung(layer).items():
            if len(names) >= 2:
                return (f"not run: {entry} hung in {len(names)} cases ({', '.join(names)}); "
                        "--keep-going runs every case")
        return None

    def _hung(self, layer: str) -> dict[str, list]:
        """{entry point: the layer's cases that hung in it, in the cases' order} ({} under
        --keep-going)."""
        hung: dict[str, set] = {}
        for ex in self.executors if not self.opts.keep_going else ():
            for key, entry in ex.hangs:
                if key[0] == layer:
                    hung.setdefault(entry, set()).add(key)
        if not hung:
            return hung
        order = {_key(j): n for n, j in enumerate(self.jobs)}
        return {entry: [k[2] for k in sorted(keys, key=lambda k: order.get(k, len(order)))]
                for entry, keys in hung.items()}

    def _not_run(self, job: Job, why: str) -> list[Record]:
        """The failing records of a case not run (_stopped): one per tier it would have had,
        as for a base run that crashed (so each of the plugin's tests of the case fails)."""
        tiers = [t for t in job.case.expected if t in self.opts.tiers]
        if "identity" in self.opts.tiers and len(self.runs()) > 1:
            tiers.append("identity")
        records = [failure(self.opts, job.layer, job.case.name, t, self.isas[0], 1, why,
                           fixture=Path(job.fixture).stem) for t in tiers]
        entry = self.not_run.setdefault(job.layer, {"reason": why, "cases": []})
        entry["reason"] = why
        entry["cases"].append(job.case.name)
        return records

    def meta(self) -> dict:
        ex = self.executor
        return {
            "port": str(self.port_path),
            "port_sha256": sha256(pyport.source_file(self.port_path) or self.port_path),
            "bundled": self.opts.port is None,
            "abi_version": ex.info.get("abi_version") if ex else None,
            "harness_abi_version": abi.ABI_VERSION,
            "build": build_info() if self.opts.port is None else None,
            "fpenv": ex.info.get("fpenv") if ex else None,
            "isas": self.isas, "isas_available": ex.isas if ex else [],
            "threads": sorted({t for _, t in self.runs()}) if self.isas else
                       list(self.opts.threads), "tiers": list(self.opts.tiers),
            **({"runs": [list(r) for r in self.opts.runs]} if self.opts.runs else {}),
            "workers": len(self.executors),
            "layers": self.layer_names, "case": self.opts.case, "timeout_s": self.opts.timeout,
            "started": self.started, "wall_s": round(time.perf_counter() - self.t0, 3),
            **({"port_load_output": ex.load_output} if ex and ex.load_output else {}),
            "cpu": cpu_info(), "host": host_info(), "tool": tool_info(),
            "fixtures": {f.path.name: fixture_info(f) for fs in self.fixtures.values() for f in fs},
            **({"flips": list(self.flips)} if self.flips is not None else {}),
            "available": self.opts.available, "not_implemented": dict(self.not_implemented),
            **({"no_fixture": list(self.no_fixture)} if self.no_fixture else {}),
            **({"not_run": dict(self.not_run)} if self.not_run else {}),
        }


def run_gate(opts: GateOptions, progress=None) -> GateResult:
    """Raises abi.PortError / FixtureError when the gate cannot run (exit 2)."""
    session = GateSession(opts)
    records: list[Record] = []
    with session:
        jobs = session.jobs
        for n, job in enumerate(jobs):
            if progress:
                progress(n, len(jobs), f"{job.layer} {job.case.name}")
            records += session.run_case(job, jobs[n + 1:n + 1 + FAR * len(session.executors)])
        records = contract.merged(session, records)   # the contract tier: each layer's calls
        if progress:
            progress(len(jobs), len(jobs), "done")
    if not records and not session.not_implemented:   # (none implemented: the CLI says so)
        raise ValueError("no checks selected: the selected cases have none of the selected tiers")
    return GateResult(records, session.meta())


def _key(job: Job) -> tuple:
    return job.layer, str(job.fixture), job.case.name


def rotated(runs: list, k: int) -> list:
    """The order a worker makes a case's runs in: `runs` grouped by ISA (in their order), the
    groups rotated by k places (k: the case's place in its fixture). The first group then
    runs right after another case's runs, on memory the port used for another shape, and
    each ISA leads on every n-th case of a fixture (n ISAs): a path that reads what an earlier
    call left in the port's memory (a scratch row it should have cleared, and that another
    path clears) differs from the base run (docs/port-abi.md, "No value crosses calls"). The
    records are keyed by run, so a port that keeps no state gets the same verdicts."""
    groups = list(dict.fromkeys(isa for isa, _ in runs))
    k = k % len(groups) if groups else 0
    return [r for isa in groups[k:] + groups[:k] for r in runs if r[0] == isa]


def _check_selection(opts) -> None:
    """Nothing selected is an error (exit 2), not an empty pass."""
    for what, value in (("--layers", opts.layers), ("--isa", opts.isas)):
        if value is not None and not value:
            raise ValueError(f"no checks selected: {what} names nothing")
    if not opts.tiers:
        raise ValueError("no checks selected: --tiers names nothing")
    if not opts.threads:
        raise ValueError("no checks selected: --threads names nothing")


def select_isas(opts: GateOptions, available) -> list[str]:
    wanted = list(dict.fromkeys(i for i, _ in opts.runs)) if opts.runs else opts.isas
    if wanted is None:
        return list(available)
    absent = [i for i in wanted if i not in available]
    if absent:
        raise abi.PortError(f"ISA path(s) {', '.join(absent)} not available from this port on this CPU "
                            f"(available: {', '.join(available)})")
    return list(wanted)


def _bundled() -> Path:
    from ..ctypes_kernels.build import build
    return build()


