"""Pool decisions in the float64 and pytorch tiers: a legal port is not failed at a tie.

tests/ports/blasport.c is a conv port written like one on an fp32 BLAS: im2col, then a
blocked sgemm whose order of summation for output position p depends on p mod 4 (sequential,
8 lanes, 16 lanes, reversed with the bias first), so twin cells (identical input windows)
differ by a few ulps where the spec has them equal, and the port's first maximum is the larger
twin. Every order is legal: the float64 and pytorch tiers must pass it on every conv case.
Its -DBP_TIES_LAST variant breaks ties of its own equal values the wrong way (>=): the float64
tier's winners must fail, saying why.
"""
from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from crnn_conformance.generators.float64 import conv as conv64
from crnn_conformance.generators.h5io import read_fixture
from crnn_conformance.harness import allowance
from crnn_conformance.harness.layers import conv as hconv
from crnn_conformance.harness.runner import FIXTURES_DIR

from testports import build_port, gate  # noqa: E402

F32 = np.float32
TIES = "b*_ties_*"


@pytest.fixture(scope="module")
def ports(tmp_path_factory):
    d = tmp_path_factory.mktemp("blasport")
    return {"blas": build_port(d, source="blasport.c"),
            "last": build_port(d, "-DBP_TIES_LAST", source="blasport.c")}


def _records(path) -> list[dict]:
    """results.json's tensors, the document checked against its schema."""
    doc = json.loads(Path(path).read_text())
    jsonschema = pytest.importorskip("jsonschema")
    schema = Path(__file__).resolve().parent.parent / "reports" / "results.schema.json"
    jsonschema.validate(doc, json.loads(schema.read_text()))
    return doc["tensors"]


def test_blas_port_passes_float64_and_pytorch(ports, tmp_path):
    out = tmp_path / "r.json"
    r = gate("--port", str(ports["blas"]), "--layers", "conv", "--tiers", "float64,pytorch",
             "--threads", "1", "--json", str(out), "-q", timeout=300)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    recs = _records(out)
    ties = [x for x in recs if x["tier"] == "float64" and "_ties_" in x["case"]]
    assert {x["tensor"] for x in ties} >= {"conv", "pooled", "winners", "dW", "db", "dx"}
    assert all(x["passed"] for x in recs)
    # the port really decides the twins otherwise than the reference, and the gate says so
    for x in ties:
        if x["tensor"] == "winners":
            assert "decided otherwise than the reference within rounding" in x["note"], x
            assert x["usage"] == 0.0                    # twins: equal in float64


def test_blas_port_last_max_fails_winners_only(ports, tmp_path):
    out = tmp_path / "r.json"
    r = gate("--port", str(ports["last"]), "--layers", "conv", "--tiers", "float64",
             "--case", TIES, "--threads", "1", "--json", str(out), timeout=300)
    assert r.returncode == 1, r.stdout[-4000:] + r.stderr[-2000:]
    failed = [x for x in _records(out) if not x["passed"]]
    assert {(x["case"], x["tensor"]) for x in failed} == {
        (c, "winners") for c in ("b1_ties_W101", "b2_ties_W65", "b3_ties_W33")}
    for x in failed:
        assert "not the first maximum of the port's own conv values" in x["note"], x["note"]
        assert "(an exact tie: the first of equal maxima wins)" in x["note"]
    line = next(l for l in r.stdout.splitlines() if l.startswith("FAIL conv/b1_ties_W101/winners"))
    assert "tier=float64" in line and "worst [" in line and "ours=" in line and "ref=" in line


# ------------------------------------------------------------------ the hook on its own


@pytest.fixture(scope="module")
def tie_case():
    return next(c for c in read_fixture(FIXTURES_DIR / "conv.h5").cases if c.name == "b2_ties_W65")


