"""crnn-run and the bundled port for another machine: the runner's entry table generated from
abi.py, and the builds of `crnn-conformance build-runner` and `build-port`.

    text = entries_header()                  # runner/crnn_entries.h, from SIGNATURES and ARGS
    build_runner(out, cc="aarch64-linux-gnu-gcc")
    build_port(out, cc="aarch64-linux-gnu-gcc")

crnn-run (runner/crnn_run.c) is plain C99 + POSIX + dlopen: it runs a case bundle on a port
where the gate itself cannot load it (docs/runner.md). It calls every entry point through a
switch of prototypes; the switch, the argument kinds and which pointer arguments a call writes
are generated here from abi.SIGNATURES and abi.ARGS, so they cannot drift from the ABI. The
checked-in runner/crnn_entries.h lets the runner be compiled by hand without Python;
tests/test_crnn_run.py holds it equal to entries_header().
"""
from __future__ import annotations

import ctypes as C
import shutil
import subprocess
import tempfile
from pathlib import Path

from . import abi, build

RUNNER_DIR = Path(__file__).resolve().parent / "runner"
RUNNER_SOURCE = RUNNER_DIR / "crnn_run.c"
ENTRIES_HEADER = RUNNER_DIR / "crnn_entries.h"
RUNNER_FLAGS = ["-O2", "-ffp-contract=off", "-fno-fast-math", "-std=c99", "-Wall", "-Wextra",
                "-Wno-unused-parameter"]
_C_TYPES = {C.c_int32: ("int32_t", "i", "a[{k}].i"), C.c_int64: ("int64_t", "l", "a[{k}].l"),
            C.c_double: ("double", "d", "a[{k}].d"), C.c_void_p: ("void *", "p", "a[{k}].p"),
            C.c_uint32: ("uint32_t", "u", "")}


def _entry(name: str) -> tuple[str, str, str, str]:
    """(kinds, written, arg names, the call through `fn`) of one entry point."""
    res, args = abi.SIGNATURES[name]
    names = abi.ARGS.get(name, "").split()
    kinds = "".join(_C_TYPES[t][1] for t in args)
    written = "".join("1" if n.startswith("*") else "0" for n in names) or "0" * len(args)
    protos = ", ".join(_C_TYPES[t][0] for t in args) or "void"
    actuals = ", ".join(_C_TYPES[t][2].format(k=k) for k, t in enumerate(args))
    call = f"(int32_t)(({_C_TYPES[res][0]} (*)({protos}))fn)({actuals})"
    return kinds, written, " ".join(n.lstrip("*") for n in names), call


def entries_header() -> str:
    """The text of runner/crnn_entries.h: CR_ENTRIES (name, argument kinds i32 'i', i64 'l',
    f64 'd', pointer 'p'; '1' for each argument the call writes; the argument names of
    crnn_port.h) and cr_call, every entry point's prototype in one switch."""
    rows, cases = [], []
    for e, name in enumerate(abi.SIGNATURES):
        kinds, written, names, call = _entry(name)
        rows.append(f'    {{"{name}", "{kinds}", "{written}", "{names}"}},')
        cases.append(f"    case {e}: return {call};")
    return "\n".join([
        "/* crnn_entries.h: generated from ctypes_kernels/abi.py (SIGNATURES, ARGS) by",
        " * crnn_conformance.ctypes_kernels.crossbuild.entries_header(); do not edit. */",
        f"#define CR_N_ENTRIES {len(rows)}",
        "static const cr_entry CR_ENTRIES[CR_N_ENTRIES] = {", *rows, "};", "",
        "static int32_t cr_call(int entry, void *fn, const cr_arg *a)", "{",
        "    (void)a;", "    switch (entry) {", *cases, "    }", "    return CRNN_E_ARG;", "}", ""])


def build_runner(out, cc: str | None = None, verbose: bool = False) -> Path:
    """Compiles crnn-run for the machine `cc` targets into `out`, with the entry table generated
    from abi.py (not the checked-in copy, so a stale copy cannot be built in)."""
    cc = build.find_compiler(cc)
    build.check_flags(RUNNER_FLAGS)
    out = Path(out)
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "crnn_entries.h").write_text(entries_header())
        cmd = [cc, *RUNNER_FLAGS, f"-I{tmp}", f"-I{Path(abi.__file__).parent}",
               "-o", str(out), str(RUNNER_SOURCE), "-ldl", "-lm"]
        if verbose:
            print(" ".join(cmd))
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, check=False,
                               timeout=build.COMPILE_TIMEOUT)
        except subprocess.TimeoutExpired:
            raise build.BuildError(f"the compiler did not finish within "
                                   f"{build.COMPILE_TIMEOUT} s: {' '.join(cmd)}") from None
    if r.returncode != 0:
        raise build.BuildError(f"compiling crnn-run failed: {' '.join(cmd)}\n{r.stderr.strip()}")
    build.check_output(cmd)
    return out


def build_port(out, cc: str | None = None, opt: str = build.DEFAULT_OPT,
               verbose: bool = False) -> Path:
    """The bundled port built (or taken from the cache) for the machine `cc` targets, copied to
    `out`. On a machine other than x86-64 the x86 ISA files compile empty (their sources are
    behind architecture guards) and crnn_isa_available reports scalar only."""
    src = build.build(cc=cc, opt=opt, verbose=verbose)
    out = Path(out)
    tmp = out.with_name(f".{out.name}.{id(out)}.tmp")
    shutil.copyfile(src, tmp)
    tmp.replace(out)
    return out
