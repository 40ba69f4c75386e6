"""Building each mutant and gating it in-process with its plan (docs/mutants.md, "How a
mutant is gated"); the clean port's margin.

    clean, kills = run_catalogue()            # every mutant, plus the clean port
    print(render(clean, kills))

A mutant is *killed* when the gate fails it; a kill by other tiers than expected is reported
(`as_expected` False). A mutant whose paths this CPU lacks is skipped (reported, neither
killed nor survived); one that cannot be built (a patch that no longer applies, a compile
error) is that mutant's error, never a kill.
"""
from __future__ import annotations

import ctypes
import fnmatch
import time
import traceback
from pathlib import Path

from ...ctypes_kernels import abi
from ...generators.h5io import FixtureError
from ..runner import FIXTURES_DIR, GateOptions, run_gate

from .catalogue import BY_NAME, CATALOGUE, MARGIN, MARGIN_REASONS, plan
from .killtable import Kill, _finite, _summarise


def mutant_marker(path: Path) -> str | None:
    """The mutant name a library was built as (build(mutant=NAME) links in a generated source
    that exports crnn_mutant_name; the shipped sources have no such symbol), or None for a
    normal build."""
    lib = ctypes.CDLL(str(path))
    try:
        return ctypes.string_at(ctypes.addressof(ctypes.c_char.in_dll(lib, "crnn_mutant_name"))).decode()
    except ValueError:
        return None


def check_is_mutant(path: Path, name: str) -> None:
    """The library must be the mutant build it claims to be."""
    got = mutant_marker(path)
    if got != name:
        raise abi.PortError(f"{path} is not the mutant build {name!r} (it says {got!r})")


def run_mutant(name: str, fixtures: Path = FIXTURES_DIR, full: bool = False,
               timeout: float = 120.0) -> Kill:
    """Builds the mutant and gates it in this process."""
    from ...ctypes_kernels.build import build
    m = BY_NAME[name]
    t0 = time.perf_counter()
    try:
        path = build(mutant=name)
        check_is_mutant(path, name)
        if m.needs:
            have = abi.available_isas(abi.load(path, layers=()))
            if not any(i in have for i in m.needs):
                return Kill(name, m.expect, False, time.perf_counter() - t0,
                            skipped=f"this CPU has no {'/'.join(m.needs)} path, where the "
                                    "mistake lives")
        result = run_gate(GateOptions(port=str(path), timeout=timeout, **plan(m, fixtures, full)))
    except (abi.PortError, FixtureError, ValueError) as e:
        return Kill(name, m.expect, False, time.perf_counter() - t0, error=str(e))
    return _summarise(name, m.expect, result, time.perf_counter() - t0)


def preflight(fixtures: Path = FIXTURES_DIR) -> None:
    """Raises abi.PortError / FixtureError / ValueError when nothing can be gated: no compiler
    for the bundled kernels, or a missing, corrupt or stale fixture."""
    from ..runner import GateSession
    GateSession(GateOptions(fixtures=Path(fixtures)))   # builds the port, reads every fixture


def run_clean(fixtures: Path = FIXTURES_DIR, timeout: float = 120.0) -> Kill:
    """The bundled port through the whole gate, and its margin: every float64/pytorch record
    above MARGIN usage is listed with the reason MARGIN_REASONS gives (or none)."""
    t0 = time.perf_counter()
    try:
        result = run_gate(GateOptions(fixtures=Path(fixtures), timeout=timeout))
    except (abi.PortError, FixtureError, ValueError) as e:
        return Kill("clean", (), False, time.perf_counter() - t0, error=str(e))
    k = _summarise("clean", (), result, time.perf_counter() - t0)
    k.margin = margin_exceptions(result.records)
    k.worst_usage = {t: _finite(max(r.usage for r in result.records if r.tier == t))
                     for t in ("float64", "pytorch") if any(r.tier == t for r in result.records)}
    return k



def margin_exceptions(records) -> list[dict]:
    out = []
    for r in records:
        if r.tier in ("float64", "pytorch") and r.passed and r.usage > MARGIN:
            reason = next((why for (layer, case, tensor), why in MARGIN_REASONS.items()
                           if layer == r.layer and fnmatch.fnmatch(r.case, case)
                           and fnmatch.fnmatch(r.tensor, tensor)), None)
            out.append({"layer": r.layer, "case": r.case, "tensor": r.tensor, "tier": r.tier,
                        "usage": r.usage, "reason": reason})
    return out


def _job(args) -> Kill:
    name, fixtures, full, timeout = args
    try:
        if name == "clean":
            return run_clean(fixtures, timeout)
        return run_mutant(name, fixtures, full, timeout)
    except Exception:   # a harness or build failure: reported, never a kill
        return Kill(name, BY_NAME[name].expect if name in BY_NAME else (), False, 0.0,
                    error=traceback.format_exc(limit=3))


def run_catalogue(names=None, fixtures: Path = FIXTURES_DIR, full: bool = False,
                  jobs: int = 1, timeout: float = 120.0, clean: bool = True, progress=None):
    """-> (clean Kill or None, [Kill per mutant in catalogue order]).

    Each job builds its mutant (cached per define set) and gates it; a compile error is that
    mutant's error. With jobs > 1 the jobs run in that many processes (spawned: each gate
    forks its own worker)."""
    names = list(names or [m.name for m in CATALOGUE])
    unknown = [n for n in names if n not in BY_NAME]
    if unknown:
        raise ValueError(f"unknown mutant(s) {', '.join(unknown)}; known: "
                         f"{', '.join(BY_NAME)}")
    todo = (["clean"] if clean else []) + names
    args = [(n, Path(fixtures), full, timeout) for n in todo]
    results = dict(zip(todo, map_jobs(_job, args, jobs, progress)))
    return results.get("clean"), [results[n] for n in names]


def map_jobs(fn, args: list, jobs: int = 1, progress=None) -> list:
    """[fn(a) for a in args], in that order; with jobs > 1 in that many processes (spawned:
    each gate forks its own worker). progress(result) is called as each one ends."""
    if jobs <= 1 or len(args) <= 1:
        out = []
        for a in args:
            out.append(fn(a))
            if progress:
                progress(out[-1])
        return out
    import concurrent.futures as cf
    import multiprocessing as mp
    with cf.ProcessPoolExecutor(jobs, mp_context=mp.get_context("spawn")) as pool:
        futures = {pool.submit(fn, a): i for i, a in enumerate(args)}
        out = [None] * len(args)
        for f in cf.as_completed(futures):
            out[futures[f]] = f.result()
            if progress:
                progress(out[futures[f]])
    return out
