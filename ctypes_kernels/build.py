"""Builds the bundled C kernels on demand into a cache keyed by sources, compiler and flags.

    path = build()                      # the default build, cached
    path = build(mutant="dot8", opt="-O0", cc="clang")

Every object gets -ffp-contract=off and never -ffast-math: the ISA paths must give the same
bits, and a fused or reassociated expression would change them. Per-ISA files
(src/isa/*_<isa>.c) are compiled with their own -m flags; everything else at the baseline.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from .abi import PortError

HERE = Path(__file__).resolve().parent
SRC = HERE / "src"
ISAS = ("scalar", "sse", "avx2", "avx512")
DEFAULT_OPT = "-O3"     # the identity tests also build -O0 and -O2: same bits (tests/test_compilers.py)
BASE_FLAGS = ["-ffp-contract=off", "-fno-fast-math", "-fno-math-errno", "-fPIC", "-pthread", "-std=gnu11",
              "-Wall", "-Wextra", "-Wno-unused-parameter"]
ISA_FLAGS = {
    "scalar": [],
    "sse": ["-msse4.2", "-mfma"],
    "avx2": ["-mavx2", "-mfma"],
    "avx512": ["-mavx512f", "-mfma"],
}
FORBIDDEN_FLAGS = ("-ffast-math", "-Ofast", "-funsafe-math-optimizations", "-fassociative-math",
                   "-ffp-contract=fast", "-freciprocal-math")


class BuildError(PortError):
    """The C kernels could not be built (no compiler, a compile error, a forbidden flag)."""


def find_compiler(cc: str | None = None) -> str:
    name = cc or os.environ.get("CC") or next(
        (c for c in ("cc", "gcc", "clang") if shutil.which(c)), None)
    if not name or not shutil.which(name):
        raise BuildError(f"no C compiler found ({'CC=' + name if name else 'tried cc, gcc, clang'}): "
                         "install gcc or clang, or set CC")
    return shutil.which(name)


def compiler_version(cc: str) -> str:
    out = subprocess.run([cc, "--version"], capture_output=True, text=True, check=False)
    return out.stdout.splitlines()[0] if out.stdout else cc


def sources() -> list[Path]:
    return sorted(SRC.glob("*.c")) + sorted((SRC / "isa").glob("*.c"))


def _flags_for(src: Path, opt: str) -> list[str]:
    isa = src.stem.rsplit("_", 1)[-1] if src.parent.name == "isa" else "scalar"
    return [opt, *BASE_FLAGS, *ISA_FLAGS.get(isa, [])]


def cache_dir() -> Path:
    root = os.environ.get("CRNN_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "crnn-conformance")
    return Path(root) / "build"


def build_key(cc: str, opt: str, defines: list[str]) -> str:
    h = hashlib.sha256()
    for f in sorted(SRC.rglob("*")) + [HERE / "crnn_port.h"]:
        if f.is_file() and f.suffix in (".c", ".h"):
            h.update(str(f.relative_to(HERE)).encode())
            h.update(f.read_bytes())
    h.update(cc.encode())
    h.update(compiler_version(cc).encode())
    h.update(repr((opt, BASE_FLAGS, ISA_FLAGS, defines)).encode())
    return h.hexdigest()[:20]


def build(cc: str | None = None, opt: str = DEFAULT_OPT, mutant: str | None = None,
          extra_defines: list[str] | None = None, verbose: bool = False) -> Path:
    """Returns the path of the built shared library, compiling it if it is not cached."""
    cc = find_compiler(cc)
    if opt not in ("-O0", "-O1", "-O2", "-O3", "-Os"):
        raise BuildError(f"unsupported optimization level {opt!r}")
    defines = list(extra_defines or [])
    if mutant:
        defines += [f"-DCRNN_MUTANT={mutant}", f"-DCRNN_MUTANT_{mutant.upper()}=1"]
    bad = [d for d in defines if d in FORBIDDEN_FLAGS]
    if bad:
        raise BuildError(f"forbidden flags {bad}: they change floating-point results")
    key = build_key(cc, opt, defines)
    out = cache_dir() / key / "libcrnn.so"
    if out.exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
        objs = []
        for src in sources():
            obj = Path(tmp) / (src.parent.name + "_" + src.stem + ".o")
            _run([cc, *_flags_for(src, opt), *defines, "-c", str(src), "-o", str(obj)], verbose)
            objs.append(str(obj))
        tmp_so = Path(tmp) / "libcrnn.so"
        _run([cc, "-shared", "-pthread", "-o", str(tmp_so), *objs, "-lm"], verbose)
        os.replace(tmp_so, out)
    (out.parent / "build.txt").write_text(
        f"cc: {cc}\nversion: {compiler_version(cc)}\nopt: {opt}\ndefines: {defines}\n")
    return out


def describe(cc: str | None = None, opt: str = DEFAULT_OPT) -> dict:
    cc = find_compiler(cc)
    return {"cc": cc, "cc_version": compiler_version(cc), "opt": opt, "base_flags": BASE_FLAGS,
            "isa_flags": ISA_FLAGS, "cache": str(cache_dir())}


def _run(cmd: list[str], verbose: bool) -> None:
    if verbose:
        print(" ".join(cmd))
    r = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if r.returncode != 0:
        raise BuildError(f"compiling the bundled kernels failed: {' '.join(cmd)}\n{r.stderr.strip()}")


def build_helper(name: str, source: str, cc: str | None = None) -> Path:
    """Compiles a small harness-side C helper (not part of any port) from `source` into the
    cache and returns the shared library's path. Keyed by the source, compiler and flags;
    raises BuildError when there is no compiler or the source does not compile."""
    cc = find_compiler(cc)
    flags = ["-O1", "-fPIC", "-shared", "-std=gnu11"]
    h = hashlib.sha256(repr((name, source, flags)).encode())
    h.update(cc.encode())
    h.update(compiler_version(cc).encode())
    out = cache_dir().parent / "helpers" / h.hexdigest()[:20] / f"lib{name}.so"
    if out.exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
        src = Path(tmp) / f"{name}.c"
        src.write_text(source)
        tmp_so = Path(tmp) / out.name
        r = subprocess.run([cc, *flags, "-o", str(tmp_so), str(src)], capture_output=True,
                           text=True, check=False)
        if r.returncode != 0:
            raise BuildError(f"compiling the harness helper {name} failed: {r.stderr.strip()}")
        os.replace(tmp_so, out)
    return out
