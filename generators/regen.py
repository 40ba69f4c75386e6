"""regen-fixtures: (re)writes every fixture in fixtures/ from the generators, deterministically.

    regen-fixtures                 # all fixtures
    regen-fixtures --only linear   # one (repeatable)
    regen-fixtures --check         # regenerate into a temp dir, exit 1 naming any that differ
    regen-fixtures --retrain       # retrain crnn-v0 (crnn_conformance.generators.train, ~10 min), then regenerate
    regen-fixtures --seed 7 --out fresh/   # a fresh draw: other inputs, same cases (not the pytorch tier's)

Nothing in fixtures/ changes unless this command is asked to write it.
"""
from __future__ import annotations

import hashlib
import importlib
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import click

from .. import fixtures
from ..ctypes_kernels import layer_table
from ..ctypes_kernels.cache import atomic_write, file_sha256
from . import draw
from .fixture_compare import differences, torch_env_change
from .h5io import FixtureError, write_fixture

__all__ = ["BUILDERS", "differences", "fixture_path", "main", "regenerate", "torch_env_change"]

FIXTURES_DIR = fixtures.directory()

# fixture name -> builder module (generators/cases/<name>.py), from the layer table; the order
# is the write order: each layer's fixtures with float64 tiers (and dot16's order cases), then
# the edge cases (exact tier only, docs/edge-cases.md), then the pytorch tier
# (generators/pytorch_ref/: the trained crnn-v0 in PyTorch fp32 with float64 Floors)
BUILDERS = layer_table.builders()
# A fresh draw (--seed) covers the fixtures whose every tier the harness computes from the
# definitions: the exact and float64 tiers and the edge cases. The pytorch tier's fixtures are
# one draw on the trained model, whose single permitted pool flip is judged on those lines.
DRAWABLE = [n for n, g in layer_table.fixture_groups().items() if g != "pytorch" and n in BUILDERS]


def fixture_path(root: Path, name: str) -> Path:
    return Path(root) / f"{name}.h5"


def regenerate(name: str, root: Path, seed: int | None = None) -> Path:
    """Writes fixture `name` into root: the checked-in draw, or (seed) a fresh one, whose
    file records that number as its `draw` attribute."""
    mod = importlib.import_module(BUILDERS[name])
    with draw.drawing(seed):
        cases = mod.build()
    path = fixture_path(root, name)
    attrs = dict(getattr(mod, "EXTRA_ATTRS", None) or {})
    if seed is not None:
        attrs["draw"] = seed
    write_fixture(path, mod.LAYER, mod.__name__, mod.SEED, cases, attrs or None)
    return path


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--only", "only", multiple=True, metavar="NAME",
              help=f"regenerate only these fixtures ({', '.join(BUILDERS)})")
@click.option("--check", is_flag=True, help="regenerate into a temp dir; exit 1 if any differs")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default=None,
              help="write here instead of fixtures/")
@click.option("-q", "--quiet", is_flag=True, help="no progress output")
@click.option("--retrain", is_flag=True,
              help="first retrain crnn-v0 (python -m crnn_conformance.generators.train: seeded, CPU, <= 10 min) "
                   "into fixtures/model/crnn-v0.h5 (or OUT/model/ with --out), then regenerate")
@click.option("--seed", type=click.IntRange(min=0, max=2 ** 63 - 1), default=None, metavar="N",
              help="a fresh draw into --out: every builder's random inputs from (its seed, N), the "
                   "same cases with other data; not the pytorch_* fixtures")
