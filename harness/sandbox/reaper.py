"""The port's processes that left its worker's process group (setsid(), setpgid()): the kill of
the group (executor._reap) misses them. On Linux the process that starts workers is a child
subreaper (PR_SET_CHILD_SUBREAPER) while it has workers: such a process, once its parent
ends, becomes a child of this process instead of init's, and is killed (SIGKILL, with the
group it leads) and collected here after a worker's end. Off Linux, or where prctl fails,
nothing here does anything; and nothing here stops the gate (errors are swallowed).

Executor hooks: start(proc) in place of proc.start(), collected(pid) once the worker's group
was killed and the worker collected.

Which children are the port's. A child of this process is killed when all of these hold:
  - it is no worker of this process that its executor has yet to collect (start() records
    each, collected() forgets it);
  - it was not a child of this process when this process became a subreaper (the caller's
    own children: a program or a test that runs the gate through the Python API); a pid is
    compared together with its start time, so a reused number is not taken for it;
  - it is not in this process's own process group. Every process the gate starts other than
    its workers (the allowance pool, multiprocessing's resource tracker, the compiler) stays
    in that group, and so do a caller's unless started in a session of their own; a port's
    process that outlived the kill of its worker's group left that group (or is still in
    it, dying: its zombie is collected here).
After a worker's end only those started since that worker started are killed (none of the
others can be its; another worker, still running, may need them); after the last worker's
end every one is, and this process stops being a subreaper (unless it was one before, or
one is still left, to be killed the next time the last worker ends).
Not found: a process of the port's that joined the gate's own process group. Taken for the
port's: a process a caller starts in a session of its own while a gate runs in its process.
"""
from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
import time

PR_SET_CHILD_SUBREAPER, PR_GET_CHILD_SUBREAPER = 36, 37
WAIT = 2.0       # seconds a sweep waits for the dying group and the killed processes to end

_LOCK = threading.Lock()
_workers: dict[int, int] = {}  # the workers not yet collected: pid -> start time (clock ticks)
_before: set = set()           # (pid, start time) of its children when it became a subreaper
_armed = False                 # a subreaper: the port's orphans come to it
_undo = False                  # it made itself one (and undoes that)


def _forget() -> None:
    """A fork's child starts afresh: no subreaper (the flag is not inherited), no workers of
    its own, a lock nobody holds."""
    global _LOCK, _workers, _before, _armed, _undo
    _LOCK, _workers, _before, _armed, _undo = threading.Lock(), {}, set(), False, False


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget)


def start(proc) -> None:
    """proc.start() for a worker: this process a subreaper first, the worker recorded under
    the lock a sweep takes (so no sweep meets it unrecorded)."""
    with _LOCK:
        if not _armed:
            _quietly(_arm)
        try:
            proc.start()
        except BaseException:
            if not _workers and _armed:
                _quietly(_disarm)
            raise
        _workers[proc.pid] = (_stat(proc.pid) or (0, 0, 0))[2]


def collected(pid: int) -> None:
    """The worker `pid` was killed with its group and collected: the port's processes that
    came back to this process are killed and collected (see the module's docstring)."""
    with _LOCK:
        if pid not in _workers:
            return                      # (not a worker, or its end already handled)
        since = _workers.pop(pid)
        if _armed:
            _quietly(_finish, pid, since)


def _finish(group: int, since: int) -> None:
    clean = _sweep(group, since if _workers else None)
    if clean and not _workers:
        _disarm()


def _quietly(fn, *args) -> None:
    try:
        fn(*args)
    except Exception:   # noqa: BLE001  (the clean-up must never stop the gate)
        pass


def _prctl(option: int, value: int = 0, out: ctypes.c_int | None = None) -> int:
    """prctl(option, value or &out, 0, 0, 0), every argument given its C width."""
    arg = ctypes.byref(out) if out is not None else ctypes.c_ulong(value)
    zero = ctypes.c_ulong(0)
    return ctypes.CDLL(None).prctl(ctypes.c_int(option), arg, zero, zero, zero)


