"""Our layouts <-> PyTorch's: the one conversion of each, shared by the PyTorch references
(generators/pytorch_ref/), the PyTorch model (generators/torch_model.py) and the Python
API (harness/api/layers.py). NumPy only (no torch import), and values are only moved.

- conv weights: ours [Out][KPadded] channels-last, k = (ky*kw + kx)*C + c, zero columns
  K..KPadded-1; PyTorch's Conv2d [Out][C][kh][kw]: W_torch[o][c][ky][kx] = W[o][k].
- pool winners: PyTorch's max_pool2d indices [Out][Hp][Wp] (flat y*Wc + x within one
  channel's plane) -> ours, p*Out + o in [Hp][Wp][Out].
- LSTM and linear weights need none: W_ih[4H][I], W_hh[4H][H] with gate rows [i|f|g|o] and
  Linear's [Out][In] are PyTorch's own layouts (only the names differ, torch_model.py)."""
from __future__ import annotations

import numpy as np

from .model import kpadded


def conv_weight_to_torch(W, C: int, kh: int, kw: int) -> np.ndarray:
    """Our W[Out][KPadded] -> PyTorch's [Out][C][kh][kw] (padding columns dropped)."""
    W = np.asarray(W)
    K = kh * kw * C
    return np.ascontiguousarray(W[:, :K].reshape(W.shape[0], kh, kw, C).transpose(0, 3, 1, 2))


def conv_weight_from_torch(Wt, KPadded: int | None = None, dtype=None) -> np.ndarray:
    """PyTorch's [Out][C][kh][kw] -> our [Out][KPadded] (KPadded: K rounded up to 16 unless
    given; dtype: Wt's unless given), padding columns exactly zero."""
    Wt = np.asarray(Wt)
    Out, C, kh, kw = Wt.shape
    K = kh * kw * C
    W = np.zeros((Out, kpadded(K) if KPadded is None else KPadded),
                 Wt.dtype if dtype is None else dtype)
    W[:, :K] = Wt.transpose(0, 2, 3, 1).reshape(Out, K)
    return W


def winners_from_torch(idx, Out: int) -> np.ndarray:
    """PyTorch's max_pool2d indices [Out][Hp][Wp] -> our winners [Hp][Wp][Out], p*Out + o.
    A dead window keeps PyTorch's index (a cell holding 0): the comparison, not the fixture,
    knows that the spec says -1."""
    idx = np.asarray(idx, np.int64)
    o = np.arange(Out)[:, None, None]
    return np.ascontiguousarray((idx * Out + o).transpose(1, 2, 0)).astype(np.int32)
