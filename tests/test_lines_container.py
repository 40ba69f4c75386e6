"""Synthetic lines, the fp16 container and the PyTorch model conversion."""
from __future__ import annotations

import hashlib

import numpy as np
import pytest

from crnn_conformance.generators import container, lines, model

CFG = model.default_config()


def _sha(path) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


# --------------------------------------------------------------------------- lines


def test_lines_deterministic_bytes():
    a_img, a_tgt = lines.make_batch(123, 6)
    b_img, b_tgt = lines.make_batch(123, 6)
    for x, y in zip(a_img, b_img):
        assert x.tobytes() == y.tobytes()
    for x, y in zip(a_tgt, b_tgt):
        assert x.tobytes() == y.tobytes()
    # line i does not depend on n
    c_img, _ = lines.make_batch(123, 3)
    assert all(x.tobytes() == y.tobytes() for x, y in zip(a_img, c_img))
    # make_line is deterministic from the generator state
    i1, t1 = lines.make_line(np.random.default_rng(5))
    i2, t2 = lines.make_line(np.random.default_rng(5))
    assert i1.tobytes() == i2.tobytes() and t1.tobytes() == t2.tobytes()
    # a different seed gives a different line
    d_img, _ = lines.make_batch(124, 1)
    assert d_img[0].tobytes() != a_img[0].tobytes()


def test_lines_range_shapes_and_targets():
    imgs, tgts = lines.make_batch(7, 40)
    for img, tgt in zip(imgs, tgts):
        assert img.dtype == np.float32 and img.ndim == 2
        assert img.shape[0] == CFG["input_height"] == 32
        assert np.all(img >= 0.0) and np.all(img <= 1.0)
        assert tgt.dtype == np.int32
        assert 3 <= len(tgt) <= 10
        assert tgt.min() >= 1 and tgt.max() <= len(CFG["alphabet"]) == CFG["classes"] - 1
        # CTC always has an alignment: T = floor(W/4) >= 2L+1
        assert img.shape[1] >= lines.min_width(len(tgt))
        assert model.steps_for_width(CFG, img.shape[1]) >= 2 * len(tgt) + 1
        assert img.max() - img.min() > 0.3            # there is visible ink
    widths = {im.shape[1] for im in imgs}
    assert len(widths) > 5                            # widths vary


def test_lines_text_width_and_classes():
    img, tgt = lines.make_line(np.random.default_rng(0), "a0z9", width=50)
    assert img.shape == (32, 50)
    assert tgt.tolist() == [11, 1, 36, 10]            # class = 1 + index in the alphabet
    assert lines.decode(tgt) == "a0z9"
    assert lines.encode(CFG["alphabet"]).tolist() == list(range(1, 37))
    narrow, _ = lines.make_line(np.random.default_rng(0), "mmmmmmmm", width=24)
    assert narrow.shape == (32, 24) and np.all((narrow >= 0) & (narrow <= 1))
    empty, et = lines.make_line(np.random.default_rng(0), "", width=16)
    assert empty.shape == (32, 16) and et.dtype == np.int32 and et.size == 0
    with pytest.raises(ValueError):
        lines.make_line(np.random.default_rng(0), "A")


# --------------------------------------------------------------------------- container


def _params(seed=0):
    return model.init_params(CFG, np.random.default_rng(seed))


def test_container_round_trip(tmp_path):
    p = _params()
    path = tmp_path / "m.h5"
    container.save_container(str(path), CFG, p, {"trained": False, "seed": 3, "note": "x"})
    cfg, q = container.load_container(str(path))
    assert cfg == CFG
    assert list(q) == [s.name for s in model.param_specs(CFG)]
    for s in model.param_specs(CFG):
        assert q[s.name].dtype == np.float32 and q[s.name].shape == s.shape
        assert np.array_equal(q[s.name], p[s.name].astype(np.float16).astype(np.float32))
    # fp16 values survive exactly: a second round trip changes nothing
    container.save_container(str(tmp_path / "m2.h5"), cfg, q, {})
    _, r = container.load_container(str(tmp_path / "m2.h5"))
    assert all(r[k].tobytes() == q[k].tobytes() for k in q)
    # conv padding columns stay exactly zero
    for name, K in container.conv_padding_columns(CFG).items():
        assert not np.any(q[name][:, K:])
    a = container.read_attrs(str(path))
    assert a["container_version"] == 1 and a["trained"] is False and a["seed"] == 3
    assert a["note"] == "x" and a["hidden"] == 64 and a["config"] == CFG
    assert a["param_order"] == [s.name for s in model.param_specs(CFG)]


