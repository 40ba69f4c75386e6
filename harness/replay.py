"""The repeat runs of a batch in C: the first run of a case is recorded as a tape, the others
replay it (harness/replay.c has the why and the rules).

In the worker, a case runs on every ISA path x thread count. The first run goes through the
layer's Python module with every call checked and is recorded (Tape, through guard.Arena's
`tape`): each port call with its arguments and the buffers it touched, each copy the module
made between buffers (_ffi.assign), and each output or in/out buffer's content when the run
first used it. `Tape.compile` turns that into the C structure, and `replay` plays it for the
next runs on the same buffers, with the Python path's checks around every call. It returns
how many runs passed with the first run's bits; the worker redoes the one that stopped the
replay (and the rest) in Python, so any failure is reported exactly as before.

A tape is refused (the runs then all go through Python) when a call passes a pointer outside
the run's guarded buffers (a temporary the replay could not trust to be alive and unchanged),
calls an entry point the replay does not know, or the helper lacks crnn_h_replay.
"""
from __future__ import annotations

import ctypes as C
from pathlib import Path

import numpy as np

from crnn_conformance.ctypes_kernels import abi

SOURCE = Path(__file__).with_name("replay.c")
# in replay.c's enum order
ENTRIES = ("crnn_dot16", "crnn_linear_forward", "crnn_linear_backward", "crnn_conv_forward",
           "crnn_conv_backward", "crnn_lstm_forward", "crnn_lstm_backward", "crnn_sigmoid",
           "crnn_tanh", "crnn_detmath_exp", "crnn_detmath_log", "crnn_ctc", "crnn_model_sizes",
           "crnn_step_gradients", "crnn_clip_gradients", "crnn_adamw")
STOPS = ("none", "setup", "fpenv", "rc", "guard", "finish", "printed", "differs")
N_ARGS, N_DBL = 18, 8
_ENTRY = {name: i for i, name in enumerate(ENTRIES)}


def source() -> str:
    """What the harness helper appends to its own source: the ABI's prototypes, then the
    replay (replay.c casts the recorded addresses to them)."""
    header = Path(abi.__file__).with_name("crnn_port.h").read_text()
    return header + "\n" + SOURCE.read_text()


class _Op(C.Structure):
    _fields_ = [("kind", C.c_int64), ("entry", C.c_int64), ("fn", C.c_void_p),
                ("name", C.c_void_p), ("table", C.c_void_p), ("restore", C.c_int64 * 2),
                ("snap", C.c_int64 * 2), ("check", C.c_int64 * 2),
                ("a", C.c_uint64 * N_ARGS), ("d", C.c_double * N_DBL)]


class _Tape(C.Structure):
    _fields_ = [("ops", C.c_void_p), ("n_ops", C.c_int64), ("restore", C.c_void_p),
                ("snap", C.c_void_p), ("check", C.c_void_p), ("finish", C.c_void_p),
                ("n_finish", C.c_int64), ("compare", C.c_void_p), ("n_compare", C.c_int64),
                ("set_isa", C.c_void_p), ("set_threads", C.c_void_p), ("pattern", C.c_void_p),
                ("out_fd", C.c_int64), ("progress", C.c_void_p), ("current", C.c_void_p),
                ("shared_table", C.c_void_p)]


def declare(helper) -> None:
    """Sets crnn_h_replay's signature on a loaded helper (when it has one)."""
    fn = getattr(helper, "crnn_h_replay", None)
    if fn is not None:
        fn.restype = C.c_int64
        fn.argtypes = [C.c_void_p, C.c_int64, C.c_int64, C.c_void_p, C.c_void_p, C.c_void_p,
                       C.c_void_p]


