"""`crnn-conformance gate`: run a port against the fixtures."""
from __future__ import annotations

import sys
from pathlib import Path

import click

from ...ctypes_kernels import abi
from ...generators.h5io import FixtureError
from .. import pyport
from .. import layers as L
from ..runner import FIXTURES_DIR, THREADS, TIERS, GateOptions, run_gate

from .common import (cannot_run, default_workers, draw_option, finish, fixture_dir, parse_timeout,
                     report_options, _split, stdout_bytes_as_given, writable_dir, writable_file)


@click.command()
@click.option("--port", type=click.Path(dir_okay=False), default=None,
              help="shared library implementing crnn_port.h, or a Python port FILE.py:OBJECT "
                   "or py:MODULE:OBJECT (docs/python-ports.md; default: the bundled kernels)")
@click.option("--fixtures", type=click.Path(file_okay=False), default=str(FIXTURES_DIR),
              show_default="fixtures/", help="fixture directory")
@draw_option
@click.option("--isa", "isa", default=None, help="comma list of ISA paths (default: all available)")
@click.option("--threads", default=",".join(map(str, THREADS)), show_default=True,
              help="comma list of thread counts for the identity tier")
@click.option("--runs", default=None, metavar="ISA:THREADS,...",
              help="exactly these runs, the first the base run the identity tier compares the "
                   "others with (instead of --isa and --threads), e.g. scalar:1,avx2:7")
@click.option("--tiers", default=",".join(TIERS), show_default=True, help="comma list of tiers")
@click.option("--layers", default=None,
              help="comma list of layers (default: all), or `available`: the layers whose "
                   "symbols the port exports (the others are reported as not implemented)")
@click.option("--case", default=None, help="only cases whose name matches this glob")
@report_options
@click.option("--timeout", type=float, default=120.0, show_default=True,
              help="seconds one layer call on one case may take before it counts as a hang "
                   "(inf: no limit)")
@click.option("--jobs", type=int, default=None,
              help="worker processes running cases side by side, each with its own copy of "
                   "the port (default: 2 on a machine with 2 or more CPUs, else 1)")
@click.option("--keep-going", is_flag=True,
              help="run every case of a layer, also after two of its cases hung in the same "
                   "entry point (by default the rest are reported as not run)")
@click.option("-q", "--quiet", is_flag=True, help="print only failures and the verdict")
@click.option("-v", "--verbose", is_flag=True,
              help="a row per tensor (default: per layer and tier), with each float64 / "
                   "pytorch check's resolution")
def gate(port, fixtures, draw, isa, threads, runs, tiers, layers, case, report_dir, junit_path,
         json_path, timeout, jobs, keep_going, quiet, verbose):
    """Run a port against the fixtures; exit 0 pass, 1 fail, 2 cannot run."""
    stdout_bytes_as_given()
    available = layers is not None and layers.strip() == "available"
    try:
        opts = GateOptions(
            port=port, fixtures=Path(fixtures),
            isas=_split(isa, pyport.isa_choices(port), "ISA"),
            threads=tuple(_split(threads, None, "thread count", int)),
            tiers=tuple(_split(tiers, TIERS, "tier")),
            layers=None if available else _split(layers, L.LAYERS, "layer"),
            case=case, timeout=parse_timeout(timeout), available=available,
            workers=default_workers() if jobs is None else jobs, keep_going=keep_going)
        if runs is not None:
            _select_runs(opts, runs, isa)
    except click.BadParameter as e:
        cannot_run(e.message)
    opts.fixtures, opts.draw = fixture_dir(fixtures, draw, opts.layers), draw
    if not 1 <= opts.workers <= 64:
        cannot_run(f"--jobs must be between 1 and 64 (got {opts.workers})")
    if any(t < 1 or t > 256 for t in opts.threads):
        cannot_run("thread counts must be between 1 and 256")
    if not opts.threads:
        cannot_run("--threads needs at least one thread count")
    if report_dir:                  # before the run: a report that cannot be written fails now
        writable_dir(report_dir, "--report-dir")
    for path, what in ((junit_path, "--junit"), (json_path, "--json")):
        if path:
            writable_file(path, what)
    progress = None if quiet or not sys.stderr.isatty() else _progress
    try:
        if opts.port is None:
            _build_bundled()
        result = run_gate(opts, progress)
    except (abi.PortError, FixtureError, ValueError) as e:
        cannot_run(str(e))
    from ...reports import json_report
    doc = json_report.to_json(result)
    if not doc["tensors"] and doc["meta"].get("not_implemented"):
        cannot_run(f"no check ran: port {result.meta['port']} implements none of the layers "
                   "of the cases selected (" + "; ".join(
                       f"{k}: {v}" for k, v in doc["meta"]["not_implemented"].items()) + ")")
    finish(doc, result.passed, report_dir, junit_path, json_path, quiet, verbose)


def _select_runs(opts: GateOptions, text: str, isa) -> None:
    """--runs ISA:THREADS,...: opts.runs, and opts.isas and opts.threads those of the runs."""
    source = click.get_current_context().get_parameter_source("threads")
    if isa is not None or source != click.core.ParameterSource.DEFAULT:
        raise click.BadParameter("--runs names the runs itself: give it without --isa and --threads")
    runs = []
    for item in _split(text, None, "run"):
        name, _, count = item.rpartition(":")
        if not name or not count.isdigit() or not 1 <= int(count) <= 256:
            raise click.BadParameter(f"--runs: {item!r} is not ISA:THREADS (ISA one of "
                                     f"{', '.join(abi.ISA_NAMES)}, or a Python port's config; "
                                     "THREADS 1 to 256)")
        if (name, int(count)) in runs:
            raise click.BadParameter(f"--runs names {item} twice")
        runs.append((name, int(count)))
    if not runs:
        raise click.BadParameter("no checks selected: --runs names nothing")
    opts.runs = runs
    opts.isas = list(dict.fromkeys(i for i, _ in runs))
    opts.threads = tuple(dict.fromkeys(t for _, t in runs))


def _build_bundled() -> None:
    """Builds the bundled kernels first, saying so on stderr when the cache is cold."""
    from ...ctypes_kernels import build
    build.build(notify=lambda: click.echo("building the bundled kernels (first run)...", err=True))


def _progress(done, total, label):
    width = 30
    fill = int(width * done / max(total, 1))
    sys.stderr.write(f"\r[{'#' * fill}{'.' * (width - fill)}] {done}/{total} {label:<40.40}")
    if done >= total:
        sys.stderr.write("\r" + " " * (width + 60) + "\r")
    sys.stderr.flush()
