"""The worker against a port that reaches for the gate (red-team reproducers): bytes written
into the gate's channel with the worker, a fork() in a call, ISA paths of another
architecture; and the allowance pool dying with the gate. (Python ports' bad declarations
and BaseExceptions: tests/test_python_ports.py.)"""
from __future__ import annotations

import os
import pickle
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from testports import FLAGS, gate, gone, HERE, ROOT  # noqa: E402

# testport.c's dot16 (correct) behind a hostile crnn_dot16, crnn_isa_available and crnn_set_isa
HOSTILE = r"""
#define TP_DOT16_ONLY
#define crnn_dot16 tp_dot16
#define crnn_isa_available tp_isa_available
#define crnn_set_isa tp_set_isa
#include "testport.c"
#undef crnn_dot16
#undef crnn_isa_available
#undef crnn_set_isa
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>

#ifndef H_MASK
#define H_MASK 1u
#endif
uint32_t crnn_isa_available(void) { return H_MASK; }
int32_t crnn_set_isa(int32_t isa)
{
    if (isa < 0 || isa > 4) return CRNN_E_ARG;
    return (H_MASK >> isa & 1u) ? CRNN_OK : CRNN_E_ISA;
}

/* every socket of the process (the worker's channel to the gate, and whatever else) */
static void to_sockets(const void *bytes, size_t n)
{
    for (int fd = 3; fd < 256; fd++) {
        struct stat st;
        if (fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode)) (void)!write(fd, bytes, n);
    }
}

static int calls;
int32_t crnn_dot16(const float *a, const float *b, int64_t n, float *out)
{
    if (++calls == 3) {
#if defined(H_BYTES)
        static const char bytes[] = H_BYTES;
        to_sockets(bytes, sizeof bytes - 1);
#elif defined(H_PICKLE)
        /* a pickle that runs code where it is read: creates the file H_PICKLE */
        char pk[512], msg[516];
        int len = snprintf(pk, sizeof pk, "cbuiltins\neval\n(S'open(\"%s\", \"w\").close() "
                           "or (\"ok\", {})'\ntR.", H_PICKLE);
        msg[0] = 0; msg[1] = 0; msg[2] = (char)(len >> 8); msg[3] = (char)len;
        memcpy(msg + 4, pk, len);
        to_sockets(msg, len + 4);
#elif defined(H_FORK)
        pid_t pid = fork();
        if (pid > 0) {          /* the parent notes its child's pid */
            FILE *f = fopen(H_FORK, "w");
            if (f) { fprintf(f, "%d\n", (int)pid); fclose(f); }
        }
#endif
    }
    return tp_dot16(a, b, n, out);
}
"""


def hostile(tmp_path, *defines: str) -> Path:
    from crnn_conformance.ctypes_kernels.build import find_compiler
    src = tmp_path / "hostile.c"
    src.write_text(HOSTILE)
    out = tmp_path / f"hostile{len(list(tmp_path.glob('*.so')))}.so"
    subprocess.run([find_compiler(), *defines, *FLAGS, "-I", str(HERE), "-I",
                    str(ROOT / "ctypes_kernels"), "-o", str(out), str(src)], check=True,
                   capture_output=True, text=True)
    return out


def dot16_gate(so, *args, timeout=60):
    return gate("--port", str(so), "--layers", "dot16", "--tiers", "exact", *args,
                timeout=timeout)


def channel_failure(r) -> str:
    """Exit 1, no internal error, a case failed with the channel message."""
    assert r.returncode == 1, (r.returncode, r.stdout[-2000:], r.stderr)
    assert "internal error" not in r.stderr and "Traceback" not in r.stdout + r.stderr
    lines = [s for s in r.stdout.splitlines() if "wrote into the gate's channel" in s]
    # (the worker goes on after the write: the entry point in progress when it was read)
    assert lines and re.search(r"\(found (while the worker was in|after) crnn_\w+", lines[0])
    return lines[0]


# ---- 1. bytes written into the gate's channel --------------------------------------------------

