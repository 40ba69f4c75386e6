"""What every command shares: exit codes, option parsing, the cannot-run message.

Exit codes of `gate`: 0 every check passed; 1 a tensor failed (or the port crashed or hung
on a case); 2 the gate cannot run (no compiler, a port that cannot be loaded, a missing
symbol, a wrong ABI version, a missing/corrupt/stale fixture, a bad option).
"""
from __future__ import annotations

import sys
from pathlib import Path

import click

EXIT_PASS, EXIT_FAIL, EXIT_CANNOT_RUN = 0, 1, 2


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


def cannot_run(message: str):
    click.echo(f"crnn-conformance: cannot run: {message}", err=True)
    sys.exit(EXIT_CANNOT_RUN)


def write_reports(doc, html_dir, junit_path, results: bool, json_path=None) -> list[Path]:
    from crnn_conformance.reports import html, json_report, junit
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
