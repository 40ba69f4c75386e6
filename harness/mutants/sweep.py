"""The operator sweep: blind one-token mistakes in the bundled C, each gated like a port
(docs/mutants.md, "The operator sweep").

The catalogue holds mistakes a porter makes; the sweep asks what the fixtures miss when
nobody chose the mistake. A site is one token of the shipped sources (`ctypes_kernels/src/`,
code only: no comment, no preprocessor line): a comparison, `+ - *`, `&& ||`, or an integer
literal 0 or 1, and its mutant the same sources with that token swapped. `sweep(n, seed)`
gates n sites drawn at random with the whole default gate; a mutant the gate passes
*survived*, and is either equivalent (the same bits by another route: a bound that never
binds, a heuristic choosing between two exact paths, a write to slack scratch) or a mistake
the fixtures do not reach. Telling the two apart is the reader's work; the sweep lists the
survivors with their lines.
"""
from __future__ import annotations

import difflib
import hashlib
import random
import re
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

from ...ctypes_kernels import abi
from ...generators.h5io import FixtureError
from ..runner import FIXTURES_DIR, GateOptions, run_gate
from .killtable import _summarise
from .run import map_jobs

KERNELS = Path(__file__).resolve().parents[2] / "ctypes_kernels"
SWAPS = ((" < ", " <= "), (" <= ", " < "), (" > ", " >= "), (" >= ", " > "), (" == ", " != "),
         (" != ", " == "), (" + ", " - "), (" - ", " + "), (" * ", " + "), (" && ", " || "),
         (" || ", " && "))
LITERAL = re.compile(r"(?<![\w.])([01])(?![\w.])")
ISA_FILE = re.compile(r"_(sse|avx2|avx512|neon)\.[ch]$")   # gemm16_avx2.c, vec_avx2.h


@dataclass(frozen=True)
class Site:
    path: str        # under ctypes_kernels/, e.g. "src/conv.c"
    line: int        # 1-based
    col: int         # 0-based, in the line
    old: str
    new: str

    @property
    def id(self) -> str:
        return f"{self.path}:{self.line}:{self.col}: {self.old.strip()} -> {self.new.strip()}"

    @property
    def name(self) -> str:
        return "sweep_" + hashlib.sha256(self.id.encode()).hexdigest()[:16]


def _code(line: str) -> str:
    """The line without its comment (a comment opened on it runs to its end here)."""
    line = line.split("//")[0]
    i = line.find("/*")
    return line if i < 0 else line[:i]


def sites(isas=None, files: str | None = None) -> list[Site]:
    """Every site of the shipped sources, in file and line order; files of ISA paths not in
    `isas` (None: every path) are left out, as is every file whose path does not match the
    regular expression `files`."""
    out = []
    for p in sorted((KERNELS / "src").rglob("*")):
        rel = str(p.relative_to(KERNELS))
        isa = ISA_FILE.search(p.name)
        if p.suffix not in (".c", ".h") or (isa and isas is not None and isa[1] not in isas):
            continue
        if files and not re.search(files, rel):
            continue
        in_comment = False
        for n, line in enumerate(p.read_text().splitlines(), 1):
            s = line.strip()
            if in_comment:
                in_comment = "*/" not in s
                continue
            if s.startswith("/*") and "*/" not in s:
                in_comment = True
                continue
            if not s or s.startswith(("#", "*", "//", "/*")):
                continue
            code = _code(line)
            for old, new in SWAPS:
                out += [Site(rel, n, m.start(), old, new) for m in re.finditer(re.escape(old), code)]
            out += [Site(rel, n, m.start(), m[1], "1" if m[1] == "0" else "0")
                    for m in LITERAL.finditer(code)]
    return out


