"""A fixture's contents are protected as a whole (generators/h5io.py's
manifest: every dataset's bytes, dtype and shape, every attribute, the list of datasets), and a
fixture must be the one the harness asked for (harness/layers: its root `layer`, the tiers of
its role, the inputs the layer reads). Each damage is exit 2 with one line naming it."""
from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest

from testports import ROOT, cannot_run, gate  # noqa: E402

from crnn_conformance.generators import h5io  # noqa: E402

FIX = ROOT / "fixtures"
CASE = "T16_I37_O37"


def fixtures(tmp_path, *names) -> Path:
    d = tmp_path / "fixtures"
    d.mkdir()
    for n in names:
        shutil.copy(FIX / f"{n}.h5", d / f"{n}.h5")
    return d


def edit(path, fn):
    with h5py.File(path, "r+") as f:
        fn(f)


def _params(f):
    p = json.loads(f[CASE].attrs["params"])
    p["T"] = 1
    f[CASE].attrs["params"] = json.dumps(p, sort_keys=True)


def _one_case(f):
    f.attrs["case_names"] = json.dumps(json.loads(f.attrs["case_names"])[:1])


def _floor(f):
    name = json.loads(f.attrs["case_names"])[0]
    fl = {k: v * 1e6 for k, v in json.loads(f[name].attrs["floor"]).items()}
    f[name].attrs["floor"] = json.dumps(fl, sort_keys=True)


def _big_endian(f):
    a = f[f"{CASE}/inputs/W"][()]
    del f[f"{CASE}/inputs/W"]
    f.create_dataset(f"{CASE}/inputs/W", data=a.astype(a.dtype.newbyteorder(">")))


EDITS = {
    "a case's params": ("linear", _params, f"attribute 'params' of {CASE} changed"),
    "case_names cut to one": ("linear", _one_case, "attribute 'case_names' of / changed"),
    "a floor x 1e6": ("pytorch_linear", _floor, "attribute 'floor' of"),
    "an expected dataset deleted": ("linear", lambda f: f.__delitem__(f"{CASE}/expected/exact/dW"),
                                    f"dataset {CASE}/expected/exact/dW deleted"),
    "an input dataset deleted": ("linear", lambda f: f.__delitem__(f"{CASE}/inputs/x"),
                                 f"dataset {CASE}/inputs/x deleted"),
    "a dataset changed": ("linear", lambda f: f[f"{CASE}/inputs/W"].__setitem__((0, 0), 2.0),
                          f"dataset {CASE}/inputs/W changed"),
    "a dataset added": ("linear", lambda f: f.create_dataset(f"{CASE}/inputs/extra", data=[1]),
                        f"dataset {CASE}/inputs/extra added"),
    # not numbers: read through h5py's own Dataset (h5io._read_dataset's other path)
    "a text dataset added": ("linear", lambda f: f.create_dataset(f"{CASE}/inputs/note", data="x"),
                             f"dataset {CASE}/inputs/note added"),
    "an attribute of a dataset added": ("linear",
                                        lambda f: f[f"{CASE}/inputs/x"].attrs.__setitem__("u", 1),
                                        f"attribute 'u' of {CASE}/inputs/x added"),
    "a dataset stored big-endian, same values": ("linear", _big_endian,
                                                 f"dataset {CASE}/inputs/W changed"),
}


@pytest.mark.parametrize("what", list(EDITS))
def test_an_edited_fixture_is_refused_naming_the_change(what, tmp_path):
    name, fn, message = EDITS[what]
    d = fixtures(tmp_path, "linear", "pytorch_linear")
    edit(d / f"{name}.h5", fn)
    cannot_run(gate("--fixtures", str(d), "--layers", "linear"), f"{name}.h5",
               "fails its SHA-256 manifest check", message)


def test_a_fixture_in_another_role_is_refused(tmp_path):
    d = fixtures(tmp_path, "linear", "pytorch_linear", "conv", "pytorch_conv")
    shutil.copy(FIX / "linear.h5", d / "conv.h5")
    cannot_run(gate("--fixtures", str(d), "--layers", "conv"), "conv.h5 is a 'linear' fixture",
               "as the conv fixture 'conv'")
    shutil.copy(FIX / "conv.h5", d / "conv.h5")
    shutil.copy(FIX / "linear.h5", d / "pytorch_linear.h5")   # the pytorch tier silently gone
    cannot_run(gate("--fixtures", str(d), "--layers", "linear"), "pytorch_linear.h5",
               "lacks the pytorch tier(s) that 'pytorch_linear' must hold")


