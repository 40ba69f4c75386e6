"""The pytest plugin: `pytest --port PATH` collects one test per (fixture, case, tensor, tier)
through the gate's own code path, with the gate's verdicts serially and under -n 2, from any
directory; -k, --co, --junitxml work; active, it collects only the conformance suite; without
its options it does nothing."""
from __future__ import annotations

import json
import shutil
import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest

from testports import build_port  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
LAYERS = ["--crnn-layers", "dot16,linear"]
REGISTERED = any(e.value == "crnn_conformance.harness.pytest_plugin"
                 for e in metadata.entry_points(group="pytest11"))


def run_pytest(cwd, *args, timeout=180):
    """pytest in a fresh directory of its own (an empty pytest.ini makes it the rootdir)."""
    (Path(cwd) / "pytest.ini").write_text("[pytest]\n")
    plugin = [] if REGISTERED else ["-p", "crnn_conformance.harness.pytest_plugin"]
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("PYTEST_ADDOPTS", None)
    env.pop("PYTEST_XDIST_WORKER", None)
    # other installed plugins are switched off: they only slow each start-up down
    quiet = ["-p", "no:cacheprovider", "-p", "no:randomly", "-p", "no:hypothesispytest",
             "-p", "no:benchmark"]
    return subprocess.run([sys.executable, "-m", "pytest", *quiet, *plugin, *args], cwd=cwd,
                          capture_output=True, text=True, timeout=timeout, env=env)


@pytest.fixture(scope="module")
def nan_port(tmp_path_factory):
    return build_port(tmp_path_factory.mktemp("ports"), "-DTP_NAN")


