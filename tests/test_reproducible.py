"""The fixtures come out bit for bit the same whatever BLAS kernel, thread count or NumPy SIMD
dispatch runs the generators: the float64 reference sums in a fixed order
(generators/float64/exactsum.py) and evaluates its transcendental functions on DetMath
(generators/float64/elementary.py)."""
from __future__ import annotations

import io
import os
import subprocess
import sys
import tokenize
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from crnn_conformance import fixtures
from crnn_conformance.generators import fixture_compare
from crnn_conformance.generators.regen import BUILDERS

TESTS = Path(__file__).resolve().parent
FLOAT64 = TESTS.parent / "generators" / "float64"
NON_PYTORCH = [n for n in BUILDERS if not n.startswith("pytorch_")]


def _cpu_flags() -> set:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return set(line.partition(":")[2].split())
    except OSError:
        pass
    return set()


def _numpy_dispatched() -> str:
    """Every SIMD target NumPy dispatches to at run time (NPY_DISABLE_CPU_FEATURES turns them
    off: NumPy's exp, log, tanh and its reductions then run their baseline loops)."""
    try:
        from numpy._core._multiarray_umath import __cpu_dispatch__
    except ImportError:                                         # numpy < 2
        from numpy.core._multiarray_umath import __cpu_dispatch__
    return " ".join(__cpu_dispatch__)


def _coretype(name: str) -> dict:
    """OPENBLAS_CORETYPE=name when this CPU can run that kernel set, else nothing."""
    need = {"SkylakeX": "avx512f", "Haswell": "avx2"}[name]
    return {"OPENBLAS_CORETYPE": name} if need in _cpu_flags() else {}


def _configs() -> dict:
    """The four BLAS kernel x thread-count combinations CI checks; the Haswell one-thread
    run also without NumPy's SIMD dispatch."""
    return {"skylakex_2": {**_coretype("SkylakeX"), "OPENBLAS_NUM_THREADS": "2"},
            "skylakex_1": {**_coretype("SkylakeX"), "OPENBLAS_NUM_THREADS": "1"},
            "haswell_2": {**_coretype("Haswell"), "OPENBLAS_NUM_THREADS": "2"},
            "haswell_1_no_simd": {**_coretype("Haswell"), "OPENBLAS_NUM_THREADS": "1",
                                  "NPY_DISABLE_CPU_FEATURES": _numpy_dispatched()}}


def _run(args, env: dict) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items()
             if k not in ("OPENBLAS_CORETYPE", "OPENBLAS_NUM_THREADS", "NPY_DISABLE_CPU_FEATURES")}
    return subprocess.run([sys.executable, *args], capture_output=True, text=True,
                          env={**clean, **env}, cwd=TESTS.parent)


def test_float64_modules_give_the_same_bits_under_other_blas_and_simd():
    """Every float64 module (and the error bounds written into fixtures) on small cases, in
    the two most different configurations: the same digests. With BLAS or NumPy's SIMD
    exp/tanh in the reference (the code before the fixed-order sums) most digests differ."""
    cfg = _configs()
    a, b = (_run([str(TESTS / "repro_digest.py")], cfg[k])
            for k in ("skylakex_2", "haswell_1_no_simd"))
    assert a.returncode == 0 and b.returncode == 0, a.stderr + b.stderr
    lines = a.stdout.splitlines()
    assert len(lines) >= 15
    assert lines == b.stdout.splitlines()


def _forbidden(path: Path) -> list[str]:
    """Machine-dependent NumPy in a module's code (docstrings and comments aside): the matmul
    operator, BLAS and reduction functions and methods, SIMD transcendental functions, pow."""
    banned = {"dot", "einsum", "matmul", "inner", "tensordot", "sum", "mean", "prod", "exp",
              "exp2", "expm1", "log", "log1p", "log2", "log10", "logaddexp", "tanh", "sin",
              "cos", "power", "cumsum"}
    ours = {"xs", "exactsum", "elementary", "detmath"}      # the deterministic replacements
    toks = [t for t in tokenize.generate_tokens(io.StringIO(path.read_text()).readline)
            if t.type not in (tokenize.COMMENT, tokenize.STRING)]
    out = []
    for i, t in enumerate(toks):
        if t.type == tokenize.OP and t.string in ("@", "@=", "**", "**="):
            out.append(f"{path.name}:{t.start[0]}: {t.string}")
        elif t.type == tokenize.NAME and t.string in banned and i >= 2 and toks[i - 1].string == ".":
            owner = toks[i - 2].string
            if owner in ("np", "numpy", "math") or (toks[i + 1].string == "(" and owner not in ours):
                out.append(f"{path.name}:{t.start[0]}: {owner}.{t.string}")
    return out


def test_float64_reference_uses_no_machine_dependent_numpy():
    found = [f for p in sorted(FLOAT64.glob("*.py")) for f in _forbidden(p)]
    assert found == []
    # the scan finds what it is meant to find
    probe = TESTS.parent / "generators" / "bounds.py"
    assert any("log10" in f for f in _forbidden(probe))


@pytest.mark.slow
def test_fixtures_regenerate_byte_identically_under_every_blas_config(tmp_path):
    """regen-fixtures of every non-PyTorch fixture under OPENBLAS_CORETYPE=Haswell and
    SkylakeX x OPENBLAS_NUM_THREADS=1 and 2 (one of them also without NumPy's SIMD), each in
    a subprocess: every file equals the checked-in one byte for byte (so `--check` passes in
    each), and no exact-tier dataset moved."""
    only = [a for n in NON_PYTORCH for a in ("--only", n)]

    def regen(item):
        name, env = item
        out = tmp_path / name
        return name, out, _run(["-m", "crnn_conformance.generators.regen", "-q", *only,
                                "--out", str(out)], env)

    with ThreadPoolExecutor(2) as pool:
        runs = list(pool.map(regen, _configs().items()))
    checked_in = fixtures.directory()
    for name, out, r in runs:
        assert r.returncode == 0, f"{name}: {r.stderr}"
        rows = fixture_compare.compare_sets(checked_in, out)
        assert sorted(rows) == sorted(NON_PYTORCH)
        assert all(row["exact"][1] == 0 and row["inputs"][1] == 0 for row in rows.values()), \
            fixture_compare.format_table(rows)
        differ = [n for n in NON_PYTORCH
                  if (out / f"{n}.h5").read_bytes() != (checked_in / f"{n}.h5").read_bytes()]
        assert differ == [], f"{name}: {differ}\n{fixture_compare.format_table(rows)}"
