"""Case bundles: the gate's cases as calls a runner on another machine makes, and the results
it sends back, graded the same as the gate grades a port it loads (docs/case-bundle.md).

Export: each case runs once on the reference port in a guard.Arena with a replay.Tape
recording it (as the fuzzer records its golden runs, harness/reference.py); the tape's ops and
the arena's buffers become the case's record in cases.bin: every call with every argument in
order, pointers as (buffer, element offset), each buffer with its dtype, size, role and, for
inputs and in/out buffers, its starting bytes. The case's calls are then made once more from
that record alone (play) and must write what the recorded run wrote: a case whose tape is
refused or does not replay is reported, not dropped.

Grade: a run's outputs are rebuilt by the gate's own layer module, `run(lib, case)`, on a
shim lib whose entry points, called in the bundle's order, copy the bytes the runner recorded
after call k into the buffers they are given and return its rc (ResultsSource: an executor
for case_checks._run_case). The gate's per-case path then makes the records.

    write_bundle(out_dir, cases)          # cases: recorded with record_case
    b = read_bundle(dir)                  # BundleError: one line, exit 2
    r = read_results(path, b)
"""
from __future__ import annotations

import ctypes as C
import hashlib
import json
import math
import re
import struct
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from ..ctypes_kernels import abi
from .sandbox import guard, replay

BUNDLE_MAGIC, RESULTS_MAGIC, VERSION = b"CRNNCB01", b"CRNNRS01", 1
# results version 1: each written record is a whole buffer; 2: a byte span of it (offset)
RESULTS_VERSIONS = (1, 2)
DTYPE_CODES = {"<f4": 1, "<f8": 2, "<i4": 3, "<i8": 4}
DTYPES = {code: np.dtype(s) for s, code in DTYPE_CODES.items()}
ROLES = ("input", "output", "inout")
A_I32, A_I64, A_F64, A_PTR, A_NULL = range(5)
STATUSES = ("ok", "a call returned non-zero", "crashed", "timed out", "not implemented",
            "a check failed")
OK, RC, CRASH, TIMEOUT, MISSING, CHECK = range(6)
ARCH_NAME = re.compile(r"[A-Za-z0-9_.+-]{1,32}")
# a call's flags: the runner's checks around it (bits 0-2), poison it saw left (bit 3)
CANARY, CONST_INPUT, FP_ENV, POISON = 1, 2, 4, 8
FLAG_BITS = CANARY | CONST_INPUT | FP_ENV | POISON
FLAGS = ("canary broken", "const input modified", "fp env changed", "poison left")
_F64_POISON = struct.pack("<Q", 0x7FFDA5A5A5A5A5A5)
POISON = {1: struct.pack("<I", 0x7FE5A5A5), 2: _F64_POISON, 3: struct.pack("<I", 0x5A5A5A5A),
          4: _F64_POISON}


class BundleError(ValueError):
    """A bundle or results file that cannot be graded (one line; exit 2)."""


class Refused(Exception):
    """A case whose calls cannot be written as a bundle record (the reason)."""


@dataclass
class Buf:
    dtype: np.dtype
    role: str                 # input, output, inout
    n: int                    # elements
    content: bytes | None     # inputs and in/out buffers: their bytes before the first op

    @property
    def nbytes(self) -> int:
        return self.n * self.dtype.itemsize

    def start(self) -> bytes:
        """The buffer's bytes before the case's first op (outputs: the poison pattern)."""
        if self.content is not None:
            return self.content
        return POISON[DTYPE_CODES[self.dtype.str]] * self.n


@dataclass
class Call:
    name: str
    args: list                # [(type, value)]; a pointer's value is (buffer, element offset)

    def pointers(self) -> list:
        """[(argument name, buffer, element offset, written)] of its non-NULL pointers."""
        out, ptrs = [], iter(abi.pointer_args(self.name))
        for t, v in self.args:
            if t in (A_PTR, A_NULL):
                _, arg, written = next(ptrs)
                if t == A_PTR:
                    out.append((arg, v[0], v[1], written))
        return out


