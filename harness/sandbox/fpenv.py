"""The floating-point environment of the worker: FTZ, DAZ, the rounding mode and the exception
masks, read from MXCSR (x86) or FPCR (aarch64) through a tiny harness-side C helper compiled
into the build cache, or, without a C compiler, probed with NumPy arithmetic. The same helper
records the address of a SIGSEGV / SIGBUS for the gate's crash report (harness/sandbox/executor.py)
and makes the guard checks around a port call in one call (harness/sandbox/guard.py).
"""
from __future__ import annotations

import ctypes
from pathlib import Path

import numpy as np

# The helper's C (fpenv.c, package data); its text is part of the build cache key.
SOURCE = Path(__file__).with_name("fpenv.c")
FPENV_SOURCE = SOURCE.read_text()

MXCSR_FTZ, MXCSR_DAZ, FPCR_FZ = 1 << 15, 1 << 6, 1 << 24
MXCSR_MASKS, MXCSR_RC = 0x1F80, 13          # the six exception masks; rounding control bits
FPCR_TRAPS, FPCR_RMODE = 0x9F00, 22         # trap enables; rounding mode bits
ROUNDING = {"mxcsr": ("nearest", "down", "up", "toward zero"),
            "fpcr": ("nearest", "up", "down", "toward zero")}


def helper_source() -> str:
    """The helper's whole source: fpenv.c, then the worker's replay of repeat runs
    (harness/sandbox/replay.c, with the ABI's prototypes)."""
    from . import replay
    return FPENV_SOURCE + "\n" + replay.source()


def fpenv_helper():
    """The helper library (ctypes), or None when it cannot be built (no C compiler)."""
    from ...ctypes_kernels.build import BuildError, build_helper
    try:
        return load_helper(build_helper("crnnfpenv", helper_source()))
    except (BuildError, OSError):
        return None


def load_helper(path):
    lib = ctypes.CDLL(str(path))
    lib.crnn_h_arch.restype, lib.crnn_h_arch.argtypes = ctypes.c_int32, []
    lib.crnn_h_fpcsr.restype, lib.crnn_h_fpcsr.argtypes = ctypes.c_uint32, []
    lib.crnn_h_set_fpcsr.restype, lib.crnn_h_set_fpcsr.argtypes = None, [ctypes.c_uint32]
    lib.crnn_h_catch_faults.restype = ctypes.c_int32
    lib.crnn_h_catch_faults.argtypes = [ctypes.c_void_p]
    check = getattr(lib, "crnn_h_guard_check", None)   # None: guard.py's memcmp way
    if check is not None:
        check.restype = ctypes.c_int32
        check.argtypes = [ctypes.c_void_p, ctypes.c_int32, ctypes.c_void_p]
    from . import replay
    lib.replays = replay.declare(lib)                 # False: the worker replays nothing
    return lib


def fpenv(helper) -> dict:
    """{"ftz", "daz", "rounding", "unmasked", "register", "method"} for the calling thread."""
    if helper is not None and helper.crnn_h_arch() in (1, 2):
        v = int(helper.crnn_h_fpcsr())
        if helper.crnn_h_arch() == 1:
            return {"ftz": bool(v & MXCSR_FTZ), "daz": bool(v & MXCSR_DAZ),
                    "rounding": ROUNDING["mxcsr"][(v >> MXCSR_RC) & 3],
                    "unmasked": (v & MXCSR_MASKS) != MXCSR_MASKS,
                    "register": f"MXCSR=0x{v:04x}", "method": "mxcsr"}
        return {"ftz": bool(v & FPCR_FZ), "daz": bool(v & FPCR_FZ),
                "rounding": ROUNDING["fpcr"][(v >> FPCR_RMODE) & 3],
                "unmasked": bool(v & FPCR_TRAPS),
                "register": f"FPCR=0x{v:08x}", "method": "fpcr"}
    # No helper: observe the effect. Half the smallest normal is subnormal unless FTZ;
    # a subnormal times 2^24 is normal unless DAZ reads the subnormal as zero; 1 + 2^-25
    # rounds to 1 and 1 + 3*2^-25 to 1 + 2^-23 only when rounding to nearest.
    f = np.float32
    tiny = np.array([0x00800000], np.uint32).view(f)
    sub = np.array([0x00400000], np.uint32).view(f)
    ftz = int((tiny * f(0.5)).view(np.uint32)[0]) == 0
    daz = int((sub * f(16777216.0)).view(np.uint32)[0]) == 0
    one = np.ones(2, f)
    r = one + np.array([2.0 ** -25, 3 * 2.0 ** -25], f)
    nearest = r[0] == f(1) and r[1] == f(1 + 2.0 ** -23)
    return {"ftz": ftz, "daz": daz, "rounding": "nearest" if nearest else "not to nearest",
            "unmasked": False, "register": "unknown (no C compiler for the helper)",
            "method": "numpy-probe"}


def fp_problem(env: dict, when: str) -> str | None:
    found = [n for n, on in (("flush-to-zero (FTZ)", env["ftz"]),
                             ("denormals-are-zero (DAZ)", env["daz"]),
                             (f"rounding {env.get('rounding')}", env.get("rounding", "nearest") != "nearest"),
                             ("unmasked floating-point exceptions", env.get("unmasked"))) if on]
    if not found:
        return None
    return (f"{' and '.join(found)} found set {when} ({env['register']}); results would not be "
            "IEEE binary32 round-to-nearest")


def fp_checker(helper):
    """The fast check around every call, as a function of no arguments: True when the control
    register holds no flag fp_problem names (the architecture is looked up once)."""
    arch = helper.crnn_h_arch() if helper is not None else 0
    read = helper.crnn_h_fpcsr if arch else None
    if arch == 1:
        bad = MXCSR_FTZ | MXCSR_DAZ | 3 << MXCSR_RC
        return lambda: not (v := read()) & bad and v & MXCSR_MASKS == MXCSR_MASKS
    if arch == 2:
        bad = FPCR_FZ | 3 << FPCR_RMODE | FPCR_TRAPS
        return lambda: not read() & bad
    return lambda: fp_problem(fpenv(helper), "") is None


class FpEnvError(RuntimeError):
    """The floating-point environment is not IEEE round-to-nearest (gate exit 2)."""
