"""regen-fixtures: (re)writes every fixture in fixtures/ from the generators, deterministically.

    regen-fixtures                 # all fixtures
    regen-fixtures --only linear   # one (repeatable)
    regen-fixtures --check         # regenerate into a temp dir, exit 1 naming any that differ
    regen-fixtures --retrain       # retrain crnn-v0 (crnn_conformance.generators.train, ~10 min), then regenerate

Nothing in fixtures/ changes unless this command is asked to write it.
"""
from __future__ import annotations

import importlib
import json
import sys
import tempfile
import time
from pathlib import Path

import click
import h5py
import numpy as np

from crnn_conformance import fixtures
from crnn_conformance.generators.h5io import FixtureError, write_fixture

FIXTURES_DIR = fixtures.directory()

# fixture name -> builder module (generators/cases/<layer>.py); order is the write order
BUILDERS = {
    "dot16": "crnn_conformance.generators.cases.dot16",
    "dot16_zeros": "crnn_conformance.generators.cases.dot16_zeros",   # signed-zero tails (issue 8's mutants)
    "linear": "crnn_conformance.generators.cases.linear",
    "lstm": "crnn_conformance.generators.cases.lstm",
    "conv": "crnn_conformance.generators.cases.conv",
    "ctc": "crnn_conformance.generators.cases.ctc",
    "step": "crnn_conformance.generators.cases.step",
    "clip": "crnn_conformance.generators.cases.clip",
    "adamw": "crnn_conformance.generators.cases.adamw",
    "train3": "crnn_conformance.generators.cases.train3",
    # the pytorch tier (generators/pytorch_ref.py): the trained crnn-v0 in PyTorch fp32 with
    # float64 Floors; each file is read by its layer's harness module (FIXTURES)
    "pytorch_conv": "crnn_conformance.generators.cases.pytorch_conv",
    "pytorch_lstm": "crnn_conformance.generators.cases.pytorch_lstm",
    "pytorch_linear": "crnn_conformance.generators.cases.pytorch_linear",
    "pytorch_ctc": "crnn_conformance.generators.cases.pytorch_ctc",
    "pytorch_step": "crnn_conformance.generators.cases.pytorch_step",
    "pytorch_adamw": "crnn_conformance.generators.cases.pytorch_adamw",
    "pytorch_train3": "crnn_conformance.generators.cases.pytorch_train3",
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


# A pytorch-tier fixture records the torch version and CPU flags that wrote it. PyTorch's fp32
# results depend on both (its kernels dispatch on the CPU); when either differs from the
# recorded one, --check compares the values PyTorch computed within their Floors instead of
# bit for bit: each side is within its Floor of the float64 value (which is stable to
# ~1e-12), so |old - new| <= Floor_old + Floor_new. That covers expected/pytorch/<t> (Floor
# key <t>) and the PyTorch-derived inputs (Floor key inputs/<name>).
TORCH_ENV_ATTRS = ("torch_version", "cpu_flags")


def _attr(f, k):
    v = f.attrs.get(k)
    return v.decode() if isinstance(v, bytes) else (None if v is None else str(v))


def torch_env_change(old: Path, new: Path) -> str | None:
    """Why the pytorch tier of `old` cannot be compared bit for bit with `new` (the torch
    version or the CPU flags recorded differ), or None."""
    try:
        with h5py.File(old, "r") as fo, h5py.File(new, "r") as fn:
            if _attr(fn, "torch_version") is None:
                return None
            diff = [f"{k} {_attr(fo, k)} -> {_attr(fn, k)}" for k in TORCH_ENV_ATTRS
                    if _attr(fo, k) != _attr(fn, k)]
    except OSError:
        return None
    return "; ".join(diff) or None


def _floor_of(f, name: str) -> float | None:
    """The Floor of dataset `name` (<case>/expected/pytorch/<t> or <case>/inputs/<i>)."""
    parts = name.split("/")
    if len(parts) < 3 or "floor" not in f[parts[0]].attrs:
        return None
    floors = json.loads(f[parts[0]].attrs["floor"])
    if parts[1:3] == ["expected", "pytorch"] and len(parts) == 4:
        return floors.get(parts[3])
    if parts[1] == "inputs" and len(parts) == 3:
        return floors.get(f"inputs/{parts[2]}")
    return None


def differences(old: Path, new: Path) -> list[str]:
    """Names the datasets of `new` that differ from `old` (bitwise; float64 tier: 1e-12;
    pytorch tier within the Floors when torch or the CPU differ: torch_env_change)."""
    if old.read_bytes() == new.read_bytes():
        return []
    out = []
    env = torch_env_change(old, new)
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
            elif env and np.asarray(a).dtype.kind == "f" and _floor_of(fn, n) is not None:
                allowed = (_floor_of(fo, n) or 0.0) + _floor_of(fn, n)
                with np.errstate(invalid="ignore"):
                    d = np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))
                d = np.where(np.asarray(a) == np.asarray(b), 0.0, d)
                if not np.all(d <= allowed):
                    out.append(f"{n}: pytorch values differ by {float(np.nanmax(d)):.3g}, beyond "
                               f"their Floors ({allowed:.3g})")
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
@click.option("--retrain", is_flag=True,
              help="first retrain crnn-v0 (python -m crnn_conformance.generators.train: seeded, CPU, <= 10 min) "
                   "into fixtures/model/crnn-v0.h5 (or OUT/model/ with --out), then regenerate")
def main(only, check, out_dir, quiet, retrain):
    """(Re)write the checked-in fixtures deterministically."""
    names = list(only) or list(BUILDERS)
    unknown = [n for n in names if n not in BUILDERS]
    if unknown:
        click.echo(f"regen-fixtures: unknown fixture(s) {', '.join(unknown)}; "
                   f"known: {', '.join(BUILDERS)}", err=True)
        sys.exit(2)
    if retrain:
        if check:
            click.echo("regen-fixtures: --retrain writes a new model; it cannot be combined "
                       "with --check", err=True)
            sys.exit(2)
        _retrain(Path(out_dir) if out_dir else None, quiet)
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
                    env = torch_env_change(old, path) if old.exists() else None
                    if env:
                        click.echo(f"NOTE {name}: recorded {env}: its pytorch-tier values are "
                                   "compared within their Floors, not bit for bit")
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


def _retrain(out_dir: Path | None, quiet: bool) -> None:
    """Run the trainer, then point the pytorch-tier builders at the new model."""
    from crnn_conformance.generators import pytorch_ref, train
    path = (out_dir / "model" / "crnn-v0.h5") if out_dir else pytorch_ref.MODEL_PATH
    path.parent.mkdir(parents=True, exist_ok=True)
    if not quiet:
        click.echo(f"regen-fixtures: retraining crnn-v0 into {path}", err=True)
    train.main(["--out", str(path)])
    pytorch_ref.MODEL_PATH = path


class _Plain:
    def __init__(self, items):
        self.items = items

    def __enter__(self):
        return self.items

    def __exit__(self, *exc):
        return False


if __name__ == "__main__":
    main()
