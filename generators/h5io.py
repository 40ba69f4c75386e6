"""The HDF5 fixture format, shared by every fixture kind (docs/fixtures.md).

A fixture file holds cases. Each case is a group with JSON `params`, an `inputs` group and
one group per tier under `expected` (`exact`, `float64`, `pytorch`); the pytorch tier also
has `floor` (one value per tensor). Every dataset carries the SHA-256 of its dtype, shape and
bytes, verified on every read. Writes are byte-reproducible: no timestamps, no chunking or
compression, a fixed write order, the oldest compatible file format.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

import h5py
import numpy as np

SCHEMA_VERSION = 1
# Bumped whenever the numerics the golden bits follow change: a fixture with another
# spec_version is stale and must be regenerated.
SPEC_VERSION = 1


class FixtureError(RuntimeError):
    """A fixture is missing, corrupt, stale or of an unknown schema (gate exit code 2)."""


@dataclass
class Case:
    name: str
    params: dict = field(default_factory=dict)
    inputs: dict = field(default_factory=dict)
    expected: dict = field(default_factory=dict)   # tier -> {tensor: array}
    floor: dict = field(default_factory=dict)      # tensor -> float (pytorch tier)


@dataclass
class Fixture:
    path: Path
    attrs: dict
    cases: list


def digest(a: np.ndarray) -> str:
    a = np.ascontiguousarray(a)
    h = hashlib.sha256()
    h.update(a.dtype.str.encode())
    h.update(repr(a.shape).encode())
    h.update(a.tobytes())
    return h.hexdigest()


def _put(group, name: str, value) -> None:
    a = np.ascontiguousarray(value)
    d = group.create_dataset(name, data=a, track_times=False)
    d.attrs["sha256"] = digest(a)


def write_fixture(path, layer: str, generator: str, seed: int, cases: list[Case],
                  extra_attrs: dict | None = None) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".h5.tmp")
    with h5py.File(tmp, "w", libver="earliest", track_order=True) as f:
        # no library versions: the contents do not depend on them, and a regeneration with
        # another numpy must not change a byte (docs/fixtures.md, "Reproducibility")
        attrs = {"schema_version": SCHEMA_VERSION, "spec_version": SPEC_VERSION, "layer": layer,
                 "generator": generator, "seed": seed,
                 "case_names": json.dumps([c.name for c in cases])}
        attrs.update(extra_attrs or {})
        for k in sorted(attrs):
            f.attrs[k] = attrs[k]
        for case in cases:
            g = f.create_group(case.name, track_order=True)
            g.attrs["params"] = json.dumps(case.params, sort_keys=True)
            gi = g.create_group("inputs", track_order=True)
            for k, v in case.inputs.items():
                _put(gi, k, v)
            ge = g.create_group("expected", track_order=True)
            for tier, tensors in case.expected.items():
                gt = ge.create_group(tier, track_order=True)
                for k, v in tensors.items():
                    _put(gt, k, v)
            if case.floor:
                g.attrs["floor"] = json.dumps(case.floor, sort_keys=True)
    tmp.replace(path)


def _get(group, name: str, path: Path) -> np.ndarray:
    d = group[name]
    a = d[()]
    a = np.asarray(a)
    want = d.attrs.get("sha256")
    if want is None or digest(a) != want:
        raise FixtureError(f"fixture {path}: dataset {d.name} fails its SHA-256 check (corrupt or edited); "
                           f"run `regen-fixtures --only {path.stem}`")
    return a


def read_fixture(path) -> Fixture:
    path = Path(path)
    if not path.exists():
        raise FixtureError(f"fixture not found: {path} (run `regen-fixtures`)")
    try:
        with h5py.File(path, "r") as f:
            attrs = {k: (v.item() if hasattr(v, "item") else v) for k, v in f.attrs.items()}
            schema = attrs.get("schema_version")
            if schema != SCHEMA_VERSION:
                raise FixtureError(f"fixture {path} has schema version {schema}; this harness reads "
                                   f"version {SCHEMA_VERSION}")
            if attrs.get("spec_version") != SPEC_VERSION:
                raise FixtureError(f"fixture {path} is stale: spec version {attrs.get('spec_version')}, "
                                   f"the code is at {SPEC_VERSION}; run `regen-fixtures`")
            cases = []
            for name in json.loads(attrs["case_names"]):
                g = f[name]
                case = Case(name, json.loads(g.attrs["params"]))
                case.inputs = {k: _get(g["inputs"], k, path) for k in g["inputs"]}
                for tier in g["expected"]:
                    gt = g["expected"][tier]
                    case.expected[tier] = {k: _get(gt, k, path) for k in gt}
                if "floor" in g.attrs:
                    case.floor = json.loads(g.attrs["floor"])
                cases.append(case)
    except FixtureError:
        raise
    except (OSError, KeyError, ValueError, TypeError) as e:
        raise FixtureError(f"fixture {path} cannot be read ({type(e).__name__}: {e}); "
                           f"it is corrupt or not a crnn-conformance fixture") from None
    return Fixture(path, attrs, cases)
