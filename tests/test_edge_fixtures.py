"""The edge-case fixtures (docs/edge-cases.md) and the gate's fixture discovery.

generators/exact.py must mirror the harness layer modules: it reproduces the exact tier of the
checked-in fixtures it did not build. Each edge fixture holds what makes it an edge case (the
mutants prove the gate catches those mistakes through them: tests/test_mutants.py). The
bundled port passes them on every path. A fixture directory other than the packaged one runs
the files it has, by their `layer` attribute (the layers it has none of are skipped unless
named); the packaged one must be complete."""
from __future__ import annotations

import json
from pathlib import Path
import subprocess
import sys

import h5py
import numpy as np
import pytest
from crnn_conformance.generators import exact
from crnn_conformance.generators.h5io import FixtureError, read_fixture, write_fixture
from crnn_conformance.generators.regen import BUILDERS
from crnn_conformance.generators.spec import activations as A
from crnn_conformance.generators.spec import detmath as D
from crnn_conformance.generators.spec.dot16 import gemm16
from crnn_conformance.harness import layers as L
from crnn_conformance.harness import runner
from crnn_conformance.harness.runner import FIXTURES_DIR, GateOptions, run_gate

EDGE = ["dot16_edges", "linear_edges", "conv_edges", "lstm_edges", "activations", "ctc_edges",
        "detmath", "step_edges", "clip_edges", "adamw_edges"]
SLOW_CASES = {("step", "crnn_v0_b4"), ("train3", "crnn_v0_3steps")}


def fixture(name):
    return read_fixture(FIXTURES_DIR / f"{name}.h5")


def case(name, case_name):
    return next(c for c in fixture(name).cases if c.name == case_name)


def negative_zeros(a) -> int:
    a = np.asarray(a)
    return int(np.sum((a == 0) & np.signbit(a)))


@pytest.mark.parametrize("name", [n for n in BUILDERS if not n.startswith("pytorch_")])
def test_exact_tier_is_the_spec_run_like_the_harness(name):
    fx = fixture(name)
    layer = fx.attrs["layer"]
    for c in fx.cases:
        if (layer, c.name) in SLOW_CASES:
            continue
        got = exact.expected(layer, c.params, c.inputs)
        for tensor, want in c.expected["exact"].items():
            assert np.asarray(got[tensor]).tobytes() == np.asarray(want).tobytes(), (c.name, tensor)


def test_every_edge_fixture_is_read_by_its_layer():
    read = {n for layer in L.available() for n in L.module(layer).FIXTURES}
    assert set(EDGE) <= read and set(EDGE) <= set(BUILDERS)
    for name in EDGE:
        assert fixture(name).attrs["layer"] in L.available()
        assert set(fixture(name).cases[0].expected) == {"exact"}


def test_signed_zeros_are_there():
    assert negative_zeros(case("dot16_edges", "underflow_cancel_n16_64").expected["exact"]["dot"])
    e = case("linear_edges", "neg_zero_dW_dx_T33_I17_O16").expected["exact"]
    assert negative_zeros(e["dW"]) and negative_zeros(e["dx"]) and not negative_zeros(e["y"])
    e = case("lstm_edges", "neg_zero_dW_ih_dx_T17").expected["exact"]
    assert negative_zeros(e["dW_ih"]) == e["dW_ih"].size and negative_zeros(e["dx"]) == e["dx"].size
    for c in (c for c in fixture("step_edges").cases if c.name.startswith("neg_zero_fc")):
        fcW = c.expected["exact"]["fc.W"]
        assert negative_zeros(fcW[3:]) == fcW[3:].size   # classes 3, 4: in no target
    c = case("clip_edges", "overflow_inf_norm")
    assert c.expected["exact"]["norm"][0] == np.inf
    assert negative_zeros(c.expected["exact"]["t0"]) == int(np.sum(np.signbit(c.inputs["grads"][:35])))