@pytest.mark.parametrize("bytes_, fragment", [
    ('"hello from the port, written to the wrong fd"', "bytes announced (at most"),  # 1.7 GB
    (r'"\0\0\0\5hello"', "bytes that are no message (UnpicklingError"),
    (r'"\0\17\102\100hello"', "not sent within the timeout"),                       # 1 MB
])
def test_bytes_in_the_channel_fail_the_run_not_the_gate(tmp_path, bytes_, fragment):
    """Before: the gate blocked forever in recv (a bogus length: the timeout did not bound
    the read) or stopped with "internal error (UnpicklingError ...)". (One case: each new
    worker writes again.)"""
    r = dot16_gate(hostile(tmp_path, f"-DH_BYTES={bytes_}"), "--case", "order_n0_100",
                   "--timeout", "2")
    assert fragment in channel_failure(r)


def test_a_forged_pickle_runs_no_code(tmp_path):
    """Before: the forged message ran its code in the gate (or in the worker, through the
    gate's end of the pipe it inherited) and the gate passed."""
    marker = tmp_path / "PWNED"
    r = dot16_gate(hostile(tmp_path, f'-DH_PICKLE="{marker}"'))
    assert "a message naming builtins.eval, which the worker never sends" in channel_failure(r)
    assert not marker.exists()


def c_bytes(data: bytes) -> str:
    """`data` as a C string literal (octal escapes), for -DH_BYTES."""
    return '"' + "".join(f"\\{b:03o}" for b in data) + '"'


def framed(msg) -> bytes:
    data = pickle.dumps(msg, protocol=2)
    return len(data).to_bytes(4, "big") + data


@pytest.mark.parametrize("forged", [
    ("run", ("nonsense", {}), "", 0.5),                     # a run's answer of no kind
    ("run", ("ok", {"dot": "not an array"}), "", 0.5),      # an output that is no array
    ("run", ("callerror", ("no", "code", {})), "", 0.5),    # a code that is no int
    ("same", ["0.1"]),                                      # seconds that are no float
])
def test_a_decodable_message_of_no_kind_fails_the_run(tmp_path, forged):
    """Before: a pickle of builtin values that decoded, but was no message of the worker's,
    ended the gate with "internal error ... harness error in the worker" (exit 2)."""
    # (--timeout 10: at 2 the run was once taken for a hang on a loaded machine)
    r = dot16_gate(hostile(tmp_path, f"-DH_BYTES={c_bytes(framed(forged))}"),
                   "--case", "order_n0_100", "--timeout", "10")
    assert "the worker never sends" in channel_failure(r)


def test_an_exception_in_the_worker_fails_the_run_not_the_gate(tmp_path):
    """A port that writes into the worker's memory can make the worker's own code raise (an
    operator-mutation sweep found one: a write before its output made the train3 layer's
    reshape fail). Before: "internal error in gate (RuntimeError: harness error in the
    worker)", exit 2, every other result lost. Here the port forges that answer."""
    tb = "Traceback (most recent call last):\nValueError: cannot reshape array of size 9"
    r = dot16_gate(hostile(tmp_path, f"-DH_BYTES={c_bytes(framed(('run', ('exception', tb), '', 0.5)))}"),
                   "--case", "order_n0_100", "--timeout", "10")
    assert r.returncode == 1, (r.returncode, r.stdout[-2000:], r.stderr)
    assert "internal error" not in r.stderr and "Traceback" not in r.stdout + r.stderr
    assert ("the worker raised ValueError: cannot reshape array of size 9 while it ran the case"
            in r.stdout or "wrote into the gate's channel" in r.stdout), r.stdout[-2000:]