def test_container_layout(tmp_path):
    h5py = pytest.importorskip("h5py")
    path = tmp_path / "m.h5"
    container.save_container(str(path), CFG, _params(), {})
    with h5py.File(path, "r") as f:
        assert list(f["params"]) == [s.name for s in model.param_specs(CFG)]
        for s in model.param_specs(CFG):
            ds = f["params"][s.name]
            assert ds.dtype == np.float16 and ds.shape == s.shape and ds.chunks is None


def test_container_byte_identical(tmp_path):
    p = _params(1)
    attrs = {"trained": True, "seed": 1, "steps": 10, "cer": 0.25, "torch_version": "x"}
    container.save_container(str(tmp_path / "a.h5"), CFG, p, attrs)
    container.save_container(str(tmp_path / "b.h5"), CFG, p, dict(reversed(attrs.items())))
    assert _sha(tmp_path / "a.h5") == _sha(tmp_path / "b.h5")


def test_container_shape_errors(tmp_path):
    h5py = pytest.importorskip("h5py")
    p = _params()
    bad = dict(p, **{"lstm0.fwd.W_hh": np.zeros((256, 63), np.float32)})
    with pytest.raises(ValueError, match="lstm0.fwd.W_hh"):
        container.save_container(str(tmp_path / "bad.h5"), CFG, bad, {})
    missing = {k: v for k, v in p.items() if k != "fc.b"}
    with pytest.raises(ValueError, match="fc.b"):
        container.save_container(str(tmp_path / "bad.h5"), CFG, missing, {})
    padded = {k: v.copy() for k, v in p.items()}
    padded["conv0.W"][:, 9:] = 1.0
    with pytest.raises(ValueError, match="padding"):
        container.save_container(str(tmp_path / "bad.h5"), CFG, padded, {})
    # a file whose tensor disagrees with its config fails to load
    path = tmp_path / "m.h5"
    container.save_container(str(path), CFG, p, {})
    with h5py.File(path, "a") as f:
        del f["params"]["fc.W"]
        f["params"].create_dataset("fc.W", data=np.zeros((36, 128), np.float16))
    with pytest.raises(ValueError, match="fc.W"):
        container.load_container(str(path))
    with h5py.File(path, "a") as f:
        f.attrs["container_version"] = 2
    with pytest.raises(ValueError, match="container_version"):
        container.load_container(str(path))


# --------------------------------------------------------------------------- torch model


TINY = {
    "name": "tiny", "input_height": 4, "input_channels": 2,
    "blocks": [{"out": 3, "kh": 3, "kw": 3, "padH": 1, "padW": 1, "poolH": 2, "poolW": 1}],
    "lstm_layers": 1, "hidden": 2, "classes": 4, "alphabet": "abc",
}


def test_torch_params_round_trip():
    torch = pytest.importorskip("torch")
    from crnn_conformance.generators import torch_model as tm
    p = _params(2)
    for dtype, npd in ((torch.float32, np.float32), (torch.float64, np.float64)):
        m = tm.build(CFG, p, dtype=dtype)
        for name, t in m.lstm.named_parameters():
            if name.startswith("bias_hh"):
                assert not t.requires_grad and not torch.any(t)
        q = tm.to_params(m, npd)
        assert list(q) == list(p)
        for k in p:
            assert q[k].dtype == npd
            assert np.array_equal(q[k], p[k].astype(npd)), k
    # torch -> params -> torch gives the same module weights
    m = tm.build(CFG, dtype=torch.float32)
    m2 = tm.build(CFG, tm.to_params(m))
    for (a, x), (b, y) in zip(m.state_dict().items(), m2.state_dict().items()):
        assert a == b and torch.equal(x, y)