def test_the_cases_for_missed_mistakes_hold_what_they_claim():
    e = case("lstm_edges", "first_step_neg_zero_ig").expected["exact"]
    assert not np.signbit(e["c"]).any() and (e["c"] == 0).all() and (e["out"] == 0).all()
    for name in ("k_padding_nan_k1x1_C1", "k_padding_nan_k3x3_C1"):
        conv = case("conv_edges", name).expected["exact"]["conv"]
        assert np.isnan(conv[:, 1]).all() and not np.isnan(conv[:, [0, 2]]).any()
    c = case("conv_edges", "pool3x1_O16")
    assert (c.params["poolH"], c.params["poolW"], c.params["Out"]) == (3, 1, 16)
    step = case("step_edges", "dead_lstm0_unit_nl2")
    g0 = 2 * step.params["config"]["hidden"]
    for d in ("fwd", "rev"):      # the dead unit's g-bias gradient reaches it through lstm1's dx
        assert step.expected["exact"][f"lstm0.{d}.b"][g0] != 0
    odd = case("step_edges", "odd_height_H7").params["config"]
    assert odd["input_height"] % 2 and len(odd["blocks"]) == 2
    c = case("clip_edges", "limit_zero")
    t = [c.expected["exact"][k] for k in ("t0", "t1")]
    assert all((v == 0).all() for v in t) and np.signbit(np.concatenate(t)).tolist() == [
        False, True, True, False]                       # each a zero of its element's sign
    assert case("ctc_edges", "many_short_T8_16_K2_4").params["lines"] == 600


def test_pool_cases_hold_nan_signed_zero_and_tied_cells():
    c = case("conv_edges", "pool_nan_x_O4")
    e = c.expected["exact"]
    assert np.isnan(e["conv"]).any() and not np.isnan(e["pooled"]).any()
    assert np.isnan(e["dW"]).any()                     # 0 * NaN in dW's dots
    c = case("conv_edges", "pool_signed_zeros_C16")
    e = c.expected["exact"]
    assert negative_zeros(e["conv"]) and (e["winners"] < 0).any()
    assert negative_zeros(e["pooled"]) == 0           # a dead window gives +0
    assert case("conv_edges", "ties_nontwin_O6").params["tied_windows"] > 0


def test_padding_terms_decide_the_sign():
    """k_padding_neg_zero: the dots over K taps only would be -0 where the spec's, with the
    padding terms, are +0 (what conv_k_terms gets wrong)."""
    from crnn_conformance.generators.spec.conv import im2col
    c = case("conv_edges", "k_padding_neg_zero")
    col = im2col(c.inputs["x"], 3, 3, 1, 1, 32)
    over_k = gemm16(col[:, :27], c.inputs["W"][:, :27]) + c.inputs["b"]
    spec = c.expected["exact"]["conv"]
    assert negative_zeros(over_k) > 0 and negative_zeros(spec) == 0


def test_listed_dw_cases_need_the_left_out_terms():
    """With the ±0 dC terms left out each lane of dW's dots over p ends at -0; with them (the
    spec) the dot is +0 (what sparse_dw_no_redo gets wrong)."""
    from crnn_conformance.generators.spec.conv import im2col, pool_backward
    for name in ("listed_dW_neg_zero_C16_O4", "listed_dW_neg_zero_C8_O5"):
        c = case("conv_edges", name)
        e = c.expected["exact"]
        col = im2col(c.inputs["x"], 3, 3, 1, 1, c.inputs["W"].shape[1])
        dC = pool_backward(c.inputs["dPooled"], e["winners"], col.shape[0], c.inputs["W"].shape[0])
        centre = 4 * c.params["C"] + 1                     # a tiny channel's centre tap
        lanes = np.zeros(16, np.float32)
        for p in np.flatnonzero(dC[:, 0]):
            lanes[p % 16] = np.float32(dC[p, 0]) * col[p, centre]
        assert np.all(np.signbit(lanes)) and e["dW"][0, centre] == 0
        assert not np.signbit(e["dW"][0, centre])


def test_activation_and_detmath_inputs_cover_their_thresholds():
    x = case("activations", "sigmoid_tanh").inputs["x"]
    finite = x[np.isfinite(x) & (x != 0)]
    assert set(range(-149, 128)) <= set(np.frexp(np.abs(finite))[1] - 1)
    for t in (104.0, 52.0, A.TANH_SMALL, A.TANH_TINY):
        t = np.float32(t)
        assert {t, np.nextafter(t, np.float32(0)), np.nextafter(t, np.float32(np.inf))} <= set(x)
    assert np.isnan(x).sum() >= 6
    c = case("detmath", "exp_log")
    xe, ye = c.inputs["x_exp"], c.expected["exact"]["exp"]
    at = {float(v): float(y) for v, y in zip(xe, ye)}
    assert np.isfinite(at[float(D.O_THRESH)]) and at[float(np.nextafter(D.O_THRESH, np.inf))] == np.inf
    assert at[float(D.U_THRESH)] > 0 and at[float(np.nextafter(D.U_THRESH, -np.inf))] == 0
    nan_in = xe[np.isnan(xe)]
    assert nan_in.view(np.uint64).tolist() == ye[np.isnan(xe)].view(np.uint64).tolist()


