"""A runner of case bundles in plain Python (stdlib only), written from docs/case-bundle.md
alone: it imports nothing of the harness. It reads cases.bin, runs a port's .so through
ctypes and writes a results file, doing what crnn-run does on a machine without Python; the
tests use it where crnn-run is not built.

    python tests/bundle_runner.py lib.so BUNDLE results.bin
        [--isa scalar,avx2] [--threads 1,2,3,7] [--arch NAME] [--timeout S]
        [--results-version 1|2]   (1: whole buffers after each call; 2: the changed spans)

(crnn-run's arguments; --arch names another machine in the platform record, for tests.)

Each case runs in a child process (fork) that sends every call's record to the parent as it
returns, so a crash or a hang costs only that run: the parent writes the run with the calls
that completed and status 2 (crashed) or 3 (timed out).
"""
from __future__ import annotations

import argparse
import ctypes as C
import hashlib
import json
import os
import platform
import select
import signal
import struct
import sys
import time

ISAS = ("scalar", "sse", "avx2", "avx512")
SIZES = {1: 4, 2: 8, 3: 4, 4: 8}
POISON = {1: struct.pack("<I", 0x7FE5A5A5), 2: struct.pack("<Q", 0x7FFDA5A5A5A5A5A5),
          3: struct.pack("<I", 0x5A5A5A5A), 4: struct.pack("<Q", 0x7FFDA5A5A5A5A5A5)}
CANARY = 64
PATTERN = bytes((i * 37 + 11) & 0xFF for i in range(CANARY))
# docs/case-bundle.md, "Which arguments a call writes": positions of the written pointers
WRITES = {
    "crnn_dot16": (3,), "crnn_linear_forward": (6,), "crnn_linear_backward": (6, 7, 8),
    "crnn_conv_forward": (13, 14, 15), "crnn_conv_backward": (14, 15, 16),
    "crnn_lstm_forward": (7, 8, 9, 10, 11), "crnn_lstm_backward": (11, 12, 13, 14),
    "crnn_sigmoid": (2,), "crnn_tanh": (2,), "crnn_detmath_exp": (2,), "crnn_detmath_log": (2,),
    "crnn_ctc": (6, 7), "crnn_model_sizes": (1, 2), "crnn_step_gradients": (7, 8, 9),
    "crnn_clip_gradients": (0, 5), "crnn_adamw": (0, 1, 2),
}


class Reader:
    def __init__(self, data):
        self.data, self.at = data, 0

    def take(self, n):
        b = self.data[self.at:self.at + n]
        if len(b) != n:
            raise ValueError("cases.bin is truncated")
        self.at += n
        return b

    def u(self, fmt):
        v = struct.unpack(fmt, self.take(struct.calcsize(fmt)))
        return v if len(v) > 1 else v[0]


def read_cases(path):
    r = Reader(open(path, "rb").read())
    if r.take(8) != b"CRNNCB01" or r.u("<I") != 1:
        raise ValueError("not a version 1 case bundle")
    cases = []
    for _ in range(r.u("<I")):
        if r.take(4) != b"CASE":
            raise ValueError("bad case magic")
        index = r.u("<I")
        name = r.take(r.u("<I")).decode()
        r.take(r.u("<I"))                                  # the layer's name
        buffers = []
        for _ in range(r.u("<I")):
            dtype, role, _, n = r.u("<BBHQ")
            content = r.take(n * SIZES[dtype]) if role != 1 else POISON[dtype] * n
            buffers.append((dtype, role, n, content))
        ops = []
        for _ in range(r.u("<I")):
            if r.u("<B") == 1:
                ops.append(("copy",) + r.u("<IQIQQ"))
                continue
            fn = r.take(r.u("<H")).decode()
            args = []
            for _ in range(r.u("<H")):
                t = r.u("<B")
                args.append((t, r.u("<II") if t == 3 else r.u("<d") if t == 2 else r.u("<q")))
            ops.append(("call", fn, args))
        cases.append((index, name, buffers, ops))
    return cases


