"""The HDF5 fixture format, shared by every fixture kind (docs/fixtures.md).

A fixture file holds cases. Each case is a group with JSON `params`, an `inputs` group and
one group per tier under `expected` (`exact`, `float64`, `pytorch`); the pytorch tier also
has `floor` (one value per tensor).

A manifest protects the whole file: per dataset its dtype, shape and the SHA-256 of its
(decoded) bytes, every attribute of every object (root, groups, datasets) and the list of
groups and datasets. The writer stores it as the root attributes `manifest` (JSON) and
`manifest_sha256`; the reader recomputes it from what it reads and refuses a file whose
contents differ, naming what changed (an edited attribute, a changed, added or deleted
dataset). Datasets of CHUNK_MIN bytes or more are compressed losslessly (shuffle + gzip,
one chunk per dataset, fixed level); writes are byte-reproducible: no timestamps, fixed
chunking, level and write order, fixed HDF5 format bounds.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

import h5py
import numpy as np

SCHEMA_VERSION = 2
# Bumped whenever the numerics the golden bits follow change: a fixture with another
# spec_version is stale and must be regenerated.
SPEC_VERSION = 1

LIBVER = ("v110", "v110")        # fixed format bounds: the same bytes from every h5py
GZIP_LEVEL = 9
CHUNK_MIN = 1024                 # smaller datasets stay contiguous (a chunk index costs more)
MANIFEST_ATTRS = ("manifest", "manifest_sha256")


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


def _value_digest(v) -> str:
    """An attribute value as h5py returns it (str, bytes, numpy scalar or array)."""
    if isinstance(v, str):
        return hashlib.sha256(b"str:" + v.encode("utf-8", "surrogatepass")).hexdigest()
    if isinstance(v, bytes):
        return hashlib.sha256(b"bytes:" + v).hexdigest()
    a = np.asarray(v)
    if a.dtype.kind == "O":
        return hashlib.sha256(b"obj:" + repr(a.tolist()).encode()).hexdigest()
    return digest(a)


def _put(group, name: str, value) -> None:
    a = np.ascontiguousarray(value)
    kw = {}
    if a.ndim and a.size and a.nbytes >= CHUNK_MIN:
        kw = {"chunks": a.shape, "compression": "gzip", "compression_opts": GZIP_LEVEL,
              "shuffle": True}
    group.create_dataset(name, data=a, track_times=False, **kw)


def write_fixture(path, layer: str, generator: str, seed: int, cases: list[Case],
                  extra_attrs: dict | None = None) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".h5.tmp")
    try:
        with h5py.File(tmp, "w", libver=LIBVER, track_order=True) as f:
            # no library versions: the contents do not depend on them, and a regeneration with
            # another numpy must not change a byte (docs/fixtures.md, "Reproducibility")
            attrs = {"schema_version": SCHEMA_VERSION, "spec_version": SPEC_VERSION,
                     "layer": layer, "generator": generator, "seed": seed,
                     "case_names": json.dumps([c.name for c in cases])}
            attrs.update(extra_attrs or {})
            for k in sorted(attrs):
                f.attrs[k] = attrs[k]
            for case in cases:
                _write_case(f, case)
        with h5py.File(tmp, "r+") as f:     # the manifest of what was written, as it reads back
            m = _manifest_text(_scan(f)[0])
            f.attrs["manifest"] = m
            f.attrs["manifest_sha256"] = hashlib.sha256(m.encode()).hexdigest()
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)


def _write_case(f, case: Case) -> None:
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


def _scan(f) -> tuple[dict, dict]:
    """Reads every dataset of an open file -> (manifest, {dataset path: array})."""
    groups, datasets, attrs, data = ["/"], [], [], {}

    def attrs_of(name, obj):
        for k in sorted(obj.attrs):
            if name == "/" and k in MANIFEST_ATTRS:
                continue
            attrs.append([name, k, _value_digest(obj.attrs[k])])

    attrs_of("/", f)

    def visit(name, obj):
        if isinstance(obj, h5py.Dataset):
            a = np.asarray(obj[()])
            data[name] = a
            datasets.append([name, a.dtype.str, list(a.shape), digest(a)])
        else:
            groups.append(name)
        attrs_of(name, obj)

    f.visititems(visit)
    return {"groups": sorted(groups), "datasets": sorted(datasets), "attrs": sorted(attrs)}, data


def _manifest_text(m: dict) -> str:
    return json.dumps(m, sort_keys=True, separators=(",", ":"))


def _manifest_changes(stored: dict, found: dict) -> list[str]:
    """What differs between the manifest written with the file and its contents now."""
    out = []
    ident = {"groups": lambda e: e, "datasets": lambda e: e[0],
             "attrs": lambda e: f"{e[1]!r} of {e[0]}"}
    for key, what in (("groups", "group"), ("datasets", "dataset"), ("attrs", "attribute")):
        old = {ident[key](e): e for e in stored.get(key, [])}
        new = {ident[key](e): e for e in found.get(key, [])}
        out += [f"{what} {k} deleted" for k in old if k not in new]
        out += [f"{what} {k} added" for k in new if k not in old]
        out += [f"{what} {k} changed" for k in new if k in old and new[k] != old[k]]
    return out


def _check_manifest(f, path: Path) -> dict:
    """-> {dataset path: array}; raises FixtureError when the file differs from its manifest."""
    found, data = _scan(f)
    stored_text = f.attrs.get("manifest")
    stored_sha = f.attrs.get("manifest_sha256")
    if stored_text is None or stored_sha is None:
        raise FixtureError(f"fixture {path} has no manifest (not written by regen-fixtures, or "
                           f"edited); run `regen-fixtures --only {path.stem}`")
    stored_text = stored_text.decode() if isinstance(stored_text, bytes) else str(stored_text)
    ok_sha = hashlib.sha256(stored_text.encode()).hexdigest() == str(stored_sha)
    if ok_sha and stored_text == _manifest_text(found):
        return data
    try:
        changes = _manifest_changes(json.loads(stored_text), found) if ok_sha else []
    except (ValueError, TypeError, AttributeError):
        changes = []
    what = ("; ".join(changes[:4]) + (f" (+{len(changes) - 4} more)" if len(changes) > 4 else "")
            if changes else "its manifest itself was edited")
    raise FixtureError(f"fixture {path} fails its SHA-256 manifest check (corrupt or edited: "
                       f"{what}); run `regen-fixtures --only {path.stem}`")


def read_fixture(path) -> Fixture:
    path = Path(path)
    if not path.exists():
        raise FixtureError(f"fixture not found: {path} (run `regen-fixtures`)")
    try:
        with h5py.File(path, "r") as f:
            attrs = {k: (v.item() if hasattr(v, "item") else v) for k, v in f.attrs.items()
                     if k not in MANIFEST_ATTRS}
            schema = attrs.get("schema_version")
            if schema != SCHEMA_VERSION:
                raise FixtureError(f"fixture {path} has schema version {schema}; this harness "
                                   f"reads version {SCHEMA_VERSION} (run `regen-fixtures`)")
            if attrs.get("spec_version") != SPEC_VERSION:
                raise FixtureError(f"fixture {path} is stale: spec version {attrs.get('spec_version')}, "
                                   f"the code is at {SPEC_VERSION}; run `regen-fixtures`")
            data = _check_manifest(f, path)
            attrs["manifest_sha256"] = str(f.attrs["manifest_sha256"])
            cases = [_read_case(f, name, data) for name in json.loads(attrs["case_names"])]
    except FixtureError:
        raise
    except (OSError, KeyError, ValueError, TypeError) as e:
        raise FixtureError(f"fixture {path} cannot be read ({type(e).__name__}: {e}); "
                           f"it is corrupt or not a crnn-conformance fixture") from None
    return Fixture(path, attrs, cases)


def _read_case(f, name: str, data: dict) -> Case:
    g = f[name]
    case = Case(name, json.loads(g.attrs["params"]))
    case.inputs = {k: data[f"{name}/inputs/{k}"] for k in g["inputs"]}
    for tier in g["expected"]:
        case.expected[tier] = {k: data[f"{name}/expected/{tier}/{k}"] for k in g["expected"][tier]}
    if "floor" in g.attrs:
        case.floor = json.loads(g.attrs["floor"])
    return case
