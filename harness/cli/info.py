"""`crnn-conformance info`: this CPU, the compiler and the port."""
from __future__ import annotations

import platform
from pathlib import Path

import click

from ...ctypes_kernels import abi
from .. import layers as L
from .. import pyport

from .common import cannot_run


@click.command()
@click.option("--port", type=click.Path(dir_okay=False), default=None,
              help="describe this port instead of the bundled kernels")
@click.option("--timeout", type=float, default=120.0, show_default=True,
              help="seconds the port may take to load (it is loaded in a worker process, as "
                   "the gate loads it)")
def info(port, timeout):
    """ISA paths of this CPU, the compiler and flags, the ABI version and the cache path."""
    from ...ctypes_kernels import build
    from ..sandbox.executor import probe
    if not timeout > 0:
        cannot_run("--timeout must be a number of seconds above 0")
    try:
        if port is None:
            d = build.describe()
            path = build.build()
            lib = abi.load(path, layers=())
            version, isas = lib.crnn_abi_version(), abi.available_isas(lib)
        else:
            # a port that crashes, exits or hangs while loading must not take `info` with it:
            # it is loaded in a worker, as the gate does (one line, exit 2)
            d, path = None, port if pyport.is_python_port(port) else Path(port)
            loaded = probe(port, (), timeout=None if timeout == float("inf") else timeout)
            version, isas = loaded["abi_version"], loaded["isas"]
    except abi.PortError as e:
        cannot_run(str(e))
    from ..runner import cpu_info
    click.echo(f"cpu:          {platform.processor() or platform.machine()} ({cpu_info()['model']})")
    click.echo(f"port:         {path}")
    click.echo(f"abi version:  {version} (harness speaks {abi.ABI_VERSION})")
    click.echo(f"isa paths:    {', '.join(isas)}")
    if d:
        click.echo(f"compiler:     {d['cc']} ({d['cc_version']})")
        click.echo(f"flags:        {d['opt']} {' '.join(d['base_flags'])}")
        for isa, flags in d["isa_flags"].items():
            click.echo(f"  {isa:<10}  {' '.join(flags) or '(baseline)'}")
        click.echo(f"cache:        {d['cache']}")
    click.echo(f"layers:       {', '.join(L.available())}")
