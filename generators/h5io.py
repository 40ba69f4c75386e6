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
import os
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
    try:
        h.update(a)           # the C-contiguous buffer: the bytes of tobytes(), not copied
    except (BufferError, TypeError, ValueError):
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
    # the temporary name is this process's own: two fuzz processes that shrink to the same
    # case write the same fixture at once, and HDF5 locks a file it is writing
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
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
            m = _manifest_text(_scan(f).manifest)
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


@dataclass
class _Contents:
    """Everything _scan read from an open file."""
    manifest: dict
    data: dict        # dataset path -> array
    attrs: dict       # object path -> {name: value}, for the objects that have attributes
    fid: object       # the file's low-level id (groups are listed from it on demand)

    def members(self, group: str) -> list:
        """A group's member names in its own order (creation order when tracked), as
        iterating the h5py Group gives them."""
        return [_text(n) for n in h5py.h5g.open(self.fid, group.encode())]


def _text(name: bytes):
    """An object name as h5py gives it: UTF-8 text, else the bytes."""
    try:
        return name.decode("utf8")
    except UnicodeDecodeError:
        return name


def _read_dataset(dsid) -> np.ndarray:
    """A dataset's contents as `np.asarray(dataset[()])` gives them; numbers of a simple or
    scalar shape are read straight into an array (no high-level object per dataset)."""
    dt, space = dsid.dtype, dsid.get_space()
    if dt.kind not in "iuf" or space.get_simple_extent_type() not in (h5py.h5s.SIMPLE,
                                                                       h5py.h5s.SCALAR):
        return np.asarray(h5py.Dataset(dsid)[()])
    a = np.empty(space.shape, dt)
    if a.size:
        dsid.read(h5py.h5s.ALL, h5py.h5s.ALL, a)
    return a


def _scan(f) -> _Contents:
    """Reads every dataset and attribute of an open file and makes its manifest. Objects are
    listed by HDF5's own walk (what h5py's visititems walks) without opening each one, and
    only the objects that have attributes are opened to read them."""
    groups, datasets, data, attrs = ["/"], [], {}, {}
    with_attrs = ["/"]

    def visit(raw_name, info):
        name = _text(raw_name)
        if info.type == h5py.h5o.TYPE_DATASET:
            a = _read_dataset(h5py.h5d.open(f.id, raw_name))
            data[name] = a
            datasets.append([name, a.dtype.str, list(a.shape), digest(a)])
        else:
            groups.append(name)
        if info.num_attrs:           # (the walk reuses `info`: read it here)
            with_attrs.append(name)

    h5py.h5o.visit(f.id, visit, info=True)
    digests = []
    for name in with_attrs:
        obj = f[name]
        attrs[name] = {k: obj.attrs[k] for k in sorted(obj.attrs)}
        digests += [[name, k, _value_digest(v)] for k, v in attrs[name].items()
                    if not (name == "/" and k in MANIFEST_ATTRS)]
    manifest = {"groups": sorted(groups), "datasets": sorted(datasets), "attrs": sorted(digests)}
    return _Contents(manifest, data, attrs, f.id)


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


def _check_manifest(f, path: Path) -> _Contents:
    """-> the file's contents; raises FixtureError when the file differs from its manifest."""
    contents = _scan(f)
    found = contents.manifest
    stored_text = contents.attrs["/"].get("manifest")
    stored_sha = contents.attrs["/"].get("manifest_sha256")
    if stored_text is None or stored_sha is None:
        raise FixtureError(f"fixture {path} has no manifest (not written by regen-fixtures, or "
                           f"edited); run `regen-fixtures --only {path.stem}`")
    stored_text = stored_text.decode() if isinstance(stored_text, bytes) else str(stored_text)
    ok_sha = hashlib.sha256(stored_text.encode()).hexdigest() == str(stored_sha)
    if ok_sha and stored_text == _manifest_text(found):
        return contents
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
        if path.is_symlink():
            raise FixtureError(f"fixture {path} is a symbolic link that leads to no file "
                               "(its target is missing, or a loop)")
        raise FixtureError(f"fixture not found: {path} (run `regen-fixtures`)")
    try:
        # the whole file in memory at once (the core driver): HDF5's many small reads of
        # object headers and chunks then cost no system call each
        with h5py.File(path, "r", driver="core", backing_store=False) as f:
            attrs = {k: (v.item() if hasattr(v, "item") else v) for k, v in f.attrs.items()
                     if k not in MANIFEST_ATTRS}
            schema = attrs.get("schema_version")
            if schema != SCHEMA_VERSION:
                raise FixtureError(f"fixture {path} has schema version {schema}; this harness "
                                   f"reads version {SCHEMA_VERSION} (run `regen-fixtures`)")
            if attrs.get("spec_version") != SPEC_VERSION:
                raise FixtureError(f"fixture {path} is stale: spec version {attrs.get('spec_version')}, "
                                   f"the code is at {SPEC_VERSION}; run `regen-fixtures`")
            contents = _check_manifest(f, path)
            attrs["manifest_sha256"] = str(f.attrs["manifest_sha256"])
            cases = [_read_case(contents, name) for name in json.loads(attrs["case_names"])]
    except FixtureError:
        raise
    except (OSError, KeyError, ValueError, TypeError, RuntimeError) as e:
        # (HDF5 reports some damaged object headers as RuntimeError)
        raise FixtureError(f"fixture {path} cannot be read ({type(e).__name__}: {e}); "
                           f"it is corrupt or not a crnn-conformance fixture") from None
    return Fixture(path, attrs, cases)


def _read_case(contents: _Contents, name: str) -> Case:
    """One case from what _scan read (a missing group or attribute is a KeyError)."""
    attrs, data = contents.attrs.get(name, {}), contents.data
    case = Case(name, json.loads(attrs["params"]))
    case.inputs = {k: data[f"{name}/inputs/{k}"] for k in contents.members(f"{name}/inputs")}
    for tier in contents.members(f"{name}/expected"):
        tensors = contents.members(f"{name}/expected/{tier}")
        case.expected[tier] = {k: data[f"{name}/expected/{tier}/{k}"] for k in tensors}
    if "floor" in attrs:
        case.floor = json.loads(attrs["floor"])
    return case
