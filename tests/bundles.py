"""A throwaway case-bundle writer and a results reader for crnn-run's tests (the gate's own
`export` and `grade` are other modules; this one exists only so the runner can be tested on
its own). A case is run once on the reference port through its layer module with a tape
recording every call (harness/reference.py `record`), and the tape becomes the case's ops in
the bundle format (docs/case-bundle.md).

    cases = fixture_cases([("linear", "linear", "T16_I37_*")])
    write_bundle(dir, cases)          # -> the recorded reference runs, one per case
    runs = read_results(path)         # the header and every run record
"""
from __future__ import annotations

import ctypes as C
import fnmatch
import hashlib
import json
import struct
from pathlib import Path

import numpy as np

from crnn_conformance.ctypes_kernels import abi
from crnn_conformance.generators import h5io
from crnn_conformance.harness import reference
from crnn_conformance.harness.records import FIXTURES_DIR

DTYPE_CODES = {"<f4": 1, "<f8": 2, "<i4": 3, "<i8": 4}
POISON = {1: struct.pack("<I", 0x7FE5A5A5), 2: struct.pack("<Q", 0x7FFDA5A5A5A5A5A5),
          3: struct.pack("<I", 0x5A5A5A5A), 4: struct.pack("<Q", 0x7FFDA5A5A5A5A5A5)}


def fixture_cases(selection) -> list:
    """[(layer, fixture, Case)] for (layer, fixture file stem, case glob) triples."""
    out = []
    for layer, stem, pattern in selection:
        for case in h5io.read_fixture(Path(FIXTURES_DIR) / f"{stem}.h5").cases:
            if fnmatch.fnmatch(case.name, pattern):
                out.append((layer, stem, case))
    return out


def _u32(v): return struct.pack("<I", v)


def _buffers(sym, inputs) -> tuple[bytes, list]:
    """The buffer table of a case and each buffer's (dtype code, bytes per element)."""
    first = {}
    for op in sym["ops"]:
        for i, content in op[4]:
            first.setdefault(i, content)
    out, kinds = [_u32(len(sym["buffers"]))], []
    for i, (shape, dtype, kind, name) in enumerate(sym["buffers"]):
        code = DTYPE_CODES[np.dtype(dtype).str]
        n = int(np.prod(shape)) if len(shape) else 1
        if kind == "input":
            role, content = 0, np.ascontiguousarray(inputs[name], np.dtype(dtype)).tobytes()
        else:
            content = first.get(i)
            size = np.dtype(dtype).itemsize
            role = 1 if content is None or content == POISON[code] * n else 2
            content = content if role == 2 else b""
            assert len(content) in (0, n * size)
        out.append(struct.pack("<BBHQ", code, role, 0, n) + content)
        kinds.append((code, np.dtype(dtype).itemsize))
    return b"".join(out), kinds


