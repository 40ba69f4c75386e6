"""The bidirectional LSTM layer through a port: forward (output and saved states), then the
backward from the port's own saved states, as a training step would run it."""
from __future__ import annotations

from ._ffi import call, f32, out, ptr

LAYER = "lstm"
FIXTURE = "lstm"
FIXTURES = ["lstm", "pytorch_lstm"]   # the second: the pytorch tier (trained crnn-v0)
INPUTS = ("x", "W_ih", "W_hh", "b", "dOut")


def run(lib, case) -> dict:
    x, W_ih, W_hh, b, dOut = (f32(case.inputs[k]) for k in ("x", "W_ih", "W_hh", "b", "dOut"))
    T, I = x.shape
    H = W_hh.shape[2]
    G = 4 * H
    y, gates = out((T, 2 * H)), out((2, T, G))
    c, tc, hPrev = out((2, T, H)), out((2, T, H)), out((2, T, H))
    call(lib, "crnn_lstm_forward", ptr(x), T, I, H, ptr(W_ih), ptr(W_hh), ptr(b),
         ptr(y), ptr(gates), ptr(c), ptr(tc), ptr(hPrev))
    dW_ih, dW_hh, db, dx = out((2, G, I)), out((2, G, H)), out((2, G)), out((T, I))
    call(lib, "crnn_lstm_backward", ptr(x), T, I, H, ptr(W_ih), ptr(W_hh), ptr(gates), ptr(c),
         ptr(tc), ptr(hPrev), ptr(dOut), ptr(dW_ih), ptr(dW_hh), ptr(db), ptr(dx))
    return {"out": y, "gates": gates, "c": c, "tc": tc, "hPrev": hPrev,
            "dW_ih": dW_ih, "dW_hh": dW_hh, "db": db, "dx": dx}


def outputs(case) -> list[str]:
    """The tensors run() returns (the pytorch fixture has references for fewer of them; the
    identity tier checks them all)."""
    return ["out", "gates", "c", "tc", "hPrev", "dW_ih", "dW_hh", "db", "dx"]
