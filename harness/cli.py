"""crnn-conformance: the command line.

Exit codes of `gate`: 0 every check passed; 1 a tensor failed (or the port crashed or hung
on a case); 2 the gate cannot run (no compiler, a port that cannot be loaded, a missing
symbol, a wrong ABI version, a missing/corrupt/stale fixture, a bad option).
"""
from __future__ import annotations

import platform
import sys
from pathlib import Path

import click

from ctypes_kernels import abi
from generators.h5io import FixtureError
from harness import layers as L
from harness.runner import FIXTURES_DIR, THREADS, TIERS, GateOptions, run_gate

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


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="crnn-conformance")
def main():
    """Conformance gate for ports of the deterministic crnn-v0 training numerics."""


@main.command()
@click.option("--port", type=click.Path(dir_okay=False), default=None,
              help="shared library implementing crnn_port.h (default: the bundled kernels)")
@click.option("--fixtures", type=click.Path(file_okay=False), default=str(FIXTURES_DIR),
              show_default="fixtures/", help="fixture directory")
@click.option("--isa", "isa", default=None, help="comma list of ISA paths (default: all available)")
@click.option("--threads", default=",".join(map(str, THREADS)), show_default=True,
              help="comma list of thread counts for the identity tier")
@click.option("--tiers", default=",".join(TIERS), show_default=True, help="comma list of tiers")
@click.option("--layers", default=None, help="comma list of layers (default: all)")
@click.option("--case", default=None, help="only cases whose name matches this glob")
@click.option("--report-dir", type=click.Path(file_okay=False), default=None,
              help="write results.json, index.html and junit.xml here")
@click.option("--junit", "junit_path", type=click.Path(dir_okay=False), default=None,
              help="also write JUnit XML to this file")
@click.option("--timeout", type=float, default=120.0, show_default=True,
              help="seconds one layer call on one case may take before it counts as a hang")
@click.option("-q", "--quiet", is_flag=True, help="print only failures and the verdict")
def gate(port, fixtures, isa, threads, tiers, layers, case, report_dir, junit_path, timeout, quiet):
    """Run a port against the fixtures; exit 0 pass, 1 fail, 2 cannot run."""
    try:
        opts = GateOptions(
            port=port, fixtures=Path(fixtures),
            isas=_split(isa, abi.ISA_NAMES, "ISA"),
            threads=tuple(_split(threads, None, "thread count", int)),
            tiers=tuple(_split(tiers, TIERS, "tier")),
            layers=_split(layers, L.LAYERS, "layer"),
            case=case, timeout=timeout)
    except click.BadParameter as e:
        cannot_run(e.message)
    if any(t < 1 or t > 256 for t in opts.threads):
        cannot_run("thread counts must be between 1 and 256")
    if not opts.threads:
        cannot_run("--threads needs at least one thread count")
    if not timeout > 0:
        cannot_run("--timeout must be a positive number of seconds")
    progress = None if quiet or not sys.stderr.isatty() else _progress
    try:
        result = run_gate(opts, progress)
    except (abi.PortError, FixtureError, ValueError) as e:
        cannot_run(str(e))
    from reports import console, json_report
    click.echo(console.render(result, quiet))
    if report_dir or junit_path:
        doc = json_report.to_json(result)
        try:
            for path in _write_reports(doc, report_dir, junit_path, results=True):
                if not quiet:
                    click.echo(f"wrote {path}")
        except OSError as e:
            cannot_run(f"cannot write the reports: {e}")
    sys.exit(EXIT_PASS if result.passed else EXIT_FAIL)


def _write_reports(doc, html_dir, junit_path, results: bool) -> list[Path]:
    from reports import html, json_report, junit
    written = []
    if html_dir:
        if results:
            written.append(json_report.write(doc, html_dir))
        written.append(html.write(doc, html_dir))
        if results:
            written.append(junit.write(doc, Path(html_dir) / "junit.xml"))
    if junit_path:
        written.append(junit.write(doc, junit_path))
    return written


@main.command()
@click.argument("results", type=click.Path(dir_okay=False))
@click.option("--html", "html_dir", type=click.Path(file_okay=False), default=None,
              help="write index.html into this directory")
@click.option("--junit", "junit_path", type=click.Path(dir_okay=False), default=None,
              help="write JUnit XML to this file")
