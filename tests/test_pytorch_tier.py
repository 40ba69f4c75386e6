"""The pytorch tier: the single permitted pool flip (each case built from synthetic data), the
3-step mask, regen of the pytorch fixtures (byte-identical; --check within Floors when torch
or the CPU differ: tests/test_fixture_compare.py), and the gate's pytorch tier on the bundled
port."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys

import h5py
import numpy as np
import pytest

from crnn_conformance.generators import pytorch_ref as R
from crnn_conformance.generators.pytorch_ref import data as R_data
from crnn_conformance.generators.spec import conv as spec_conv
from crnn_conformance.harness import flips as FL

PT_FIXTURES = ["pytorch_conv", "pytorch_lstm", "pytorch_linear", "pytorch_ctc", "pytorch_step",
               "pytorch_adamw", "pytorch_train3"]
GEO = {"kh": 3, "kw": 3, "padH": 1, "padW": 1, "poolH": 2, "poolW": 2}


# ------------------------------------------------------------------ synthetic blocks


def block(x, W, b):
    """The spec's conv block on x [H][W][C]: (conv [P][Out], pooled, winners)."""
    return spec_conv.forward(x, W, b, *(GEO[k] for k in ("kh", "kw", "padH", "padW", "poolH",
                                                          "poolW")))


