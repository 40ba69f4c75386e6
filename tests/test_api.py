"""crnn_conformance.harness.api (docs/python-api.md): covers()/usage() agree element for element with what the gate
reports for the bundled port's outputs; named gradients; the output-gradient and dtype rules;
the runnable examples of docs/python-api.md."""
from __future__ import annotations

import contextlib
import importlib.util
import io
import re
import warnings
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from crnn_conformance.generators import model
from crnn_conformance.generators.h5io import read_fixture
from crnn_conformance.harness import api
from crnn_conformance.harness import layers as L
from crnn_conformance.harness.compare import POISON_F32, POISON_F64, compare
from crnn_conformance.harness.runner import GateOptions
from crnn_conformance.harness.case_checks import _tier_records

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "python-api.md"
HAS_TORCH = importlib.util.find_spec("torch") is not None


# ---------------------------------------------------------------- the gate's view of a tensor

def gate_records(layer, params, inputs, exact, float64, ours) -> dict:
    """The gate's records (case_checks._tier_records: the layer's compare hook or compare(), the
    per-element allowances of the error model on these inputs and the tolerance table) of the
    port outputs `ours` against the references, by (tensor, tier)."""
    case = SimpleNamespace(name="api", params=params, inputs=inputs, floor={},
                           expected={"exact": exact, "float64": float64})
    out = {}
    for tier in ("exact", "float64"):
        for r in _tier_records(GateOptions(), L.module(layer), case, tier, ours, "scalar"):
            out[(r.tensor, tier)] = r
    return out


def perturbed(ours: dict, refs: dict, seed: int) -> dict:
    """A copy of the port's outputs with a few elements moved: half and three times the
    float64 allowance, one ulp, NaN, +inf, the poison value, another winner."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, a in ours.items():
        a = np.array(a, copy=True)
        if name not in refs or a.size < 8:
            out[name] = a
            continue
        sub = refs[name]
        flat = a.reshape(-1)
        idx = rng.choice(a.size, 7, replace=False)
        if a.dtype.kind in "iu":
            flat[idx[0]] = flat[idx[0]] + 1
            out[name] = a
            continue
        ref64 = np.asarray(sub.float64, np.float64).reshape(-1)
        try:
            tol = sub.tolerance
            allow = np.reshape(tol.atol, -1) + tol.rtol * np.abs(ref64)
        except KeyError:
            allow = np.full(ref64.shape, 1e-6)
        for k, f in ((0, 0.5), (1, 3.0), (2, -3.0)):
            flat[idx[k]] = ref64[idx[k]] + f * allow[idx[k]]
        flat[idx[3]] = np.nextafter(flat[idx[3]], np.inf)
        flat[idx[4]] = np.nan
        flat[idx[5]] = np.inf
        pois = POISON_F32 if a.dtype == np.float32 else POISON_F64
        flat.view(pois.dtype)[idx[6]] = pois
        out[name] = a
    return out


def assert_agrees(result, names: dict, ours: dict, layer: str, inputs: dict, params=None, seed=0):
    """For the port's outputs and a perturbed copy: covers() is False exactly where the gate
    counts a mismatch, usage() is the gate's usage, per tensor and tier."""
    refs = {gate: result[api_name] for api_name, gate in names.items()}
    exact = {gate: r.exact for gate, r in refs.items()}
    f64 = {gate: r.float64 for gate, r in refs.items()}
    for variant in (ours, perturbed(ours, refs, seed)):
        recs = gate_records(layer, params or {}, inputs, exact, f64, variant)
        for gate, sub in refs.items():
            for tier in ("exact", "float64"):
                rec = recs[(gate, tier)]
                t = variant[gate]
                cov = sub.covers(t, tier=tier)
                assert cov.shape == np.shape(sub.exact)
                pool = layer == "conv" and gate == "winners" and tier == "float64"
                if pool:   # the gate also reads the port's conv (its own first maximum)
                    assert int((~cov).sum()) <= rec.mismatches, (layer, gate, tier)
                    assert cov.all() or not rec.passed, (layer, gate, tier)   # no near-tie here
                else:
                    assert int((~cov).sum()) == rec.mismatches, (layer, gate, tier)
                    assert bool(cov.all()) == rec.passed, (layer, gate, tier)
                if not pool:
                    u = sub.usage(t, tier=tier)   # the conv hook reports flips as usage inf
                    assert u == rec.usage or (np.isnan(u) and np.isnan(rec.usage)), \
                        (layer, gate, tier, u, rec.usage)
                # element for element: the gate's compare restricted to one element
                ref = sub.exact if tier == "exact" else sub.float64
                tol = (0.0, 0.0) if tier == "exact" or np.asarray(t).dtype.kind in "iu" \
                    else (sub.atol, sub.rtol)
                flat = cov.reshape(-1)
                pick = np.concatenate([np.flatnonzero(~flat), np.flatnonzero(flat)[:24]])
                for i in pick:
                    mask = np.zeros(flat.shape, bool)
                    mask[i] = True
                    c = compare(t, ref, tier, *tol, mask=mask.reshape(cov.shape))
                    assert c.passed == bool(flat[i]), (layer, gate, tier, int(i))
                if variant is not ours:
                    if np.size(t) >= 8:          # NaN, poison or a changed winner: fails
                        assert not rec.passed and not cov.all(), (layer, gate, tier)
                    continue
                assert rec.passed, (layer, gate, tier, rec.note)   # the bundled port conforms


