"""The wheel: `pip wheel .` from the tracked files installs one top-level package,
crnn_conformance, with the fixtures, C sources, templates and tolerance table inside; a fresh
virtual environment with only that wheel (and its dependencies) runs the gate and the pytest
plugin from an empty directory (slow)."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
GENERIC = ("harness", "generators", "reports", "ctypes_kernels", "fixtures")


def _tracked_copy(dest: Path) -> Path:
    """The repository's tracked files (what a clean clone has), copied to dest."""
    r = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True)
    if r.returncode != 0:      # not a git checkout: everything but build products
        shutil.copytree(ROOT, dest, ignore=shutil.ignore_patterns(
            "build", "*.egg-info", "__pycache__", ".pytest_cache", ".git"))
        return dest
    for name in filter(None, r.stdout.split("\0")):
        if (ROOT / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, dest / name)
    return dest


def _no_isolation() -> list[str]:
    """Build with this environment's setuptools when it is recent enough (no index needed)."""
    try:
        import setuptools
        return ["--no-build-isolation"] if int(setuptools.__version__.split(".")[0]) >= 64 else []
    except ImportError:
        return []


def _tracked_but_not_shipped(names: list[str]) -> list[str]:
    """Tracked files of the five packaged folders that the wheel lacks (a subpackage missing
    from pyproject's list, a data file without a package-data pattern)."""
    r = subprocess.run(["git", "ls-files", *GENERIC], cwd=ROOT, capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip("not a git checkout")
    shipped = set(names)
    return [f for f in r.stdout.split() if f"crnn_conformance/{f}" not in shipped]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("wheel")
    src = _tracked_copy(d / "src")
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", *_no_isolation(), "-q",
                        "-w", str(d / "dist"), str(src)], capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    (whl,) = (d / "dist").glob("crnn_conformance-*.whl")
    return whl


def test_the_wheel_holds_one_top_level_package(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/")[0] for n in names}
    dist_info = [t for t in top if t.endswith(".dist-info")]
    assert top == {"crnn_conformance", *dist_info} and len(dist_info) == 1, top
    info = dist_info[0]
    assert zipfile.ZipFile(wheel).read(f"{info}/top_level.txt").split() == [b"crnn_conformance"]
    entry = zipfile.ZipFile(wheel).read(f"{info}/entry_points.txt").decode()
    assert "crnn-conformance = crnn_conformance.harness.console:main" in entry
    assert "crnn_conformance = crnn_conformance.harness.pytest_plugin" in entry
    # everything the gate reads at run time is package data
    tracked_fixtures = {p.name for p in (ROOT / "fixtures").glob("*.h5")}
    assert {Path(n).name for n in names if n.startswith("crnn_conformance/fixtures/")
            and n.endswith(".h5") and "/model/" not in n} == tracked_fixtures
    assert not _tracked_but_not_shipped(names)
    for need in ("crnn_conformance/fixtures/model/crnn-v0.h5",
                 "crnn_conformance/ctypes_kernels/crnn_port.h",
                 "crnn_conformance/ctypes_kernels/src/dot16.c",
                 "crnn_conformance/ctypes_kernels/src/isa/gemm16_avx512.c",
                 "crnn_conformance/ctypes_kernels/runner/crnn_run.c",
                 "crnn_conformance/ctypes_kernels/runner/crnn_entries.h",
                 "crnn_conformance/harness/tolerances.toml",
                 "crnn_conformance/harness/sandbox/fpenv.c",
                 "crnn_conformance/harness/sandbox/replay.c",
                 "crnn_conformance/harness/mutants/patches/dot8.diff",
                 "crnn_conformance/reports/results.schema.json",
                 "crnn_conformance/reports/templates/report.html.j2"):
        assert need in names, need


@pytest.mark.slow
def test_a_fresh_venv_with_only_the_wheel_gates_from_an_empty_directory(wheel, tmp_path):
    """As a port author's CI would: a new virtual environment (no access to this one's
    site-packages), `pip install` of the wheel (its dependencies from the configured index),
    then `crnn-conformance gate` and `pytest --crnn-conformance` in an empty directory, with a
    cold build cache."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    py = venv / "bin" / "python"
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTEST_ADDOPTS", "PYTEST_XDIST_WORKER")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["CRNN_CACHE_DIR"] = str(tmp_path / "cache")
    r = subprocess.run([str(py), "-m", "pip", "install", "-q", f"{wheel}[pytest]"], env=env,
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout + r.stderr
    empty = tmp_path / "empty"
    empty.mkdir()

    def run(*cmd):
        return subprocess.run(list(cmd), cwd=empty, env=env, capture_output=True, text=True,
                              timeout=900)

    probe = run(str(py), "-c", "import sys, crnn_conformance.harness as h; print(h.__file__); "
                "print(*[p for p in sys.path if 'site-packages' in p or 'dist-packages' in p])")
    assert probe.returncode == 0, probe.stderr
    where, *site_dirs = probe.stdout.split()
    assert where.startswith(str(venv)), where
    assert site_dirs and all(d.startswith(str(venv)) for d in site_dirs), site_dirs  # ours unseen
    site = Path(where).parents[2]
    assert not [g for g in GENERIC if (site / g).exists()]          # no generic top-level names
    r = run(str(venv / "bin" / "crnn-conformance"), "gate", "-q")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr
    assert r.stdout.strip().splitlines()[-1].startswith("PASS")
    assert "building the bundled kernels (first run)..." in r.stderr
    r = run(str(py), "-m", "pytest", "-q", "-p", "no:cacheprovider", "--crnn-conformance",
            "--crnn-layers", "dot16,adamw")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr
    assert " passed" in r.stdout and "failed" not in r.stdout
    assert not list(empty.iterdir())                                 # nothing written here


def test_the_pytest_extra_brings_what_the_port_authors_pytest_line_needs():
    """README's port-author line runs pytest with `-n 2`: the `pytest` extra brings pytest and
    pytest-xdist (the wheel's own dependencies bring neither), and the README installs the
    wheel with it."""
    import tomllib
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    name = lambda req: re.match(r"[A-Za-z0-9_.-]+", req).group(0)        # noqa: E731
    assert {"pytest", "pytest-xdist"} <= {name(r) for r in project["optional-dependencies"]["pytest"]}
    assert not {"pytest", "pytest-xdist"} & {name(r) for r in project["dependencies"]}
    readme = (ROOT / "README.md").read_text()
    block = readme[readme.index("## For port authors"):readme.index("## For developers")]
    lines = block.splitlines()
    at = next(i for i, l in enumerate(lines) if l.startswith("pytest ") and " -n 2" in l)
    installs = [l for l in lines[:at] if l.startswith("pip install")]
    assert installs and all("[pytest]" in l for l in installs), installs
