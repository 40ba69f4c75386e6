"""`crnn-conformance export` and `grade`: the gate's cases as a bundle for a runner on another
machine, and that runner's results judged as the gate judges (docs/case-bundle.md)."""
from __future__ import annotations

import fnmatch
import sys
import time
from pathlib import Path

import click

from ...ctypes_kernels import abi
from ...generators.h5io import FixtureError, read_fixture
from .. import layers as L
from ..runner import FIXTURES_DIR, TIERS, GateOptions

from .common import (EXIT_PASS, cannot_run, draw_option, finish, fixture_dir, report_options,
                     _split, stdout_bytes_as_given, writable_dir, writable_file)


# The tiers a results file can be judged in: the contract tier calls the port with invalid
# arguments, which a bundle does not carry (gate --port checks it in process).
GRADE_TIERS = tuple(t for t in TIERS if t != "contract")

@click.command("export")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), required=True,
              help="the bundle's directory (bundle.json, cases.bin)")
@click.option("--layers", default=None, help="comma list of layers (default: all)")
@click.option("--case", default=None, help="only cases whose name matches this glob")
@click.option("--fixtures", type=click.Path(file_okay=False), default=str(FIXTURES_DIR),
              show_default="fixtures/", help="fixture directory")
@draw_option
@click.option("-q", "--quiet", is_flag=True, help="print only refused cases and the summary")
def export(out_dir, layers, case, fixtures, draw, quiet):
    """Write the selected cases as a case bundle: each case's calls, arguments and input
    bytes, no expected outputs; exit 0, 2 cannot run."""
    from .. import bundle as B
    from .. import reference
    from ..discovery import fixture_paths
    from ..provenance import sha256, tool_info
    t0 = time.perf_counter()
    try:
        names = _split(layers, L.LAYERS, "layer") or L.available()
    except click.BadParameter as e:
        cannot_run(e.message)
    writable_dir(out_dir, "--out")
    opts = GateOptions(fixtures=fixture_dir(fixtures, draw, names), layers=names, case=case,
                       draw=draw)
    try:
        selection, digests = [], {}
        for name in names:
            m = L.module(name)
            for path in fixture_paths(opts, m):
                fx = L.check_fixture(m, read_fixture(path))
                digests[path.name] = sha256(path)
                selection += [(m, path, c) for c in fx.cases
                              if case is None or fnmatch.fnmatch(c.name, case)]
        if not selection:
            raise ValueError(f"no checks selected: no case of {', '.join(names)} matches "
                             f"--case {case!r}")
        lib = reference.library()
    except (FixtureError, ValueError, abi.PortError) as e:
        cannot_run(str(e))
    cases, refused = B.export_cases(selection, lib)
    for layer, fx, name, why in refused:
        click.echo(f"refused {layer}/{fx}/{name}: {why}", err=True)
    meta = {"tool": tool_info(), "fixtures": digests, "layers": names, "case": case, "draw": draw,
            "refused": [{"layer": a, "fixture": b, "case": c, "why": w} for a, b, c, w in refused]}
    out = B.write_bundle(out_dir, cases, meta)
    size = (out / "cases.bin").stat().st_size
    click.echo(f"wrote {out}: {len(cases)} case(s) of {len({c.layer for c in cases})} layer(s), "
               f"cases.bin {size / 1e6:.1f} MB, {time.perf_counter() - t0:.1f} s"
               + (f"; {len(refused)} case(s) refused (listed above and in bundle.json)"
                  if refused else ""))
    sys.exit(EXIT_PASS)


@click.command("grade")
@click.argument("bundle_dir", metavar="BUNDLE", type=click.Path())
@click.argument("results", nargs=-1, required=True, type=click.Path())
@click.option("--fixtures", type=click.Path(file_okay=False), default=str(FIXTURES_DIR),
              show_default="fixtures/", help="fixture directory the bundle was exported from")
@draw_option
@click.option("--layers", default=None,
              help="comma list of layers (default: the bundle's), or `available`: the layers "
                   "the results hold runs of (the others are reported as not implemented)")
@click.option("--case", default=None, help="only cases whose name matches this glob")
@click.option("--tiers", default=",".join(GRADE_TIERS), show_default=True,
              help="comma list of tiers (not contract: its invalid calls need the port in "
                   "process, gate --port)")
@click.option("--isa", "isa", default=None,
              help="comma list of runs to grade: machine:isa labels (x86_64:avx2) or ISA names")