def gate_verdicts(tmp_path, *args):
    """{(fixture, case, tensor, tier): passed} from the gate itself: the verdict a plugin test
    must give (all of the tier's checks of that tensor passed)."""
    r = subprocess.run([sys.executable, "-m", "crnn_conformance.harness.cli", "gate", *args, "-q",
                        "--json", str(tmp_path / "gate.json")], cwd=ROOT, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode in (0, 1), r.stdout + r.stderr
    out = {}
    for t in json.loads((tmp_path / "gate.json").read_text())["tensors"]:
        k = (t["fixture"], t["case"], t["tensor"], t["tier"])
        out[k] = out.get(k, True) and t["passed"]
    return out


@pytest.fixture(scope="module")
def gate_keys(nan_port, tmp_path_factory):
    """The (fixture, case, tensor, tier) checks of the gate itself on the same port."""
    v = gate_verdicts(tmp_path_factory.mktemp("gate"), f"--port={nan_port}", "--layers",
                      "dot16,linear")
    return set(v), {k for k, ok in v.items() if not ok}


def _junit(path) -> dict:
    """{(fixture, case, tensor, tier): passed} from pytest's JUnit XML; every id unique. A
    skipped test is no check (set_isa(not advertised) of the contract tier on a port that
    advertises every ISA)."""
    out = {}
    for tc in ET.parse(path).getroot().iter("testcase"):
        if tc.find("skipped") is not None:
            continue
        suite, fixture, case = tc.get("classname").split(".", 2)
        assert suite == "crnn-conformance"
        tensor, tier = tc.get("name")[:-1].split("[")
        key = (fixture, case, tensor, tier)
        assert key not in out, key
        out[key] = tc.find("failure") is None and tc.find("error") is None
    return out


def _junit_keys(path):
    v = _junit(path)
    return set(v), {k for k, ok in v.items() if not ok}


def test_one_test_per_check_and_the_same_verdict_as_the_gate(nan_port, gate_keys, tmp_path):
    r = run_pytest(tmp_path, f"--port={nan_port}", *LAYERS, "-q",
                   f"--junitxml={tmp_path / 'j.xml'}")
    assert r.returncode == 1, r.stdout + r.stderr
    keys, failed = _junit_keys(tmp_path / "j.xml")
    assert (keys, failed) == gate_keys
    assert "2 failed" in r.stdout
    assert "FAILED crnn-conformance::linear::T16_I37_O37::dW[float64]" in r.stdout
    assert "worst [1,2] ours=nan" in r.stdout and "__REPRO: crnn-conformance gate" in r.stdout
    assert "Traceback" not in r.stdout


def test_selection_with_k(nan_port, tmp_path):
    r = run_pytest(tmp_path, f"--port={nan_port}", *LAYERS, "-q", "-k",
                   "T16_I37_O37 and dW and not identity")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "2 failed" in r.stdout and "passed" not in r.stdout.splitlines()[-1]
    r = run_pytest(tmp_path, f"--port={nan_port}", *LAYERS, "-q", "-k", "dot16")
    assert r.returncode == 0, r.stdout + r.stderr


def test_under_xdist(nan_port, gate_keys, tmp_path):
    pytest.importorskip("xdist")
    r = run_pytest(tmp_path, f"--port={nan_port}", *LAYERS, "-q", "-n", "2",
                   f"--junitxml={tmp_path / 'j.xml'}")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "bringing up nodes" in r.stdout or "2 workers" in r.stdout
    assert _junit_keys(tmp_path / "j.xml") == gate_keys


def test_bundled_port_with_the_flag(tmp_path):
    r = run_pytest(tmp_path, "--crnn-conformance", "--crnn-layers", "dot16", "-q")
    assert r.returncode == 0, r.stdout + r.stderr
    # 10 cases (dot16.h5's 3, dot16_zeros.h5's 2, dot16_edges.h5's 5) x (exact, identity)
    # + uniform_n0_100 float64, and the contract tier's calls of dot16 and the control functions
    assert _dot16_passed(r.stdout)


def _dot16_passed(out: str, failed: str = "") -> bool:
    """The bundled port's dot16 tests all passed: the fixtures' checks and the contract tier's
    calls of dot16 and of the control functions (set_isa(not advertised) is skipped on a CPU
    where the port advertises every ISA)."""
    from crnn_conformance.harness.contract import calls
    from testports import dot16_fixture_checks
    n = dot16_fixture_checks() + len(calls("dot16", core=True))
    return any(f"{failed}{n - s} passed" in out for s in (0, 1))


ADAMW = ["--crnn-conformance", "--crnn-layers", "adamw", "--crnn-threads", "1,2"]


@pytest.mark.parametrize("xdist", [False, True], ids=["serial", "n2"])
def test_shared_case_names_get_unique_ids_and_the_gates_verdicts(tmp_path, xdist):
    """adamw.h5 and pytorch_adamw.h5 share case names (conv0.W, fc.b, ...): each test is its
    own fixture's, serially and under -n 2 (where a worker may run either fixture's case
    first), and every verdict is the gate's."""
    if xdist:
        pytest.importorskip("xdist")
    want = gate_verdicts(tmp_path, "--layers", "adamw", "--threads", "1,2")
    fixtures = {k[0] for k in want} - {"contract"}   # (the contract tier's calls)
    shared = {k[1] for k in want if k[0] == "adamw"} & {k[1] for k in want if k[0] != "adamw"}
    assert fixtures == {"adamw", "pytorch_adamw", "adamw_edges"} and shared   # the collision
    args = [*ADAMW, "-q", f"--junitxml={tmp_path / 'j.xml'}"] + (["-n", "2"] if xdist else [])
    r = run_pytest(tmp_path, *args)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr
    assert _junit(tmp_path / "j.xml") == want
    assert f"{len(want)} passed" in r.stdout


def test_collect_only_counts_what_it_lists(tmp_path):
    r = run_pytest(tmp_path, *ADAMW, "--co", "-q")
    assert r.returncode == 0, r.stdout + r.stderr
    ids = [l for l in r.stdout.splitlines() if l.startswith("crnn-conformance::")]
    assert len(ids) == len(set(ids)) > 0
    assert f"{len(ids)} tests collected" in r.stdout and "no tests collected" not in r.stdout
    assert any(i.startswith("crnn-conformance::pytorch_adamw::conv0.W::") for i in ids)
    assert any(i.startswith("crnn-conformance::adamw::conv0.W::") for i in ids)


def test_the_layer_is_a_keyword(tmp_path):
    r = run_pytest(tmp_path, "--crnn-conformance", "--crnn-layers", "dot16,linear", "--co", "-q",
                   "-k", "linear and not identity")
    ids = [l for l in r.stdout.splitlines() if l.startswith("crnn-conformance::")]
    linear = {"linear", "pytorch_linear", "linear_edges"}
    contract = [i for i in ids if i.split("::")[1] == "contract"]   # the contract tier's calls
    assert contract and all(i.split("::")[3].startswith("linear_") for i in contract)
    ids = [i for i in ids if i not in contract]
    assert ids and all(i.split("::")[1] in linear for i in ids)
    assert {i.split("::")[1] for i in ids} == linear


def test_only_the_conformance_suite_inside_a_project(tmp_path):
    """In a project with its own tests (here: a tests/ folder and testpaths, as in this
    repository), `pytest --crnn-conformance` runs the conformance suite alone; naming a test
    file on the command line adds it."""
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_own.py").write_text("def test_own():\n    assert False\n")
    (tmp_path / "tests" / "conftest.py").write_text("")
    r = run_pytest(tmp_path, "--crnn-conformance", "--crnn-layers", "dot16", "-q")
    (tmp_path / "pytest.ini").write_text("[pytest]\ntestpaths = tests\n")
    r2 = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider",
                         "--crnn-conformance", "--crnn-layers", "dot16", "-q"], cwd=tmp_path,
                        capture_output=True, text=True, timeout=180)
    for res in (r, r2):
        assert res.returncode == 0, res.stdout + res.stderr
        assert _dot16_passed(res.stdout) and "test_own" not in res.stdout
    r3 = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider",
                         "--crnn-conformance", "--crnn-layers", "dot16", "-q",
                         "tests/test_own.py"], cwd=tmp_path, capture_output=True, text=True,
                        timeout=180)
    assert r3.returncode == 1 and _dot16_passed(r3.stdout, "1 failed, "), r3.stdout


