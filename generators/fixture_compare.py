"""Comparing fixture files: the rule of `regen-fixtures --check`, and a dataset-by-dataset
summary of two fixture sets (`python -m crnn_conformance.generators.fixture_compare OLD NEW`).

The rule (docs/fixtures.md, "Reproducibility"; docs/pytorch-tier.md, "regen and --check"):

- Every fixture that PyTorch did not compute regenerates bit for bit on every machine, so
  every dataset and every attribute must be equal, apart from the provenance attributes
  (PROVENANCE: which versions and machine wrote the file).
- A pytorch-tier fixture built with the same torch version and CPU flags: the same.
- A pytorch-tier fixture built with another torch version or CPU flags (torch_env_change):
  PyTorch's fp32 values may move within their rounding. Datasets that did not come from
  PyTorch (weights, images, targets, integer data) must still be equal. For the values that
  did, the fp32 result on each machine is within its Floor of the float64 result on the same
  inputs, and the float64 results of the two machines agree to far below a Floor (float64
  rounds 2^29 times finer), so on the SAME inputs
  |old - new| <= (Floor_old + Floor_new) * (1 + F64_AGREEMENT). F64_AGREEMENT = 2^-19 covers
  that float64 disagreement and the rounding of the Floors themselves: one element can sit at
  both Floors with opposite signs, and then the bound is attained.
  - inputs that PyTorch computed upstream (floor key inputs/<name>) come from the same
    weights and images on both machines: compared old against new;
  - the outputs of a per-layer case come from those inputs, which differ between the
    machines: the builder's `rerun(inputs, params)` recomputes fp32 and float64 on this
    machine from the CHECKED-IN inputs, and old is compared with that fp32 result and its
    Floor;
  - the outputs of a whole-model case (no rerun: its inputs are all equal) are compared old
    against new; where the builder's `compared(inputs, floor, params, tensor)` says a
    tensor's Floor covers only some elements (pytorch_train3's 50-Floor mask), only the
    elements both builds compare.
  The case attributes `params` and `floor` hold PyTorch-computed numbers and are not
  compared then.
"""
from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

import h5py
import numpy as np

from .h5io import MANIFEST_ATTRS

# root attributes that say who wrote a file, not what it holds (numpy_version and h5py_version
# are no longer written; `generator` names the builder module, which the move under one
# import name renamed)
PROVENANCE = ("generator", "numpy_version", "h5py_version", "generator_git_revision",
              "torch_version", "cpu_flags", "torch_cpu_capability", "machine")
# not compared either: the manifest is a digest of the contents compared here one by one
NOT_COMPARED = PROVENANCE + MANIFEST_ATTRS
# PyTorch's fp32 results depend on these (its kernels dispatch on the CPU)
TORCH_ENV_ATTRS = ("torch_version", "cpu_flags")
F64_AGREEMENT = 2.0 ** -19


def _generator(name: str):
    """The builder module a fixture names in its `generator` attribute ("generators.cases.x",
    the folder's name), imported as the installed package's module."""
    prefix = "crnn_conformance."
    return importlib.import_module(name if name.startswith(prefix) else prefix + name)


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


def _datasets(f) -> list[str]:
    names = []
    f.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) else None)
    return names


def _same_value(a, b) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.asarray(a).tobytes() == np.asarray(b).tobytes() and \
            np.shape(a) == np.shape(b) and np.asarray(a).dtype == np.asarray(b).dtype
    return a == b


def _attr_differences(name: str, ao, an, skip=()) -> list[str]:
    out = []
    for k in sorted(set(ao) | set(an)):
        if k in skip:
            continue
        if k not in an:
            out.append(f"{name}attribute {k}: no longer written")
        elif k not in ao:
            out.append(f"{name}attribute {k}: missing in the checked-in file")
        elif not _same_value(ao[k], an[k]):
            out.append(f"{name}attribute {k} differs")
    return out


def _floors(group) -> dict:
    return json.loads(group.attrs["floor"]) if "floor" in group.attrs else {}


def _input_floor(f, name: str) -> float | None:
    """The Floor of dataset <case>/inputs/<name> (floor key inputs/<name>), or None."""
    parts = name.split("/")
    if len(parts) != 3 or parts[1] != "inputs" or parts[0] not in f:
        return None
    return _floors(f[parts[0]]).get(f"inputs/{parts[2]}")


