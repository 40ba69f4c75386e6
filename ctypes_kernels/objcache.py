"""Compiled objects shared between builds: a source file whose preprocessed text, compiler and
code-generation flags are those of an earlier build is not compiled again.

A mutant (docs/mutants.md) is a patch of one or a few source files: build.py compiles a staged
copy of the sources with relative paths, so every file the patch leaves alone preprocesses to
the normal build's text, its object is the normal build's, byte for byte, and a catalogue run
compiles about one file per mutant instead of every file. The key is what decides an object's
bytes, as ccache's preprocessor mode has it: the compiler and its version, the command's flags
other than the `-D` ones (those are in the preprocessed text), and the preprocessed text
itself, line markers (source paths) included.

Each object is an entry of the build cache (ctypes_kernels/cache.py: written whole under a
temporary name, checked against its SHA-256 on use), under cache_dir()/obj/<key>.
"""
from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

from . import cache

OBJ = "obj.o"


def key(cc_version: str, cmd: list[str], preprocessed: bytes) -> str:
    """cmd: the compile command (compiler first, without "-c SRC -o OBJ")."""
    h = hashlib.sha256()
    h.update(cc_version.encode())
    h.update(repr([a for a in cmd if not a.startswith("-D")]).encode())
    h.update(hashlib.sha256(preprocessed).digest())
    return h.hexdigest()[:32]


def fetch(root: Path, k: str, dest: Path) -> bool:
    """Copies the cached object `k` to `dest`; False when there is none (or it is torn)."""
    entry = root / k
    if not cache.valid(entry, (OBJ,)):
        return False
    shutil.copyfile(entry / OBJ, dest)
    return True


def store(root: Path, k: str, obj: Path) -> None:
    """Publishes the freshly compiled `obj` under `k` (an existing valid entry is kept)."""
    if cache.valid(root / k, (OBJ,)):
        return
    tmp = cache.fresh_dir(root)
    try:
        shutil.copyfile(obj, tmp / OBJ)
        cache.publish(tmp, root / k, (OBJ,))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
