"""What every command shares: exit codes, option parsing, the cannot-run message, the
report-directory check, and the last-resort handler every command runs under.

Exit codes of `gate`: 0 every check passed; 1 a tensor failed (or the port crashed or hung
on a case); 2 the gate cannot run (no compiler, a port that cannot be loaded, a missing
symbol, a wrong ABI version, a missing/corrupt/stale fixture, a bad option, nothing
selected, an internal error); 128 + N when ended by signal N (SIGINT 130, SIGTERM 143,
SIGHUP 129).
"""
from __future__ import annotations

import math
import os
import signal
import sys
import tempfile
import time
import traceback
from contextlib import contextmanager
from pathlib import Path

import click

EXIT_PASS, EXIT_FAIL, EXIT_CANNOT_RUN = 0, 1, 2
MAX_TIMEOUT = 1e6     # seconds (11.6 days); more is a typo: `inf` says "no limit"
MAX_DRAW = 2 ** 63 - 1   # a draw's N is stored as a 64-bit integer attribute
SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _split(value, allowed=None, name="value", conv=str):
    if value is None:
        return None
    items = [v.strip() for v in value.split(",") if v.strip()]
    if allowed is not None:
        bad = [v for v in items if v not in allowed]
        if bad:
            raise click.BadParameter(f"unknown {name} {', '.join(bad)}; choose from {', '.join(allowed)}")
    try:
        return [conv(v) for v in items]
    except ValueError:
        raise click.BadParameter(f"{value!r} is not a comma-separated list of {name}s") from None


def default_workers() -> int:
    """The gate's worker processes: 2 when this process may run on 2 or more CPUs, else 1."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    return 2 if cpus >= 2 else 1


def parse_timeout(seconds: float) -> float | None:
    """--timeout: a number of seconds in (0, MAX_TIMEOUT], or inf for no limit (None)."""
    if seconds == math.inf:
        return None
    if not (0 < seconds <= MAX_TIMEOUT):     # NaN fails both comparisons
        raise click.BadParameter(f"--timeout {seconds!r}: give a number of seconds > 0 and "
                                 f"<= {MAX_TIMEOUT:g}, or inf for no limit")
    return seconds


def stdout_bytes_as_given() -> None:
    """A path that is not UTF-8 (kept by Python as surrogates) is printed as its own bytes, so
    a __REPRO: line reruns exactly that path (stderr already escapes them)."""
    try:
        sys.stdout.reconfigure(errors="surrogateescape")
    except (AttributeError, ValueError):
        pass


def cannot_run(message: str):
    click.echo(f"crnn-conformance: cannot run: {message}", err=True)
    sys.exit(EXIT_CANNOT_RUN)


def writable_dir(path, what: str) -> None:
    """Creates `path` if needed and proves it writable (before a run, not after it)."""
    try:
        p = Path(path)
        p.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=p, prefix=".crnn-write-check-")
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        cannot_run(f"{what} {os.fsdecode(path)!r} is not a writable directory "
                   f"({e.strerror or e})")


def writable_file(path, what: str) -> None:
    p = Path(path)
    if p.is_dir():
        cannot_run(f"{what} {os.fsdecode(path)!r} is a directory")
    writable_dir(p.parent if str(p.parent) else Path("."), f"the directory of {what}")
    if p.exists() and not os.access(p, os.W_OK):
        cannot_run(f"{what} {os.fsdecode(path)!r} is not writable")


def report_options(cmd):
    """--report-dir, --junit and --json: where gate and grade write their reports."""
    for opt in reversed((
            click.option("--report-dir", type=click.Path(file_okay=False), default=None,
                         help="write results.json, index.html and junit.xml here"),
            click.option("--junit", "junit_path", type=click.Path(dir_okay=False), default=None,
                         help="also write JUnit XML to this file"),
            click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None,
                         help="also write results.json to this file"))):
        cmd = opt(cmd)
    return cmd


def draw_option(cmd):
    """--draw N: gate, export and grade on fresh draw N of the fixtures instead of --fixtures."""
    return click.option("--draw", type=click.IntRange(min=0, max=MAX_DRAW), default=None,
                        metavar="N",
                        help="fresh draw N of the fixtures (every one but the pytorch tier's), "
                             "drawn into the cache on first use; instead of --fixtures "
                             "(docs/fixtures.md, \"A fresh draw\")")(cmd)


def fixture_dir(fixtures, draw, layers) -> Path:
    """--fixtures, or the directory of draw N of `layers`' fixtures (None: every layer), drawn
    on first use; exit 2 when both are given or the cache cannot be written."""
    if draw is None:
        return Path(fixtures)
    source = click.get_current_context().get_parameter_source("fixtures")
    if source != click.core.ParameterSource.DEFAULT:
        cannot_run("--draw makes its own fixture directory: give --draw or --fixtures, not both")
    from ...generators import regen
    try:
        return regen.drawn(draw, layers, progress=lambda m: click.echo(m, err=True))
    except regen.DrawError as e:
        cannot_run(str(e))


def finish(doc, passed: bool, report_dir, junit_path, json_path, quiet, verbose) -> None:
    """gate's and grade's end: the console table, the reports, the exit code (0 pass, 1 fail;
    2 when a report cannot be written and everything passed: a FAIL stays exit 1)."""
    from ...reports import console
    check_interrupted()              # no verdict printed for a run a signal ended
    click.echo(console.render(doc, quiet, verbose))
    code = EXIT_PASS if passed else EXIT_FAIL
    try:
        for path in write_reports(doc, report_dir, junit_path, results=True, json_path=json_path):
            if not quiet:
                click.echo(f"wrote {path}")
    except OSError as e:
        click.echo(f"crnn-conformance: cannot write the reports: {e}", err=True)
        code = code or EXIT_CANNOT_RUN
    sys.exit(code)


def write_reports(doc, html_dir, junit_path, results: bool, json_path=None) -> list[Path]:
    from ...reports import html, json_report, junit
    written = [json_report.write_file(doc, json_path)] if json_path else []
    if html_dir:
        if results:
            written.append(json_report.write(doc, html_dir))
        written.append(html.write(doc, html_dir))
        if results:
            written.append(junit.write(doc, Path(html_dir) / "junit.xml"))
    if junit_path:
        written.append(junit.write(doc, junit_path))
    return written


class Interrupted(BaseException):
    """A signal ended the command (SIGINT, SIGTERM, SIGHUP): unwinds every `with` (the gate's
    worker is killed on the way out), then exit 128 + the signal number."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


