"""The fuzz loop: Hypothesis draws cases per layer, the gate's worker runs the port on them,
the gate's comparison checks them against the executable spec (exact) and across every ISA
path x thread count (identity).

Layers take turns in chunks of a fixed number of cases (CHUNK), each chunk one Hypothesis
run with a seed derived from --seed, the layer and the round, until the time is up: every
layer is tried early and often, and the cases a seed gives do not depend on the machine's
speed. A chunk first replays the failures Hypothesis's database (under the cache dir) holds
for that layer. A failing case is shrunk by Hypothesis (for at most SHRINK_SECONDS; after that
the smallest failure so far stands), written as a one-case fixture (writer.py) and reported in
the gate's failure-line format; that layer then rests, the others go on.

The golden bits come from the reference port (harness/reference.py: the spec in plain C),
whose run of the case is recorded and sent with it: the worker makes the port's runs from that
tape. The NumPy spec (generators/exact.py), which is the definition, recomputes them for every
case that does not pass at once and for a fixed share of the passing ones (AUDIT_EVERY), and a
case where the two disagree ends the run as a harness error (ReferenceMismatch), the case
written for the report. `numpy_spec` uses the NumPy spec alone.
"""
from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path

from hypothesis import HealthCheck, Phase, Verbosity, given, settings
from hypothesis import strategies as hst
from hypothesis.database import DirectoryBasedExampleDatabase

from ...ctypes_kernels import abi, layer_table
from ...generators import exact
from ...generators.h5io import Case, digest
from .. import layers as L
from .. import case_checks, pyport, runner
from ..sandbox import replay
from ..sandbox.executor import Executor, same_bytes

from . import strategies, writer
from .values import Reader

INLINE = "<fuzz>"   # the executor's key for the case this process sends it
# cases per Hypothesis run, per layer: about half a second to a second each on the 2-core
# machine. A run has a start-up cost (about 3 ms) and its first cases cost Hypothesis more than
# later ones (a dot16 case: 1.7 ms in runs of 40, 1.2 ms in runs of 200), and every run first
# tries the all-zero case (Hypothesis's simplest) again.
CHUNK = {lay.name: lay.fuzz_chunk for lay in layer_table.LAYERS}   # (the layer table's)
SHRINK_SECONDS = 10.0
# A passing case is also checked against the NumPy spec when its digest is a multiple of this
# (and the first case of each layer always): 2-5 % of the CPU a case costs (the NumPy spec's
# 0.3-36 ms a case against 3-10 ms for the rest, docs/performance.md), so a reference that
# drifted from the spec is caught within seconds of fuzzing and costs little.
AUDIT_EVERY = {lay.name: lay.audit_every for lay in layer_table.LAYERS}
# One more thread count for a run's identity checks, drawn by its seed: a port whose threads
# split work in a way that goes wrong only at some count (8 and up, more threads than rows)
# meets another one in every run, the gate's 1, 2, 3, 7 stay.
MORE_THREADS = (4, 5, 6, 8, 9, 11, 12, 13, 15, 16, 17, 24, 31, 32, 33, 48, 63, 64)


@dataclass
class FuzzOptions:
    port: str | None = None
    layers: list[str] | None = None      # None: every layer with a strategy
    seconds: float = 60.0
    seed: int = 0
    out: Path = Path("fuzz-findings")
    isas: list[str] | None = None
    threads: tuple = runner.THREADS
    more_threads: bool = True            # and one of MORE_THREADS, drawn by --seed
    timeout: float = 30.0
    database: bool = True
    shrink_seconds: float = SHRINK_SECONDS
    stop_at_first: bool = False          # end the run (every process) at the first finding
    numpy_spec: bool = False             # golden bits from the NumPy spec only (no reference port)


@dataclass
class Finding:
    layer: str
    case: Case
    records: list                         # the failing runner.Record of the shrunk case
    found_s: float                        # from the start of the run to the first failure
    cases_before: int                     # cases of this layer run before it
    shrunk_s: float = 0.0                 # seconds spent shrinking
    path: Path | None = None              # the fixture written


@dataclass
class LayerStats:
    layer: str
    cases: int = 0
    seconds: float = 0.0
    finding: Finding | None = None
    audited: int = 0                      # cases also checked against the NumPy spec

    @property
    def rate(self) -> float:
        return self.cases / self.seconds if self.seconds > 0 else 0.0


