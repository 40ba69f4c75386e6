"""A process the port starts that leaves its worker's process group (setsid()) does not outlive
the gate on Linux: the process that runs the workers is a child subreaper, so such a process
comes back to it when its parent dies and is killed (harness/sandbox/reaper.py). Through the
gate and the fuzzer for a C port (a setsid() child of a call, a daemon made by a double
fork, a child of the library's constructor under `info --port`) and a Python port
(subprocess.Popen in a session of its own; a child of os.fork() already dies with the
worker), and in-process: the caller's own children are left alone and the process is no
subreaper afterwards."""
from __future__ import annotations

import ctypes
import subprocess
import sys
import textwrap

import pytest

from testports import gate, left_running

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="the subreaper is Linux's")

# core + a correct crnn_dot16 (lanes k mod 16, then the tree); RP_MODE says when it starts a
# sleeper in a session of its own (once per process), whose pid goes to RP_PIDFILE
PORT = r"""
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static int is(const char *mode) { const char *m = getenv("RP_MODE"); return m && !strcmp(m, mode); }

static void note(pid_t pid)
{
    FILE *f = fopen(getenv("RP_PIDFILE"), "a");
    if (f) { fprintf(f, "%d\n", (int)pid); fclose(f); }
}

/* setsid: a child in a session of its own; daemon: the same, whose child stays (its parent
   ends at once, so it comes back to the gate while the worker still runs). The caller goes
   on once the sleeper left the worker's group (the pipe's write ends closed) and its pid is
   noted. */
static void start_sleeper(void)
{
    static int started;
    int fds[2];
    char c;
    if (started++ || pipe(fds) != 0) return;
    pid_t pid = fork();
    if (pid != 0) {
        close(fds[1]);
        while (pid > 0 && read(fds[0], &c, 1) > 0) {}
        close(fds[0]);
        if (pid > 0 && is("daemon")) waitpid(pid, NULL, 0);
        else if (pid > 0) note(pid);
        return;
    }
    close(fds[0]);
    setsid();
    if (is("daemon") && (pid = fork()) != 0) {
        if (pid > 0) note(pid);
        _exit(0);
    }
    close(fds[1]);
    for (;;) pause();
}

__attribute__((constructor)) static void on_load(void) { if (is("load")) start_sleeper(); }

static int32_t threads = 1;
int32_t crnn_abi_version(void) { return 1; }
uint32_t crnn_isa_available(void) { return 1; }
int32_t crnn_set_isa(int32_t isa) { return isa < 0 || isa > 3 ? -1 : isa == 0 ? 0 : -2; }
int32_t crnn_get_isa(void) { return 0; }
int32_t crnn_set_threads(int32_t n) { if (n < 1 || n > 256) return -1; threads = n; return 0; }
int32_t crnn_get_threads(void) { return threads; }

int32_t crnn_dot16(const float *a, const float *b, int64_t n, float *out)
{
    if (n < 0 || !out || (n > 0 && (!a || !b))) return -1;
    float p[16] = {0};
    for (int64_t k = 0; k < n; k++) p[k % 16] = fmaf(a[k], b[k], p[k % 16]);
    for (int s = 8; s >= 1; s >>= 1)
        for (int i = 0; i < s; i++) p[i] = p[i] + p[i + s];
    *out = p[0];
    if (is("setsid") || is("daemon")) start_sleeper();
    return 0;
}
"""

PY_PORT = """
import subprocess
import numpy as np

class Port:
    def linear_forward(self, x, W, b, T, I, O, y):
        if not getattr(Port, "started", False):
            Port.started = True
            p = subprocess.Popen(["sleep", "1000"], start_new_session=True)
            with open({pidfile!r}, "a") as f:
                f.write(f"{{p.pid}}\\n")
        return x @ W.T + b

    def linear_backward(self, x, W, dY, T, I, O, dx, dW, db):
        return dY @ W, dY.T @ x, dY.sum(axis=0)
"""


@pytest.fixture(scope="module")
def cport(tmp_path_factory):
    from crnn_conformance.ctypes_kernels.build import find_compiler
    d = tmp_path_factory.mktemp("reaper")
    (d / "rport.c").write_text(PORT)
    out = d / "librport.so"
    subprocess.run([find_compiler(), "-O2", "-ffp-contract=off", "-fPIC", "-shared", "-o",
                    str(out), str(d / "rport.c"), "-lm"], check=True, capture_output=True)
    return str(out)


