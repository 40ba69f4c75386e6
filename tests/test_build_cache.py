"""The object cache (ctypes_kernels/objcache.py): a mutant build compiles only the files its
patch changes, and what it links is byte for byte what a build from a cold cache links."""
from __future__ import annotations

import pytest

from crnn_conformance.ctypes_kernels import build, objcache


@pytest.fixture
def small(monkeypatch):
    """Builds of two source files (the dx_taps_kx_first patch changes conv_dx.c, not
    detmath.c), counting the files each build compiles."""
    monkeypatch.setattr(build, "sources", lambda: [build.SRC / "detmath.c",
                                                   build.SRC / "conv_dx.c"])
    compiled = []
    run_all = build._run_all

    def counting(cmds, verbose, cwd=None):
        compiled.extend(c[c.index("-c") + 1] for c in cmds if "-c" in c)
        return run_all(cmds, verbose, cwd)
    monkeypatch.setattr(build, "_run_all", counting)
    return compiled


def names(paths):
    return sorted(p.rsplit("/", 1)[-1] for p in paths)


def test_a_mutant_compiles_only_what_it_changes_and_links_the_same_bytes(small, tmp_path,
                                                                          monkeypatch):
    monkeypatch.setenv("CRNN_CACHE_DIR", str(tmp_path / "warm"))
    build.build()
    assert names(small) == ["conv_dx.c", "detmath.c"]
    small.clear()
    warm = build.build(mutant="dx_taps_kx_first").read_bytes()
    assert names(small) == ["conv_dx.c", "mutant_name.c"]
    small.clear()
    monkeypatch.setenv("CRNN_CACHE_DIR", str(tmp_path / "cold"))
    cold = build.build(mutant="dx_taps_kx_first").read_bytes()
    assert names(small) == ["conv_dx.c", "detmath.c", "mutant_name.c"]
    assert warm == cold


def test_a_torn_object_is_compiled_again(small, tmp_path, monkeypatch):
    monkeypatch.setenv("CRNN_CACHE_DIR", str(tmp_path))
    good = build.build().read_bytes()
    for obj in (build.cache_dir() / "obj").glob(f"*/{objcache.OBJ}"):
        obj.write_bytes(obj.read_bytes()[:100])
    small.clear()
    assert build.build(extra_defines=["-DUNUSED_BY_ANY_FILE=1"]).read_bytes() == good
    assert names(small) == ["conv_dx.c", "detmath.c"]


def test_the_key_is_the_text_and_the_flags_but_not_the_defines():
    k = objcache.key("gcc 12", ["gcc", "-O2", "-DX=1"], b"int f;")
    assert k == objcache.key("gcc 12", ["gcc", "-O2", "-DY=2"], b"int f;")
    assert k != objcache.key("gcc 12", ["gcc", "-O3"], b"int f;")
    assert k != objcache.key("gcc 13", ["gcc", "-O2"], b"int f;")
    assert k != objcache.key("gcc 12", ["gcc", "-O2"], b"int g;")


@pytest.mark.parametrize("script, words", [
    ("exit 0", "wrote no file"),
    ('for a; do [ "$prev" = -o ] && echo garbage > "$a"; prev=$a; done; exit 0',
     "wrote a file that is no object, library or executable"),
])
def test_a_compiler_that_exits_0_without_an_output_is_named(tmp_path, monkeypatch, script,
                                                            words):
    """build-runner said 'crnn-run for x86_64: rr' with no file written (or an 8-byte text
    file), and build-port blamed the build cache ('No such file or directory')."""
    from crnn_conformance.ctypes_kernels import build, crossbuild
    monkeypatch.setenv("CRNN_CACHE_DIR", str(tmp_path / "cache"))
    cc = tmp_path / "fakecc"
    cc.write_text(f"#!/bin/sh\n{script}\n")
    cc.chmod(0o755)
    for make in (lambda: crossbuild.build_runner(tmp_path / "rr", cc=str(cc)),
                 lambda: build.build(cc=str(cc))):
        with pytest.raises(build.BuildError, match=f"the compiler exited 0 but {words}"):
            make()


def test_a_copytree_failure_is_one_short_reason():
    """A full disk during the build's copy of the sources gave a 5 kB line holding a Python
    list of every file's error."""
    import shutil
    from crnn_conformance.ctypes_kernels import cache
    e = shutil.Error([("src", "dst", "[Errno 28] No space left on device: 'src'")] * 40)
    line = cache.cache_error(e, __import__("pathlib").Path("/cache"))
    assert "No space left on device" in line and "(and 39 more file(s))" in line
    assert len(line) < 300 and "[(" not in line
