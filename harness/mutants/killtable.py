"""The outcome of gating a mutant (Kill), the kill table and its JSON (docs/mutants.md,
"Reading the table")."""
from __future__ import annotations

from dataclasses import dataclass, field

from ..runner import TIERS

from .catalogue import BY_NAME, MARGIN, TOLERANT_FIRST


@dataclass
class Kill:
    """The outcome of gating one mutant (or, with name "clean", the bundled port)."""
    name: str
    expect: tuple
    killed: bool
    seconds: float
    tiers_failed: tuple = ()
    caught_by: str | None = None      # the most tolerant failing tier (TOLERANT_FIRST)
    first: dict | None = None         # first failing record of that tier, in the gate's order
    failing: int = 0                  # failing records
    layers_failed: tuple = ()
    checks: int = 0
    error: str | None = None          # could not build or gate it (not a kill)
    skipped: str | None = None        # not exercised on this CPU (why)
    margin: list = field(default_factory=list)   # clean port: records above MARGIN usage
    worst_usage: dict = field(default_factory=dict)   # float64/pytorch: max usage of any record

    @property
    def as_expected(self) -> bool:
        return self.killed and self.error is None and self.tiers_failed == self.expect

    @property
    def ok(self) -> bool:
        if self.name == "clean":
            return self.error is None and not self.killed
        return self.as_expected or self.skipped is not None

    def to_dict(self) -> dict:
        return {"name": self.name, "expect": list(self.expect), "killed": self.killed,
                "seconds": round(self.seconds, 2), "tiers_failed": list(self.tiers_failed),
                "caught_by": self.caught_by, "first": self.first, "failing": self.failing,
                "layers_failed": list(self.layers_failed), "checks": self.checks,
                "error": self.error, "skipped": self.skipped, "as_expected": self.as_expected,
                "worst_usage": self.worst_usage, "margin": self.margin}


def _summarise(name, expect, result, seconds) -> Kill:
    fails = [r for r in result.records if not r.passed]
    tiers = tuple(t for t in TIERS if any(r.tier == t for r in fails))
    caught = next((t for t in TOLERANT_FIRST if t in tiers), None)
    first = next((r for r in fails if r.tier == caught), None)
    layers = tuple(dict.fromkeys(r.layer for r in fails))
    # the largest usage of each tolerance tier over all its records, passing or not: for a
    # legal order how close it comes to its allowances, for a real bug how far beyond
    worst = {t: _finite(max(r.usage for r in result.records if r.tier == t))
             for t in ("float64", "pytorch") if any(r.tier == t for r in result.records)}
    return Kill(name, expect, bool(fails), seconds, tiers, caught,
                _brief(first) if first else None, len(fails), layers, len(result.records),
                worst_usage=worst)


def _finite(x):
    """JSON has no NaN or Inf: None stands for an unbounded usage (a crash, a decision flip)."""
    return None if x != x or x in (float("inf"), float("-inf")) else x


def _brief(r) -> dict:
    return {"tier": r.tier, "layer": r.layer, "case": r.case, "tensor": r.tensor, "isa": r.isa,
            "threads": r.threads, "usage": _finite(r.usage), "mismatches": r.mismatches,
            "elements": r.elements, "max_ulp": r.max_ulp, "note": r.note}



def _first(k: Kill) -> str:
    if k.error:
        return "error: " + k.error.strip().splitlines()[-1][:90]
    if not k.first:
        return "-"
    f = k.first
    return f"{f['tier']} {f['layer']}/{f['case']}/{f['tensor']}" + (
        f" ({f['isa']} x{f['threads']})" if f["tier"] == "identity" else "")


def _usage_cell(k: Kill) -> str:
    if not k.worst_usage:
        return "-"
    fmt = lambda u: "inf" if u is None else (f"{u:.3g}" if u < 1e4 else f"{u:.0e}")
    return " ".join(f"{'f64' if t == 'float64' else 'pt'} {fmt(u)}" for t, u in k.worst_usage.items())