class _Merged:
    """Forward and gradient results side by side, by name."""

    def __init__(self, d):
        self.d = d

    def __getitem__(self, k):
        return self.d[k]


# ---------------------------------------------------------------- agreement with the gate

def test_linear_agrees_with_gate(lib):
    rng = np.random.default_rng(1)
    T, I, O = 19, 21, 18
    inputs = {"x": rng.uniform(-1, 1, (T, I)), "W": rng.uniform(-0.2, 0.2, (O, I)),
              "b": rng.uniform(-0.2, 0.2, O), "dY": rng.uniform(-1, 1, (T, O))}
    inputs = {k: v.astype(np.float32) for k, v in inputs.items()}
    ours = L.module("linear").run(lib, SimpleNamespace(inputs=inputs, params={}))
    r = api.linear(inputs["x"], inputs["W"], inputs["b"])
    g = r.backward(inputs["dY"])
    res = _Merged({"y": r["y"], **{k: g[k] for k in g.names}})
    names = {"y": "y", "grad_x": "dx", "grad_W": "dW", "grad_b": "db"}
    assert_agrees(res, names, ours, "linear", inputs, seed=1)


def test_conv_block_agrees_with_gate(lib):
    rng = np.random.default_rng(2)
    H, Wd, C, Out, kh, kw = 7, 11, 3, 5, 3, 3
    K = kh * kw * C
    W = np.zeros((Out, model.kpadded(K)), np.float32)
    W[:, :K] = rng.uniform(-0.3, 0.3, (Out, K))
    x = rng.uniform(-1, 1, (H, Wd, C)).astype(np.float32)
    b = rng.uniform(-0.3, 0.3, Out).astype(np.float32)
    geo = dict(kh=kh, kw=kw, padH=1, padW=1, poolH=2, poolW=2)
    r = api.conv_block(x, W, b, pool=(2, 2))
    dPooled = rng.uniform(-1, 1, r.pooled.exact.shape).astype(np.float32)
    params = {"C": C, **geo}
    inputs = {"x": x, "W": W, "b": b, "dPooled": dPooled}
    ours = L.module("conv").run(lib, SimpleNamespace(inputs=inputs, params=params))
    g = r.backward(dPooled)
    names = {"conv": "conv", "pooled": "pooled", "winners": "winners",
             "grad_W": "dW", "grad_b": "db", "grad_x": "dx"}
    res = _Merged({**{k: r[k] for k in r.names}, **{k: g[k] for k in g.names}})
    assert_agrees(res, names, ours, "conv", inputs, params, seed=2)


def test_lstm_layer_agrees_with_gate(lib):
    rng = np.random.default_rng(3)
    T, I, H = 6, 5, 4
    u = lambda *s: rng.uniform(-0.5, 0.5, s).astype(np.float32)
    inputs = {"x": u(T, I), "W_ih": u(2, 4 * H, I), "W_hh": u(2, 4 * H, H), "b": u(2, 4 * H),
              "dOut": u(T, 2 * H)}
    ours = L.module("lstm").run(lib, SimpleNamespace(inputs=inputs, params={}))
    r = api.lstm_layer(inputs["x"], inputs["W_ih"], inputs["W_hh"], inputs["b"])
    g = r.backward(inputs["dOut"])
    names = {"out": "out", "gates": "gates", "c": "c", "tc": "tc", "hPrev": "hPrev",
             "grad_x": "dx", "grad_W_ih": "dW_ih", "grad_W_hh": "dW_hh", "grad_b": "db"}
    res = _Merged({**{k: r[k] for k in r.names}, **{k: g[k] for k in g.names}})
    assert_agrees(res, names, ours, "lstm", inputs, seed=3)


