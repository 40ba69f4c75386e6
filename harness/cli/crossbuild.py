"""`crnn-conformance build-runner` and `build-port`: crnn-run and the bundled port for this
machine or, with a cross compiler, for another (docs/runner.md)."""
from __future__ import annotations

import os
from pathlib import Path

import click

from .common import cannot_run, writable_file

CC_HELP = "the C compiler, e.g. aarch64-linux-gnu-gcc for a cross build (default: CC, cc, gcc, clang)"


@click.command("build-runner")
@click.option("--cc", default=None, help=CC_HELP)
@click.option("--out", "out", required=True, type=click.Path(dir_okay=False),
              help="where to write the crnn-run executable")
@click.option("-v", "--verbose", is_flag=True, help="print the compiler command")
def build_runner(cc, out, verbose):
    """Build crnn-run (ctypes_kernels/runner/crnn_run.c, -O2 -ffp-contract=off), the case
    bundle runner for a port the gate cannot load here."""
    from ...ctypes_kernels import build, crossbuild
    writable_file(out, "--out")
    try:
        path = crossbuild.build_runner(out, cc=cc, verbose=verbose)
        arch = build.target_arch(build.find_compiler(cc))
    except build.BuildError as e:
        cannot_run(str(e))
    click.echo(f"crnn-run for {arch}: {os.fsdecode(path)}")


@click.command("build-port")
@click.option("--cc", default=None, help=CC_HELP)
@click.option("--out", "out", required=True, type=click.Path(dir_okay=False),
              help="where to write the shared library")
@click.option("-v", "--verbose", is_flag=True, help="print the compiler commands")
def build_port(cc, out, verbose):
    """Build the bundled port (ctypes_kernels/src/) as a shared library, natively or with a
    cross compiler (on a machine other than x86-64: its scalar path)."""
    from ...ctypes_kernels import build, crossbuild
    writable_file(out, "--out")
    try:
        cc = build.find_compiler(cc)
        note = "" if build.emulator(cc) is not None else (
            " (the floating-point probe was compiled, not run: no emulator for "
            f"{build.target_arch(cc)} here)")
        path = crossbuild.build_port(Path(out), cc=cc, verbose=verbose)
    except build.BuildError as e:
        cannot_run(str(e))
    click.echo(f"bundled port for {build.target_arch(cc)}: {os.fsdecode(path)}{note}")
