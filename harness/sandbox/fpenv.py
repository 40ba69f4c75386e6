"""The floating-point environment of the worker: FTZ, DAZ, the rounding mode and the exception
masks, read from MXCSR (x86) or FPCR (aarch64) through a tiny harness-side C helper compiled
into the build cache, or, without a C compiler, probed with NumPy arithmetic. The same helper
records the address of a SIGSEGV / SIGBUS for the gate's crash report (harness/sandbox/executor.py)
and makes the guard checks around a port call in one call (harness/sandbox/guard.py).
"""
from __future__ import annotations

import ctypes

import numpy as np

FPENV_SOURCE = r"""
#define _GNU_SOURCE
#include <signal.h>
#include <stdint.h>
#include <string.h>
#if defined(__linux__) && defined(__x86_64__)
#include <ucontext.h>
#endif
/* SIGSEGV / SIGBUS: record the fault address (and on x86-64 Linux whether it was a write) in
   the slot shared with the gate, then let the default action end the process: SA_RESETHAND
   restored it, so returning repeats the faulting access; a signal sent by kill/raise is
   raised again. */
static volatile uint64_t *g_fault;
static void on_fault(int sig, siginfo_t *si, void *ctx)
{
    uint64_t flags = 1;
#if defined(__linux__) && defined(__x86_64__)
    if (((ucontext_t *)ctx)->uc_mcontext.gregs[REG_ERR] & 2) flags |= 2;
#else
    (void)ctx;
#endif
    if (g_fault) { g_fault[0] = (uint64_t)(uintptr_t)si->si_addr; g_fault[1] = flags; }
    if (si->si_code <= 0) raise(sig);
}
int32_t crnn_h_catch_faults(uint64_t *slot)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_fault;
    sa.sa_flags = SA_SIGINFO | SA_RESETHAND | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    g_fault = slot;
    return sigaction(SIGSEGV, &sa, 0) == 0 && sigaction(SIGBUS, &sa, 0) == 0 ? 0 : -1;
}
/* The guard checks around a port call (harness/sandbox/guard.py) in one call: rec holds five
   addresses a buffer, {zone_lo, lo, hi, zone_hi, ref}. Both canary zones must hold
   `pattern`, and when ref is not 0 the data [lo, hi) must equal the bytes at ref (a const
   argument). -> the index of the first buffer that fails, or -1. */
int32_t crnn_h_guard_check(const uint64_t *rec, int32_t n, const uint8_t *pattern)
{
    for (int32_t i = 0; i < n; i++) {
        const uint64_t *r = rec + 5 * (int64_t)i;
        if (memcmp((const void *)(uintptr_t)r[0], pattern, r[1] - r[0]) != 0
            || memcmp((const void *)(uintptr_t)r[2], pattern, r[3] - r[2]) != 0
            || (r[4] && memcmp((const void *)(uintptr_t)r[1], (const void *)(uintptr_t)r[4],
                               r[2] - r[1]) != 0))
            return i;
    }
    return -1;
}
#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
int32_t crnn_h_arch(void) { return 1; }
uint32_t crnn_h_fpcsr(void) { return _mm_getcsr(); }
void crnn_h_set_fpcsr(uint32_t v) { _mm_setcsr(v); }
#elif defined(__aarch64__)
int32_t crnn_h_arch(void) { return 2; }
uint32_t crnn_h_fpcsr(void) { uint64_t v; __asm__ volatile("mrs %0, fpcr" : "=r"(v)); return (uint32_t)v; }
void crnn_h_set_fpcsr(uint32_t v) { uint64_t x = v; __asm__ volatile("msr fpcr, %0" : : "r"(x)); }
#else
int32_t crnn_h_arch(void) { return 0; }
uint32_t crnn_h_fpcsr(void) { return 0; }
void crnn_h_set_fpcsr(uint32_t v) { (void)v; }
#endif
"""
MXCSR_FTZ, MXCSR_DAZ, FPCR_FZ = 1 << 15, 1 << 6, 1 << 24
MXCSR_MASKS, MXCSR_RC = 0x1F80, 13          # the six exception masks; rounding control bits
FPCR_TRAPS, FPCR_RMODE = 0x9F00, 22         # trap enables; rounding mode bits
ROUNDING = {"mxcsr": ("nearest", "down", "up", "toward zero"),
            "fpcr": ("nearest", "up", "down", "toward zero")}


def helper_source() -> str:
    """The helper's whole source: the above, then the worker's replay of repeat runs
    (harness/sandbox/replay.c, with the ABI's prototypes)."""
    from crnn_conformance.harness.sandbox import replay
    return FPENV_SOURCE + "\n" + replay.source()


def fpenv_helper():
    """The helper library (ctypes), or None when it cannot be built (no C compiler)."""
    from crnn_conformance.ctypes_kernels.build import BuildError, build_helper
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
    from crnn_conformance.harness.sandbox import replay
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
