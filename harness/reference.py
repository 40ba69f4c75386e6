"""The reference port: the executable spec written again in plain scalar C.

What it is: generators/spec/c/ holds one C file per spec module (dot16.c, linear.c, conv.c,
lstm.c, activations.c, detmath.c, ctc.c, step.c, clip.c, adamw.c, and port.c for the ABI's
control functions), each mirroring the NumPy module's order of operations element by element
with the C library's fmaf wherever the spec says fma. Together they implement the whole port
ABI (ctypes_kernels/crnn_port.h) on one scalar path and one thread, and are independent of the
bundled port (ctypes_kernels/src/). ctypes_kernels.build.build_reference compiles them into
the build cache.

Why it exists: the NumPy spec emulates every binary32 fma exactly and costs 1-35 ms per fuzz
case, too slow for the fuzzer's throughput. The reference gives the same bits in well under a
millisecond per case, run through the harness's own layer modules (harness/layers/<layer>.py,
`run(lib, case)`) at scalar / 1 thread like any port.

NumPy stays the truth: generators/spec (through generators/exact.py) is the definition and
made every fixture's golden bits; the reference is a fast copy of it, held to it by
tests/test_reference_port.py (the gate's exact tier on every fixture, random cases against
exact.expected). Where the reference and NumPy could disagree, NumPy decides.

    lib = library()                            # built (or cached) and loaded once per process
    expected(layer, params, inputs) -> dict    # a case's outputs, named like the port's
    record(layer, params, inputs) -> Recorded  # the same, with the run's calls as a tape
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..ctypes_kernels import abi
from ..ctypes_kernels.build import build_reference
from ..generators.h5io import Case
from .sandbox import guard, replay
from . import layers as L

_loaded: dict = {}


class ReferenceUnavailable(abi.PortError):
    """The reference port cannot be built or loaded (no compiler, a compile error)."""


def library():
    """The reference port, loaded once per process at scalar / 1 thread; raises
    ReferenceUnavailable (every time) when it cannot be built or loaded."""
    if "lib" not in _loaded:
        try:
            lib = abi.load(build_reference(), tuple(abi.LAYER_SYMBOLS))
            abi.check(lib.crnn_set_isa(abi.ISA_NAMES.index("scalar")), "crnn_set_isa")
            abi.check(lib.crnn_set_threads(1), "crnn_set_threads")
            _loaded["lib"] = lib
        except (abi.PortError, abi.PortCallError) as e:
            _loaded["lib"] = ReferenceUnavailable(f"the reference port is unavailable: {e}")
    if isinstance(_loaded["lib"], ReferenceUnavailable):
        raise _loaded["lib"]
    return _loaded["lib"]


def available() -> bool:
    try:
        library()
    except ReferenceUnavailable:
        return False
    return True


def expected(layer: str, params: dict, inputs: dict) -> dict:
    """What harness/layers/<layer>.py returns when it runs the case on the reference port:
    the exact tier's tensors, the same bits as generators.exact.expected. A port call that
    returns an error code raises abi.PortCallError."""
    return L.module(layer).run(library(), Case("reference", dict(params), dict(inputs)))


@dataclass
class Recorded:
    """A case run on the reference port in an arena, its calls recorded."""
    outputs: dict            # what expected() returns
    symbolic: dict | None    # replay.Tape.symbolic(): the worker makes a port's runs from it
    blob: bytes              # the run's written buffers, in the tape's order (replay.BLOB)


class _Recorder:
    """The reference port as the layer modules see it while a tape records: each crnn_* call
    goes through the arena's checks' bookkeeping (guard.Arena.before) into the tape."""

    def __init__(self, lib, arena):
        self._lib, self._arena = lib, arena

    def __getattr__(self, name):
        fn = getattr(self._lib, name)
        if not name.startswith("crnn_"):
            return fn
        arena = self._arena

        def traced(*args):
            arena.tape.call(arena, name, args, arena.before(name, args, checked=False))
            return fn(*args)
        setattr(self, name, traced)
        return traced


def record(layer: str, params: dict, inputs: dict) -> Recorded:
    """expected(), run in a guard.Arena with a replay.Tape recording it: the tape as symbols
    (None when it cannot be replayed) and the bytes of the buffers it writes, which a port's
    run made from the tape must equal."""
    lib = library()
    arena = guard.Arena()
    tape = arena.tape = replay.Tape()
    guard.activate(arena)
    try:
        out = L.module(layer).run(_Recorder(lib, arena), guard.PrivateCase(
            Case("reference", dict(params), dict(inputs)), arena))
        out = {k: np.array(v, copy=True) for k, v in out.items()}   # (views of the arena)
        blob = b"".join(b.bytes.tobytes() for b in tape.written(arena.buffers))
        return Recorded(out, tape.symbolic(arena), blob)
    finally:
        arena.tape = None
        guard.activate(None)
        arena.release()
