"""The gate: runs a port on the fixtures, layer by layer, and yields one record per tensor.

For every case of every fixture of a layer:
  - the base run (the first ISA asked for, 1 thread) is compared with each tier the fixture
    holds (exact, float64, pytorch);
  - every other ISA x thread count is compared bit for bit with the base run (identity).
"""
from __future__ import annotations

import fnmatch
import shlex
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ctypes_kernels import abi
from generators.h5io import FixtureError, read_fixture
from harness import layers as L
from harness.compare import Comparison, compare
from harness.executor import Executor, PortCrash
from harness.tolerances import lookup

ROOT = Path(__file__).resolve().parent.parent
FIXTURES_DIR = ROOT / "fixtures"
TIERS = ("exact", "float64", "pytorch", "identity")
THREADS = (1, 2, 3, 7)


@dataclass
class Record:
    case: str
    layer: str
    tensor: str
    tier: str
    isa: str
    threads: int
    usage: float
    max_abs_diff: float
    mismatches: int
    elements: int
    passed: bool
    max_ulp: int | None = None
    worst: dict = field(default_factory=dict)
    note: str = ""
    atol: float | None = None
    rtol: float | None = None
    floor: float | None = None
    repro: str = ""

    def to_dict(self) -> dict:
        d = asdict(self)
        for k in ("usage", "max_abs_diff"):
            if d[k] != d[k] or d[k] in (float("inf"), float("-inf")):
                d[k] = None   # JSON has no NaN/Inf: null means "unbounded"
        return d


@dataclass
class GateOptions:
    port: str | None = None          # None: the bundled kernels
    fixtures: Path = FIXTURES_DIR
    isas: list[str] | None = None    # None: every ISA the port reports
    threads: tuple = THREADS
    tiers: tuple = TIERS
    layers: list[str] | None = None  # None: every layer with a harness module
    case: str | None = None          # glob over case names
    timeout: float = 120.0


@dataclass
class GateResult:
    records: list
    meta: dict

    @property
    def passed(self) -> bool:
        return all(r.passed for r in self.records)


def repro_command(opts: GateOptions, layer: str, case: str, tier: str, isa: str, threads: int) -> str:
    cmd = ["crnn-conformance", "gate"]
    if opts.port:
        cmd += ["--port", str(opts.port)]
    if Path(opts.fixtures).resolve() != FIXTURES_DIR:
        cmd += ["--fixtures", str(opts.fixtures)]
    cmd += ["--layers", layer, "--case", case, "--tiers", tier, "--isa", isa, "--threads", str(threads)]
    return shlex.join(cmd)


def _fixture_paths(opts: GateOptions, module) -> list[Path]:
    return [Path(opts.fixtures) / f"{name}.h5" for name in getattr(module, "FIXTURES", [module.FIXTURE])]


def _tier_records(opts, module, case, tier, ours, isa) -> list[Record]:
    out = []
    ref = case.expected[tier]
    hook = getattr(module, "compare_tier", None)
    for tensor, r in ref.items():
        if tensor not in ours:
            continue
        tol = lookup(module.LAYER, tensor) if tier in ("float64", "pytorch") else None
        floor = float(case.floor.get(tensor, 0.0)) if tier == "pytorch" else None
        if hook is not None:
            c = hook(case, tier, tensor, ours, ref, tol, floor)
        else:
            c = compare(ours[tensor], r, tier, tol.atol if tol else 0.0, tol.rtol if tol else 0.0,
                        floor or 0.0)
        out.append(_record(opts, module.LAYER, case.name, tensor, tier, isa, 1, c, tol, floor))
    return out


def _record(opts, layer, case, tensor, tier, isa, threads, c: Comparison, tol=None, floor=None) -> Record:
    return Record(case, layer, tensor, tier, isa, threads, c.usage, c.max_abs_diff, c.mismatches,
                  c.elements, c.passed, c.max_ulp, c.worst, c.note,
                  tol.atol if tol else None, tol.rtol if tol else None, floor,
                  "" if c.passed else repro_command(opts, layer, case, tier, isa, threads))


