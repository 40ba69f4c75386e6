"""`crnn-conformance report` and `diff`: re-render and compare saved results."""
from __future__ import annotations

import math
import sys

import click

from ..runner import TIERS

from .common import EXIT_FAIL, EXIT_PASS, _split, cannot_run, write_reports


@click.command()
@click.argument("results", type=click.Path(dir_okay=False))
@click.option("--html", "html_dir", type=click.Path(file_okay=False), default=None,
              help="write index.html into this directory")
@click.option("--junit", "junit_path", type=click.Path(dir_okay=False), default=None,
              help="write JUnit XML to this file")
@click.option("-q", "--quiet", is_flag=True, help="print nothing but errors")
@click.option("-v", "--verbose", is_flag=True, help="table: a row per tensor, with each check's resolution")
def report(results, html_dir, junit_path, quiet, verbose):
    """Re-render the reports from a saved results.json: the console table when no output is
    asked for, else index.html and/or JUnit XML; exit 0 whatever the verdict, 2 when the file
    cannot be read or does not follow the schema. The verdict and counts are the records':
    where the file's `passed`, `summary` or `layers` say otherwise, a warning says so."""
    from ...reports import console, json_report
    doc = _load([results])[0]
    if not html_dir and not junit_path:
        click.echo(console.render(doc, quiet, verbose))
        return
    try:
        for path in write_reports(doc, html_dir, junit_path, results=False):
            if not quiet:
                click.echo(f"wrote {path}")
    except OSError as e:
        cannot_run(f"cannot write the reports: {e}")


@click.command()
@click.argument("old", type=click.Path(dir_okay=False))
@click.argument("new", type=click.Path(dir_okay=False))
@click.option("--fail-on-increase", type=float, default=None, metavar="X",
              help="exit 1 when any record's usage grew by more than X (a finite number "
                   "at least 0), a check that passed in OLD fails in NEW, or a check of OLD is "
                   "missing from NEW")
@click.option("--tiers", default=None, help="only these tiers (comma list; default all)")
@click.option("--all", "show_all", is_flag=True, help="list unchanged records too")
@click.option("--limit", type=int, default=None, help="list at most this many records")
def diff(old, new, fail_on_increase, tiers, show_all, limit):
    """Per-tensor usage changes from OLD to NEW results.json, largest increase first.

    Usage is |diff| / allowance for the float64 and pytorch tiers and the max ulp distance for
    exact and identity. Exit 0, or 1 with --fail-on-increase X when any usage grew by more
    than X, a check that passed in OLD fails in NEW, or a check of OLD is missing from NEW
    (lost coverage); 2 when a file cannot be read or does not follow the schema."""
    from ...reports import diff as D
    try:
        wanted = _split(tiers, TIERS, "tier")
    except click.BadParameter as e:
        cannot_run(e.message)
    if fail_on_increase is not None and not (math.isfinite(fail_on_increase)
                                             and fail_on_increase >= 0):
        cannot_run(f"--fail-on-increase wants a finite number at least 0, not {fail_on_increase:g}")
    a, b = _load([old, new])
    try:
        d = D.diff(a, b, wanted)
    except D.DuplicateCheck as e:
        cannot_run(str(e))
    click.echo(D.render(d, show_all, limit))
    if fail_on_increase is not None and d.fails(fail_on_increase):
        grew = d.increased(fail_on_increase)
        if grew:
            click.echo(f"usage increased by more than {fail_on_increase:g} in {len(grew)} "
                       f"check(s)", err=True)
        if d.regressed:
            click.echo(f"{len(d.regressed)} check(s) that passed in OLD fail in NEW", err=True)
        if d.removed:
            click.echo(f"{len(d.removed)} check(s) of OLD are missing from NEW (lost coverage)",
                       err=True)
        sys.exit(EXIT_FAIL)
    sys.exit(EXIT_PASS)


def _load(paths) -> list:
    """The results documents, validated (exit 2 naming the bad field); a warning on stderr for
    each claim of a file (`passed`, `summary`, `layers`) that its records contradict."""
    from ...reports import json_report
    docs, notes = [], []
    for path in paths:
        try:
            docs.append(json_report.load(path, notes))
        except json_report.ReportError as e:
            cannot_run(str(e))
    for note in notes:
        click.echo(f"crnn-conformance: warning: {note}", err=True)
    return docs
