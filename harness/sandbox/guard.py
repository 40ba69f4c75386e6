"""Guard zones around every buffer the worker hands a port, private copies of its inputs, and
the checks after each call (docs/port-abi.md, "What the gate guarantees").

Inside the worker, one Arena holds the buffers of one layer run (a case on one ISA x thread
count): the outputs (_ffi.out), the in-place buffers (_ffi.copy, _ffi.zeros) and a private
copy of every fixture input the layer module reads (PrivateCase), so a port never sees the
cached fixture arrays. Each buffer lies between two canary zones of at least CANARY bytes
filled with a fixed byte pattern; a buffer of GUARD_PAGE_MIN bytes or more also has GUARD
bytes of inaccessible address space beyond each zone, so a wild access further out faults at
once (the worker's fault handler records the address, and the gate names the buffer). Around
every port call, Arena.before / Arena.after check the buffers the call was given:
  - a canary byte changed: an out-of-bounds write, naming the entry point, the argument and
    the byte and element offsets before the start or past the end;
  - a const argument changed (a fixture input, or an output of an earlier call passed back in,
    such as the forward's winners): "modified input W at [i, j]".
Either is a Violation (a failure of that case, like an error code). Arena.finish checks every
buffer once more after the run; Arena.seal and Arena.settled check, a while later, that none
changed since (a write after return). The checks of a call are one call into the harness's C
helper (use_helper; without a compiler, a memcmp per zone and per const argument), and only
a failed check takes the slower way that names the damage; the buffers of a run are reused
whole by the next run with the same shapes (_Pool), which spares allocations, system calls
and page faults.

Outside the worker (tests calling a layer module directly) no arena is active and _ffi.out
returns a plain poisoned array.
"""
from __future__ import annotations

import array
import bisect
import ctypes
import math
import mmap
from collections.abc import Mapping
from functools import cache

import numpy as np

from ...ctypes_kernels import abi
from ..compare import poisoned

CANARY = 256                  # bytes of canary on each side (a multiple of ALIGN)
ALIGN = 64                    # data alignment (what NumPy's allocator gives)
GUARD_PAGE_MIN = 1 << 14      # buffers this large also get an inaccessible region on each side
PAGE = mmap.PAGESIZE
GUARD = 16 * PAGE             # the inaccessible region (address space only: no memory)
_PATTERN = bytes(((i * 0x3B) ^ 0xC5) & 0xFF for i in range(CANARY + PAGE + ALIGN))
_PATTERN_BUF = ctypes.create_string_buffer(_PATTERN, len(_PATTERN))
_PATTERN_ADDR = ctypes.addressof(_PATTERN_BUF)

_libc = ctypes.CDLL(None, use_errno=True)
_libc.memcmp.restype, _libc.memcmp.argtypes = ctypes.c_int, [ctypes.c_void_p] * 2 + [ctypes.c_size_t]
_libc.mprotect.restype = ctypes.c_int
_libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]


def pattern_address() -> int:
    """The address of the canary pattern every zone holds (for the C helper's checks)."""
    return _PATTERN_ADDR


class Violation(abi.PortCallError):
    """A call broke the calling convention: it wrote outside a buffer or changed a const one."""


def _paged(span: int) -> np.ndarray:
    """span bytes of fresh memory between two inaccessible GUARD regions (the array covers
    all three)."""
    mm = mmap.mmap(-1, span + 2 * GUARD)
    raw = np.frombuffer(mm, np.uint8)
    base = raw.ctypes.data
    for at in (base, base + GUARD + span):
        if _libc.mprotect(at, GUARD, 0) != 0:   # PROT_NONE
            raise OSError(ctypes.get_errno(), "mprotect failed for a guard region")
    return raw


class _Pool:
    """Released buffers, reused whole by shape and dtype: the runs of one case on every ISA x
    thread count allocate the same buffers, and reusing them spares the allocation, the guard
    pages' system calls, the page faults of fresh memory and the building of the views. At
    most LIMIT bytes are kept."""

    LIMIT = 256 << 20

    def __init__(self):
        self.free: dict[tuple, list] = {}
        self.bytes = 0

    def take(self, key) -> Buffer | None:
        got = self.free.get(key)
        if got:
            self.bytes -= got[-1].nbytes
            return got.pop()
        return None

    def put(self, b: Buffer) -> None:
        if self.bytes + b.nbytes <= self.LIMIT:
            self.free.setdefault(b.key, []).append(b)
            self.bytes += b.nbytes


_POOL = _Pool()