@dataclass
class _Hunt:
    """A layer's state while Hypothesis shrinks one of its failures."""
    first_s: float | None = None
    cases_before: int = 0
    best: tuple | None = None             # (case, failing records) of the smallest failure
    best_key: str | None = None
    shrink_stop: float = float("inf")


def case_name(layer: str, params: dict, inputs: dict) -> str:
    return "fuzz_" + inputs_key(layer, params, inputs)[:12]


def inputs_key(layer: str, params: dict, inputs: dict) -> str:
    import json
    h = hashlib.sha256(layer.encode())
    h.update(json.dumps(params, sort_keys=True, default=str).encode())
    for k in sorted(inputs):
        h.update(k.encode())
        h.update(digest(inputs[k]).encode())
    return h.hexdigest()


@lru_cache(maxsize=None)      # one strategy object a size: Hypothesis validates each new one
def _case_bytes(size: int):
    return hst.binary(min_size=size, max_size=size)


def chunk_seed(seed: int, layer: str, round_: int) -> int:
    return int.from_bytes(hashlib.sha256(f"{seed}:{layer}:{round_}".encode()).digest()[:8], "little")


def database_dir() -> Path:
    from ...ctypes_kernels.build import cache_dir
    return cache_dir().parent / "fuzz" / "hypothesis"


class ReferenceMismatch(RuntimeError):
    """The reference port and the NumPy spec disagree on a case (a harness bug)."""


def _reference(opts):
    """harness.reference when its port can be built and the options allow it, else None."""
    if opts.numpy_spec:
        return None
    from .. import reference
    return reference if reference.available() else None


def more_threads(opts: FuzzOptions) -> tuple:
    """The run's one more thread count (none with more_threads off, or when --threads has it)."""
    t = MORE_THREADS[opts.seed % len(MORE_THREADS)]
    return (t,) if opts.more_threads and t not in opts.threads else ()


