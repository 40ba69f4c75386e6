"""generators/fixture_compare.py: the rule of `regen-fixtures --check` (bit for bit, and for
PyTorch's values on another torch or CPU the Floors on the same inputs) and the fixture-set
summary."""
from __future__ import annotations

import json
import shutil

import h5py
import numpy as np
import pytest

from crnn_conformance import fixtures
from crnn_conformance.generators import fixture_compare as FC

SRC = fixtures.directory()


def _edit(path, fn):
    with h5py.File(path, "r+") as f:
        fn(f)


def _set(name, index, value):
    def fn(f):
        d = f[name]
        d[index] = value
    return fn


def _copies(tmp_path, fixture):
    old, new = tmp_path / "old.h5", tmp_path / "new.h5"
    shutil.copy(SRC / f"{fixture}.h5", old)
    shutil.copy(SRC / f"{fixture}.h5", new)
    return old, new


def _first_case(path):
    with h5py.File(path, "r") as f:
        case = json.loads(f.attrs["case_names"])[0]
        return case, json.loads(f[case].attrs["floor"]) if "floor" in f[case].attrs else {}


def _other_torch(path):
    _edit(path, lambda f: f.attrs.__setitem__("torch_version", "2.0.0+cpu"))


# ------------------------------------------------------------------ bit for bit


def test_a_fixture_without_pytorch_is_compared_bit_for_bit(tmp_path):
    old, new = _copies(tmp_path, "linear")
    assert FC.differences(old, new) == []
    case, _ = _first_case(old)
    name = f"{case}/expected/float64/y"
    with h5py.File(new, "r") as f:
        y = f[name][0, 0]
    _edit(new, _set(name, (0, 0), np.nextafter(y, np.inf)))          # one ulp of float64
    assert FC.differences(old, new) == [f"{name}: bits differ"]
    shutil.copy(old, new)
    _edit(new, lambda f: f[case].attrs.__setitem__("params", '{"T": 0}'))
    assert FC.differences(old, new) == [f"{case}: attribute params differs"]
    shutil.copy(old, new)
    _edit(new, lambda f: f.attrs.__setitem__("numpy_version", "9.9"))  # provenance: ignored
    assert FC.differences(old, new) == []


