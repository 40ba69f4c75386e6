"""The build cache on disk: every entry appears whole or not at all, and is checked on use.

An entry is a directory (a build of the kernels, a harness helper) holding its files and a
SHA256SUMS file naming each with its size and SHA-256. It is written in a fresh temporary
directory `.tmp-<host>-<pid>-*` beside it and renamed into place (publish); a reader takes it
only when every file matches (valid), so a truncated library (which would SIGBUS when loaded)
or a torn file is rebuilt, never used. Builders of one entry take a lock file (flock: the
kernel releases it when a builder dies, even by SIGKILL), and each build first removes the
temporary directories of builders on this host that no longer run (clean_orphans). Single
files (the floating-point probe's memo) are written to a temporary name and renamed
(atomic_write).
"""
from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shutil
import socket
import tempfile
from contextlib import contextmanager
from pathlib import Path

SUMS = "SHA256SUMS"


def cache_root() -> Path:
    root = os.environ.get("CRNN_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "crnn-conformance")
    return Path(root)


def _host() -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", socket.gethostname())[:40] or "host"


def fresh_dir(parent: Path) -> Path:
    """A new temporary directory in `parent`, named after this host and process."""
    parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f".tmp-{_host()}-{os.getpid()}-", dir=parent))


def _alive(pid: int) -> bool:
    """False for a process that is gone or a zombie (killed, not yet reaped by its parent)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def clean_orphans(parent: Path) -> None:
    """Removes what killed builders left in `parent`: their temporary directories (this host,
    process gone) and the directories of replaced entries."""
    if not parent.is_dir():
        return
    pattern = re.compile(rf"\.tmp-{re.escape(_host())}-(\d+)-")
    for d in parent.iterdir():
        m = pattern.match(d.name)
        if (m and not _alive(int(m.group(1)))) or d.name.startswith(".trash-"):
            if d.is_dir():
                shutil.rmtree(d, ignore_errors=True)
            else:
                d.unlink(missing_ok=True)


def file_sha256(path) -> str:
    """The SHA-256 of a file's bytes, hex (OSError when it cannot be read)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def valid(entry: Path, files) -> bool:
    """True when `entry` holds `files`, each with the size and SHA-256 its SHA256SUMS says."""
    try:
        sums = {}
        for line in (entry / SUMS).read_text().splitlines():
            digest, size, name = line.split(" ", 2)
            sums[name] = (digest, int(size))
        for name in files:
            digest, size = sums[name]
            if (entry / name).stat().st_size != size or file_sha256(entry / name) != digest:
                return False
    except (OSError, ValueError, KeyError):
        return False
    return True


def publish(tmp: Path, entry: Path, files) -> None:
    """Moves the finished directory `tmp` (holding `files`) into place as `entry`, replacing
    an invalid one; when another builder published a valid entry first, keeps theirs."""
    (tmp / SUMS).write_text("".join(f"{file_sha256(tmp / n)} {(tmp / n).stat().st_size} {n}\n"
                                    for n in files))
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o777 & ~umask)     # mkdtemp made it private; an entry is for every user
    if entry.exists():
        if valid(entry, files):
            shutil.rmtree(tmp, ignore_errors=True)
            return
        trash = Path(tempfile.mkdtemp(prefix=".trash-", dir=entry.parent))
        os.rename(entry, trash / entry.name)      # a library in use stays mapped
        shutil.rmtree(trash, ignore_errors=True)
    try:
        os.rename(tmp, entry)
    except OSError:
        if not valid(entry, files):
            raise
        shutil.rmtree(tmp, ignore_errors=True)


@contextmanager
def locked(path: Path):
    """An exclusive lock on the file `path` (created if needed) for the `with` body."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".tmp-{_host()}-{os.getpid()}-", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def cache_error(e: OSError, where: Path) -> str:
    why = e.strerror
    errors = e.args[0] if isinstance(e, shutil.Error) and e.args else None
    if not why and isinstance(errors, list) and errors:    # copytree's (src, dst, why) list
        why = str(errors[0][-1]) + (f" (and {len(errors) - 1} more file(s))"
                                    if len(errors) > 1 else "")
    why = str(why or e)
    why = why if len(why) <= 300 else why[:300] + "..."
    return (f"cannot write the build cache {os.fsdecode(where)!r} ({why}); set "
            "CRNN_CACHE_DIR to a writable directory")
