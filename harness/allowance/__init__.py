"""Per-element allowances: the error model of each layer evaluated on a case's own inputs
(docs/tolerances.md). One module per layer, named like the layer; each defines
case_errors(case) -> {tensor: Err} (and conv's legal pool decisions, plain integer arrays kept
as they are: allowance/conv.py, Decisions.arrays).

    a = allowances("conv", case)       # {tensor: float64 array, the model's Atol per element}

Computed at gate time from the stored inputs and cached: in memory for the process, and on
disk under the build cache's root (allowance/<model version>/<key>.npz), keyed by the layer,
the case's params and input digests and the model's version (the sources of this package and
the parameters in harness/tolerances.toml), so a changed fixture, model or parameter is
recomputed; the first write of a new version removes the others' entries. With a cold
cache the gate starts `prefetch` first: worker processes (one BLAS thread each) compute the
missing cases while the port runs, and `allowances` waits for a case still being computed.
"""
from __future__ import annotations

import hashlib
import importlib
import json
import os
from functools import lru_cache
from pathlib import Path

import numpy as np

from ...ctypes_kernels import layer_table

from . import params

LAYERS = tuple(layer_table.layer_names())
_MEMORY: dict = {}
_MEMORY_CAP = 64


def module(layer: str):
    if layer not in LAYERS:
        raise KeyError(f"no error model for layer {layer!r}")
    return importlib.import_module(f"{__name__}.{layer}")


@lru_cache(maxsize=1)
def model_version() -> str:
    """A digest of this package's sources and the model's parameters."""
    h = hashlib.sha256()
    for p in sorted(Path(__file__).parent.glob("*.py")):
        h.update(p.name.encode())
        h.update(p.read_bytes())
    h.update(repr(params.all_values()).encode())
    return h.hexdigest()[:20]


def case_key(layer: str, case) -> str:
    from ...generators.h5io import digest
    h = hashlib.sha256()
    h.update(f"{layer}\0{case.name}\0{model_version()}\0".encode())
    h.update(json.dumps(case.params, sort_keys=True, default=str).encode())
    for k in sorted(case.inputs):
        h.update(k.encode())
        h.update(digest(np.asarray(case.inputs[k])).encode())
    return h.hexdigest()[:32]


def cache_dir() -> Path:
    """allowance/<model version>/ under the build cache's root."""
    from ...ctypes_kernels.build import cache_dir as build_dir
    return build_dir().parent / "allowance" / model_version()


_PRUNED = False


def _prune() -> None:
    """Once per process, before its first write: removes the entries of other model versions
    (they are never read again; a gate of another version recomputes what it misses)."""
    global _PRUNED
    if _PRUNED:
        return
    _PRUNED = True
    import shutil
    root = cache_dir().parent
    try:
        others = [p for p in root.iterdir() if p.name != model_version()]
    except OSError:
        return
    for p in others:
        if p.is_dir():
            shutil.rmtree(p, ignore_errors=True)
        else:
            p.unlink(missing_ok=True)


def compute(layer: str, case) -> dict:
    """{tensor: the model's per-element Atol} of one case (no cache)."""
    errs = module(layer).case_errors(case)
    return {k: e if isinstance(e, np.ndarray) else np.asarray(e.allowance(params.lam()), np.float64)
            for k, e in errs.items()}


def allowances(layer: str, case) -> dict:
    """compute(), cached in memory and on disk (module docstring)."""
    key = case_key(layer, case)
    hit = _MEMORY.get(key)
    if hit is not None:
        return hit
    path = cache_dir() / f"{key}.npz"
    out = _load(path)
    if out is None and key in _PENDING:
        try:
            _PENDING.pop(key).result()
        except Exception:       # a failed worker: compute here (its error, if any, shows)
            pass
        out = _load(path)
    if out is None:
        out = compute(layer, case)
        _store(path, out)
    if len(_MEMORY) >= _MEMORY_CAP:
        _MEMORY.pop(next(iter(_MEMORY)))
    _MEMORY[key] = out
    return out


def _load(path: Path):
    try:
        with np.load(path) as z:
            return {k: z[k] for k in z.files}
    except (OSError, ValueError, KeyError):
        return None


def _store(path: Path, arrays: dict) -> None:
    """Atomic: a reader sees the whole file or none (another process may write it too)."""
    try:
        _prune()
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        with open(tmp, "wb") as f:
            np.savez(f, **arrays)
        os.replace(tmp, path)
    except OSError:
        pass      # a read-only cache: compute again next time


# ---- prefetch: the missing cases computed by worker processes while the gate runs the port

_PENDING: dict = {}        # case key -> Future (one per fixture file)
_POOL = None
WORKER_ENV = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def prefetch(items, workers: int | None = None) -> int:
    """items: (layer, fixture path, case) of the tolerance-tier cases the gate will compare.
    Starts computing those not cached, one task per fixture file, largest first; returns the
    number of cases submitted (0: all cached, or no worker could be started)."""
    global _POOL
    todo: dict = {}
    for layer, path, case in items:
        if layer not in LAYERS:
            continue
        key = case_key(layer, case)
        if key in _MEMORY or key in _PENDING or (cache_dir() / f"{key}.npz").exists():
            continue
        todo.setdefault((layer, str(path)), []).append((case.name, key))
    if not todo:
        return 0
    workers = workers or max(1, min(2, os.cpu_count() or 1))
    saved = {k: os.environ.get(k) for k in WORKER_ENV}
    os.environ.update(WORKER_ENV)          # inherited by the workers, started on submit
    try:
        if _POOL is None:
            import concurrent.futures as cf
            import multiprocessing as mp
            _POOL = cf.ProcessPoolExecutor(workers, mp_context=mp.get_context("spawn"),
                                           initializer=_die_with, initargs=(os.getpid(),))
        for (layer, path), cases in todo.items():        # in the gate's order
            for name, key in cases:
                _PENDING[key] = _POOL.submit(_worker, layer, path, name)
    except (OSError, RuntimeError, ImportError):
        return 0
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return sum(len(c) for c in todo.values())


def _die_with(parent: int) -> None:
    """A pool worker's start: it dies with the gate (PR_SET_PDEATHSIG, Linux), so a gate killed
    with SIGKILL leaves no worker computing (nor, their pipe closed, the resource tracker);
    a gate already gone before the call is seen by getppid."""
    import ctypes
    import signal
    try:
        ctypes.CDLL(None).prctl(1, int(signal.SIGKILL))   # PR_SET_PDEATHSIG
    except (AttributeError, OSError):
        pass                                              # (not Linux)
    if os.getppid() != parent:
        os._exit(1)


_FIXTURES: dict = {}


def _worker(layer: str, path: str, name: str) -> None:
    from ...generators.h5io import read_fixture
    if path not in _FIXTURES:
        _FIXTURES.clear()
        _FIXTURES[path] = {c.name: c for c in read_fixture(path).cases}
    case = _FIXTURES[path][name]
    _store(cache_dir() / f"{case_key(layer, case)}.npz", compute(layer, case))


def shutdown() -> None:
    """Stops the prefetch workers (waiting for none)."""
    global _POOL
    if _POOL is not None:
        _POOL.shutdown(wait=False, cancel_futures=True)
        _POOL = None
    _PENDING.clear()
