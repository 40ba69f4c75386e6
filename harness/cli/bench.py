"""`crnn-conformance bench`: time the training step against PyTorch."""
from __future__ import annotations

import sys
from pathlib import Path

import click

from ...ctypes_kernels import abi

from .common import _split, cannot_run


@click.command()
@click.option("--isa", "isa", default=None, help="comma list of ISA paths (default: all available)")
@click.option("--threads", default="1,2", show_default=True, help="comma list of thread counts")
@click.option("--width", type=int, default=256, show_default=True, help="line width (height is 32)")
@click.option("--batch", type=int, default=4, show_default=True, help="lines per batch")
@click.option("--reps", type=int, default=10, show_default=True, help="timed repetitions (median)")
@click.option("--warmup", type=int, default=3, show_default=True, help="untimed repetitions first")
@click.option("--rounds", type=int, default=None,
              help="the repetitions in this many rounds of one block a side, each round's ratio "
                   "shown (default: 3, at most --reps)")
@click.option("--port", type=click.Path(dir_okay=False), default=None,
              help="shared library implementing crnn_port.h (default: the bundled kernels)")
@click.option("--cc", default=None, help="C compiler for the bundled kernels (default: $CC, cc, gcc, clang)")
@click.option("--opt", default=None, help="optimization level of the bundled kernels (default: the build's, -O2)")
@click.option("--against", type=click.Path(dir_okay=False), default=None,
              help="instead of PyTorch: a paired comparison of the step with this other port "
                   "(e.g. a build before a change); prints B - A per ISA x threads")
@click.option("--seconds", type=float, default=10.0, show_default=True,
              help="with --against: seconds of alternating blocks per case")
@click.option("--no-torch", is_flag=True, help="do not run PyTorch (ours alone)")
@click.option("--no-layers", is_flag=True, help="skip the per-layer timings")
@click.option("--no-memory", is_flag=True, help="skip the peak-memory measurement")
@click.option("--no-gate", is_flag=True, help="skip timing the gate")
@click.option("--fuzz-seconds", type=float, default=6.0, show_default=True,
              help="seconds of `fuzz` per layer for its cases per second (0: skip)")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None,
              help="also write the results as JSON")
def bench(isa, threads, width, batch, reps, warmup, rounds, port, cc, opt, against, seconds, no_torch,
          no_layers, no_memory, no_gate, fuzz_seconds, json_path):
    """Time the whole training step per ISA path x threads, side by side with PyTorch fp32."""
    import json

    from .. import bench as B
    try:
        isas = _split(isa, abi.ISA_NAMES, "ISA")
        ths = _split(threads, None, "thread count", int)
    except click.BadParameter as e:
        cannot_run(e.message)
    if not ths or any(t < 1 or t > 256 for t in ths):
        cannot_run("thread counts must be between 1 and 256")
    rounds = min(B.DEFAULT_ROUNDS, reps) if rounds is None else rounds
    if width < 4 or batch < 1 or reps < 1 or warmup < 0 or not 1 <= rounds <= reps:
        cannot_run("need --width >= 4, --batch >= 1, --reps >= 1, --warmup >= 0, "
                   "1 <= --rounds <= --reps")
    progress = (lambda label: click.echo(f"  ... {label}", err=True)) if sys.stderr.isatty() else None
    if against and not Path(against).is_file():
        cannot_run(f"--against: {against} not found")
    # bench times the port in this process; a port that crashes, exits or hangs while being
    # loaded is first found in a worker, as the gate loads it (one line, exit 2)
    for given in (port, against):
        if given:
            _probe(given)
    if against:
        if not Path(against).is_file():
            cannot_run(f"--against: {against} not found")
        try:
            from ...ctypes_kernels import build as KB
            base = Path(port) if port else KB.build(cc=cc, opt=opt or KB.DEFAULT_OPT)
            rows = B.paired(against, base, isas, tuple(ths), width, batch, seconds)
        except (abi.PortError, ValueError) as e:
            cannot_run(str(e))
        except abi.PortCallError as e:
            click.echo(f"bench: the port failed while being timed: {e}", err=True)
            sys.exit(1)
        click.echo(B.render_paired(rows, against, base))
        if json_path:
            try:
                Path(json_path).write_text(json.dumps({"paired": rows}, indent=1) + "\n")
            except OSError as e:
                cannot_run(f"cannot write {json_path}: {e}")
        return
    try:
        res = B.run(isas, tuple(ths), width, batch, reps, warmup, port, cc, opt,
                    with_torch=not no_torch, layers=not no_layers, memory=not no_memory,
                    gate=not no_gate, progress=progress, fuzz_seconds=max(0.0, fuzz_seconds),
                    rounds=rounds)
    except (abi.PortError, ValueError) as e:
        cannot_run(str(e))
    except abi.PortCallError as e:
        click.echo(f"bench: the port failed while being timed: {e}", err=True)
        sys.exit(1)
    click.echo(B.render(res))
    if json_path:
        try:
            Path(json_path).write_text(json.dumps(res.to_json(), indent=1) + "\n")
        except OSError as e:
            cannot_run(f"cannot write {json_path}: {e}")


PROBE_TIMEOUT = 120.0    # seconds a port may take to load (the gate's default --timeout)


def _probe(port) -> None:
    """Loads `port` in a worker process first (harness/sandbox/executor.probe): its crash,
    exit or hang while loading is one line and exit 2."""
    from ..sandbox.executor import probe
    try:
        probe(port, (), timeout=PROBE_TIMEOUT)
    except abi.PortError as e:
        cannot_run(str(e))