def test_ctc_agrees_with_gate(lib):
    rng = np.random.default_rng(4)
    logits = rng.normal(0, 2, (21, 9)).astype(np.float32)
    target = np.array([1, 4, 4, 8, 2], np.int32)
    inputs = {"logits": logits, "target": target, "scale": np.array([0.25])}
    ours = L.module("ctc").run(lib, SimpleNamespace(inputs=inputs, params={}))
    ours["loss"] = ours["loss"].reshape(())          # the API's loss is a 0-d array
    r = api.ctc(logits, target)
    g = api.ctc.backward(logits, target, 0.25)
    res = _Merged({"loss": r["loss"], "grad_logits": g["grad_logits"]})
    assert_agrees(res, {"loss": "loss", "grad_logits": "dlogits"}, ours, "ctc", inputs, seed=4)


def test_adamw_step_agrees_with_gate(lib):
    rng = np.random.default_rng(5)
    p = rng.uniform(-0.5, 0.5, (6, 7)).astype(np.float32)
    grads = rng.normal(0, 0.05, (1, 6, 7)).astype(np.float32)
    hp = [1e-3, 0.9, 0.999, 1e-8, 0.01]
    inputs = {"p": p, "grads": grads, "hparams": np.array(hp), "decay": np.array([1], np.int32)}
    ours = L.module("adamw").run(lib, SimpleNamespace(inputs=inputs, params={}))
    z = np.zeros_like(p)
    r = api.adamw_step(p, z, z, grads[0], t=1, lr=hp[0], beta1=hp[1], beta2=hp[2], eps=hp[3],
                       wd=hp[4], decay=True)
    assert_agrees(r, {"p": "p", "m": "m", "v": "v"}, ours, "adamw", inputs, seed=5)


def test_model_step_agrees_with_gate(lib):
    from crnn_conformance.generators.spec import step as spec_step
    config = {"name": "t", "input_height": 8, "input_channels": 1,
              "blocks": [{"out": 3, "kh": 3, "kw": 3, "padH": 1, "padW": 1, "poolH": 2, "poolW": 2},
                         {"out": 4, "kh": 3, "kw": 2, "padH": 1, "padW": 0, "poolH": 2,
                          "poolW": 1}],
              "lstm_layers": 1, "hidden": 4, "classes": 5, "alphabet": "abcd"}
    rng = np.random.default_rng(6)
    params = model.init_params(config, rng)
    images = [rng.uniform(0, 1, (8, w)).astype(np.float32) for w in (14, 9)]
    targets = [np.array([1, 2, 2], np.int32), np.array([4], np.int32)]
    specs = model.param_specs(config)
    case = SimpleNamespace(
        name="api", params={"names": [s.name for s in specs], "shapes": [list(s.shape) for s in specs],
                            "config": config},
        inputs={"cfg": model.cfg_array(config), "params": model.flatten(config, params),
                "widths": np.array([im.shape[1] for im in images], np.int32),
                "images": np.concatenate([im.ravel() for im in images]),
                "target_lens": np.array([len(t) for t in targets], np.int32),
                "targets": np.concatenate(targets)})
    ours = L.module("step").run(lib, case)
    ours["batch_loss"] = ours["batch_loss"].reshape(())
    r = api.model_step(params, images, targets, config=config)
    g = r.backward(1.0)
    # grad = 1 is the spec's batch gradient, bit for bit
    grads, losses, batch_loss = spec_step.batch_gradient(config, params, images, targets)
    for s in specs:
        assert np.array_equal(g[f"grad_{s.name}"].exact.view(np.uint32), grads[s.name].view(np.uint32))
    assert np.array_equal(r.losses.exact, losses) and float(r.batch_loss.exact) == batch_loss
    names = {f"grad_{s.name}": s.name for s in specs}
    names.update(losses="losses", batch_loss="batch_loss")
    res = _Merged({**{k: r[k] for k in r.names}, **{k: g[k] for k in g.names}})
    assert_agrees(res, names, ours, "step", case.inputs, case.params, seed=6)


