"""Runs a port in a worker process, so a crash or a hang is a reported failure, not the end.

The worker (forked from the gate, so it shares the fixtures the gate read) loads the port
(checking its ABI) and runs one layer on one case per request, on private guarded copies of
the inputs (harness/guard.py), and sends back the outputs. A call that does not answer within
the timeout is killed; a worker that dies (segfault, abort) is reported with its signal (and,
for a fault, the address and the buffer whose guard region it hit) and restarted for the rest.

The worker's stdout and stderr are a file the gate reads after each run: what the port prints
is attached to that run's records (truncated to OUTPUT_LIMIT bytes) and never mixed into the
gate's own output. The worker ignores SIGINT (the gate handles it and kills the worker) and
dies with the gate (PR_SET_PDEATHSIG), so no worker outlives it.

The floating-point environment is checked in the worker before the port is loaded, right after
(a library built with -ffast-math may set flush-to-zero in its initialisation) and before and
after every port call: flush-to-zero (FTZ), denormals-are-zero (DAZ), a rounding mode other
than to-nearest or unmasked exceptions would change results, so finding any is an error of
the run (abi.PortError, gate exit 2), not a failure of a tensor (harness/fpenv.py).
"""
from __future__ import annotations

import ctypes
import fcntl
import multiprocessing as mp
import os
import resource
import signal
import tempfile
import time
import traceback
from pathlib import Path

import numpy as np

from crnn_conformance.ctypes_kernels import abi
from crnn_conformance.generators.h5io import read_fixture
from crnn_conformance.harness import guard
from crnn_conformance.harness.fpenv import (FpEnvError, fp_checker, fp_problem, load_helper,
                                            fpenv, fpenv_helper)

_LIBC = ctypes.CDLL(None)
OUTPUT_LIMIT = 4096              # bytes of a run's port output kept for its records
OUTPUT_FILE_LIMIT = 256 << 20    # RLIMIT_FSIZE of the worker: a port printing forever stops here


class PortCrash(RuntimeError):
    """The worker died or hung while running one layer on one case."""


class _Shared:
    """What the gate and its worker share: the entry point in progress, the fault slot the
    helper's signal handler fills, the guard-page table of the call in progress, and the
    worker's stdout/stderr file (O_APPEND, unlinked; the gate reads it with pread)."""

    def __init__(self, ctx):
        self.current = ctx.RawArray("c", 128)
        self.fault = ctx.RawArray(ctypes.c_uint64, 2)
        self.table = ctx.RawArray("c", 4096)
        self.parent = os.getpid()
        fd, path = tempfile.mkstemp(prefix="crnn-port-output-")
        os.unlink(path)
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_APPEND)
        self.out_fd = fd

    def output(self) -> str:
        """What the worker wrote since its last truncation (at most OUTPUT_LIMIT bytes)."""
        try:
            size = os.fstat(self.out_fd).st_size
            data = os.pread(self.out_fd, OUTPUT_LIMIT, 0) if size else b""
        except OSError:
            return ""
        text = data.decode("utf-8", "replace")
        if size > OUTPUT_LIMIT:
            text += f"\n[... {size - OUTPUT_LIMIT} more byte(s) not kept]"
        return text

    def close(self) -> None:
        if self.out_fd is not None:
            os.close(self.out_fd)
            self.out_fd = None


class _Traced:
    """The port as the layer modules see it in the worker: every crnn_* call is checked
    (_TracedFn); the wrappers are made once per entry point."""

    def __init__(self, lib, shared, helper):
        self._lib, self._shared, self._helper = lib, shared, helper
        self.fp_ok = fp_checker(helper)
        self.where = ""                      # the run in progress, for the messages
        self.table = b""                     # the guard-page table last written to shared

    def __getattr__(self, name):
        fn = getattr(self._lib, name)
        if not name.startswith("crnn_") or not callable(fn):
            return fn
        wrapped = _TracedFn(fn, name, self)
        setattr(self, name, wrapped)
        return wrapped

    def check_fp(self, when: str, why: str) -> None:
        if not self.fp_ok():
            self.fp_failed(when, why)

    def fp_failed(self, when: str, why: str):
        raise FpEnvError(f"{fp_problem(fpenv(self._helper), when)} ({why})")


