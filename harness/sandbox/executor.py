"""The gate's side of a worker process (harness/sandbox/worker.py), so a crash or a hang of the port is
a reported failure, not the end.

The worker is forked from the gate, so it shares the fixtures the gate read. A call that
does not answer within the timeout is killed; a worker that dies (segfault, abort) is
reported with its signal (and, for a fault, the address and the buffer whose guard region it
hit) and restarted for the rest. What the port prints is attached to that run's records
(truncated to OUTPUT_LIMIT bytes) and never mixed into the gate's own output.

Requests: one run (run()), or one case on several ISA x thread counts (submit(): a batch,
answered run by run as each ends; runs with the first run's outputs that printed nothing are
held back by the worker and answered together, and shared memory names the run in progress
and its start, which time each run and place a crash or hang). Up to MAX_QUEUED batches may
wait in a worker's queue, so it never waits for the gate between cases; receive() files each
answer under its batch, and a gate with several workers reads whichever answers first
(harness/runner.py). With `settle` (the gate's), a batch is complete only when the worker's
check of its last run, `settle` seconds after that run ended, came back ("late"): a write
into its buffers since fails that run (worker._Settling). Every hang is listed in `hangs`
with its batch and entry point (the gate stops a layer after two, runner._stopped).

The floating-point environment is checked in the worker before the port is loaded, right after
(a library built with -ffast-math may set flush-to-zero in its initialisation) and before and
after every port call: finding flush-to-zero, denormals-are-zero, another rounding mode or
unmasked exceptions is an error of the run (abi.PortError, gate exit 2), not a failure of a
tensor (harness/sandbox/fpenv.py).

Every message from the worker is read by channel.receive: within the timeout, at most
channel.MAX_MESSAGE bytes, decoded without running anything it names. Bytes the port wrote
into the channel fail the run in progress (_garbled) and the worker is restarted. The ISA
paths run are those the port advertises that this machine can execute (runnable()).
"""
from __future__ import annotations

import multiprocessing as mp
import os
import platform
import signal
import stat
import sys
import time
from collections import deque
from pathlib import Path

from ...ctypes_kernels import abi
from . import channel, guard, reaper
from .channel import ChannelError
from .fpenv import fpenv_helper
from .worker import OUTPUT_LIMIT, _Shared, _worker, full_output, same_bytes

__all__ = ["OUTPUT_LIMIT", "Executor", "PortCrash", "fpenv_helper", "probe", "same_bytes"]

MAX_QUEUED = 3       # batches a worker may have waiting (each request a few hundred bytes)


class PortCrash(RuntimeError):
    """The worker died or hung while running one layer on one case."""