class Memory:
    """Every buffer of a case between two canary zones."""

    def __init__(self, buffers):
        self.buffers = buffers
        self.raw = [C.create_string_buffer(2 * CANARY + len(b[3]) + 64) for b in buffers]
        self.base = []
        for raw in self.raw:
            at = C.addressof(raw) + CANARY
            self.base.append(at + (-at) % 64)

    def restore(self):
        for (_, _, _, content), at in zip(self.buffers, self.base):
            C.memmove(at - CANARY, PATTERN, CANARY)
            C.memmove(at, content, len(content))
            C.memmove(at + len(content), PATTERN, CANARY)

    def data(self, i):
        return C.string_at(self.base[i], len(self.buffers[i][3]))

    def canary_ok(self, i):
        n = len(self.buffers[i][3])
        return (C.string_at(self.base[i] - CANARY, CANARY) == PATTERN
                and C.string_at(self.base[i] + n, CANARY) == PATTERN)


def run_case(lib, case, isa, threads, out_fd, version=2):
    """In the child: one run; each call's record goes to out_fd as it returns, then the end."""
    _, _, buffers, ops = case
    mem = Memory(buffers)
    mem.restore()
    lib.crnn_set_isa(isa)
    lib.crnn_set_threads(threads)
    status, msg = 0, ""
    for op in ops:
        if op[0] == "copy":
            _, d, doff, s, soff, n = op
            C.memmove(mem.base[d] + doff, mem.base[s] + soff, n)
            continue
        _, fn, args = op
        values, ptrs, written = [], [], []
        for pos, (t, v) in enumerate(args):
            if t == 0:
                values.append(C.c_int32(v))
            elif t == 1:
                values.append(C.c_int64(v))
            elif t == 2:
                values.append(C.c_double(v))
            elif t == 3:
                values.append(C.c_void_p(mem.base[v[0]] + v[1] * SIZES[buffers[v[0]][0]]))
                ptrs.append(v[0])
                if pos in WRITES[fn] and v[0] not in written:
                    written.append(v[0])
            else:
                values.append(C.c_void_p(None))
        before = {b: mem.data(b) for b in ptrs}
        const = {b: before[b] for b in ptrs if b not in written}
        f = getattr(lib, fn)
        f.restype = C.c_int32
        rc = f(*values)
        flags, problems = 0, []
        for b in ptrs:
            if not mem.canary_ok(b):
                flags |= 1
                problems.append(f"canary of buffer {b} broken by {fn}")
        for b, was in const.items():
            if mem.data(b) != was:
                flags |= 2
                problems.append(f"const input {b} modified by {fn}")
        if version == 1:                   # whole buffers
            rec = [struct.pack("<iII", rc, flags, len(written))]
            rec += [struct.pack("<IQ", b, len(before[b])) + mem.data(b) for b in written]
        else:                              # the changed span of each
            spans = [(b, *changed(before[b], mem.data(b))) for b in written]
            spans = [s for s in spans if s[2]]
            rec = [struct.pack("<iII", rc, flags, len(spans))]
            for b, offset, data in spans:
                rec.append(struct.pack("<IQQ", b, offset, len(data)) + data)
        send(out_fd, b"C" + b"".join(rec))
        if problems:
            status, msg = 5, "; ".join(problems)
            break
        if rc != 0:
            status = 1
            break
    send(out_fd, b"E" + struct.pack("<I", status) + msg.encode())


def changed(old, new):
    """(offset, bytes) of the span from the first to the last byte of `new` that differs from
    `old` (equal lengths); (0, b"") when none does."""
    if old == new:
        return 0, b""
    lo, hi = 0, len(new)                  # the first difference lies in [lo, hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if old[lo:mid] == new[lo:mid] else (lo, mid)
    first = lo
    lo, hi = first, len(new)              # the last difference lies in [lo, hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if old[mid:] == new[mid:] else (mid, hi)
    return first, new[first:lo + 1]


def send(fd, payload):
    os.write(fd, struct.pack("<Q", len(payload)) + payload)


