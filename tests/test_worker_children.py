"""What a port leaves behind and what it says (red-team reproducers): the processes a Python
port starts (os.fork, subprocess.Popen) die with the worker's process group; a port exception
whose str() raises still fails its case in one line; a port that crashes, exits or hangs while
`info --port` or `bench --port` loads it is one line and exit 2; a Python port that prints
without end is told it hit the output limit."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from crnn_conformance.harness import pyport

from testports import cannot_run, gate, gone, left_running, ROOT  # noqa: E402

BASE = """
import os, subprocess, sys, time
import numpy as np

NOTE = {note!r}

def note(pid):
    with open(NOTE, "a") as f:
        f.write(f"{{pid}}\\n")

class Port:
    def linear_forward(self, x, W, b, T, I, O, y):
        {forward}
        return x @ W.T + b

    def linear_backward(self, x, W, dY, T, I, O, dx, dW, db):
        return dY @ W, dY.T @ x, dY.sum(axis=0)
"""


def port(tmp_path, forward: str = "pass", extra: str = "", name: str = "port.py") -> str:
    """A linear Python port whose linear_forward first runs `forward` (one or more lines);
    note(pid) appends a pid to tmp_path/pids."""
    body = textwrap.indent(textwrap.dedent(forward), " " * 8).lstrip()
    path = tmp_path / name
    path.write_text(BASE.format(note=str(tmp_path / "pids"), forward=body) + textwrap.dedent(extra))
    return f"{path}:Port"


def linear_gate(spec, *args, **kw):
    return gate("--port", spec, "--layers", "linear", "--tiers", "float64", "-q", "--jobs", "1",
                *args, **kw)



def _left_running(tmp_path, wait: float = 5.0) -> list[int]:
    """The noted pids still running after up to `wait` seconds (killed, so none stays)."""
    note = tmp_path / "pids"
    pids = [int(x) for x in note.read_text().split()] if note.exists() else []
    assert pids, "the port started no process"
    return left_running(pids, wait)


# ---- 1. the processes a Python port starts do not outlive the gate -------------------------------

def test_a_python_ports_fork_child_does_not_outlive_the_gate(tmp_path):
    """Before: each call's child (a copy of the worker) was left running, and the gate waited
    5 s for the worker's end, which the child held open."""
    spec = port(tmp_path, """
        if os.fork() == 0:
            note(os.getpid())
            time.sleep(1000)
            os._exit(0)
    """)
    t0 = time.monotonic()
    r = linear_gate(spec, "--timeout", "60")
    took = time.monotonic() - t0
    assert r.returncode == 0, (r.stdout[-2000:], r.stderr)
    assert _left_running(tmp_path) == []
    assert took < 60          # (no call waited out --timeout)


def test_a_python_ports_subprocess_does_not_outlive_the_gate(tmp_path):
    """Before: every `sleep 1000` the port started was left running."""
    spec = port(tmp_path, """
        note(subprocess.Popen(["sleep", "1000"]).pid)
    """)
    r = linear_gate(spec)
    assert r.returncode == 0, (r.stdout[-2000:], r.stderr)
    assert _left_running(tmp_path) == []


def test_a_hung_workers_processes_are_killed_with_it(tmp_path):
    """A port that starts a process, then hangs: the worker killed for the hang takes the
    process with it. Before: only the worker was killed."""
    spec = port(tmp_path, """
        note(subprocess.Popen(["sleep", "1000"]).pid)
        time.sleep(1000)
    """)
    r = linear_gate(spec, "--timeout", "1", "--case", "T25_I37_O37")
    assert r.returncode == 1, (r.stdout[-2000:], r.stderr)
    assert "hang" in r.stdout
    assert _left_running(tmp_path) == []


