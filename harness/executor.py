"""Runs a port in a worker process, so a crash or a hang is a reported failure, not the end.

The worker loads the port (checking its ABI), reads each case's inputs from the fixture
itself and sends back the outputs. A call that does not answer within the timeout is killed;
a worker that dies (segfault, abort) is reported with its signal and restarted for the rest.

The floating-point environment is checked in the worker before the port is loaded, right after
(a library built with -ffast-math may set flush-to-zero in its initialisation) and before every
call: flush-to-zero (FTZ) or denormals-are-zero (DAZ) would change results, so finding either
set is an error of the run (abi.PortError, gate exit 2), not a failure of a tensor. The check
reads MXCSR (x86) or FPCR (aarch64) through a tiny harness-side C helper compiled into the
build cache; without a C compiler it falls back to probing the effect with NumPy arithmetic.
"""
from __future__ import annotations

import ctypes
import multiprocessing as mp
import signal
import traceback
from pathlib import Path

import numpy as np

from crnn_conformance.ctypes_kernels import abi
from crnn_conformance.generators.h5io import read_fixture


class PortCrash(RuntimeError):
    """The worker died or hung while running one layer on one case."""


FPENV_SOURCE = r"""
#include <stdint.h>
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


def fpenv_helper():
    """The helper library (ctypes), or None when it cannot be built (no C compiler)."""
    from crnn_conformance.ctypes_kernels.build import BuildError, build_helper
    try:
        return _load_helper(build_helper("crnnfpenv", FPENV_SOURCE))
    except (BuildError, OSError):
        return None


def _load_helper(path):
    lib = ctypes.CDLL(str(path))
    lib.crnn_h_arch.restype, lib.crnn_h_arch.argtypes = ctypes.c_int32, []
    lib.crnn_h_fpcsr.restype, lib.crnn_h_fpcsr.argtypes = ctypes.c_uint32, []
    lib.crnn_h_set_fpcsr.restype, lib.crnn_h_set_fpcsr.argtypes = None, [ctypes.c_uint32]
    return lib


def fpenv(helper) -> dict:
    """{"ftz", "daz", "register", "method"} for the calling thread."""
    if helper is not None and helper.crnn_h_arch() in (1, 2):
        v = int(helper.crnn_h_fpcsr())
        if helper.crnn_h_arch() == 1:
            return {"ftz": bool(v & MXCSR_FTZ), "daz": bool(v & MXCSR_DAZ),
                    "register": f"MXCSR=0x{v:04x}", "method": "mxcsr"}
        return {"ftz": bool(v & FPCR_FZ), "daz": bool(v & FPCR_FZ),
                "register": f"FPCR=0x{v:08x}", "method": "fpcr"}
    # No helper: observe the effect. Half the smallest normal is subnormal unless FTZ;
    # a subnormal times 2^24 is normal unless DAZ reads the subnormal as zero.
    tiny = np.array([0x00800000], np.uint32).view(np.float32)
    sub = np.array([0x00400000], np.uint32).view(np.float32)
    ftz = int((tiny * np.float32(0.5)).view(np.uint32)[0]) == 0
    daz = int((sub * np.float32(16777216.0)).view(np.uint32)[0]) == 0
    return {"ftz": ftz, "daz": daz, "register": "unknown (no C compiler for the helper)",
            "method": "numpy-probe"}


def _fp_problem(env: dict, when: str) -> str | None:
    if not (env["ftz"] or env["daz"]):
        return None
    what = " and ".join(n for n, on in (("flush-to-zero (FTZ)", env["ftz"]),
                                         ("denormals-are-zero (DAZ)", env["daz"])) if on)
    return f"{what} found set {when} ({env['register']}); results would not be IEEE binary32"


class _Traced:
    """The port as the layer modules see it in the worker: every crnn_* call first writes its
    name into a buffer shared with the parent, so a crash or hang names the entry point."""

    def __init__(self, lib, current):
        self._lib, self._current = lib, current

    def __getattr__(self, name):
        fn = getattr(self._lib, name)
        if not name.startswith("crnn_") or not callable(fn):
            return fn
        return _TracedFn(fn, name.encode()[:127], self._current)


class _TracedFn:
    def __init__(self, fn, name: bytes, current):
        self._fn, self._name, self._current = fn, name, current

    def __call__(self, *args):
        self._current.value = self._name
        rc = self._fn(*args)
        self._current.value = b""
        return rc

    def __getattr__(self, name):
        return getattr(self._fn, name)


def _worker(conn, port_path: str, layers: list[str], helper_path: str | None, current) -> None:
    helper = _load_helper(helper_path) if helper_path else None
    problem = _fp_problem(fpenv(helper), "in the harness process before loading the port")
    if problem:
        conn.send(("porterror", problem + " (something in this process enabled it: unset it "
                                "or run the gate from a clean interpreter)"))
        return
    try:
        lib = abi.load(port_path, layers)
    except abi.PortError as e:
        conn.send(("porterror", str(e)))
        return
    problem = _fp_problem(fpenv(helper), f"right after loading the port {port_path}")
    if problem:
        conn.send(("porterror", problem + " (its initialisation enables it: was it built or "
                                "linked with -ffast-math / -Ofast?)"))
        return
    conn.send(("ok", {"isas": abi.available_isas(lib), "abi_version": int(lib.crnn_abi_version()),
                      "fpenv": fpenv(helper), "symbols": abi.exported(lib)}))
    lib = _Traced(lib, current)
    from crnn_conformance.harness import layers as L
    fixtures = {}
    while True:
        msg = conn.recv()
        if msg is None:
            return
        layer, fixture_path, case_name, isa, threads = msg
        problem = _fp_problem(fpenv(helper), f"before running {layer} on case {case_name}")
        if problem:
            conn.send(("fpenv", problem + " (an earlier call into the port left it set)"))
            continue
        try:
            if fixture_path not in fixtures:
                fixtures[fixture_path] = {c.name: c for c in read_fixture(fixture_path).cases}
            case = fixtures[fixture_path][case_name]
            abi.check(lib.crnn_set_isa(abi.ISA_NAMES.index(isa)), f"crnn_set_isa({isa})")
            abi.check(lib.crnn_set_threads(threads), f"crnn_set_threads({threads})")
            conn.send(("ok", L.module(layer).run(lib, case)))
        except abi.PortCallError as e:
            conn.send(("callerror", (str(e), e.code)))
        except Exception:  # a harness bug: report it whole
            conn.send(("exception", traceback.format_exc()))


class Executor:
    def __init__(self, port_path: Path, layers: list[str], timeout: float = 120.0):
        self.port_path = str(port_path)
        self.layers = list(layers)
        self.timeout = timeout
        self.proc = None
        self.conn = None
        self.current = None
        helper = fpenv_helper()            # built here, before the fork, loaded in the worker
        self.helper_path = helper._name if helper is not None else None
        self.info = self._start()           # {"isas", "abi_version", "fpenv"}
        self.isas = self.info["isas"]

    def _start(self) -> dict:
        ctx = mp.get_context("fork")
        self.conn, child = ctx.Pipe()
        self.current = ctx.Array("c", 128, lock=False)   # the port call in progress
        self.proc = ctx.Process(target=_worker, args=(child, self.port_path, self.layers,
                                                      self.helper_path, self.current), daemon=True)
        self.proc.start()
        child.close()
        if not self.conn.poll(self.timeout):
            self.close()
            raise abi.PortError(f"port {self.port_path} did not load within {self.timeout:.0f} s")
        try:
            kind, payload = self.conn.recv()
        except EOFError:
            code = self._reap()
            raise abi.PortError(f"port {self.port_path} crashed while loading ({_describe(code)})") from None
        if kind == "porterror":
            self.close()
            raise abi.PortError(payload)
        return payload

    def run(self, layer: str, fixture_path: Path, case_name: str, isa: str, threads: int) -> dict:
        if self.proc is None or not self.proc.is_alive():
            self._start()
        self.conn.send((layer, str(fixture_path), case_name, isa, threads))
        if not self.conn.poll(self.timeout):
            where = self._where()
            self.proc.kill()
            self._reap()
            self.proc = None
            raise PortCrash(f"hang: no answer{where} within {self.timeout:g} s (--timeout); "
                            f"worker killed")
        try:
            kind, payload = self.conn.recv()
        except (EOFError, ConnectionResetError):
            code = self._reap()
            where = self._where()
            self.proc = None
            raise PortCrash(f"the port crashed{where}: {_describe(code)}") from None
        if kind == "ok":
            return payload
        if kind == "callerror":
            raise abi.PortCallError(*payload)
        if kind == "fpenv":
            raise abi.PortError(payload)
        raise RuntimeError(f"harness error in the worker:\n{payload}")

    def _where(self) -> str:
        name = bytes(self.current.value).decode(errors="replace") if self.current else ""
        return f" in {name}" if name else ""

    def _reap(self) -> int | None:
        if self.proc is not None:
            self.proc.join(5)
            return self.proc.exitcode
        return None

    def close(self) -> None:
        if self.proc is not None and self.proc.is_alive():
            try:
                self.conn.send(None)
            except (BrokenPipeError, OSError):
                pass
            self.proc.join(5)
            if self.proc.is_alive():
                self.proc.kill()
        self.proc = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _describe(code) -> str:
    if code is None:
        return "exit status unknown"
    if code < 0:
        try:
            return f"killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with status {code}"