def _arm() -> None:
    """Becomes a subreaper (Linux), the children it has now noted first."""
    global _armed, _undo, _before
    if not sys.platform.startswith("linux"):
        return
    before = {(p, s[2]) for p in children() if (s := _stat(p)) is not None}
    was = ctypes.c_int(0)
    if _prctl(PR_GET_CHILD_SUBREAPER, out=was) != 0:
        return
    _undo = not was.value and _prctl(PR_SET_CHILD_SUBREAPER, 1) == 0
    _armed, _before = bool(was.value) or _undo, before


def _disarm() -> None:
    """Stops being a subreaper, if it made itself one; the next worker notes the children
    again."""
    global _armed, _undo, _before
    if _undo:
        _prctl(PR_SET_CHILD_SUBREAPER, 0)
    _armed = _undo = False
    _before = set()


def _sweep(group: int, since: int | None) -> bool:
    """Kills and collects the port's processes among this process's children (started at
    `since` or later; None: any), round after round, until none is left and the worker's
    process group `group` (killed) has no process left, or WAIT seconds have passed: a process
    that dies leaves its own children to this process, found in the next round. -> whether
    all were found ended."""
    deadline = time.monotonic() + WAIT

    def round_ends() -> bool:
        found = _theirs(since)
        for pid in found:
            _kill(pid)
        for pid in found:
            _collect(pid, deadline)
        return not found and not _exists(group)

    return poll(round_ends, WAIT)


def _theirs(since: int | None) -> list[int]:
    """This process's children that are the port's (the rule in the module's docstring)."""
    ours = os.getpgrp()
    found = []
    for pid in children():
        s = _stat(pid)
        if (s is None or pid in _workers or s[1] == ours or (pid, s[2]) in _before
                or (since is not None and s[2] < since)):
            continue
        found.append(pid)
    return found


def children() -> list[int]:
    """This process's children (zombies too): each thread's /proc/self/task/T/children, or,
    where the kernel has no such files, every process whose parent it is."""
    pids, listed = [], False
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/children") as f:
                pids += [int(p) for p in f.read().split()]
            listed = True
        except (OSError, ValueError):
            continue
    if listed:
        return pids
    me = os.getpid()
    return [int(p) for p in os.listdir("/proc")
            if p.isdigit() and (_stat(int(p)) or (0,))[0] == me]


def _stat(pid: int) -> tuple[int, int, int] | None:
    """(parent pid, process group, start time in clock ticks since boot) of `pid`, or None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
        fields = data[data.rindex(b")") + 2:].split()
        return int(fields[1]), int(fields[2]), int(fields[19])
    except (OSError, ValueError, IndexError):
        return None


def _kill(pid: int) -> None:
    """SIGKILL to `pid` and to the group it leads, if it made one (setsid, setpgid(0, 0)): a
    group's number is its maker's pid, never reused while the group lives."""
    for target in (-pid, pid):
        try:
            os.kill(target, signal.SIGKILL)
        except OSError:
            pass


def _collect(pid: int, deadline: float) -> None:
    """Collects the killed child `pid`, waiting until `deadline` (time.monotonic) at most."""
    def reaped() -> bool:
        try:
            return os.waitpid(pid, os.WNOHANG)[0] != 0
        except ChildProcessError:
            return True

    poll(reaped, deadline - time.monotonic())


def _exists(group: int) -> bool:
    """Whether a process (a zombie too) is left in the process group `group`."""
    try:
        os.killpg(group, 0)
    except OSError:          # ESRCH: none; EPERM: none this process could end anyway
        return False
    return True


def poll(done, seconds: float) -> bool:
    """Calls done() until it is true or `seconds` have passed, pausing between calls at
    growing intervals (1 ms to 50 ms). -> done()'s last answer."""
    deadline = time.monotonic() + seconds
    pause = 0.001
    while not done():
        if time.monotonic() >= deadline:
            return False
        time.sleep(pause)
        pause = min(pause * 2, 0.05)
    return True
