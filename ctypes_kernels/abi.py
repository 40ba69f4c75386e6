"""The port ABI seen from Python: symbols, signatures, and a checked ctypes loader.

Mirrors crnn_port.h through the table of entry points (layer_table.py). `load(path, layers)`
opens a port, checks its ABI version and that every symbol the requested layers need is
exported (naming all that are missing), and declares the argument types so a call cannot
silently pass a wrong width.
"""
from __future__ import annotations

import ctypes as C
from pathlib import Path

from . import layer_table

ABI_VERSION = 1
ISA_NAMES = ("scalar", "sse", "avx2", "avx512", "neon")
# The ISA paths of each architecture, by the names its machines go by (platform.machine(), a
# results file's arch, lowercase), with the CPU flags a path of that name needs there (its
# instructions; how a port gets its fma on them is the port's).
ARCHITECTURES = {
    "x86-64": ({"x86_64", "amd64", "x64", "x86", "i386", "i486", "i586", "i686"},
               {"scalar": (), "sse": (), "avx2": ("avx2",), "avx512": ("avx512f",)}),
    "aarch64": ({"aarch64", "arm64", "armv7", "armv7l", "armv8", "armv8l"},
                {"scalar": (), "neon": ()}),
}


def architecture(machine) -> tuple[str, dict] | None:
    """(the architecture's name, {ISA path: CPU flags it needs}) of a machine name (any case,
    `-` for `_`), or None for a name no architecture here goes by."""
    m = machine.lower().replace("-", "_") if isinstance(machine, str) else None
    return next(((name, paths) for name, (names, paths) in ARCHITECTURES.items() if m in names),
                None)
ERRORS = {0: "CRNN_OK", -1: "CRNN_E_ARG", -2: "CRNN_E_ISA", -3: "CRNN_E_NOMEM",
          -4: "CRNN_E_UNSUPPORTED"}
E_UNSUPPORTED = -4

P = C.c_void_p
i32, i64, u32, f64 = C.c_int32, C.c_int64, C.c_uint32, C.c_double

# Derived from the one table of entry points (layer_table.py): the ctypes signature of each,
# its argument names in crnn_port.h's order with a leading * on a pointer the call writes
# (every other pointer is const; the worker names buffers by them, harness/sandbox/guard.py), and its
# buffers: dtype, shape (an expression in the call's integer arguments and the derived sizes
# below), role and whether NULL is allowed. Roles: "in" (const), "out" (written whole,
# poisoned first), "inout" (read and updated in place). BUFFERS is the one description for
# every consumer that must know a buffer's size without a layer module: the contract tier's
# invalid calls, Python ports' array views and the case bundle's calls.
_CTYPES = {"i32": i32, "i64": i64, "u32": u32, "f64": f64}


def _signature(proto: str):
    res, _name, args = layer_table.parse_proto(proto)
    return (_CTYPES[layer_table.C_TYPES[res]],
            [P if ptr else _CTYPES[layer_table.C_TYPES[t]] for t, ptr, _c, _a in args])


def _arg_names(proto: str) -> str:
    return " ".join(("*" if ptr and not const else "") + a
                    for _t, ptr, const, a in layer_table.parse_proto(proto)[2])


SIGNATURES = {e.name: _signature(e.proto) for e in layer_table.ENTRIES}
ARGS = {e.name: _arg_names(e.proto) for e in layer_table.ENTRIES if _arg_names(e.proto)}
BUFFERS = {e.name: e.buffers for e in layer_table.ENTRIES if e.buffers}
DTYPES = {"f32": "<f4", "f64": "<f8", "i32": "<i4", "i64": "<i8"}


class Buffer(tuple):
    """(name, dtype, shape, role, nullable) of one pointer argument of one call."""
    __slots__ = ()
    name = property(lambda s: s[0])
    dtype = property(lambda s: s[1])
    shape = property(lambda s: s[2])
    role = property(lambda s: s[3])
    nullable = property(lambda s: s[4])