@click.option("--threads", default=None, help="comma list of thread counts to grade")
@report_options
@click.option("-q", "--quiet", is_flag=True, help="print only failures and the verdict")
@click.option("-v", "--verbose", is_flag=True,
              help="also print each float64 / pytorch check's resolution")
def grade(bundle_dir, results, fixtures, draw, layers, case, tiers, isa, threads, report_dir,
          junit_path, json_path, quiet, verbose):
    """Judge a runner's results files of a case bundle as the gate judges a port: exit 0
    pass, 1 fail, 2 cannot run."""
    from .. import grade as G
    from ..bundle import BundleError
    stdout_bytes_as_given()
    available = layers is not None and layers.strip() == "available"
    if "contract" in (_split(tiers) or []):
        cannot_run("grade has no contract tier: its invalid calls are not in a bundle and need "
                   "the port in process (crnn-conformance gate --port PORT --tiers contract)")
    try:
        opts = G.GradeOptions(
            fixtures=Path(fixtures), tiers=tuple(_split(tiers, GRADE_TIERS, "tier")),
            layers=None if available else _split(layers, L.LAYERS, "layer"), case=case,
            available=available, bundle=bundle_dir, results=tuple(results),
            isa_filter=_split(isa), thread_filter=_split(threads, None, "thread count", int))
    except click.BadParameter as e:
        cannot_run(e.message)
    if any(t < 1 or t > 256 for t in opts.thread_filter or ()):
        cannot_run("thread counts must be between 1 and 256")
    index = _bundle_index(bundle_dir)
    draw = _bundle_draw(index, draw)
    opts.fixtures, opts.draw = fixture_dir(fixtures, draw, _bundle_layers(index)), draw
    if report_dir:
        writable_dir(report_dir, "--report-dir")
    for path, what in ((junit_path, "--junit"), (json_path, "--json")):
        if path:
            writable_file(path, what)
    try:
        result = G.grade(opts)
    except (BundleError, FixtureError, ValueError, abi.PortError) as e:
        cannot_run(str(e))
    from ...reports import json_report
    doc = json_report.to_json(result)
    refused = result.meta["bundle"].get("refused") or []
    if refused:                     # cases the gate runs that the bundle could not carry
        click.echo(f"crnn-conformance: grade: {len(refused)} case(s) were refused at export "
                   "and are not graded: " + ", ".join(f"{r['layer']}/{r['fixture']}/{r['case']}"
                                                     for r in refused), err=True)
    if not doc["tensors"] and doc["meta"].get("not_implemented"):
        cannot_run("no check ran: the results implement none of the layers of the cases "
                   "selected (" + "; ".join(f"{k}: {v}" for k, v in
                                            doc["meta"]["not_implemented"].items()) + ")")
    finish(doc, result.passed, report_dir, junit_path, json_path, quiet, verbose)


def _bundle_index(bundle_dir) -> dict:
    """bundle.json's fields, {} when it cannot be read: grade then names what is wrong with
    the bundle."""
    import json
    try:
        index = json.loads((Path(bundle_dir) / "bundle.json").read_text())
    except (OSError, ValueError):
        return {}
    return index if isinstance(index, dict) else {}


def _bundle_draw(index: dict, draw):
    """--draw as the bundle needs it: the bundle's own draw when neither --draw nor --fixtures
    is given; exit 2, before anything is drawn, when --draw names another draw than the one
    the bundle was exported from. A bundle that does not record its draw: --draw as given."""
    if "draw" not in index:
        return draw
    want = index["draw"]
    if draw is None and want is not None and click.get_current_context().get_parameter_source(
            "fixtures") == click.core.ParameterSource.DEFAULT:
        click.echo(f"crnn-conformance: grade: the bundle was exported from draw {want} of the "
                   f"fixtures; grading against draw {want}", err=True)
        return want
    if draw is not None and draw != want:
        cannot_run(f"--draw {draw}: the bundle was exported from "
                   + (f"draw {want} (grade it with --draw {want})" if want is not None else
                      "fixtures that are not a draw (grade it without --draw)"))
    return draw


def _bundle_layers(index: dict) -> list | None:
    """The layers a bundle was exported with, so --draw draws only theirs; None (every layer)
    when the bundle does not say."""
    layers = index.get("layers")
    return layers if isinstance(layers, list) and all(isinstance(x, str) for x in layers) else None
