"""The worker process: loads the port, runs one layer on one case per request on private
guarded copies of the inputs (harness/sandbox/guard.py), and answers with the outputs
(harness/sandbox/executor.py is the gate's side).

Every port call is checked (_TracedFn): the floating-point environment before and after
(flush-to-zero, denormals-are-zero, a rounding mode other than to-nearest or unmasked
exceptions would change results: abi.PortError, gate exit 2), the arena's guard zones and
const inputs, and the entry point in progress is written to memory shared with the gate, so
a crash or hang names it. The worker's stdout and stderr are a file the gate reads after
each run. The worker ignores SIGINT (the gate handles it and kills the worker) and dies with
the gate (PR_SET_PDEATHSIG), so no worker outlives it. It leads a process group of its own,
which the gate kills whole when it ends or replaces the worker (executor._reap): the processes
the port started (a fork(), subprocess.Popen) go with it. Its copies of the gate's pipes and
sockets point at /dev/null (_blind), and a child of a fork() the port made in a call exits as
soon as the call returns or raises (_only_the_worker): only the worker answers the gate.
"""
from __future__ import annotations

import ctypes
import fcntl
import os
import resource
import signal
import sys
import tempfile
import threading
import time
import traceback
from collections import deque

import numpy as np

from ...ctypes_kernels import abi
from ...generators.h5io import read_fixture
from .. import pyport
from . import guard, replay
from .fpenv import FpEnvError, fp_checker, fp_problem, fpenv, load_helper

_LIBC = ctypes.CDLL(None)
OUTPUT_LIMIT = 4096              # bytes of a run's port output kept for its records
MAX_HELD = 1024                  # runs of a batch whose answers may be held back
OUTPUT_FILE_LIMIT = 256 << 20    # RLIMIT_FSIZE of the worker: a port printing forever stops here


def full_output() -> str:
    """What a run that printed without end is told."""
    return (f"the port's output reached the worker's limit of {OUTPUT_FILE_LIMIT >> 20} MiB "
            "in this run; its writes after that failed (a print without end?)")


