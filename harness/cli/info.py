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
def info(port):
    """ISA paths of this CPU, the compiler and flags, the ABI version and the cache path."""
    from ...ctypes_kernels import build
    try:
        if port is None:
            d = build.describe()
            path = build.build()
        else:
            d, path = None, port if pyport.is_python_port(port) else Path(port)
        lib = pyport.load(port, ()) if pyport.is_python_port(port) else abi.load(path, layers=())
    except abi.PortError as e:
        cannot_run(str(e))
    from ..runner import cpu_info
    click.echo(f"cpu:          {platform.processor() or platform.machine()} ({cpu_info()['model']})")
    click.echo(f"port:         {path}")
    click.echo(f"abi version:  {lib.crnn_abi_version()} (harness speaks {abi.ABI_VERSION})")
    isas = lib.isa_names if isinstance(lib, pyport.PyPort) else abi.available_isas(lib)
    click.echo(f"isa paths:    {', '.join(isas)}")
    if d:
        click.echo(f"compiler:     {d['cc']} ({d['cc_version']})")
        click.echo(f"flags:        {d['opt']} {' '.join(d['base_flags'])}")
        for isa, flags in d["isa_flags"].items():
            click.echo(f"  {isa:<10}  {' '.join(flags) or '(baseline)'}")
        click.echo(f"cache:        {d['cache']}")
    click.echo(f"layers:       {', '.join(L.available())}")