class _TracedFn:
    """One entry point: the floating-point environment checked before and after, its name in
    the shared buffer while it runs (a crash or hang names it), and the arena's guard and
    const-input checks around it (harness/guard.py)."""

    def __init__(self, fn, name: str, traced: _Traced):
        self._fn, self._name, self._bname, self._t = fn, name, name.encode()[:127], traced

    def __call__(self, *args):
        t, shared = self._t, self._t._shared
        if not t.fp_ok():
            t.fp_failed(f"before {self._name} was called ({t.where})",
                        "something between the port's calls changed it")
        arena = guard.active()
        touched = arena.before(self._name, args) if arena is not None else ()
        table = arena.guard_pages(touched) if touched else b""
        if table != t.table:              # (the calls of a `many` case touch the same buffers)
            shared.table.value = t.table = table
        shared.current.value = self._bname
        rc = self._fn(*args)
        shared.current.value = b""
        if not t.fp_ok():
            t.fp_failed(f"after {self._name} returned ({t.where})",
                        "the call changed the floating-point environment and did not restore it")
        if arena is not None:
            arena.after(self._name, touched, rc)
        return rc

    def __getattr__(self, name):
        return getattr(self._fn, name)


def _isolate(shared) -> None:
    """The worker's set-up: the gate handles SIGINT (and kills the worker), SIGTERM and SIGHUP
    end it; it dies with the gate; its stdout and stderr go to the shared file, unbuffered."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
    libc = ctypes.CDLL(None)
    try:
        libc.prctl(1, int(signal.SIGKILL))   # PR_SET_PDEATHSIG (Linux)
    except AttributeError:
        pass
    if os.getppid() != shared.parent:
        os._exit(1)
    os.dup2(shared.out_fd, 1)
    os.dup2(shared.out_fd, 2)
    try:
        libc.setvbuf(ctypes.c_void_p.in_dll(libc, "stdout"), None, 2, 0)   # _IONBF
    except (AttributeError, ValueError):
        pass
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    hard = resource.getrlimit(resource.RLIMIT_FSIZE)[1]
    if hard == resource.RLIM_INFINITY or hard > OUTPUT_FILE_LIMIT:
        resource.setrlimit(resource.RLIMIT_FSIZE, (OUTPUT_FILE_LIMIT, hard))


def _worker(conn, port_path: str, layers: list[str], helper_path: str | None, shared,
            cases: dict) -> None:
    _isolate(shared)
    helper = load_helper(helper_path) if helper_path else None
    if helper is not None:
        helper.crnn_h_catch_faults(ctypes.addressof(shared.fault))
    problem = fp_problem(fpenv(helper), "in the harness process before loading the port")
    if problem:
        conn.send(("porterror", problem + " (something in this process enabled it: unset it "
                                "or run the gate from a clean interpreter)"))
        return
    try:
        lib = abi.load(port_path, layers)
    except abi.PortError as e:
        conn.send(("porterror", str(e)))
        return
    problem = fp_problem(fpenv(helper), f"right after loading the port {port_path}")
    if problem:
        conn.send(("porterror", problem + " (its initialisation enables it: was it built or "
                                "linked with -ffast-math / -Ofast?)"))
        return
    ctypes.CDLL(None).fflush(None)
    conn.send(("ok", {"isas": abi.available_isas(lib), "abi_version": int(lib.crnn_abi_version()),
                      "fpenv": fpenv(helper), "symbols": abi.exported(lib)}))
    traced = _Traced(lib, shared, helper)
    fflush = _LIBC.fflush
    while True:
        try:
            msg = conn.recv()
        except EOFError:          # the gate is gone
            return
        if msg is None:
            return
        if msg[0] == "batch":     # one case on several (isa, threads): an answer per run
            _serve_batch(conn, traced, shared, cases, *msg[1:])
            continue
        arena = _fresh_arena(traced, shared)
        answer = _run_one(traced, arena, cases, *msg)
        fflush(None)
        conn.send(answer)
        arena.release()


def _fresh_arena(traced, shared) -> guard.Arena:
    """A run's start: its own output (the file truncated), no guard-page table, a new arena."""
    os.ftruncate(shared.out_fd, 0)
    shared.table.value = traced.table = b""
    return guard.Arena()