_PENDING: list = []     # the signals taken: kept, in case the raise lands where Python drops it


def _raise(signum, frame):
    _PENDING.append(signum)
    raise Interrupted(signum)


def check_interrupted() -> None:
    """Raises Interrupted for a signal taken earlier whose raise was lost: one that arrived
    while a weakref callback or __del__ ran, where Python prints the exception and goes on."""
    if _PENDING:
        raise Interrupted(_PENDING[0])


@contextmanager
def last_resort(command: str):
    """Every command runs under this: a signal exits 128 + N after cleaning up; an unexpected
    exception (a bug: every expected problem has its own message) becomes one line and exit 2,
    the traceback going to a log file under the cache directory."""
    _PENDING.clear()
    previous = {s: signal.signal(s, _raise) for s in SIGNALS}
    hook = sys.unraisablehook
    sys.unraisablehook = lambda u: None if isinstance(u.exc_value, Interrupted) else hook(u)
    try:
        try:
            yield
        except SystemExit:
            check_interrupted()      # a lost signal outranks the verdict
            raise
        check_interrupted()
    except Interrupted as e:
        click.echo(f"crnn-conformance: {command}: interrupted by {signal.Signals(e.signum).name}",
                   err=True)
        sys.exit(128 + e.signum)
    except (SystemExit, click.exceptions.ClickException, click.exceptions.Exit,
            click.exceptions.Abort):
        raise
    except BrokenPipeError:          # the reader of stdout went away (`| head`): as a shell's
        devnull = os.open(os.devnull, os.O_WRONLY)     # command does, end quietly with SIGPIPE's
        os.dup2(devnull, sys.stdout.fileno())          # 128 + 13 (nothing more can be printed)
        sys.exit(128 + signal.SIGPIPE)
    except Exception as e:
        log = _log_traceback(command)
        where = f"the traceback is in {log}" if log else "no log could be written"
        click.echo(f"crnn-conformance: cannot run: internal error in {command} "
                   f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}); "
                   f"please report it ({where})", err=True)
        sys.exit(EXIT_CANNOT_RUN)
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
        sys.unraisablehook = hook


def _log_traceback(command: str) -> str | None:
    from ...ctypes_kernels.build import cache_dir
    text = f"crnn-conformance {command}: {' '.join(map(os.fsdecode, sys.argv))}\n" + traceback.format_exc()
    name = f"crash-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log"
    for d in (cache_dir().parent / "logs", Path(tempfile.gettempdir())):
        try:
            d.mkdir(parents=True, exist_ok=True)
            (d / name).write_text(text, errors="backslashreplace")
            return str(d / name)
        except OSError:
            continue
    return None


def guarded(cmd: click.Command) -> click.Command:
    """Makes `cmd` run under last_resort (every command of the CLI, and regen-fixtures)."""
    if getattr(cmd, "_crnn_guarded", False):
        return cmd
    inner = cmd.invoke
    cmd._crnn_guarded = True

    def invoke(ctx):
        with last_resort(cmd.name or "crnn-conformance"):
            return inner(ctx)

    cmd.invoke = invoke
    return cmd
