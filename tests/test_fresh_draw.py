"""regen-fixtures --seed: a fresh draw of the fixtures (docs/fixtures.md, "A fresh draw").
The same cases with other data; a correct port passes it on every tier it holds; a port that
replays the published answers passes them and fails the draw."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import h5py
import pytest

from testports import ROOT, build_port, gate  # noqa: E402

from crnn_conformance import fixtures
from crnn_conformance.ctypes_kernels.cache import file_sha256
from crnn_conformance.generators.regen import BUILDERS, DRAWABLE

REPLAY = str(ROOT / "tests" / "ports" / "replayport.py") + ":Port"
NUMPY_PORT = str(ROOT / "examples" / "numpy_port.py") + ":Port"
TORCH_PORT = str(ROOT / "examples" / "torch_port.py") + ":Port"
# fixtures that draw in a few seconds, of layers whose every fixture is among them
QUICK = ["dot16", "dot16_zeros", "dot16_edges", "linear", "linear_edges", "ctc", "ctc_edges",
         "detmath", "clip", "clip_edges", "adamw", "adamw_edges"]


def regen(*args):
    return subprocess.run([sys.executable, "-m", "crnn_conformance.generators.regen", "-q", *args],
                          capture_output=True, text=True)


def draw(out: Path, seed: int, names) -> Path:
    r = regen("--seed", str(seed), "--out", str(out), *[a for n in names for a in ("--only", n)])
    assert r.returncode == 0, r.stdout + r.stderr
    return out


def inputs(path: Path) -> dict:
    with h5py.File(path, "r") as f:
        return {(c, k): f[c]["inputs"][k][()] for c in json.loads(f.attrs["case_names"])
                for k in f[c]["inputs"]}


def test_a_draw_has_the_same_cases_and_other_data(tmp_path):
    a = draw(tmp_path / "a", 5, ["linear", "dot16"])
    for name in ("linear", "dot16"):
        old, new = inputs(fixtures.directory() / f"{name}.h5"), inputs(a / f"{name}.h5")
        assert old.keys() == new.keys()
        assert all(old[k].dtype == new[k].dtype for k in old)    # (a drawn size may differ)
        drawn = [k for k in old if old[k].dtype.kind == "f"]    # (integer inputs: lengths)
        assert drawn and all(old[k].tobytes() != new[k].tobytes() for k in drawn)
        with h5py.File(a / f"{name}.h5", "r") as f:
            assert f.attrs["draw"] == 5


def test_a_draw_is_reproducible_from_its_seed(tmp_path):
    a = draw(tmp_path / "a", 5, ["linear"])
    b = draw(tmp_path / "b", 5, ["linear"])
    c = draw(tmp_path / "c", 6, ["linear"])
    assert (a / "linear.h5").read_bytes() == (b / "linear.h5").read_bytes()
    x5, x6 = inputs(a / "linear.h5"), inputs(c / "linear.h5")
    assert all(x5[k].tobytes() != x6[k].tobytes() for k in x5 if x5[k].dtype.kind == "f")


def test_the_checked_in_fixtures_are_the_draw_without_a_seed(tmp_path):
    r = regen("--check", "--only", "linear", "--only", "conv_edges")
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.fixture(scope="module")
def quick_draw(tmp_path_factory):
    return draw(tmp_path_factory.mktemp("draw"), 20261207, QUICK)


def passes(*args):
    r = gate(*args, "-q", timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr
    assert r.stdout.strip().splitlines()[-1].startswith("PASS")


def test_the_bundled_port_passes_a_fresh_draw(quick_draw, tmp_path):
    passes("--fixtures", str(quick_draw), "--layers", "dot16,linear,ctc,clip,adamw",
           "--report-dir", str(tmp_path))
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["meta"]["fixtures"]["linear.h5"]["draw"] == 20261207   # which data it ran
    row = re.search(r"<tr><td><code>linear.h5</code></td>.*?</tr>", (tmp_path / "index.html").read_text(), re.S)
    assert row and '<td class="num">20261207</td>' in row.group(0)
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.validate(results, json.loads((ROOT / "reports" / "results.schema.json").read_text()))


def test_another_legal_order_passes_a_fresh_draw(quick_draw):
    """NumPy float32 (BLAS matmul, NumPy's exp and sums): the float64 tier's allowances are
    an error model evaluated on each case's data, not fitted to the checked-in draw."""
    passes("--port", NUMPY_PORT, "--fixtures", str(quick_draw), "--layers", "linear,ctc,clip,adamw",
           "--tiers", "float64")


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2])
def test_every_drawable_fixture_drawn_again_passes_correct_ports(tmp_path, seed):
    """Every fixture but the pytorch tier's, two seeds (about 40 s a draw): the bundled port on
    every tier the gate computes from the definitions (exact, float64, identity over every
    path x 1, 2, 3, 7, contract); the NumPy and PyTorch example ports and the BLAS-style conv
    port on the float64 tier."""
    d = draw(tmp_path / "d", seed, DRAWABLE)
    passes("--fixtures", str(d))
    passes("--port", NUMPY_PORT, "--fixtures", str(d), "--tiers", "float64")
    passes("--port", str(build_port(tmp_path, source="blasport.c")), "--fixtures", str(d),
           "--layers", "conv", "--tiers", "float64")
    pytest.importorskip("torch")
    passes("--port", TORCH_PORT, "--fixtures", str(d), "--tiers", "float64")