class _Shared:
    """What the gate and its worker share: the entry point in progress, the batch's run in
    progress with its start and the held-back runs' seconds (progress), the fault slot the
    helper's signal handler fills, the guard-page table of the call in progress, and the
    worker's stdout/stderr file (O_APPEND, unlinked; the gate reads it with pread)."""

    def __init__(self, ctx):
        self.current = ctx.RawArray("c", 128)
        self.last = ctx.RawArray("c", 128)      # the entry point called last (kept after it)
        # [run index (-1: none), its start (time.monotonic), seconds of held run i at 2 + i]
        self.progress = ctx.RawArray(ctypes.c_double, 2 + MAX_HELD)
        self.progress[0] = -1
        self.fault = ctx.RawArray(ctypes.c_uint64, 2)
        self.table = ctx.RawArray("c", 4096)
        self.parent = os.getpid()
        self.gate_pipes: list[int] = []          # the gate's pipes, /dev/null in the worker
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
        if size >= OUTPUT_FILE_LIMIT:
            text += f"\n[{full_output()}]"
        return text

    def full(self) -> bool:
        """Whether the worker's output reached OUTPUT_FILE_LIMIT (its writes then fail)."""
        try:
            return os.fstat(self.out_fd).st_size >= OUTPUT_FILE_LIMIT
        except (OSError, TypeError):
            return False

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
        self.last = b""                      # the entry point last written to shared.last
        python = isinstance(lib, pyport.PyPort)
        self.isa_names = lib.isa_names if python else abi.ISA_NAMES   # crnn_set_isa's indices
        # the repeat runs of a batch replayed in C (harness/sandbox/replay.py); CRNN_NO_REPLAY=1: not.
        # A Python port's calls cannot be played from C: every run goes through Python.
        self.replays = (not python and helper is not None and getattr(helper, "replays", False)
                        and helper.crnn_h_arch() in (1, 2)
                        and os.environ.get("CRNN_NO_REPLAY", "") in ("", "0"))

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
    const-input checks around it (harness/sandbox/guard.py)."""

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
        if arena is not None and arena.tape is not None:
            arena.tape.call(arena, self._name, args, touched)
        shared.current.value = self._bname
        if t.last is not self._bname:
            shared.last.value = t.last = self._bname
        try:
            rc = self._fn(*args)
        finally:
            _only_the_worker()        # (also when the call raised: a Python port's)
        shared.current.value = b""
        if not t.fp_ok():
            t.fp_failed(f"after {self._name} returned ({t.where})",
                        "the call changed the floating-point environment and did not restore it")
        if arena is not None:
            arena.after(self._name, touched, rc)
        return rc

    def __getattr__(self, name):
        return getattr(self._fn, name)


_WORKER_PID = None     # the worker's pid (set by _worker): a port's fork() child has another


def _only_the_worker() -> None:
    """Ends at once (os._exit) a child of a fork() made by the port in a call: it returned
    from the call in a copy of the worker, which must never answer the gate or run the
    worker loop (the parent's answers are the run's)."""
    if _WORKER_PID is not None and os.getpid() != _WORKER_PID:
        os._exit(0)


def _isolate(shared) -> None:
    """The worker's set-up: the gate handles SIGINT (and kills the worker), SIGTERM and SIGHUP
    end it; it dies with the gate; its stdout and stderr go to the shared file, unbuffered."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
    try:
        os.setpgid(0, 0)    # its own process group, which the gate kills whole (the gate sets it too)
    except OSError:
        pass
    libc = ctypes.CDLL(None)
    try:
        libc.prctl(1, int(signal.SIGKILL))   # PR_SET_PDEATHSIG (Linux)
    except AttributeError:
        pass
    else:
        # a child of os.fork() in a Python port dies with the worker too (the flag is not
        # inherited; a port's process started by exec is killed with the group, executor._reap)
        os.register_at_fork(after_in_child=lambda: libc.prctl(1, int(signal.SIGKILL)))
    if os.getppid() != shared.parent:
        os._exit(1)
    _blind(shared.gate_pipes)
    os.dup2(shared.out_fd, 1)
    os.dup2(shared.out_fd, 2)
    # Python-level output (a Python port's print and tracebacks) to the same file descriptors,
    # whatever the parent had made of sys.stdout (pytest's capture, for one)
    sys.stdout = open(1, "w", encoding="utf-8", errors="replace", closefd=False)
    sys.stderr = open(2, "w", encoding="utf-8", errors="replace", closefd=False)
    try:
        libc.setvbuf(ctypes.c_void_p.in_dll(libc, "stdout"), None, 2, 0)   # _IONBF
    except (AttributeError, ValueError):
        pass
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    hard = resource.getrlimit(resource.RLIMIT_FSIZE)[1]
    if hard == resource.RLIM_INFINITY or hard > OUTPUT_FILE_LIMIT:
        resource.setrlimit(resource.RLIMIT_FSIZE, (OUTPUT_FILE_LIMIT, hard))


def _blind(fds) -> None:
    """The gate's pipes and sockets the worker inherited (executor._pipes: the gate's ends of
    the workers' channels, the allowance pool's queues, ...) point at /dev/null: the port can
    write into none of them. (Not closed: a number freed would be reused, and what Python
    still writes there at exit, e.g. concurrent.futures' wakeup, would land in another file.)"""
    null = os.open(os.devnull, os.O_RDWR)
    for fd in fds:
        if fd != null:
            try:
                os.dup2(null, fd)
            except OSError:
                pass
    if null not in fds:
        os.close(null)