def test_a_fixture_without_an_input_the_layer_reads_is_refused(tmp_path):
    """A consistent file (its manifest is right) from a builder that forgot dY."""
    d = fixtures(tmp_path, "pytorch_linear")
    fx = h5io.read_fixture(FIX / "linear.h5")
    for c in fx.cases:
        del c.inputs["dY"]
    h5io.write_fixture(d / "linear.h5", "linear", "test", 0, fx.cases)
    cannot_run(gate("--fixtures", str(d), "--layers", "linear"), "linear.h5",
               "lacks the input(s) dY that the linear layer reads")


def test_a_fixture_of_the_old_schema_names_both_versions(tmp_path):
    d = fixtures(tmp_path, "linear", "pytorch_linear")
    edit(d / "linear.h5", lambda f: f.attrs.__setitem__("schema_version", 1))
    cannot_run(gate("--fixtures", str(d), "--layers", "linear"), "schema version 1",
               f"this harness reads version {h5io.SCHEMA_VERSION}")


def _datasets(f) -> list:
    out = []
    f.visititems(lambda n, o: out.append(o) if isinstance(o, h5py.Dataset) else None)
    return out


def test_the_checked_in_fixtures_are_compressed_and_carry_their_manifest():
    for path in sorted(FIX.glob("*.h5")):
        with h5py.File(path, "r") as f:
            assert f.attrs["schema_version"] == h5io.SCHEMA_VERSION, path
            assert "manifest_sha256" in f.attrs, path
            big = [o for o in _datasets(f) if o.nbytes >= h5io.CHUNK_MIN and o.size]
            assert big and all(o.compression == "gzip" and o.shuffle for o in big), path
        h5io.read_fixture(path)


def test_writes_are_byte_reproducible_and_the_manifest_covers_decoded_data(tmp_path):
    fx = h5io.read_fixture(FIX / "linear.h5")
    a, b = tmp_path / "a.h5", tmp_path / "b.h5"
    h5io.write_fixture(a, "linear", "g", 1, fx.cases)
    h5io.write_fixture(b, "linear", "g", 1, fx.cases)
    assert a.read_bytes() == b.read_bytes()
    # the same data stored another way (uncompressed, contiguous) still matches its manifest
    c = tmp_path / "c.h5"
    with h5py.File(a, "r") as src, h5py.File(c, "w") as dst:
        for k, v in src.attrs.items():
            dst.attrs[k] = v

        def copy(name, obj):
            if isinstance(obj, h5py.Dataset):
                dst.create_dataset(name, data=obj[()])
            else:
                dst.create_group(name)
            for k, v in obj.attrs.items():
                dst[name].attrs[k] = v
        src.visititems(copy)
    got = h5io.read_fixture(c)
    for x, y in zip(fx.cases, got.cases):
        for k in x.inputs:
            assert x.inputs[k].tobytes() == y.inputs[k].tobytes()
    assert np.asarray(got.cases[0].expected["exact"]["y"]).dtype == np.float32


def test_cases_are_read_as_the_files_groups_and_attributes_hold_them():
    """read_fixture (HDF5's walk, then each case from what it read) gives every case as the
    file's h5py Groups hold it: the params and floor attributes, and the inputs, tiers and
    tensors in each group's own order, with their values, dtypes and shapes."""
    for path in sorted(FIX.glob("*.h5")):
        fx = h5io.read_fixture(path)
        with h5py.File(path, "r") as f:
            assert [c.name for c in fx.cases] == json.loads(f.attrs["case_names"]), path
            for case in fx.cases:
                g = f[case.name]
                assert case.params == json.loads(g.attrs["params"]), (path, case.name)
                assert case.floor == (json.loads(g.attrs["floor"]) if "floor" in g.attrs else {})
                groups = [(case.inputs, g["inputs"])]
                assert list(case.expected) == list(g["expected"]), (path, case.name)
                groups += [(case.expected[t], g["expected"][t]) for t in g["expected"]]
                for got, group in groups:
                    assert list(got) == list(group), (path, case.name, group.name)
                    for k, a in got.items():
                        want = np.asarray(group[k][()])
                        assert a.dtype == want.dtype and a.shape == want.shape, (path, k)
                        assert a.tobytes() == want.tobytes(), (path, case.name, k)