def test_a_port_replaying_the_published_answers_fails_a_fresh_draw(tmp_path):
    args = ["--port", REPLAY, "--layers", "linear", "--tiers", "exact,float64", "-q"]
    published = gate(*args)
    assert published.returncode == 0, published.stdout + published.stderr
    d = draw(tmp_path / "d", 3, ["linear", "linear_edges"])
    fresh = gate(*args, "--fixtures", str(d))
    assert fresh.returncode == 1, fresh.stdout + fresh.stderr
    fails = [line for line in fresh.stdout.splitlines() if line.startswith("FAIL linear/")]
    assert fails and all("tier=exact" in line for line in fails)
    assert f"--fixtures {d}" in fresh.stdout          # the repro names the draw


@pytest.mark.parametrize("args, why", [
    ([], "give --out DIR"),
    (["--out", str(fixtures.directory())], "give --out DIR"),
    (["--out", "OUT", "--check"], "cannot be combined with --check"),
    (["--out", "OUT", "--only", "pytorch_linear"], "pytorch_linear: the pytorch tier's fixtures"),
])
def test_a_draw_never_writes_over_the_checked_in_fixtures(tmp_path, args, why):
    args = [str(tmp_path / "o") if a == "OUT" else a for a in args]
    r = regen("--seed", "4", *args)
    assert r.returncode == 2, r.stdout + r.stderr
    assert why in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "o").exists()


def test_a_negative_seed_is_refused():
    r = regen("--seed", "-1", "--out", "x")
    assert r.returncode == 2 and "Traceback" not in r.stderr


def test_drawable_is_every_fixture_but_the_pytorch_tiers():
    assert set(DRAWABLE) == {n for n in BUILDERS if not n.startswith("pytorch_")}


# ---- --draw N: the draw made and found by gate, export and grade ------------------------------

def cache_env(tmp_path) -> dict:
    return {"CRNN_DRAWS_DIR": str(tmp_path / "draws")}


def drawn_files(tmp_path, seed) -> list:
    return sorted(p.name for p in (tmp_path / "draws").glob(f"*/{seed}/*.h5"))


def test_gate_draw_draws_once_into_the_cache_and_reports_it(tmp_path):
    env = cache_env(tmp_path)
    first = gate("--draw", "7", "--layers", "linear", "-q", "--json", str(tmp_path / "r.json"), env=env)
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr
    assert "drawing 2 fixture(s) with --draw 7" in first.stderr
    assert drawn_files(tmp_path, 7) == ["linear.h5", "linear_edges.h5"]   # the layer's, no pytorch
    meta = json.loads((tmp_path / "r.json").read_text())["meta"]["fixtures"]
    assert {k: v["draw"] for k, v in meta.items()} == {"linear.h5": 7, "linear_edges.h5": 7}
    again = gate("--draw", "7", "--layers", "linear", "-q", env=env)
    assert again.returncode == 0 and "drawing" not in again.stderr


