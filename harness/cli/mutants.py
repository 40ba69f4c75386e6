"""`crnn-conformance mutants`: gate the catalogue of porting mistakes."""
from __future__ import annotations

import sys
from pathlib import Path

import click

from ...ctypes_kernels import abi
from ...generators.h5io import FixtureError
from ..runner import FIXTURES_DIR

from .common import EXIT_FAIL, EXIT_PASS, cannot_run, parse_timeout


@click.command()
@click.option("--only", "only", multiple=True, metavar="NAME",
              help="gate only this mutant (repeatable; default: the whole catalogue)")
@click.option("--jobs", type=int, default=None,
              help="gate this many mutants at once (default: the number of CPUs, at most 4)")
@click.option("--full", is_flag=True,
              help="gate every mutant with the whole default gate (every tier, ISA and thread "
                   "count) instead of its plan")
@click.option("--skip-clean", is_flag=True,
              help="do not gate the clean port (its pass and margin are then not checked)")
@click.option("--fixtures", type=click.Path(file_okay=False), default=str(FIXTURES_DIR),
              show_default="fixtures/", help="fixture directory")
@click.option("--timeout", type=float, default=120.0, show_default=True,
              help="seconds one layer call on one case may take before it counts as a hang "
                   "(inf: no limit)")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None,
              help="also write the kill table as JSON to this file")
@click.option("--list", "list_only", is_flag=True, help="list the catalogue and exit")
@click.option("--sweep", type=click.IntRange(min=1), default=None, metavar="N",
              help="instead of the catalogue: N blind one-token mutants of the shipped C, "
                   "drawn at random, each through the whole gate; lists the survivors "
                   "(docs/mutants.md, \"The operator sweep\")")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True,
              help="--sweep: which N sites")
@click.option("--files", "files", default=None, metavar="REGEX",
              help="--sweep: only files whose path under ctypes_kernels/ matches, e.g. 'conv'")
def mutants(only, jobs, full, skip_clean, fixtures, timeout, json_path, list_only, sweep, seed,
            files):
    """Build each mutant (a realistic porting mistake, docs/mutants.md), gate it and print the
    kill table; exit 0 when every mutant is killed by its expected tiers and the clean port
    passes within 0.7 of its allowances, 1 otherwise, 2 when it cannot run. With --sweep:
    exit 0 when the sweep ran (its survivors are listed for reading), 2 when it cannot run."""
    import json
    import os

    from .. import mutants as M
    if sweep is not None:
        _sweep(sweep, seed, files, jobs, fixtures, timeout, json_path)
        return
    if list_only:
        for m in M.CATALOGUE:
            click.echo(f"{m.name:<24} {','.join(m.expect):<22} {m.mistake}")
        return
    unknown = [n for n in only if n not in M.BY_NAME]
    if unknown:
        cannot_run(f"unknown mutant(s) {', '.join(unknown)}; `crnn-conformance mutants --list` "
                   "names them")
    jobs = jobs if jobs is not None else max(1, min(4, os.cpu_count() or 1))
    if jobs < 1:
        cannot_run("--jobs must be at least 1")
    try:
        timeout = parse_timeout(timeout)
    except click.BadParameter as e:
        cannot_run(e.message)
    try:
        M.preflight(Path(fixtures))
    except (abi.PortError, FixtureError, ValueError) as e:
        cannot_run(str(e))
    tty = sys.stderr.isatty()
    progress = (lambda k: sys.stderr.write(f"  {k.name}: {k.seconds:.1f} s\n")) if tty else None
    clean, kills = M.run_catalogue(list(only) or None, Path(fixtures), full=full, jobs=jobs,
                                   timeout=timeout, clean=not skip_clean, progress=progress)
    click.echo(M.render(clean, kills))
    if json_path:
        doc = M.to_json(clean, kills)
        try:
            Path(json_path).write_text(json.dumps(doc, indent=1))
        except OSError as e:
            cannot_run(f"cannot write {json_path}: {e}")
    if clean is not None and clean.error:
        cannot_run(f"the clean port could not be gated: {clean.error.strip().splitlines()[-1]}")
    sys.exit(EXIT_PASS if M.passed(clean, kills) else EXIT_FAIL)


def _sweep(n, seed, files, jobs, fixtures, timeout, json_path):
    import json
    import os
    import re

    from ..mutants import preflight, sweep as S
    if files is not None:
        try:
            re.compile(files)
        except re.error as e:
            cannot_run(f"--files {files!r} is not a regular expression: {e}")
    jobs = jobs if jobs is not None else max(1, min(4, os.cpu_count() or 1))
    if jobs < 1:
        cannot_run("--jobs must be at least 1")
    try:
        timeout = parse_timeout(timeout)
        preflight(Path(fixtures))
    except click.BadParameter as e:
        cannot_run(e.message)
    except (abi.PortError, FixtureError, ValueError) as e:
        cannot_run(str(e))
    progress = ((lambda o: sys.stderr.write(f"  {o.verdict:<9} {o.site.id}: {o.seconds:.1f} s\n"))
                if sys.stderr.isatty() else None)
    total, outcomes = S.sweep(n, seed, files, Path(fixtures), jobs, timeout, progress)
    if not outcomes:
        cannot_run(f"no site in the files matching {files!r}")
    click.echo(S.render(total, outcomes, seed))
    if json_path:
        doc = {"seed": seed, "sites": total, "files": files,
               "outcomes": [o.to_dict() for o in outcomes]}
        try:
            Path(json_path).write_text(json.dumps(doc, indent=1))
        except OSError as e:
            cannot_run(f"cannot write {json_path}: {e}")