def _twin_window(case):
    """A window whose reference winner has a later twin in the window: (window index, the
    winner, the twin)."""
    w = case.expected["float64"]["winners"]
    conv = case.expected["float64"]["conv"].ravel()
    p = case.params
    Out, Wc, ph, pw = p["Out"], p["Wc"], p["poolH"], p["poolW"]
    for idx in zip(*np.nonzero(w >= 0)):
        oy, ox, o = idx
        cells = [((oy * ph + dy) * Wc + ox * pw + dx) * Out + o for dy in range(ph) for dx in range(pw)]
        win = int(w[idx])
        later = [c for c in cells[cells.index(win) + 1:] if conv[c] == conv[win]]
        if later:
            return idx, win, later[0]
    raise AssertionError("no twin tie")


def _compare(case, ours):
    return hconv.compare_tier(case, "float64", "winners", ours, case.expected["float64"], None, None)


def test_a_twin_rounded_above_may_win(tie_case):
    ours = {k: np.array(v, copy=True) for k, v in tie_case.expected["exact"].items()}
    idx, win, twin = _twin_window(tie_case)
    ours["conv"].flat[twin] = np.nextafter(ours["conv"].flat[twin], F32(np.inf))   # 1 ulp up
    ours["winners"][idx] = twin
    c = _compare(tie_case, ours)
    assert c.passed, c.note
    assert "1 window(s) decided otherwise" in c.note


def test_a_twin_that_does_not_lead_may_not_win(tie_case):
    ours = {k: np.array(v, copy=True) for k, v in tie_case.expected["exact"].items()}
    idx, win, twin = _twin_window(tie_case)
    ours["winners"][idx] = twin                  # equal values: the first must win
    c = _compare(tie_case, ours)
    assert not c.passed and c.usage == float("inf") and c.mismatches == 1
    assert f"window {list(map(int, idx))}: port cell {twin} = " in c.note
    assert f"first maximum cell {win} = " in c.note and "margin 0 (an exact tie" in c.note
    assert c.worst["index"] == list(map(int, idx)) and c.worst["ours"] == twin


def test_a_cell_beyond_rounding_is_a_flip(tie_case):
    """A window that is no near-tie: the port's values say another cell, the reference's
    winner is far above it. Its own first maximum, but not a legal decision: a flip."""
    ours = {k: np.array(v, copy=True) for k, v in tie_case.expected["exact"].items()}
    ref = tie_case.expected["float64"]
    a = allowance.allowances("conv", tie_case)
    w = ref["winners"]
    p = tie_case.params
    Out, Wc = p["Out"], p["Wc"]
    near = set(a["winners.windows"].tolist())
    flat = next(i for i in np.flatnonzero(w.ravel() >= 0) if i not in near)
    idx = np.unravel_index(flat, w.shape)
    oy, ox, o = idx
    loser = next(((oy * 2 + dy) * Wc + ox * 2 + dx) * Out + o for dy in (0, 1) for dx in (0, 1)
                 if ((oy * 2 + dy) * Wc + ox * 2 + dx) * Out + o != w[idx])
    ours["conv"].flat[loser] = ours["conv"].flat[w[idx]] * F32(2)
    ours["winners"][idx] = loser
    c = _compare(tie_case, ours)
    assert not c.passed and c.mismatches == 1
    assert c.note.startswith("1 decision flip(s) against float64: ")
    assert f"port cell {loser} = " in c.note and f"reference cell {int(w[idx])} = " in c.note
    assert "margin " in c.note and "margin 0 " not in c.note
    assert "first maximum" not in c.note