def test_check_knows_each_kind_and_its_items():
    from crnn_conformance.harness.sandbox import channel
    y = np.zeros(3, np.float32)
    good = {"single": [("ok", {"y": y}), ("fpenv", "ftz"), ("exception", "tb"),
                       ("callerror", ("bad n", -2, {"y": y})), ("callerror", ("raised", None, {}))],
            "batch": [("run", ("ok", {"y": y}), "", 0.1), ("run", ("same", None), "x", 0.1),
                      ("same", [0.1, 0.2]), ("done", []), ("late", 0, None), ("late", 1, "w")],
            "contract": [("ok", 0, []), ("ok", None, ["raised"]), ("skip", "why")],
            "load": [("porterror", "no symbol"),
                     ("ok", {"isas": ["scalar"], "abi_version": 1, "fpenv": {},
                             "symbols": ["crnn_dot16"], "threads": None})]}
    bad = {"single": [("ok", {"y": [1.0]}), ("ok", {3: y}), ("ok",), ("crash", "x"),
                      ("callerror", ("x", 1, {}, 4)), ("callerror", ["x", 1, {}]),
                      ("late", ("x", {}))],
           "batch": [("run", ("ok", {"y": y}), "", 1), ("run", "ok", "", 0.1),
                     ("late", "0", None), ("done", None), ("same", (0.1,))],
           "contract": [("ok", True, []), ("ok", 0, [1]), ("crash", "x")],
           "load": [("ok", {"isas": ["scalar"]}), ("ok", {"isas": "scalar", "abi_version": 1,
                                                          "fpenv": {}, "symbols": [],
                                                          "threads": None})]}
    for reading, msgs in good.items():
        for msg in msgs:
            assert channel.check(msg, reading) is msg
    for reading, msgs in bad.items():
        for msg in msgs:
            with pytest.raises(channel.ChannelError, match="the worker never sends"):
                channel.check(msg, reading)


SEES = """
import os, stat
import numpy as np

class Port:
    def dot16(self, a, b, n, out):
        fds = [int(x) for x in os.environ["SEES_FDS"].split(",")]
        out[0] = sum(stat.S_ISFIFO(os.fstat(fd).st_mode) or stat.S_ISSOCK(os.fstat(fd).st_mode)
                     for fd in fds)
"""


def test_the_worker_sees_none_of_the_gates_pipes(tmp_path, monkeypatch):
    """The gate's end of the worker's own channel, another pipe of the gate (e.g. the
    allowance pool's queues, whose bytes the gate unpickles) and a socket are /dev/null in the
    worker. Before: the port could write into them (the forged pickle reached the worker
    through the gate's end, and any pipe of the gate)."""
    import socket
    from crnn_conformance.harness.records import FIXTURES_DIR
    from crnn_conformance.harness.sandbox.executor import Executor
    (tmp_path / "sees.py").write_text(SEES)
    r, w = os.pipe()
    a, b = socket.socketpair()
    ex = None
    try:
        ex = Executor(f"{tmp_path / 'sees.py'}:Port", ["dot16"], 30)
        monkeypatch.setenv("SEES_FDS", ",".join(map(str, (r, w, a.fileno(), ex.conn.fileno()))))
        ex.close()
        ex = Executor(f"{tmp_path / 'sees.py'}:Port", ["dot16"], 30)   # (inherits the env)
        out = ex.run("dot16", FIXTURES_DIR / "dot16.h5", "order_n0_100", "python", 1)
        assert float(np.asarray(next(iter(out.values()))).ravel()[0]) == 0.0, out
    finally:
        if ex is not None:
            ex.close()
        for fd in (r, w):
            os.close(fd)
        a.close()
        b.close()


def test_decode_makes_only_the_workers_values():
    from crnn_conformance.harness.sandbox import channel
    from multiprocessing.reduction import ForkingPickler
    msg = ("run", ("ok", {"y": np.arange(6, dtype=np.float32).reshape(2, 3),
                          "n": np.int32(3)}), "", 0.5)
    got = channel.decode(bytes(ForkingPickler.dumps(msg)))
    assert got[1][1]["y"].tobytes() == msg[1][1]["y"].tobytes() and got[1][1]["n"] == 3
    for forged in (pickle.dumps(("ok", os.system)), pickle.dumps(["ok"]), b"\x80\x05junk"):
        with pytest.raises(channel.ChannelError):
            channel.decode(forged)


# ---- 2. fork() in a call -------------------------------------------------------------------------

