"""Builds the bundled C kernels on demand into a cache keyed by sources, compiler and flags.

    path = build()                      # the default build (CC or cc/gcc/clang, -O3), cached
    path = build(cc="clang", opt="-O0")
    path = build(mutant="dot8")

Every object gets -ffp-contract=off and never -ffast-math: the ISA paths must give the same
bits, and a fused or reassociated expression would change them. Per-ISA files
(src/isa/*_<isa>.c) are compiled with their own -m flags; everything else at the baseline.

The flags are checked twice: no flag that licenses value-changing rewrites may appear
(FORBIDDEN_FLAGS, any optimization level outside OPT_LEVELS), and before the first build
with a compiler and level, a probe compiled with exactly those flags (plus FMA where the CPU
has it) must show that the compiler keeps a*b + c as two roundings, sums a loop in order,
divides with a true division and does not define __FAST_MATH__ (probe_fp). The same bits
from gcc and clang at -O0, -O2 and -O3 on every ISA path are tests/test_compilers.py.

Cache entries are written whole (a temporary directory renamed into place, under a lock) and
checked against their SHA-256 sums before use, so a torn or truncated entry is rebuilt
(ctypes_kernels/cache.py); a build interrupted by a signal kills its compilers. Every build
compiles a copy of the sources staged in its entry's temporary directory; build(mutant=NAME)
applies that mutant's patch to the copy first (harness/mutants/patches.py), so the shipped
sources are never touched and hold no mutant code.
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import platform
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from . import cache, objcache
from .abi import LAYER_SYMBOLS, PortError, load

HERE = Path(__file__).resolve().parent
SRC = HERE / "src"
ISAS = ("scalar", "sse", "avx2", "avx512")
DEFAULT_OPT = "-O2"     # the project standard; -O0 and -O3 give the same bits (tests/test_compilers.py)
# -falign-functions=64: every function starts on a cache line, so a kernel's loops keep their
# alignment when unrelated code above it grows or shrinks (the scalar path's kn loops moved
# 3.5 ms a step with a 100-byte change in another file; docs/performance.md). Placement only.
BASE_FLAGS = ["-ffp-contract=off", "-fno-fast-math", "-fno-math-errno", "-falign-functions=64", "-fPIC",
              "-pthread", "-std=gnu11", "-Wall", "-Wextra", "-Wno-unused-parameter"]
ISA_FLAGS = {
    "scalar": [],
    "sse": ["-msse4.2", "-mfma"],
    "avx2": ["-mavx2", "-mfma"],
    "avx512": ["-mavx512f", "-mfma"],
}
OPT_LEVELS = ("-O0", "-O1", "-O2", "-O3", "-Os")
FORBIDDEN_FLAGS = ("-ffast-math", "-Ofast", "-funsafe-math-optimizations", "-fassociative-math",
                   "-ffp-contract=fast", "-ffp-contract=on", "-freciprocal-math",
                   "-ffinite-math-only", "-fno-signed-zeros", "-fno-trapping-math",
                   "-fcx-limited-range", "-ffp-model=fast", "-mdaz-ftz", "-fdenormal-fp-math=preserve-sign",
                   "-fapprox-func", "-mrecip")


class BuildError(PortError):
    """The C kernels could not be built (no compiler, a compile error, a forbidden flag)."""


def find_compiler(cc: str | None = None) -> str:
    name = cc or os.environ.get("CC") or next(
        (c for c in ("cc", "gcc", "clang") if shutil.which(c)), None)
    if not name or not shutil.which(name):
        raise BuildError(f"no C compiler found ({'CC=' + name if name else 'tried cc, gcc, clang'}): "
                         "install gcc or clang, or set CC")
    return shutil.which(name)


def target_arch(cc: str) -> str:
    """The machine `cc` compiles for ('x86_64', 'aarch64', ...), from `cc -dumpmachine`."""
    if cc not in _TARGETS:
        r = subprocess.run([cc, "-dumpmachine"], capture_output=True, text=True, check=False)
        _TARGETS[cc] = r.stdout.strip() or platform.machine()
    return _TARGETS[cc].split("-", 1)[0]


_TARGETS: dict = {}
X86 = ("x86_64", "i386", "i486", "i586", "i686")


def isa_flags(cc: str) -> dict:
    """ISA_FLAGS for a compiler targeting x86; elsewhere no -m flag (the x86 files compile
    empty there: src/core.h)."""
    return ISA_FLAGS if target_arch(cc) in X86 else {isa: [] for isa in ISA_FLAGS}


def emulator(cc: str) -> list[str] | None:
    """How to run a program `cc` builds on this machine: [] natively, qemu-user for another
    architecture (qemu-ARCH -L /usr/TRIPLE), None when it cannot be run here."""
    arch = target_arch(cc)
    if arch == platform.machine() or (arch in X86 and platform.machine() in X86):
        return []
    qemu = shutil.which(f"qemu-{arch}")
    if not qemu:
        return None
    sysroot = Path("/usr") / _TARGETS[cc]
    return [qemu, "-L", str(sysroot)] if sysroot.is_dir() else [qemu]


def compiler_version(cc: str) -> str:
    out = subprocess.run([cc, "--version"], capture_output=True, text=True, check=False)
    return out.stdout.splitlines()[0] if out.stdout else cc


def sources() -> list[Path]:
    return sorted(SRC.glob("*.c")) + sorted((SRC / "isa").glob("*.c"))


# A mutant whose mistake is in the compiler flags (docs/mutants.md): contract_fast builds the
# whole port with contraction on and FMA instructions everywhere (a*b + c fused wherever the
# compiler likes), the one build that check_flags would refuse. Never used for a normal build.
# Every other mutant is a source patch (harness/mutants/patches/<name>.diff), applied to the
# copy of the sources the build compiles.
MUTANT_FLAGS = {"contract_fast": ({"-ffp-contract=off": "-ffp-contract=fast"}, ["-mfma"])}


def _mutant_patch(mutant: str | None) -> str:
    """The patch text of a patch mutant ("" for none or a flags mutant); BuildError naming
    the mutant when its patch is missing."""
    if not mutant or mutant in MUTANT_FLAGS:
        return ""
    from ..harness.mutants import patches
    try:
        return patches.read_patch(mutant)
    except patches.MutantPatchError as e:
        raise BuildError(f"{e} (a mutant other than the flag mutants "
                         f"{', '.join(MUTANT_FLAGS)} is a source patch; "
                         "harness/mutants/catalogue.py lists them)") from None


# The marker a mutant build links in (harness/mutants/run.py checks it before gating): a
# generated source, never one of the shipped files.
MARKER_SOURCE = "const char crnn_mutant_name[] = \"{name}\";\n"


def _mutant_flags(flags: list[str], mutant: str | None) -> list[str]:
    if mutant not in MUTANT_FLAGS:
        return flags
    swap, extra = MUTANT_FLAGS[mutant]
    return [swap.get(f, f) for f in flags] + extra


def _flags_for(src: Path, opt: str, flags: dict = ISA_FLAGS) -> list[str]:
    isa = src.stem.rsplit("_", 1)[-1] if src.parent.name == "isa" else "scalar"
    return [opt, *BASE_FLAGS, *flags.get(isa, [])]


def cache_dir() -> Path:
    return cache.cache_root() / "build"


def build_key(cc: str, opt: str, defines: list[str], flags: dict = ISA_FLAGS,
              mutant: str | None = None, patch: str = "") -> str:
    h = hashlib.sha256()
    for f in sorted(SRC.rglob("*")) + [HERE / "crnn_port.h"]:
        if f.is_file() and f.suffix in (".c", ".h"):
            h.update(str(f.relative_to(HERE)).encode())
            h.update(f.read_bytes())
    h.update(cc.encode())
    h.update(compiler_version(cc).encode())
    h.update(repr((opt, BASE_FLAGS, flags, defines, mutant)).encode())
    h.update(patch.encode())
    return h.hexdigest()[:20]


def check_flags(flags: list[str]) -> None:
    """Raises BuildError for a flag that lets the compiler change floating-point results."""
    bad = [f for f in flags if f in FORBIDDEN_FLAGS or f.startswith(("-ffast-math", "-Ofast", "-mrecip"))
           or (f.startswith("-O") and f not in OPT_LEVELS)]
    if bad:
        raise BuildError(f"forbidden flag(s) {', '.join(bad)}: they let the compiler change "
                         "floating-point results (fused, reassociated or approximate operations)")
    if "-ffp-contract=off" not in flags:
        raise BuildError("-ffp-contract=off is required: a*b + c must stay two roundings")


def build(cc: str | None = None, opt: str = DEFAULT_OPT, mutant: str | None = None,
          extra_defines: list[str] | None = None, verbose: bool = False, notify=None,
          patch: str | None = None) -> Path:
    """Returns the path of the built shared library, compiling it if it is not cached
    (`notify()`, when given, is called first when it must be compiled: a cold cache). A
    `patch` (unified diff text) builds the mutant `mutant` from it instead of from the
    catalogue's patches (the operator sweep's generated mutants)."""
    cc = find_compiler(cc)
    if opt not in OPT_LEVELS:
        raise BuildError(f"unsupported optimization level {opt!r} (choose from {', '.join(OPT_LEVELS)})")
    defines = list(extra_defines or [])
    if mutant is not None and not re.fullmatch(r"[a-z0-9_]+", mutant):
        raise BuildError(f"bad mutant name {mutant!r}")
    if patch is not None and not mutant:
        raise BuildError("a patch needs a mutant name")
    patch = _mutant_patch(mutant) if patch is None else patch
    flags = isa_flags(cc)
    for isa in ISAS:
        check_flags([opt, *BASE_FLAGS, *flags[isa], *defines])
    key = build_key(cc, opt, defines, flags, mutant, patch)
    entry = cache_dir() / key
    out = entry / "libcrnn.so"
    try:
        cache.clean_orphans(cache_dir())
        if cache.valid(entry, ("libcrnn.so",)):
            return out
        with cache.locked(cache_dir() / f"{key}.lock"):
            if cache.valid(entry, ("libcrnn.so",)):   # another process built it meanwhile
                return out
            if notify is not None:
                notify()
            probe = probe_fp(cc, opt)
            tmp = cache.fresh_dir(cache_dir())
            try:
                changed = _stage(tmp, mutant, patch)
                _compile(cc, opt, defines, tmp, verbose, mutant, flags, changed)
                (tmp / "build.txt").write_text(
                    f"cc: {cc}\nversion: {compiler_version(cc)}\nopt: {opt}\ndefines: {defines}\n"
                    f"mutant: {mutant}\npatched: {' '.join(changed)}\n"
                    f"base flags: {' '.join(BASE_FLAGS)}\nprobe: {json.dumps(probe)}\n")
                cache.publish(tmp, entry, ("libcrnn.so", "build.txt"))
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
    except OSError as e:
        raise BuildError(cache.cache_error(e, cache_dir())) from None
    return out


def _stage(tmp: Path, mutant: str | None, patch: str) -> list[str]:
    """Copies what the build compiles (src/ and crnn_port.h, as laid out in ctypes_kernels/)
    into tmp, applies a patch mutant's patch to the copy and, for any mutant, writes its
    marker source; returns the files the patch changed. The shipped sources are never
    touched, and the copy stays in the cache entry: the sources the library was built from."""
    shutil.copytree(SRC, tmp / "src", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2(HERE / "crnn_port.h", tmp / "crnn_port.h")
    changed: list[str] = []
    if patch:
        from ..harness.mutants import patches
        try:
            changed = patches.apply(mutant, tmp, patch)
        except patches.MutantPatchError as e:
            raise BuildError(str(e)) from None
    if mutant:
        (tmp / "mutant_name.c").write_text(MARKER_SOURCE.format(name=mutant))
    return changed


def _compile(cc: str, opt: str, defines: list[str], tmp: Path, verbose: bool,
             mutant: str | None = None, flags: dict = ISA_FLAGS, patched: list[str] = ()) -> None:
    """Compiles the staged copy in tmp (_stage) and links tmp/libcrnn.so (the objects in
    tmp/obj, removed after). Every command runs in tmp with relative paths, so a file's
    preprocessed text does not depend on where the copy is: a source whose text and flags an
    earlier build compiled takes that object (ctypes_kernels/objcache.py), and a mutant
    recompiles only the files its patch changes. A source file the patch creates is compiled
    too; one it deletes is not."""
    (tmp / "obj").mkdir()
    srcs = [src.relative_to(HERE) for src in sources()]
    srcs += [Path(p) for p in patched if p.endswith(".c") and Path(p) not in srcs]
    srcs = [s for s in srcs if (tmp / s).is_file()]
    if mutant:
        srcs.append(Path("mutant_name.c"))
    jobs = [(src, Path("obj") / (src.parent.name + "_" + src.stem + ".o"),
             [cc, *_mutant_flags(_flags_for(src, opt, flags), mutant), *defines])
            for src in srcs]
    _run_all([[*cmd, "-E", str(src), "-o", f"{obj}.i"] for src, obj, cmd in jobs], verbose, tmp)
    version, root = compiler_version(cc), cache_dir() / "obj"
    cache.clean_orphans(root)
    keys = {obj: objcache.key(version, cmd, (tmp / f"{obj}.i").read_bytes()) for _, obj, cmd in jobs}
    todo = [(src, obj, cmd) for src, obj, cmd in jobs
            if not objcache.fetch(root, keys[obj], tmp / obj)]
    _run_all([[*cmd, "-c", str(src), "-o", str(obj)] for src, obj, cmd in todo], verbose, tmp)
    for _, obj, _ in todo:
        objcache.store(root, keys[obj], tmp / obj)
    _run([cc, "-shared", "-pthread", "-o", "libcrnn.so", *(str(o) for _, o, _ in jobs), "-lm"],
         verbose, tmp)
    shutil.rmtree(tmp / "obj")


PROBE_SOURCE = r"""
#include <float.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
static float contract(float a, float b, float c) { return a * b + c; }
static float sum(const float *x, int n)
{
    float s = 0.0f;
    for (int i = 0; i < n; i++) s = s + x[i];
    return s;
}
static float divsum(const float *x, int n, float d)   /* a loop-invariant divisor */
{
    float s = 0.0f;
    for (int i = 0; i < n; i++) s = s + x[i] / d;
    return s;
}
static unsigned bits(float f) { unsigned u; memcpy(&u, &f, 4); return u; }
int main(int argc, char **argv)
{
    /* argv: a b c d x0 x1 ... (hex floats, read at run time: nothing to fold) */
    if (argc < 6) return 2;
    float a = strtof(argv[1], 0), b = strtof(argv[2], 0), c = strtof(argv[3], 0);
    float d = strtof(argv[4], 0);
    int n = argc - 5;
    float *x = malloc(sizeof(float) * (size_t)n);
    for (int i = 0; i < n; i++) x[i] = strtof(argv[5 + i], 0);
#if defined(__FAST_MATH__) || (defined(__FINITE_MATH_ONLY__) && __FINITE_MATH_ONLY__)
    int fast = 1;
#else
    int fast = 0;
#endif
    printf("%d %d %08x %08x %08x\n", fast, (int)FLT_EVAL_METHOD, bits(contract(a, b, c)),
           bits(sum(x, n)), bits(divsum(x, n, d)));
    free(x);
    return 0;
}
"""


def _cpu_has_fma() -> bool:
    try:
        return " fma " in Path("/proc/cpuinfo").read_text().replace("\n", " ")
    except OSError:
        return False


def _bits(f) -> str:
    import numpy as np
    return f"{int(np.float32(f).view(np.uint32)):08x}"


def probe_fp(cc: str, opt: str) -> dict:
    """Compiles PROBE_SOURCE into a program with exactly the build's flags (and -mfma where
    the CPU has FMA, so contraction would be possible), runs it in its own process (a
    fast-math binary may switch on flush-to-zero for the process that loads it) and checks
    what it computes: a*b + c rounded twice, a loop summed in order, a true division in a
    loop, no __FAST_MATH__, FLT_EVAL_METHOD 0. Raises BuildError if the compiler does not
    honour the flags; caches the verdict per compiler, version and flags."""
    import numpy as np
    run = emulator(cc)
    variants = [[opt, *BASE_FLAGS]] + ([[opt, *BASE_FLAGS, *ISA_FLAGS["avx2"]]]
                                        if _cpu_has_fma() and run == [] else [])
    h = hashlib.sha256(repr((PROBE_SOURCE, variants)).encode())
    h.update(cc.encode())
    h.update(compiler_version(cc).encode())
    if run != []:                          # another machine's compiler: how it was run
        h.update(repr(run).encode())
    memo = cache_dir().parent / "probes" / (h.hexdigest()[:20] + ".json")
    try:
        verdict = json.loads(memo.read_text())
        if isinstance(verdict, dict) and verdict.get("passed") is True and verdict.get("variants"):
            return verdict
    except (OSError, ValueError):     # absent, torn or not JSON: probe again and rewrite it
        pass
    f32 = np.float32
    a = b = f32(1 + 2.0 ** -12)
    c, d = f32(-1.0), f32(3.0)
    xs = np.array([1e8, 1.0, -1e8, 1.0, 3.0, 1e-3, -3.0, 2.5e7, 7.0, -2.5e7] * 7, np.float32)
    want_sum = want_div = f32(0.0)
    for v in xs:
        want_sum = f32(want_sum + v)
        want_div = f32(want_div + f32(v / d))
    want = {"contract": _bits((a * b) + c), "sum": _bits(want_sum), "div": _bits(want_div)}
    args = [float(v).hex() for v in (a, b, c, d, *xs)]
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "probe.c"
        src.write_text(PROBE_SOURCE)
        for n, flags in enumerate(variants):
            exe = Path(tmp) / f"probe{n}"
            cmd = [cc, *flags, "-o", str(exe), str(src)]
            try:
                r = subprocess.run(cmd, capture_output=True, text=True, check=False,
                                   timeout=COMPILE_TIMEOUT)
            except subprocess.TimeoutExpired:
                raise BuildError(f"the compiler did not finish within {COMPILE_TIMEOUT} s: "
                                 f"{' '.join(cmd)}") from None
            if r.returncode != 0:
                raise BuildError(f"the floating-point probe does not compile with {cc} "
                                 f"{' '.join(flags)}: {r.stderr.strip()}")
            check_output(cmd)
            if run is None:     # another machine's program, no emulator: compiled, not run
                results.append({"flags": " ".join(flags), "ran": False})
                continue
            r = subprocess.run([*run, str(exe), *args], capture_output=True, text=True, check=False)
            if r.returncode != 0:
                raise BuildError(f"the floating-point probe built with {cc} {' '.join(flags)} "
                                 f"did not run (exit {r.returncode})")
            fast, method, con, sm, dv = r.stdout.split()
            got = {"flags": " ".join(flags), "fast_math": int(fast), "flt_eval_method": int(method),
                   "contract": con == want["contract"], "ordered_sum": sm == want["sum"],
                   "true_division": dv == want["div"]}
            problems = [k for k, ok in (("defines __FAST_MATH__ / finite-math", got["fast_math"] == 0),
                                        ("FLT_EVAL_METHOD != 0", got["flt_eval_method"] == 0),
                                        ("contracts a*b + c into an fma", got["contract"]),
                                        ("reassociates a loop sum", got["ordered_sum"]),
                                        ("replaces a division", got["true_division"])) if not ok]
            if problems:
                raise BuildError(f"{cc} with {' '.join(flags)} {'; '.join(problems)}: the kernels "
                                 "would not give the same bits on every path")
            results.append(got)
    verdict = {"cc": cc, "version": compiler_version(cc), "passed": True, "variants": results}
    try:
        cache.atomic_write(memo, json.dumps(verdict))
    except OSError as e:
        raise BuildError(cache.cache_error(e, memo.parent)) from None
    return verdict


def describe(cc: str | None = None, opt: str = DEFAULT_OPT) -> dict:
    cc = find_compiler(cc)
    try:
        probe = "passed" if probe_fp(cc, opt)["passed"] else "failed"
    except BuildError as e:
        probe = f"failed: {e}"
    return {"cc": cc, "cc_version": compiler_version(cc), "opt": opt, "base_flags": BASE_FLAGS,
            "isa_flags": ISA_FLAGS, "cache": str(cache_dir()), "fp_probe": probe}


def describe_cmd(argv=None) -> None:
    """`python -m crnn_conformance.ctypes_kernels.build [--cc CC] [--opt -O3]`: build and print the path."""
    import argparse
    ap = argparse.ArgumentParser(description="build the bundled kernels")
    ap.add_argument("--cc", default=None)
    ap.add_argument("--opt", default=DEFAULT_OPT)
    ap.add_argument("-v", "--verbose", action="store_true")
    a = ap.parse_args(argv)
    print(build(cc=a.cc, opt=a.opt, verbose=a.verbose))


def _run(cmd: list[str], verbose: bool, cwd: Path | None = None) -> None:
    _run_all([cmd], verbose, cwd)


def _run_all(cmds: list[list[str]], verbose: bool, cwd: Path | None = None) -> None:
    """Runs the commands, as many at once as there are CPUs; the first failure raises
    BuildError. Whatever ends the build early (an error, a signal) kills the ones running."""
    pending, running = list(cmds), []
    try:
        while pending or running:
            while pending and len(running) < max(1, os.cpu_count() or 1):
                cmd = pending.pop(0)
                if verbose:
                    print(" ".join(cmd))
                err = tempfile.TemporaryFile()
                running.append((cmd, subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err,
                                                      cwd=cwd), err))
            cmd, proc, err = running.pop(0)
            with err:
                try:
                    code = proc.wait(COMPILE_TIMEOUT)
                except subprocess.TimeoutExpired:
                    raise BuildError(f"the compiler did not finish within {COMPILE_TIMEOUT} s: "
                                     f"{' '.join(cmd)}") from None
                if code != 0:
                    err.seek(0)
                    raise BuildError(f"compiling the bundled kernels failed: {' '.join(cmd)}\n"
                                     f"{err.read().decode(errors='replace').strip()}")
                check_output(cmd, cwd)
    finally:
        for _, proc, err in running:
            proc.kill()
            proc.wait()
            err.close()


COMPILE_TIMEOUT = 600      # seconds for one compiler command: more is a hung compiler
# the first bytes of an object, library or executable: ELF, Mach-O (both word sizes and byte
# orders, and universal), PE (MZ), COFF objects (x86-64, arm64, i386, armv7)
OBJECT_MAGICS = (b"\x7fELF", b"\xfe\xed\xfa\xce", b"\xfe\xed\xfa\xcf", b"\xce\xfa\xed\xfe",
                 b"\xcf\xfa\xed\xfe", b"\xca\xfe\xba\xbe", b"MZ", b"\x64\x86", b"\x64\xaa",
                 b"\x4c\x01", b"\xc4\x01")


def check_output(cmd: list[str], cwd: Path | None = None) -> None:
    """BuildError unless the file a successful compiler command names with -o exists, and is
    an object, library or executable (not for -E's text): a compiler that exits 0 without
    writing one, or writes something else, is named here, not later as a broken cache."""
    if "-o" not in cmd:
        return
    out = Path(cmd[cmd.index("-o") + 1])
    out = out if out.is_absolute() or cwd is None else Path(cwd) / out
    try:
        head = out.open("rb").read(4)
    except OSError:
        head = None
    why = ("wrote no file" if head is None else "wrote an empty file" if not head else
           None if "-E" in cmd or head.startswith(OBJECT_MAGICS) else
           f"wrote a file that is no object, library or executable (it begins {head!r})")
    if why:
        raise BuildError(f"the compiler exited 0 but {why} at {os.fsdecode(out)}: "
                         f"{' '.join(cmd)}")


def _cached_library(root: Path, digest: str, filename: str, make) -> Path:
    """root/<digest>/<filename> from the cache, or made by `make(tmp_dir)` (which writes
    tmp_dir/<filename>) in a fresh directory published whole under a lock."""
    entry = root / digest[:20]
    out = entry / filename
    if cache.valid(entry, (filename,)):
        return out
    try:
        with cache.locked(root / f"{entry.name}.lock"):
            if cache.valid(entry, (filename,)):
                return out
            cache.clean_orphans(root)
            tmp = cache.fresh_dir(root)
            try:
                make(tmp)
                cache.publish(tmp, entry, (filename,))
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
    except OSError as e:
        raise BuildError(cache.cache_error(e, root)) from None
    return out


def build_helper(name: str, source: str, cc: str | None = None) -> Path:
    """Compiles a small harness-side C helper (not part of any port) from `source` into the
    cache and returns the shared library's path. Keyed by the source, compiler and flags;
    raises BuildError when there is no compiler or the source does not compile."""
    cc = find_compiler(cc)
    flags = ["-O1", "-fPIC", "-shared", "-std=gnu11"]
    h = hashlib.sha256(repr((name, source, flags)).encode())
    h.update(cc.encode())
    h.update(compiler_version(cc).encode())

    def make(tmp: Path) -> None:
        (tmp / f"{name}.c").write_text(source)
        r = subprocess.run([cc, *flags, "-o", str(tmp / f"lib{name}.so"), str(tmp / f"{name}.c")],
                           capture_output=True, text=True, check=False)
        if r.returncode != 0:
            raise BuildError(f"compiling the harness helper {name} failed: {r.stderr.strip()}")
    return _cached_library(cache_dir().parent / "helpers", h.hexdigest(), f"lib{name}.so", make)


# The reference port (harness/reference.py): the executable spec in scalar C, one thread, the
# C library's fmaf where the spec says fma, nothing contracted or reassociated.
REFERENCE_FLAGS = ["-O2", "-ffp-contract=off", "-fno-fast-math", "-fPIC", "-shared", "-std=gnu11"]


def reference_sources() -> Path:
    """generators/spec/c/, the reference port's sources (package data of
    crnn_conformance.generators), found without importing that package: in a checkout, an
    editable install and a wheel alike."""
    spec = importlib.util.find_spec("crnn_conformance.generators")
    where = list(spec.submodule_search_locations or []) if spec else []
    return (Path(where[0]) if where else HERE.parent / "generators") / "spec" / "c"


def build_reference(cc: str | None = None, defines: list[str] | None = None) -> Path:
    """Compiles the reference port (generators/spec/c/*.c against crnn_port.h) into the build
    cache and returns the shared library's path. Keyed by the sources' text, the flags (with
    `defines`), the compiler and its version; raises BuildError when there is no compiler,
    the sources are missing or they do not compile."""
    cc = find_compiler(cc)
    src = reference_sources()
    sources = sorted(src.glob("*.c"))
    if not sources:
        raise BuildError(f"the reference port's sources are missing: no *.c in {src}")
    flags = [*REFERENCE_FLAGS, *(defines or [])]
    check_flags(flags)
    h = hashlib.sha256(repr(flags).encode())
    for f in [*sorted(src.glob("*.[ch]")), HERE / "crnn_port.h"]:
        h.update(f.name.encode())
        h.update(f.read_bytes())
    h.update(cc.encode())
    h.update(compiler_version(cc).encode())

    def make(tmp: Path) -> None:
        cmd = [cc, *flags, f"-I{HERE}", "-o", str(tmp / "libcrnn_reference.so"),
               *map(str, sources), "-lm"]
        r = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if r.returncode != 0:
            raise BuildError(f"compiling the reference port ({src}) failed: {' '.join(cmd)}\n"
                             f"{r.stderr.strip()}")
    return _cached_library(cache_dir().parent / "reference", h.hexdigest(),
                           "libcrnn_reference.so", make)


def load_bundled(layers=tuple(LAYER_SYMBOLS), **build_kw):
    """The bundled kernels built (or taken from the cache) and loaded with abi.load."""
    return load(build(**build_kw), layers)


if __name__ == "__main__":
    describe_cmd()
