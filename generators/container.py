"""The fp16 HDF5 model container.

Layout (container_version 1):

- root attributes: "container_version" = 1, "format" = "crnn-container", "config" (the
  config dict as JSON), "param_order" (JSON list of the parameter names), a few readable
  copies of config fields ("name", "input_height", "input_channels", "lstm_layers",
  "hidden", "classes", "alphabet"), and the caller's provenance attributes (trained, seed,
  steps, ...).
- group "params": one float16 dataset per tensor of `model.param_specs(config)`, named by
  the parameter name ("conv0.W", "lstm1.rev.W_hh", "fc.b", ...), created in that order, in
  the stored layout (conv weights [Out][KPadded] with their zero padding columns).

Byte reproducibility: the file is written with libver ('earliest', 'v110'), attribute and
link creation order tracked, contiguous datasets (no chunking, no compression, no
filters), track_times=False on every object, and a fixed write order, so writing the same
inputs twice gives byte-identical files (tested in tests/test_lines_container.py).

Loading widens fp16 to fp32 master copies (exact) and checks every name and shape against
`param_specs`.
"""
from __future__ import annotations

import json
import os

import numpy as np

from . import model

CONTAINER_VERSION = 1
FORMAT = "crnn-container"
_READABLE = ("name", "input_height", "input_channels", "lstm_layers", "hidden", "classes",
             "alphabet")
_RESERVED = {"container_version", "format", "config", "param_order", *_READABLE}


def _attr_value(v):
    """A provenance value as a deterministic HDF5 attribute value."""
    if isinstance(v, (bool, np.bool_)):
        return np.bool_(v)
    if isinstance(v, (int, np.integer)):
        return np.int64(v)
    if isinstance(v, (float, np.floating)):
        return np.float64(v)
    if isinstance(v, str):
        return str(v)          # plain str (subclasses such as TorchVersion confuse h5py)
    return json.dumps(v, sort_keys=True)


def conv_padding_columns(config: dict) -> dict[str, int]:
    """Conv weight name -> K (columns K..KPadded-1 are padding and must be zero)."""
    out, C = {}, config["input_channels"]
    for n, blk in enumerate(config["blocks"]):
        out[f"conv{n}.W"] = blk["kh"] * blk["kw"] * C
        C = blk["out"]
    return out


def check_params(config: dict, params: dict, where: str = "params") -> None:
    """Raise ValueError unless `params` has exactly the tensors of param_specs, in their
    shapes, with zero conv padding columns."""
    specs = model.param_specs(config)
    names = [s.name for s in specs]
    missing = [n for n in names if n not in params]
    extra = sorted(set(params) - set(names))
    if missing or extra:
        raise ValueError(f"{where}: missing tensors {missing}, unexpected tensors {extra}")
    for s in specs:
        shape = tuple(np.shape(params[s.name]))
        if shape != tuple(s.shape):
            raise ValueError(f"{where}: tensor {s.name!r} has shape {shape}, "
                             f"config {config.get('name')!r} expects {tuple(s.shape)}")
    for name, K in conv_padding_columns(config).items():
        pad = np.asarray(params[name])[:, K:]
        if pad.size and np.any(pad != 0):
            raise ValueError(f"{where}: {name!r} padding columns {K}.. are not all zero")


def save_container(path: str, config: dict, params: dict[str, np.ndarray],
                   attrs: dict | None = None) -> None:
    """Write the fp16 container (see the module docstring). Values are rounded to float16
    once (round to nearest even); the file is byte-reproducible."""
    import h5py

    attrs = dict(attrs or {})
    clash = _RESERVED & set(attrs)
    if clash:
        raise ValueError(f"provenance attributes {sorted(clash)} are reserved")
    check_params(config, params)
    specs = model.param_specs(config)
    half = {}
    for s in specs:
        a = np.asarray(params[s.name])
        h = a.astype(np.float16)
        if not np.all(np.isfinite(h[np.isfinite(a)])):
            raise ValueError(f"tensor {s.name!r} overflows float16")
        half[s.name] = np.ascontiguousarray(h)

    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    tmp = os.path.join(d, f".{os.path.basename(path)}.{os.getpid()}.tmp")
    try:
        with h5py.File(tmp, "w", libver=("earliest", "v110"), track_order=True) as f:
            f.attrs["container_version"] = np.int64(CONTAINER_VERSION)
            f.attrs["format"] = FORMAT
            f.attrs["config"] = json.dumps(config)
            f.attrs["param_order"] = json.dumps([s.name for s in specs])
            for k in _READABLE:
                if k in config:
                    f.attrs[k] = _attr_value(config[k])
            for k in sorted(attrs):
                f.attrs[k] = _attr_value(attrs[k])
            g = f.create_group("params", track_order=True)
            for s in specs:
                g.create_dataset(s.name, data=half[s.name], dtype=np.float16,
                                 track_times=False, chunks=None)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def read_attrs(path: str) -> dict:
    """Root attributes as plain Python values (config parsed from JSON)."""
    import h5py

    out = {}
    with h5py.File(path, "r") as f:
        for k, v in f.attrs.items():
            if isinstance(v, bytes):
                v = v.decode()
            elif isinstance(v, np.generic):
                v = v.item()
            out[k] = v
    if "config" in out:
        out["config"] = json.loads(out["config"])
    if "param_order" in out:
        out["param_order"] = json.loads(out["param_order"])
    return out


def load_container(path: str) -> tuple[dict, dict[str, np.ndarray]]:
    """(config, params) with every tensor widened fp16 -> fp32 (exact). Raises ValueError
    for an unknown version, a missing or extra tensor, a non-fp16 dataset or a shape that
    does not match param_specs(config)."""
    import h5py

    with h5py.File(path, "r") as f:
        ver = f.attrs.get("container_version")
        if ver is None or int(ver) != CONTAINER_VERSION:
            raise ValueError(f"{path}: container_version {ver!r}, expected {CONTAINER_VERSION}")
        if "config" not in f.attrs or "params" not in f:
            raise ValueError(f"{path}: not a model container (no config or params group)")
        cfg = f.attrs["config"]
        config = json.loads(cfg.decode() if isinstance(cfg, bytes) else cfg)
        g = f["params"]
        params = {}
        for name in g:
            ds = g[name]
            if ds.dtype != np.float16:
                raise ValueError(f"{path}: tensor {name!r} is {ds.dtype}, expected float16")
            params[name] = ds[()].astype(np.float32)
    check_params(config, params, where=path)
    return config, {s.name: params[s.name] for s in model.param_specs(config)}