def test_a_fork_in_a_call_ends_the_child_and_the_gate_goes_on(tmp_path):
    """Before: the child ran the worker loop too; its answers made "internal error
    (IndexError: pop from empty list)" and it outlived the gate."""
    note = tmp_path / "child.pid"
    r = dot16_gate(hostile(tmp_path, f'-DH_FORK="{note}"'), "-q")
    assert r.returncode == 0, (r.stdout[-2000:], r.stderr)
    assert r.stdout.strip().splitlines()[-1].startswith("PASS")
    child = int(note.read_text())
    deadline = time.time() + 10
    while time.time() < deadline and not gone(child):
        time.sleep(0.1)
    assert gone(child)



# ---- 4. ISA paths this machine cannot execute -------------------------------------------------------

def test_runnable_keeps_the_paths_of_this_machine():
    from crnn_conformance.harness.sandbox.executor import runnable
    every = ["scalar", "sse", "avx2", "avx512", "neon"]
    assert runnable(every, "x86_64", ["fma", "avx2", "avx512f"]) == (
        every[:4], {"neon": "an aarch64 path; this machine is x86-64"})
    assert runnable(every, "x86_64", ["fma", "avx2"])[1]["avx512"] == "this CPU has no avx512f"
    assert runnable(every, "x86_64", ["sse2"])[0] == ["scalar", "sse"]   # 128-bit: any x86-64
    assert runnable(every, "x86_64", [])[0] == every[:4]         # flags unknown: the port's word
    kept, left = runnable(every, "aarch64", ["asimd"])
    assert kept == ["scalar", "neon"] and set(left) == {"sse", "avx2", "avx512"}
    assert runnable(["cpu", "neon"], "riscv64", [])[0] == ["cpu"]   # a config name is kept


@pytest.mark.skipif(os.uname().machine not in ("x86_64", "aarch64"), reason="x86-64 or aarch64")
def test_another_architectures_path_is_left_out_and_said(tmp_path):
    """Before: a port advertising neon on x86-64 (avx2 on aarch64) was gated under it."""
    other = 4 if os.uname().machine == "x86_64" else 2
    r = dot16_gate(hostile(tmp_path, f"-DH_MASK={1 | 1 << other}u"), "-q")
    assert r.returncode == 0, (r.stdout[-2000:], r.stderr)
    name = ("scalar", "sse", "avx2", "avx512", "neon")[other]
    assert "ISA scalar;" in r.stdout.splitlines()[-1]
    said = [s for s in r.stderr.splitlines() if "left out" in s]
    assert len(said) == 1 and f"{name} (an " in said[0], r.stderr


# ---- 5. the allowance pool dies with the gate -----------------------------------------------------

POOL = """
import sys, time
from crnn_conformance.generators.h5io import read_fixture
from crnn_conformance.harness import allowance
from crnn_conformance.harness.records import FIXTURES_DIR
path = f"{FIXTURES_DIR}/linear.h5"
allowance.prefetch([("linear", path, c) for c in read_fixture(path).cases])
time.sleep(1.0)
print(*allowance._POOL._processes, flush=True)
time.sleep(600)
"""


def test_a_killed_gate_takes_the_allowance_pool_with_it(tmp_path):
    """Before: the spawn workers (and the resource tracker) outlived a gate killed with -9."""
    p = subprocess.Popen([sys.executable, "-c", POOL], cwd=ROOT, stdout=subprocess.PIPE,
                         text=True, env={**os.environ, "CRNN_CACHE_DIR": str(tmp_path)})
    pids = [int(x) for x in p.stdout.readline().split()]
    kids = subprocess.run(["pgrep", "-P", str(p.pid)], capture_output=True, text=True).stdout
    kids = set(pids) | {int(x) for x in kids.split()}      # the tracker too
    assert pids, "no pool worker started"
    p.send_signal(signal.SIGKILL)
    p.wait(30)
    deadline = time.time() + 15
    while time.time() < deadline and not all(gone(k) for k in kids):
        time.sleep(0.1)
    left = [k for k in kids if not gone(k)]
    for k in left:                                          # (no stray process after a failure)
        os.kill(k, signal.SIGKILL)
    assert not left, left