def test_references_are_the_fixtures():
    """What the API computes is what the gate's fixtures hold, bit for bit, in both tiers."""
    conv = {c.name: c for c in read_fixture(ROOT / "fixtures" / "conv.h5").cases}
    for name in ("small_C3_7x11", "small_k2x3_6x10_O20"):
        c = conv[name]
        p = c.params
        kw = dict(kernel=(p["kh"], p["kw"]), pad=(p["padH"], p["padW"]), pool=(p["poolH"], p["poolW"]))
        r = api.conv_block(c.inputs["x"], c.inputs["W"], c.inputs["b"], **kw)
        g = r.backward(c.inputs["dPooled"])
        for api_name, gate in (("conv", "conv"), ("pooled", "pooled"), ("winners", "winners"),
                               ("grad_W", "dW"), ("grad_b", "db"), ("grad_x", "dx")):
            sub = r[api_name] if api_name in r else g[api_name]
            for tier in ("exact", "float64"):
                want = c.expected[tier][gate]
                got = sub.exact if tier == "exact" else sub.float64
                assert got.dtype == want.dtype and got.shape == want.shape
                if tier == "exact":
                    assert np.array_equal(got.view(np.uint8), want.view(np.uint8)), (name, gate)
                else:
                    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-15)
    for c in read_fixture(ROOT / "fixtures" / "ctc.h5").cases[:8]:
        scale = float(c.inputs["scale"][0])
        r = api.ctc(c.inputs["logits"], c.inputs["target"])
        g = r.backward(scale)
        assert float(r.exact) == float(c.expected["exact"]["loss"][0])
        assert np.array_equal(g.grad_logits.exact.view(np.uint32),
                              c.expected["exact"]["dlogits"].view(np.uint32))
        np.testing.assert_allclose(g.grad_logits.float64, c.expected["float64"]["dlogits"],
                                   rtol=1e-12, atol=1e-300)


# ---------------------------------------------------------------- names, gradients, errors

@pytest.fixture(scope="module")
def small_conv():
    rng = np.random.default_rng(7)
    x = rng.uniform(0, 1, (6, 8, 2)).astype(np.float32)
    Wt = rng.uniform(-0.3, 0.3, (4, 2, 3, 3)).astype(np.float32)     # PyTorch layout
    b = rng.uniform(-0.3, 0.3, 4).astype(np.float32)
    grad = rng.uniform(-1, 1, (3, 4, 4)).astype(np.float32)
    return x, Wt, b, grad


def test_named_gradients(small_conv):
    x, Wt, b, grad = small_conv
    W = api.from_torch_conv_weight(Wt)
    g = api.conv_block.backward(x, W, b, grad, pool=(2, 2))
    assert g.names == ("grad_x", "grad_W", "grad_b")
    sub = g["grad_W"]
    assert isinstance(sub, api.Result) and sub.names == ("grad_W",)
    assert sub is not g and g.grad_W.names == ("grad_W",)
    assert np.array_equal(g.exact.grad_W, sub.exact) and np.array_equal(g.exact["grad_W"], sub.exact)
    assert sub.exact.dtype == np.float32 and sub.float64.dtype == np.float64
    assert sub.exact.shape == W.shape and g.grad_x.exact.shape == x.shape
    # the allowance: the error model's Atol per element (and the table's conv entry, rtol 0)
    assert sub.atol.shape == sub.exact.shape and sub.rtol == 0.0 and sub.tolerance.layer == "conv"
    assert (sub.atol > 0).any() and (sub.atol[:, 18:] == 0).all()   # the padding columns: exact
    assert sub["grad_W"] is sub
    assert set(g.tolerances) == set(g.names)
    with pytest.raises(KeyError, match="grad_x, grad_W, grad_b"):
        g["grad_y"]
    with pytest.raises(AttributeError):
        g.grad_y
    with pytest.raises(ValueError, match="pick one"):
        g.covers(np.zeros(3))
    # a forward result's backward is the standalone backward
    r = api.conv_block(x, W, b, pool=(2, 2))
    assert r.names == ("conv", "pooled", "winners") and r.winners.exact.dtype == np.int32
    g2 = r.backward(grad)
    for n in g.names:
        assert np.array_equal(g[n].exact.view(np.uint32), g2[n].exact.view(np.uint32))
        assert np.array_equal(g[n].float64, g2[n].float64)
    # a PyTorch-layout weight gives the same numbers, grad_W in that layout
    gt = api.conv_block.backward(x, Wt, b, grad, pool=(2, 2))
    assert gt.grad_W.exact.shape == Wt.shape
    assert np.array_equal(api.from_torch_conv_weight(gt.grad_W.exact)[:, :18], g.grad_W.exact[:, :18])
    assert np.array_equal(gt.grad_x.exact, g.grad_x.exact)
    assert np.array_equal(api.to_torch_conv_weight(W, 2, 3, 3), Wt)