@pytest.mark.slow
def test_the_whole_suite_from_an_empty_directory_under_xdist(tmp_path):
    """The port author's check as a user runs it: every check of every fixture, -n 2, 0 failures,
    unique ids, and the gate's verdict for each."""
    pytest.importorskip("xdist")
    r = run_pytest(tmp_path, "--crnn-conformance", "-n", "2", "-q",
                   f"--junitxml={tmp_path / 'j.xml'}", timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr
    got = _junit(tmp_path / "j.xml")
    assert got == gate_verdicts(tmp_path) and all(got.values())


def test_inactive_without_its_options(tmp_path):
    (tmp_path / "test_own.py").write_text("def test_own():\n    pass\n")
    r = run_pytest(tmp_path, "-q")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "1 passed" in r.stdout and "crnn-conformance::" not in r.stdout


def test_a_port_that_cannot_run_is_a_usage_error(tmp_path):
    r = run_pytest(tmp_path, f"--port={tmp_path / 'libnothere.so'}", *LAYERS, "-q")
    assert r.returncode == 4, r.stdout + r.stderr      # pytest's usage-error exit code
    assert "cannot run: port library not found" in r.stderr
    assert "Traceback" not in r.stderr


CONFTEST = '''\
"""A port's repository: `pytest` runs its own tests; `pytest --crnn-conformance` builds the
port and gates it (docs/port-abi.md)."""
import shutil
from pathlib import Path

HERE = Path(__file__).parent
PORT = HERE / "build" / "libmyport.so"


def build_port():
    PORT.parent.mkdir(exist_ok=True)
    shutil.copy(HERE / "prebuilt.so", PORT)        # stands in for `make`, `cargo build`, ...


def pytest_configure(config):
    if config.getoption("crnn_conformance") and not config.getoption("crnn_port"):
        if not hasattr(config, "workerinput"):     # once, in the controller, not per xdist worker
            build_port()
        config.option.crnn_port = str(PORT)
'''


def test_a_projects_conftest_points_the_plugin_at_its_port(tmp_path):
    """The conftest.py of docs/port-abi.md: the plugin gates the project's own build (here
    the test port, which implements dot16 and linear only), its own tests stay its own."""
    pytest.importorskip("xdist")
    shutil.copy(build_port(tmp_path), tmp_path / "prebuilt.so")
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_own.py").write_text("def test_own():\n    pass\n")
    r = run_pytest(tmp_path, "-q")
    assert r.returncode == 0 and "1 passed" in r.stdout, r.stdout + r.stderr
    r = run_pytest(tmp_path, "--crnn-conformance", "--crnn-layers", "available", "-n", "2",
                   "-q", "-rs", "--crnn-case", "[Tb]1*")     # linear's T16_* and conv's b1_*
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr
    assert (tmp_path / "build" / "libmyport.so").is_file()
    assert "test_own" not in r.stdout
    # the bundled port implements conv; this one does not: the plugin gated the project's port
    assert "not implemented: crnn_conv_forward returned -4" in r.stdout
    tail = r.stdout.strip().splitlines()[-1]
    assert " passed, " in tail and " skipped" in tail and "failed" not in tail, tail


def test_identity_tests_are_the_gates_identity_checks():
    """Every tensor the gate checks for identity (every output of a layer's run, references
    or not: the trained model's LSTM states, train3's moments, step's pool decisions) has its
    plugin test, and no plugin test waits for a tensor the gate never checks."""
    from crnn_conformance.harness.pytest_plugin import identity_tensors
    from crnn_conformance.harness.runner import GateOptions, GateSession
    s = GateSession(GateOptions(threads=(1, 2), tiers=("identity",)))
    with s:
        s.isas = s.isas[:1]
        for job in s.jobs:
            gate = {r.tensor for r in s.run_case(job)}
            assert gate == set(identity_tensors(job)), (job.fixture.name, job.case.name)


def test_a_fresh_draw_with_crnn_draw(tmp_path):
    """--crnn-draw N runs the plugin's tests on draw N (gate --draw; docs/fixtures.md)."""
    env_dir = tmp_path / "draws"
    os.environ["CRNN_DRAWS_DIR"] = str(env_dir)
    try:
        r = run_pytest(tmp_path, "--crnn-conformance", "--crnn-layers", "dot16", "--crnn-draw", "5", "-q")
        both = run_pytest(tmp_path, "--crnn-conformance", "--crnn-draw", "5",
                          "--crnn-fixtures", str(tmp_path), "-q")
    finally:
        del os.environ["CRNN_DRAWS_DIR"]
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr
    assert _dot16_passed(r.stdout)
    assert sorted(p.name for p in env_dir.glob("*/5/*.h5")) == ["dot16.h5", "dot16_edges.h5",
                                                                "dot16_zeros.h5"]
    assert both.returncode == 4 and "not both" in both.stdout + both.stderr
