"""Per-tensor usage changes between two results.json files (drift review for port authors).

Checks (records) are matched on (layer, fixture:case, tensor, tier, isa, threads), the case
named with its fixture where the fixture is not the layer's own (pytorch_adamw:conv0.W and
adamw's conv0.W are different cases). A change is new usage minus
old usage (unbounded usage, a crash or NaN, counts as infinite); the table is sorted by the
largest increase first. Records present in only one run are counted and listed after it; a
check of OLD that NEW lacks is lost coverage, which `fails(threshold)` counts as a failure
as it counts an increase beyond the threshold and a check that passed in OLD and fails in NEW.
"""
from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass
class Change:
    key: tuple            # (layer, [fixture:]case, tensor, tier, isa, threads)
    old: float
    new: float
    old_passed: bool
    new_passed: bool

    @property
    def delta(self) -> float:
        if math.isnan(self.old) or math.isnan(self.new):
            return math.inf
        if self.old == self.new:
            return 0.0
        if math.isinf(self.new):
            return math.inf
        if math.isinf(self.old):
            return -math.inf
        return self.new - self.old


@dataclass
class Diff:
    changes: list          # every matched record, largest increase first
    added: list            # keys only in NEW
    removed: list          # keys only in OLD

    @property
    def max_increase(self) -> float:
        return max((c.delta for c in self.changes), default=0.0)

    def increased(self, threshold: float) -> list:
        """The changes whose usage grew by more than `threshold` (a NaN change counts)."""
        return [c for c in self.changes if not c.delta <= threshold]

    @property
    def regressed(self) -> list:
        """The changes that passed in OLD and fail in NEW, whatever their usage's growth."""
        return [c for c in self.changes if c.old_passed and not c.new_passed]

    def fails(self, threshold: float) -> bool:
        """`--fail-on-increase threshold`: some usage grew by more than it, a check that
        passed in OLD fails in NEW, or some check of OLD is missing from NEW."""
        return bool(self.increased(threshold) or self.regressed or self.removed)


class DuplicateCheck(ValueError):
    """A results document that holds one check twice: the runs cannot be matched."""


def _key(r: dict) -> tuple:
    fixture = r.get("fixture") or r["layer"]
    case = r["case"] if fixture == r["layer"] else f"{fixture}:{r['case']}"
    return (r["layer"], case, r["tensor"], r["tier"], r["isa"], int(r["threads"]))


def _u(r: dict) -> float:
    """Usage as a float: null (unbounded), NaN and anything beyond range are infinite."""
    u = r.get("usage")
    try:
        u = math.inf if u is None else float(u)
    except (TypeError, ValueError, OverflowError):
        return math.inf
    return math.inf if math.isnan(u) else u


def _checks(doc: dict, keep, which: str) -> dict:
    out = {}
    for i, r in enumerate(doc.get("tensors", [])):
        if not keep(r):
            continue
        k = _key(r)
        if k in out:
            raise DuplicateCheck(f"{which} holds the check {'/'.join(map(str, k[:3]))} tier={k[3]} "
                                 f"isa={k[4]} threads={k[5]} twice (tensors[{out[k][0]}] and "
                                 f"tensors[{i}]): its records cannot be matched")
        out[k] = (i, r)
    return {k: r for k, (_, r) in out.items()}


def diff(old: dict, new: dict, tiers=None) -> Diff:
    """`tiers`: only records of these tiers (None: all). Raises DuplicateCheck when a
    document holds a check twice."""
    keep = (lambda r: True) if not tiers else (lambda r: r["tier"] in tiers)
    a = _checks(old, keep, "OLD")
    b = _checks(new, keep, "NEW")
    changes = [Change(k, _u(a[k]), _u(b[k]), a[k]["passed"], b[k]["passed"]) for k in b if k in a]
    changes.sort(key=lambda c: (-c.delta, c.key))
    return Diff(changes, [k for k in b if k not in a], [k for k in a if k not in b])


def _fmt(u: float) -> str:
    if math.isinf(u):
        return "inf" if u > 0 else "-inf"
    return f"{u:.4g}"


def _delta(d: float) -> str:
    if math.isinf(d):
        return "+inf" if d > 0 else "-inf"
    return f"{d:+.4g}"


def _status(c: Change) -> str:
    if c.old_passed and not c.new_passed:
        return "NOW FAILS"
    if not c.old_passed and c.new_passed:
        return "now passes"
    return "" if c.new_passed else "fails"


def render(d: Diff, show_all: bool = False, limit: int | None = None) -> str:
    """The table of changed records (every record with `show_all`), then a summary line."""
    rows = [c for c in d.changes if show_all or c.delta != 0 or c.old_passed != c.new_passed]
    shown = rows[:limit] if limit else rows
    lines = []
    if shown:
        head = (f"{'layer/case/tensor':<44} {'tier':<8} {'isa':<7} {'thr':>3} "
                f"{'old':>10} {'new':>10} {'change':>10}  status")
        lines += [head, "-" * len(head)]
        for c in shown:
            layer, case, tensor, tier, isa, threads = c.key
            name = f"{layer}/{case}/{tensor}"
            lines.append(f"{name[:44]:<44} {tier:<8} {isa:<7} {threads:>3} {_fmt(c.old):>10} "
                         f"{_fmt(c.new):>10} {_delta(c.delta):>10}  {_status(c)}".rstrip())
        if len(rows) > len(shown):
            lines.append(f"... {len(rows) - len(shown)} more change(s)")
    for label, keys in (("only in NEW", d.added), ("only in OLD (missing from NEW)", d.removed)):
        for k in keys[:20]:
            lines.append(f"{label}: {'/'.join(map(str, k[:3]))} tier={k[3]} isa={k[4]} threads={k[5]}")
        if len(keys) > 20:
            lines.append(f"{label}: ... {len(keys) - 20} more")
    up = sum(c.delta > 0 for c in d.changes)
    down = sum(c.delta < 0 for c in d.changes)
    lines.append(f"{len(d.changes)} checks compared: {up} increased, {down} decreased, "
                 f"{len(d.changes) - up - down} unchanged; {len(d.added)} only in NEW, "
                 f"{len(d.removed)} only in OLD; largest increase {_delta(d.max_increase)}")
    return "\n".join(lines)