def _worker(conn, port_path: str, layers: list[str], helper_path: str | None, shared,
            cases: dict, check_fpenv: bool = True) -> None:
    global _WORKER_PID
    _WORKER_PID = os.getpid()
    _isolate(shared)
    helper = load_helper(helper_path) if helper_path else None
    if helper is not None:
        helper.crnn_h_catch_faults(ctypes.addressof(shared.fault))
    guard.use_helper(helper)
    problem = fp_problem(fpenv(helper), "in the harness process before loading the port")
    if problem:
        conn.send(("porterror", problem + " (something in this process enabled it: unset it "
                                "or run the gate from a clean interpreter)"))
        return
    try:
        lib = (pyport.load(port_path, layers) if pyport.is_python_port(port_path)
               else abi.load(port_path, layers))
    except abi.PortError as e:
        _only_the_worker()
        conn.send(("porterror", str(e)))
        return
    except BaseException as e:      # noqa: BLE001 (a Python port's import or object raised)
        _only_the_worker()
        if not pyport.is_python_port(port_path):
            raise
        conn.send(("porterror", f"python port {port_path} failed while loading: "
                                f"{pyport._first_line(e)}"))
        return
    _only_the_worker()              # (a fork() in the port's initialisation)
    if isinstance(lib, pyport.PyPort):
        lib.returned = _only_the_worker     # (a fork() in a method: before its exception is told)
    problem = fp_problem(fpenv(helper), f"right after loading the port {port_path}")
    if problem and check_fpenv:
        conn.send(("porterror", problem + " (its initialisation enables it: was it built or "
                                "linked with -ffast-math / -Ofast?)"))
        return
    ctypes.CDLL(None).fflush(None)
    python = isinstance(lib, pyport.PyPort)
    isas = pyport.advertised(lib) if python else abi.available_isas(lib)
    conn.send(("ok", {"isas": isas, "abi_version": int(lib.crnn_abi_version()),
                      "fpenv": fpenv(helper), "symbols": abi.exported(lib),
                      "threads": lib.thread_counts if python else None}))
    traced = _Traced(lib, shared, helper)
    fflush = _LIBC.fflush
    conn = _Locked(conn)
    settling = _Watcher(conn)
    while True:
        settling.release()
        try:
            msg = conn.recv()
        except EOFError:          # the gate is gone
            return
        if msg is None:
            return
        if msg[0] == "batch":     # one case on several (isa, threads): an answer per run
            _serve_batch(conn, traced, shared, cases, settling, *msg[1:])
            continue
        if msg[0] == "contract":  # the contract tier's calls (harness/contract.py): an answer each
            _serve_contract(conn, traced, shared, *msg[1:])
            continue
        arena = _fresh_arena(traced, shared)
        answer = _run_one(traced, arena, cases, *msg)
        fflush(None)
        conn.send(answer)
        arena.release()


def _serve_contract(conn, traced, shared, calls, isa: str) -> None:
    """The contract tier's calls on the base run's ISA (a Python port's config: its name's
    index in the port's own list, as crnn_set_isa takes it)."""
    from .. import contract
    base_isa = traced.isa_names.index(isa)
    os.ftruncate(shared.out_fd, 0)
    for call in calls:
        traced.where = f"contract tier, {call.label}"
        answer = contract.run(traced, call, base_isa)
        _LIBC.fflush(None)
        conn.send(answer)


class _Settling:
    """A batch's last run, its arena sealed at the run's end (guard.Arena.seal) and kept
    unreused until `due`, when settled() tells whether anything wrote into it since."""

    def __init__(self, arena, run: int, window: float):
        self.arena, self.run, self.due = arena, run, time.monotonic() + window


class _Locked:
    """The worker's end of the pipe, its sends under a lock (_Watcher's thread sends too)."""

    def __init__(self, conn):
        self._conn, self._lock = conn, threading.Lock()

    def send(self, msg) -> None:
        _only_the_worker()
        with self._lock:
            self._conn.send(msg)

    def __getattr__(self, name):
        return getattr(self._conn, name)