def test_a_damaged_draw_in_the_cache_is_drawn_again(tmp_path):
    """As the build cache rebuilds a torn entry: a drawn file whose bytes no longer match the
    SHA-256 written beside it is drawn again, never read."""
    env = cache_env(tmp_path)
    assert gate("--draw", "8", "--layers", "linear", "-q", env=env).returncode == 0
    path = next((tmp_path / "draws").glob("*/8/linear.h5"))
    good = path.read_bytes()
    with open(path, "r+b") as f:
        f.seek(len(good) // 2)
        f.write(b"\x55" * 64)
    r = gate("--draw", "8", "--layers", "linear", "-q", env=env)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr
    assert "drawing 1 fixture(s) with --draw 8" in r.stderr
    assert path.read_bytes() == good


@pytest.mark.parametrize("intruder", ["published", "another draw"])
def test_a_file_of_another_draw_in_the_cache_is_drawn_again(tmp_path, monkeypatch, intruder):
    """A file in draws/<key>/<N>/ must record `draw` = N: the published fixture (no draw) or
    draw 10's file put into draw 9's place with its SHA-256 rewritten to match is not draw 9:
    it is drawn again, and stderr says why."""
    from crnn_conformance.generators import regen
    monkeypatch.setenv("CRNN_DRAWS_DIR", str(tmp_path / "draws"))
    root = regen.drawn(9, ["linear"])
    path = root / "linear.h5"
    good = path.read_bytes()
    if intruder == "published":
        src, words = fixtures.directory() / "linear.h5", "records no draw (the published fixture?)"
    else:
        src, words = regen.drawn(10, ["linear"]) / "linear.h5", "records draw 10 (another draw's file?)"
    path.write_bytes(src.read_bytes())
    (root / "linear.h5.sha256").write_text(file_sha256(path))   # a matching sidecar
    said = []
    assert regen.drawn(9, ["linear"], progress=said.append) == root
    assert said and f"{path} {words}, not draw 9: not trusted, drawn again" in said[0]
    assert "drawing 1 fixture(s) with --draw 9" in said[1]
    assert path.read_bytes() == good
    with h5py.File(path, "r") as f:
        assert f.attrs["draw"] == 9
    said.clear()
    regen.drawn(9, ["linear"], progress=said.append)           # now trusted: nothing drawn
    assert said == []


def test_gate_draw_fails_the_replaying_port_and_its_repro_names_the_draw(tmp_path):
    r = gate("--port", REPLAY, "--draw", "3", "--layers", "linear", "--tiers", "exact,float64",
             "-q", env=cache_env(tmp_path))
    assert r.returncode == 1, r.stdout + r.stderr
    repros = [line for line in r.stdout.splitlines() if "__REPRO:" in line]
    assert repros and all("--draw 3" in line and "--fixtures" not in line for line in repros)


def test_export_and_grade_find_the_same_draw(tmp_path):
    from crnn_conformance.ctypes_kernels import build
    env = cache_env(tmp_path)
    bundle = tmp_path / "bundle"
    r = gate("--out", str(bundle), "--layers", "linear", "--draw", "11", env=env, command="export")
    assert r.returncode == 0, r.stdout + r.stderr
    results = tmp_path / "results.bin"
    subprocess.run([sys.executable, str(ROOT / "tests" / "bundle_runner.py"), str(build.build()),
                    str(bundle), str(results), "--threads", "1"], check=True, capture_output=True)
    ok = gate(str(bundle), str(results), "--draw", "11", "-q", env=env, command="grade")
    assert ok.returncode == 0, ok.stdout[-2000:] + ok.stderr
    # without --draw, grade takes the draw bundle.json records, and says so
    auto = gate(str(bundle), str(results), "-q", env=env, command="grade")
    assert auto.returncode == 0, auto.stdout[-2000:] + auto.stderr
    assert "exported from draw 11 of the fixtures; grading against draw 11" in auto.stderr
    # another draw is refused before anything is drawn
    other = gate(str(bundle), str(results), "--draw", "12", "-q", env=env, command="grade")
    assert other.returncode == 2 and "Traceback" not in other.stderr
    assert "--draw 12: the bundle was exported from draw 11 (grade it with --draw 11)" in other.stderr
    assert drawn_files(tmp_path, 12) == []
    # other fixtures: the digest check names the command the bundle was exported by
    packaged = gate(str(bundle), str(results), "--fixtures", str(ROOT / "fixtures"), "-q",
                    env=env, command="grade")
    assert packaged.returncode == 2, packaged.stdout[-2000:]
    assert "not the one the bundle was exported from" in packaged.stderr
    assert "the bundle was exported by: " in packaged.stderr
    assert "export --out" in packaged.stderr and "--draw 11" in packaged.stderr


def test_grade_refuses_a_draw_for_a_bundle_of_the_published_fixtures(tmp_path):
    bundle = tmp_path / "bundle"
    r = gate("--out", str(bundle), "--layers", "dot16", "--case", "*n0*", command="export")
    assert r.returncode == 0, r.stdout + r.stderr
    r = gate(str(bundle), str(tmp_path / "none.bin"), "--draw", "3", env=cache_env(tmp_path),
             command="grade")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "fixtures that are not a draw (grade it without --draw)" in r.stderr
    assert drawn_files(tmp_path, 3) == []


@pytest.mark.parametrize("args, env, why", [
    (["--draw", "1", "--fixtures", "fixtures"], {}, "give --draw or --fixtures, not both"),
    (["--draw", "1"], {"CRNN_DRAWS_DIR": "/proc/no-such-dir"}, "cannot write draw 1 into /proc/no-such-dir"),
])
def test_gate_draw_refusals_are_one_line_and_exit_2(args, env, why):
    r = gate(*args, "--layers", "linear", "-q", env=env)
    assert r.returncode == 2, r.stdout + r.stderr
    assert why in r.stderr and "Traceback" not in r.stderr + r.stdout


def no_extras(*regen_args) -> subprocess.CompletedProcess:
    """regen-fixtures in a process where the extras' modules (mpmath, torch) cannot be
    imported, as in an install of the package alone."""
    code = ("import sys; sys.modules.update(mpmath=None, torch=None); "
            "from crnn_conformance.generators.regen import main; "
            f"main({list(regen_args)!r})")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)


