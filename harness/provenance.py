"""Where a run happened: the port's and fixtures' digests, the build, the CPU, the host and the
tool (results.json's meta)."""
from __future__ import annotations

import os
import platform
import shlex
import sys
from functools import lru_cache
from pathlib import Path

from ..ctypes_kernels.cache import file_sha256


def sha256(path) -> str | None:
    try:
        return file_sha256(path)
    except OSError:
        return None


def fixture_info(f) -> dict:
    d = {k: v for k, v in f.attrs.items() if k != "case_names"}
    d["cases"] = len(f.cases)
    d["sha256"] = sha256(f.path)
    return d


def build_info() -> dict | None:
    from ..ctypes_kernels import build
    try:
        d = build.describe()
    except build.BuildError:
        return None
    return {"cc": d["cc"], "cc_version": d["cc_version"], "opt": d["opt"],
            "flags": list(d["base_flags"]), "isa_flags": {k: list(v) for k, v in d["isa_flags"].items()}}


SIMD_FLAGS = ("sse2", "ssse3", "sse4_1", "sse4_2", "fma", "avx", "avx2", "f16c", "avx512f",
              "avx512dq", "avx512cd", "avx512bw", "avx512vl", "avx512_bf16", "avx512_fp16",
              "asimd", "sve")


@lru_cache(maxsize=1)
def cpu_info() -> dict:
    model, flags = platform.processor() or "unknown", []
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            key = key.strip()
            if key in ("model name", "Model") and model in ("unknown", "", platform.machine()):
                model = value.strip()
            elif key in ("flags", "Features") and not flags:
                flags = value.split()
    except OSError:
        pass
    return {"model": model, "machine": platform.machine(), "logical_cpus": os.cpu_count(),
            "simd_flags": [f for f in SIMD_FLAGS if f in flags], "flags": flags}


def host_info() -> dict:
    import h5py
    import numpy
    return {"os": platform.platform(), "python": platform.python_version(),
            "numpy": numpy.__version__, "h5py": h5py.__version__}


def tool_info() -> dict:
    from importlib import metadata
    try:
        version = metadata.version("crnn-conformance")
    except metadata.PackageNotFoundError:
        version = "unknown"
    return {"name": "crnn-conformance", "version": version,
            "command": shlex.join([Path(sys.argv[0]).name, *sys.argv[1:]]) if sys.argv else ""}
