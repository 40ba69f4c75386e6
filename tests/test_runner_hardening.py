"""crnn-run (ctypes_kernels/runner/crnn_run.c) against ports that misbehave as processes: a
port that ends the process inside a call, crashes, exits or hangs while it is loaded, starts a
process that outlives its call, writes an output after its call returned; a runner stopped by
a signal while a call runs; an option that would run a run twice.

The ports are one small C file (PORT below, a dot16-only port built into the test's temporary
directory) whose misbehaviour is chosen at run time by environment variables, so it is
compiled once. What a port leaves behind is found through the pids it writes to HP_PIDFILE.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from crnn_conformance.ctypes_kernels import build, crossbuild

import bundles  # noqa: E402

LINUX = sys.platform.startswith("linux")
CASES = [("dot16", "dot16_edges", "neg_zero_first_n1_48"), ("dot16", "dot16_edges", "overflow_n1_40")]

PORT = r"""
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int is(const char *var, const char *value)
{
    const char *v = getenv(var);
    return v && strcmp(v, value) == 0;
}

/* "label pid" appended to $HP_PIDFILE */
static void note(const char *label)
{
    const char *path = getenv("HP_PIDFILE");
    char line[64];
    if (!path) return;
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0644), n;
    n = snprintf(line, sizeof line, "%s %ld\n", label, (long)getpid());
    if (fd >= 0 && write(fd, line, (size_t)n) < 0) {}
    if (fd >= 0) close(fd);
}

__attribute__((constructor)) static void on_load(void)
{
    const char *mark = getenv("HP_SECOND_LOAD");   /* crashes when loaded a second time */
    if (mark && access(mark, F_OK) == 0) raise(SIGSEGV);
    if (mark) close(open(mark, O_WRONLY | O_CREAT, 0644));
    if (is("HP_CTOR", "segv")) raise(SIGSEGV);
    if (is("HP_CTOR", "exit0")) exit(0);
    if (is("HP_CTOR", "hang")) for (;;) pause();
}

static int32_t threads = 1;
int32_t crnn_abi_version(void) { return 1; }
uint32_t crnn_isa_available(void) { return 1; }
int32_t crnn_set_isa(int32_t isa) { return isa == 0 ? 0 : -2; }
int32_t crnn_get_isa(void) { return 0; }
int32_t crnn_set_threads(int32_t n) { if (n < 1 || n > 256) return -1; threads = n; return 0; }
int32_t crnn_get_threads(void) { return threads; }

/* a thread that goes on writing out every 10 ms for HP_LATE_MS after the call returned */
static float *late_out;
static void *late(void *arg)
{
    (void)arg;
    for (int ms = 0; ms < atoi(getenv("HP_LATE_MS")); ms += 10) {
        usleep(10000);
        *late_out = (float)(1000 + ms);
    }
    return NULL;
}

int32_t crnn_dot16(const float *a, const float *b, int64_t n, float *out)
{
    float s = 0;
    for (int64_t i = 0; i < n; i++) s += a[i] * b[i];
    *out = s;
    if (is("HP_MODE", "exit0")) exit(0);
    if (is("HP_MODE", "_exit0")) _exit(0);
    if (is("HP_MODE", "exit7")) exit(7);
    if (is("HP_MODE", "fork") && fork() == 0) { note("grandchild"); for (;;) pause(); }
    if (is("HP_MODE", "fork_setsid") && fork() == 0) {
        setsid();
        note("grandchild");
        for (;;) pause();
    }
    if (is("HP_MODE", "sleep")) {
        if (fork() == 0) { note("grandchild"); for (;;) pause(); }
        note("child");
        sleep(100000);
    }
    if (is("HP_MODE", "late")) {
        pthread_t t;
        late_out = out;
        pthread_create(&t, NULL, late, NULL);
        pthread_detach(t);
    }
    return 0;
}
"""


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return tmp_path_factory.mktemp("runner_hardening")


@pytest.fixture(scope="module")
def runner(work):
    return crossbuild.build_runner(work / "crnn-run")


@pytest.fixture(scope="module")
def port(work):
    src, out = work / "hport.c", work / "libhport.so"
    src.write_text(PORT)
    subprocess.run([build.find_compiler(), "-O1", "-shared", "-fPIC", "-std=gnu11", "-o",
                    str(out), str(src), "-lpthread"], check=True, capture_output=True, text=True)
    return out


@pytest.fixture(scope="module")
def bundle(work):
    bundles.write_bundle(work / "bundle", bundles.fixture_cases(CASES))
    return work / "bundle"


def _state(pid: int) -> str | None:
    """The process's state letter (Z: a zombie), or None when there is no such process."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2]