def _call(name, ints, dbls, kinds) -> bytes:
    ints, dbls = iter(ints), iter(dbls)
    args = []
    for t in abi.SIGNATURES[name][1]:
        if t is C.c_double:
            args.append(struct.pack("<Bd", 2, next(dbls)))
        elif t is C.c_void_p:
            v = next(ints)
            if isinstance(v, (tuple, list)):
                buf, off = v
                args.append(struct.pack("<BII", 3, buf, off // kinds[buf][1]))
            else:
                args.append(struct.pack("<Bq", 4, 0))
        else:
            args.append(struct.pack("<Bq", 0 if t is C.c_int32 else 1, int(next(ints))))
    nm = name.encode()
    return struct.pack("<BH", 0, len(nm)) + nm + struct.pack("<H", len(args)) + b"".join(args)


def _case_bytes(index, label, layer, sym, inputs) -> bytes:
    table, kinds = _buffers(sym, inputs)
    ops = []
    for kind, name, ints, dbls, *_ in sym["ops"]:
        if kind == 0:
            ops.append(_call(name, ints, dbls, kinds))
        else:
            (bd, od), (bs, os_), n = ints
            ops.append(struct.pack("<BIQIQQ", 1, bd, od, bs, os_, n))
    nm, ly = label.encode(), layer.encode()
    return (b"CASE" + _u32(index) + _u32(len(nm)) + nm + _u32(len(ly)) + ly + table
            + _u32(len(ops)) + b"".join(ops))


def write_bundle(out_dir, cases) -> list:
    """Writes out_dir/cases.bin and bundle.json for [(layer, fixture, Case)]; -> the
    reference's reference.Recorded of each case, in order."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    parts, recorded, meta = [], [], []
    for i, (layer, fixture, case) in enumerate(cases):
        rec = reference.record(layer, case.params, case.inputs)
        assert rec.symbolic is not None, (layer, case.name)
        label = f"{layer}/{fixture}/{case.name}"
        parts.append(_case_bytes(i, label, layer, rec.symbolic, case.inputs))
        recorded.append(rec)
        meta.append({"index": i, "layer": layer, "fixture": fixture, "case": case.name,
                     "ops": len(rec.symbolic["ops"])})
    data = b"CRNNCB01" + _u32(1) + _u32(len(parts)) + b"".join(parts)
    (out_dir / "cases.bin").write_bytes(data)
    (out_dir / "bundle.json").write_text(json.dumps(
        {"format": "crnn-case-bundle", "version": 1, "abi_version": abi.ABI_VERSION,
         "digest": hashlib.sha256(data).hexdigest(), "tool": "tests/bundles.py",
         "cases": meta}))
    return recorded


def read_results(path) -> dict:
    """{"version", "digest", "platform", "runs": [{"case", "isa", "threads", "calls": [(rc,
    flags, {buffer: (byte offset, bytes)})], "status", "msg"}]}; asserts the file is well
    formed and complete. Version 1 records whole buffers (offset 0), version 2 spans."""
    data = Path(path).read_bytes()
    version = struct.unpack_from("<I", data, 8)[0]
    assert data[:8] == b"CRNNRS01" and version in (1, 2)
    digest = data[12:76].decode()
    (plen,) = struct.unpack_from("<I", data, 76)
    platform = json.loads(data[80:80 + plen])
    at, runs = 80 + plen, []
    while at < len(data):
        assert data[at:at + 4] == b"RUN_", at
        case, isa, threads, n_calls = struct.unpack_from("<IiiI", data, at + 4)
        at += 20
        calls = []
        for _ in range(n_calls):
            rc, flags, nw = struct.unpack_from("<iII", data, at)
            at += 12
            written = {}
            for _ in range(nw):
                if version == 1:
                    (buf, nb), off, head = struct.unpack_from("<IQ", data, at), 0, 12
                else:
                    (buf, off, nb), head = struct.unpack_from("<IQQ", data, at), 20
                assert buf not in written
                written[buf] = (off, data[at + head:at + head + nb])
                at += head + nb
            calls.append((rc, flags, written))
        status, ml = struct.unpack_from("<II", data, at)
        msg = data[at + 8:at + 8 + ml].decode()
        at += 8 + ml
        assert data[at:at + 4] == b"END_", at
        at += 4
        runs.append({"case": case, "isa": isa, "threads": threads, "calls": calls,
                     "status": status, "msg": msg})
    return {"version": version, "digest": digest, "platform": platform, "runs": runs}


def read_bundle(bundle_dir) -> list:
    """Each case of bundle_dir/cases.bin as {"buffers": [bytearray, its initial content],
    "ops": [("call", name) | ("copy", dst, dst_off, src, src_off, n)]}."""
    data = (Path(bundle_dir) / "cases.bin").read_bytes()
    assert data[:8] == b"CRNNCB01"
    (n_cases,), at, cases = struct.unpack_from("<I", data, 12), 16, []
    for _ in range(n_cases):
        assert data[at:at + 4] == b"CASE"
        at += 8
        for _ in range(2):                                   # name, layer
            at += 4 + struct.unpack_from("<I", data, at)[0]
        (nb,), at, buffers = struct.unpack_from("<I", data, at), at + 4, []
        for _ in range(nb):
            code, role, _, n = struct.unpack_from("<BBHQ", data, at)
            at += 12
            size = 4 if code in (1, 3) else 8
            if role == 1:
                buffers.append(bytearray(POISON[code] * n))
            else:
                buffers.append(bytearray(data[at:at + n * size]))
                at += n * size
        (n_ops,), at, ops = struct.unpack_from("<I", data, at), at + 4, []
        for _ in range(n_ops):
            kind, at = data[at], at + 1
            if kind == 0:
                (ln,) = struct.unpack_from("<H", data, at)
                name = data[at + 2:at + 2 + ln].decode()
                (na,) = struct.unpack_from("<H", data, at + 2 + ln)
                at += 4 + ln + 9 * na
                ops.append(("call", name))
            else:
                ops.append(("copy", *struct.unpack_from("<IQIQQ", data, at)))
                at += 32
        cases.append({"buffers": buffers, "ops": ops})
    assert at == len(data)
    return cases


def final_written(case, run) -> dict:
    """{buffer: its bytes at the end of the run} of every buffer a call record of `run` wrote:
    the case's buffers from the bundle, its copies made and each call's records applied, in
    order (a run that ended early: up to its last call record)."""
    bufs = [bytearray(b) for b in case["buffers"]]
    calls, touched = iter(run["calls"]), set()
    for op in case["ops"]:
        if op[0] == "copy":
            _, dst, doff, src, soff, n = op
            bufs[dst][doff:doff + n] = bufs[src][soff:soff + n]
            continue
        rec = next(calls, None)
        if rec is None:
            break
        for buf, (off, data) in rec[2].items():
            bufs[buf][off:off + len(data)] = data
            touched.add(buf)
    return {b: bytes(bufs[b]) for b in touched}


def reference_written(rec) -> dict:
    """{buffer: bytes} of a reference run's written buffers (reference.Recorded.blob in the
    tape's order: every buffer it used that is not an input)."""
    sym, out, at = rec.symbolic, {}, 0
    seen = set(sym["seen"])
    for i, (shape, dtype, kind, _) in enumerate(sym["buffers"]):
        if i in seen and kind != "input":
            n = (int(np.prod(shape)) if len(shape) else 1) * np.dtype(dtype).itemsize
            out[i] = rec.blob[at:at + n]
            at += n
    assert at == len(rec.blob)
    return out