def test_ctc_clip_adamw_edges():
    c = case("ctc_edges", "many_tiny")
    shapes = c.inputs["shapes"]
    assert len(shapes) >= 2000 and set(shapes[:, 0]) == {1, 2, 3} and set(shapes[:, 1]) == {1, 2, 3, 4}
    assert 0 < c.params["infeasible"] < len(shapes)
    assert case("ctc_edges", "T9_2L_plus_1_distinct").params["T"] == 2 * 4 + 1
    assert case("ctc_edges", "rounding_T1_K2").params["lines"] == 120
    assert case("clip_edges", "norm_equals_limit").params["triggered"] is False
    assert case("clip_edges", "limit_one_ulp_below").params["triggered"] is True
    c = case("adamw_edges", "many_hparams")
    hp = c.inputs["hparams"]
    assert len(hp) == 300 and len({tuple(h) for h in hp}) > 250


def edge_dir(tmp_path, names):
    d = tmp_path / "fx"
    d.mkdir()
    for n in names:
        (d / f"{n}.h5").symlink_to(FIXTURES_DIR / f"{n}.h5")
    return d


def test_bundled_port_passes_the_edge_fixtures(tmp_path):
    d = edge_dir(tmp_path, EDGE)
    layers = sorted({fixture(n).attrs["layer"] for n in EDGE}, key=L.LAYERS.index)
    r = run_gate(GateOptions(fixtures=d, layers=layers))
    assert r.passed, [r_ for r_ in r.records if not r_.passed][:3]
    assert {f for f in r.meta["fixtures"]} == {f"{n}.h5" for n in EDGE}


def test_a_custom_directory_runs_the_files_it_has(tmp_path):
    d = edge_dir(tmp_path, ["clip_edges"])
    c = case("clip", "three_four")
    write_fixture(d / "fuzz-clip-abc.h5", "clip", "test", 0, [c])
    write_fixture(d / "other-layer.h5", "dot16", "test", 0, [case("dot16", "order_n0_100")])
    s = runner.GateSession(GateOptions(fixtures=d, layers=["clip"]))
    assert [p.name for p in runner._fixture_paths(s.opts, L.module("clip"))] == \
        ["clip_edges.h5", "fuzz-clip-abc.h5"]
    assert {j.case.name for j in s.jobs} >= {"three_four", "norm_equals_limit"}
    with pytest.raises(FixtureError, match="no fixtures for layer conv in"):
        runner.GateSession(GateOptions(fixtures=d, layers=["conv"]))
    (d / "broken.h5").write_bytes(b"not hdf5")
    with pytest.raises(FixtureError, match="broken.h5 cannot be read"):
        runner.GateSession(GateOptions(fixtures=d, layers=["clip"]))


def test_the_packaged_directory_must_be_complete(monkeypatch):
    monkeypatch.setattr(L.module("clip"), "FIXTURES", ["clip", "clip_no_such_fixture"])
    with pytest.raises(FixtureError, match="clip_no_such_fixture.h5"):
        runner.GateSession(GateOptions(layers=["clip"]))


def test_gate_cli_names_a_layer_without_fixtures(tmp_path):
    d = edge_dir(tmp_path, ["clip_edges"])
    r = subprocess.run([sys.executable, "-m", "crnn_conformance.harness.cli", "gate",
                        "--fixtures", str(d), "--layers", "clip,adamw"],
                       capture_output=True, text=True)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "no fixtures for layer adamw in" in r.stderr and "Traceback" not in r.stderr
    with h5py.File(d / "clip_edges.h5", "r") as f:
        assert f.attrs["layer"] == "clip"