def _serve_batch(conn, traced, shared, cases, layer, fixture_path, case_name, runs, case) -> None:
    """Runs one case on every (isa, threads) of `runs`, sending ("run", answer, port output,
    seconds) as each run ends, then ("done", None). A run whose outputs equal the first's
    byte for byte is sent as ("same", None). An fpenv answer ends the batch: the environment
    is broken for every run after it."""
    if case is not None:                         # the case itself came with the request
        cases[fixture_path] = {case_name: case}
    fflush = _LIBC.fflush
    first = first_arena = None
    for isa, threads in runs:
        arena = _fresh_arena(traced, shared)
        t0 = time.perf_counter()
        answer = _run_one(traced, arena, cases, layer, fixture_path, case_name, isa, threads)
        seconds = time.perf_counter() - t0
        fflush(None)
        if first is None:
            first, first_arena = answer, arena
        elif _same_outputs(answer, first):
            answer = ("same", None)
        conn.send(("run", answer, shared.output(), seconds))
        if arena is not first_arena:
            arena.release()
        if answer[0] == "fpenv":
            break
    conn.send(("done", None))
    if first_arena is not None:
        first_arena.release()


def same_bytes(a, b) -> bool:
    """Two arrays of the same dtype and shape holding the same bytes (NaN payloads included)."""
    if a is b:
        return True
    return (isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and a.dtype == b.dtype
            and a.shape == b.shape and a.tobytes() == b.tobytes())


def _same_outputs(answer, first) -> bool:
    """Both runs returned outputs, the same tensors with the same bytes."""
    if answer[0] != "ok" or first[0] != "ok" or answer[1].keys() != first[1].keys():
        return False
    return all(same_bytes(answer[1][t], first[1][t]) for t in first[1])


def _run_one(lib, arena, cases, layer, fixture_path, case_name, isa, threads) -> tuple:
    from crnn_conformance.harness import layers as L
    lib.where = f"{layer}, case {case_name}, {isa} x {threads} thread(s)"
    case = None
    guard.activate(arena)
    try:
        lib.check_fp(f"before running {layer} on case {case_name}",
                     "an earlier call into the port left it set")
        if fixture_path not in cases:
            cases[fixture_path] = {c.name: c for c in read_fixture(fixture_path).cases}
        case = cases[fixture_path][case_name]
        abi.check(lib.crnn_set_isa(abi.ISA_NAMES.index(isa)), f"crnn_set_isa({isa})")
        abi.check(lib.crnn_set_threads(threads), f"crnn_set_threads({threads})")
        result = L.module(layer).run(lib, guard.PrivateCase(case, arena))
        arena.finish()
        return ("ok", result)
    except FpEnvError as e:
        return ("fpenv", str(e))
    except abi.PortCallError as e:
        wanted = ({t for tensors in case.expected.values() for t in tensors}
                  if case is not None and case.expected else None)   # None: every output
        return ("callerror", (str(e), e.code, arena.partial(wanted)))
    except Exception:  # a harness bug: report it whole
        return ("exception", traceback.format_exc())
    finally:
        guard.activate(None)