@dataclass
class Copy:
    dst: int
    dst_off: int              # bytes
    src: int
    src_off: int
    nbytes: int


@dataclass
class BundleCase:
    index: int
    layer: str
    fixture: str              # the fixture file's stem
    case: str
    buffers: list
    ops: list                 # Call | Copy

    @property
    def name(self) -> str:
        return f"{self.layer}/{self.fixture}/{self.case}"

    @property
    def calls(self) -> list:
        return [op for op in self.ops if isinstance(op, Call)]


# ---- export --------------------------------------------------------------------------------

def record_case(lib, module, case) -> tuple[list, list, list]:
    """Runs `case` through `module` on `lib` (the reference port) with a tape recording it ->
    (buffers, ops, the buffers' bytes after the run). Raises Refused."""
    from .reference import _Recorder
    arena = guard.Arena()
    tape = arena.tape = replay.Tape()
    guard.activate(arena)
    try:
        # (with its expectations: a module may read which tiers the case has, e.g. step's
        # pool decisions for the pytorch tier; they are not written to the bundle)
        module.run(_Recorder(lib, arena), guard.PrivateCase(case, arena))
        if not tape.usable:
            raise Refused(tape.why)
        if not tape.ops:
            raise Refused("the case makes no port call")
        firsts = {i: data for op in tape.ops for i, data in op[4]}
        buffers = [_buf(b, firsts) for b in arena.buffers]
        ops = [_op(op, buffers) for op in tape.ops]
        for op in ops:
            if isinstance(op, Call):
                _check_abi(op, buffers)
        return buffers, ops, [b.bytes.tobytes() for b in arena.buffers]
    except abi.PortCallError as e:
        raise Refused(f"the reference port refused it: {e}") from None
    finally:
        arena.tape = None
        guard.activate(None)
        arena.release()


def _buf(b, firsts: dict) -> Buf:
    if b.dtype.str not in DTYPE_CODES:
        raise Refused(f"buffer {b.name or b.index} has dtype {b.dtype}, which a bundle cannot "
                      "carry")
    n = int(np.prod(b.shape, dtype=np.int64))
    if b.kind == "input":
        return Buf(b.dtype, "input", n, b.bytes.tobytes())
    first = firsts.get(b.index, b.bytes.tobytes())
    role = b.kind
    if role == "output" and first == POISON[DTYPE_CODES[b.dtype.str]] * n:
        return Buf(b.dtype, "output", n, None)
    # an in/out buffer, or an output the harness starts with other bytes than the bundle's
    # poison (the gate's int64 poison is 0x5A bytes): carried with its content
    return Buf(b.dtype, "inout", n, first)


