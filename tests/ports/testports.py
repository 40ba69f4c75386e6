"""Builds variants of tests/ports/testport.c (see its header for the -D switches).

    from testports import build_port
    so = build_port(tmp_dir, "-DTP_SEGV")
"""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
FLAGS = ["-O2", "-ffp-contract=off", "-fno-fast-math", "-fPIC", "-shared", "-std=gnu11",
         "-Wall", "-Wextra", "-Wno-unused-parameter"]


def build_port(out_dir, *defines: str) -> Path:
    from crnn_conformance.ctypes_kernels.build import find_compiler
    name = "libtp" + "".join("_" + re.sub(r"[^A-Za-z0-9]+", "", d.replace("-DTP_", ""))
                             for d in defines) + ".so"
    out = Path(out_dir) / name
    if not out.exists():
        cmd = [find_compiler(), *defines, *FLAGS, "-I", str(ROOT / "ctypes_kernels"),
               "-o", str(out), str(HERE / "testport.c")]
        subprocess.run(cmd, check=True, capture_output=True, text=True)
    return out
