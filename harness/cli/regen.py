"""`crnn-conformance regen-fixtures`: the regen-fixtures command under the main one."""
from __future__ import annotations

import click


@click.command("regen-fixtures", context_settings={"ignore_unknown_options": True})
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def regen_fixtures(args):
    """Same as the `regen-fixtures` command."""
    from crnn_conformance.generators.regen import main as regen_main
    regen_main.main(args=list(args), prog_name="crnn-conformance regen-fixtures")