def test_datasets_of_every_kind_read_as_h5py_reads_them(tmp_path):
    """Numbers are read straight into an array, anything else through h5py's Dataset: either
    way each dataset's array is np.asarray(dataset[()]), its dtype and shape too."""
    path = tmp_path / "kinds.h5"
    kinds = {"f4": np.arange(6, dtype="<f4").reshape(2, 3), "f8_be": np.arange(3, dtype=">f8"),
             "i8_scalar": np.int64(-7), "u1_empty": np.zeros((0, 4), np.uint8),
             "bool": np.array([True, False]), "text": "words", "texts": ["a", "bc"],
             "null": h5py.Empty("f4"), "pairs": np.array([(1, 2.5)], [("n", "<i4"), ("v", "<f8")]),
             "chunked": np.arange(4096, dtype="<f4").reshape(64, 64)}
    with h5py.File(path, "w") as f:
        for name, value in kinds.items():
            kw = {"chunks": (8, 16), "compression": "gzip", "shuffle": True} if name == "chunked" else {}
            f.create_dataset(name, data=value, **kw)
    with h5py.File(path, "r") as f:
        got = h5io._scan(f).data
        assert set(got) == set(kinds)
        for name in kinds:
            want = np.asarray(f[name][()])
            assert got[name].dtype == want.dtype and got[name].shape == want.shape, name
            assert got[name].tolist() == want.tolist(), name


def test_random_bit_flips_are_read_unchanged_or_refused_never_crash(tmp_path):
    """A damaged file is refused with a FixtureError (the gate's exit 2 and one line), whatever
    byte is hit: 300 single-bit flips of a small fixture, each in a copy of its own. A flip the
    file does not notice (unused bytes) must read back exactly the original cases."""
    import numpy as np
    from crnn_conformance.generators.h5io import FixtureError, read_fixture
    src = FIX / "step_edges.h5"
    raw, good = bytearray(src.read_bytes()), read_fixture(src)
    rng = np.random.default_rng(16)
    refused = 0
    for k, at in enumerate(rng.integers(0, len(raw), 300)):
        bad = bytearray(raw)
        bad[at] ^= 1 << int(rng.integers(0, 8))
        path = tmp_path / f"flip{k}" / "step_edges.h5"
        path.parent.mkdir()
        path.write_bytes(bytes(bad))
        try:
            fx = read_fixture(path)
        except FixtureError:
            refused += 1
            continue
        for a, b in zip(fx.cases, good.cases, strict=True):
            assert a.name == b.name and a.params == b.params
            for k2 in b.inputs:
                assert a.inputs[k2].tobytes() == b.inputs[k2].tobytes()
    assert refused > 100


def test_two_processes_writing_the_same_fixture_at_once_both_succeed(tmp_path, monkeypatch):
    """Two fuzz processes that shrink to the same case write the same fixture path at the same
    moment (CI saw HDF5's "unable to lock file" when they shared a temporary name). Here a
    second process writes the whole fixture while this one is between its two opens."""
    import subprocess
    fx = h5io.read_fixture(FIX / "linear.h5")
    target = tmp_path / "fuzz-linear-x.h5"
    script = ("import sys; from crnn_conformance.generators import h5io; "
              "fx = h5io.read_fixture(sys.argv[1]); "
              "h5io.write_fixture(sys.argv[2], 'linear', 'other', 2, fx.cases)")
    real, opened = h5py.File, []

    def file(name, mode="r", *a, **k):
        if mode == "r+" and not opened:       # this writer's data is written, not yet renamed
            opened.append(name)
            r = subprocess.run([sys.executable, "-c", script, str(FIX / "linear.h5"),
                                str(target)], capture_output=True, text=True)
            assert r.returncode == 0, r.stderr
        return real(name, mode, *a, **k)
    monkeypatch.setattr(h5io.h5py, "File", file)
    h5io.write_fixture(target, "linear", "mine", 1, fx.cases)
    monkeypatch.undo()
    assert opened
    assert h5io.read_fixture(target).attrs["generator"] == "mine"
    assert [p.name for p in tmp_path.iterdir()] == [target.name]    # no temporary file left