def patch(site: Site) -> str:
    """The site's mutant as a unified diff of ctypes_kernels/<path>, as build() applies it."""
    lines = (KERNELS / site.path).read_text().splitlines(keepends=True)
    line = lines[site.line - 1]
    if line[site.col:site.col + len(site.old)] != site.old:
        raise ValueError(f"{site.id}: the sources changed since the site was listed")
    new = lines[:]
    new[site.line - 1] = line[:site.col] + site.new + line[site.col + len(site.old):]
    a, b = f"a/ctypes_kernels/{site.path}", f"b/ctypes_kernels/{site.path}"
    return f"diff --git {a} {b}\n" + "".join(difflib.unified_diff(lines, new, a, b))


@dataclass
class Outcome:
    site: Site
    verdict: str                 # killed | survived | error
    seconds: float
    tiers: tuple = ()
    first: dict | None = None
    error: str | None = None

    @property
    def text(self) -> str:
        """The mutated line."""
        line = (KERNELS / self.site.path).read_text().splitlines()[self.site.line - 1]
        s = self.site
        return (line[:s.col] + s.new + line[s.col + len(s.old):]).strip()

    def to_dict(self) -> dict:
        return {"site": self.site.id, "name": self.site.name, "verdict": self.verdict,
                "line": self.text, "seconds": round(self.seconds, 2), "tiers": list(self.tiers),
                "first": self.first, "error": self.error}


def gate_site(site: Site, fixtures: Path = FIXTURES_DIR, timeout: float = 30.0) -> Outcome:
    """Builds the site's mutant and runs the whole default gate on it, in this process."""
    from ...ctypes_kernels.build import BuildError, build
    t0 = time.perf_counter()
    try:
        path = build(mutant=site.name, patch=patch(site))
        result = run_gate(GateOptions(port=str(path), fixtures=Path(fixtures), timeout=timeout))
    except BuildError as e:   # a mutant that does not compile is no mistake a port could ship
        return Outcome(site, "error", time.perf_counter() - t0, error=str(e).splitlines()[0])
    except (abi.PortError, FixtureError, ValueError) as e:   # e.g. it crashed while loading
        return Outcome(site, "killed", time.perf_counter() - t0, error=str(e))
    k = _summarise(site.name, (), result, time.perf_counter() - t0)
    return Outcome(site, "killed" if k.killed else "survived", k.seconds, k.tiers_failed, k.first)


def _job(args) -> Outcome:
    site, fixtures, timeout = args
    try:
        return gate_site(site, fixtures, timeout)
    except Exception:   # a harness failure: reported, never a kill
        return Outcome(site, "error", 0.0, error=traceback.format_exc(limit=3))


def sweep(n: int, seed: int = 0, files: str | None = None, fixtures: Path = FIXTURES_DIR,
          jobs: int = 1, timeout: float = 30.0, progress=None) -> tuple[int, list[Outcome]]:
    """-> (the number of sites, the outcomes of n of them drawn with `seed`, in site order).
    Only the ISA paths this CPU runs are swept: a mistake in another path's file would pass
    unseen."""
    from ...ctypes_kernels.build import build
    have = abi.available_isas(abi.load(build(), layers=()))
    every = sites(have, files)
    chosen = sorted(random.Random(seed).sample(range(len(every)), min(n, len(every))))
    args = [(every[i], Path(fixtures), timeout) for i in chosen]
    outcomes = map_jobs(_job, args, jobs, progress)
    return len(every), outcomes


def render(total: int, outcomes: list[Outcome], seed: int) -> str:
    count = {v: sum(o.verdict == v for o in outcomes) for v in ("killed", "survived", "error")}
    lines = [f"operator sweep: {len(outcomes)} of {total} sites (seed {seed}): "
             f"{count['killed']} killed, {count['survived']} survived, "
             f"{count['error']} did not build or could not be gated"]
    for o in outcomes:
        if o.verdict != "killed":
            why = f"  ({o.error})" if o.error else ""
            lines.append(f"  {o.verdict:<9} {o.site.id}{why}\n            {o.text}")
    if count["survived"]:
        lines.append("a survivor is equivalent (the same bits by another route) or a mistake "
                     "no fixture reaches: read its line (docs/mutants.md, \"The operator "
                     "sweep\")")
    return "\n".join(lines)