def shape_of(shape) -> tuple:
    """A shape as a tuple of ints (an int or a NumPy integer: one dimension)."""
    if isinstance(shape, (int, np.integer)):
        return (int(shape),)
    return tuple(int(s) for s in (np.atleast_1d(shape) if isinstance(shape, np.ndarray) else shape))


class Buffer:
    """One guarded allocation: [guard region][canary][data][canary][guard region] (the regions only
    from GUARD_PAGE_MIN bytes on). Made by Buffer.get, which reuses a released one."""

    @classmethod
    def get(cls, shape: tuple, dtype, kind: str, name: str = "") -> Buffer:
        dtype = np.dtype(dtype)
        b = _POOL.take((shape, dtype))
        if b is None:
            b = cls(shape, dtype)
        elif not b.intact:                          # its run failed: the zones may be damaged
            ctypes.memmove(b.zone_lo, _PATTERN_ADDR, b.lo - b.zone_lo)
            ctypes.memmove(b.hi, _PATTERN_ADDR, b.zone_hi - b.hi)
        b.intact = False                            # until a run's finish() finds it so
        b.kind, b.name = kind, name                 # kind: output, inout or input
        b.writers = []                              # [call, entry point, argument, completed]
        b.original = None                           # input: the fixture array it copies
        return b

    def __init__(self, shape: tuple, dtype: np.dtype):
        self.shape, self.dtype, self.key = shape, dtype, (shape, dtype)
        self.nbytes = math.prod(shape) * dtype.itemsize
        self.paged = self.nbytes + 2 * CANARY >= GUARD_PAGE_MIN
        if self.paged:
            span = -(-(2 * CANARY + self.nbytes) // PAGE) * PAGE
            raw = _paged(span)
            base = raw.ctypes.data
            off, self.zone_lo, self.zone_hi = GUARD + CANARY, base + GUARD, base + GUARD + span
        else:
            raw = np.empty(self.nbytes + 2 * CANARY + ALIGN, np.uint8)
            base = raw.ctypes.data
            off = CANARY + (-(base + CANARY)) % ALIGN
            self.zone_lo, self.zone_hi = base + off - CANARY, base + off + self.nbytes + CANARY
        self.lo, self.hi = base + off, base + off + self.nbytes
        self.span = (self.zone_lo, self.lo, self.hi, self.zone_hi)
        ctypes.memmove(self.zone_lo, _PATTERN_ADDR, self.lo - self.zone_lo)
        ctypes.memmove(self.hi, _PATTERN_ADDR, self.zone_hi - self.hi)
        self.array = raw[off:off + self.nbytes].view(dtype).reshape(shape)
        if self.nbytes == 0:   # a zero-size slice points at raw's start: placed at lo instead
            self.array = np.ndarray(shape, dtype, buffer=raw, offset=off)
        self.bytes = raw[off:off + self.nbytes]     # the data as uint8, for first_change
        self._original_addr = 0
        self.intact = False

    def release(self) -> None:
        """Gives the buffer back to the pool; its array must not be used after."""
        self.original = None
        _POOL.put(self)

    def holds(self, addr: int) -> bool:
        return self.lo <= addr < self.hi or addr == self.lo

    def zones_intact(self) -> bool:
        return (_libc.memcmp(self.zone_lo, _PATTERN_ADDR, self.lo - self.zone_lo) == 0
                and _libc.memcmp(self.hi, _PATTERN_ADDR, self.zone_hi - self.hi) == 0)

    def zone_damage(self) -> list[str]:
        """The changed canary bytes, as byte and element offsets from the start / the end."""
        out, size = [], self.dtype.itemsize
        pre = np.frombuffer(ctypes.string_at(self.zone_lo, self.lo - self.zone_lo), np.uint8)
        bad = np.flatnonzero(pre != np.frombuffer(_PATTERN, np.uint8, len(pre)))
        if bad.size:
            a, b = int(bad[0]) - len(pre), int(bad[-1]) - len(pre)
            out.append(f"bytes {a}..{b} before its start (element {a // size}"
                       + (f"..{b // size}" if b // size != a // size else "") + ")")
        post = np.frombuffer(ctypes.string_at(self.hi, self.zone_hi - self.hi), np.uint8)
        bad = np.flatnonzero(post != np.frombuffer(_PATTERN, np.uint8, len(post)))
        if bad.size:
            a, b = int(bad[0]), int(bad[-1])
            n = self.nbytes // size
            out.append(f"bytes +{a}..+{b} past its end (element {n + a // size}"
                       + (f"..{n + b // size}" if b // size != a // size else "")
                       + f"; it has {n})")
        return out

    def describe(self, arg: str = "") -> str:
        what = {"input": "input", "output": "output", "inout": "in/out buffer"}[self.kind]
        name = self.name or arg
        also = f"argument {arg}; " if arg and arg != name else ""
        return f"{what} {name} ({also}{self.dtype}{list(self.shape)})"

    def first_change(self, reference: np.ndarray) -> str | None:
        """None when the data equals `reference` bit for bit, else where it first differs."""
        if reference is self.original:
            ref, addr = reference, self._original_addr
        else:
            ref = np.ascontiguousarray(reference)
            addr = ref.ctypes.data
        if _libc.memcmp(self.lo, addr, self.nbytes) == 0:
            return None
        i = int(np.flatnonzero(self.bytes != ref.reshape(-1).view(np.uint8))[0]) // self.dtype.itemsize
        idx = [int(k) for k in np.unravel_index(i, self.shape)] if self.shape else []
        return (f"at [{', '.join(map(str, idx))}] ({str(ref.reshape(-1)[i])} -> "
                f"{str(self.array.reshape(-1)[i])})")   # str: the dtype's shortest digits


class Arena:
    """The guarded buffers of one layer run and the checks around each port call."""

    def __init__(self):
        self.buffers: list[Buffer] = []
        self._los: list[int] = []                  # the buffers' start addresses, sorted
        self._at: dict[int, Buffer] = {}
        self._addr: dict[int, int] = {}            # id(array) -> its address (see address())
        self._tables: dict[tuple, bytes] = {}      # guard_pages by the buffers of a call
        self.calls = 0
        self.last = ""                             # the last entry point called
        self.tape = None                           # a replay.Tape recording the run, or None
        self.found, self.outside = [], False       # the last call's buffers (before())
        self._sealed: list = []                    # seal(): the buffers' bytes at the run's end

    def _add(self, b: Buffer) -> Buffer:
        b.index = len(self.buffers)                # its place in this arena (replay.Tape)
        self.buffers.append(b)
        bisect.insort(self._los, b.lo)
        self._at[b.lo] = b
        self._addr[id(b.array)] = b.lo
        return b

    def new(self, shape: tuple, dtype, kind: str, name: str = "") -> np.ndarray:
        return self._add(Buffer.get(shape, dtype, kind, name)).array

    def private(self, name: str, original) -> np.ndarray:
        """A guarded copy of the fixture input `original`, verified against it after each call."""
        original = np.ascontiguousarray(original)
        b = self._add(Buffer.get(original.shape, original.dtype, "input", name))
        b.array[...] = original
        b.original, b._original_addr = original, original.ctypes.data
        return b.array

    def address(self, a: np.ndarray) -> int:
        """a.ctypes.data, looked up for the arena's own arrays (every array in _addr is alive
        while it is listed, so its id is no other object's)."""
        addr = self._addr.get(id(a))
        return _address(a) if addr is None else addr

    def find(self, addr: int) -> Buffer | None:
        b = self._at.get(addr)
        if b is None:
            i = bisect.bisect_right(self._los, addr) - 1
            b = self._at[self._los[i]] if i >= 0 else None
        return b if b is not None and b.holds(addr) else None

    def before(self, fn: str, args, checked: bool = True) -> list:
        """Called before entry point `fn`: -> what after() checks. Also leaves in `found` the
        buffer of every pointer argument, and `outside` true when one points elsewhere (what
        a replay.Tape recording the call needs). Not `checked` (a call after() will not
        check: the reference port's recorded run): no copies of const outputs, no writers."""
        touched, found, outside = [], [], False
        for i, arg, written in _pointer_args(fn):
            addr = args[i] if i < len(args) else None
            b = self.find(addr) if isinstance(addr, int) and addr else None
            if b is None:
                outside = outside or bool(addr)
                continue
            found.append(b)
            snap = None
            if written:
                if checked:
                    b.writers.append([self.calls, fn, arg, False])
            elif b.kind != "input":        # an earlier output passed back as a const argument:
                if addr != b.lo:           # checked when passed whole (a slice's extent is the
                    continue               # call's business: adamw's g, a view of the gradient)
                snap = b.array.copy() if checked else None
            touched.append((b, arg, written, snap))
        self.calls += 1
        self.last = fn
        self.found, self.outside = found, outside
        return touched

    def after(self, fn: str, touched: list, rc: int) -> None:
        if not _all_intact([(b, _ref(b, written, snap)) for b, _, written, snap in touched]):
            self._diagnose(fn, touched)
        if rc == 0:
            for b, _, written, _ in touched:
                if written:
                    b.writers[-1][3] = True

    def _diagnose(self, fn: str, touched: list) -> None:
        problems = []
        for b, arg, written, snap in touched:
            if not b.zones_intact():
                problems.append(f"{fn} wrote outside {b.describe(arg)}: "
                                + "; ".join(b.zone_damage()))
            if not written:
                where = b.first_change(b.original if b.kind == "input" else snap)
                if where:
                    problems.append(f"{fn} modified {b.describe(arg)} {where}; it is const")
        if problems:
            raise Violation("; ".join(dict.fromkeys(problems)))

    def finish(self) -> None:
        """After the run: every buffer's zones, every input against its fixture array."""
        if _all_intact([(b, b._original_addr if b.kind == "input" else 0)
                        for b in self.buffers]):
            for b in self.buffers:
                b.intact = True
            return
        problems = []
        for b in self.buffers:
            if not b.zones_intact():
                problems.append(f"{b.describe()} was written out of bounds: "
                                + "; ".join(b.zone_damage()))
            where = b.first_change(b.original) if b.kind == "input" else None
            if where:
                problems.append(f"input {b.name} was modified {where}")
        if problems:
            raise Violation(f"after the run (last call {self.last or 'none'}; did a call keep a "
                            "pointer after returning?): " + "; ".join(problems))

    def seal(self) -> None:
        """The run's end: a copy of every output and in/out buffer, which settled() compares
        with once the run is old enough (its buffers are kept, unreused, until then)."""
        self._sealed = [None if b.kind == "input" else b.bytes.copy() for b in self.buffers]

    def settled(self) -> str | None:
        """None when every buffer, its zones and every input still hold what they held at
        seal(), else what changed since: a write after the call returned (a thread of the
        port still running, a missing join or device synchronize)."""
        sealed = list(zip(self.buffers, self._sealed))
        if _all_intact([(b, b._original_addr if s is None else s.ctypes.data)
                        for b, s in sealed]):
            return None
        problems = []
        for b, s in sealed:
            b.intact = False                   # (its zones are rewritten when it is reused)
            arg, call = (b.writers[-1][2], b.writers[-1][1]) if b.writers else ("", self.last)
            after = f"after {call or 'its last call'} returned"
            if not b.zones_intact():
                problems.append(f"{b.describe(arg)} was written out of bounds {after}: "
                                + "; ".join(b.zone_damage()))
            where = b.first_change(b.original if s is None else s.view(b.dtype).reshape(b.shape))
            if where:
                problems.append(f"{b.name or arg or b.describe()} changed {after} {where}")
        return ("; ".join(problems) + " (a write after return: a missing join or device "
                "synchronize?)")

    def release(self) -> None:
        """After the run's outputs were sent: the buffers' memory goes back to the pool."""
        for b in self.buffers:
            b.release()
        self.buffers, self._los, self._at, self._addr, self._tables = [], [], {}, {}, {}
        self._sealed = []

    def partial(self, wanted) -> dict:
        """After a failed call: the outputs that a single completed call wrote, by argument
        name, for the tensors in `wanted` (None: all; e.g. the forward's when the backward
        failed)."""
        out = {}
        for b in self.buffers:
            if b.kind == "output" and len(b.writers) == 1 and b.writers[0][3]:
                arg = b.writers[0][2]
                if (wanted is None or arg in wanted) and arg not in out:
                    out[arg] = b.array.copy()
        return out

    def guard_pages(self, touched) -> bytes:
        """b'name zone_lo zone_hi lo hi' per paged buffer of a call (for the fault report), at
        most 4095 bytes."""
        key = tuple((id(b), arg) for b, arg, _, _ in touched if b.paged)
        if key not in self._tables:
            self._tables[key] = page_table((b, b.name or arg) for b, arg, _, _ in touched)
        return self._tables[key]


def page_table(labelled) -> bytes:
    """b'label zone_lo zone_hi lo hi' a line for each paged buffer of (buffer, label) pairs:
    what the fault report reads (fault_report), at most 4095 bytes."""
    return "".join(f"{label} {b.zone_lo} {b.zone_hi} {b.lo} {b.hi}\n"
                   for b, label in labelled if b.paged).encode()[:4095]


_CHECK = None                 # the harness helper's crnn_h_guard_check (use_helper)


def use_helper(helper) -> None:
    """Makes the checks around each call one call into the harness's C helper (fpenv.py);
    without it (no C compiler) they are two memcmp calls a zone and one a const buffer."""
    global _CHECK
    _CHECK = getattr(helper, "crnn_h_guard_check", None) if helper is not None else None


def _ref(b: Buffer, written: bool, snap) -> int:
    """The address a buffer's data must still equal after a call: its fixture array (an
    input), its copy from before the call (an earlier output passed back const), or 0."""
    if written:
        return 0
    return b._original_addr if b.kind == "input" else snap.ctypes.data


def _all_intact(checks: list) -> bool:
    """checks: (buffer, ref address or 0). True when every zone holds its pattern and every
    buffer with a ref equals it; False sends the caller to its detailed, slower diagnosis."""
    if _CHECK is None:
        return all(b.zones_intact() and (not ref or _libc.memcmp(b.lo, ref, b.nbytes) == 0)
                   for b, ref in checks)
    rec = array.array("Q")
    for b, ref in checks:
        rec.extend(b.span)
        rec.append(ref)
    return _CHECK(rec.buffer_info()[0], len(checks), _PATTERN_ADDR) < 0


@cache
def _pointer_args(fn: str) -> tuple:
    return tuple(abi.pointer_args(fn)) if fn in abi.ARGS else ()


class PrivateCase:
    """A case as the layer module sees it in the worker: the same params and expectations,
    and inputs copied into the arena on first use."""

    def __init__(self, case, arena: Arena):
        self.name, self.params = case.name, case.params
        self.expected, self.floor = case.expected, case.floor
        self.inputs = _PrivateInputs(case.inputs, arena)


class _PrivateInputs(Mapping):
    def __init__(self, originals: dict, arena: Arena):
        self._originals, self._arena, self._copies = originals, arena, {}

    def __getitem__(self, key):
        if key not in self._copies:
            self._copies[key] = self._arena.private(key, self._originals[key])
        return self._copies[key]

    def __contains__(self, key):
        return key in self._originals

    def __iter__(self):
        return iter(self._originals)

    def __len__(self):
        return len(self._originals)


_POISON = {np.dtype(t): poisoned((), t) for t in (np.float32, np.float64, np.int32)}
_ACTIVE: Arena | None = None


def address(a: np.ndarray) -> int:
    """The address of `a`'s data (the arena's own arrays looked up, not asked)."""
    return _address(a) if _ACTIVE is None else _ACTIVE.address(a)


def _address(a: np.ndarray) -> int:
    """a.ctypes.data, a third of its cost through the buffer protocol (a view of a `many`
    case's buffers, one per call); read-only, empty or strided arrays are asked."""
    try:
        return ctypes.addressof(ctypes.c_char.from_buffer(a))
    except (TypeError, ValueError, BufferError):
        return a.ctypes.data


def activate(arena: Arena | None) -> None:
    global _ACTIVE
    _ACTIVE = arena


def active() -> Arena | None:
    return _ACTIVE


def output(shape, dtype) -> np.ndarray:
    """A poisoned output buffer: guarded in the worker's arena, plain outside it."""
    if _ACTIVE is None:
        try:
            return poisoned(shape, dtype)
        except TypeError:
            return np.full(shape, 0x5A5A5A5A5A5A5A5A, np.uint64).view(dtype)
    a = _ACTIVE.new(shape_of(shape), dtype, "output")
    p = _POISON.get(a.dtype)
    if p is not None:
        a[...] = p
    else:                        # no poison value for this dtype (int64 sizes): a byte pattern
        a.view(np.uint8)[...] = 0x5A
    return a


def assign(dst: np.ndarray, src) -> None:
    """dst[...] = src, recorded when the run is (a layer module's copy between the buffers of
    a run: the replayed runs make it too, harness/sandbox/replay.py)."""
    if _ACTIVE is not None and _ACTIVE.tape is not None:
        _ACTIVE.tape.copy(_ACTIVE, dst, src)
    dst[...] = src


def inout(a=None, shape=None, dtype=np.float32) -> np.ndarray:
    """A copy of `a` (or zeros of `shape`) that a call updates in place (AdamW's p, m, v;
    clipping's grads), guarded in the worker's arena."""
    if a is not None:
        a = np.ascontiguousarray(a)
        shape, dtype = a.shape, a.dtype
    if _ACTIVE is None:
        return a.copy() if a is not None else np.zeros(shape, dtype)
    b = _ACTIVE.new(shape_of(shape), dtype, "inout")
    b[...] = a if a is not None else 0
    return b


def fault_report(addr: int, table: str) -> str:
    """Where the fault address `addr` lies, given the guard-page table of the call."""
    for line in table.splitlines():
        parts = line.split()
        if len(parts) != 5:
            continue
        name, zlo, zhi, lo, hi = parts[0], *map(int, parts[1:])
        if zhi <= addr < zhi + GUARD:
            return f"at byte +{addr - hi} past the end of {name} (in its guard region)"
        if zlo - GUARD <= addr < zlo:
            return f"at byte {addr - lo} before the start of {name} (in its guard region)"
    return f"at address 0x{addr:x}"