def test_a_draw_needs_no_extra_package(tmp_path):
    """ctc_edges' rounding lines are found with mpmath (a dev extra); a draw keeps the
    published ones, so the package alone can draw (the rest of the draw: --slow, below)."""
    r = no_extras("--seed", "3", "--out", str(tmp_path), "--only", "ctc_edges", "-q")
    assert r.returncode == 0, r.stdout + r.stderr
    old, new = inputs(fixtures.directory() / "ctc_edges.h5"), inputs(tmp_path / "ctc_edges.h5")
    assert new[("rounding_T1_K2", "logits")].tobytes() == old[("rounding_T1_K2", "logits")].tobytes()
    assert new[("many_tiny", "logits")].tobytes() != old[("many_tiny", "logits")].tobytes()


@pytest.mark.slow
def test_every_drawable_fixture_draws_without_extra_packages(tmp_path):
    r = no_extras("--seed", "4", "--out", str(tmp_path), "-q")
    assert r.returncode == 0, r.stdout + r.stderr
    assert sorted(p.stem for p in tmp_path.glob("*.h5")) == sorted(DRAWABLE)


def test_a_draw_is_not_begun_without_room_for_it(monkeypatch, tmp_path):
    """On a full file system HDF5 failed past what an exception reports: 112 tracebacks, then
    a segfault (exit 139). The draw now checks the free space first (twice the published
    fixtures' size) and says what it needs."""
    import shutil as sh
    from crnn_conformance.generators import regen
    monkeypatch.setenv("CRNN_DRAWS_DIR", str(tmp_path))
    monkeypatch.setattr(regen.shutil, "disk_usage", lambda p: sh._ntuple_diskusage(1, 1, 4096))
    with pytest.raises(regen.DrawError, match=r"0\.0 MiB free, the draw needs about"):
        regen.drawn(77, ["linear"])
    assert not list(tmp_path.rglob("*.h5"))