class _Watcher:
    """The settling batches, each checked when due by a thread of its own, so its verdict,
    ("late", run index, what changed or None), comes on time also while the next case is in
    a long call or replay. The checked arenas go back to the pool from the main thread
    (release()), which alone uses the pool."""

    def __init__(self, conn):
        self.conn, self.cond = conn, threading.Condition()
        self.items, self.checked = deque(), []
        threading.Thread(target=self._run, daemon=True).start()

    def append(self, item: _Settling) -> None:
        with self.cond:
            self.items.append(item)
            self.cond.notify()

    def release(self) -> None:
        with self.cond:
            checked, self.checked = self.checked, []
        for arena in checked:
            arena.release()

    def _run(self) -> None:
        while True:
            with self.cond:
                while not self.items or self.items[0].due > time.monotonic():
                    self.cond.wait(self.items[0].due - time.monotonic() if self.items else None)
                item = self.items.popleft()
            try:
                problem = item.arena.settled() if item.arena is not None else None
            except Exception:   # noqa: BLE001  (the harness's error: not the port's failure)
                problem = None
            try:
                self.conn.send(("late", item.run, problem))
            except OSError:     # the gate is gone
                return
            if item.arena is not None:
                with self.cond:
                    self.checked.append(item.arena)


def _fresh_arena(traced, shared) -> guard.Arena:
    """A run's start: its own output (the file truncated), no guard-page table, a new arena."""
    os.ftruncate(shared.out_fd, 0)
    shared.table.value = traced.table = b""
    return guard.Arena()


def _serve_batch(conn, traced, shared, cases, settling, layer, fixture_path, case_name, runs,
                 case, symbolic=None, settle=None) -> None:
    """Runs one case on every (isa, threads) of `runs`, sending ("run", answer, port output,
    seconds) as each run ends, then ("done", [seconds, ...]). A run whose outputs equal the
    first's byte for byte and that printed nothing is held back, its seconds in
    shared.progress, and the held runs go as one ("same", [seconds, ...]) before the next
    other answer, or with "done": a clean case is two messages, not one a run.
    shared.progress names the run in progress and its start, so the gate times each run from
    its own start and, after a crash or a hang, knows which run it was and that the held ones
    before it passed (Executor._recover). An fpenv answer ends the batch: the environment is
    broken for every run after it.

    The first run is recorded, and the runs after it are replayed in C (harness/sandbox/replay.py)
    until one of them differs from the first, prints or fails a check; that one and the rest
    run here, each as the first did.

    `settle` (seconds, or None): the last run's buffers are sealed and kept unreused that
    long after its end, then checked (_Settling: a write after return), the verdict going
    as ("late", run index, message or None) after "done", while the next batches run."""
    if case is not None:                         # the case itself came with the request
        cases[fixture_path] = {case_name: case}
    fflush, progress = _LIBC.fflush, shared.progress
    first = first_arena = tape = last_arena = None
    held = []
    i = 0
    if symbolic is not None and traced.replays:
        first_arena, tape, first = _serve_symbolic(conn, traced, shared,
                                                   cases[fixture_path][case_name], runs,
                                                   symbolic)
        i = 0 if first is None else 1
        last_arena = first_arena
    while i < len(runs):
        settling.release()
        if tape is not None:
            done, _, _ = tape.run(i, runs[:MAX_HELD])
            _only_the_worker()          # (the replayed calls are the port's too)
            held += [progress[2 + j] for j in range(i, i + done)]
            i, tape = i + done, None
            last_arena = first_arena if done else last_arena
            if i == len(runs):
                if settle is not None:
                    last_arena.seal()
                break
        isa, threads = runs[i]
        arena = _fresh_arena(traced, shared)
        progress[1], progress[0] = time.monotonic(), i
        t0 = time.perf_counter()
        recording = replay.Tape() if first is None and traced.replays and len(runs) > 1 else None
        answer = _run_one(traced, arena, cases, layer, fixture_path, case_name, isa, threads,
                          recording)
        seconds = time.perf_counter() - t0
        if settle is not None and i == len(runs) - 1:
            arena.seal()          # before its answer is sent (which reads its outputs)
        fflush(None)
        text = shared.output()
        if first is None:
            first, first_arena = answer, arena
        elif _same_outputs(answer, first):
            answer = ("same", None)
        if answer[0] == "same" and not text and i < MAX_HELD:
            progress[2 + i] = seconds
            held.append(seconds)
        else:
            if held:
                conn.send(("same", held))
                held = []
            conn.send(("run", answer, text, seconds))
        if arena is first_arena and recording is not None and answer[0] == "ok" and not text:
            # (the replays reuse these buffers; a replay that stops puts the first run's
            # outputs back, which `first` holds views of)
            tape = _compiled(recording, arena, traced, shared)
            if tape is not None:
                tape.keep_first()
        if last_arena is not None and last_arena is not first_arena:
            last_arena.release()
        last_arena = arena
        if answer[0] == "fpenv":
            break
        i += 1
    # (an fpenv answer ended the batch: nothing to watch)
    watched = last_arena if settle is not None and i == len(runs) else None
    conn.send(("done", held))       # the last held runs go with the end
    progress[0] = -1
    if settle is not None:          # (its verdict after "done")
        settling.append(_Settling(watched, len(runs) - 1, settle))
    if last_arena is not None and last_arena is not first_arena and last_arena is not watched:
        last_arena.release()
    if first_arena is not None and first_arena is not watched:
        first_arena.release()