def test_torch_conv_layout_and_sequence_map():
    torch = pytest.importorskip("torch")
    from crnn_conformance.generators import torch_model as tm
    rng = np.random.default_rng(3)
    p = model.init_params(TINY, rng)
    m = tm.build(TINY, p, dtype=torch.float64)
    H, W, C = 4, 5, 2
    img = rng.uniform(0, 1, (H, W, C))
    # conv from the spec's definition: col[p][k], k = (ky*kw + kx)*C + c, zero outside
    Wt, b = p["conv0.W"].astype(np.float64), p["conv0.b"].astype(np.float64)
    padded = np.zeros((H + 2, W + 2, C))
    padded[1:-1, 1:-1] = img
    conv = np.zeros((H, W, 3))
    for y in range(H):
        for x in range(W):
            col = np.zeros(Wt.shape[1])
            for ky in range(3):
                for kx in range(3):
                    for c in range(C):
                        col[(ky * 3 + kx) * C + c] = padded[y + ky, x + kx, c]
            conv[y, x] = Wt @ col + b
    r = np.maximum(conv, 0)
    pooled = np.maximum(r[0::2], r[1::2])          # pool 2 rows x 1 column -> [2][W][3]
    expect = np.zeros((W, 2 * 3))
    for h in range(2):
        for w in range(W):
            for c in range(3):
                expect[w, h * 3 + c] = pooled[h, w, c]  # x[t = w][h*C + c]
    got = m.features(torch.from_numpy(img)[None]).detach().numpy()
    assert got.shape == (W, 1, 6)
    np.testing.assert_allclose(got[:, 0], expect, rtol=1e-12, atol=1e-12)


def test_torch_lstm_gate_order_and_bias():
    torch = pytest.importorskip("torch")
    from crnn_conformance.generators import torch_model as tm
    rng = np.random.default_rng(4)
    p = model.init_params(TINY, rng)
    for k in p:
        if k.startswith("lstm"):
            p[k] = rng.uniform(-1, 1, p[k].shape).astype(np.float32)
    m = tm.build(TINY, p, dtype=torch.float64)
    x = rng.uniform(-1, 1, (5, 6))
    out, _ = m.lstm(torch.from_numpy(x)[:, None])

    def sig(z):
        return 1 / (1 + np.exp(-z))
    Hd = 2
    ref = np.zeros((5, 4))
    for d, name in enumerate(("fwd", "rev")):
        Wih, Whh, bb = (p[f"lstm0.{name}.{k}"].astype(np.float64) for k in ("W_ih", "W_hh", "b"))
        h, c = np.zeros(Hd), np.zeros(Hd)
        for t in (range(5) if d == 0 else range(4, -1, -1)):
            z = Wih @ x[t] + Whh @ h + bb
            i, f, g, o = sig(z[:2]), sig(z[2:4]), np.tanh(z[4:6]), sig(z[6:])
            c = f * c + i * g
            h = o * np.tanh(c)
            ref[t, d * Hd:(d + 1) * Hd] = h
    np.testing.assert_allclose(out[:, 0].detach().numpy(), ref, rtol=1e-12, atol=1e-12)
    lp = m(torch.from_numpy(rng.uniform(0, 1, (2, 4, 5, 2))))
    assert lp.shape == (5, 2, 4)
    np.testing.assert_allclose(lp.exp().sum(-1).detach().numpy(), 1.0, rtol=1e-12)


def test_greedy_decode_and_cer():
    pytest.importorskip("torch")
    from crnn_conformance.generators import torch_model as tm
    best = [0, 3, 3, 0, 3, 1, 1, 0, 2]
    lp = np.full((len(best), 4), -5.0)
    lp[np.arange(len(best)), best] = 0.0
    assert tm.greedy_decode(lp) == [[3, 3, 1, 2]]
    assert tm.cer(["abcd"], ["abd"]) == 0.25
    assert tm.cer([[1, 2], [3]], [[1, 2], [3]]) == 0.0
    assert tm.cer(["ab", "cd"], ["xab", ""]) == 0.75


def test_checked_in_model_fixture():
    import os
    path = os.path.join(os.path.dirname(__file__), "..", "fixtures", "model", "crnn-v0.h5")
    if not os.path.exists(path):
        pytest.skip("fixtures/model/crnn-v0.h5 not built (python -m crnn_conformance.generators.train)")
    cfg, p = container.load_container(path)
    assert cfg == CFG
    for name, K in container.conv_padding_columns(cfg).items():
        assert not np.any(p[name][:, K:])
    a = container.read_attrs(path)
    assert a["trained"] is True and a["heldout_lines"] >= 200 and 0 <= a["cer"] <= 0.05
