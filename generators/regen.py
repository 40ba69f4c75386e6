"""regen-fixtures: (re)writes every fixture in fixtures/ from the generators, deterministically.

    regen-fixtures                 # all fixtures
    regen-fixtures --only linear   # one (repeatable)
    regen-fixtures --check         # regenerate into a temp dir, exit 1 naming any that differ

Nothing in fixtures/ changes unless this command is asked to write it.
"""
from __future__ import annotations

import importlib
import sys
import tempfile
import time
from pathlib import Path

import click
import h5py
import numpy as np

from generators.h5io import FixtureError, write_fixture

ROOT = Path(__file__).resolve().parent.parent
FIXTURES_DIR = ROOT / "fixtures"

# fixture name -> builder module (generators/cases/<layer>.py); order is the write order
BUILDERS = {
    "dot16": "generators.cases.dot16",
    "linear": "generators.cases.linear",
    "lstm": "generators.cases.lstm",
    "conv": "generators.cases.conv",
    "ctc": "generators.cases.ctc",
    "step": "generators.cases.step",
    "clip": "generators.cases.clip",
    "adamw": "generators.cases.adamw",
    "train3": "generators.cases.train3",
}


def fixture_path(root: Path, name: str) -> Path:
    return Path(root) / f"{name}.h5"


def regenerate(name: str, root: Path) -> Path:
    mod = importlib.import_module(BUILDERS[name])
    cases = mod.build()
    path = fixture_path(root, name)
    write_fixture(path, mod.LAYER, mod.__name__, mod.SEED, cases,
                  getattr(mod, "EXTRA_ATTRS", None))
    return path


# float64 reference values may differ in the last bits on another CPU (BLAS and NumPy's
# SIMD reductions pick their summation order by CPU): --check allows them this relative slack.
FLOAT64_CHECK_RTOL = 1e-12


def differences(old: Path, new: Path) -> list[str]:
    """Names the datasets of `new` that differ from `old` (bitwise; float64 tier: 1e-12)."""
    if old.read_bytes() == new.read_bytes():
        return []
    out = []
    try:
        fo = h5py.File(old, "r")
    except OSError as e:
        return [f"unreadable ({e})"]
    with fo, h5py.File(new, "r") as fn:
        names = []
        fn.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) else None)
        for n in names:
            if n not in fo:
                out.append(f"{n}: missing in the checked-in file")
                continue
            a, b = fo[n][()], fn[n][()]
            if np.shape(a) != np.shape(b) or np.asarray(a).dtype != np.asarray(b).dtype:
                out.append(f"{n}: shape/dtype changed")
            elif "/float64/" in n:
                if not np.allclose(a, b, rtol=FLOAT64_CHECK_RTOL, atol=0, equal_nan=True):
                    out.append(f"{n}: float64 values differ beyond {FLOAT64_CHECK_RTOL}")
            elif np.asarray(a).tobytes() != np.asarray(b).tobytes():
                out.append(f"{n}: bits differ")
        extra = []
        fo.visititems(lambda n, o: extra.append(n) if isinstance(o, h5py.Dataset) and n not in fn else None)
        out += [f"{n}: no longer generated" for n in extra]
    return out


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--only", "only", multiple=True, metavar="NAME",
              help=f"regenerate only these fixtures ({', '.join(BUILDERS)})")
@click.option("--check", is_flag=True, help="regenerate into a temp dir; exit 1 if any differs")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default=None,
              help="write here instead of fixtures/")
@click.option("-q", "--quiet", is_flag=True, help="no progress output")
def main(only, check, out_dir, quiet):
    """(Re)write the checked-in fixtures deterministically."""
    names = list(only) or list(BUILDERS)
    unknown = [n for n in names if n not in BUILDERS]
    if unknown:
        click.echo(f"regen-fixtures: unknown fixture(s) {', '.join(unknown)}; "
                   f"known: {', '.join(BUILDERS)}", err=True)
        sys.exit(2)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) if check else Path(out_dir or FIXTURES_DIR)
        stale = []
        with click.progressbar(names, label="regen-fixtures", file=sys.stderr,
                               item_show_func=lambda n: n or "",
                               show_pos=True) if not quiet else _Plain(names) as bar:
            for name in bar:
                t0 = time.perf_counter()
                path = regenerate(name, root)
                dt = time.perf_counter() - t0
                if check:
                    old = fixture_path(FIXTURES_DIR, name)
                    diff = ["missing"] if not old.exists() else differences(old, path)
                    if diff:
                        stale.append((name, diff))
                elif not quiet:
                    click.echo(f"  wrote {path.relative_to(root.parent) if root == FIXTURES_DIR else path}"
                               f" ({path.stat().st_size} bytes, {dt:.1f} s)", err=True)
        if check:
            for name, diff in stale:
                click.echo(f"STALE {name}: " + "; ".join(diff[:5]) +
                           (f" (+{len(diff) - 5} more)" if len(diff) > 5 else ""))
            if stale:
                click.echo(f"{len(stale)} of {len(names)} fixture(s) differ from a fresh "
                           "regeneration; run `regen-fixtures --only NAME` to rewrite them")
                sys.exit(1)
            click.echo(f"all {len(names)} fixture(s) current")


class _Plain:
    def __init__(self, items):
        self.items = items

    def __enter__(self):
        return self.items

    def __exit__(self, *exc):
        return False


if __name__ == "__main__":
    main()
