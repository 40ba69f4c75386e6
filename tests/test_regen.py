"""regen-fixtures is deterministic and the checked-in fixtures are current."""
from __future__ import annotations

import subprocess
import sys

import pytest

from crnn_conformance.generators.regen import BUILDERS

FAST = ["dot16", "linear"]


def regen(*args):
    return subprocess.run([sys.executable, "-m", "crnn_conformance.generators.regen", "-q", *args],
                          capture_output=True, text=True)


def test_two_runs_are_byte_identical(tmp_path):
    only = [a for n in FAST for a in ("--only", n)]
    assert regen(*only, "--out", str(tmp_path / "a")).returncode == 0
    assert regen(*only, "--out", str(tmp_path / "b")).returncode == 0
    for n in FAST:
        assert (tmp_path / "a" / f"{n}.h5").read_bytes() == (tmp_path / "b" / f"{n}.h5").read_bytes()


def test_check_passes_on_checked_in_fast_fixtures():
    r = regen("--check", *[a for n in FAST for a in ("--only", n)])
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.slow
def test_check_passes_on_every_checked_in_fixture():
    """The whole `--check` (90 s on 2 cores). Slow: CI's reproducibility line regenerates every
    non-PyTorch fixture byte for byte under four BLAS configurations, and the default run
    checks the PyTorch ones (test_pytorch_tier.py) and the fast ones here."""
    pytest.importorskip("torch")   # the pytorch_* fixtures are regenerated with PyTorch
    r = regen("--check")
    assert r.returncode == 0, r.stdout + r.stderr


def test_check_names_a_fixture_that_differs(tmp_path, monkeypatch):
    import crnn_conformance.generators.regen as R
    import h5py
    fake = tmp_path / "fixtures"
    fake.mkdir()
    (fake / "dot16.h5").write_bytes(R.fixture_path(R.FIXTURES_DIR, "dot16").read_bytes())
    with h5py.File(fake / "dot16.h5", "r+") as f:        # one stored value damaged
        f["uniform_n0_100/inputs/a"][0] += 1.0
    r = subprocess.run([sys.executable, "-c",
                        "import sys, crnn_conformance.generators.regen as R, pathlib;"
                        f"R.FIXTURES_DIR = pathlib.Path({str(fake)!r});"
                        "R.main(['--check', '--only', 'dot16', '-q'])"],
                       capture_output=True, text=True)
    assert r.returncode == 1
    assert "STALE dot16" in r.stdout


def test_unknown_fixture_name():
    r = regen("--only", "nosuch")
    assert r.returncode == 2 and "unknown fixture" in r.stderr


@pytest.mark.parametrize("args", [("--seed", "5"), ()])
def test_an_empty_out_writes_nothing(args):
    """--out "" (an unset variable) used to fall back to fixtures/: with --seed, a fresh draw
    was written over the checked-in fixtures."""
    from crnn_conformance.generators.regen import FIXTURES_DIR
    before = {p.name: p.stat().st_mtime_ns for p in FIXTURES_DIR.glob("*.h5")}
    r = regen(*args, "--out", "", "--only", "dot16")
    assert r.returncode == 2 and "--out names no directory" in r.stderr, r.stderr
    assert {p.name: p.stat().st_mtime_ns for p in FIXTURES_DIR.glob("*.h5")} == before


def test_every_builder_is_importable():
    import importlib
    for mod in BUILDERS.values():
        m = importlib.import_module(mod)
        assert callable(m.build) and m.LAYER and isinstance(m.SEED, int)
