"""`crnn-conformance regen-fixtures`: the regen-fixtures command under the main one."""
from __future__ import annotations

import click

from .common import guarded


@click.command("regen-fixtures", context_settings={"ignore_unknown_options": True},
               add_help_option=False)      # (--help is regen-fixtures' own, with its options)
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def regen_fixtures(args):
    """Same as the `regen-fixtures` command."""
    standalone(args=list(args), prog_name="crnn-conformance regen-fixtures")


def standalone(args=None, prog_name=None):
    """The `regen-fixtures` entry point: generators.regen's command under the CLI's
    last-resort handler (one line and exit 2 for an unexpected error, 128 + N on a signal)."""
    from ...generators.regen import main as regen_main
    return guarded(regen_main).main(args=args, prog_name=prog_name or "regen-fixtures")