def test_summary_counts_changed_datasets_by_tier(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    for d in ("a", "b"):
        shutil.copy(SRC / "linear.h5", tmp_path / d / "linear.h5")
    case, _ = _first_case(SRC / "linear.h5")
    new = tmp_path / "b" / "linear.h5"
    with h5py.File(new, "r") as f:
        y64 = f[f"{case}/expected/float64/y"][()]
    _edit(new, _set(f"{case}/expected/float64/y", (0, 0), y64[0, 0] * (1 + 3e-15)))
    rows = FC.compare_sets(tmp_path / "a", tmp_path / "b")
    r = rows["linear"]
    assert r["exact"][1] == 0 and r["float64"][1] == 1 and r["inputs"][1] == 0
    assert 2e-15 < r["float64_max_rel"] < 4e-15
    assert 0 < r["float64_max_norm"] <= r["float64_max_rel"]
    assert FC.main([str(tmp_path / "a"), str(tmp_path / "b")]) == 0
    _edit(new, _set(f"{case}/expected/exact/y", (0, 0), np.float32(0.5)))
    rows = FC.compare_sets(tmp_path / "a", tmp_path / "b")
    assert rows["linear"]["exact"][1] == 1
    assert FC.main([str(tmp_path / "a"), str(tmp_path / "b")]) == 1      # exact bits moved
    assert "linear" in FC.format_table(rows)


# ------------------------------------------------------------------ PyTorch on another torch / CPU

torch = pytest.importorskip("torch")


def test_pytorch_values_bit_for_bit_when_torch_and_cpu_match(tmp_path):
    old, new = _copies(tmp_path, "pytorch_linear")
    case, floor = _first_case(old)
    name = f"{case}/expected/pytorch/y"
    with h5py.File(new, "r") as f:
        y = f[name][0, 0]
    _edit(new, _set(name, (0, 0), y + np.float32(0.5 * floor["y"])))
    assert FC.torch_env_change(old, new) is None
    assert FC.differences(old, new) == [f"{name}: bits differ"]


def _rerun(path, module, case):
    import importlib

    from crnn_conformance.generators import pytorch_ref as R
    mod = importlib.import_module(f"crnn_conformance.generators.cases.{module}")
    with h5py.File(path, "r") as f:
        inputs = {k: f[case]["inputs"][k][()] for k in f[case]["inputs"]}
        params = json.loads(f[case].attrs["params"])
    with R.deterministic():
        e32, e64 = mod.rerun(inputs, params)
    return inputs, e32, R.floors(e32, e64)


def test_per_layer_outputs_are_rerun_from_the_checked_in_inputs(tmp_path):
    """Another CPU gives the layer other fp32 inputs (they are the whole model's
    intermediates): a fresh build's outputs then differ from the checked-in ones by the
    propagated input difference, more than both Floors. The check reruns the layer on the
    checked-in inputs instead, where Floor_old + Floor_new does bound the difference."""
    old, new = _copies(tmp_path, "pytorch_linear")
    case, floor = _first_case(old)
    inputs, e32, fl = _rerun(old, "pytorch_linear", case)
    # what another CPU writes: x moved within its Floor, the outputs computed from that x
    from crnn_conformance.generators.cases import pytorch_linear as PL
    x2 = (inputs["x"] + np.float32(0.9 * floor["inputs/x"]) * np.sign(inputs["x"])).astype(np.float32)
    o32, o64 = PL.rerun({**inputs, "x": x2}, {})

    def write(f):
        f[f"{case}/inputs/x"][...] = x2
        for t, v in o32.items():
            f[f"{case}/expected/pytorch/{t}"][...] = v
    _edit(new, write)
    _other_torch(old)
    moved = np.abs(o32["dW"].astype(np.float64) - e32["dW"]).max()
    assert moved > floor["dW"] + fl["dW"]                   # the old rule (old vs new) would fail
    assert FC.differences(old, new) == []                   # the rule of the same inputs passes

    # the checked-in outputs are judged against the rerun: within the Floors passes, beyond fails
    name = f"{case}/expected/pytorch/y"
    allowed = floor["y"] + fl["y"]
    _edit(old, _set(name, (0, 0), np.float32(e32["y"][0, 0] + 0.4 * allowed)))
    assert FC.differences(old, new) == []
    _edit(old, _set(name, (0, 0), np.float32(e32["y"][0, 0] + 1.5 * allowed)))
    diff = FC.differences(old, new)
    assert len(diff) == 1 and diff[0].startswith(f"{name}: pytorch values differ")


def test_pytorch_inputs_within_their_floors_other_inputs_bit_for_bit(tmp_path):
    old, new = _copies(tmp_path, "pytorch_linear")
    case, floor = _first_case(old)
    _other_torch(old)
    with h5py.File(new, "r") as f:
        x = f[f"{case}/inputs/x"][0, 0]
    _edit(new, _set(f"{case}/inputs/x", (0, 0), x + np.float32(1.5 * floor["inputs/x"])))
    assert FC.differences(old, new) == []                   # within Floor_old + Floor_new
    _edit(new, _set(f"{case}/inputs/x", (0, 0), x + np.float32(2.5 * floor["inputs/x"])))
    assert any(d.startswith(f"{case}/inputs/x: pytorch values differ") for d in FC.differences(old, new))
    shutil.copy(SRC / "pytorch_linear.h5", new)
    _edit(new, _set(f"{case}/inputs/W", (0, 0), 0.0))       # the container's weights
    assert f"{case}/inputs/W: bits differ" in FC.differences(old, new)


def test_train3_weights_are_compared_where_both_masks_hold(tmp_path):
    from crnn_conformance.generators.cases import pytorch_train3 as PT3
    old, new = _copies(tmp_path, "pytorch_train3")
    case, floor = _first_case(old)
    _other_torch(old)
    assert FC.differences(old, new) == []
    with h5py.File(old, "r") as f:
        inputs = {k: f[case]["inputs"][k][()] for k in f[case]["inputs"]}
        params = json.loads(f[case].attrs["params"])
        W = f[f"{case}/expected/pytorch/fc.W"][()]
    mask = PT3.compared(inputs, floor, params, "fc.W")
    assert mask.any() and not mask.all()
    out_i = tuple(int(i) for i in np.argwhere(~mask)[0])
    in_i = tuple(int(i) for i in np.argwhere(mask)[0])
    name = f"{case}/expected/pytorch/fc.W"
    _edit(new, _set(name, out_i, W[out_i] + np.float32(2e-3)))     # Adam steered by rounding
    assert FC.differences(old, new) == []
    _edit(new, _set(name, in_i, W[in_i] + np.float32(3 * floor["fc.W"])))
    assert any(d.startswith(f"{name}: pytorch values differ") for d in FC.differences(old, new))
    # an element the new build's own mask leaves out (its step-0 gradient made tiny there,
    # within that input's Floors) is not compared either
    g0 = f"{case}/inputs/grad0.fc.W"
    _edit(new, _set(g0, in_i, np.float32(0.0)))
    _edit(new, lambda f: f[case].attrs.__setitem__("floor", json.dumps(
        {**floor, "inputs/grad0.fc.W": max(floor["inputs/grad0.fc.W"], abs(float(inputs["grad0.fc.W"][in_i])))})))
    assert not any(d.startswith(f"{name}:") for d in FC.differences(old, new))