class Tape:
    """What the first run of a batch did, as it did it (recorded by worker._TracedFn and
    _ffi.assign while the arena's `tape` is this)."""

    def __init__(self):
        self.ops = []            # (kind, entry, fn address, name, args, restore, snap, check, table)
        self.seen = set()        # ids of the buffers already used (restored before that op)
        self.keep = []           # arrays whose addresses the records hold
        self.usable = True
        self.why = ""

    def refuse(self, why: str) -> None:
        if self.usable:
            self.usable, self.why = False, why

    def _first_use(self, buffers) -> list:
        """Restore records of the output and in/out buffers not used before: their content
        now, which every replayed run puts back before this op."""
        out = []
        for b in buffers:
            if id(b) in self.seen:
                continue
            self.seen.add(id(b))
            if b.kind != "input":
                snap = b.bytes.copy()
                self.keep.append(snap)
                out.append((b.lo, snap.ctypes.data, b.nbytes))
        return out

    def call(self, arena, name: str, fn_addr: int, args, touched, table: bytes) -> None:
        """Before the call `name` runs (touched: guard.Arena.before's list)."""
        if not self.usable:
            return
        if name not in _ENTRY:
            return self.refuse(f"{name} is not replayed")
        ints, dbls, buffers = [], [], []
        for i, (arg, kind) in enumerate(zip(args, abi.SIGNATURES[name][1])):
            if kind is C.c_double:
                dbls.append(float(arg))
                continue
            if kind is C.c_void_p:
                addr = int(arg) if arg else 0
                b = arena.find(addr) if addr else None
                if addr and b is None:
                    return self.refuse(f"{name} got a pointer outside the run's buffers")
                if b is not None:
                    buffers.append(b)
                ints.append(addr)
            else:
                ints.append(int(arg))
        if len(ints) > N_ARGS or len(dbls) > N_DBL:
            return self.refuse(f"{name} has more arguments than the replay holds")
        snaps, checks = [], []
        for b, _, written, snap in touched:
            ref = 0
            if not written and b.kind == "input":
                ref = b._original_addr
            elif not written:                     # an earlier output passed back const
                scratch = np.empty(b.nbytes, np.uint8)
                self.keep.append(scratch)
                snaps.append((scratch.ctypes.data, b.lo, b.nbytes))
                ref = scratch.ctypes.data
            checks.append((*b.span, ref))
        self.ops.append((0, _ENTRY[name], fn_addr, name, ints, dbls,
                         self._first_use(buffers), snaps, checks, table))

    def copy(self, arena, dst: np.ndarray, src: np.ndarray) -> None:
        """Before `dst[...] = src` between two buffers of the run (_ffi.assign)."""
        if not self.usable:
            return
        bd, bs = arena.find(arena.address(dst)), arena.find(arena.address(src))
        if (bd is None or bs is None or not dst.flags.c_contiguous or not src.flags.c_contiguous
                or dst.nbytes != src.nbytes or dst.dtype != src.dtype):
            return self.refuse("a copy outside the run's buffers")
        ints = [arena.address(dst), arena.address(src), dst.nbytes]
        self.ops.append((1, 0, 0, "", ints, [], self._first_use([bd, bs]), [], [], b""))

    def compile(self, arena, lib, shared, pattern_addr: int) -> _Compiled | None:
        """After the first run ended (the buffers hold its outputs): the C tape, or None when
        the run cannot be replayed."""
        if not self.usable or not self.ops:
            return None
        return _Compiled(self, arena, lib, shared, pattern_addr)


def _records(rows, width: int, keep: list) -> int:
    """rows of `width` integers as one uint64 array (kept alive in `keep`) -> its address."""
    a = np.array(rows, np.uint64).reshape(-1, width) if rows else np.zeros((1, width), np.uint64)
    keep.append(a)
    return a.ctypes.data


class _Compiled:
    def __init__(self, tape: Tape, arena, lib, shared, pattern_addr: int):
        keep = self.keep = list(tape.keep)
        ops = (_Op * len(tape.ops))()
        restore, snap, check, strings = [], [], [], {}

        def cstr(s: bytes) -> int:
            if s not in strings:
                strings[s] = C.create_string_buffer(s)
            return C.addressof(strings[s])
        for op, (kind, entry, fn, name, ints, dbls, rs, ss, cs, table) in zip(ops, tape.ops):
            op.kind, op.entry, op.fn = kind, entry, fn
            op.name, op.table = cstr(name.encode()[:127]), cstr(table)
            for field, rows, into in (("restore", rs, restore), ("snap", ss, snap),
                                      ("check", cs, check)):
                getattr(op, field)[0], getattr(op, field)[1] = len(into), len(rows)
                into.extend(rows)
            for i, v in enumerate(ints):
                op.a[i] = v & 0xFFFFFFFFFFFFFFFF
            for i, v in enumerate(dbls):
                op.d[i] = v
        seen = {id(b) for b in arena.buffers if id(b) in tape.seen}
        finish = [(*b.span, b._original_addr if b.kind == "input" else 0) for b in arena.buffers]
        compare = []
        for b in arena.buffers:
            if id(b) in seen and b.kind != "input":
                first = b.bytes.copy()
                keep.append(first)
                compare.append((b.lo, first.ctypes.data, b.nbytes))
        self.strings, self.ops = strings, ops
        self.buffers = list(arena.buffers)
        t = self.tape = _Tape()
        t.ops, t.n_ops = C.addressof(ops), len(tape.ops)
        t.restore, t.snap = _records(restore, 3, keep), _records(snap, 3, keep)
        t.check = _records(check, 5, keep)
        t.finish, t.n_finish = _records(finish, 5, keep), len(finish)
        t.compare, t.n_compare = _records(compare, 3, keep), len(compare)
        t.set_isa = C.cast(lib.crnn_set_isa, C.c_void_p).value
        t.set_threads = C.cast(lib.crnn_set_threads, C.c_void_p).value
        t.pattern, t.out_fd = pattern_addr, shared.out_fd
        t.progress, t.current = C.addressof(shared.progress), C.addressof(shared.current)
        t.shared_table = C.addressof(shared.table)

    def run(self, helper, first: int, runs: list) -> tuple[int, str, int]:
        """Replays runs[first:] (isa name, threads) -> (how many passed, why the next one
        stopped ("none": all passed), the op it stopped at or -1)."""
        isa = (C.c_int32 * len(runs))(*[abi.ISA_NAMES.index(i) for i, _ in runs])
        threads = (C.c_int32 * len(runs))(*[int(t) for _, t in runs])
        stop, stop_op = C.c_int32(0), C.c_int64(-1)
        done = helper.crnn_h_replay(C.addressof(self.tape), first, len(runs) - first, isa,
                                    threads, C.byref(stop), C.byref(stop_op))
        if stop.value:                       # the zones may be damaged: rewritten on reuse
            for b in self.buffers:
                b.intact = False
        return int(done), STOPS[stop.value], int(stop_op.value)
