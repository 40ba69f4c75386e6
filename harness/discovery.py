"""Which fixture files a layer runs from a fixture directory (the packaged one, or any other)."""
from __future__ import annotations

from pathlib import Path

from ..generators.h5io import FixtureError
from . import layers as L
from .records import FIXTURES_DIR


def _standard(module) -> list[str]:
    return list(module.FIXTURES)


def layer_paths(opts, modules) -> dict[str, list[Path]]:
    """{layer: its fixture files} for the layers of `modules`. When the layers were not named
    (no --layers, or `available`), a directory other than the packaged one gates as it is:
    a layer with no file there maps to [] (reported as having no fixture), and only a
    directory with no fixture for any of them is a FixtureError. A layer named explicitly
    must have its files (fixture_paths)."""
    implicit = opts.layers is None
    paths = {m.LAYER: fixture_paths(opts, m, optional=implicit) for m in modules}
    if modules and not any(paths.values()):
        raise FixtureError(f"no fixtures in {opts.fixtures} for any layer (each layer's "
                           "standard <name>.h5, or *.h5 files whose `layer` attribute names one)")
    return paths


def fixture_paths(opts, module, optional: bool = False) -> list[Path]:
    """The packaged directory must hold every standard fixture of the layer (a missing one is
    a FixtureError, exit 2). Any other directory runs the standard files it has, then every
    other *.h5 whose root `layer` attribute names this layer (e.g. fuzz findings,
    fuzz-<layer>-<digest>.h5); none at all is a FixtureError too, unless `optional` ([])."""
    root = Path(opts.fixtures)
    if not root.is_dir():
        raise FixtureError(f"fixture directory not found: {root}")
    if root.resolve() == Path(FIXTURES_DIR).resolve():
        return [root / f"{name}.h5" for name in _standard(module)]
    paths = [root / f"{name}.h5" for name in _standard(module)
             if (root / f"{name}.h5").exists() or (root / f"{name}.h5").is_symlink()]
    paths += [p for p in _other_fixtures(root) if _layer_attr(p) == module.LAYER]
    if not paths and not optional:
        raise FixtureError(f"no fixtures for layer {module.LAYER} in {root} (expected "
                           f"{', '.join(n + '.h5' for n in _standard(module))} or other *.h5 "
                           f"files whose `layer` attribute is {module.LAYER!r})")
    return paths


def _other_fixtures(root: Path) -> list[Path]:
    """The *.h5 files of a fixture directory that are no layer's standard fixture."""
    standard = {n for name in L.available() for n in _standard(L.module(name))}
    return sorted(p for p in root.glob("*.h5") if p.stem not in standard)


def _layer_attr(path: Path) -> str | None:
    import h5py
    try:
        with h5py.File(path, "r") as f:
            v = f.attrs.get("layer")
    except OSError as e:
        raise FixtureError(f"fixture {path} cannot be read ({e}); it is corrupt or not a "
                           "crnn-conformance fixture") from None
    return v.decode() if isinstance(v, bytes) else (None if v is None else str(v))
