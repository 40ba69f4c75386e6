"""A hostile port for the linear layer: it answers every input it has seen in the published
fixtures (fixtures/linear.h5, linear_edges.h5) with the fixture's exact bits, and any other
input with NumPy's float32 matmul. It passes the published cases bit for bit and must fail a
fresh draw of them (regen-fixtures --seed, docs/fixtures.md)."""
from __future__ import annotations

import json

import h5py
import numpy as np

from crnn_conformance import fixtures


def _key(*arrays) -> bytes:
    return b"|".join(np.ascontiguousarray(a).tobytes() + str(a.shape).encode() for a in arrays)


class Port:
    def __init__(self):
        self.forward, self.backward = {}, {}
        for name in ("linear", "linear_edges"):
            with h5py.File(fixtures.directory() / f"{name}.h5", "r") as f:
                for case in json.loads(f.attrs["case_names"]):
                    i, e = f[case]["inputs"], f[case]["expected"]["exact"]
                    x, W = i["x"][()], i["W"][()]
                    if "y" in e:
                        self.forward[_key(x, W, i["b"][()])] = e["y"][()]
                    if "dW" in e:
                        dx = e["dx"][()] if "dx" in e else None
                        self.backward[_key(x, W, i["dY"][()])] = (dx, e["dW"][()], e["db"][()])

    def linear_forward(self, x, W, b, T, I, O, y):
        known = self.forward.get(_key(x, W, b))
        return known if known is not None else (x @ W.T + b).astype(np.float32)

    def linear_backward(self, x, W, dY, T, I, O, dx, dW, db):
        known = self.backward.get(_key(x, W, dY))
        if known is not None and (known[0] is not None or dx is None):
            return known
        return (dY @ W if dx is not None else None), dY.T @ x, dY.sum(axis=0, dtype=np.float32)