@click.option("-q", "--quiet", is_flag=True, help="print nothing but errors")
def report(results, html_dir, junit_path, quiet):
    """Re-render the reports from a saved results.json; exit 0 whatever the verdict."""
    from reports import json_report
    if not html_dir and not junit_path:
        cannot_run("nothing to write: give --html DIR and/or --junit FILE")
    try:
        doc = json_report.load(results)
    except json_report.ReportError as e:
        cannot_run(str(e))
    try:
        for path in _write_reports(doc, html_dir, junit_path, results=False):
            if not quiet:
                click.echo(f"wrote {path}")
    except OSError as e:
        cannot_run(f"cannot write the reports: {e}")


@main.command()
@click.argument("old", type=click.Path(dir_okay=False))
@click.argument("new", type=click.Path(dir_okay=False))
@click.option("--fail-on-increase", type=float, default=None, metavar="X",
              help="exit 1 when any record's usage grew by more than X")
@click.option("--tiers", default=None, help="only these tiers (comma list; default all)")
@click.option("--all", "show_all", is_flag=True, help="list unchanged records too")
@click.option("--limit", type=int, default=None, help="list at most this many records")
def diff(old, new, fail_on_increase, tiers, show_all, limit):
    """Per-tensor usage changes from OLD to NEW results.json, largest increase first.

    Usage is |diff| / allowance for the float64 and pytorch tiers and the max ulp distance for
    exact and identity. Exit 0, or 1 with --fail-on-increase X when any usage grew by more
    than X; 2 when a file cannot be read."""
    from reports import diff as D
    from reports import json_report
    try:
        wanted = _split(tiers, TIERS, "tier")
    except click.BadParameter as e:
        cannot_run(e.message)
    try:
        a, b = json_report.load(old), json_report.load(new)
    except json_report.ReportError as e:
        cannot_run(str(e))
    d = D.diff(a, b, wanted)
    click.echo(D.render(d, show_all, limit))
    if fail_on_increase is not None and d.max_increase > fail_on_increase:
        click.echo(f"usage increased by more than {fail_on_increase:g}", err=True)
        sys.exit(EXIT_FAIL)
    sys.exit(EXIT_PASS)


@main.command()
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
              help="seconds one layer call on one case may take before it counts as a hang")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None,
              help="also write the kill table as JSON to this file")
@click.option("--list", "list_only", is_flag=True, help="list the catalogue and exit")
def mutants(only, jobs, full, skip_clean, fixtures, timeout, json_path, list_only):
    """Build each mutant (a realistic porting mistake, docs/mutants.md), gate it and print the
    kill table; exit 0 when every mutant is killed by its expected tiers and the clean port
    passes within half its allowances, 1 otherwise, 2 when it cannot run."""
    import json
    import os

    from harness import mutants as M
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
    if not timeout > 0:
        cannot_run("--timeout must be a positive number of seconds")
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
        doc = {"clean": clean.to_dict() if clean else None,
               "mutants": [k.to_dict() for k in kills], "passed": M.passed(clean, kills)}
        try:
            Path(json_path).write_text(json.dumps(doc, indent=1))
        except OSError as e:
            cannot_run(f"cannot write {json_path}: {e}")
    if clean is not None and clean.error:
        cannot_run(f"the clean port could not be gated: {clean.error.strip().splitlines()[-1]}")
    sys.exit(EXIT_PASS if M.passed(clean, kills) else EXIT_FAIL)


def _progress(done, total, label):
    width = 30
    fill = int(width * done / max(total, 1))
    sys.stderr.write(f"\r[{'#' * fill}{'.' * (width - fill)}] {done}/{total} {label:<40.40}")
    if done >= total:
        sys.stderr.write("\r" + " " * (width + 60) + "\r")
    sys.stderr.flush()


@main.command()
@click.option("--port", type=click.Path(dir_okay=False), default=None,
              help="describe this port instead of the bundled kernels")
def info(port):
    """ISA paths of this CPU, the compiler and flags, the ABI version and the cache path."""
    from ctypes_kernels import build
    try:
        if port is None:
            d = build.describe()
            path = build.build()
        else:
            d, path = None, Path(port)
        lib = abi.load(path, layers=())
    except abi.PortError as e:
        cannot_run(str(e))
    from harness.runner import cpu_info
    click.echo(f"cpu:          {platform.processor() or platform.machine()} ({cpu_info()['model']})")
    click.echo(f"port:         {path}")
    click.echo(f"abi version:  {lib.crnn_abi_version()} (harness speaks {abi.ABI_VERSION})")
    click.echo(f"isa paths:    {', '.join(abi.available_isas(lib))}")
    if d:
        click.echo(f"compiler:     {d['cc']} ({d['cc_version']})")
        click.echo(f"flags:        {d['opt']} {' '.join(d['base_flags'])}")
        for isa, flags in d["isa_flags"].items():
            click.echo(f"  {isa:<10}  {' '.join(flags) or '(baseline)'}")
        click.echo(f"cache:        {d['cache']}")
    click.echo(f"layers:       {', '.join(L.available())}")