def test_none_is_legal_where_the_winner_is_within_rounding_of_zero():
    """conv = x0*W0 + x1*W1 = (1 + 2^-23)^2 - (1 + 2^-22) = 2^-46 exactly: the reference's winner
    is the cell, and a port that rounds the product first gets 0 there and ends with none (-1).
    The error model's near_ties() allows it; the same port saying -1 with a positive value of
    its own does not."""
    x = np.array([[[1 + 2**-23, 1.0]]], F32)
    W = np.zeros((1, 16), F32)
    W[0, :2] = [1 + 2**-23, -(1 + 2**-22)]
    b = np.zeros(1, F32)
    case = SimpleNamespace(name="t", params={"H": 1, "W": 1, "C": 2, "Out": 1, "kh": 1, "kw": 1,
                                             "padH": 0, "padW": 0, "poolH": 1, "poolW": 1, "dx": True},
                           inputs={"x": x, "W": W, "b": b, "dPooled": np.ones((1, 1, 1), F32)})
    conv, _, win = conv64.forward(x, W, b, 1, 1, 0, 0, 1, 1)
    assert conv[0, 0] == 2.0**-46 and win[0, 0, 0] == 0
    ref = {"conv": conv, "winners": win}
    product_first = F32(F32(x[0, 0, 0] * W[0, 0]) + F32(x[0, 0, 1] * W[0, 1]))
    assert product_first == 0
    ours = {"conv": np.array([[product_first]], F32), "winners": np.full((1, 1, 1), -1, np.int32)}
    c = hconv.compare_tier(case, "float64", "winners", ours, ref, None, None)
    assert c.passed, c.note
    assert 0 < c.usage < 1e-6
    ours["conv"][0, 0] = F32(2.0**-46)           # its own value positive: -1 breaks the rule
    c = hconv.compare_tier(case, "float64", "winners", ours, ref, None, None)
    assert not c.passed and "not the first maximum of the port's own conv values" in c.note


# ------------------------------------------------------------------ the pytorch tier