def _alive(pid: int) -> bool:
    return _state(pid) not in (None, "Z")


def _pids(pidfile: Path, label: str | None = None) -> list[int]:
    if not pidfile.exists():
        return []
    rows = [line.split() for line in pidfile.read_text().splitlines() if line.strip()]
    return [int(p) for lab, p in rows if label is None or lab == label]


@pytest.fixture
def pidfile(tmp_path):
    """HP_PIDFILE for one test; whatever it names still alive at the end is killed (a runner
    without the fixes leaves the port's processes behind)."""
    path = tmp_path / "pids"
    yield path
    for pid in _pids(path):
        if _alive(pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


def _gone(pids, within=3.0) -> list[int]:
    """The pids still alive after `within` seconds."""
    deadline = time.monotonic() + within
    while True:
        alive = [p for p in pids if _alive(p)]
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.05)


def crnn_run(runner, port, bundle, results, *args, env=None, timeout=60, prefix=()) -> \
        subprocess.CompletedProcess:
    """crnn-run (after `prefix`) in a session of its own, its output in files beside
    `results` (a process the port left behind would hold a pipe open); killed with its
    session after `timeout` seconds (then the test fails with TimeoutExpired)."""
    e = dict(os.environ)
    e.update(env or {})
    log = Path(results).with_suffix(".log")
    with open(log.with_suffix(".out"), "w") as out, open(log.with_suffix(".err"), "w") as err:
        p = subprocess.Popen([*prefix, str(runner), str(port), str(bundle), str(results), *args],
                             env=e, stdout=out, stderr=err, start_new_session=True)
    try:
        p.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
        raise
    return subprocess.CompletedProcess(p.args, p.returncode, log.with_suffix(".out").read_text(),
                                       log.with_suffix(".err").read_text())


