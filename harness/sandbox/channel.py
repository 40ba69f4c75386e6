"""The gate's reading of its worker's messages, bounded in length and in time, and decoded by
an unpickler that makes nothing but the worker's own kinds of values.

The worker answers with multiprocessing's framing (a 4-byte big-endian length, or -1 and an
8-byte one, then a pickle), on a socket the port can reach: a port that writes into it by
mistake (or on purpose) must fail its run, never hang the gate, stop it with an internal
error or run code in it. So receive() reads the frame itself with a deadline (the call's
timeout), refuses a length above MAX_MESSAGE, and decodes with _Restricted, whose
find_class knows only the NumPy constructors an array or a NumPy scalar needs; anything else
(or a frame that does not decode, or a value that is not a tuple starting with a kind name)
is a ChannelError, which the executor reports as the port's failure and ends the worker
(the channel's framing is lost).
"""
from __future__ import annotations

import io
import os
import pickle
import select
import struct
import time

MAX_MESSAGE = 1 << 30        # bytes: far above any case's outputs (docs/port-abi.md)

# the globals a worker's message may name: an ndarray and a NumPy scalar (NumPy 1 and 2)
_ALLOWED = {(m, n) for m in ("numpy.core.multiarray", "numpy._core.multiarray")
            for n in ("_reconstruct", "scalar")} | {("numpy", "ndarray"), ("numpy", "dtype")}

# the kinds of message a batch's answers come as (worker._serve_batch), with their items
BATCH_ARITY = {"run": 4, "same": 2, "done": 2, "late": 3}


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