def test_lstm_and_ctc_names():
    rng = np.random.default_rng(8)
    T, I, H = 3, 2, 2
    args = [rng.uniform(-0.5, 0.5, s).astype(np.float32)
            for s in ((T, I), (2, 4 * H, I), (2, 4 * H, H), (2, 4 * H))]
    g = api.lstm_layer.backward(*args, rng.uniform(-1, 1, (T, 2 * H)).astype(np.float32))
    assert g.names == ("grad_x", "grad_W_ih", "grad_W_hh", "grad_b")
    assert g.grad_W_ih.exact.shape == (2, 4 * H, I) and g["grad_W_hh"].tolerance.layer == "lstm"
    assert g["grad_W_hh"].atol.shape == (2, 4 * H, H)
    c = api.ctc.backward(rng.normal(size=(4, 3)).astype(np.float32), [1, 2], 1.0)
    assert c.names == ("grad_logits",) and c.grad_logits.tolerance.tensor == "dlogits"
    with pytest.raises(TypeError, match="no backward"):
        api.adamw_step.backward()


def test_grad_is_required_and_shape_checked(small_conv):
    x, Wt, b, grad = small_conv
    r = api.conv_block(x, Wt, b, pool=(2, 2))
    with pytest.raises(TypeError, match="required"):
        r.backward(None)
    with pytest.raises(ValueError, match=r"grad has shape \(4, 3, 4\) but the forward output "
                                         r"pooled has shape \(3, 4, 4\)"):
        r.backward(np.zeros((4, 3, 4), np.float32))
    with pytest.raises(ValueError, match=r"\(3, 4\).*\(3, 4, 4\)"):
        api.conv_block.backward(x, Wt, b, np.zeros((3, 4), np.float32), pool=(2, 2))
    with pytest.raises(ValueError, match=r"grad has shape \(1,\) but the forward output loss "
                                         r"has shape \(\)"):
        api.ctc.backward(np.zeros((3, 3), np.float32), [1], [1.0])
    with pytest.raises(TypeError):
        api.linear.backward(np.zeros((2, 3), np.float32), np.zeros((4, 3), np.float32),
                            np.zeros(4, np.float32))          # no grad argument at all
    with pytest.raises(ValueError, match=r"b has shape \(5,\), expected \(4,\)"):
        api.linear(np.zeros((2, 3), np.float32), np.zeros((4, 3), np.float32),
                   np.zeros(5, np.float32))