class Executor:
    """The gate's side of the worker. `timeout` (seconds, None: no limit) bounds each run;
    `cases` ({fixture path: {case name: Case}}) are the fixtures the gate already read (the
    worker inherits them; one not listed is read in the worker). After each run,
    `last_output` holds what the port printed during it."""

    def __init__(self, port_path: Path, layers: list[str], timeout: float | None = 120.0,
                 cases: dict | None = None, settle: float | None = None,
                 every_isa: bool = False, check_fpenv: bool = True):
        self.port_path = str(port_path)
        self.layers = list(layers)
        self.timeout = timeout
        self._suspect = False     # the worker raised while running a case: replace it
        self.cases = {str(k): v for k, v in (cases or {}).items()}
        self.check_fpenv = check_fpenv      # (probe(): off, the caller only loads the port)
        self.proc = None
        self.conn = None
        self.last_output = ""
        self.last_seconds = 0.0
        self._batches: dict[tuple, dict] = {}   # (layer, fixture, case) -> {(isa, threads): answer}
        self._queue: deque = deque()            # [key, runs not answered, first answer] per batch
        self._since = 0.0                       # when the run being waited for started
        self._latest = None                     # the batch collected last
        # batch key -> the batch this worker was sent just before it (None: the first since
        # the worker started): a run that differs only after another case names it
        self.after: dict[tuple, tuple | None] = {}
        self._sent = None
        # settle (seconds): each batch's last run is checked that long after its end for a
        # write after return (worker._Settling); [key, runs] of the batches awaiting it
        self.settle = settle
        self._settling: deque = deque()
        self.hangs: list[tuple] = []            # (batch key, entry point) of every hang
        self._single = None                     # the key of the single run in progress
        self._lost_why = ""                     # why the worker is gone (_hang, _crash)
        helper = fpenv_helper()            # built here, before the fork, loaded in the worker
        self.helper_path = helper._name if helper is not None else None
        self.ctx = mp.get_context("fork")
        self.shared = _Shared(self.ctx)
        self.info = self._start()           # {"isas", "abi_version", "fpenv"}
        self.load_output = self.last_output  # what the port printed while being loaded
        if every_isa:                       # (probe(): the port's word, nothing run)
            self.isas, self.left_out = list(self.info["isas"]), {}
            return
        self.isas, self.left_out = runnable(self.info["isas"])
        if not self.isas:
            self.close(force=True)
            raise abi.PortError(f"port {self.port_path} advertises no ISA path this machine can "
                                f"execute ({_left_out(self.left_out)})")
        if self.left_out:
            _tell(f"crnn-conformance: left out the ISA path(s) the port advertises that this "
                  f"machine cannot execute: {_left_out(self.left_out)}")

    def _start(self) -> dict:
        self.shared.fault[0] = self.shared.fault[1] = 0
        self.shared.progress[0] = -1
        self.conn, child = self.ctx.Pipe()
        self.shared.gate_pipes = _pipes(keep=child.fileno())
        os.ftruncate(self.shared.out_fd, 0)
        self.proc = self.ctx.Process(target=_worker, args=(child, self.port_path, self.layers,
                                                           self.helper_path, self.shared,
                                                           self.cases, self.check_fpenv),
                                 daemon=True)
        reaper.start(self.proc)             # (Linux: this process a subreaper first)
        try:
            os.setpgid(self.proc.pid, self.proc.pid)   # (the worker sets it too: either may be first)
        except OSError:
            pass
        child.close()
        if not self.conn.poll(self.timeout):
            self.close(force=True)
            raise abi.PortError(f"port {self.port_path} did not load within {self.timeout:.0f} s")
        try:
            kind, payload = self._recv("load")
        except EOFError:
            code = self._reap()
            raise abi.PortError(f"port {self.port_path} crashed while loading ({_describe(code)}"
                                f"{self._fault(code)})") from None
        except ChannelError as e:
            self.close(force=True)
            raise abi.PortError(f"port {self.port_path} wrote into the gate's channel with the "
                                f"worker while loading: {e}") from None
        finally:
            self.last_output = self.shared.output()
        if kind == "porterror":
            self.close()
            raise abi.PortError(payload)
        return payload

    def submit(self, layer: str, fixture_path, case_name: str, runs: list, case=None,
               symbolic=None) -> None:
        """Queues one case's runs on every (isa, threads) of `runs` as one request; the worker
        answers each run as it ends, and run(), collect() or receive() take the answers.
        `case`: an in-memory case sent with the request (the fuzzer's), run as if
        fixture_path held it alone (a restarted worker inherits it); the batches before it
        are collected first, and so is the oldest when MAX_QUEUED wait. A batch's answers
        are kept until drop(). `symbolic`: the case's calls recorded elsewhere
        (replay.Tape.symbolic, the fuzzer's reference run): the worker then makes every run
        from it in C, and the first run's answer is its written buffers as one array
        (replay.BLOB) instead of the layer's tensors (worker._serve_symbolic)."""
        if case is not None or len(self._queue) >= MAX_QUEUED:
            self.collect(None if case is not None else self._queue[0][0])
        key = (layer, str(fixture_path), case_name)
        if case is not None:
            self.cases[str(fixture_path)] = {case_name: case}
        if not self._alive() or self._suspect:
            self.collect()          # a dead worker's queue: what it answered, then its crash
            self._restart()
        try:
            self.conn.send(("batch", layer, str(fixture_path), case_name, list(runs), case,
                            symbolic, self.settle))
        except (BrokenPipeError, ConnectionResetError):
            return      # it died just now: collect() reads its crash, run() redoes these runs
        if not self._queue:
            self._since = time.monotonic()     # the worker was idle: the batch starts now
        self._batches[key] = {}
        self.after[key], self._sent = self._sent, key
        # [key, runs not answered, first answer, number of runs, the runs]
        self._queue.append([key, list(runs), None, len(runs), list(runs)])

    def submitted(self, layer: str, fixture_path, case_name: str) -> bool:
        return (layer, str(fixture_path), case_name) in self._batches

    def queued(self, key=None) -> int:
        """How many batches wait for answers or for their check after the last run (with
        `key`: 1 if that one does, else 0)."""
        return (sum(1 for q in self._queue if key is None or q[0] == key)
                + sum(1 for q in self._settling if key is None or q[0] == key))

    def running(self, key=None) -> int:
        """How many batches the worker has yet to run to their end (with `key`: 1 if that
        one, else 0)."""
        return len(self._queue) if key is None else sum(1 for q in self._queue if q[0] == key)

    def deadline(self) -> float | None:
        """When the run being waited for counts as hung (time.monotonic; None: never): the
        timeout after its start, which the worker records, or after the last answer or the
        batch's start, whichever is later."""
        if self.timeout is None or not (self._queue or self._settling):
            return None
        since = self._since
        if self.shared.progress[0] >= 0:
            since = max(since, self.shared.progress[1])
        return since + self.timeout

    def collect(self, key=None) -> None:
        """Takes answers until the batch `key` (None: every queued batch) is complete."""
        while self.queued(key):
            self.receive(self.timeout)

    def receive(self, wait: float | None) -> None:
        """Reads the worker's next answer to the oldest queued batch, waiting up to `wait`
        seconds (one message may answer several held-back runs, see worker._serve_batch). A
        run counts as hung when it has not ended within the timeout of its start (deadline()):
        it is then kept as that run's PortCrash, with the message a single run gets, and so
        is a crash, the held-back runs before it kept as passed (_recover); the worker is
        then gone, and the batches still queued are dropped (run() redoes each of their runs
        alone on a new worker)."""
        entry = self._queue[0] if self._queue else None
        key, runs = entry[:2] if entry else (None, [])
        deadline = self.deadline()
        waits = [x for x in (wait, deadline and deadline - time.monotonic()) if x is not None]
        if not self.conn.poll(max(0.0, min(waits)) if waits else None):
            if self.deadline() is None or time.monotonic() < self.deadline():
                return                          # the caller's wait is over, not the run's
            message = self._hang(key)
            self._recover(entry)
            self._lost(key, runs[0] if runs else None, message)
            return
        try:
            msg = _fitting(self._recv("batch"), entry, bool(self._settling))
        except (EOFError, ConnectionResetError, ChannelError) as e:
            garbled = isinstance(e, ChannelError)
            message = self._garbled(e) if garbled else self._crash()
            if not garbled or entry is None:    # (after garbage, the answers still unread
                self._recover(entry)            # may differ: no held run is taken as passed)
            self._lost(key, runs[0] if runs else None, message)
            return
        if msg[0] == "late":                    # a batch's check after its last run
            self._settled(*msg[1:])
            return
        self._since = time.monotonic()
        if msg[0] in ("same", "done"):          # runs held back: the first's outputs, no output
            for seconds in msg[1] or ():
                self._batches[key][runs.pop(0)] = (entry[2], "", seconds)
            if msg[0] == "done":
                self._queue.popleft()
                self._latest = key
                if self.settle is not None:
                    self._settling.append([key, entry[4]])
            return
        _, answer, text, seconds = msg
        if answer[0] == "same":                 # the first run's outputs, byte for byte
            answer = entry[2]
        elif entry[2] is None:
            entry[2] = answer
        self._batches[key][runs.pop(0)] = (answer, text, seconds)

    def _settled(self, run: int, problem: str | None) -> None:
        """The verdict on the oldest settling batch: what changed in its run `run` (an index
        of its runs) after the run's calls returned, or None. A change fails that run: its
        answer becomes a "late" error carrying its outputs."""
        key, runs = self._settling.popleft()
        got = self._batches.get(key, {}).get(runs[run])
        if problem and got is not None and got[0][0] == "ok":
            self._batches[key][runs[run]] = (("late", (problem, got[0][1])), *got[1:])

    def _recover(self, entry) -> None:
        """After a crash or a hang: the runs before the one in progress that the worker held
        back (they passed, with the first run's outputs and no port output; their seconds are
        in shared.progress). Only once the batch's first answer came: the worker is then in
        this batch, so the run it names is this batch's. With no batch in progress, the crash
        or hang came after the last run of the oldest settling batch: it fails that run."""
        if entry is None:
            if self._settling:
                self._settled(-1, f"after the case's last call returned, {self._lost_why}")
            return
        key, runs, first, total = entry[:4]
        at = int(self.shared.progress[0])
        if first is None or at < 0:
            return
        for j in range(total - len(runs), min(at, total)):
            self._batches[key][runs.pop(0)] = (first, "", self.shared.progress[2 + j])

    def _lost(self, key, run, message: str) -> None:
        """The worker hung or died during `run` of batch `key`: the run keeps the crash."""
        if run is not None:
            self._batches[key][run] = (("crash", message), self.shared.output(), 0.0)
        for q in list(self._queue)[1:]:
            self._batches.pop(q[0], None)
        self._queue.clear()
        self._settling.clear()      # (their checks died with the worker: not made)
        self._latest = key if key is not None else self._latest

    def _hang(self, key=None) -> str:
        where = self._where()
        if key is not None and where:
            self.hangs.append((key, where[len(" in "):]))
        self._reap()
        self.proc = None
        self._lost_why = f"the worker did not answer within {self.timeout:g} s (--timeout)"
        return f"hang: no answer{where} within {self.timeout:g} s (--timeout); worker killed"

    def _crash(self) -> str:
        code = self._reap()
        where = self._where()
        self.proc = None
        full = f"; {full_output()}" if self.shared.full() else ""
        self._lost_why = (f"the port crashed: {_describe(code)}{self._fault(code)} (a thread "
                          f"of the port still running?){full}")
        return f"the port crashed{where}: {_describe(code)}{self._fault(code)}{full}"

    def _garbled(self, error: ChannelError) -> str:
        """Something not the worker's came on its channel: the port wrote into it. Its
        framing is lost, so the worker is killed (and restarted for the rest)."""
        now = bytes(self.shared.current.value).decode(errors="replace")
        last = bytes(self.shared.last.value).decode(errors="replace")
        when = (f" (found while the worker was in {now})" if now else
                f" (found after {last} returned)" if last else "")
        self._reap()
        self.proc = None
        self._lost_why = "the port wrote into the gate's channel with the worker"
        return (f"the port wrote into the gate's channel with the worker{when}: {error}; "
                "worker killed")

    def drop(self, layer: str, fixture_path, case_name: str) -> None:
        """Forgets a batch's answers that no run() took (e.g. a case whose base run failed)."""
        key = (layer, str(fixture_path), case_name)
        self.collect(key)
        self._batches.pop(key, None)
        self.after.pop(key, None)

    def prefetch(self, layer: str, fixture_path, case_name: str, runs: list, case=None,
                 meanwhile=None, symbolic=None) -> None:
        """submit() and collect(), calling `meanwhile()` while the worker runs (the fuzzer
        computes the spec's bits then; the answers are read even if it raises). The
        answers of earlier prefetches are dropped."""
        self.collect()
        self._batches.clear()
        self.after.clear()
        self._sent = None       # (the fuzzer's: its failures name no case before)
        self.submit(layer, fixture_path, case_name, runs, case, symbolic)
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
        self.collect(key)
        hit = self._batches.get(key, {}).pop((isa, threads), None)
        if hit is not None:
            (kind, payload), self.last_output, self.last_seconds = hit
            return self._reply(kind, payload)
        self.collect()                        # the pipe must be clear for a single request
        if not self._alive() or self._suspect:
            self._restart()
        t0 = time.perf_counter()
        self._single = key
        self.conn.send((layer, str(fixture_path), case_name, isa, threads))
        try:
            return self._answer()
        finally:
            self.last_output = self.shared.output()
            self.last_seconds = time.perf_counter() - t0

    def contract(self, calls: list, base_isa: str) -> list:
        """The answers of the contract tier's calls (harness/contract.py), one per call, made
        in the worker in order. A call that crashes or hangs the worker is answered ("crash",
        message), and the calls after it go to a new worker."""
        self.collect()
        answers: list = []
        while len(answers) < len(calls):
            if not self._alive() or self._suspect:
                self._restart()
            rest = calls[len(answers):]
            self.conn.send(("contract", rest, base_isa))
            for _ in rest:
                if not self.conn.poll(self.timeout):
                    answers.append(("crash", self._hang()))
                    break
                try:
                    answers.append(self._recv("contract"))
                    self._suspect |= answers[-1][0] == "exception"
                except (EOFError, ConnectionResetError):
                    answers.append(("crash", self._crash()))
                    break
                except ChannelError as e:
                    answers.append(("crash", self._garbled(e)))
                    break
        self.last_output = self.shared.output()
        return answers

    def _answer(self) -> dict:
        if not self.conn.poll(self.timeout):
            raise PortCrash(self._hang(self._single))
        try:
            kind, payload = self._recv("single")
        except (EOFError, ConnectionResetError):
            raise PortCrash(self._crash()) from None
        except ChannelError as e:
            raise PortCrash(self._garbled(e)) from None
        return self._reply(kind, payload)

    def _recv(self, reading: str):
        """The worker's next message, bounded in length and time (channel.receive), checked
        as one of those it sends where the gate is `reading` (channel.KINDS)."""
        return channel.check(channel.receive(self.conn, self.timeout), reading)

    def _reply(self, kind, payload) -> dict:
        if kind == "ok":
            return payload
        if kind == "callerror":
            e = abi.PortCallError(payload[0], payload[1])
            e.partial = payload[2]
            raise e
        if kind == "late":             # the run passed, then something wrote into it
            e = abi.PortCallError(payload[0])
            e.partial = payload[1]
            raise e
        if kind == "fpenv":
            raise abi.PortError(payload)
        if kind == "crash":
            raise PortCrash(payload)
        # "exception": the worker's own code raised while it ran the case. A port that wrote
        # outside its buffers, into the worker's memory, makes it do that: the run fails and
        # the worker, its memory in doubt, is replaced before the next request.
        self._suspect = True
        raise PortCrash(worker_raised(payload, "while it ran the case"))

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

    def _alive(self) -> bool:
        """Whether the worker runs (not collecting it if it ended: _reap does)."""
        return self.proc is not None and _exited(self.proc) is False

    def _restart(self) -> None:
        """A new worker, what is left of the old one's process group killed first."""
        if self.proc is not None:
            self._reap()
            self.proc = None
        self._suspect = False
        self._sent = None
        self._start()

    def _reap(self) -> int | None:
        """Kills the worker's process group (the worker, if it still runs, and every process
        the port started in it) and collects the worker's exit status; on Linux then also the
        port's processes that left the group (harness/sandbox/reaper.py). The group is killed
        before the worker is collected: until then its number names no other group. (Not
        proc.join: a process the port started keeps the worker's sentinel open.)"""
        if self.proc is None:
            return None
        _kill_group(self.proc.pid)
        if self.proc.is_alive():
            self.proc.kill()
        _gone(self.proc, 5.0)
        reaper.collected(self.proc.pid)     # what left the group (Linux: killed too)
        return self.proc.exitcode

    def close(self, force: bool = False) -> None:
        """Ends the worker: asks it to exit (force: kills it at once, e.g. on a signal), then
        kills what is left of its process group (_reap)."""
        if self.proc is not None and self.proc.pid is not None:
            if not force and _exited(self.proc) is False:
                try:
                    self.conn.send(None)
                except (BrokenPipeError, OSError):
                    pass
                reaper.poll(lambda: _exited(self.proc) is not False, 5.0)
            self._reap()
        self.proc = None
        self.shared.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close(force=exc[0] is not None)