@main.command()
@click.option("--isa", "isa", default=None, help="comma list of ISA paths (default: all available)")
@click.option("--threads", default="1,2", show_default=True, help="comma list of thread counts")
@click.option("--width", type=int, default=256, show_default=True, help="line width (height is 32)")
@click.option("--batch", type=int, default=4, show_default=True, help="lines per batch")
@click.option("--reps", type=int, default=10, show_default=True, help="timed repetitions (median)")
@click.option("--warmup", type=int, default=3, show_default=True, help="untimed repetitions first")
@click.option("--port", type=click.Path(dir_okay=False), default=None,
              help="shared library implementing crnn_port.h (default: the bundled kernels)")
@click.option("--cc", default=None, help="C compiler for the bundled kernels (default: $CC, cc, gcc, clang)")
@click.option("--opt", default=None, help="optimization level of the bundled kernels (default: the build's, -O2)")
@click.option("--against", type=click.Path(dir_okay=False), default=None,
              help="instead of PyTorch: a paired comparison of the step with this other port "
                   "(e.g. a build before a change); prints B - A per ISA x threads")
@click.option("--seconds", type=float, default=10.0, show_default=True,
              help="with --against: seconds of alternating blocks per case")
@click.option("--no-torch", is_flag=True, help="do not run PyTorch (ours alone)")
@click.option("--no-layers", is_flag=True, help="skip the per-layer timings")
@click.option("--no-memory", is_flag=True, help="skip the peak-memory measurement")
@click.option("--no-gate", is_flag=True, help="skip timing the gate")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None,
              help="also write the results as JSON")
def bench(isa, threads, width, batch, reps, warmup, port, cc, opt, against, seconds, no_torch,
          no_layers, no_memory, no_gate, json_path):
    """Time the whole training step per ISA path x threads, side by side with PyTorch fp32."""
    import json

    from harness import bench as B
    try:
        isas = _split(isa, abi.ISA_NAMES, "ISA")
        ths = _split(threads, None, "thread count", int)
    except click.BadParameter as e:
        cannot_run(e.message)
    if not ths or any(t < 1 or t > 256 for t in ths):
        cannot_run("thread counts must be between 1 and 256")
    if width < 4 or batch < 1 or reps < 1 or warmup < 0:
        cannot_run("need --width >= 4, --batch >= 1, --reps >= 1, --warmup >= 0")
    progress = (lambda label: click.echo(f"  ... {label}", err=True)) if sys.stderr.isatty() else None
    if against:
        if not Path(against).is_file():
            cannot_run(f"--against: {against} not found")
        try:
            from ctypes_kernels import build as KB
            base = Path(port) if port else KB.build(cc=cc, opt=opt or KB.DEFAULT_OPT)
            rows = B.paired(against, base, isas, tuple(ths), width, batch, seconds)
        except (abi.PortError, ValueError) as e:
            cannot_run(str(e))
        except abi.PortCallError as e:
            click.echo(f"bench: the port failed while being timed: {e}", err=True)
            sys.exit(1)
        click.echo(B.render_paired(rows, against, base))
        if json_path:
            try:
                Path(json_path).write_text(json.dumps({"paired": rows}, indent=1) + "\n")
            except OSError as e:
                cannot_run(f"cannot write {json_path}: {e}")
        return
    try:
        res = B.run(isas, tuple(ths), width, batch, reps, warmup, port, cc, opt,
                    with_torch=not no_torch, layers=not no_layers, memory=not no_memory,
                    gate=not no_gate, progress=progress)
    except (abi.PortError, ValueError) as e:
        cannot_run(str(e))
    except abi.PortCallError as e:
        click.echo(f"bench: the port failed while being timed: {e}", err=True)
        sys.exit(1)
    click.echo(B.render(res))
    if json_path:
        try:
            Path(json_path).write_text(json.dumps(res.to_json(), indent=1) + "\n")
        except OSError as e:
            cannot_run(f"cannot write {json_path}: {e}")


@main.command("regen-fixtures", context_settings={"ignore_unknown_options": True})
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def regen_fixtures(args):
    """Same as the `regen-fixtures` command."""
    from generators.regen import main as regen_main
    regen_main.main(args=list(args), prog_name="crnn-conformance regen-fixtures")


if __name__ == "__main__":
    main()
