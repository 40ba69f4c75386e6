"""The port ABI seen from Python: symbols, signatures, and a checked ctypes loader.

Mirrors crnn_port.h. `load(path, layers)` opens a port, checks its ABI version and that every
symbol the requested layers need is exported (naming all that are missing), and declares the
argument types so a call cannot silently pass a wrong width.
"""
from __future__ import annotations

import ctypes as C
from pathlib import Path

ABI_VERSION = 1
ISA_NAMES = ("scalar", "sse", "avx2", "avx512")
ERRORS = {0: "CRNN_OK", -1: "CRNN_E_ARG", -2: "CRNN_E_ISA", -3: "CRNN_E_NOMEM",
          -4: "CRNN_E_UNSUPPORTED"}
E_UNSUPPORTED = -4

P = C.c_void_p
i32, i64, u32, f64 = C.c_int32, C.c_int64, C.c_uint32, C.c_double

SIGNATURES = {
    "crnn_abi_version": (i32, []),
    "crnn_isa_available": (u32, []),
    "crnn_set_isa": (i32, [i32]),
    "crnn_get_isa": (i32, []),
    "crnn_set_threads": (i32, [i32]),
    "crnn_get_threads": (i32, []),
    "crnn_dot16": (i32, [P, P, i64, P]),
    "crnn_linear_forward": (i32, [P, P, P, i32, i32, i32, P]),
    "crnn_linear_backward": (i32, [P, P, P, i32, i32, i32, P, P, P]),
    "crnn_conv_forward": (i32, [P, i32, i32, i32, P, P, i32, i32, i32, i32, i32, i32, i32,
                                P, P, P]),
    "crnn_conv_backward": (i32, [P, i32, i32, i32, P, i32, i32, i32, i32, i32, i32, i32,
                                 P, P, P, P, P]),
    "crnn_lstm_forward": (i32, [P, i32, i32, i32, P, P, P, P, P, P, P, P]),
    "crnn_lstm_backward": (i32, [P, i32, i32, i32, P, P, P, P, P, P, P, P, P, P, P]),
    "crnn_sigmoid": (i32, [P, i64, P]),
    "crnn_tanh": (i32, [P, i64, P]),
    "crnn_detmath_exp": (i32, [P, i64, P]),
    "crnn_detmath_log": (i32, [P, i64, P]),
    "crnn_ctc": (i32, [P, i32, i32, P, i32, f64, P, P]),
    "crnn_model_sizes": (i32, [P, P, P]),
    "crnn_step_gradients": (i32, [P, P, i32, P, P, P, P, P, P, P]),
    "crnn_clip_gradients": (i32, [P, P, i32, f64, i32, P]),
    "crnn_adamw": (i32, [P, P, P, P, i64, f64, f64, f64, f64, f64, i32, f64, f64]),
}

# The argument names of crnn_port.h, in order; a leading * marks a pointer the call writes
# (every other pointer is const). The worker names buffers by them (harness/guard.py);
# tests/test_guards.py checks the table against the header.
ARGS = {
    "crnn_set_isa": "isa",
    "crnn_set_threads": "n",
    "crnn_dot16": "a b n *out",
    "crnn_linear_forward": "x W b T I O *y",
    "crnn_linear_backward": "x W dY T I O *dx *dW *db",
    "crnn_conv_forward": "x H W C Wt b Out kh kw padH padW poolH poolW *conv *pooled *winners",
    "crnn_conv_backward": "x H W C Wt Out kh kw padH padW poolH poolW dPooled winners *dW *db *dx",
    "crnn_lstm_forward": "x T I H W_ih W_hh b *out *gates *c *tc *hPrev",
    "crnn_lstm_backward": "x T I H W_ih W_hh gates c tc hPrev dOut *dW_ih *dW_hh *db *dx",
    "crnn_sigmoid": "x n *y",
    "crnn_tanh": "x n *y",
    "crnn_detmath_exp": "x n *y",
    "crnn_detmath_log": "x n *y",
    "crnn_ctc": "logits T K target L scale *loss *dlogits",
    "crnn_model_sizes": "cfg *nTensors *sizes",
    "crnn_step_gradients": "cfg params B widths images targetLens targets *grads *losses *batchLoss",
    "crnn_clip_gradients": "*grads sizes nTensors limit enabled *norm",
    "crnn_adamw": "*p *m *v g n lr beta1 beta2 eps wd decay b1t b2t",
}


def pointer_args(name: str) -> list[tuple[int, str, bool]]:
    """(position, argument name, written) of every pointer argument of entry point `name`."""
    args = SIGNATURES[name][1]
    return [(i, a.lstrip("*"), a.startswith("*")) for i, (a, t) in
            enumerate(zip(ARGS.get(name, "").split(), args)) if t is P]


CORE = ["crnn_abi_version", "crnn_isa_available", "crnn_set_isa", "crnn_get_isa",
        "crnn_set_threads", "crnn_get_threads"]
LAYER_SYMBOLS = {
    "dot16": ["crnn_dot16"],
    "linear": ["crnn_linear_forward", "crnn_linear_backward"],
    "conv": ["crnn_conv_forward", "crnn_conv_backward"],
    "lstm": ["crnn_lstm_forward", "crnn_lstm_backward", "crnn_sigmoid", "crnn_tanh"],
    "ctc": ["crnn_ctc", "crnn_detmath_exp", "crnn_detmath_log"],
    "step": ["crnn_model_sizes", "crnn_step_gradients"],
    "clip": ["crnn_clip_gradients"],
    "adamw": ["crnn_adamw"],
    "train3": ["crnn_model_sizes", "crnn_step_gradients", "crnn_clip_gradients", "crnn_adamw"],
}


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

