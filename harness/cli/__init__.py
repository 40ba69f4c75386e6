"""crnn-conformance: the command line. One module per command (harness/cli/<command>.py);
the exit codes and shared option parsing are in common.py."""
from __future__ import annotations

import click

from . import bench, bundle, crossbuild, fuzz, gate, info, mutants, regen, reports
from .common import guarded


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="crnn-conformance")
def main():
    """Conformance gate for ports of the deterministic crnn-v0 training numerics."""


for _cmd in (gate.gate, reports.report, reports.diff, mutants.mutants, bench.bench, info.info,
             fuzz.fuzz, regen.regen_fixtures, bundle.export, bundle.grade):
    main.add_command(guarded(_cmd))
for _cmd in (crossbuild.build_runner, crossbuild.build_port):
    main.add_command(guarded(_cmd))


if __name__ == "__main__":
    main()
