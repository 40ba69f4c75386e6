"""The contract tier (harness/contract.py, docs/port-abi.md "The error contract"): the
bundled port and the reference port answer every call with its documented code; a port with
its argument checks removed, one that writes an output before rejecting and one that gets a
valid edge wrong fail it, each failing record naming the call and ending with a __REPRO:
that reruns the tier of that layer alone; `--tiers` can leave it out and `--layers
available` counts it.

Ports (tests/ports/testport.c, dot16 and linear): -DTP_NO_ARGCHECK (every argument check
removed), -DTP_WRITE_BEFORE_REJECT (linear_forward writes y[0], then returns CRNN_E_ARG),
-DTP_EMPTY_DOT_NEGZERO (dot16 of 0 terms gives -0), -DTP_MODIFY_ON_REJECT (linear_backward
changes its const x before rejecting a negative size), -DTP_HANG_ON_REJECT (dot16 hangs on
n < 0).
"""
from __future__ import annotations

import json
import shlex
import subprocess
import sys

import numpy as np
import pytest

from crnn_conformance.ctypes_kernels import abi
from crnn_conformance.harness import contract
from crnn_conformance.harness.layers import LAYERS

from testports import build_port, gate  # noqa: E402

GATED = [l for l in LAYERS if l != "train3"]


@pytest.fixture(scope="module")
def ports(tmp_path_factory):
    d = tmp_path_factory.mktemp("contract-ports")
    return {k: build_port(d, *flags) for k, flags in {
        "plain": (), "noarg": ("-DTP_NO_ARGCHECK",), "wbr": ("-DTP_WRITE_BEFORE_REJECT",),
        "negzero": ("-DTP_EMPTY_DOT_NEGZERO",), "modify": ("-DTP_MODIFY_ON_REJECT",),
        "hang": ("-DTP_HANG_ON_REJECT",),
        "from2": ("-DTP_NULL_FROM_2",), "threads1": ("-DTP_THREADS_IGNORED",)}.items()}


def _run(tmp_path, *args):
    out = tmp_path / "r.json"
    r = gate(*args, "--json", str(out), "-q")
    doc = json.loads(out.read_text()) if out.exists() else None
    return r, doc


def _contract(doc) -> dict:
    return {(t["layer"], t["tensor"]): t for t in doc["tensors"] if t["tier"] == "contract"}


def test_every_non_nullable_buffer_has_its_null_call():
    """The calls come from abi.BUFFERS: one NULL call per buffer that may not be NULL, a NULL
    nullable one only in a valid call, and every size rule names an integer argument."""
    for layer in GATED:
        want = {c.label: c.want for c in contract.calls(layer)}
        for fn in contract.entry_points(layer):
            args, values = contract._base()[fn]
            for b in abi.buffers(fn, contract._ints(args), contract._reader(values)):
                # NULL where it is not allowed: CRNN_E_ARG; where it is: a valid call, if any
                code = want.get(f"{fn[5:]}({b.name}=NULL)")
                assert code == (contract.OK if b.nullable else contract.E_ARG) or (
                    b.nullable and code is None), (fn, b.name)
            sig = dict(zip(abi.ARGS[fn].split(), abi.SIGNATURES[fn][1]))
            for name in (contract.NEGATIVE.get(fn, "") + " " + contract.ZERO.get(fn, "")).split():
                assert sig[name] in (abi.i32, abi.i64), (fn, name)
    assert contract.entry_points("train3") == []
    owned = [fn for l in LAYERS for fn in contract.entry_points(l)]
    assert sorted(owned) == sorted({s for l in LAYERS for s in abi.LAYER_SYMBOLS[l]})


def test_bundled_port_passes_every_layer(tmp_path):
    r, doc = _run(tmp_path, "--tiers", "contract")
    assert r.returncode == 0, r.stdout + r.stderr
    recs = _contract(doc)
    assert {l for l, _ in recs} == set(GATED)
    assert all(len(t) <= 41 for _, t in recs)   # the console's case and tensor columns
    for layer in GATED:   # each layer: its valid base calls, edges and invalid calls
        mine = [t for (l, t) in recs if l == layer]
        assert len(mine) >= 10, (layer, mine)
        assert any(t.endswith("(valid)") for t in mine)
    for name in ("ctc(label 0)", "ctc(L plus repeats > T)", "conv_forward(pool 0x2)",
                 "conv_forward(kernel > padded input)", "conv_forward(padH=-1)",
                 "step_gradients(cfg nBlocks -1)", "model_sizes(cfg nLstm 0)",
                 "linear_forward(x=NULL)", "dot16(n=0)", "linear_forward(I=0)"):
        assert any(t == name for _, t in recs), name
    assert {t for l, t in recs if l == "dot16"} >= {"set_threads(0)", "set_threads(257)",
                                                     "set_isa(-1)", "set_isa(5)"}


