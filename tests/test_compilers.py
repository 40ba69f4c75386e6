"""The same bits from every compiler and optimization level: the bundled kernels built with
gcc and clang (clang skipped when absent) at -O0, -O2 and -O3 give, on every ISA path this
CPU has, exactly the bits of the default build for

- a whole training step on crnn-v0 (crnn_step_gradients on two lines of different widths,
  crnn_clip_gradients, crnn_adamw on every tensor: gradients, losses, weights, moments), and
- the conv, LSTM and CTC layers on their fixture cases (every output of the first cases).

Also: the build refuses value-changing flags and its floating-point probe catches a compiler
that contracts, reassociates or defines __FAST_MATH__. The matrix is printed with -s (and
`python tests/test_compilers.py` prints it as the table in docs/performance.md)."""
from __future__ import annotations

import hashlib
import shutil

import numpy as np
import pytest

from crnn_conformance.ctypes_kernels import abi
from crnn_conformance.ctypes_kernels import build as B
from crnn_conformance.generators.h5io import read_fixture
from crnn_conformance.harness import bench
from crnn_conformance.harness.layers import conv, ctc, lstm
from crnn_conformance.harness.runner import FIXTURES_DIR

COMPILERS = ("gcc", "clang")
OPTS = ("-O0", "-O2", "-O3")
LAYER_CASES = 2                  # fixture cases per layer


def outputs(path) -> dict:
    """{(isa, what): sha256 of the bits} for the step and the layers, every ISA path."""
    lib = abi.load(path)
    isa0, th0 = lib.crnn_get_isa(), lib.crnn_get_threads()
    inp = bench.make_inputs(width=64, batch=2, seed=3)
    inp.images[1] = inp.images[1][:, :50]          # two widths: T = 16 and 12
    fixtures = {m: read_fixture(FIXTURES_DIR / f"{m.FIXTURES[0]}.h5") for m in (conv, lstm, ctc)}
    out = {}
    try:
        for isa in abi.available_isas(lib):
            abi.check(lib.crnn_set_isa(abi.ISA_NAMES.index(isa)), "crnn_set_isa")
            for threads in (1, 2):
                lib.crnn_set_threads(threads)
                step = bench.OursStep(lib, inp)
                step()
                step()                                  # two steps: AdamW's moments matter
                h = hashlib.sha256()
                for a in (step.grads, step.losses, step.bl, step.norm, step.flat, step.m, step.v):
                    h.update(np.ascontiguousarray(a).tobytes())
                out[(isa, threads, "step")] = h.hexdigest()
            lib.crnn_set_threads(1)
            for m, fx in fixtures.items():
                for case in fx.cases[:LAYER_CASES]:
                    res = m.run(lib, case)
                    h = hashlib.sha256()
                    for k in sorted(res):
                        h.update(k.encode())
                        h.update(np.ascontiguousarray(res[k]).tobytes())
                    out[(isa, 1, f"{m.LAYER}:{case.name}")] = h.hexdigest()
    finally:
        lib.crnn_set_isa(isa0)
        lib.crnn_set_threads(th0)
    return out


@pytest.fixture(scope="module")
def reference():
    return outputs(B.build())


def _compiler(cc):
    path = shutil.which(cc)
    if not path:
        pytest.skip(f"{cc} is not installed")
    return path


@pytest.mark.slow
@pytest.mark.parametrize("opt", OPTS)
@pytest.mark.parametrize("cc", COMPILERS)
def test_same_bits(reference, cc, opt):
    got = outputs(B.build(cc=_compiler(cc), opt=opt))
    assert got.keys() == reference.keys()
    differ = sorted(k for k in got if got[k] != reference[k])
    assert not differ, f"{cc} {opt}: different bits in {differ[:5]}"


def test_default_gcc_and_clang_at_o0(reference):
    """The quick version (not slow): the default build and clang -O0 agree."""
    cc = shutil.which("clang") or shutil.which("gcc")
    got = outputs(B.build(cc=cc, opt="-O0"))
    assert got == reference


@pytest.mark.parametrize("flag", ["-ffast-math", "-Ofast", "-fassociative-math", "-ffp-contract=fast",
                                  "-freciprocal-math", "-funsafe-math-optimizations", "-O4"])
def test_value_changing_flags_refused(flag):
    with pytest.raises(B.BuildError, match="forbidden"):
        B.build(extra_defines=[flag])


def test_opt_level_checked():
    with pytest.raises(B.BuildError, match="optimization level"):
        B.build(opt="-Ofast")


@pytest.mark.parametrize("cc", COMPILERS)
@pytest.mark.parametrize("bad, what", [(["-ffp-contract=fast"], "contracts"),
                                       (["-ffast-math"], "reassociates"),
                                       (["-fassociative-math", "-fno-signed-zeros",
                                         "-fno-trapping-math"], "reassociates")])
def test_probe_catches_a_compiler_that_rewrites(monkeypatch, tmp_path, cc, bad, what):
    """With the build's checks bypassed, the probe itself still sees the rewrite."""
    path = _compiler(cc)
    if not B._cpu_has_fma() and "contract" in what:
        pytest.skip("no FMA on this CPU: contraction cannot happen")
    monkeypatch.setenv("CRNN_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(B, "BASE_FLAGS", ["-fPIC", "-std=gnu11", *bad])
    with pytest.raises(B.BuildError, match=what):
        B.probe_fp(path, "-O3")


def test_probe_passes_with_the_build_flags():
    for cc in COMPILERS:
        if shutil.which(cc):
            for opt in OPTS:
                assert B.probe_fp(shutil.which(cc), opt)["passed"]


def identity_matrix() -> str:
    """Markdown: compiler x -O x ISA, 'same' where every step/layer digest equals the
    default build's."""
    ref = outputs(B.build())
    isas = sorted({k[0] for k in ref}, key=abi.ISA_NAMES.index)
    rows = [f"| compiler | -O | {' | '.join(isas)} |", "|---|---|" + "---|" * len(isas)]
    for cc in COMPILERS:
        path = shutil.which(cc)
        if not path:
            rows.append(f"| {cc} | — | {' | '.join('not installed' for _ in isas)} |")
            continue
        for opt in OPTS:
            got = outputs(B.build(cc=path, opt=opt))
            cells = ["same" if all(got[k] == ref[k] for k in ref if k[0] == isa) else "DIFFERENT"
                     for isa in isas]
            rows.append(f"| {B.compiler_version(path)} | {opt} | {' | '.join(cells)} |")
    names = sorted({k[2] for k in ref})
    across = all(len({ref[(isa, t, nm)] for isa in isas}) == 1
                 for (_, t, nm) in ref if (isas[0], t, nm) in ref)
    return "\n".join(rows) + (
        f"\n\nEach cell: {len(ref) // len(isas)} digests on that ISA path — two training steps of "
        f"crnn-v0 (gradients, losses, weights and AdamW moments) at 1 and 2 threads, and "
        f"{len(names) - 1} conv/LSTM/CTC fixture cases — equal to the default build "
        f"({B.compiler_version(B.find_compiler(None))} {B.DEFAULT_OPT}); the default build's "
        f"digests are {'also equal across all ISA paths' if across else 'NOT equal across ISA paths'}.")


if __name__ == "__main__":
    print(identity_matrix())