def main(only, check, out_dir, quiet, retrain, seed):
    """(Re)write the checked-in fixtures deterministically."""
    names = list(only) or (DRAWABLE if seed is not None else list(BUILDERS))
    unknown = [n for n in names if n not in BUILDERS]
    if unknown:
        click.echo(f"regen-fixtures: unknown fixture(s) {', '.join(unknown)}; "
                   f"known: {', '.join(BUILDERS)}", err=True)
        sys.exit(2)
    if out_dir is not None and not out_dir.strip():
        click.echo("regen-fixtures: --out names no directory (an empty string: an unset "
                   "variable?); without --out the checked-in fixtures/ are written", err=True)
        sys.exit(2)
    if seed is not None:
        _check_draw(names, out_dir, check, retrain)
    if retrain:
        if check:
            click.echo("regen-fixtures: --retrain writes a new model; it cannot be combined "
                       "with --check", err=True)
            sys.exit(2)
        _retrain(Path(out_dir) if out_dir is not None else None, quiet)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) if check else Path(out_dir if out_dir is not None else FIXTURES_DIR)
        _writable(root)             # before minutes of generation, not after
        stale = []
        with click.progressbar(names, label="regen-fixtures", file=sys.stderr,
                               item_show_func=lambda n: n or "",
                               show_pos=True) if not quiet else _Plain(names) as bar:
            for name in bar:
                t0 = time.perf_counter()
                try:
                    path = regenerate(name, root, seed)
                except OSError as e:
                    _cannot_write(root, e)
                dt = time.perf_counter() - t0
                if check:
                    old = fixture_path(FIXTURES_DIR, name)
                    diff = ["missing"] if not old.exists() else differences(old, path)
                    env = torch_env_change(old, path) if old.exists() else None
                    if env:
                        click.echo(f"NOTE {name}: recorded {env}: its pytorch-tier values are "
                                   "compared within their Floors on the same inputs, not bit "
                                   "for bit (generators/fixture_compare.py)")
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


def drawable(layers=None) -> list[str]:
    """The drawable fixtures of `layers` (names; None: every layer), in regen's order."""
    wanted = {f.stem for lay in layer_table.LAYERS if layers is None or lay.name in layers
              for f in lay.fixtures}
    return [n for n in DRAWABLE if n in wanted]


def _generator_key() -> str:
    """What a draw's bytes depend on: the spec version and the source of every generator."""
    from .h5io import SPEC_VERSION
    h = hashlib.sha256(f"spec {SPEC_VERSION}\n".encode())
    root = Path(__file__).resolve().parent
    for path in sorted(root.rglob("*.py")):
        h.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes())
    return h.hexdigest()[:16]


def draws_dir() -> Path:
    """Where --draw keeps its draws: CRNN_DRAWS_DIR, else draws/ in the build cache."""
    from ..ctypes_kernels.cache import cache_root
    return Path(os.environ.get("CRNN_DRAWS_DIR") or cache_root() / "draws")


class DrawError(Exception):
    """A draw cannot be written (gate / export / grade exit 2, the plugin's usage error)."""


def drawn(seed: int, layers=None, progress=None) -> Path:
    """The directory of draw `seed` of `layers`' drawable fixtures (draws_dir()/<the
    generators' key>/<seed>/), each fixture drawn on first use. A file is renamed into place
    whole (write_fixture), then its SHA-256 beside it (<name>.h5.sha256); a file without a
    matching one (a draw killed between the two, a damaged file) is drawn again, as the build
    cache rebuilds a torn entry. So is a file whose `draw` attribute is not `seed` (another
    draw's file, or the published fixture, put there with its SHA-256 rewritten to match): it
    is not this draw, and saying so goes to `progress` (else stderr). Two processes drawing the
    same file write the same bytes.

    This guards against a damaged or mixed-up cache, not against someone who can write the
    cache: they could as well draw `seed` themselves (docs/fixtures.md, "A fresh draw")."""
    root = draws_dir() / _generator_key() / str(seed)
    say = progress or (lambda m: print(m, file=sys.stderr))
    missing = []
    for name in drawable(layers):
        path = fixture_path(root, name)
        if not _whole(path):
            missing.append(name)
            continue
        recorded = _draw_attr(path)
        if recorded != seed:
            what = ("no draw (the published fixture?)" if recorded is None
                    else "nothing readable" if recorded == "unreadable"
                    else f"draw {recorded} (another draw's file?)")
            say(f"draw {seed}: {path} records {what}, not draw {seed}: not trusted, drawn "
                "again")
            missing.append(name)
    try:
        if missing:
            root.mkdir(parents=True, exist_ok=True)
            _room_for(root, missing, seed)
            if progress:
                progress(f"drawing {len(missing)} fixture(s) with --draw {seed} into {root} "
                         f"(once; about 35 s for all of them)")
        for name in missing:
            path = regenerate(name, root, seed)
            atomic_write(_sum_path(path), file_sha256(path))
    except (OSError, RuntimeError) as e:    # (h5py raises RuntimeError for a failed write)
        raise DrawError(f"cannot write draw {seed} into {os.fsdecode(draws_dir())} "
                        f"({getattr(e, 'strerror', None) or str(e).splitlines()[0][:200]}); "
                        "set CRNN_DRAWS_DIR to a writable directory") from None
    return root