def test_reference_port_passes(tmp_path):
    from crnn_conformance.ctypes_kernels.build import build_reference
    r, doc = _run(tmp_path, "--port", str(build_reference()), "--tiers", "contract")
    assert r.returncode == 0, r.stdout + r.stderr
    assert ("dot16", "set_isa(not advertised)") in _contract(doc)   # it has scalar only


def test_no_argcheck_port_fails_naming_the_calls(ports, tmp_path):
    r, doc = _run(tmp_path, "--port", str(ports["noarg"]), "--layers", "dot16,linear")
    assert r.returncode == 1, r.stdout + r.stderr
    recs = _contract(doc)
    want = "returned CRNN_OK (0), want CRNN_E_ARG (-1)"
    for name in ("dot16(n=-1)", "linear_forward(T=-1)", "linear_backward(O=-1)",
                 "set_threads(0)", "set_threads(257)", "set_isa(-1)", "set_isa(5)"):
        rec = recs[("linear" if name.startswith("linear") else "dot16", name)]
        assert not rec["passed"] and rec["note"] == want, name
    assert recs[("dot16", "set_isa(not advertised)")]["note"] == \
        "returned CRNN_OK (0), want CRNN_E_ISA (-2)"
    crash = recs[("linear", "linear_forward(x=NULL)")]
    assert "the port crashed in crnn_linear_forward: killed by signal SIGSEGV" in crash["note"]
    # a crash is that call's record: the calls after it still ran on a new worker
    assert recs[("linear", "linear_backward(T=-1)")]["note"] == want
    assert recs[("linear", "linear_forward(valid)")]["passed"]
    assert len(recs) == len(contract.calls("dot16", core=True)) + len(contract.calls("linear"))
    line = next(l for l in r.stdout.splitlines() if "linear/contract/linear_forward(x=NULL)" in l)
    assert line.startswith("FAIL ") and "tier=contract isa=scalar threads=1" in line
    repro = recs[("linear", "linear_forward(x=NULL)")]["repro"]
    assert f"__REPRO: {repro}" in r.stdout
    assert shlex.split(repro)[2:] == ["--port", str(ports["noarg"]), "--layers", "linear",
                                      "--tiers", "contract"]
    again, doc2 = _run(tmp_path, *shlex.split(repro)[2:])   # reruns that tier of that layer alone
    assert again.returncode == 1
    assert {(t["layer"], t["tier"]) for t in doc2["tensors"]} == {("linear", "contract")}
    assert ("linear", "linear_forward(x=NULL)") in _contract(doc2)


def test_write_before_reject_names_the_buffer(ports, tmp_path):
    r, doc = _run(tmp_path, "--port", str(ports["wbr"]), "--layers", "dot16,linear")
    assert r.returncode == 1
    bad = {t: rec["note"] for (l, t), rec in _contract(doc).items() if not rec["passed"]}
    assert bad and all(n == "wrote output y before rejecting" for n in bad.values()), bad
    assert set(bad) == {"linear_forward(T=-1)", "linear_forward(I=-1)", "linear_forward(O=-1)",
                        "linear_forward(x=NULL)", "linear_forward(W=NULL)",
                        "linear_forward(b=NULL)"}
    other = [t for t in doc["tensors"] if t["tier"] != "contract"]
    assert other and all(t["passed"] for t in other)   # only the contract tier sees it


def test_modified_input_is_named(ports, tmp_path):
    r, doc = _run(tmp_path, "--port", str(ports["modify"]), "--layers", "linear",
                  "--tiers", "contract")
    assert r.returncode == 1
    bad = {t: rec["note"] for (l, t), rec in _contract(doc).items() if not rec["passed"]}
    assert set(bad) == {f"linear_backward({s}=-1)" for s in "TIO"}, bad
    assert all(n.startswith("crnn_linear_backward modified input x (float32[2, 3]) at [0, 0]")
               and n.endswith("it is const") for n in bad.values()), bad


def test_a_hang_is_the_record_of_its_call(ports, tmp_path):
    r, doc = _run(tmp_path, "--port", str(ports["hang"]), "--layers", "dot16",
                  "--tiers", "contract", "--timeout", "2")
    assert r.returncode == 1
    recs = _contract(doc)
    bad = {t: rec["note"] for (l, t), rec in recs.items() if not rec["passed"]}
    assert bad == {"dot16(n=-1)": "hang: no answer in crnn_dot16 within 2 s (--timeout); "
                                  "worker killed"}
    assert len(recs) == len(contract.calls("dot16", core=True))   # the calls after it ran


def test_a_wrong_valid_edge_fails(ports, tmp_path):
    r, doc = _run(tmp_path, "--port", str(ports["negzero"]), "--layers", "dot16",
                  "--tiers", "contract")
    assert r.returncode == 1
    bad = {t: rec["note"] for (l, t), rec in _contract(doc).items() if not rec["passed"]}
    assert set(bad) == {"dot16(n=0)", "dot16(n=0, a=b=NULL)"}
    assert bad["dot16(n=0)"] == "out is not the documented value: at [0] -0.0, want 0.0"