def test_dtype_rules(small_conv):
    x, Wt, b, grad = small_conv
    # float16: an error naming the flag, or widened exactly with it
    with pytest.raises(TypeError, match="allow_float16=True"):
        api.conv_block(x.astype(np.float16), Wt, b, pool=(2, 2))
    with pytest.raises(TypeError, match="allow_float16=True"):
        api.conv_block(x, Wt, b, pool=(2, 2)).backward(grad.astype(np.float16))
    x16 = x.astype(np.float16)
    r16 = api.conv_block(x16, Wt, b, pool=(2, 2), allow_float16=True)
    r32 = api.conv_block(x16.astype(np.float32), Wt, b, pool=(2, 2))
    assert np.array_equal(r16.conv.exact, r32.conv.exact)
    # float64 (and Python floats): taken only when every value is a float32 number
    with pytest.raises(ValueError, match=r"x\[0, 0\] = 0.1 is not a float32 number"):
        api.linear([[0.1, 0.5]], np.ones((1, 2), np.float32), np.zeros(1, np.float32))
    r = api.linear([[0.5, 0.25]], [[1.0, 2]], [0])
    assert r.y.exact.dtype == np.float32 and r.y.float64.dtype == np.float64
    assert r.y.exact.tolist() == [[1.0]]
    # the float64 reference computes on the same float32 inputs, widened exactly
    ra = api.conv_block(x.astype(np.float64), Wt, b, pool=(2, 2))
    rb = api.conv_block(x, Wt, b, pool=(2, 2))
    assert np.array_equal(ra.conv.float64, rb.conv.float64)
    # covers: exact compares bits, so it wants the reference's dtype; float64 takes any floats
    sub = rb["pooled"]
    with pytest.raises(TypeError, match="compares bits"):
        sub.covers(sub.exact.astype(np.float64), tier="exact")
    assert sub.covers(sub.exact.astype(np.float64)).all()
    assert sub.covers(sub.exact.astype(np.float16)).shape == sub.exact.shape
    with pytest.raises(ValueError, match="no broadcasting"):
        sub.covers(sub.exact[0])
    with pytest.raises(ValueError, match="tier"):
        sub.covers(sub.exact, tier="pytorch")
    assert sub.usage(sub.exact, tier="exact") == 0.0
    one_ulp = np.nextafter(sub.exact, np.float32(np.inf))
    assert sub.usage(one_ulp, tier="exact") == 1.0
    assert not sub.covers(one_ulp, tier="exact").any()


@pytest.mark.skipif(not HAS_TORCH, reason="torch is not installed")
def test_torch_tensors_accepted(small_conv):
    import torch
    x, Wt, b, grad = small_conv
    r = api.conv_block(torch.from_numpy(x), torch.from_numpy(Wt).requires_grad_(), b, pool=(2, 2))
    ref = api.conv_block(x, Wt, b, pool=(2, 2))
    assert np.array_equal(r.conv.exact, ref.conv.exact)
    t = torch.from_numpy(ref.pooled.exact.copy()).requires_grad_()
    assert r.pooled.covers(t).all() and r.pooled.covers(t, tier="exact").all()
    with pytest.raises(TypeError, match="allow_float16"):
        api.conv_block(torch.from_numpy(x).half(), Wt, b, pool=(2, 2))
    with pytest.raises(TypeError, match="bfloat16.*float32 explicitly"):
        api.conv_block(torch.from_numpy(x).bfloat16(), Wt, b, pool=(2, 2))


# ---------------------------------------------------------------- docs/python-api.md

def doc_examples() -> list:
    """(title, code, expected output or None) for every ```python block of the guide; the
    ```output block right after a code block is what it prints."""
    text = DOC.read_text()
    blocks = list(re.finditer(r"^```(\w*)\n(.*?)^```$", text, re.S | re.M))
    out = []
    for i, m in enumerate(blocks):
        if m.group(1) != "python":
            continue
        heading = re.findall(r"^#+ (.+)$", text[:m.start()], re.M)
        nxt = blocks[i + 1] if i + 1 < len(blocks) else None
        between = text[m.end():nxt.start()] if nxt else ""
        expected = nxt.group(2) if nxt and nxt.group(1) == "output" and not between.strip() else None
        out.append((f"{heading[-1] if heading else 'top'} #{i}", m.group(2), expected))
    return out


EXAMPLES = doc_examples() if DOC.exists() else []


def test_doc_has_the_three_examples():
    code = "\n".join(c for _, c, _ in EXAMPLES)
    assert "import torch" in code and ".covers(" in code          # a PyTorch conv block
    assert "lstm_layer" in code and ".backward(" in code           # backward on an LSTM layer
    assert "ctc" in code and ".usage(" in code                     # usage on a CTC gradient
    assert sum(e is not None for _, _, e in EXAMPLES) >= 3


@pytest.mark.parametrize("title,code,expected", EXAMPLES, ids=[t for t, _, _ in EXAMPLES])
def test_doc_example(title, code, expected):
    if "import torch" in code and not HAS_TORCH:
        pytest.skip("torch is not installed")
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        exec(compile(code, f"{DOC.name}: {title}", "exec"), {"__name__": "__doc_example__"})
    if expected is not None:
        assert buf.getvalue() == expected