def test_a_findings_directory_gates_as_it_is(tmp_path):
    """What `fuzz --out` writes (one-case fixtures of a few layers): without --layers, or with
    --layers available, those layers run and the others are named as having no fixture (not
    exit 2); a directory with no fixture of any layer is still exit 2."""
    d = tmp_path / "findings"
    d.mkdir()
    write_fixture(d / "fuzz-clip-abc.h5", "clip", "test", 0, [case("clip", "three_four")])
    write_fixture(d / "fuzz-dot16-def.h5", "dot16", "test", 0, [case("dot16", "order_n0_100")])
    others = [n for n in L.LAYERS if n not in ("dot16", "clip")]
    for layers in (["--layers", "available"], []):
        r = subprocess.run([sys.executable, "-m", "crnn_conformance.harness.cli", "gate",
                            "--fixtures", str(d), *layers, "--threads", "1", "-q",
                            "--json", str(tmp_path / "r.json")], capture_output=True, text=True)
        assert r.returncode == 0, r.stdout + r.stderr
        verdict = r.stdout.strip().splitlines()[-1]
        assert verdict.startswith("PASS") and " in 2 layers" in verdict, verdict
        assert f"; no fixture: {', '.join(others)};" in verdict, verdict
        doc = json.loads((tmp_path / "r.json").read_text())
        assert doc["meta"]["no_fixture"] == others and doc["meta"]["layers"] == ["dot16", "clip"]
        assert set(doc["layers"]) == {"dot16", "clip"}
    (d / "fuzz-clip-abc.h5").unlink()
    (d / "fuzz-dot16-def.h5").unlink()
    r = subprocess.run([sys.executable, "-m", "crnn_conformance.harness.cli", "gate",
                        "--fixtures", str(d), "--layers", "available"], capture_output=True, text=True)
    assert r.returncode == 2 and f"no fixtures in {d} for any layer" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


def test_tanh_branches_agree_at_their_thresholds():
    """Why no mutant tests tanh's `<`: at |x| = 0.55 and 2^-12 both branches give the same
    bits, so `<=` there is not a mistake (docs/edge-cases.md)."""
    from crnn_conformance.generators.spec.fma import fma
    F = np.float32
    x = np.array([A.TANH_SMALL, -A.TANH_SMALL, A.TANH_TINY, -A.TANH_TINY], F)
    e = A.exp_neg(-(np.abs(x) + np.abs(x)))
    large = F(1) - (e + e) / (F(1) + e)
    large = np.where(x < 0, -large, large)
    s = x * x
    P = fma(fma(fma(fma(A.T10, s, A.T8), s, A.T6), s, A.T4), s, A.T2)
    small = fma(x * s, P, x)
    assert small[:2].tobytes() == large[:2].tobytes()       # 0.55: polynomial = exp form
    assert small[2:].tobytes() == x[2:].tobytes()            # 2^-12: polynomial = x
    assert A.tanh(x).tobytes() == small.tobytes()



# A constant of sigmoid's and tanh's definitions changed by k units in the last place of its
# magnitude (docs/edge-cases.md, "sigmoid and tanh"): the changes the fixture must show, and
# those no float32 input shows (the same function; why, or the scan that found no input).
ULPS = (1, 2, 4, 8, 16, 64, 256)
both = lambda ks: {d * k for k in ks for d in (1, -1)}
SAME_FUNCTION = {
    # n = fma(v, LOG2E, SHIFT) - SHIFT is round(v log2 e) for any SHIFT in [2^23 + 151,
    # 2^24 - 1]: v log2 e is in [-150.04, 0], the sum stays in one binade of spacing 1 and an
    # even SHIFT rounds a tie the same way; for the odd ones the scan below found no input
    "SHIFT": both(ULPS),
    # sigmoid's clamp at -104 +- 0.002: e^v is below 2^-150 there, and exp_neg rounds it to +0
    "EXP_MIN": both(ULPS),
    # the clamp at -32 +- 0.001: e^v ~ 1.3e-14, and 1 - 2e/(1 + e), 1/(1 + e) round to 1
    "SAT_MIN": both(ULPS),
    # below 2^-12 (1 +- 3e-5) the odd polynomial's x^3 P is under half an ulp of x: it is x
    "TANH_TINY": both(ULPS),
    # visited all 2^32 inputs (tests/act_witness_scan.py, 2026-12-07): none differs (SHIFT
    # by 1 either way too)
    "NEG_LN2_LO": both((1, 2, 4, 8)) | {16},
    "TANH_SMALL": {1, -1, -2, -4},
}


def _with_constant(name, k):
    """(the constant as shipped, changed by k units of its magnitude; k None: 0)"""
    orig = getattr(A, name)
    bits = orig.view(np.uint32).astype(np.int64)
    changed = np.float32(0) if k is None else np.uint32(bits + k).view(np.float32)
    return orig, changed