def _within(a, b, allowed, mask=None):
    """(passes, max |a - b|) of two float arrays; equal values (inf, NaN) count 0."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    with np.errstate(invalid="ignore"):
        d = np.where((a == b) | (np.isnan(a) & np.isnan(b)), 0.0, np.abs(a - b))
    d = np.where(np.isnan(d), np.inf, d)
    if mask is not None:
        d = np.where(mask, d, 0.0)
    worst = float(d.max()) if d.size else 0.0
    return worst <= allowed, worst


def _floor_rule(name, a, b, floor_old, floor_new, mask=None) -> list[str]:
    if np.asarray(a).dtype.kind != "f":
        return [] if _same_value(a, b) else [f"{name}: bits differ"]
    allowed = (floor_old + floor_new) * (1.0 + F64_AGREEMENT)
    ok, worst = _within(a, b, allowed, mask)
    return [] if ok else [f"{name}: pytorch values differ by {worst:.3g}, beyond their Floors ({allowed:.3g})"]


def _pytorch_expected(fo, fn, module) -> list[str]:
    """The expected/pytorch datasets of every case under a torch or CPU change."""
    from . import pytorch_ref as R
    rerun = getattr(module, "rerun", None)
    compared = getattr(module, "compared", None)
    out = []
    for case in json.loads(_attr(fo, "case_names")):
        go = fo[case]
        old = {t: go["expected/pytorch"][t][()] for t in go["expected/pytorch"]}
        inputs = {k: go["inputs"][k][()] for k in go["inputs"]}
        params, floor_old = json.loads(go.attrs["params"]), _floors(go)
        if rerun is not None:                        # a per-layer case: its own inputs here
            with R.deterministic():
                e32, e64 = rerun(inputs, params)
            new, floor_new, masks = e32, R.floors(e32, e64), {}
        elif case in fn:                             # a whole-model case: the fresh build
            gn = fn[case]
            new = {t: gn["expected/pytorch"][t][()] for t in gn["expected/pytorch"]}
            floor_new = _floors(gn)
            masks = {}
            if compared is not None:
                inputs_new = {k: gn["inputs"][k][()] for k in gn["inputs"]}
                params_new = json.loads(gn.attrs["params"])
                masks = {t: compared(inputs, floor_old, params, t) &
                         compared(inputs_new, floor_new, params_new, t) for t in old}
        else:
            out.append(f"{case}: no longer generated")
            continue
        for t, a in old.items():
            name = f"{case}/expected/pytorch/{t}"
            if t not in new:
                out.append(f"{name}: no longer generated")
            elif np.shape(a) != np.shape(new[t]):
                out.append(f"{name}: shape changed")
            else:
                out += _floor_rule(name, a, new[t], floor_old.get(t, 0.0), floor_new.get(t, 0.0),
                                   masks.get(t))
    return out


def differences(old: Path, new: Path) -> list[str]:
    """What differs between the checked-in fixture `old` and a fresh build `new`, by the
    rule of the module docstring; [] when `old` is current."""
    if old.read_bytes() == new.read_bytes():
        return []
    env = torch_env_change(old, new)
    try:
        fo = h5py.File(old, "r")
    except OSError as e:
        return [f"unreadable ({e})"]
    with fo, h5py.File(new, "r") as fn:
        out = _attr_differences("", dict(fo.attrs), dict(fn.attrs), NOT_COMPARED)
        for case in sorted(set(fo) | set(fn)):
            if case in fo and case in fn and isinstance(fn[case], h5py.Group):
                skip = ("params", "floor") if env else ()
                out += _attr_differences(f"{case}: ", dict(fo[case].attrs), dict(fn[case].attrs),
                                         skip)
        for n in _datasets(fn):
            if n not in fo:
                out.append(f"{n}: missing in the checked-in file")
                continue
            a, b = fo[n][()], fn[n][()]
            if np.shape(a) != np.shape(b) or np.asarray(a).dtype != np.asarray(b).dtype:
                out.append(f"{n}: shape/dtype changed")
            elif env and "/expected/pytorch/" in n:
                continue                                   # below, case by case
            elif env and _input_floor(fn, n) is not None:  # computed by PyTorch upstream
                out += _floor_rule(n, a, b, _input_floor(fo, n) or 0.0, _input_floor(fn, n))
            elif not _same_value(a, b):
                out.append(f"{n}: bits differ")
            else:
                out += _attr_differences(f"{n}: ", dict(fo[n].attrs), dict(fn[n].attrs))
        out += [f"{n}: no longer generated" for n in _datasets(fo) if n not in fn]
        if env:
            out += _pytorch_expected(fo, fn, _generator(_attr(fn, "generator")))
    return out


# ------------------------------------------------------------------ two fixture sets

TIERS = ("inputs", "exact", "float64", "pytorch")


def _tier(name: str) -> str:
    parts = name.split("/")
    return "inputs" if parts[1] == "inputs" else parts[2]


def _max_rel(a, b) -> tuple[float, float]:
    """(max over the changed elements of |a - b| / max(|a|, |b|), max |a - b| / max |a|)."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    changed = (a != b) & ~(np.isnan(a) & np.isnan(b))
    if not changed.any():
        return 0.0, 0.0
    with np.errstate(invalid="ignore", divide="ignore"):
        d = np.abs(a - b)[changed]
        rel = float(np.nanmax(d / np.maximum(np.abs(a), np.abs(b))[changed]))
        scale = float(np.nanmax(np.abs(a[np.isfinite(a)]))) if np.isfinite(a).any() else 0.0
    return rel, (float(np.nanmax(d)) / scale if scale else float("inf"))