def _failure(opts, layer, case, tier, isa, threads, note) -> Record:
    c = Comparison(float("inf"), float("inf"), 0, 0, False, note=note)
    return _record(opts, layer, case, "*", tier, isa, threads, c)


def run_gate(opts: GateOptions, progress=None) -> GateResult:
    """Raises abi.PortError / FixtureError when the gate cannot run (exit 2)."""
    t0 = time.perf_counter()
    layer_names = opts.layers or L.available()
    unknown = [n for n in layer_names if n not in L.LAYERS]
    if unknown:
        raise ValueError(f"unknown layer(s) {unknown}; known: {', '.join(L.LAYERS)}")
    missing = [n for n in layer_names if n not in L.available()]
    if missing:
        raise ValueError(f"layer(s) {missing} have no harness module in this version")
    modules = [L.module(n) for n in layer_names]
    fixtures = {m.LAYER: [read_fixture(p) for p in _fixture_paths(opts, m)] for m in modules}
    port_path = Path(opts.port) if opts.port else _bundled()
    records: list[Record] = []
    with Executor(port_path, layer_names, opts.timeout) as ex:
        isas = _select_isas(opts, ex.isas)
        base_isa = isas[0]
        jobs = [(m, fx, case) for m in modules for fx in fixtures[m.LAYER] for case in fx.cases
                if opts.case is None or fnmatch.fnmatch(case.name, opts.case)]
        for n, (m, fx, case) in enumerate(jobs):
            if progress:
                progress(n, len(jobs), f"{m.LAYER} {case.name}")
            records += _run_case(opts, ex, m, fx.path, case, isas, base_isa)
        if progress:
            progress(len(jobs), len(jobs), "done")
    meta = {"port": str(port_path), "bundled": opts.port is None, "isas": isas,
            "isas_available": ex.isas, "threads": list(opts.threads), "tiers": list(opts.tiers),
            "layers": layer_names, "wall_s": round(time.perf_counter() - t0, 3),
            "fixtures": {str(f.path.name): f.attrs for fs in fixtures.values() for f in fs}}
    return GateResult(records, meta)


def _run_case(opts, ex, m, fixture_path, case, isas, base_isa) -> list[Record]:
    records = []
    try:
        base = ex.run(m.LAYER, fixture_path, case.name, base_isa, 1)
    except (PortCrash, abi.PortCallError) as e:
        return [_failure(opts, m.LAYER, case.name, t, base_isa, 1, str(e))
                for t in case.expected if t in opts.tiers]
    for tier in case.expected:
        if tier in opts.tiers:
            records += _tier_records(opts, m, case, tier, base, base_isa)
    if "identity" not in opts.tiers:
        return records
    for isa in isas:
        for threads in opts.threads:
            if (isa, threads) == (base_isa, 1):
                continue
            try:
                other = ex.run(m.LAYER, fixture_path, case.name, isa, threads)
            except (PortCrash, abi.PortCallError) as e:
                records.append(_failure(opts, m.LAYER, case.name, "identity", isa, threads, str(e)))
                continue
            for tensor, a in base.items():
                c = compare(other[tensor], a, "identity")
                if not c.passed:
                    c.note = (c.note + "; " if c.note else "") + f"differs from {base_isa} x 1 thread"
                rec = _record(opts, m.LAYER, case.name, tensor, "identity", isa, threads, c)
                if not c.passed and isa != base_isa:   # the repro must run the base path too
                    rec.repro = repro_command(opts, m.LAYER, case.name, "identity",
                                              f"{base_isa},{isa}", threads)
                records.append(rec)
    return records


def _select_isas(opts, available) -> list[str]:
    if not opts.isas:
        return list(available)
    absent = [i for i in opts.isas if i not in available]
    if absent:
        raise abi.PortError(f"ISA path(s) {', '.join(absent)} not available from this port on this CPU "
                            f"(available: {', '.join(available)})")
    return list(opts.isas)


def _bundled() -> Path:
    from ctypes_kernels.build import build
    return build()