class Fuzzer:
    """One process's fuzzing: its worker (the gate's Executor) and its layers."""

    def __init__(self, opts: FuzzOptions, layers: list[str], stop=None, started=None):
        """started: time.time() of the run's start (the times reported count from it)."""
        self.opts = opts
        self.layers = layers
        self.stop = stop                  # an Event shared by the processes, or None
        self.gate = runner.GateOptions(port=opts.port, fixtures=Path(opts.out), isas=opts.isas,
                                       threads=tuple(opts.threads), tiers=("exact", "identity"),
                                       layers=list(layers), timeout=opts.timeout)
        port = (opts.port if pyport.is_python_port(opts.port) else Path(opts.port)
                if opts.port else runner._bundled())
        self.executor = Executor(port, layers, opts.timeout)
        self.isas = runner.select_isas(self.gate, self.executor.isas)
        declared = self.executor.info.get("threads")   # a Python port's own thread counts
        threads = [t for t in self.gate.threads + more_threads(opts)
                   if declared is None or t in declared]
        if not threads:
            self.executor.close()
            raise ValueError(f"port {opts.port} runs thread count(s) "
                             f"{', '.join(map(str, declared))} only (--threads)")
        self.gate = replace(self.gate, threads=tuple(threads))
        self.runs = [(i, t) for t in threads for i in self.isas]
        self.db = DirectoryBasedExampleDatabase(str(database_dir())) if opts.database else None
        self.stats = {layer: LayerStats(layer) for layer in layers}
        self.t0 = time.monotonic() - (time.time() - started if started else 0.0)
        self.reference = _reference(opts)
        self.mismatch: ReferenceMismatch | None = None
        self.audited: set[str] = set()         # names of the cases held to the NumPy spec

    def close(self) -> None:
        self.executor.close()

    def check(self, layer: str, params: dict, inputs: dict):
        """-> (case, failing records): the gate's checks of one drawn case."""
        case = Case(case_name(layer, params, inputs), params, inputs)
        case.expected = {}
        if self.reference is None:
            def golden():       # the spec's bits, while the worker runs the port
                case.expected["exact"] = exact.expected(layer, params, inputs)
            self.executor.prefetch(layer, INLINE, case.name, self.runs, case=case,
                                   meanwhile=golden)
            if self._agrees(case.expected["exact"]):
                return case, []
        elif not self._check_on_reference(layer, case):
            return case, []
        records = case_checks.check_case(self.gate, self.executor, L.module(layer), INLINE, case,
                                    self.isas)
        return case, [r for r in records if not r.passed]

    def _check_on_reference(self, layer: str, case) -> bool:
        """The case run on the reference port first, its calls recorded, and the port's runs
        made from that tape in C (worker._serve_symbolic): the port's first run answers with
        the buffers it wrote, equal byte for byte to the reference's when it passes. -> True
        when the case needs the gate's checks (case.expected then holds the NumPy spec's
        bits, and the worker's answers the layer's tensors); False when it passed (or the
        reference disagreed with the spec: self.mismatch)."""
        rec = self._reference_record(layer, case.params, case.inputs)
        fast = rec.outputs if isinstance(rec, self.reference.Recorded) else rec
        # (a Python port's calls cannot be played from a tape: its runs answer with tensors)
        python = pyport.is_python_port(self.opts.port)
        sym = rec.symbolic if fast is not rec and not python else None
        self.executor.prefetch(layer, INLINE, case.name, self.runs, case=case, symbolic=sym)
        agrees = self._agrees_blob(rec.blob) if sym is not None else self._agrees(fast)
        if agrees and not self._audit_due(layer, case.name):
            return False
        case.expected["exact"] = exact.expected(layer, case.params, case.inputs)
        self.stats[layer].audited += 1
        self._hold_to_spec(layer, case, fast)
        if agrees or self.mismatch is not None:
            return False
        answers = self.executor.prefetched()
        for kind, payload in answers:
            if kind == "fpenv":    # what check_case raises; the worker's environment is
                raise abi.PortError(payload)       # broken for any later run
        if answers and answers[0][0] == "ok" and replay.BLOB in answers[0][1]:
            # the gate's checks read the layer's tensors: the case again, the gate's way (when
            # the tape's first run stopped or crashed, the worker already went the gate's way)
            self.executor.prefetch(layer, INLINE, case.name, self.runs, case=case)
        return True

    def _reference_record(self, layer: str, params: dict, inputs: dict):
        """The reference port's run of a case (reference.Recorded), or the error it raised."""
        try:
            return self.reference.record(layer, params, inputs)
        except Exception as e:   # noqa: BLE001 (any error is the reference's: held to NumPy)
            return e

    def _audit_due(self, layer: str, name: str) -> bool:
        """The layer's first case, and a case whose digest is a multiple of AUDIT_EVERY, once
        (Hypothesis tries its simplest case again in every run)."""
        if name in self.audited or not (self.stats[layer].cases == 0
                                        or int(name[-8:], 16) % AUDIT_EVERY[layer] == 0):
            return False
        self.audited.add(name)
        return True

    def _hold_to_spec(self, layer: str, case, ref) -> None:
        """The reference port's outputs against the NumPy spec's, on every tensor the spec
        gives; a difference ends the run (self.mismatch), the case written under --out."""
        truth = case.expected["exact"]
        if isinstance(ref, Exception):
            what = f"it raised {type(ref).__name__}: {ref}"
        else:
            bad = [t for t in truth if t not in ref or not same_bytes(ref[t], truth[t])]
            if not bad:
                return
            what = f"tensor(s) {', '.join(bad[:4])} differ"
        path = writer.write_mismatch(self.opts.out, layer, case, self.opts.seed)
        self.mismatch = ReferenceMismatch(
            f"the reference port (generators/spec/c) disagrees with the executable spec on "
            f"{layer} case {case.name}: {what} (the case: {path}). A harness bug: please "
            "report it with that file; `fuzz --numpy-spec` fuzzes with the NumPy spec alone")

    def _agrees_blob(self, blob: bytes) -> bool:
        """Every run answered, the first with the written buffers of a run made from the
        reference's tape (replay.BLOB) equal to the reference's bytes, the others held as
        its equals."""
        outs = self._outputs()
        got = outs[0].get(replay.BLOB) if outs and len(outs[0]) == 1 else None
        return (got is not None and memoryview(got).cast("B") == blob
                and all(out is outs[0] for out in outs[1:]))

    def _outputs(self) -> list | None:
        """The outputs of every run of the case just run, or None unless all answered ok."""
        answers = self.executor.prefetched()
        if len(answers) != len(self.runs) or any(kind != "ok" for kind, _ in answers):
            return None
        return [out for _, out in answers]

    def _agrees(self, golden) -> bool:
        """Every run answered with `golden`'s bits, byte for byte (dtype and shape too), and
        all with the same outputs: then every exact and identity check that check_case makes
        passes (compare() decides equal bytes at once), so its records, which cost more than
        the comparisons for 16 runs of a small case, are not built. Anything else (an error,
        a crash, a differing bit) takes the gate's whole way and gets its records."""
        outs = None if isinstance(golden, Exception) else self._outputs()
        if outs is None:
            return False
        first = outs[0]
        return all(t in first and same_bytes(first[t], g) for t, g in golden.items()) and all(
            out is first or (out.keys() == first.keys()   # (a held run's answer is the first's)
                             and all(same_bytes(out[t], first[t]) for t in first))
            for out in outs[1:])

    def chunk(self, layer: str, n: int, seed: int, end: float) -> Finding | None:
        """One Hypothesis run of up to n cases; the shrunk finding, if one failed."""
        st = self.stats[layer]
        hunt = _Hunt()

        mod = strategies.module(layer)
        decode = getattr(mod, "decode", None)

        @settings(database=self.db, max_examples=n, deadline=None, derandomize=False,
                  suppress_health_check=list(HealthCheck), verbosity=Verbosity.quiet,
                  phases=(Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink),
                  report_multiple_bugs=False, print_blob=False)
        @given(_case_bytes(mod.SIZE) if decode else mod.cases())
        def test(drawn):
            # the case's bytes decoded here, not in a .map() of the strategy: Hypothesis
            # records every mapped value for its failure report, which cost it about 0.4 ms a
            # case (the choices, and so the database entries, are the same)
            params, inputs = decode(Reader(drawn)) if decode else drawn
            now = time.monotonic()
            key = None
            if hunt.best is None and (now >= end or self.stopped()):
                return                                   # out of time: let the run finish
            if hunt.best is not None and now >= hunt.shrink_stop:
                key = inputs_key(layer, params, inputs)
                if key != hunt.best_key:
                    return                               # shrinking is over: only the best fails
            case, fails = self.check(layer, params, inputs)
            st.cases += 1
            if fails:
                if hunt.first_s is None:
                    hunt.first_s = time.monotonic() - self.t0
                    hunt.cases_before = st.cases
                    hunt.shrink_stop = time.monotonic() + self.opts.shrink_seconds
                hunt.best = (case, fails)
                hunt.best_key = key or inputs_key(layer, params, inputs)
                raise AssertionError(f"{layer}: {len(fails)} failing check(s)")

        # The database key names the layer alone (not this function's source, Hypothesis's
        # default), so saved failures replay in every later run; the chunk's seed is set the way
        # hypothesis.seed() sets it, without that decorator's switching the database off.
        test._hypothesis_internal_database_key = f"crnn-conformance fuzz {layer}".encode()
        test._hypothesis_internal_use_seed = seed
        t = time.monotonic()
        try:
            test()
        except Exception:   # the failure Hypothesis re-raised (or its Flaky): hunt.best holds it
            if hunt.best is None:
                raise
        finally:
            st.seconds += time.monotonic() - t
        if hunt.best is None:
            return None
        case, fails = hunt.best
        return Finding(layer, case, fails, hunt.first_s, hunt.cases_before,
                       time.monotonic() - self.t0 - hunt.first_s)

    def stopped(self) -> bool:
        return self.mismatch is not None or (self.stop is not None and self.stop.is_set())

    def run(self, end: float, on_finding=None) -> dict:
        """Layers in turn, a chunk each, until `end` (time.monotonic()), every layer has a
        finding, or (stop_at_first) any process has one. -> {layer: LayerStats}."""
        active = list(self.layers)
        round_ = 0
        while active and time.monotonic() < end and not self.stopped():
            for layer in list(active):
                if time.monotonic() >= end or self.stopped():
                    break
                f = self.chunk(layer, CHUNK.get(layer, 50),
                               chunk_seed(self.opts.seed, layer, round_), end)
                if f is not None:
                    self.stats[layer].finding = f
                    active.remove(layer)
                    if self.opts.stop_at_first and self.stop is not None:
                        self.stop.set()
                    if on_finding:
                        on_finding(f)
            round_ += 1
        if self.mismatch is not None:
            if self.stop is not None:
                self.stop.set()
            raise self.mismatch
        return self.stats