def weights(rng, C, Out, positive=False):
    K = 9 * C
    W = np.zeros((Out, (K + 15) // 16 * 16), np.float32)
    W[:, :K] = rng.uniform(0.05 if positive else -0.5, 0.5, (Out, K))
    return W


CONV_ATOL = 1e-5      # a synthetic per-element conv Atol for these blocks (every cell)


def classify(ours_w, pt_w, pt_pooled, conv, x, floor=0.0):
    atol = np.full(np.size(conv), CONV_ATOL)
    return FL.Verdict(FL.classify_block(ours_w, pt_w, pt_pooled, conv, x, GEO, 0, 0,
                                        FL.conv_bound_fn(floor, atol)))


@pytest.fixture
def random_block():
    rng = np.random.default_rng(11)
    x = rng.uniform(0, 1, (6, 8, 1)).astype(np.float32)
    W = weights(rng, 1, 3)
    b = np.array([0.1, 0.2, -0.1], np.float32)
    conv, pooled, win = block(x, W, b)
    return x, conv, pooled, win


def live_window(win, conv, Wc=8, Out=3):
    """A live window (oy, ox, o), its winner cell a and another cell b of the window."""
    for idx in zip(*np.nonzero(win >= 0)):
        oy, ox, o = (int(i) for i in idx)
        a = int(win[idx])
        for dy in range(2):
            for dx in range(2):
                b = ((2 * oy + dy) * Wc + 2 * ox + dx) * Out + o
                if b != a:
                    return (oy, ox, o), a, b
    raise AssertionError("no live window")


def test_no_flip(random_block):
    x, conv, pooled, win = random_block
    v = classify(win, win, pooled, conv, x)
    assert v.diffs == [] and v.passed and v.used is None
    assert v.note().startswith("no flip")


def test_twin_tie_is_not_a_flip():
    rng = np.random.default_rng(5)
    x = np.full((6, 8, 1), 0.5, np.float32)          # interior cells read identical windows
    W = weights(rng, 1, 2, positive=True)
    b = np.array([0.1, 0.3], np.float32)
    conv, pooled, win = block(x, W, b)
    pat = FL.patches(x, 3, 3, 1, 1)
    pt = win.copy()
    changed = 0
    for idx in zip(*np.nonzero(win >= 0)):
        oy, ox, o = (int(i) for i in idx)
        a = int(win[idx])
        pa = a // 2
        for dy in range(2):
            for dx in range(2):
                p = (2 * oy + dy) * 8 + 2 * ox + dx
                if p != pa and np.array_equal(pat[p // 8, p % 8], pat[pa // 8, pa % 8]):
                    pt[idx] = p * 2 + o                 # PyTorch picked the twin
        changed += int(pt[idx] != win[idx])
    assert changed > 0
    v = classify(win, pt, pooled, conv, x)
    assert v.counts == {"dead": 0, "twin": changed, "near-tie": 0, "flip": 0}
    assert v.passed and v.used is None


def test_dead_window_is_not_a_difference():
    rng = np.random.default_rng(6)
    x = rng.uniform(0, 1, (6, 8, 1)).astype(np.float32)
    W = weights(rng, 1, 2)
    b = np.array([-50.0, -50.0], np.float32)          # nothing positive: every window dead
    conv, pooled, win = block(x, W, b)
    assert (win == -1).all() and (pooled == 0).all()
    Hp, Wp, Out = win.shape
    oy, ox, o = np.meshgrid(np.arange(Hp), np.arange(Wp), np.arange(Out), indexing="ij")
    pt = ((2 * oy * 8 + 2 * ox) * Out + o).astype(np.int32)   # PyTorch: the first cell, 0
    v = classify(win, pt, pooled, conv, x)
    assert v.counts == {"dead": win.size, "twin": 0, "near-tie": 0, "flip": 0}
    assert v.passed and v.used is None
    assert len(v.diffs) == 1        # the block's dead windows, counted in one entry


def _flip(conv, win, pooled, margin):
    """PyTorch picks another cell b of a live window; the port's value there is v_a - margin."""
    idx, a, b = live_window(win, conv)
    conv = conv.copy()
    conv.flat[b] = np.float32(conv.flat[a] - margin)
    pt = win.copy()
    pt[idx] = b
    return conv, pt, idx, a, b


def test_one_flip_within_rounding_is_used_and_excuses_its_channel(random_block):
    x, conv, pooled, win = random_block
    conv2, pt, idx, a, b = _flip(conv, win, pooled, 1e-6)
    v = classify(win, pt, pooled, conv2, x, floor=1e-7)
    assert v.counts["flip"] == 1 and v.passed
    d = v.used
    assert d is not None and d.channel == idx[2] and d.window == list(idx)
    assert d.margin == pytest.approx(1e-6, rel=0.1)
    assert d.bound == pytest.approx(4 * CONV_ATOL + 4 * 1e-7)   # 2 Atol + 2 Floor per cell
    assert "1 flip used" in v.note()
    # block 0's weight gradient: out of allowance only in the flip's channel -> excused
    rng = np.random.default_rng(1)
    ref = rng.normal(0, 1e-3, (3, 16)).astype(np.float32)
    ours = ref.copy()
    ours[idx[2], 4] += np.float32(1e-3)
    c = FL.judge("conv0.W", ours, ref, 1e-6, 0.0, 1e-7, v)
    assert c.passed and c.mismatches == 0 and "1 flip used" in c.note
    assert c.excused["elements"] == 1 and c.excused["usage"] > 1
    # ... bias too
    rb = rng.normal(0, 1e-3, 3).astype(np.float32)
    ob = rb.copy()
    ob[idx[2]] += np.float32(1e-3)
    assert FL.judge("conv0.b", ob, rb, 1e-6, 0.0, 1e-7, v).passed
    # an element outside the channel is not excused
    ours[(idx[2] + 1) % 3, 4] += np.float32(1e-3)
    c = FL.judge("conv0.W", ours, ref, 1e-6, 0.0, 1e-7, v)
    assert not c.passed and "outside channel" in c.note
    # nor is another block's or tensor's
    assert not FL.judge("conv1.W", ours, ref, 1e-6, 0.0, 1e-7, v).passed
    assert not FL.judge("fc.W", ours, ref, 1e-6, 0.0, 1e-7, v).passed


def test_one_flip_beyond_rounding_fails(random_block):
    x, conv, pooled, win = random_block
    conv2, pt, idx, a, b = _flip(conv, win, pooled, 1e-3)
    v = classify(win, pt, pooled, conv2, x, floor=1e-7)
    assert v.counts["flip"] == 1 and not v.passed and v.used is None
    assert "beyond rounding" in v.note()
    ref = np.zeros((3, 16), np.float32)
    ours = ref.copy()
    ours[idx[2], 0] = 1.0
    assert not FL.judge("conv0.W", ours, ref, 1e-6, 0.0, 1e-7, v).passed


def test_two_flips_fail(random_block):
    x, conv, pooled, win = random_block
    conv2, pt, idx, a, b = _flip(conv, win, pooled, 1e-6)
    win2 = win.copy()
    win2[idx] = -2                                   # hide the first window from the search
    idx2, a2, b2 = live_window(win2, conv)
    conv2.flat[b2] = np.float32(conv2.flat[a2] - 1e-6)
    pt[idx2] = b2
    v = classify(win, pt, pooled, conv2, x, floor=1e-7)
    assert v.counts["flip"] == 2 and not v.passed and v.used is None
    assert "more than one flip" in v.note()


def test_a_window_only_one_side_finds_live_is_a_flip_with_none(random_block):
    x, conv, pooled, win = random_block
    idx, a, b = live_window(win, conv)
    pooled_pt = pooled.copy()
    pooled_pt[idx] = 0.0                             # PyTorch found nothing positive
    v = classify(win, win, pooled_pt, conv, x)
    d = v.flips[0]
    assert d.pytorch == -1 and d.ours == a and d.margin == pytest.approx(float(conv.flat[a]))


# ------------------------------------------------------------------ the real step fixture


@pytest.fixture(scope="module")
def step_case():
    from crnn_conformance.generators.h5io import read_fixture
    return read_fixture(R.ROOT / "fixtures" / "pytorch_step.h5").cases[0]


@pytest.fixture(scope="module")
def step_ours(lib, step_case):
    from crnn_conformance.harness.layers import step
    return step.run(lib, step_case)


def _records(case, ours, ref):
    from crnn_conformance.harness.layers import step
    from crnn_conformance.harness.case_checks import tier_tolerance
    return {t: step.compare_tier(case, "pytorch", t, ours, ref,
                                 tier_tolerance("step", case, "pytorch", t),
                                 case.floor.get(t, 0.0)) for t in ref}


def test_step_pool_decisions_are_the_steps(step_case, step_ours):
    """The port's winners the flip rule uses come from the step's own conv forward: the
    per-line conv chain reproduces the step's loss-free forward, so on this fixture they equal
    PyTorch's everywhere but dead windows."""
    v = FL.analyse_step(step_case, step_ours, step_case.expected["pytorch"])
    assert v.counts["flip"] == 0 and v.counts["twin"] == 0 and v.counts["dead"] > 10000


def test_step_flip_used_end_to_end(step_case, step_ours):
    ref = dict(step_case.expected["pytorch"])
    ours = dict(step_ours)
    lay = FL.layout(step_case.params["config"], step_case.inputs["widths"])
    g = lay[0][0]                                     # line 0, block 0
    shp = (g["Hp"], g["Wp"], g["out"])
    ow = np.asarray(ours["winners"][g["w_at"]:g["w_at"] + g["w_n"]]).reshape(shp)
    conv = np.asarray(ours["conv_out"][g["c_at"]:g["c_at"] + g["c_n"]]).reshape(-1, g["out"])
    idx, a, b = live_window(ow, conv, Wc=g["Wc"], Out=g["out"])
    win = np.array(ref["winners"])
    win[g["w_at"] + np.ravel_multi_index(idx, shp)] = b
    ref["winners"] = win
    from crnn_conformance.harness import allowance
    atol = allowance.allowances("step", step_case)["conv_out"][g["c_at"]:g["c_at"] + g["c_n"]]
    bound = FL.conv_bound_fn(float(step_case.params["conv_floor"][0]), atol)(a, b)
    co = np.array(ours["conv_out"])
    co[g["c_at"] + b] = np.float32(co[g["c_at"] + a] - 0.5 * bound)   # within rounding
    ours["conv_out"] = co
    o = idx[2]
    W = np.array(ref["conv0.W"])
    W[o, 3] += np.float32(1e-2)                       # the flip's channel: far out of allowance
    ref["conv0.W"] = W
    recs = _records(step_case, ours, ref)
    assert recs["winners"].passed and "1 flip used" in recs["winners"].note
    assert recs["conv0.W"].passed and "1 flip used" in recs["conv0.W"].note
    meta = recs["winners"].flips
    assert len(meta) == 1 and meta[0]["used"] and meta[0]["block"] == 1
    assert meta[0]["channel"] == o and meta[0]["window"] == list(idx)
    # the same flip with a margin beyond rounding fails and excuses nothing
    co2 = np.array(step_ours["conv_out"])
    ours2 = dict(step_ours, conv_out=co2)
    recs = _records(step_case, ours2, ref)
    assert not recs["winners"].passed and not recs["conv0.W"].passed
    assert recs["winners"].flips[0]["used"] is False


def test_the_step_verdict_is_made_once_per_case_and_tier(step_case, step_ours, monkeypatch):
    """The gate's records of a pytorch_step case: one analyse_step for all its tensors (the
    one flip a gradient may use is the case's), the winners record carries the flips for
    meta["flips"] and its document (to_dict) does not."""
    from crnn_conformance.harness import case_checks, records
    from crnn_conformance.harness.flips import compare as FC
    from crnn_conformance.harness.layers import step
    calls = []

    def counted(*args, **kw):
        calls.append(args[0].name)
        return FL.analyse_step(*args, **kw)
    monkeypatch.setattr(FC, "analyse_step", counted)
    recs = case_checks._tier_records(records.GateOptions(), step, step_case, "pytorch",
                                     step_ours, "scalar")
    assert calls == [step_case.name]
    assert len(recs) == len(step_case.expected["pytorch"]) > 2
    w = [r for r in recs if r.tensor == "winners"]
    assert len(w) == 1 and w[0].flips == [] and w[0].passed
    assert all(r.flips is None for r in recs if r.tensor != "winners")
    assert all("flips" not in r.to_dict() for r in recs)


def test_a_window_described_without_its_bound():
    d = FL.WindowDiff(FL.FLIP, 2, 1, [3, 4, 5], 5, 17, 23, 0.5, 0.25, 0.375, 0.25, 1e-6)
    long, short = d.describe(), d.describe(with_bound=False)
    assert long == short + ", rounding bound 1e-06"
    assert short.startswith("line 2, block 2 (conv1), channel 5, window [oy, ox] = [3, 4]: "
                            "port cell 17 = 0.5, PyTorch cell 23 = 0.375")
    assert short.endswith("(port's value there 0.25), margin 0.25")


def test_gate_meta_carries_flips(tmp_path, step_case):
    """A fixture with a flip beyond rounding: the gate fails and meta["flips"] lists it."""
    from crnn_conformance.generators.h5io import read_fixture, write_fixture
    from crnn_conformance.harness.runner import GateOptions, run_gate
    src = R.ROOT / "fixtures"
    shutil.copy(src / "step.h5", tmp_path / "step.h5")
    fx = read_fixture(src / "pytorch_step.h5")
    case = fx.cases[0]
    lay = FL.layout(case.params["config"], case.inputs["widths"])
    g = lay[1][1]                                     # line 1, block 1
    w = case.expected["pytorch"]["winners"]
    seg = w[g["w_at"]:g["w_at"] + g["w_n"]]
    i = int(np.flatnonzero(case.inputs["pt_pooled"][g["w_at"]:g["w_at"] + g["w_n"]] > 0.1)[0])
    xpos = (seg[i] // g["out"]) % g["Wc"]             # PyTorch: the window's other column
    seg[i] = seg[i] + g["out"] if xpos % 2 == 0 else seg[i] - g["out"]
    write_fixture(tmp_path / "pytorch_step.h5", "step", "test", 0, fx.cases)
    r = run_gate(GateOptions(fixtures=tmp_path, layers=["step"], tiers=("pytorch",),
                             threads=(1,), case="crnn_v0_trained_b4"))
    assert not r.passed
    assert len(r.meta["flips"]) == 1 and r.meta["flips"][0]["block"] == 2
    assert not r.meta["flips"][0]["used"]
    # the results document (flips in meta, the failing winners record) follows the schema,
    # and the HTML report shows the flip
    from crnn_conformance.reports import html, json_report
    json_report.write(r, tmp_path / "rep")
    doc = json.loads((tmp_path / "rep" / "results.json").read_text())
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads((R.ROOT / "reports" / "results.schema.json").read_text())
    jsonschema.validate(doc, schema, cls=jsonschema.Draft202012Validator)
    page = html.write(doc, tmp_path / "rep").read_text()
    assert 'id="flips"' in page and str(r.meta["flips"][0]["margin"])[:6] in page


# ------------------------------------------------------------------ the gate's pytorch tier


@pytest.fixture(scope="module")
def pytorch_gate():
    from crnn_conformance.harness.runner import GateOptions, run_gate
    return run_gate(GateOptions(tiers=("pytorch",), threads=(1,)))


def test_gate_pytorch_tier_passes_on_the_bundled_port(pytorch_gate):
    recs = [r for r in pytorch_gate.records if r.tier == "pytorch"]
    assert pytorch_gate.passed, [(r.layer, r.case, r.tensor, r.note) for r in recs if not r.passed]
    layers = {r.layer for r in recs}
    assert layers == {"conv", "lstm", "linear", "ctc", "step", "adamw", "train3"}
    assert all(r.usage <= 1 for r in recs)
    assert pytorch_gate.meta["flips"] == []           # the step tier judged flips: none used
    w = [r for r in recs if r.layer == "step" and r.tensor == "winners"]
    assert len(w) == 1 and w[0].note.startswith("no flip")


def test_train3_mask_note(pytorch_gate):
    recs = [r for r in pytorch_gate.records if r.tier == "pytorch" and r.layer == "train3"]
    assert len(recs) == 20
    total = 0
    for r in recs:
        n, _, m = r.note.partition(" of ")
        total += int(n)
        assert "masked" in r.note and int(m.split()[0]) == r.elements
    case = [c for c in _fixture("pytorch_train3").cases][0]
    assert total == case.params["compared_total"] > 0


def test_train3_mask_is_the_generators():
    case = _fixture("pytorch_train3").cases[0]
    for n in case.params["names"]:
        m = R.train_mask([case.inputs[f"grad{t}.{n}"] for t in range(3)],
                         [case.floor[f"inputs/grad{t}.{n}"] for t in range(3)])
        assert int(m.sum()) == case.params["compared"][n]


def _fixture(name):
    from crnn_conformance.generators.h5io import read_fixture
    return read_fixture(R.ROOT / "fixtures" / f"{name}.h5")


def test_fixture_provenance_and_size():
    total = 0
    for name in PT_FIXTURES:
        fx = _fixture(name)
        for k in ("torch_version", "cpu_flags", "generator_git_revision", "torch_cpu_capability"):
            assert fx.attrs.get(k), (name, k)
        assert json.loads(fx.attrs["cpu_flags"])
        total += (R.ROOT / "fixtures" / f"{name}.h5").stat().st_size
        for case in fx.cases:
            assert list(case.expected) == ["pytorch"]
            for t, a in case.expected["pytorch"].items():
                if np.asarray(a).dtype.kind == "f":
                    assert t in case.floor and case.floor[t] >= 0, (name, case.name, t)
    assert total < 30e6


def test_functional_model_is_torch_models_crnn():
    import torch

    from crnn_conformance.generators import torch_model as tm
    d = R.batch_data()
    crnn = tm.build(d["config"], d["params"])
    with R.deterministic():   # with autograd on, as the fixtures run (inference may pick
        for image, tr in zip(d["images"], d["fp32"]["traces"]):   # another LSTM kernel)
            z = crnn.logits(torch.from_numpy(image)[None])[:, 0].detach().numpy()
            assert np.array_equal(z, tr["logits"])


def test_pytorch_winners_layout_matches_the_spec():
    """winners_from_torch on a real block equals the spec's winners on live windows."""
    d = R.batch_data()
    tr = d["fp32"]["traces"][2]
    blk = d["config"]["blocks"][0]
    x = tr["block_in"][0]
    _, pooled, win = spec_conv.forward(x, d["params"]["conv0.W"], d["params"]["conv0.b"],
                                       *(blk[k] for k in ("kh", "kw", "padH", "padW", "poolH",
                                                          "poolW")))
    live = pooled > 0
    assert live.any() and np.array_equal(win[live], tr["winners"][0][live])


# ------------------------------------------------------------------ regen


def _regen(*args, env=None):
    import os
    return subprocess.run([sys.executable, "-m", "crnn_conformance.generators.regen", "-q", *args],
                          capture_output=True, text=True, cwd=R.ROOT,
                          env={**os.environ, **(env or {})})


def test_pytorch_fixtures_regenerate_byte_identically(tmp_path):
    only = [a for n in PT_FIXTURES for a in ("--only", n)]
    # the git revision attribute is pinned: other work in the tree may make it '+dirty'
    # between the two builds; everything else must come out the same
    for d in ("a", "b"):
        r = _regen(*only, "--out", str(tmp_path / d), env={"CRNN_GENERATOR_REVISION": "test"})
        assert r.returncode == 0, r.stderr
    for n in PT_FIXTURES:
        a = (tmp_path / "a" / f"{n}.h5").read_bytes()
        assert a == (tmp_path / "b" / f"{n}.h5").read_bytes(), n


def test_check_passes_on_the_checked_in_pytorch_fixtures():
    r = _regen("--check", *[a for n in PT_FIXTURES for a in ("--only", n)])
    assert r.returncode == 0, r.stdout + r.stderr


def test_retrain_cannot_be_combined_with_check():
    r = _regen("--retrain", "--check", "--only", "pytorch_ctc")
    assert r.returncode == 2 and "--retrain" in r.stderr


def test_retrain_then_regenerates_from_the_new_model(tmp_path, monkeypatch):
    """--retrain runs the trainer (stubbed here: it 'trains' by copying the checked-in model),
    writes the model under OUT/model/ and builds the pytorch fixtures from it."""
    from click.testing import CliRunner

    from crnn_conformance.generators import regen, train
    calls = []

    def fake_train(argv):
        out = argv[argv.index("--out") + 1]
        calls.append(out)
        shutil.copy(R_data.MODEL_PATH, out)
        with h5py.File(out, "r+") as f:                       # a visibly different model
            d = f["params/fc.b"]
            d[0] = d[0] + np.float16(0.5)
        return 0

    monkeypatch.setattr(train, "main", fake_train)
    monkeypatch.setattr(R_data, "MODEL_PATH", R_data.MODEL_PATH)   # restored after the test
    r = CliRunner().invoke(regen.main, ["--retrain", "--out", str(tmp_path), "--only",
                                        "pytorch_ctc", "-q"])
    assert r.exit_code == 0, r.output
    assert calls == [str(tmp_path / "model" / "crnn-v0.h5")]
    assert R_data.MODEL_PATH == tmp_path / "model" / "crnn-v0.h5"
    diff = regen.differences(R.ROOT / "fixtures" / "pytorch_ctc.h5", tmp_path / "pytorch_ctc.h5")
    # the logits (and with the same torch and CPU the outputs, Floors and counts) and the
    # recorded model path differ; nothing else does
    assert any("/inputs/logits" in d for d in diff)
    assert all("/inputs/logits" in d or "/expected/pytorch/" in d or "attribute" in d
               for d in diff)
    assert "attribute model differs" in diff
    with h5py.File(tmp_path / "pytorch_ctc.h5", "r") as f:
        assert f.attrs["model"] == str(tmp_path / "model" / "crnn-v0.h5")