def one_line_exit_2(r, fragment):
    assert r.returncode == 2, (r.returncode, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert lines and lines[0].startswith("crnn-run: cannot run: "), r.stderr
    assert fragment in lines[0], (fragment, lines[0])
    if "usage:" not in r.stderr:
        assert len(lines) == 1, r.stderr


# ---- a port that ends the process in a call ---------------------------------------------

@pytest.mark.parametrize("mode,code", [("exit0", 0), ("_exit0", 0), ("exit7", 7)])
def test_a_port_that_exits_in_a_call_crashes_that_run(runner, port, bundle, tmp_path, mode,
                                                      code):
    """exit(0) inside a call is not a recorded run: each run is status 2 with its message,
    every record is complete (END_), and crnn-run exits 1."""
    out = tmp_path / "r.bin"
    r = crnn_run(runner, port, bundle, out, "--threads", "1,2", env={"HP_MODE": mode})
    assert r.returncode == 1, r.stderr
    runs = bundles.read_results(out)["runs"]
    assert len(runs) == len(CASES) * 2
    for run in runs:
        assert run["status"] == 2, run
        assert run["msg"] == f"the port exited (status {code}) in crnn_dot16 (call 0)", run
        assert run["calls"] == []
    assert "0 ok" in r.stderr.splitlines()[-1]


# ---- a port that crashes, exits or hangs when it is loaded ------------------------------

@pytest.mark.parametrize("ctor,fragment", [
    ("segv", "crashed while it was loaded: SIGSEGV (signal 11)"),
    ("exit0", "exited (status 0) while it was loaded"),
    ("hang", "did not finish loading within 1 s"),
])
def test_a_port_whose_loading_fails_is_one_line_exit_2(runner, port, bundle, tmp_path, ctor,
                                                       fragment):
    out = tmp_path / "r.bin"
    t0 = time.monotonic()
    r = crnn_run(runner, port, bundle, out, "--timeout", "1", env={"HP_CTOR": ctor},
                 timeout=30)
    one_line_exit_2(r, fragment)
    assert f"port {port}" in r.stderr
    assert not out.exists()              # nothing written: it stopped before the results
    assert time.monotonic() - t0 < 20


def test_a_port_that_crashes_only_when_the_runner_loads_it_itself(runner, port, bundle,
                                                                 tmp_path):
    """The load in a child went well, the load into crnn-run's own process crashes: still one
    line and exit 2, not a runner killed by SIGSEGV."""
    out = tmp_path / "r.bin"
    r = crnn_run(runner, port, bundle, out, env={"HP_SECOND_LOAD": str(tmp_path / "loaded")})
    one_line_exit_2(r, "crashed, exited or hung when crnn-run loaded it into its own process")
    assert not out.exists()


# ---- a port that leaves a process behind -------------------------------------------------

@pytest.mark.parametrize("mode", ["fork", "fork_setsid"])
def test_a_process_the_port_starts_neither_holds_the_runner_nor_outlives_it(
        runner, port, bundle, tmp_path, pidfile, mode):
    """A call that forks a process which stays (in the run's process group, or in a session
    of its own): every run ends and is ok, and those processes are gone afterwards."""
    if mode == "fork_setsid" and not LINUX:
        pytest.skip("a process that leaves its group is killed on Linux only (subreaper)")
    out = tmp_path / "r.bin"
    r = crnn_run(runner, port, bundle, out, "--threads", "1,2", "--timeout", "3",
                 env={"HP_MODE": mode, "HP_PIDFILE": str(pidfile)}, timeout=30)
    assert r.returncode == 0, r.stderr
    assert [x["status"] for x in bundles.read_results(out)["runs"]] == [0] * len(CASES) * 2
    started = _pids(pidfile, "grandchild")
    assert len(started) >= len(CASES) * 2
    assert _gone(started, within=1.0) == []


@pytest.mark.skipif(not LINUX, reason="the subreaper's clean-up is Linux's")
def test_the_runners_own_earlier_children_are_left_alone(runner, port, bundle, tmp_path,
                                                         pidfile):
    """A process crnn-run inherited as its child (started before exec) is not one of the
    port's: the clean-up after each run leaves it running."""
    out, sleeper = tmp_path / "r.bin", tmp_path / "sleeper"
    script = f'sleep 30 </dev/null >/dev/null 2>&1 & echo $! > "{sleeper}"; exec "$0" "$@"'
    env = {"HP_MODE": "fork_setsid", "HP_PIDFILE": str(pidfile)}
    try:
        r = crnn_run(runner, port, bundle, out, "--threads", "1", "--timeout", "3", env=env,
                     timeout=30, prefix=("sh", "-c", script))
    finally:
        pid = int(sleeper.read_text())
    try:
        assert r.returncode == 0, r.stderr
        assert _alive(pid)
        assert _gone(_pids(pidfile, "grandchild"), within=1.0) == []
    finally:
        os.kill(pid, signal.SIGKILL)


# ---- crnn-run stopped by a signal --------------------------------------------------------

def _start_sleeping(runner, port, bundle, out, pidfile):
    """crnn-run with its first run's child asleep in crnn_dot16 (and a process of its own in
    the run's group): -> (Popen, the child's pid, the grandchild's pid). Its stderr goes to
    a file (a process left behind would hold a pipe open)."""
    env = dict(os.environ, HP_MODE="sleep", HP_PIDFILE=str(pidfile))
    with open(out.with_suffix(".err"), "w") as err:
        p = subprocess.Popen([str(runner), str(port), str(bundle), str(out), "--timeout", "600"],
                             env=env, stdout=subprocess.DEVNULL, stderr=err,
                             start_new_session=True)
    deadline = time.monotonic() + 10
    while not (_pids(pidfile, "child") and _pids(pidfile, "grandchild")):
        if time.monotonic() > deadline or p.poll() is not None:
            p.kill()
            p.wait()
            pytest.fail(f"the run did not start: {out.with_suffix('.err').read_text()}")
        time.sleep(0.02)
    return p, _pids(pidfile, "child")[0], _pids(pidfile, "grandchild")[0]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_signal_kills_the_run_in_progress(runner, port, bundle, tmp_path, pidfile, sig):
    """SIGTERM or SIGINT to crnn-run while a call runs: the run's child and its process group
    are killed, the unfinished record is dropped, and crnn-run dies of the same signal."""
    out = tmp_path / "r.bin"
    p, child, grandchild = _start_sleeping(runner, port, bundle, out, pidfile)
    os.kill(p.pid, sig)
    try:
        p.wait(timeout=10)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    err = out.with_suffix(".err").read_text()
    assert p.returncode == -sig, (p.returncode, err)
    assert f"stopped by {sig.name}" in err
    assert _gone([child, grandchild]) == []
    assert bundles.read_results(out)["runs"] == []      # well formed: the cut record dropped


@pytest.mark.skipif(not LINUX, reason="PR_SET_PDEATHSIG is Linux's")
def test_the_run_dies_with_a_killed_runner(runner, port, bundle, tmp_path, pidfile):
    """SIGKILL to crnn-run (nothing of it runs any more): the run's child dies with it."""
    p, child, _ = _start_sleeping(runner, port, bundle, tmp_path / "r.bin", pidfile)
    p.kill()
    p.wait(timeout=10)
    assert _gone([child]) == []


# ---- options that would run a run twice --------------------------------------------------

@pytest.mark.parametrize("args,fragment", [
    (["--isa", "scalar,scalar"], "--isa: 'scalar' is given twice"),
    (["--threads", "1,2,1"], "--threads: '1' is given twice"),
])
def test_a_repeated_isa_or_thread_count_is_refused(runner, port, bundle, tmp_path, args,
                                                   fragment):
    out = tmp_path / "r.bin"
    r = crnn_run(runner, port, bundle, out, *args)
    one_line_exit_2(r, fragment)
    assert not out.exists()


# ---- a write after the call returned -----------------------------------------------------

def test_a_write_after_the_call_returned_fails_the_run(runner, port, bundle, tmp_path):
    """A thread of the port goes on writing `out` after crnn_dot16 returned: the run's end is
    looked at again after the settle window (0.1 s by default) and the run fails its check
    (status 5), naming the buffer and the call; with --settle 0 nothing is looked for and
    the platform record says so."""
    out = tmp_path / "r.bin"
    env = {"HP_MODE": "late", "HP_LATE_MS": "400"}
    r = crnn_run(runner, port, bundle, out, "--threads", "1", env=env)
    assert r.returncode == 1, r.stderr
    res = bundles.read_results(out)
    assert len(res["runs"]) == len(CASES)
    for run in res["runs"]:
        assert run["status"] == 5, run
        assert run["msg"].startswith("out changed after crnn_dot16 returned"), run["msg"]
    assert not any("--settle 0" in x for x in res["platform"]["not_kept"])
    quiet = tmp_path / "quiet.bin"
    r = crnn_run(runner, port, bundle, quiet, "--threads", "1", "--settle", "0", env=env)
    assert r.returncode == 0, r.stderr
    res = bundles.read_results(quiet)
    assert [x["status"] for x in res["runs"]] == [0] * len(CASES)
    assert any("--settle 0" in x for x in res["platform"]["not_kept"])