def test_pytorch_layer_winners_allow_the_models_near_tie():
    """pytorch_conv's b1_line3_W257 has one window whose winner is 8e-8 above 0 with a conv
    allowance of 3e-7: a legal port may round it to <= 0 and end with none. The per-layer
    pytorch tier permits no flip; this is none (the error model's near_ties() allows it, as in
    the float64 tier), while a cell beyond rounding in the same window still is one."""
    case = next(c for c in read_fixture(FIXTURES_DIR / "pytorch_conv.h5").cases
                if c.name == "b1_line3_W257")
    a = allowance.allowances("conv", case)
    assert a["winners.none"].size == 1
    ref = case.expected["pytorch"]
    ours = {k: np.array(v, copy=True) for k, v in ref.items()}
    ours["winners"] = np.where(ref["pooled"] > 0, ref["winners"], -1).astype(np.int32)   # the spec's -1
    assert hconv.compare_tier(case, "pytorch", "winners", ours, ref, None, None).passed
    idx = np.unravel_index(int(a["winners.none"][0]), ref["winners"].shape)
    cell = int(ref["winners"][idx])
    assert 0 < ref["pooled"][idx] < a["conv"].ravel()[cell]
    ours["conv"].flat[cell] = F32(-1e-9)
    ours["winners"][idx] = -1
    c = hconv.compare_tier(case, "pytorch", "winners", ours, ref, None, None)
    assert c.passed, c.note
    assert "1 near-tie(s) decided within rounding" in c.note
    Out, x = case.params["Out"], np.asarray(case.inputs["x"])
    Wc = x.shape[1] + 2 * case.params["padW"] - case.params["kw"] + 1
    col = (cell // Out) % Wc                       # the window's other column (pool 2 x 2)
    other = cell + Out if col % 2 == 0 else cell - Out
    ours["conv"].flat[other] = F32(1.0)
    ours["winners"][idx] = other
    c = hconv.compare_tier(case, "pytorch", "winners", ours, ref, None, None)
    assert not c.passed and "1 decision flip(s) against PyTorch" in c.note
    assert f"port cell {other} = 1.0, PyTorch cell {cell} = " in c.note and "margin" in c.note


def test_step_near_tie_does_not_use_the_one_flip(lib):
    """pytorch_step holds the same near-tie window (line 3, block 1). A legal port ending with
    none there and flipping one other window within rounding has one flip, used; the near-tie
    is not a second one (which would fail the record)."""
    from crnn_conformance.harness import flips as FL
    from crnn_conformance.harness.layers import step
    from crnn_conformance.harness.case_checks import tier_tolerance
    case = read_fixture(FIXTURES_DIR / "pytorch_step.h5").cases[0]
    ours = dict(step.run(lib, case))
    ref = dict(case.expected["pytorch"])
    a = allowance.allowances("step", case)
    assert a["winners.none"].size == 1 and a["winners.cells"].size == 1
    win = np.array(ours["winners"])
    co = np.array(ours["conv_out"])
    near = int(a["winners.none"][0])
    assert win[near] == int(a["winners.cells"][0]) - _c_offset(case, near)
    co[int(a["winners.cells"][0])] = F32(-1e-9)          # the port rounds the winner to <= 0
    win[near] = -1
    # and one flip within rounding in line 0, block 1 (as test_pytorch_tier's end-to-end flip)
    g = FL.layout(case.params["config"], case.inputs["widths"])[0][0]
    shp = (g["Hp"], g["Wp"], g["out"])
    ow = win[g["w_at"]:g["w_at"] + g["w_n"]].reshape(shp)
    flat = next(int(i) for i in np.flatnonzero(ow.ravel() >= 0))
    idx = np.unravel_index(flat, shp)
    first = int(ow[idx])
    oy, ox, o = idx
    other = next(((2 * oy + dy) * g["Wc"] + 2 * ox + dx) * g["out"] + o for dy in (0, 1)
                 for dx in (0, 1) if ((2 * oy + dy) * g["Wc"] + 2 * ox + dx) * g["out"] + o != first)
    bound = FL.conv_bound_fn(float(case.params["conv_floor"][0]),
                             a["conv_out"][g["c_at"]:g["c_at"] + g["c_n"]])(first, other)
    co[g["c_at"] + other] = np.float32(co[g["c_at"] + first] + 0.25 * bound)
    win[g["w_at"] + flat] = other
    ours["winners"], ours["conv_out"] = win, co
    c = step.compare_tier(case, "pytorch", "winners", ours, ref,
                          tier_tolerance("step", case, "pytorch", "winners"), 0.0)
    assert c.passed, c.note
    assert c.note.startswith("1 flip used: line 0, block 1") and "1 near-tie(s) decided" in c.note


def _c_offset(case, window):
    """The conv offset of the block holding flat step window `window` (flips.layout)."""
    from crnn_conformance.harness import flips as FL
    for per in FL.layout(case.params["config"], case.inputs["widths"]):
        for g in per:
            if g["w_at"] <= window < g["w_at"] + g["w_n"]:
                return g["c_at"]
    raise AssertionError(window)


# ------------------------------------------------------------------ clipping on or off


@pytest.mark.parametrize("side", ["port_clips", "reference_clips"])
def test_clip_decided_either_way_within_the_norms_allowance(side):
    """A limit between the float64 norm and that of a legal order (one sequential binary32 sum
    of squares per tensor): the reference and the port decide clipping differently, and the
    float64 tier passes both tensors and the norm (allowance/clip.py: a norm within its
    allowance of the limit allows both outcomes)."""
    from crnn_conformance.generators.float64 import clip as clip64
    from crnn_conformance.harness.compare import compare
    rng = np.random.default_rng(7)
    for _ in range(50):
        grads = [rng.normal(size=n).astype(F32) for n in (700, 300)]
        seq = [F32(0)] * 2
        for i, g in enumerate(grads):
            for v in g:
                seq[i] = F32(seq[i] + F32(v * v))
        port_norm = float(np.sqrt(float(seq[0]) + float(seq[1])))
        ref_norm = clip64.global_norm(grads)
        if (port_norm > ref_norm) == (side == "port_clips") and port_norm != ref_norm:
            break
    limit = 0.5 * (port_norm + ref_norm)
    assert (port_norm > limit) != (ref_norm > limit)
    f = F32(limit / (port_norm + 1e-6))
    ours = {"a": grads[0] * f if port_norm > limit else grads[0],
            "b": grads[1] * f if port_norm > limit else grads[1], "norm": np.array([port_norm])}
    ref_grads, _ = clip64.clip(grads, limit)
    ref = {"a": ref_grads[0], "b": ref_grads[1], "norm": np.array([ref_norm])}
    case = SimpleNamespace(name="t", params={"names": ["a", "b"], "shapes": [[700], [300]]},
                           inputs={"grads": np.concatenate(grads), "sizes": np.array([700, 300]),
                                   "limit": np.array([limit]), "enabled": np.array([1])})
    a = allowance.compute("clip", case)
    for t in ("a", "b", "norm"):
        c = compare(ours[t], ref[t], "float64", a[t], 0.0)
        assert c.passed, (t, c.usage)
    assert np.max(np.abs(ours["a"] - ref["a"])) > 0           # the outcomes differ


def test_a_dead_window_may_be_live_within_rounding_of_zero():
    """The other side of ReLU's 0: conv = (1 + 2^-23)^2 - (1 + 2^-22) - 2^-45 = -2^-46 exactly,
    a dead window in the reference; a port whose rounding leaves it a little above 0 picks
    the cell. Legal (near_ties: a cell within its allowance of the +0 start); a cell whose
    reference value is far below 0 is not."""
    x = np.array([[[1 + 2**-23, 1.0, 2**-45]]], F32)
    W = np.zeros((1, 16), F32)
    W[0, :3] = [1 + 2**-23, -(1 + 2**-22), -1.0]
    case = SimpleNamespace(name="t", params={"kh": 1, "kw": 1, "padH": 0, "padW": 0,
                                             "poolH": 1, "poolW": 1, "dx": True},
                           inputs={"x": x, "W": W, "b": np.zeros(1, F32),
                                   "dPooled": np.ones((1, 1, 1), F32)})
    conv, _, win = conv64.forward(x, W, case.inputs["b"], 1, 1, 0, 0, 1, 1)
    assert conv[0, 0] == -2.0**-46 and win[0, 0, 0] == -1
    ref = {"conv": conv, "winners": win}
    ours = {"conv": np.array([[2.0**-40]], F32), "winners": np.zeros((1, 1, 1), np.int32)}
    c = hconv.compare_tier(case, "float64", "winners", ours, ref, None, None)
    assert c.passed, c.note
    case.inputs["b"] = np.array([-1e-3], F32)                # now far below 0 in the reference
    ref["conv"] = conv - 1e-3
    c = hconv.compare_tier(case, "float64", "winners", ours, ref, None, None)
    assert not c.passed and "1 decision flip(s) against float64: window [0, 0, 0]: port cell 0" in c.note
    assert "reference cell -1 = 0.0" in c.note


def test_a_dead_window_decided_live_passes_downstream():
    """The port of the test above, all its outputs: pooled is its conv value of the cell
    (within that cell's allowance, above the reference's exact 0), dC holds the window's
    gradient there, and dW, dx (one product each, rounded up here) and db receive it. The
    error model covers the decision: the pooled bound includes the cell's own allowance, the
    moved gradient's bound its own roundings."""
    from crnn_conformance.harness.compare import compare
    x = np.array([[[1 + 2**-23, 1.0, 2**-45]]], F32)
    W = np.zeros((1, 16), F32)
    W[0, :3] = [1 + 2**-23, -(1 + 2**-22), -1.0]
    dP = next(F32(v) for v in np.linspace(1, 2, 4097)[1:]
              if float(F32(F32(v) * W[0, 0])) > float(F32(v)) * float(W[0, 0]))   # rounds up
    inputs = {"x": x, "W": W, "b": np.zeros(1, F32), "dPooled": np.full((1, 1, 1), dP, F32)}
    case = SimpleNamespace(name="t", params={"kh": 1, "kw": 1, "padH": 0, "padW": 0,
                                             "poolH": 1, "poolW": 1, "dx": True}, inputs=inputs)
    conv, pooled, win = conv64.forward(x, W, inputs["b"], 1, 1, 0, 0, 1, 1)
    dW, db, dx = conv64.backward(x, W, 1, 1, 0, 0, 1, 1, inputs["dPooled"], win)
    assert win[0, 0, 0] == -1 and not dW.any()
    col = np.zeros(16, F32)
    col[:3] = x.ravel()
    ours = {"pooled": np.full((1, 1, 1), 2.0**-40, F32), "dW": (dP * col).reshape(1, 16),
            "db": np.array([dP], F32), "dx": (dP * W[0, :3]).reshape(1, 1, 3)}
    a = allowance.compute("conv", case)
    for t, r in (("pooled", pooled), ("dW", dW), ("db", db), ("dx", dx)):
        c = compare(ours[t], r, "float64", a[t], 0.0)
        assert c.passed, (t, c.usage)
