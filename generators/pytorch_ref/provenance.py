"""The provenance attributes of every pytorch-tier fixture: torch version, CPU flags, machine,
the generator's git revision and the trained model it was built from."""
from __future__ import annotations

import json
import platform
import subprocess
from pathlib import Path

from .. import container

from . import data
from .torch_env import _torch

ROOT = Path(__file__).resolve().parent.parent.parent


def cpu_flags() -> list[str]:
    """The SIMD-relevant CPU flags of this machine (the ones PyTorch's kernels dispatch on)."""
    keep = ("sse2", "ssse3", "sse4_1", "sse4_2", "fma", "avx", "avx2", "f16c", "avx512f",
            "avx512dq", "avx512cd", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16",
            "avx512_fp16", "amx_tile", "asimd", "sve")
    flags: list[str] = []
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() in ("flags", "Features"):
                flags = value.split()
                break
    except OSError:
        pass
    return [f for f in keep if f in flags]


def git_revision() -> str:
    """HEAD of the repository the generator runs from, '+dirty' when generators/ or the
    trained model have uncommitted changes; 'unknown' outside a git checkout. The environment
    variable CRNN_GENERATOR_REVISION overrides it (a build from an exported tree; tests that
    compare two builds while the working tree may change under them)."""
    import os
    if os.environ.get("CRNN_GENERATOR_REVISION"):
        return os.environ["CRNN_GENERATOR_REVISION"]
    try:
        rev = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                             text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "generators",
                                "fixtures/model"], cwd=ROOT, capture_output=True, text=True,
                               timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return (rev + ("+dirty" if dirty else "")) if rev else "unknown"


def _rel(path) -> str:
    path = Path(path).resolve()
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def provenance() -> dict:
    """Fixture attributes of every pytorch-tier fixture (regen --check reads the first two)."""
    torch = _torch()
    attrs = container.read_attrs(str(data.MODEL_PATH))
    return {"torch_version": str(torch.__version__),
            "cpu_flags": json.dumps(cpu_flags()),
            "torch_cpu_capability": str(torch.backends.cpu.get_cpu_capability()),
            "machine": platform.machine(),
            "generator_git_revision": git_revision(),
            "model": _rel(data.MODEL_PATH),
            "model_cer": float(attrs.get("cer", -1.0)),
            "model_steps": int(attrs.get("steps", -1))}