def probe(port_path, layers=(), timeout: float | None = 120.0) -> dict:
    """Loads the port in a worker, as the gate does, and ends it: {"isas": the paths (a
    Python port's configs) the port advertises, "abi_version", "fpenv", "symbols", "threads",
    "load_output"}. A port that crashes, exits or hangs (`timeout` seconds) while loading is
    abi.PortError (one line), not the end of the caller (`info --port`, `bench --port`). The
    floating-point environment the port's initialisation leaves is reported in "fpenv", not
    refused (the gate refuses it)."""
    with Executor(port_path, list(layers), timeout=timeout, every_isa=True,
                  check_fpenv=False) as ex:
        return {**ex.info, "load_output": ex.load_output}


def worker_raised(trace: str, when: str) -> str:
    """The failure of a run (or contract call) in which the worker's own code raised: the
    exception's line of `trace`, and why a port can cause it."""
    last = (str(trace).strip().splitlines() or ["an exception"])[-1]
    return (f"the worker raised {last[:300]} {when}; a write by the port outside its buffers, "
            "into the worker's memory, does that (with a port that writes none, it is a "
            "harness error: please report it)")


def _kill_group(pid: int) -> None:
    """SIGKILL to the process group the worker `pid` leads (none: nothing)."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (OSError, AttributeError):
        pass


def _exited(proc) -> bool | None:
    """Whether the worker ended, without collecting it (None: already collected). Where
    waitid is missing it is collected."""
    if proc._popen is None or proc._popen.returncode is not None:
        return None
    if hasattr(os, "waitid"):
        try:
            return os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
        except ChildProcessError:
            return None
    return not proc.is_alive()


def _gone(proc, seconds: float) -> None:
    """Collects the (killed) worker, waiting up to `seconds`."""
    reaper.poll(lambda: not proc.is_alive(), seconds)


def _pipes(keep: int) -> list[int]:
    """The gate's pipes and sockets (fds above 2) but `keep`: its ends of every worker's
    channel, the allowance pool's queues, the resource tracker's pipe. A new worker points its
    copies at /dev/null (worker._isolate), so a port can write into none of them."""
    try:
        fds = [int(f) for f in os.listdir("/proc/self/fd")]
    except OSError:
        fds = range(3, 1024)
    found = []
    for fd in fds:
        try:
            mode = os.fstat(fd).st_mode
        except OSError:
            continue
        if fd > 2 and fd != keep and (stat.S_ISSOCK(mode) or stat.S_ISFIFO(mode)):
            found.append(fd)
    return found


def _fitting(msg, entry, settling: bool):
    """A batch's message that fits the batch in progress (`entry`, None: none; `settling`:
    a batch awaits its check), or ChannelError: a message forged well enough to be decoded
    must not stop the gate."""
    kind, runs = msg[0], entry[1] if entry else []
    held = msg[1] if kind in ("same", "done") else ()
    if (not settling if kind == "late" else entry is None or (kind == "run" and not runs)) \
            or not isinstance(held, (list, tuple)) or len(held) > len(runs):
        raise ChannelError(f"a {kind!r} message that fits no run in progress")
    return msg


_TOLD: set = set()


def runnable(names, machine: str | None = None, flags=None) -> tuple[list, dict]:
    """(the advertised paths `names` this machine can execute, {left-out path: why}). A name
    that is no ISA path (a Python port's config) is kept. `machine` (platform.machine()) and
    `flags` (the CPU's, /proc/cpuinfo; empty: unknown, the port's word is taken) are this
    machine's unless given."""
    from ..provenance import cpu_info
    machine = (machine or platform.machine()).lower()
    flags = set(cpu_info()["flags"] if flags is None else flags)
    arch, paths = abi.architecture(machine) or (machine or "unknown", {"scalar": ()})
    kept, left = [], {}
    for name in names:
        if name not in abi.ISA_NAMES or (name in paths and (not flags or
                                                            flags.issuperset(paths[name]))):
            kept.append(name)
        elif name not in paths:
            home = next(a for a, (_, isas) in abi.ARCHITECTURES.items() if name in isas)
            left[name] = f"an {home} path; this machine is {arch}"
        else:
            left[name] = f"this CPU has no {', '.join(f for f in paths[name] if f not in flags)}"
    return kept, left


def _left_out(left: dict) -> str:
    return ", ".join(f"{name} ({why})" for name, why in left.items())


def _tell(line: str) -> None:
    """One line on stderr, once per process (every worker of a gate finds the same)."""
    if line not in _TOLD:
        _TOLD.add(line)
        print(line, file=sys.stderr, flush=True)


def _describe(code) -> str:
    if code is None:
        return "exit status unknown"
    if code < 0:
        try:
            return f"killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with status {code}"