def compare_file(old: Path, new: Path) -> dict:
    """Per tier: datasets and how many changed (bits); the float64 tier's largest change,
    relative to the element and relative to its dataset's largest value; root and case
    attributes that changed (provenance aside)."""
    row = {t: [0, 0] for t in TIERS}
    row["float64_max_rel"], row["float64_max_norm"], row["attrs"] = 0.0, 0.0, 0
    with h5py.File(old, "r") as fo, h5py.File(new, "r") as fn:
        row["attrs"] = len(_attr_differences("", dict(fo.attrs), dict(fn.attrs), NOT_COMPARED))
        for case in fn:
            if case in fo:
                row["attrs"] += len(_attr_differences("", dict(fo[case].attrs), dict(fn[case].attrs)))
        for n in _datasets(fn):
            t = _tier(n)
            row[t][0] += 1
            if n not in fo or not _same_value(fo[n][()], fn[n][()]):
                row[t][1] += 1
                if t == "float64" and n in fo and np.shape(fo[n]) == np.shape(fn[n]):
                    rel, norm = _max_rel(fo[n][()], fn[n][()])
                    row["float64_max_rel"] = max(row["float64_max_rel"], rel)
                    row["float64_max_norm"] = max(row["float64_max_norm"], norm)
    return row


def compare_sets(old_dir: Path, new_dir: Path) -> dict:
    """{fixture name: compare_file row} over the fixtures present in both directories."""
    names = sorted(p.stem for p in Path(new_dir).glob("*.h5") if (Path(old_dir) / p.name).exists())
    return {n: compare_file(Path(old_dir) / f"{n}.h5", Path(new_dir) / f"{n}.h5") for n in names}


def format_table(rows: dict) -> str:
    """One line per fixture and a total: changed / all datasets per tier, the float64 tier's
    largest change relative to the element (rel) and to its dataset's largest value (norm),
    changed attributes."""
    head = (f"{'fixture':16s}" + "".join(f"{t + ' changed':>18s}" for t in TIERS) +
            f"{'f64 max rel':>13s}{'f64 max norm':>14s}{'attrs':>7s}")
    lines = [head]
    tot = {t: [0, 0] for t in TIERS}
    rel = norm = 0.0
    attrs = 0
    for name, r in rows.items():
        lines.append(f"{name:16s}" + "".join(f"{f'{r[t][1]} / {r[t][0]}':>18s}" for t in TIERS) +
                     f"{r['float64_max_rel']:>13.3g}{r['float64_max_norm']:>14.3g}{r['attrs']:>7d}")
        for t in TIERS:
            tot[t] = [tot[t][0] + r[t][0], tot[t][1] + r[t][1]]
        rel, norm = max(rel, r["float64_max_rel"]), max(norm, r["float64_max_norm"])
        attrs += r["attrs"]
    lines.append(f"{'total':16s}" + "".join(f"{f'{tot[t][1]} / {tot[t][0]}':>18s}" for t in TIERS) +
                 f"{rel:>13.3g}{norm:>14.3g}{attrs:>7d}")
    return "\n".join(lines)


def main(argv=None) -> int:
    """OLD NEW: the table; exit 1 when an exact-tier dataset, or an input of a fixture
    without a pytorch tier, changed."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        print("usage: python -m crnn_conformance.generators.fixture_compare OLD_DIR NEW_DIR",
              file=sys.stderr)
        return 2
    rows = compare_sets(Path(argv[0]), Path(argv[1]))
    print(format_table(rows))
    # exact-tier bits never move; nor do the inputs of a fixture PyTorch did not compute
    return 1 if any(r["exact"][1] or (r["inputs"][1] and not r["pytorch"][0])
                    for r in rows.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
