"""The gate's reading of its worker's messages, bounded in length and in time, and decoded by
an unpickler that makes nothing but the worker's own kinds of values.

The worker answers with multiprocessing's framing (a 4-byte big-endian length, or -1 and an
8-byte one, then a pickle), on a socket the port can reach: a port that writes into it by
mistake (or on purpose) must fail its run, never hang the gate, stop it with an internal
error or run code in it. So receive() reads the frame itself with a deadline (the call's
timeout), refuses a length above MAX_MESSAGE, and decodes with _Restricted, whose
find_class knows only the NumPy constructors an array or a NumPy scalar needs; anything else
(or a frame that does not decode, or a value that is not one of the worker's messages:
check() knows each kind's items and their types) is a ChannelError, which the executor
reports as the port's failure and ends the worker (the channel's framing is lost).
"""
from __future__ import annotations

import io
import os
import pickle
import select
import struct
import time

import numpy as np

MAX_MESSAGE = 1 << 30        # bytes: far above any case's outputs (docs/port-abi.md)

# the globals a worker's message may name: an ndarray and a NumPy scalar (NumPy 1 and 2)
_ALLOWED = {(m, n) for m in ("numpy.core.multiarray", "numpy._core.multiarray")
            for n in ("_reconstruct", "scalar")} | {("numpy", "ndarray"), ("numpy", "dtype")}


def _text(v) -> bool:
    return isinstance(v, str)


def _arrays(v) -> bool:
    """A run's outputs: tensor name -> array (or a NumPy scalar)."""
    return isinstance(v, dict) and all(isinstance(k, str) and isinstance(a, (np.ndarray,
                                                                            np.generic))
                                       for k, a in v.items())


def _seconds(v) -> bool:
    return isinstance(v, list) and all(isinstance(x, float) for x in v)


def _code(v) -> bool:
    return v is None or (isinstance(v, int) and not isinstance(v, bool))


def _call_error(v) -> bool:
    return (isinstance(v, tuple) and len(v) == 3 and _text(v[0]) and _code(v[1])
            and _arrays(v[2]))


def _names(v) -> bool:
    return isinstance(v, list) and all(map(_text, v))


def _loaded(v) -> bool:
    """The loaded port's description (worker._worker)."""
    return (isinstance(v, dict) and set(v) == {"isas", "abi_version", "fpenv", "symbols",
                                               "threads"}
            and _names(v["isas"]) and _code(v["abi_version"])
            and v["abi_version"] is not None and isinstance(v["fpenv"], dict)
            and _names(v["symbols"])
            and (v["threads"] is None or (isinstance(v["threads"], list)
                                          and all(_code(t) and t is not None
                                                  for t in v["threads"]))))


# one run's answer (worker._run_one; "same": the batch's first run's outputs again)
_ANSWER = {"ok": (_arrays,), "fpenv": (_text,), "callerror": (_call_error,),
           "exception": (_text,), "same": (lambda v: v is None,)}


def _answer(v) -> bool:
    return isinstance(v, tuple) and bool(v) and _fits(v, _ANSWER)


# the worker's messages by what the gate is reading: the port's load, one run's answer, a
# batch's messages (worker._serve_batch), a contract call's answer (contract.run)
KINDS = {
    "load": {"ok": (_loaded,), "porterror": (_text,)},
    "single": _ANSWER,
    "batch": {"run": (_answer, _text, lambda v: isinstance(v, float)), "same": (_seconds,),
              "done": (_seconds,),
              "late": (lambda v: isinstance(v, int), lambda v: v is None or _text(v))},
    "contract": {"ok": (_code, _names),
                 "skip": (_text,), "fpenv": (_text,), "setup": (_text,), "exception": (_text,)},
}


def _fits(msg: tuple, kinds: dict) -> bool:
    items = kinds.get(msg[0]) if isinstance(msg[0], str) else None
    return (items is not None and len(msg) == 1 + len(items)
            and all(ok(v) for ok, v in zip(items, msg[1:])))


def check(msg: tuple, reading: str) -> tuple:
    """`msg` if it is one of the worker's messages where the gate is `reading` (a key of
    KINDS), each item of the type the worker sends; else ChannelError (a forged message must
    end the run, not the gate)."""
    if not _fits(msg, KINDS[reading]):
        raise ChannelError(f"a message ({str(msg[0])[:20]!r}, {len(msg)} items) the worker "
                           "never sends")
    return msg


class ChannelError(Exception):
    """What came from the worker is not a message of the worker's (the port wrote into the
    channel): the message says what was wrong."""


class _Restricted(pickle.Unpickler):
    def find_class(self, module, name):
        if (module, name) not in _ALLOWED:
            raise ChannelError(f"a message naming {module}.{name}, which the worker never sends")
        return super().find_class(module, name)


def receive(conn, timeout: float | None):
    """The worker's next message on `conn` (multiprocessing.Connection), read within `timeout`
    seconds (None: no limit) of the call. Raises EOFError when the worker closed its end
    before a message began, ChannelError for anything but a whole message of the worker's."""
    deadline = None if timeout is None else time.monotonic() + timeout
    fd = conn.fileno()
    (size,) = struct.unpack("!i", _read(fd, 4, deadline, first=True))
    if size == -1:
        (size,) = struct.unpack("!Q", _read(fd, 8, deadline))
    if not 0 <= size <= MAX_MESSAGE:
        raise ChannelError(f"a message of {size} bytes announced (at most {MAX_MESSAGE} are "
                           "read)")
    return decode(_read(fd, size, deadline))


def decode(data: bytes):
    """A worker's message from its pickle, with _Restricted; raises ChannelError."""
    try:
        msg = _Restricted(io.BytesIO(data)).load()
    except ChannelError:
        raise
    except Exception as e:   # noqa: BLE001 (whatever the bytes make the unpickler raise)
        raise ChannelError(f"{len(data)} bytes that are no message ({type(e).__name__}: "
                           f"{str(e)[:80]})") from None
    if not (isinstance(msg, tuple) and msg and isinstance(msg[0], str)):
        raise ChannelError(f"a message of type {type(msg).__name__}, not the worker's")
    return msg


def _read(fd: int, n: int, deadline: float | None, first: bool = False) -> bytes:
    """Exactly n bytes from fd, before `deadline` (time.monotonic). The end of the stream at
    the start of a message (`first`) is EOFError; anywhere else a message was cut short, which
    is EOFError too (the worker died while sending: the executor reports its crash)."""
    buf = bytearray()
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    while len(buf) < n:
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and (left <= 0 or not poller.poll(left * 1000)):
            raise ChannelError(f"{'a message' if first and not buf else 'the rest of a message'}"
                               f" not sent within the timeout ({len(buf)} of {n} bytes read)")
        try:
            chunk = os.read(fd, min(n - len(buf), 1 << 24))
        except ConnectionResetError:
            chunk = b""
        if not chunk:
            raise EOFError
        buf += chunk
    return bytes(buf)
