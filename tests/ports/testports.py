"""Builds variants of tests/ports/testport.c (see its header for the -D switches) or of
another port there (`source=`: blasport.c, a conv port written like one on an fp32 BLAS), and
runs the gate on them.

    from testports import build_port, gate, cannot_run
    so = build_port(tmp_dir, "-DTP_SEGV")
    r = gate("--port", str(so), "--layers", "dot16,linear")
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
FLAGS = ["-O2", "-ffp-contract=off", "-fno-fast-math", "-fPIC", "-shared", "-std=gnu11",
         "-Wall", "-Wextra", "-Wno-unused-parameter"]


def build_port(out_dir, *defines: str, source: str = "testport.c") -> Path:
    """The port built from tests/ports/SOURCE with the -D switches `defines`."""
    from crnn_conformance.ctypes_kernels.build import find_compiler
    stem = "libtp" if source == "testport.c" else "lib" + Path(source).stem
    name = stem + "".join("_" + re.sub(r"[^A-Za-z0-9]+", "", d.replace("-DTP_", "").replace("-DBP_", "").replace("-", "m"))
                             for d in defines) + ".so"
    out = Path(out_dir) / name
    if not out.exists():
        cmd = [find_compiler(), *defines, *FLAGS, "-I", str(ROOT / "ctypes_kernels"),
               "-o", str(out), str(HERE / source)]
        subprocess.run(cmd, check=True, capture_output=True, text=True)
    return out


def gate(*args, env=None, timeout=120, command="gate"):
    """crnn-conformance COMMAND ARGS in a subprocess from the repository root."""
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.run([sys.executable, "-m", "crnn_conformance.harness.cli", command, *args],
                          cwd=ROOT, capture_output=True, text=True, env=e, timeout=timeout)


def cannot_run(r, *fragments) -> str:
    """Exit 2, exactly one line on stderr naming the problem, no traceback."""
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("crnn-conformance: cannot run: "), lines[0]
    assert "Traceback" not in r.stderr + r.stdout
    for f in fragments:
        assert f in lines[0], (f, lines[0])
    return lines[0]


def gone(pid: int) -> bool:
    """The process `pid` has ended (a zombie, waiting to be reaped, counts as ended)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def left_running(pids, within: float) -> list[int]:
    """The processes of `pids` still running after up to `within` seconds (then killed, so none
    stays)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline and not all(map(gone, pids)):
        time.sleep(0.02)
    left = [p for p in pids if not gone(p)]
    for p in left:
        try:
            os.kill(p, signal.SIGKILL)
        except OSError:
            pass
    return left


def dot16_fixture_checks() -> int:
    """The packaged fixtures' dot16 checks as the plugin collects them: each case's tiers and
    its identity check."""
    from crnn_conformance.generators import h5io
    from crnn_conformance.harness.records import FIXTURES_DIR
    n = 0
    for path in sorted(Path(FIXTURES_DIR).glob("*.h5")):
        fx = h5io.read_fixture(path)
        if fx.attrs["layer"] == "dot16":
            n += sum(len(c.expected) + 1 for c in fx.cases)
    return n