def test_a_gate_stopped_by_a_signal_takes_the_ports_processes_along(tmp_path):
    """SIGTERM to a gate whose port started a process and hangs: exit 143 and the process is
    gone. Before: the worker was killed, the port's process left running."""
    spec = port(tmp_path, """
        note(subprocess.Popen(["sleep", "1000"]).pid)
        time.sleep(1000)
    """)
    p = subprocess.Popen([sys.executable, "-m", "crnn_conformance.harness.cli", "gate", "--port",
                          spec, "--layers", "linear", "--tiers", "float64", "-q", "--jobs", "1",
                          "--timeout", "60"], cwd=ROOT, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 30
        while time.time() < deadline and not (tmp_path / "pids").exists():
            time.sleep(0.05)
        time.sleep(0.2)
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 143, err
    assert _left_running(tmp_path) == []


def test_the_child_of_a_fork_that_raises_ends_before_telling_anything(tmp_path):
    """A fork() in a method whose child raises: the child ends as the method raises, before its
    traceback is printed into the run's output or anything of the worker runs in it. Before:
    the child printed its traceback into the parent's run."""
    spec = port(tmp_path, """
        pid = os.fork()
        if pid == 0:
            raise RuntimeError("child boom")
        os.waitpid(pid, 0)
    """)
    out = tmp_path / "results.json"
    r = linear_gate(spec, "--case", "T25_I37_O37", "--json", str(out))
    assert r.returncode == 0, (r.stdout[-2000:], r.stderr)
    assert "child boom" not in out.read_text()


# ---- 2. a port's exception whose str() raises ------------------------------------------------------

STR_RAISES = """
class E(Exception):
    def __str__(self):
        raise RuntimeError("str boom")

class Raising(Port):
    def linear_forward(self, x, W, b, T, I, O, y):
        raise E()

class CtorRaises(Port):
    def __init__(self):
        raise E()

class PropertyRaises(Port):
    @property
    def linear_forward(self):
        raise RuntimeError("prop boom")

class ConfigsRaise(Port):
    @property
    def configs(self):
        raise E()
"""


def test_first_line_survives_a_str_that_raises():
    """Before: _first_line raised the port's RuntimeError."""
    class E(Exception):
        def __str__(self):
            raise RuntimeError("str boom")

    class R:
        def __repr__(self):
            raise ValueError("repr boom")

    assert pyport._first_line(E()) == "E (whose str() raised RuntimeError)"
    assert pyport._first_line(ValueError("a\nb")) == "ValueError: a"
    assert "whose repr() raised ValueError: repr boom" in pyport._repr(R())


def test_an_exception_whose_str_raises_fails_the_case(tmp_path):
    """Before: "internal error in gate (RuntimeError: harness error in the worker:)", exit 2."""
    spec = port(tmp_path, extra=STR_RAISES).replace(":Port", ":Raising")
    r = linear_gate(spec, "--case", "T25_I37_O37")
    assert r.returncode == 1, (r.stdout[-2000:], r.stderr)
    assert "linear_forward raised E (whose str() raised RuntimeError)" in r.stdout
    assert "internal error" not in r.stdout + r.stderr and "Traceback" not in r.stderr


def test_fuzz_reports_an_exception_whose_str_raises_as_a_finding(tmp_path):
    """Before: fuzz printed the worker's traceback and exited 2."""
    spec = port(tmp_path, extra=STR_RAISES).replace(":Port", ":Raising")
    r = gate("--port", spec, "--layers", "linear", "--seconds", "2", "--jobs", "1", "--seed", "1",
             "--out", str(tmp_path / "fz"), command="fuzz")
    assert r.returncode == 1, (r.stdout[-2000:], r.stderr)
    assert "whose str() raised RuntimeError" in r.stdout
    assert "Traceback" not in r.stdout + r.stderr


@pytest.mark.parametrize("obj, fragment", [
    ("CtorRaises", "CtorRaises() raised E (whose str() raised RuntimeError)"),
    ("PropertyRaises", "looking up its attribute 'linear_forward' raised RuntimeError: prop boom"),
    ("ConfigsRaise", "looking up its attribute 'configs' raised E (whose str() raised"),
])
def test_a_port_object_that_raises_while_loading_is_named(tmp_path, obj, fragment):
    """Before: "crashed while loading (exited with status 1)", the reason lost."""
    spec = port(tmp_path, extra=STR_RAISES).replace(":Port", f":{obj}")
    cannot_run(linear_gate(spec), fragment)


# ---- 3. info --port and bench --port load the port as the gate does ---------------------------------

CTOR = r"""
#include <stdlib.h>
#include <unistd.h>
__attribute__((constructor)) static void misbehave(void)
{
#if defined(SEGV)
    *(volatile int *)0 = 1;
#elif defined(EXIT0)
    exit(0);
#else
    for (;;) pause();
#endif
}
"""


@pytest.fixture(scope="module")
def ctor_ports(tmp_path_factory):
    from crnn_conformance.ctypes_kernels.build import find_compiler
    d = tmp_path_factory.mktemp("ctor")
    (d / "ctor.c").write_text(CTOR)
    built = {}
    for what in ("SEGV", "EXIT0", "HANG"):
        out = d / f"ctor_{what}.so"
        subprocess.run([find_compiler(), f"-D{what}", "-shared", "-fPIC", "-o", str(out),
                        str(d / "ctor.c")], check=True, capture_output=True)
        built[what] = str(out)
    return built


@pytest.mark.parametrize("what, fragment", [
    ("SEGV", "crashed while loading (killed by signal SIGSEGV"),
    ("EXIT0", "crashed while loading (exited with status 0)"),
    ("HANG", "did not load within 2 s"),
])
def test_info_survives_a_port_that_crashes_exits_or_hangs_while_loading(ctor_ports, what,
                                                                        fragment):
    """Before: info died of the SIGSEGV (exit 139), exited 0 saying nothing, or hung."""
    timeout = ["--timeout", "2"] if what == "HANG" else []    # (the default: 120 s)
    r = gate("--port", ctor_ports[what], *timeout, command="info", timeout=60)
    cannot_run(r, fragment)


@pytest.mark.parametrize("what, fragment", [
    ("SEGV", "crashed while loading (killed by signal SIGSEGV"),
    ("EXIT0", "crashed while loading (exited with status 0)"),
])
def test_bench_survives_a_port_that_crashes_or_exits_while_loading(ctor_ports, what, fragment):
    """Before: bench died of the SIGSEGV (exit 139) or exited 0 saying nothing."""
    r = gate("--port", ctor_ports[what], "--no-torch", "--no-layers", "--no-memory", "--no-gate",
             "--fuzz-seconds", "0", "--reps", "1", "--warmup", "0", "--rounds", "1", "--isa",
             "scalar", "--threads", "1", command="bench", timeout=60)
    cannot_run(r, fragment)


@pytest.mark.parametrize("env, fragment", [
    ({"CRASH_ON_IMPORT": "segv"}, "crashed while loading (killed by signal SIGSEGV"),
    ({"CRASH_ON_IMPORT": "exit"}, "crashed while loading (exited with status 0)"),
])
def test_info_survives_a_python_port_that_crashes_on_import(tmp_path, env, fragment):
    """Before: info died of the SIGSEGV (exit 139) or exited 0 saying nothing."""
    spec = port(tmp_path, extra="""
        how = os.environ.get("CRASH_ON_IMPORT")
        if how == "segv":
            import ctypes
            ctypes.string_at(0)
        elif how == "exit":
            os._exit(0)
    """)
    cannot_run(gate("--port", spec, command="info", env=env, timeout=60), fragment)


def test_info_describes_a_python_port_loaded_in_a_worker(tmp_path):
    r = gate("--port", port(tmp_path), command="info", timeout=60)
    assert r.returncode == 0, r.stderr
    assert "isa paths:    python" in r.stdout and "abi version:  1" in r.stdout


# ---- 4. a Python port that prints without end -----------------------------------------------------

def test_a_python_port_printing_without_end_is_told_the_output_limit(tmp_path):
    """Before: "the port crashed in crnn_linear_forward: exited with status 1"."""
    spec = port(tmp_path, """
        line = "x" * 65536
        while True:
            print(line)
    """)
    r = linear_gate(spec, "--case", "T25_I37_O37")
    assert r.returncode == 1, (r.stdout[-2000:], r.stderr)
    assert "output reached the worker's limit of 256 MiB" in r.stdout, r.stdout[-2000:]
    assert "crashed" not in r.stdout
