"""Runs a port in a worker process, so a crash or a hang is a reported failure, not the end.

The worker loads the port (checking its ABI), reads each case's inputs from the fixture
itself and sends back the outputs. A call that does not answer within the timeout is killed;
a worker that dies (segfault, abort) is reported with its signal and restarted for the rest.
"""
from __future__ import annotations

import multiprocessing as mp
import signal
import traceback
from pathlib import Path

from ctypes_kernels import abi
from generators.h5io import read_fixture


class PortCrash(RuntimeError):
    """The worker died or hung while running one layer on one case."""


def _worker(conn, port_path: str, layers: list[str]) -> None:
    try:
        lib = abi.load(port_path, layers)
    except abi.PortError as e:
        conn.send(("porterror", str(e)))
        return
    conn.send(("ok", abi.available_isas(lib)))
    from harness import layers as L
    fixtures = {}
    while True:
        msg = conn.recv()
        if msg is None:
            return
        layer, fixture_path, case_name, isa, threads = msg
        try:
            if fixture_path not in fixtures:
                fixtures[fixture_path] = {c.name: c for c in read_fixture(fixture_path).cases}
            case = fixtures[fixture_path][case_name]
            abi.check(lib.crnn_set_isa(abi.ISA_NAMES.index(isa)), f"crnn_set_isa({isa})")
            abi.check(lib.crnn_set_threads(threads), f"crnn_set_threads({threads})")
            conn.send(("ok", L.module(layer).run(lib, case)))
        except abi.PortCallError as e:
            conn.send(("callerror", str(e)))
        except Exception:  # a harness bug: report it whole
            conn.send(("exception", traceback.format_exc()))


class Executor:
    def __init__(self, port_path: Path, layers: list[str], timeout: float = 120.0):
        self.port_path = str(port_path)
        self.layers = list(layers)
        self.timeout = timeout
        self.proc = None
        self.conn = None
        self.isas = self._start()

    def _start(self) -> list[str]:
        ctx = mp.get_context("fork")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker, args=(child, self.port_path, self.layers), daemon=True)
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
            self.proc.kill()
            self._reap()
            self.proc = None
            raise PortCrash(f"no answer within {self.timeout:g} s (hang); worker killed")
        try:
            kind, payload = self.conn.recv()
        except (EOFError, ConnectionResetError):
            code = self._reap()
            self.proc = None
            raise PortCrash(f"the port crashed: {_describe(code)}") from None
        if kind == "ok":
            return payload
        if kind == "callerror":
            raise abi.PortCallError(payload)
        raise RuntimeError(f"harness error in the worker:\n{payload}")

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
