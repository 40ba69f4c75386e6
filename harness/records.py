"""What the gate produces and how it is asked: one Record per check, the options of a run, and
the command that reruns one check alone (the `__REPRO:` line)."""
from __future__ import annotations

import os
import shlex
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

from .. import fixtures
from .compare import Comparison

FIXTURES_DIR = fixtures.directory()
TIERS = ("exact", "float64", "pytorch", "identity", "contract")
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
    hist: dict | None = None      # compare.histogram(): failing or > 0.5 usage only
    heatmap: dict | None = None   # compare.heatmap(): failing or > 0.5 usage, 2-D tensors only
    fixture: str = ""             # the fixture file's stem (adamw, pytorch_adamw, ...)
    resolution: float | None = None   # tolerance tiers: compare.resolution(); None for bit tiers
    seconds: float = 0.0          # this check's share of the port run it compares, plus its compare
    output: str = ""              # what the port printed during the run (first record of a run)
    # The pool flips this check judged (harness/flips/: the step's winners in the pytorch
    # tier), None for every other check: the gate gathers them into meta["flips"], so they
    # are not part of the record's own document (to_dict).
    flips: list | None = None

    def to_dict(self) -> dict:
        d = {f: getattr(self, f) for f in _RECORD_FIELDS}   # shallow: asdict's deep copy of
                                                            # 10^4 records cost 0.2 s a gate
        for k in ("usage", "max_abs_diff"):
            if d[k] != d[k] or d[k] in (float("inf"), float("-inf")):
                d[k] = None   # JSON has no NaN/Inf: null means "unbounded"
        if not d["output"]:
            del d["output"]
        return d


_RECORD_FIELDS = tuple(f.name for f in fields(Record) if f.name != "flips")   # meta's, not the record's


@dataclass
class GateOptions:
    port: str | None = None          # None: the bundled kernels
    fixtures: Path = FIXTURES_DIR
    isas: list[str] | None = None    # None: every ISA the port reports
    threads: tuple = THREADS
    tiers: tuple = TIERS
    layers: list[str] | None = None  # None: every layer with a harness module
    case: str | None = None          # glob over case names
    timeout: float | None = 120.0    # None: no limit
    available: bool = False          # `--layers available`: gate only the layers the port implements
    workers: int = 1                 # worker processes running cases side by side (gate --jobs)
    runs: list | None = None         # gate --runs: exactly these (isa, threads) runs, the base first
    keep_going: bool = False         # run every case, also after two hangs in one entry point
    draw: int | None = None          # --draw N: fixtures is draw N's directory (docs/fixtures.md)


@dataclass
class GateResult:
    records: list
    meta: dict

    @property
    def passed(self) -> bool:
        return all(r.passed for r in self.records)


def repro_command(opts: GateOptions, layer: str, case: str, tier: str, isa: str, threads: int,
                  runs: list | None = None) -> str:
    """The gate command that reruns one check alone: `--isa ISA --threads N` for a check of the
    base run (ISA x 1 thread), `--runs` for `runs` (an identity check: its base and its own
    run, exactly those two) and for a base run of more threads (which --isa cannot name)."""
    if runs is None and tier != "identity" and str(threads) != "1":
        runs = [(isa, threads)]
    own = getattr(opts, "repro", None)      # another command's own (grade: harness/grade.py)
    if own is not None:
        return own(layer, case, tier, isa, threads, runs)
    cmd = ["crnn-conformance", "gate"]
    if opts.port:
        cmd += ["--port", str(opts.port)]
    cmd += fixture_args(opts)
    cmd += ["--layers", layer, "--case", case, "--tiers", tier]
    cmd += (["--runs", ",".join(f"{i}:{t}" for i, t in runs)] if runs else
            ["--isa", isa, "--threads", str(threads)])
    if opts.timeout != GateOptions.timeout:
        cmd += ["--timeout", "inf" if opts.timeout is None else f"{opts.timeout:g}"]
    return " ".join(map(_shell_quote, cmd))


def fixture_args(opts) -> list[str]:
    """How a repro names the fixtures: `--draw N`, `--fixtures DIR`, or nothing (packaged)."""
    if getattr(opts, "draw", None) is not None:
        return ["--draw", str(opts.draw)]
    if Path(opts.fixtures).resolve() != Path(FIXTURES_DIR).resolve():
        return ["--fixtures", str(opts.fixtures)]
    return []


def _shell_quote(arg: str) -> str:
    """shlex.quote, but a path that is not UTF-8 (Python keeps its bytes as surrogates) becomes
    bash's $'...' with \\xNN escapes: the line stays valid text and reruns that very path."""
    try:
        arg.encode("utf-8")
    except UnicodeEncodeError:
        return "$'" + "".join(chr(b) if 32 <= b < 127 and b not in b"'\\" else f"\\x{b:02x}"
                              for b in os.fsencode(arg)) + "'"
    return shlex.quote(arg)


def record(opts, layer, case, tensor, tier, isa, threads, c: Comparison, tol=None, floor=None,
           runs: list | None = None, repro: str | None = None, fixture: str = "",
           seconds: float = 0.0, output: str = "") -> Record:
    """The record of one check, whole: a failing check's repro reruns it alone (`runs`: an
    identity check's base and own run, both named; `repro`: a command the caller made, for
    a check of more runs than the record's own), and a check that judged pool flips carries
    them (c.flips) for meta["flips"]. `fixture`: the fixture file's stem ("" for a case of
    no file, the fuzzer's); `seconds`, `output`: when the caller knows them already (a port
    run's share of time known only later: of_run())."""
    if c.passed:
        repro = ""
    elif repro is None:
        repro = repro_command(opts, layer, case, tier, isa, threads, runs)
    return Record(case, layer, tensor, tier, isa, threads, c.usage, c.max_abs_diff, c.mismatches,
                  c.elements, c.passed, c.max_ulp, c.worst, c.note,
                  tol.atol_max if tol else None, tol.rtol if tol else None, floor, repro,
                  c.hist, c.heatmap, fixture, c.resolution, seconds, output,
                  flips=None if c.flips is None else list(c.flips))


def failure(opts, layer, case, tier, isa, threads, note, runs: list | None = None,
            repro: str | None = None, fixture: str = "") -> Record:
    """The failing record of a check that has no outputs to compare (the run crashed, hung or
    was not made); `runs`, `repro`, `fixture`: as record()'s."""
    c = Comparison(float("inf"), float("inf"), 0, 0, False, note=note)
    return record(opts, layer, case, "*", tier, isa, threads, c, runs=runs, repro=repro,
                  fixture=fixture)


def of_run(records: list[Record], seconds: float, output: str = "") -> list[Record]:
    """New records of one port run, given what belongs to the run rather than to one check
    and is known only once all its records are made: each one's equal share of the run's
    `seconds` (the run and its comparisons), and what the port printed (`output`) on the
    first, so the text is reported once."""
    share = seconds / len(records) if records else 0.0
    return [replace(r, seconds=r.seconds + share, output=output if n == 0 and output else r.output)
            for n, r in enumerate(records)]