def receive(fd, deadline):
    """-> one payload, or None when the child closed the pipe, or "timeout"."""
    head = read_exact(fd, 8, deadline)
    if head in (None, "timeout"):
        return head
    return read_exact(fd, struct.unpack("<Q", head)[0], deadline)


def read_exact(fd, n, deadline):
    out = b""
    while len(out) < n:
        wait = None if deadline is None else max(0.0, deadline - time.monotonic())
        if not select.select([fd], [], [], wait)[0]:
            return "timeout"
        chunk = os.read(fd, min(n - len(out), 1 << 20))
        if not chunk:
            return None
        out += chunk
    return out


def one_run(lib, case, isa, threads, timeout, version):
    """Forks the run -> (call records, status, msg)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        if "faulthandler" in sys.modules:     # (inherited from a test process: the port's
            sys.modules["faulthandler"].disable()   # crash is this run's status, not a report)
        code = 0
        try:
            run_case(lib, case, isa, threads, w, version)
        except BaseException:                    # noqa: BLE001
            code = 3
        os._exit(code)
    os.close(w)
    calls, status, msg = [], None, ""
    deadline = time.monotonic() + timeout if timeout else None
    while status is None:
        got = receive(r, deadline)
        if got == "timeout":
            os.kill(pid, signal.SIGKILL)
            status, msg = 3, f"call {len(calls)} did not return within {timeout:g} s"
        elif got is None:
            status, msg = 2, "the run ended without its record"
        elif got[:1] == b"C":
            calls.append(got[1:])
        else:
            status, msg = struct.unpack("<I", got[1:5])[0], got[5:].decode()
    _, code = os.waitpid(pid, 0)
    if os.WIFSIGNALED(code) and status == 2:
        msg = f"killed by signal {signal.Signals(os.WTERMSIG(code)).name}"
    os.close(r)
    return calls, status, msg


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("port")
    ap.add_argument("bundle")
    ap.add_argument("out")
    ap.add_argument("--isa", default=None)
    ap.add_argument("--results-version", type=int, choices=(1, 2), default=2)
    ap.add_argument("--threads", default="1,2,3,7")
    ap.add_argument("--arch", default=platform.machine())
    ap.add_argument("--timeout", type=float, default=120.0)
    a = ap.parse_args(argv)
    cases_bin = os.path.join(a.bundle, "cases.bin")
    digest = hashlib.sha256(open(cases_bin, "rb").read()).hexdigest()
    cases = read_cases(cases_bin)
    lib = C.CDLL(os.path.abspath(a.port))
    mask = lib.crnn_isa_available()
    isas = a.isa.split(",") if a.isa else [n for i, n in enumerate(ISAS) if mask >> i & 1]
    threads = [int(t) for t in a.threads.split(",")]
    plat = {"arch": a.arch, "os": platform.system(), "cpu": platform.processor() or a.arch,
            "runner_version": "bundle_runner.py 1", "compiler": "none (Python ctypes)",
            "not_kept": ["no guard pages beyond the canary zones", "fp environment not checked"],
            "port": a.port,
            "port_sha256": hashlib.sha256(open(a.port, "rb").read()).hexdigest()}
    runs = [(ISAS.index(isas[0]), 1)] + [(ISAS.index(i), t) for i in isas for t in threads
                                         if (i, t) != (isas[0], 1)]
    with open(a.out, "wb") as f:
        p = json.dumps(plat).encode()
        f.write(b"CRNNRS01" + struct.pack("<I", a.results_version) + digest.encode()
                + struct.pack("<I", len(p)) + p)
        for case in cases:
            missing = [op[1] for op in case[3] if op[0] == "call" and not hasattr(lib, op[1])]
            for isa, t in runs:
                if missing:
                    calls, status, msg = [], 4, missing[0]
                else:
                    calls, status, msg = one_run(lib, case, isa, t, a.timeout,
                                                 a.results_version)
                m = msg.encode()
                f.write(b"RUN_" + struct.pack("<IiiI", case[0], isa, t, len(calls))
                        + b"".join(calls) + struct.pack("<II", status, len(m)) + m + b"END_")
                f.flush()


if __name__ == "__main__":
    sys.exit(main())