def _compiled(tape, arena, traced, shared):
    """tape.compile() for this arena, or None: also when the compiling itself fails, which is
    the harness's error, not the port's (the runs then go through Python; an error here must
    not end the worker, which the gate would report as the port's crash)."""
    try:
        return tape.compile(arena, traced._lib, traced._helper, shared, guard.pattern_address())
    except Exception:   # noqa: BLE001
        return None


def _serve_symbolic(conn, traced, shared, case, runs, symbolic):
    """The first run of a batch made in C from a tape recorded elsewhere (the fuzzer's run of
    the case on the reference port, replay.Tape.symbolic) on this process's own buffers, with
    every check the replays make; its answer is the run's written buffers as one array
    (replay.BLOB), which the fuzzer compares with the reference's. -> (its arena, the tape
    for the next runs, its answer), or (None, None, None) when the tape does not fit this
    case or the run stopped (then the batch runs as any other, from its first run)."""
    arena = _fresh_arena(traced, shared)
    try:
        tape = replay.Tape.from_symbolic(symbolic, case.inputs, arena)
    except (KeyError, ValueError, TypeError, IndexError):   # not this case's tape
        tape = None
    compiled = _compiled(tape, arena, traced, shared) if tape is not None else None
    t0 = time.perf_counter()
    ran = compiled is not None and compiled.run(0, runs[:1], compare=False)[0] == 1
    _only_the_worker()
    if not ran:
        arena.release()
        return None, None, None
    compiled.keep_first()
    answer = ("ok", {replay.BLOB: compiled.kept})
    conn.send(("run", answer, "", time.perf_counter() - t0))
    return arena, compiled, answer


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


def _run_one(lib, arena, cases, layer, fixture_path, case_name, isa, threads, tape=None) -> tuple:
    from .. import layers as L
    lib.where = f"{layer}, case {case_name}, {isa} x {threads} thread(s)"
    case = None
    guard.activate(arena)
    try:
        lib.check_fp(f"before running {layer} on case {case_name}",
                     "an earlier call into the port left it set")
        if fixture_path not in cases:
            cases[fixture_path] = {c.name: c for c in read_fixture(fixture_path).cases}
        case = cases[fixture_path][case_name]
        abi.check(lib.crnn_set_isa(lib.isa_names.index(isa)), f"crnn_set_isa({isa})")
        abi.check(lib.crnn_set_threads(threads), f"crnn_set_threads({threads})")
        arena.tape = tape                 # the layer's calls are recorded (replay.Tape)
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
        arena.tape = None
        guard.activate(None)
        for stream in (sys.stdout, sys.stderr):   # what a Python port printed belongs to this run
            try:
                stream.flush()
            except (OSError, ValueError):         # (the output file full: OUTPUT_FILE_LIMIT)
                pass