def _room_for(root: Path, names, seed: int) -> None:
    """DrawError when the file system of `root` has less free space than the draw's files
    take (twice the published fixtures of the same names: a draw holds the same cases, and
    each file is written beside its final name first). HDF5 fails badly on a full disk, past
    what an exception can report, so the draw is not begun."""
    need = 2 * sum(fixture_path(FIXTURES_DIR, n).stat().st_size for n in names
                   if fixture_path(FIXTURES_DIR, n).exists())
    free = shutil.disk_usage(root).free
    if free < need:
        raise DrawError(f"cannot write draw {seed} into {os.fsdecode(root)}: its file system has "
                        f"{free / 2**20:.1f} MiB free, the draw needs about {need / 2**20:.1f} "
                        "MiB; free some space or set CRNN_DRAWS_DIR to another directory")


def _draw_attr(path: Path):
    """The `draw` attribute of a drawn file (an int), None when it has none, or "unreadable"."""
    import h5py
    import numpy as np
    try:
        with h5py.File(path, "r") as f:
            v = f.attrs.get("draw")
    except (OSError, ValueError):
        return "unreadable"
    if v is None:
        return None
    if isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_)):
        return int(v)
    return repr(v)


def _sum_path(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def _whole(path: Path) -> bool:
    try:
        return _sum_path(path).read_text() == file_sha256(path)
    except OSError:
        return False


def _check_draw(names, out_dir, check, retrain) -> None:
    """A fresh draw goes to a directory of its own, never over the checked-in fixtures."""
    why = None
    if out_dir is None or Path(out_dir).resolve() == Path(FIXTURES_DIR).resolve():
        why = "give --out DIR: fixtures/ holds the checked-in draw"
    elif check or retrain:
        why = "it cannot be combined with --check or --retrain"
    elif any(n not in DRAWABLE for n in names):
        why = (f"{', '.join(n for n in names if n not in DRAWABLE)}: the pytorch tier's fixtures "
               "are one draw on the trained model and are not drawn again")
    if why:
        click.echo(f"regen-fixtures: --seed writes a fresh draw; {why}", err=True)
        sys.exit(2)


def _writable(root: Path) -> None:
    try:
        root.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=root, prefix=".regen-write-check-")
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        _cannot_write(root, e)


def _cannot_write(root: Path, e: OSError):
    click.echo(f"regen-fixtures: cannot write to {os.fsdecode(root)!r} ({e.strerror or e})",
               err=True)
    sys.exit(2)


def _retrain(out_dir: Path | None, quiet: bool) -> None:
    """Run the trainer, then point the pytorch-tier builders at the new model."""
    from . import train
    from .pytorch_ref import data
    path = (out_dir / "model" / "crnn-v0.h5") if out_dir else data.MODEL_PATH
    path.parent.mkdir(parents=True, exist_ok=True)
    if not quiet:
        click.echo(f"regen-fixtures: retraining crnn-v0 into {path}", err=True)
    train.main(["--out", str(path)])
    data.MODEL_PATH = path


class _Plain:
    def __init__(self, items):
        self.items = items

    def __enter__(self):
        return self.items

    def __exit__(self, *exc):
        return False


if __name__ == "__main__":
    main()
