"""The console scripts' entry points, kept apart from the CLI so that they take the signals
(SIGINT, SIGTERM, SIGHUP: exit 128 + N, no traceback) before the commands' imports start:
a signal during them has nothing to clean up."""
from __future__ import annotations

import signal
import sys

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _early(signum, frame):
    sys.stderr.write(f"crnn-conformance: interrupted by {signal.Signals(signum).name}\n")
    raise SystemExit(128 + signum)


def _take_signals() -> None:
    for s in SIGNALS:
        signal.signal(s, _early)


def main():
    """crnn-conformance."""
    _take_signals()
    from .cli import main as cli
    return cli()


def regen():
    """regen-fixtures."""
    _take_signals()
    from .cli.regen import standalone
    return standalone()
