"""The ABI's int32 config vector read as a model, for the example ports (docs/port-abi.md,
"Whole model"): the blocks, the LSTM sizes, the parameter tensors' shapes in order."""
from __future__ import annotations


def model_config(cfg):
    """(H_in, C_in, blocks, nLstm, hidden, classes) from the ABI's config vector."""
    nb = int(cfg[2])
    blocks = [tuple(int(v) for v in cfg[3 + 7 * k:10 + 7 * k]) for k in range(nb)]
    nl, hid, classes = (int(v) for v in cfg[3 + 7 * nb:6 + 7 * nb])
    return int(cfg[0]), int(cfg[1]), blocks, nl, hid, classes


def tensor_shapes(cfg):
    H, C, blocks, nl, hid, classes = model_config(cfg)
    shapes = []
    for out, kh, kw, padH, padW, poolH, poolW in blocks:
        shapes += [(out, (kh * kw * C + 15) // 16 * 16), (out,)]
        H, C = (H + 2 * padH - kh + 1) // poolH, out
    inp = H * C
    for _ in range(nl):
        shapes += [(4 * hid, inp), (4 * hid, hid), (4 * hid,)] * 2
        inp = 2 * hid
    return shapes + [(classes, 2 * hid), (classes,)]