def _sleepers(pidfile) -> list[int]:
    return [int(x) for x in pidfile.read_text().split()] if pidfile.exists() else []



@pytest.mark.parametrize("mode", ["setsid", "daemon"])
def test_a_c_ports_process_in_a_session_of_its_own_does_not_outlive_the_gate(cport, tmp_path,
                                                                            mode):
    """Before: the sleeper the port started in a call was left running after the gate."""
    pidfile = tmp_path / "pids"
    r = gate("--port", cport, "--layers", "dot16", "-q",
             env={"RP_MODE": mode, "RP_PIDFILE": str(pidfile)})
    assert r.returncode == 0, (r.stdout[-2000:], r.stderr)
    assert "PASS" in r.stdout
    started = _sleepers(pidfile)
    assert started, "the port started no process"
    assert left_running(started, within=2.0) == []


def test_a_c_ports_process_started_at_load_does_not_outlive_info(cport, tmp_path):
    """`info --port` loads the port in a worker: a process its constructor starts in a session
    of its own goes with it. Before: it was left running."""
    pidfile = tmp_path / "pids"
    r = gate("--port", cport, command="info",
             env={"RP_MODE": "load", "RP_PIDFILE": str(pidfile)}, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "abi version:  1" in r.stdout
    started = _sleepers(pidfile)
    assert started, "the port started no process"
    assert left_running(started, within=2.0) == []


def test_a_c_ports_process_in_a_session_of_its_own_does_not_outlive_fuzz(cport, tmp_path):
    """The fuzzer runs the port in the gate's worker: the same. Before: left running."""
    pidfile = tmp_path / "pids"
    r = gate("--port", cport, "--layers", "dot16", "--seconds", "1", "--jobs", "1", "--seed",
             "1", "--out", str(tmp_path / "fz"), command="fuzz",
             env={"RP_MODE": "setsid", "RP_PIDFILE": str(pidfile)})
    assert r.returncode == 0, (r.stdout[-2000:], r.stderr)
    started = _sleepers(pidfile)
    assert started, "the port started no process"
    assert left_running(started, within=2.0) == []


def test_a_python_ports_process_in_a_session_of_its_own_does_not_outlive_the_gate(tmp_path):
    """subprocess.Popen(start_new_session=True) in a method: exec'd, in a session of its own,
    it survived the kill of the worker's group. Before: left running."""
    pidfile = tmp_path / "pids"
    path = tmp_path / "port.py"
    path.write_text(textwrap.dedent(PY_PORT.format(pidfile=str(pidfile))))
    r = gate("--port", f"{path}:Port", "--layers", "linear", "--tiers", "float64", "-q",
             "--jobs", "1")
    assert r.returncode == 0, (r.stdout[-2000:], r.stderr)
    started = _sleepers(pidfile)
    assert started, "the port started no process"
    assert left_running(started, within=2.0) == []


def _subreaper() -> int:
    flag = ctypes.c_int(-1)
    ctypes.CDLL(None).prctl(ctypes.c_int(37), ctypes.byref(flag), ctypes.c_ulong(0),
                            ctypes.c_ulong(0), ctypes.c_ulong(0))      # PR_GET_CHILD_SUBREAPER
    return flag.value


def test_in_process_the_callers_children_are_left_alone(cport, tmp_path, monkeypatch):
    """The gate run through the Python API: the caller's child from before the worker (in a
    session of its own) and one started while the worker runs (in the caller's group) are
    neither killed nor collected; the port's sleeper is killed when the worker is closed,
    and the process is no subreaper afterwards."""
    from crnn_conformance.harness.runner import FIXTURES_DIR
    from crnn_conformance.harness.sandbox.executor import Executor
    pidfile = tmp_path / "pids"
    monkeypatch.setenv("RP_MODE", "setsid")
    monkeypatch.setenv("RP_PIDFILE", str(pidfile))
    was = _subreaper()
    own = subprocess.Popen(["sleep", "60"], start_new_session=True)
    mid = None
    try:
        ex = Executor(cport, ["dot16"], 30)
        try:
            mid = subprocess.Popen(["sleep", "60"])
            ex.run("dot16", FIXTURES_DIR / "dot16.h5", "order_long", "scalar", 1)
            assert _sleepers(pidfile), "the port started no process"
        finally:
            ex.close()
        assert left_running(_sleepers(pidfile), within=2.0) == []
        assert own.poll() is None and mid.poll() is None      # alive, not collected
        assert _subreaper() == was
    finally:
        for p in (own, mid):
            if p is not None:
                p.kill()
                p.wait()
