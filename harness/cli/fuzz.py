"""`crnn-conformance fuzz`: property-based differential testing of a port (docs/fuzz.md)."""
from __future__ import annotations

import random
import sys
from pathlib import Path

import click
from ...ctypes_kernels import abi
from ...generators.h5io import FixtureError
from .. import pyport
from ..runner import THREADS

from .common import EXIT_FAIL, EXIT_PASS, _split, cannot_run, default_workers


@click.command()
@click.option("--port", type=click.Path(dir_okay=False), default=None,
              help="shared library implementing crnn_port.h, or a Python port FILE.py:OBJECT "
                   "or py:MODULE:OBJECT (docs/python-ports.md; default: the bundled kernels)")
@click.option("--layers", default=None, help="comma list of layers (default: every layer)")
@click.option("--seconds", type=float, default=60.0, show_default=True,
              help="wall-clock time to fuzz (shrinking a finding may add up to --shrink-seconds)")
@click.option("--seed", type=int, default=None,
              help="makes the run's cases deterministic (default: a random seed, printed)")
@click.option("--jobs", type=int, default=None,
              help="processes, each fuzzing its share of the layers (default: 2 with 2 or "
                   "more CPUs, else 1)")
@click.option("--out", type=click.Path(file_okay=False), default="fuzz-findings",
              show_default=True, help="directory the findings are written to, as fixtures")
@click.option("--isa", "isa", default=None, help="comma list of ISA paths (default: all available)")
@click.option("--threads", default=",".join(map(str, THREADS)), show_default=True,
              help="comma list of thread counts for the identity checks")
@click.option("--no-more-threads", is_flag=True,
              help="no extra thread count (by default --seed draws one of 4..64 that the "
                   "identity checks also run)")
@click.option("--timeout", type=float, default=30.0, show_default=True,
              help="seconds one layer call on one case may take before it counts as a hang")
@click.option("--shrink-seconds", type=float, default=10.0, show_default=True,
              help="time Hypothesis may spend shrinking a finding")
@click.option("--first", "stop_at_first", is_flag=True,
              help="stop at the first finding (every process; a finding another process "
                   "already made is still written and counted)")
@click.option("--no-database", is_flag=True,
              help="neither replay nor save failures in the example database (cache dir)")
@click.option("--numpy-spec", is_flag=True,
              help="golden bits from the NumPy spec on every case (slow), not the reference port")
def fuzz(port, layers, seconds, seed, jobs, out, isa, threads, no_more_threads, timeout,
         shrink_seconds, stop_at_first, no_database, numpy_spec):
    """Fuzz a port against the executable spec; exit 0 nothing found, 1 found, 2 cannot run."""
    from .. import fuzz as F
    from ..fuzz import strategies
    try:
        opts = F.FuzzOptions(
            port=port, layers=_split(layers, strategies.available(), "layer"),
            seconds=seconds, seed=random.randrange(2 ** 31) if seed is None else seed,
            out=Path(out), isas=_split(isa, pyport.isa_choices(port), "ISA"),
            threads=tuple(_split(threads, None, "thread count", int)),
            more_threads=not no_more_threads, timeout=timeout,
            database=not no_database, shrink_seconds=shrink_seconds, stop_at_first=stop_at_first,
            numpy_spec=numpy_spec)
    except click.BadParameter as e:
        cannot_run(e.message)
    if not opts.threads or any(t < 1 or t > 256 for t in opts.threads):
        cannot_run("thread counts must be between 1 and 256")
    jobs = default_workers() if jobs is None else jobs
    if not seconds > 0 or not timeout > 0 or shrink_seconds < 0 or jobs < 1:
        cannot_run("need --seconds > 0, --timeout > 0, --shrink-seconds >= 0, --jobs >= 1")
    if port and not pyport.is_python_port(port) and not Path(port).is_file():
        cannot_run(f"port library not found: {port}")
    click.echo(f"fuzz: seed {opts.seed}, {seconds:g} s, findings to {out}", err=True)
    try:
        result = F.run(opts, jobs)
    except (abi.PortError, FixtureError, ValueError, OSError, F.ReferenceMismatch) as e:
        cannot_run(str(e))
    except Exception as e:   # a harness bug (a strategy the spec rejects, ...): say so, exit 2
        cannot_run(f"harness error, please report it: {type(e).__name__}: {e}")
    click.echo(F.render(result))
    sys.exit(EXIT_FAIL if result.findings else EXIT_PASS)