class Executor:
    """The gate's side of the worker. `timeout` (seconds, None: no limit) bounds each run;
    `cases` ({fixture path: {case name: Case}}) are the fixtures the gate already read (the
    worker inherits them; one not listed is read in the worker). After each run,
    `last_output` holds what the port printed during it."""

    def __init__(self, port_path: Path, layers: list[str], timeout: float | None = 120.0,
                 cases: dict | None = None):
        self.port_path = str(port_path)
        self.layers = list(layers)
        self.timeout = timeout
        self.cases = {str(k): v for k, v in (cases or {}).items()}
        self.proc = None
        self.conn = None
        self.last_output = ""
        self.last_seconds = 0.0
        self._batches: dict[tuple, dict] = {}   # (layer, fixture, case) -> {(isa, threads): answer}
        self._in_flight = None                  # (batch key, runs) sent and not collected
        self._latest = None                     # the batch collected last
        helper = fpenv_helper()            # built here, before the fork, loaded in the worker
        self.helper_path = helper._name if helper is not None else None
        self.ctx = mp.get_context("fork")
        self.shared = _Shared(self.ctx)
        self.info = self._start()           # {"isas", "abi_version", "fpenv"}
        self.load_output = self.last_output  # what the port printed while being loaded
        self.isas = self.info["isas"]

    def _start(self) -> dict:
        self.conn, child = self.ctx.Pipe()
        os.ftruncate(self.shared.out_fd, 0)
        self.proc = self.ctx.Process(target=_worker, args=(child, self.port_path, self.layers,
                                                           self.helper_path, self.shared,
                                                           self.cases), daemon=True)
        self.proc.start()
        child.close()
        if not self.conn.poll(self.timeout):
            self.close(force=True)
            raise abi.PortError(f"port {self.port_path} did not load within {self.timeout:.0f} s")
        try:
            kind, payload = self.conn.recv()
        except EOFError:
            code = self._reap()
            raise abi.PortError(f"port {self.port_path} crashed while loading ({_describe(code)}"
                                f"{self._fault(code)})") from None
        finally:
            self.last_output = self.shared.output()
        if kind == "porterror":
            self.close()
            raise abi.PortError(payload)
        return payload

    def submit(self, layer: str, fixture_path, case_name: str, runs: list, case=None) -> None:
        """Sends one case's runs on every (isa, threads) of `runs` as one request; the worker
        answers each run as it ends, and run() (or collect()) takes the answers. A batch
        still in flight is collected first. `case`: an in-memory case sent with the request
        (the fuzzer's), run as if fixture_path held it alone (a restarted worker inherits
        it). Of the earlier batches only the last one collected is kept (its case may still
        be taking its answers)."""
        self.collect()
        key = (layer, str(fixture_path), case_name)
        self._batches = {k: v for k, v in self._batches.items() if k == self._latest}
        if case is not None:
            self.cases[str(fixture_path)] = {case_name: case}
        if self.proc is None or not self.proc.is_alive():
            self._start()
        self.shared.fault[0] = self.shared.fault[1] = 0
        self.conn.send(("batch", layer, str(fixture_path), case_name, list(runs), case))
        self._batches[key] = {}
        self._in_flight = (key, list(runs))

    def submitted(self, layer: str, fixture_path, case_name: str) -> bool:
        return (layer, str(fixture_path), case_name) in self._batches

    def collect(self) -> None:
        """Reads the answers of the batch in flight, waiting up to the timeout for each run
        (from when the wait starts, so no run is stopped sooner). A run that hangs or
        crashes is kept as that run's PortCrash, with the same message a single run gets;
        the worker is then gone, and the runs after it are not kept (run() redoes each
        alone on a new worker)."""
        if self._in_flight is None:
            return
        key, runs = self._in_flight
        self._in_flight, self._latest = None, key
        got, first = self._batches[key], None
        for isa, threads in runs:
            msg = self._batch_message()
            if msg[0] != "run":                  # done early (fpenv), or the worker gone
                if msg[0] == "crash":
                    got[(isa, threads)] = (("crash", msg[1]), self.shared.output(), 0.0)
                return
            _, answer, text, seconds = msg
            if answer[0] == "same":              # the first run's outputs, byte for byte
                answer = first
            elif first is None:
                first = answer
            got[(isa, threads)] = (answer, text, seconds)
        self._batch_message()       # ("done", None); a crash after the last run loses no run

    def _batch_message(self) -> tuple:
        """The worker's next message of a batch, or ("crash", message) when it hung (it is
        then killed) or died."""
        if not self.conn.poll(self.timeout):
            where = self._where()
            self.proc.kill()
            self._reap()
            self.proc = None
            return ("crash", f"hang: no answer{where} within {self.timeout:g} s (--timeout); "
                             f"worker killed")
        try:
            return self.conn.recv()
        except (EOFError, ConnectionResetError):
            code = self._reap()
            where = self._where()
            self.proc = None
            return ("crash", f"the port crashed{where}: {_describe(code)}{self._fault(code)}")

    def drop(self, layer: str, fixture_path, case_name: str) -> None:
        """Forgets a batch's answers that no run() took (e.g. a case whose base run failed)."""
        key = (layer, str(fixture_path), case_name)
        if self._in_flight is not None and self._in_flight[0] == key:
            self.collect()
        self._batches.pop(key, None)

    def prefetch(self, layer: str, fixture_path, case_name: str, runs: list, case=None,
                 meanwhile=None) -> None:
        """submit() and collect(), calling `meanwhile()` while the worker runs (the fuzzer
        computes the spec's bits then; the answers are read even if it raises)."""
        self.submit(layer, fixture_path, case_name, runs, case)
        try:
            if meanwhile is not None:
                meanwhile()
        finally:
            self.collect()

    def prefetched(self) -> list:
        """The answers of the last batch collected that run() has not taken yet: (kind,
        payload) each."""
        return [answer for answer, _, _ in self._batches.get(self._latest, {}).values()]

    def run(self, layer: str, fixture_path: Path, case_name: str, isa: str, threads: int) -> dict:
        """The outputs of one run; raises PortCrash, abi.PortCallError (with `.partial`: the
        outputs of the calls that completed) or abi.PortError (the floating-point
        environment). A run of a submitted batch is taken from its answers; `last_output`
        and `last_seconds` (the run's own time in the worker) describe it."""
        key = (layer, str(fixture_path), case_name)
        if self._in_flight is not None and self._in_flight[0] == key:
            self.collect()
        hit = self._batches.get(key, {}).pop((isa, threads), None)
        if hit is not None:
            (kind, payload), self.last_output, self.last_seconds = hit
            return self._reply(kind, payload)
        self.collect()                        # the pipe must be clear for a single request
        if self.proc is None or not self.proc.is_alive():
            self._start()
        self.shared.fault[0] = self.shared.fault[1] = 0
        t0 = time.perf_counter()
        self.conn.send((layer, str(fixture_path), case_name, isa, threads))
        try:
            return self._answer()
        finally:
            self.last_output = self.shared.output()
            self.last_seconds = time.perf_counter() - t0

    def _answer(self) -> dict:
        if not self.conn.poll(self.timeout):
            where = self._where()
            self.proc.kill()
            self._reap()
            self.proc = None
            raise PortCrash(f"hang: no answer{where} within {self.timeout:g} s (--timeout); "
                            f"worker killed")
        try:
            kind, payload = self.conn.recv()
        except (EOFError, ConnectionResetError):
            code = self._reap()
            where = self._where()
            self.proc = None
            raise PortCrash(f"the port crashed{where}: {_describe(code)}{self._fault(code)}") from None
        return self._reply(kind, payload)

    def _reply(self, kind, payload) -> dict:
        if kind == "ok":
            return payload
        if kind == "callerror":
            e = abi.PortCallError(payload[0], payload[1])
            e.partial = payload[2]
            raise e
        if kind == "fpenv":
            raise abi.PortError(payload)
        if kind == "crash":
            raise PortCrash(payload)
        raise RuntimeError(f"harness error in the worker:\n{payload}")

    def _where(self) -> str:
        name = bytes(self.shared.current.value).decode(errors="replace")
        return f" in {name}" if name else ""

    def _fault(self, code) -> str:
        """' (a write at byte +4 past the end of y (in its guard page))' for a recorded fault."""
        if code not in (-signal.SIGSEGV, -signal.SIGBUS) or not self.shared.fault[1] & 1:
            return ""
        kind = "a write" if self.shared.fault[1] & 2 else "an access"
        table = bytes(self.shared.table.value).decode(errors="replace")
        return f" ({kind} {guard.fault_report(int(self.shared.fault[0]), table)})"

    def _reap(self) -> int | None:
        if self.proc is not None:
            self.proc.join(5)
            return self.proc.exitcode
        return None

    def close(self, force: bool = False) -> None:
        """Ends the worker: asks it to exit (force: kills it at once, e.g. on a signal)."""
        if self.proc is not None and self.proc.is_alive():
            if not force:
                try:
                    self.conn.send(None)
                except (BrokenPipeError, OSError):
                    pass
                self.proc.join(5)
            if self.proc.is_alive():
                self.proc.kill()
                self.proc.join(5)
        self.proc = None
        self.shared.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close(force=exc[0] is not None)


def _describe(code) -> str:
    if code is None:
        return "exit status unknown"
    if code < 0:
        try:
            return f"killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with status {code}"