def _differs(name, k, x):
    orig, changed = _with_constant(name, k)
    before = A.sigmoid(x).tobytes(), A.tanh(x).tobytes()
    setattr(A, name, changed)
    try:
        return (A.sigmoid(x).tobytes(), A.tanh(x).tobytes()) != before
    finally:
        setattr(A, name, orig)


def test_constant_witnesses_differ_and_are_in_the_fixture():
    from crnn_conformance.generators.cases.activations import CONSTANT_WITNESSES
    x = case("activations", "sigmoid_tanh").inputs["x"]
    have = set(x.view(np.uint32).tolist())
    for (name, k), bits in CONSTANT_WITNESSES.items():
        assert set(bits) <= have, (name, k)
        for b in bits:
            assert _differs(name, k, np.array([b], np.uint32).view(np.float32)), (name, k, hex(b))


@pytest.mark.slow
def test_every_constant_change_shows_in_the_fixture():
    """Each constant k = ±1, ±2, .., ±256 units away, or 0: some input of the fixture gives
    other bits, unless SAME_FUNCTION says no input can."""
    x = case("activations", "sigmoid_tanh").inputs["x"]
    names = [n for n in vars(A) if n.isupper() and isinstance(getattr(A, n), np.float32)
             and n not in ("ONE", "ZERO")]
    missed = []
    for name in names:
        for k in [k * d for k in ULPS for d in (1, -1)] + [None]:
            if k in SAME_FUNCTION.get(name, ()):
                continue
            if not _differs(name, k, x):
                missed.append((name, k))
    assert not missed, missed


@pytest.mark.slow
def test_the_scanner_finds_witnesses_the_spec_confirms():
    """tests/act_witness_scan.py (the C definitions, compiled twice) against the NumPy spec:
    the inputs it finds for E6 one unit up differ there too, and on every 4096th input it
    finds none for changes SAME_FUNCTION lists."""
    sys.path.insert(0, str(Path(__file__).parent))
    import act_witness_scan
    from crnn_conformance.ctypes_kernels.build import find_compiler
    cc = find_compiler()
    (e6,) = act_witness_scan.scan([("E6", _with_constant("E6", 1)[1])], want=3, cc=cc)
    assert len(e6["witnesses"]) == 3
    for bits, _ in e6["witnesses"]:
        assert _differs("E6", 1, np.array([bits], np.uint32).view(np.float32))
    same = [("SHIFT", 1), ("NEG_LN2_LO", 8), ("TANH_SMALL", -1)]
    found = act_witness_scan.scan([(n, _with_constant(n, k)[1]) for n, k in same], want=1,
                                  stride=4096, cc=cc)
    assert [r["witnesses"] for r in found] == [[], [], []]

# Each edge mutant (docs/mutants.md) and the one edge fixture that kills it on its own.
KILLED_BY = {"ctc_libm": "ctc_edges", "pool_maxps": "conv_edges", "conv_k_terms": "conv_edges",
             "sparse_dw_no_redo": "conv_edges", "sparse_fwd_no_redo": "conv_edges",
             "sparse_fwd_nonfinite": "conv_edges", "sparse_dcol_nonfinite": "conv_edges",
             "lstm_sparse_nonfinite": "lstm_edges",
             "batch_sum_zero_start": "step_edges",
             "clip_ge": "clip_edges", "clip_factor_float": "clip_edges",
             "adamw_decay_float": "adamw_edges", "sigmoid_clamp_88": "activations",
             "exp_threshold_ge": "detmath"}


def test_every_edge_mutant_has_its_fixture():
    from crnn_conformance.harness import mutants as M
    names = [m.name for m in M.CATALOGUE]
    start = names.index("ctc_libm")             # the edge block (the legal-order and precision blocks follow it)
    assert names[start:start + len(KILLED_BY)] == list(KILLED_BY)


@pytest.mark.parametrize("name", list(KILLED_BY))
def test_the_edge_fixture_alone_kills_the_mutant(tmp_path, name):
    """The gate kills each edge mutant through its edge fixture, with nothing else: the base
    run's exact tier (the slow tests/test_mutants.py gates it with everything)."""
    from crnn_conformance.ctypes_kernels.build import build
    fx = KILLED_BY[name]
    d = edge_dir(tmp_path, [fx])
    r = run_gate(GateOptions(port=str(build(mutant=name)), fixtures=d,
                             layers=[fixture(fx).attrs["layer"]], tiers=("exact",),
                             isas=["scalar"], threads=(1,)))
    assert not r.passed, f"{name} survived {fx}.h5"