def _cfg_sizes(cfg) -> dict:
    """The model's sizes from the ABI's int32 config vector (crnn_port.h): NCFG, NT (tensors),
    NP (parameter elements), and the tensor sizes in parameter order; None when the vector is
    too short to be read."""
    cfg = [int(v) for v in cfg]
    if len(cfg) < 3 or cfg[2] < 0 or len(cfg) < 3 + 7 * cfg[2] + 3:
        return None
    H, C, nb = cfg[0], cfg[1], cfg[2]
    sizes = []
    for k in range(nb):
        out, kh, kw, padH, padW, poolH, poolW = cfg[3 + 7 * k:10 + 7 * k]
        sizes += [out * ((kh * kw * C + 15) // 16 * 16), out]
        H = (H + 2 * padH - kh + 1) // max(poolH, 1)
        C = out
    nl, hid, classes = cfg[3 + 7 * nb:6 + 7 * nb]
    inp = H * C
    for _ in range(nl):
        for _d in range(2):
            sizes += [4 * hid * inp, 4 * hid * hid, 4 * hid]
        inp = 2 * hid
    sizes += [classes * 2 * hid, classes]   # (nLstm >= 1: the ABI refuses 0)
    return {"NCFG": 6 + 7 * nb, "NT": len(sizes), "NP": sum(sizes), "sizes": sizes,
            "H_in": cfg[0], "C_in": cfg[1]}


def _derived(name: str, ints: dict, read) -> dict:
    """The sizes a BUFFERS shape may name beyond the call's integer arguments. `read(arg,
    dtype, n)` returns the first n values of an input buffer (the model's calls size their
    buffers from cfg, widths and targetLens)."""
    d = dict(ints)
    if "kh" in d:
        Hc = d["H"] + 2 * d["padH"] - d["kh"] + 1
        Wc = d["W"] + 2 * d["padW"] - d["kw"] + 1
        d.update(KP=(d["kh"] * d["kw"] * d["C"] + 15) // 16 * 16, P=Hc * Wc,
                 Hp=Hc // d["poolH"] if d["poolH"] > 0 else 0,
                 Wp=Wc // d["poolW"] if d["poolW"] > 0 else 0)
    if "H" in d and name.startswith("crnn_lstm"):
        d.update(G=4 * d["H"], H2=2 * d["H"])
    if name in ("crnn_model_sizes", "crnn_step_gradients"):
        head = read("cfg", "i32", 3)
        nb = int(head[2]) if len(head) == 3 else -1
        m = _cfg_sizes(read("cfg", "i32", 6 + 7 * nb)) if nb >= 0 else None
        if m is None:
            raise ValueError("cfg cannot be read")
        d.update(NCFG=m["NCFG"], NT=m["NT"], NP=m["NP"])
        if name == "crnn_step_gradients":
            B = d["B"]
            d["NPIX"] = int(sum(int(w) for w in read("widths", "i32", B))) * m["H_in"] * m["C_in"]
            d["NLAB"] = int(sum(int(n) for n in read("targetLens", "i32", B)))
    if name == "crnn_clip_gradients":
        d["NG"] = int(sum(int(s) for s in read("sizes", "i64", d["nTensors"])))
    return d


def buffers(name: str, ints: dict, read=None) -> list[Buffer]:
    """The pointer arguments of a call of `name` with integer arguments `ints` ({arg name:
    value}), in argument order, each with its dtype, shape, role and whether NULL is allowed.
    Raises ValueError when a size cannot be derived (e.g. a cfg too short to read)."""
    d = _derived(name, ints, read or (lambda *a: []))
    out = []
    for arg, dt, dims, role, nullable in layer_table.parse_buffers(BUFFERS[name]):
        shape = tuple(int(d[e]) if e in d else int(e) for e in dims.split(","))
        out.append(Buffer((arg, DTYPES[dt], shape, role, nullable)))
    return out


def pointer_args(name: str) -> list[tuple[int, str, bool]]:
    """(position, argument name, written) of every pointer argument of entry point `name`."""
    args = SIGNATURES[name][1]
    return [(i, a.lstrip("*"), a.startswith("*")) for i, (a, t) in
            enumerate(zip(ARGS.get(name, "").split(), args)) if t is P]


CORE = [e.name for e in layer_table.ENTRIES if e.control]
LAYER_SYMBOLS = {lay.name: list(lay.entries) for lay in layer_table.LAYERS}


class PortError(RuntimeError):
    """The port cannot be run at all (gate exit code 2)."""


def required_symbols(layers) -> list[str]:
    need = list(CORE)
    for layer in layers:
        need += [s for s in LAYER_SYMBOLS[layer] if s not in need]
    return need


def has(lib, name: str) -> bool:
    """Whether `lib` exports `name`. (hasattr is not enough: for a library whose path is not
    UTF-8, ctypes' message for a missing symbol raises UnicodeDecodeError.)"""
    try:
        getattr(lib, name)
    except (AttributeError, UnicodeError):
        return False
    return True


def exported(lib) -> list[str]:
    """The ABI's symbols that `lib` exports (SIGNATURES order)."""
    return [s for s in SIGNATURES if has(lib, s)]


def missing_message(path, present, layers, hint: bool = True) -> str:
    """One line: the symbols the requested layers need that the port lacks, grouped by layer,
    and, when the core is complete, the hint to gate only the layers it implements."""
    present = set(present)
    missing = [s for s in required_symbols(layers) if s not in present]
    groups = [("core", [s for s in CORE if s not in present])]
    groups += [(layer, [s for s in LAYER_SYMBOLS[layer] if s not in present]) for layer in layers]
    by_layer = "; ".join(f"{name}: {', '.join(syms)}" for name, syms in groups if syms)
    tail = (" (to gate only the layers it implements: --layers available)"
            if hint and not groups[0][1] else "")
    return f"port {path} is missing {len(missing)} symbol(s), by layer: {by_layer}{tail}"


def load(path, layers=tuple(LAYER_SYMBOLS)) -> C.CDLL:
    path = Path(path)
    if not path.exists():
        raise PortError(f"port library not found: {path}")
    try:
        lib = C.CDLL(str(path.resolve()))
    except OSError as e:
        raise PortError(f"port library {path} cannot be loaded: {e}") from None
    if any(not has(lib, s) for s in required_symbols(layers)):
        raise PortError(missing_message(path, exported(lib), layers))
    for name, (res, args) in SIGNATURES.items():
        if has(lib, name):
            fn = getattr(lib, name)
            fn.restype, fn.argtypes = res, args
    version = lib.crnn_abi_version()
    if version != ABI_VERSION:
        raise PortError(f"port {path} has ABI version {version}; this harness speaks version "
                        f"{ABI_VERSION} (crnn_port.h)")
    mask = lib.crnn_isa_available()
    if not mask & (1 << ISA_NAMES.index("scalar")):
        raise PortError(f"port {path}: crnn_isa_available() returned 0x{mask:x}, without bit 0 "
                        "(scalar), which every port must set (docs/port-abi.md)")
    return lib


def available_isas(lib) -> list[str]:
    mask = lib.crnn_isa_available()
    return [n for i, n in enumerate(ISA_NAMES) if mask & (1 << i)]


def check(rc: int, what: str) -> None:
    if rc != 0:
        raise PortCallError(f"{what} returned {rc} ({ERRORS.get(rc, 'unknown error code')})", rc)


class PortCallError(RuntimeError):
    """A port call returned an error code: a failure of that tensor, not of the run (under
    `--layers available`, CRNN_E_UNSUPPORTED makes the layer "not implemented" instead)."""

    def __init__(self, message: str, code: int | None = None):
        super().__init__(message)
        self.code = code

