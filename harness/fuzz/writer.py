"""A finding becomes a one-case fixture (the fixtures format with its manifest, written by
generators/h5io.py), named fuzz-<layer>-<digest>.h5, and the gate's failure lines whose
__REPRO: commands rerun it from that directory: `crnn-conformance gate --fixtures DIR` finds
it by its root `layer` attribute (harness/runner.py)."""
from __future__ import annotations

import shlex
from pathlib import Path

from ...generators.h5io import write_fixture

GENERATOR = "crnn_conformance.harness.fuzz"


def fixture_path(out: Path, finding) -> Path:
    return Path(out) / f"fuzz-{finding.layer}-{finding.case.name[len('fuzz_'):]}.h5"


def write(out: Path, finding, seed: int, port: str | None) -> Path:
    case = finding.case
    case.params = {**case.params, "fuzz": {"seed": seed, "found_after_s": round(finding.found_s, 2),
                                           "port": port or "bundled"}}
    path = fixture_path(out, finding)
    write_fixture(path, finding.layer, GENERATOR, seed, [case])
    finding.path = path
    return path


def write_mismatch(out: Path, layer: str, case, seed: int) -> Path:
    """A case where the reference port and the NumPy spec disagree, with the NumPy spec's
    bits as its exact tier: `crnn-conformance gate --port <the reference port> --fixtures
    OUT` reproduces the difference."""
    path = Path(out) / f"reference-mismatch-{layer}-{case.name[len('fuzz_'):]}.h5"
    write_fixture(path, layer, GENERATOR, seed, [case])
    return path


def gate_command(out: Path, finding, port: str | None) -> str:
    cmd = ["crnn-conformance", "gate", "--fixtures", str(out), "--layers", finding.layer,
           "--case", finding.case.name]
    if port:
        cmd[2:2] = ["--port", str(port)]
    return shlex.join(cmd)


def report(finding, port: str | None, out: Path, limit: int = 5) -> list[str]:
    """The lines printed for a finding: what, when, where written, then the gate's failure
    lines (their __REPRO: commands point at the written fixture)."""
    from ...reports.console import failure_line
    lines = [f"FOUND {finding.layer} after {finding.found_s:.1f} s ({finding.cases_before} "
             f"{finding.layer} cases), shrunk in {finding.shrunk_s:.1f} s: {finding.path}",
             f"  rerun it: {gate_command(out, finding, port)}"]
    lines += [failure_line(r) for r in finding.records[:limit]]
    if len(finding.records) > limit:
        lines.append(f"  (+{len(finding.records) - limit} more failing checks of this case)")
    return lines
