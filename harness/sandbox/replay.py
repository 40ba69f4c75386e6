"""The repeat runs of a batch in C: the first run of a case is recorded as a tape, the others
replay it (harness/sandbox/replay.c has the why and the rules).

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

from ...ctypes_kernels import abi, layer_table
from . import guard

SOURCE = Path(__file__).with_name("replay.c")
# every entry point but the control functions, in the table's order, which is replay.c's enum
# order (tests/test_layer_table.py holds the enum and the switch to the table)
ENTRIES = tuple(layer_table.kernel_entries())
STOPS = ("none", "setup", "fpenv", "rc", "guard", "finish", "printed", "differs")
BLOB = "<written buffers>"   # the answer of a run made from a symbolic tape (worker)
N_ARGS, N_DBL = 18, 8
_ENTRY = {name: i for i, name in enumerate(ENTRIES)}


def source() -> str:
    """What the harness helper appends to its own source: the ABI's prototypes, the entry
    points' enum and switch cases (entries_c), then the replay (replay.c casts the recorded
    addresses to the prototypes)."""
    header = Path(abi.__file__).with_name("crnn_port.h").read_text()
    return header + "\n" + entries_c() + "\n" + SOURCE.read_text()


def entries_c() -> str:
    """enum E_* (one per ENTRIES, E_ + the name without crnn_, upper case) and RP_CASES: the
    call of each through its prototype, an integer or pointer argument from op->a (P, I, L)
    and a double from op->d (D), in the order Tape.compile stores them."""
    cases = []
    for name in ENTRIES:
        slots, n_int, n_dbl = [], 0, 0
        for t in abi.SIGNATURES[name][1]:
            if t is C.c_double:
                slots.append(f"D({n_dbl})")
                n_dbl += 1
            else:
                slots.append(f"{'P' if t is C.c_void_p else 'L' if t is C.c_int64 else 'I'}"
                             f"({n_int})")
                n_int += 1
        cases.append(f"    case {enum_name(name)}: return CALL({name})({', '.join(slots)}); \\")
    return "\n".join(["enum {", *(f"    {enum_name(n)}," for n in ENTRIES), "    E_COUNT", "};",
                      "#define RP_CASES \\", *cases, ""])


def enum_name(entry: str) -> str:
    return "E_" + entry[len("crnn_"):].upper()


# rp_op and rp_tape of replay.c: every field 8 bytes, so no padding on any 64-bit ABI
# (crnn_h_replay_layout() returns their sizes; a helper that disagrees is not used)
OP = np.dtype([("kind", "<i8"), ("entry", "<i8"), ("fn", "<u8"), ("name", "<u8"),
               ("table", "<u8"), ("restore", "<i8", 2), ("snap", "<i8", 2), ("check", "<i8", 2),
               ("a", "<i8", N_ARGS), ("d", "<f8", N_DBL)])
TAPE_FIELDS = ("ops", "n_ops", "restore", "snap", "check", "finish", "n_finish", "compare",
               "n_compare", "set_isa", "set_threads", "pattern", "out_fd", "progress",
               "current", "shared_table")
_KINDS = {name: tuple("d" if t is C.c_double else "p" if t is C.c_void_p else "i"
                      for t in abi.SIGNATURES[name][1]) for name in ENTRIES}
_STRINGS = [C.create_string_buffer(s.encode()) for s in ("", *ENTRIES)]   # alive for good
_EMPTY = C.addressof(_STRINGS[0])
_NAMES = {name: C.addressof(b) for name, b in zip(ENTRIES, _STRINGS[1:])}


def declare(helper) -> bool:
    """Sets crnn_h_replay's signature on a loaded helper. -> False when it has none or its
    structures are not laid out as OP and TAPE_FIELDS say (the worker then replays nothing)."""
    fn, layout = (getattr(helper, n, None) for n in ("crnn_h_replay", "crnn_h_replay_layout"))
    if fn is None or layout is None:
        return False
    layout.restype, layout.argtypes = C.c_int64, []
    if layout() != OP.itemsize * 1000 + 8 * len(TAPE_FIELDS):
        return False
    fn.restype = C.c_int64
    fn.argtypes = [C.c_void_p, C.c_int64, C.c_int64, C.c_void_p, C.c_void_p, C.c_void_p,
                   C.c_void_p]
    helper.crnn_h_copy_records.restype = None
    helper.crnn_h_copy_records.argtypes = [C.c_void_p, C.c_int64]
    return True


class Tape:
    """What the first run of a batch did, as it did it (recorded by worker._TracedFn and
    _ffi.assign while the arena's `tape` is this). An op is

        (kind, name, args, dbls, restores, snaps, checks)

    kind 0 a call of entry point `name`, 1 a copy (args: dst, src, bytes); args the integer
    and pointer arguments in order, a pointer as (buffer, byte offset), NULL as 0; dbls the
    double arguments; restores [(buffer, its bytes)] for the buffers the op uses first;
    snaps [buffer]: earlier outputs passed back whole as const arguments; checks
    [(buffer, ref, label)], ref "w" (written), "in" (an input, against its original) or
    "snap" (against the copy made before the call). A buffer is its index in the arena
    (guard.Buffer.index), so a tape recorded in one process compiles for another process's
    arena holding buffers of the same shapes in the same order (symbolic, from_symbolic)."""

    def __init__(self):
        self.ops = []
        self.seen = set()        # the buffers used so far (restored before their first op)
        self.usable = True
        self.why = ""

    def refuse(self, why: str) -> None:
        if self.usable:
            self.usable, self.why = False, why

    def _first_use(self, buffers) -> list:
        """[(buffer, its bytes now)] of the output and in/out buffers not used before: every
        replayed run puts that content back before this op."""
        out = []
        for b in buffers:
            if b.index not in self.seen:
                self.seen.add(b.index)
                if b.kind != "input":
                    out.append((b.index, b.bytes.tobytes()))   # (bytes: cheap to pickle)
        return out

    def call(self, arena, name: str, args, touched) -> None:
        """Before the call `name` runs, right after arena.before() made `touched` (and
        arena.found, arena.outside)."""
        if not self.usable:
            return
        kinds = _KINDS.get(name)
        if kinds is None:
            return self.refuse(f"{name} is not replayed")
        if arena.outside:
            return self.refuse(f"{name} got a pointer outside the run's buffers")
        found, ints, dbls = iter(arena.found), [], []
        for a, k in zip(args, kinds):
            if k == "d":
                dbls.append(float(a))
            elif k == "i" or not a:
                ints.append(int(a) if a else 0)
            else:
                b = next(found)
                ints.append((b.index, int(a) - b.lo))
        checks = [(b.index, "w" if written else "in" if b.kind == "input" else "snap",
                   b.name or arg) for b, arg, written, _ in touched]
        snaps = [i for i, ref, _ in checks if ref == "snap"]
        self.ops.append((0, name, ints, dbls, self._first_use(arena.found), snaps, checks))

    def copy(self, arena, dst: np.ndarray, src: np.ndarray) -> None:
        """Before `dst[...] = src` between two buffers of the run (_ffi.assign)."""
        if not self.usable:
            return
        ad, as_ = arena.address(dst), arena.address(src)
        bd, bs = arena.find(ad), arena.find(as_)
        if (bd is None or bs is None or not dst.flags.c_contiguous or not src.flags.c_contiguous
                or dst.nbytes != src.nbytes or dst.dtype != src.dtype):
            return self.refuse("a copy outside the run's buffers")
        args = [(bd.index, ad - bd.lo), (bs.index, as_ - bs.lo), dst.nbytes]
        self.ops.append((1, "", args, [], self._first_use([bd, bs]), [], []))

    def written(self, buffers) -> list:
        """The buffers among `buffers` (an arena's, in its order) that the run used and may
        write: the ones a replay compares."""
        return [b for b in buffers if b.index in self.seen and b.kind != "input"]

    def compile(self, arena, lib, helper, shared, pattern_addr: int) -> _Compiled | None:
        """The C tape for this arena's buffers, or None when the run cannot be replayed."""
        if not self.usable or not self.ops:
            return None
        return _Compiled(self, arena, lib, helper, shared, pattern_addr)

    def symbolic(self, arena) -> dict | None:
        """What from_symbolic needs in another process (picklable): the ops and the arena's
        buffers' shapes, dtypes, kinds and names. None when the run cannot be replayed."""
        if not self.usable or not self.ops:
            return None
        return {"buffers": [(b.shape, b.dtype.str, b.kind, b.name) for b in arena.buffers],
                "seen": sorted(self.seen), "ops": self.ops}

    @classmethod
    def from_symbolic(cls, sym: dict, inputs, arena) -> Tape:
        """The tape of `sym` on new buffers of `arena`: the inputs private copies of
        `inputs` (by name), the others as their first use restores them."""
        for shape, dtype, kind, name in sym["buffers"]:
            if kind == "input":
                arena.private(name, inputs[name])
            else:
                arena.new(tuple(shape), np.dtype(dtype), kind, name)
        tape = cls()
        tape.seen, tape.ops = set(sym["seen"]), sym["ops"]
        return tape


def _records(rows, width: int, keep: list) -> int:
    """rows of `width` integers as one uint64 array (kept alive in `keep`) -> its address."""
    a = np.array(rows, np.uint64).reshape(-1, width) if rows else np.zeros((1, width), np.uint64)
    keep.append(a)
    return a.ctypes.data


def _ranges(groups: list) -> tuple[list, list]:
    """[first, count] of each op's records in their concatenation, and the concatenation."""
    ranges, rows = [], []
    for g in groups:
        ranges.append((len(rows), len(g)))
        rows += g
    return ranges, rows


_ADDRESSES: dict = {}        # id(lib) -> (lib, {entry point: address}), per process


def _entry_addresses(lib) -> dict:
    """{entry point: address} of lib, with crnn_set_isa and crnn_set_threads (looked up once
    a library)."""
    got = _ADDRESSES.get(id(lib))
    if got is None or got[0] is not lib:
        got = _ADDRESSES[id(lib)] = (lib, {
            n: C.cast(getattr(lib, n), C.c_void_p).value
            for n in (*ENTRIES, "crnn_set_isa", "crnn_set_threads") if abi.has(lib, n)})
    return got[1]


class _Compiled:
    """A tape in C's layout for one arena's buffers (rp_op, rp_tape of replay.c)."""

    def __init__(self, tape: Tape, arena, lib, helper, shared, pattern_addr: int):
        self.keep, self.helper, self.buffers = [], helper, list(arena.buffers)
        fns = _entry_addresses(lib)
        records = self._ops(tape, arena.buffers, fns)
        compare = self._compare(tape.written(arena.buffers))
        finish = [(*b.span, b._original_addr if b.kind == "input" else 0) for b in arena.buffers]
        fields = dict(
            ops=self.ops.ctypes.data, n_ops=len(self.ops), **records,
            finish=_records(finish, 5, self.keep), n_finish=len(finish),
            compare=_records(compare, 3, self.keep), n_compare=len(compare),
            set_isa=fns["crnn_set_isa"], set_threads=fns["crnn_set_threads"],
            pattern=pattern_addr, out_fd=shared.out_fd, progress=C.addressof(shared.progress),
            current=C.addressof(shared.current), shared_table=C.addressof(shared.table))
        self.tape = np.array([fields[f] for f in TAPE_FIELDS], np.uint64)

    def _ops(self, tape: Tape, bufs: list, fns: dict) -> dict:
        """self.ops, the tape's ops as rp_op records; -> the addresses of their restore, snap
        and check records."""
        ops = self.ops = np.zeros(len(tape.ops), OP)
        kind, name, ints, dbls, rs, ss, cs = zip(*tape.ops)
        ops["kind"] = kind
        ops["entry"] = [_ENTRY.get(n, 0) for n in name]
        ops["fn"] = [fns.get(n, 0) for n in name]
        ops["name"] = [_NAMES[n] if n else 0 for n in name]
        tables = [guard.page_table((bufs[i], label) for i, _, label in c) for c in cs]
        self.tables = {t: C.create_string_buffer(t) for t in set(tables) if t}
        ops["table"] = [C.addressof(self.tables[t]) if t else _EMPTY for t in tables]
        ops["a"] = [[bufs[v[0]].lo + v[1] if isinstance(v, tuple) else v for v in a]
                    + [0] * (N_ARGS - len(a)) for a in ints]
        ops["d"] = [v + [0.0] * (N_DBL - len(v)) for v in dbls]
        scratch = [{i: np.empty(bufs[i].nbytes, np.uint8) for i in s} for s in ss]
        self.keep += [a for d in scratch for a in d.values()]
        snap = [[(d[i].ctypes.data, bufs[i].lo, bufs[i].nbytes) for i in s]
                for d, s in zip(scratch, ss)]
        check = [[(*bufs[i].span, 0 if r == "w" else bufs[i]._original_addr if r == "in" else
                   d[i].ctypes.data) for i, r, _ in c] for d, c in zip(scratch, cs)]
        records = {}
        for field, groups, width in (("restore", self._restores(rs, bufs), 3),
                                     ("snap", snap, 3), ("check", check, 5)):
            ops[field], rows = _ranges(groups)
            records[field] = _records(rows, width, self.keep)
        return records

    def _compare(self, written: list) -> list:
        """{lo, kept, bytes} of every buffer the run writes, `kept` a slot of self.kept (the
        first run's bytes, which the replays compare with); also the copies both ways."""
        self.kept = np.empty(sum(b.nbytes for b in written), np.uint8)
        compare, at = [], self.kept.ctypes.data
        for b in written:
            compare.append((b.lo, at, b.nbytes))
            at += b.nbytes
        back = np.array(compare, np.uint64).reshape(-1, 3)
        self.put_back = back                           # {lo, kept, bytes}: kept -> lo
        self.take = back[:, [1, 0, 2]].copy()          # {kept, lo, bytes}: lo -> kept
        return compare

    def _restores(self, rs, bufs) -> list:
        """Each op's restore records {buffer, its bytes at first use, size}, the bytes joined
        into one array."""
        snaps = [snap for r in rs for _, snap in r]
        joined = np.frombuffer(b"".join(snaps), np.uint8) if snaps else np.zeros(1, np.uint8)
        self.keep.append(joined)
        at, out = joined.ctypes.data, []
        for r in rs:
            out.append([])
            for i, snap in r:
                out[-1].append((bufs[i].lo, at, len(snap)))
                at += len(snap)
        return out

    def keep_first(self) -> None:
        """The buffers' bytes now (the first run's) become what the replays compare with."""
        self.helper.crnn_h_copy_records(self.take.ctypes.data, len(self.take))

    def run(self, first: int, runs: list, compare: bool = True) -> tuple[int, str, int]:
        """Replays runs[first:] (isa name, threads) -> (how many passed, why the next one
        stopped ("none": all passed), the op it stopped at or -1). Without `compare`, a run
        is not compared with the first run's bytes (it is the first run)."""
        isa = (C.c_int32 * len(runs))(*[abi.ISA_NAMES.index(i) for i, _ in runs])
        threads = (C.c_int32 * len(runs))(*[int(t) for _, t in runs])
        stop, stop_op = C.c_int32(0), C.c_int64(-1)
        n_compare = TAPE_FIELDS.index("n_compare")
        saved = self.tape[n_compare]
        if not compare:
            self.tape[n_compare] = 0
        try:
            done = self.helper.crnn_h_replay(self.tape.ctypes.data, first, len(runs) - first,
                                             isa, threads, C.byref(stop), C.byref(stop_op))
        finally:
            self.tape[n_compare] = saved
        if stop.value:                       # the zones may be damaged: rewritten on reuse
            for b in self.buffers:
                b.intact = False
            if compare:   # the first run's outputs as they were: its answer holds views of them
                self.helper.crnn_h_copy_records(self.put_back.ctypes.data, len(self.put_back))
        return int(done), STOPS[stop.value], int(stop_op.value)