def render(clean: Kill | None, kills: list[Kill]) -> str:
    """The kill table: per mutant the verdict, the expected and the failed tiers, the first
    failing record of the most tolerant tier that failed, the largest float64/pytorch usage
    of its records, and the time (build + gate); then the clean port, problems, a total."""
    head = (f"{'mutant':<23} {'result':<8} {'expected':<21} {'failed tiers':<21} "
            f"{'first failure (most tolerant tier)':<56} {'max usage':<22} {'time':>6}")
    lines = [head, "-" * len(head)]
    for k in kills:
        verdict = ("error" if k.error else "skipped" if k.skipped else
                   "KILLED" if k.killed else "SURVIVED")
        lines.append(f"{k.name:<23} {verdict:<8} {','.join(k.expect):<21} "
                     f"{','.join(k.tiers_failed) or '-':<21} {_first(k)[:56]:<56} "
                     f"{_usage_cell(k):<22} {k.seconds:>5.1f}s")
    if clean is not None:
        verdict = "error" if clean.error else ("PASS" if not clean.killed else "FAIL")
        lines.append(f"{'(clean port)':<23} {verdict:<8} {'-':<21} "
                     f"{','.join(clean.tiers_failed) or '-':<21} {_first(clean)[:56]:<56} "
                     f"{_usage_cell(clean):<22} {clean.seconds:>5.1f}s")
    lines.append("")
    problems = []
    for k in kills:
        if k.skipped:
            problems.append(f"{k.name}: skipped: {k.skipped}")
        elif k.error:
            problems.append(f"{k.name}: could not be gated: {k.error.strip().splitlines()[-1]}")
        elif not k.killed:
            problems.append(f"{k.name}: SURVIVED every tier ({BY_NAME[k.name].mistake})")
        elif not k.as_expected:
            missing = [t for t in k.expect if t not in k.tiers_failed]
            extra = [t for t in k.tiers_failed if t not in k.expect]
            if any(t in ("float64", "pytorch") for t in missing):
                problems.append(
                    f"{k.name}: killed, but it survived the {'/'.join(missing)} tier it should "
                    "fail: the fixtures or tolerances there let this mistake through")
            if extra or [t for t in missing if t not in ("float64", "pytorch")]:
                problems.append(
                    f"{k.name}: failed {','.join(k.tiers_failed)}, expected "
                    f"{','.join(k.expect)}" + (
                        f" (a rounding-level mistake failing {'/'.join(extra)}: an allowance "
                        "is tighter than its error bound)"
                        if any(t in ("float64", "pytorch") for t in extra) else ""))
    if clean is not None:
        if clean.error:
            problems.append(f"clean port: could not be gated: {clean.error.strip().splitlines()[-1]}")
        elif clean.killed:
            problems.append(f"clean port: FAILS the gate ({clean.failing} records, first "
                            f"{_first(clean)})")
        for e in clean.margin:
            why = e["reason"] or "NO REASON RECORDED"
            problems.append(f"clean port margin: {e['tier']} {e['layer']}/{e['case']}/"
                            f"{e['tensor']} uses {e['usage']:.3f} of its allowance (> {MARGIN}): "
                            f"{why}")
    lines += problems
    n_killed = sum(k.killed for k in kills)
    n_expected = sum(k.as_expected for k in kills)
    lines.append(f"{n_killed} of {len(kills)} mutants killed, {n_expected} by exactly the "
                 f"expected tiers" + (
                     "" if clean is None else
                     f"; clean port {'passes' if clean.ok else 'FAILS'}"
                     + (f", margin: max float64/pytorch usage <= {MARGIN}"
                        if clean.ok and not clean.margin else "")))
    return "\n".join(lines)


def passed(clean: Kill | None, kills: list[Kill]) -> bool:
    margin_ok = clean is None or all(e["reason"] for e in clean.margin)
    return all(k.ok for k in kills) and (clean is None or clean.ok) and margin_ok


def to_json(clean: Kill | None, kills: list[Kill]) -> dict:
    """The kill table as `crnn-conformance mutants --json` writes it."""
    return {"clean": clean.to_dict() if clean else None,
            "mutants": [k.to_dict() for k in kills], "passed": passed(clean, kills)}