def _op(op, buffers: list):
    kind, name, ints, dbls = op[:4]
    if kind == 1:
        (d, doff), (s, soff), nbytes = ints
        return Copy(d, doff, s, soff, nbytes)
    ii, dd, args = iter(ints), iter(dbls), []
    for t in abi.SIGNATURES[name][1]:
        if t is C.c_double:
            args.append((A_F64, float(next(dd))))
            continue
        v = next(ii)
        if t is C.c_void_p:
            if not isinstance(v, tuple):
                args.append((A_NULL, 0))
                continue
            size = buffers[v[0]].dtype.itemsize
            if v[1] % size:
                raise Refused(f"{name} got a pointer {v[1]} bytes into a buffer of {size}-byte "
                              "elements")
            args.append((A_PTR, (v[0], v[1] // size)))
        else:
            args.append((A_I32 if t is C.c_int32 else A_I64, int(v)))
    return Call(name, args)


def _check_abi(call: Call, buffers: list) -> None:
    """Each pointer argument's dtype and extent from abi.BUFFERS (abi.buffers): the extent
    must lie inside its buffer, so a runner never hands a port less than the ABI promises."""
    names = [a.lstrip("*") for a in abi.ARGS[call.name].split()]
    ints = {n: v for n, (t, v) in zip(names, call.args) if t in (A_I32, A_I64)}
    ptrs = dict(zip(names, call.args))

    def read(arg, dtype, n):
        t, v = ptrs[arg]
        if t != A_PTR:
            return []
        b = buffers[v[0]]
        if b.role != "input":           # sizes read from an earlier call's output (train3's
            raise LookupError           # clip): known only when the calls run
        return np.frombuffer(b.start(), b.dtype)[v[1]:v[1] + n].tolist()
    try:
        specs = abi.buffers(call.name, ints, read)
    except LookupError:
        return
    except ValueError as e:
        raise Refused(f"{call.name}: the ABI's buffer sizes cannot be derived ({e})") from None
    for spec in specs:
        t, v = ptrs[spec.name]
        if t != A_PTR:
            continue
        b, n = buffers[v[0]], math.prod(spec.shape)
        if b.dtype != np.dtype(spec.dtype) or v[1] + n > b.n:
            raise Refused(f"{call.name}: argument {spec.name} is {b.n - v[1]} x {b.dtype} from its "
                          f"pointer, the ABI says {n} x {np.dtype(spec.dtype)}")


def export_cases(selection, lib, progress=None) -> tuple[list, list]:
    """selection: [(module, fixture path, case)] -> (bundle cases, refused [(layer, fixture,
    case, why)]). Each case is recorded, then played from its record alone on `lib`: what it
    wrote must equal the recorded run's bytes."""
    cases, refused = [], []
    for module, path, case in selection:
        stem = Path(path).stem
        try:
            buffers, ops, after = record_case(lib, module, case)
            bc = BundleCase(len(cases), module.LAYER, stem, case.name, buffers, ops)
            bc = parse_case(serialize_case(bc), 0)[0]      # what a reader gets
            _check_play(lib, bc, after)
        except Refused as e:
            refused.append((module.LAYER, stem, case.name, str(e)))
            continue
        cases.append(bc)
        if progress:
            progress(bc)
    return cases, refused


def _check_play(lib, bc: BundleCase, after: list) -> None:
    got, rcs = play(lib, bc)
    if any(rcs):
        raise Refused(f"its calls made again from the record returned {rcs[-1]}")
    for i, (a, b) in enumerate(zip(got, after)):
        if a != b:
            raise Refused(f"its calls made again from the record wrote other bytes into buffer "
                          f"{i} than the recorded run (the layer module changes a buffer "
                          "between calls in a way the tape does not record)")


def play(lib, bc: BundleCase) -> tuple[list, list]:
    """The case's ops on `lib` (a loaded port), in this process -> (every buffer's bytes after,
    the calls' rcs). Stops at the first non-zero rc."""
    mem = [np.frombuffer(bytearray(b.start()), np.uint8) for b in bc.buffers]
    rcs = []
    for op in bc.ops:
        if isinstance(op, Copy):
            C.memmove(mem[op.dst].ctypes.data + op.dst_off, mem[op.src].ctypes.data + op.src_off,
                      op.nbytes)
            continue
        args = [mem[v[0]].ctypes.data + v[1] * bc.buffers[v[0]].dtype.itemsize if t == A_PTR
                else None if t == A_NULL else v for t, v in op.args]
        rcs.append(int(getattr(lib, op.name)(*args)))
        if rcs[-1]:
            break
    return [m.tobytes() for m in mem], rcs


# ---- the files -----------------------------------------------------------------------------

def _u32(n):
    return struct.pack("<I", n)


def _text(s: str, width: str = "<I") -> bytes:
    b = s.encode()
    return struct.pack(width, len(b)) + b


def serialize_case(bc: BundleCase) -> bytes:
    out = [b"CASE", _u32(bc.index), _text(bc.name), _text(bc.layer), _u32(len(bc.buffers))]
    for b in bc.buffers:
        out.append(struct.pack("<BBHQ", DTYPE_CODES[b.dtype.str], ROLES.index(b.role), 0, b.n))
        if b.role != "output":
            out.append(b.content)
    out.append(_u32(len(bc.ops)))
    for op in bc.ops:
        if isinstance(op, Copy):
            out.append(struct.pack("<BIQIQQ", 1, op.dst, op.dst_off, op.src, op.src_off, op.nbytes))
            continue
        out += [b"\x00", _text(op.name, "<H"), struct.pack("<H", len(op.args))]
        for t, v in op.args:
            if t == A_PTR:
                out.append(struct.pack("<BII", t, *v))
            elif t == A_F64:
                out.append(struct.pack("<Bd", t, v))
            else:
                out.append(struct.pack("<Bq", t, v))
    return b"".join(out)


class _Reader:
    def __init__(self, data: bytes, what: str, at: int = 0):
        self.data, self.at, self.what = data, at, what

    def take(self, n: int) -> bytes:
        if n < 0 or self.at + n > len(self.data):
            raise EOFError(f"{self.what} ends after {len(self.data)} bytes, inside a record "
                           "(truncated?)")
        b = self.data[self.at:self.at + n]
        self.at += n
        return bytes(b)

    def unpack(self, fmt: str):
        v = struct.unpack(fmt, self.take(struct.calcsize(fmt)))
        return v[0] if len(v) == 1 else v

    def text(self, fmt: str = "<I") -> str:
        return self.take(self.unpack(fmt)).decode()

    def magic(self, want: bytes, where: str) -> None:
        got = self.take(len(want))
        if got != want:
            raise BundleError(f"{self.what}: bad magic {got!r} at byte {self.at - len(want)} "
                              f"({where}; expected {want!r}): an edited or damaged file")

    @property
    def done(self) -> bool:
        return self.at == len(self.data)


def parse_case(data: bytes, at: int, what: str = "cases.bin") -> tuple[BundleCase, int]:
    r = _Reader(data, what, at)
    r.magic(b"CASE", "a case")
    index, name, layer = r.unpack("<I"), r.text(), r.text()
    buffers = []
    for _ in range(r.unpack("<I")):
        code, role, _, n = r.unpack("<BBHQ")
        if code not in DTYPES or role > 2:
            raise BundleError(f"{what}: case {name}: unknown dtype {code} or role {role}")
        dt = DTYPES[code]
        buffers.append(Buf(dt, ROLES[role], n, None if role == 1 else r.take(n * dt.itemsize)))
    ops = []
    for _ in range(r.unpack("<I")):
        if r.unpack("<B") == 1:
            ops.append(Copy(*r.unpack("<IQIQQ")))
            continue
        fn, args = r.text("<H"), []
        for _ in range(r.unpack("<H")):
            t = r.unpack("<B")
            args.append((t, r.unpack("<II") if t == A_PTR else r.unpack("<d") if t == A_F64
                         else r.unpack("<q")))
        ops.append(Call(fn, args))
    fixture, case = name.split("/", 2)[1:] if name.count("/") >= 2 else ("", name)
    return BundleCase(index, layer, fixture, case, buffers, ops), r.at


@dataclass
class Bundle:
    path: Path
    meta: dict
    cases: list
    digest: str


def write_bundle(out_dir, cases: list, meta: dict) -> Path:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    records = [serialize_case(c) for c in cases]
    data = BUNDLE_MAGIC + struct.pack("<II", VERSION, len(cases)) + b"".join(records)
    (out / "cases.bin").write_bytes(data)
    doc = {"format": "crnn-case-bundle", "version": VERSION, "abi_version": abi.ABI_VERSION,
           "digest": hashlib.sha256(data).hexdigest(),
           "created": datetime.now(timezone.utc).isoformat(timespec="seconds"), **meta,
           "cases": [{"index": c.index, "layer": c.layer, "fixture": c.fixture, "case": c.case,
                      "ops": len(c.ops), "buffers": len(c.buffers),
                      "sha256": hashlib.sha256(rec).hexdigest()}
                     for c, rec in zip(cases, records)]}
    (out / "bundle.json").write_text(json.dumps(doc, indent=1) + "\n")
    return out


def read_bundle(path) -> Bundle:
    p = Path(path)
    try:
        meta = json.loads((p / "bundle.json").read_text())
        data = (p / "cases.bin").read_bytes()
    except FileNotFoundError as e:
        raise BundleError(f"{p} is not a case bundle: {Path(e.filename).name} not found") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise BundleError(f"{p}/bundle.json cannot be read ({e})") from None
    if not isinstance(meta, dict) or meta.get("format") != "crnn-case-bundle":
        raise BundleError(f"{p}/bundle.json is not a crnn-case-bundle index")
    if meta.get("version") != VERSION:
        raise BundleError(f"{p} is a case bundle of version {meta.get('version')}; this "
                          f"version reads version {VERSION}")
    digest = hashlib.sha256(data).hexdigest()
    if digest != meta.get("digest"):
        raise BundleError(f"{p}/cases.bin does not match bundle.json's digest (an edited or "
                          "partly copied bundle)")
    r = _Reader(data, f"{p}/cases.bin")
    try:
        r.magic(BUNDLE_MAGIC, "the file")
        version, n = r.unpack("<II")
        cases, at = [], r.at
        for _ in range(n):
            c, at = parse_case(data, at, r.what)
            cases.append(c)
    except (EOFError, UnicodeDecodeError, ValueError) as e:
        raise BundleError(f"{p}/cases.bin cannot be read: {e}") from None
    return Bundle(p, meta, cases, digest)


# ---- results -------------------------------------------------------------------------------

@dataclass
class Run:
    case: int
    isa: str
    threads: int
    calls: list               # [(rc, flags, [(buffer, byte offset, bytes)])]
    status: int
    msg: str
    complete: bool = True     # False: the file ends inside this run (the runner died)
    at: int = -1              # the byte offset of its record in the results file


@dataclass
class Results:
    path: Path
    platform: dict
    runs: list = field(default_factory=list)


def read_results(path, bundle: Bundle) -> Results:
    """Reads one results file written for `bundle`; BundleError (one line) on another bundle's
    file, a damaged or edited one, sizes that do not fit the bundle's buffers, a run on an ISA
    its platform's arch does not have, or two complete records of the same case, ISA and
    threads (a later record replaces an earlier one only when that one was cut short)."""
    p = Path(path)
    try:
        if p.exists() and not p.is_file():
            raise BundleError(f"results file {p} is not a regular file (a directory, a device "
                              "or a pipe: a results file is read whole)")
        data = p.read_bytes()
    except OSError as e:
        raise BundleError(f"results file {p} cannot be read ({e.strerror or e})") from None
    r = _Reader(data, f"results file {p}")
    try:
        r.magic(RESULTS_MAGIC, "the file")
        version = r.unpack("<I")
        if version not in RESULTS_VERSIONS:
            raise BundleError(f"results file {p} has version {version}; this version reads "
                              f"{', '.join(map(str, RESULTS_VERSIONS))}")
        digest = r.take(64).decode("ascii", "replace")
        if digest != bundle.digest and digest.lower() == bundle.digest:
            raise BundleError(f"results file {p} writes the bundle's digest in upper case "
                              f"({digest[:12]}...): it is bundle.json's 64 hex digits as "
                              "written there, in lower case")
        if digest != bundle.digest:
            raise BundleError(f"results file {p} is for another bundle (digest {digest[:12]}...; "
                              f"{bundle.path} is {bundle.digest[:12]}...)")
        text = r.text()
        try:
            platform = json.loads(text)
        except json.JSONDecodeError as e:
            raise ValueError(f"its platform record is not JSON: {e.msg} at character "
                             f"{e.pos}") from None
        except RecursionError:
            raise ValueError("its platform record is nested too deeply") from None
        if not isinstance(platform, dict):
            raise ValueError("its platform record is not a JSON object")
        arch = platform.get("arch")
        if arch is not None and not (isinstance(arch, str) and ARCH_NAME.fullmatch(arch)):
            raise ValueError(f"its platform's arch is {json.dumps(arch)[:40]}: a machine name "
                             "is 1-32 letters, digits or _.+- (e.g. x86_64, aarch64)")
    except (EOFError, UnicodeDecodeError, ValueError) as e:
        if isinstance(e, BundleError):
            raise
        raise BundleError(f"results file {p}: its header cannot be read ({e})") from None
    res = Results(p, platform)
    family = abi.architecture(platform.get("arch"))
    seen = {}                 # (case, isa, threads) -> the run recorded for it
    while not r.done:
        run = _run(r, bundle, p, version)
        _check_isa(p, platform.get("arch"), family, run)
        key = (run.case, run.isa, run.threads)
        if key in seen:
            _check_replace(p, bundle, seen[key], run)
            res.runs = [x for x in res.runs if x is not seen[key]]
        seen[key] = run
        res.runs.append(run)
    return res


def _check_isa(p, arch, family, run: Run) -> None:
    """A run's ISA must be one of its file's architecture (an x86_64 file's neon run, an
    aarch64 file's avx2 run: relabelled or mixed-up records)."""
    if family is None or run.isa in family[1]:
        return
    raise BundleError(f"results file {p}: its platform's arch is {arch}, but the run at byte "
                      f"{run.at} (case {run.case}, {run.threads} thread(s)) is on ISA "
                      f"{run.isa}, which {arch} does not have (it has "
                      f"{', '.join(i for i in abi.ISA_NAMES if i in family[1])})"
                      ": a relabelled or mixed-up file")


def _check_replace(p, bundle: Bundle, earlier: Run, later: Run) -> None:
    """A later record of the same case, ISA and threads replaces an earlier one only when that
    one was cut short (no END_: what crnn-run --resume runs again); two complete records of
    the same run are two answers to one question."""
    if not earlier.complete:
        return
    raise BundleError(f"results file {p}: case {bundle.cases[later.case].name} on "
                      f"{later.isa} x {later.threads} thread(s) is recorded twice, complete, at "
                      f"bytes {earlier.at} and {later.at}: a run is recorded once (crnn-run "
                      "--resume runs again only a run cut short)")


def _run(r: _Reader, bundle: Bundle, p: Path, version: int) -> Run:
    start = r.at
    run = None
    try:
        r.magic(b"RUN_", "a run record")
        index, isa, threads, n = r.unpack("<IiiI")
        if index >= len(bundle.cases):
            raise BundleError(f"results file {p}: a run of case {index}, but the bundle has "
                              f"{len(bundle.cases)} cases")
        if not 0 <= isa < len(abi.ISA_NAMES):
            raise BundleError(f"results file {p}: the run at byte {start} (case {index}) has "
                              f"ISA {isa}; an ISA is 0 to {len(abi.ISA_NAMES) - 1} ("
                              + ", ".join(f"{i} {n}" for i, n in enumerate(abi.ISA_NAMES)) + ")")
        if not 1 <= threads <= 256:
            raise BundleError(f"results file {p}: the run at byte {start} (case {index}) has "
                              f"{threads} threads; a thread count is 1 to 256")
        bc = bundle.cases[index]
        run = Run(index, abi.ISA_NAMES[isa], threads, [], CRASH, "", complete=False, at=start)
        calls = bc.calls
        if n > len(calls):
            raise BundleError(f"results file {p}: case {bc.name} has {len(calls)} calls, the "
                              f"run at byte {start} records {n}")
        for k in range(n):
            rc, flags, nw = r.unpack("<iII")
            if flags & ~FLAG_BITS:
                raise BundleError(f"results file {p}: call {k} of case {bc.name} in the run at "
                                  f"byte {start} has flags 0x{flags:x}; only bits 0 to 3 are "
                                  "defined")
            written = []
            for _ in range(nw):
                b, offset, nbytes = r.unpack("<IQQ") if version == 2 else (
                    r.unpack("<I"), 0, r.unpack("<Q"))
                _check_written(p, bc, calls[k], k, b, offset, nbytes, whole=version == 1)
                _check_apart(p, bc, k, written, b, offset, nbytes)
                written.append((b, offset, r.take(nbytes)))
            run.calls.append((rc, flags, written))
        status, msg = r.unpack("<I"), r.text()
        r.magic(b"END_", f"the end of the run of case {index} that starts at byte {start}")
    except EOFError:
        if run is None:
            raise BundleError(f"results file {p} ends inside a run header at byte {start} "
                              "(truncated)") from None
        if r.data.endswith(b"END_"):          # it ends with a whole record: no run cut short
            raise BundleError(f"results file {p}: the run at byte {start} (case "
                              f"{bundle.cases[run.case].name}) claims more bytes than the file "
                              "holds, yet the file ends with a complete record: a length in "
                              "it is damaged") from None
        r.at = len(r.data)                    # (the rest is this run's, cut short)
        run.msg = ("the runner stopped during this run: the results file ends inside its "
                   "record (killed, or out of memory?)")
        return run
    except UnicodeDecodeError:
        raise BundleError(f"results file {p}: the run at byte {start} has a message that is "
                          "not UTF-8") from None
    _check_status(p, bc, n, status, run.calls, start)
    run.status, run.msg, run.complete = status, msg, True
    return run


def _check_written(p, bc: BundleCase, call: Call, k: int, b: int, offset: int,
                   nbytes: int, whole: bool) -> None:
    writable = {buf for _, buf, _, written in call.pointers() if written}
    if b >= len(bc.buffers):
        raise BundleError(f"results file {p}: call {k} of case {bc.name} ({call.name}) records "
                          f"buffer {b}, but the case has buffers 0 to {len(bc.buffers) - 1}")
    if b not in writable:
        raise BundleError(f"results file {p}: call {k} of case {bc.name} ({call.name}) records "
                          f"buffer {b}, which that call does not write")
    if offset + nbytes > bc.buffers[b].nbytes or (whole and nbytes != bc.buffers[b].nbytes):
        raise BundleError(f"results file {p}: call {k} of case {bc.name} records bytes "
                          f"{offset}..{offset + nbytes} of buffer {b}, which has "
                          f"{bc.buffers[b].nbytes} "
                          f"({bc.buffers[b].n} x {bc.buffers[b].dtype}): sizes that do not "
                          "match the bundle's buffers")


def _check_apart(p, bc: BundleCase, k: int, written, b: int, offset: int, nbytes: int) -> None:
    """A call's records of one buffer hold disjoint bytes: two records of the same byte are two
    answers for it."""
    for other, at, data in written:
        if other == b and offset < at + len(data) and at < offset + nbytes:
            raise BundleError(f"results file {p}: call {k} of case {bc.name} records bytes "
                              f"{at}..{at + len(data)} and {offset}..{offset + nbytes} of "
                              f"buffer {b}: a call's records of a buffer do not overlap")


def _check_status(p, bc, n, status, calls, start) -> None:
    total = len(bc.calls)
    bad = None
    if status >= len(STATUSES):
        bad = f"unknown status {status}"
    elif status == OK and n != total:
        bad = f"status ok after {n} of {total} calls"
    elif status == RC and (not calls or calls[-1][0] == 0):
        bad = "status 'a call returned non-zero' but its last call returned 0"
    elif status == MISSING and n >= total:
        bad = f"status {STATUSES[status]!r} after all {total} calls returned"
    if bad:
        raise BundleError(f"results file {p}: the run of case {bc.name} at byte {start}: {bad}")