def test_null_is_passed_where_the_buffer_holds_one_element(ports, tmp_path):
    """A port that refuses NULL only from two terms on reads through it at one: the NULL
    calls run at the sizes of contract.ONE (n = 1), where every buffer holds one element."""
    for fn in contract.ONE:
        args, values = contract._one(fn, *contract._base()[fn])
        for b in abi.buffers(fn, contract._ints(args), contract._reader(values)):
            assert b.nullable or 0 < int(np.prod(b.shape)), (fn, b.name)
    r, doc = _run(tmp_path, "--port", str(ports["from2"]), "--layers", "dot16",
                  "--tiers", "contract")
    assert r.returncode == 1
    bad = {t: rec["note"] for (l, t), rec in _contract(doc).items() if not rec["passed"]}
    assert set(bad) == {"dot16(a=NULL)", "dot16(b=NULL)"}
    assert "the port crashed in crnn_dot16: killed by signal SIGSEGV" in bad["dot16(a=NULL)"]


def test_a_selection_that_does_not_take_fails(ports, tmp_path):
    """Runs are recorded under the thread count (ISA) they selected: a port whose
    crnn_set_threads returns CRNN_OK but keeps 1 thread fails the read-back call."""
    r, doc = _run(tmp_path, "--port", str(ports["threads1"]), "--layers", "dot16",
                  "--tiers", "contract")
    assert r.returncode == 1
    bad = {t: rec["note"] for (l, t), rec in _contract(doc).items() if not rec["passed"]}
    assert bad == {"get_threads after set_threads":
                   "crnn_get_threads() returned 1 after crnn_set_threads(2) returned CRNN_OK; "
                   "crnn_get_threads() returned 1 after crnn_set_threads(3) returned CRNN_OK; "
                   "crnn_get_threads() returned 1 after crnn_set_threads(7) returned CRNN_OK"}


def test_tiers_can_leave_it_out(ports, tmp_path):
    r, doc = _run(tmp_path, "--port", str(ports["noarg"]), "--layers", "dot16,linear",
                  "--tiers", "exact,float64,pytorch,identity")
    assert r.returncode == 0, r.stdout + r.stderr
    assert doc["tensors"] and not _contract(doc)
    assert "contract" not in doc["summary"]["tiers"]


def test_layers_available_counts_it(ports, tmp_path):
    r, doc = _run(tmp_path, "--port", str(ports["plain"]), "--layers", "available")
    assert r.returncode == 0, r.stdout + r.stderr
    n = {"dot16": len(contract.calls("dot16", core=True)), "linear": len(contract.calls("linear"))}
    assert doc["summary"]["tiers"]["contract"] == {"checks": sum(n.values()), "failed": 0}
    for layer in ("dot16", "linear"):
        mine = [t for t in doc["tensors"] if t["layer"] == layer]
        assert doc["layers"][layer]["status"] == "passed"
        assert doc["layers"][layer]["checks"] == len(mine)
        assert sum(t["tier"] == "contract" for t in mine) == n[layer]
    assert doc["layers"]["conv"]["status"] == "not implemented"
    assert not [t for t in doc["tensors"] if t["layer"] not in ("dot16", "linear")]


def test_contract_alone_finds_stubs_not_implemented(ports, tmp_path):
    """`--tiers contract --layers available`: no case runs, and a layer whose valid calls
    return CRNN_E_UNSUPPORTED is not implemented (its invalid calls are not judged)."""
    r, doc = _run(tmp_path, "--port", str(ports["plain"]), "--layers", "available",
                  "--tiers", "contract")
    assert r.returncode == 0, r.stdout + r.stderr
    st = doc["layers"]
    assert st["conv"]["status"] == "not implemented"
    assert "crnn_conv_forward returned CRNN_E_UNSUPPORTED (-4) on a valid call" in st["conv"]["reason"]
    assert st["linear"]["status"] == "passed" and st["linear"]["checks"] > 0
    # strict, the same stubs fail: an implemented layer must answer every call
    r2, doc2 = _run(tmp_path, "--port", str(ports["plain"]), "--layers", "dot16,conv",
                    "--tiers", "contract")
    assert r2.returncode == 1
    c = _contract(doc2)
    assert c[("conv", "conv_forward(valid)")]["note"] == \
        "returned CRNN_E_UNSUPPORTED (-4), want CRNN_OK (0)"
    # an invalid call is refused with CRNN_E_ARG, whatever the port implements
    assert c[("conv", "conv_forward(x=NULL)")]["note"] == \
        "returned CRNN_E_UNSUPPORTED (-4), want CRNN_E_ARG (-1)"


def test_plugin_runs_the_contract_calls(ports, tmp_path):
    r = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider",
                        f"--port={ports['wbr']}", "--crnn-layers", "linear", "--crnn-tiers",
                        "contract", "-q"], cwd=tmp_path, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "FAILED crnn-conformance::contract::contract::linear_forward(x=NULL)[contract]" in r.stdout
    assert "6 failed" in r.stdout
