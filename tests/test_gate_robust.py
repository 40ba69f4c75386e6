"""Nothing selected, no traceback on any path, a torn cache, signals, an
unwritable report directory; and the stress test (three gates on one fresh cache, one killed
with -9 mid-build). Every bad invocation is one line on stderr and exit 2."""
from __future__ import annotations

import json
import os
import signal
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from testports import cannot_run, gate, gone, ROOT  # noqa: E402

LAYERS = ["--layers", "dot16"]


def unwritable(tmp_path) -> Path:
    """A directory path no process can create or write: below a regular file (root ignores
    permission bits, so a read-only directory would not do)."""
    f = tmp_path / "a-file"
    f.write_text("")
    return f / "dir"


# ---- 7. nothing selected -----------------------------------------------------------------------

@pytest.mark.parametrize("args", [["--case", "nomatch*"], ["--tiers", ","], ["--layers", ","],
                                  ["--isa", ""], ["--tiers", "pytorch"]])
def test_nothing_selected_is_exit_2(args):
    cannot_run(gate(*LAYERS, *args) if "--layers" not in args else gate(*args),
               "no checks selected")


# ---- 8. no traceback ----------------------------------------------------------------------------

def test_timeout_inf_is_no_limit_and_bad_values_are_refused(tmp_path):
    r = gate(*LAYERS, "-q", "--timeout", "inf", "--report-dir", str(tmp_path))
    assert r.returncode == 0, r.stdout + r.stderr
    assert json.loads((tmp_path / "results.json").read_text())["meta"]["timeout_s"] is None
    for bad in ("nan", "-1", "0", "1e300"):
        cannot_run(gate(*LAYERS, "--timeout", bad), "--timeout", "or inf for no limit")


def test_non_utf8_paths(ports, tmp_path):
    """A report directory and a port whose paths hold the byte 0xff: the reports are written
    (valid UTF-8, the byte shown as U+FFFD) and the __REPRO: line reruns that very path in
    bash ($'...\\xff...')."""
    d = Path(os.fsdecode(bytes(tmp_path) + b"/r\xffport"))
    so = Path(os.fsdecode(bytes(tmp_path) + b"/lib\xff.so"))
    so.write_bytes(ports("-DTP_ERRCODE").read_bytes())
    r = subprocess.run([sys.executable, "-m", "crnn_conformance.harness.cli", "gate", "--port",
                        so, "--layers", "linear", "-q", "--report-dir", d], cwd=ROOT,
                       capture_output=True, timeout=120)
    assert r.returncode == 1, r.stderr
    assert b"Traceback" not in r.stdout + r.stderr
    repro = [line.decode() for line in r.stdout.splitlines() if b"__REPRO:" in line]
    assert repro and all("$'" + str(tmp_path) + "/lib\\xff.so'" in line for line in repro), repro
    rerun = subprocess.run(["bash", "-c", repro[0].split("__REPRO: ", 1)[1].replace(
        "crnn-conformance", f"{sys.executable} -m crnn_conformance.harness.cli", 1)],
        cwd=ROOT, capture_output=True, timeout=120)
    assert rerun.returncode == 1 and b"returned -3" in rerun.stdout, rerun.stdout + rerun.stderr
    for name in ("results.json", "index.html", "junit.xml"):
        text = (d / name).read_bytes().decode("utf-8")        # strict: valid UTF-8
        if name == "results.json":
            text = json.loads(text)["meta"]["port"]
        assert "lib\ufffd.so" in text, name


def test_an_unwritable_cache_dir_is_exit_2(tmp_path):
    cannot_run(gate(*LAYERS, env={"CRNN_CACHE_DIR": str(unwritable(tmp_path))}),
               "cannot write the build cache", "set CRNN_CACHE_DIR")


def test_regen_out_unwritable_is_exit_2(tmp_path):
    out = unwritable(tmp_path)
    for cmd in ([sys.executable, "-m", "crnn_conformance.harness.cli", "regen-fixtures"],
                [str(Path(sys.executable).parent / "regen-fixtures")]):
        r = subprocess.run([*cmd, "--out", str(out), "--only", "dot16", "-q"], cwd=ROOT,
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 2, r.stdout + r.stderr
        assert r.stderr.strip().splitlines() == [
            f"regen-fixtures: cannot write to {str(out)!r} (Not a directory)"]


def test_an_unexpected_error_is_one_line_with_the_traceback_logged(ports, tmp_path):
    so = ports()                 # (not the bundled port: a cold cache would say it builds it)
    code = ("import sys\n"
            "from crnn_conformance.harness import runner\n"
            "def boom(*a, **k): raise ZeroDivisionError('a bug')\n"
            "runner.run_gate = boom\n"
            "import crnn_conformance.harness.cli.gate as g; g.run_gate = boom\n"
            f"sys.argv = ['crnn-conformance', 'gate', '--port', {str(so)!r}, '--layers', 'dot16']\n"
            "from crnn_conformance.harness.cli import main; main()\n")
    env = {**os.environ, "CRNN_CACHE_DIR": str(tmp_path / "cache")}
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                       timeout=120, env=env)
    line = cannot_run(r, "internal error in gate (ZeroDivisionError: a bug)", "traceback is in")
    log = Path(line.rsplit("traceback is in ", 1)[1].rstrip(")"))
    assert log.parent == tmp_path / "cache" / "logs"
    assert "Traceback" in log.read_text() and "ZeroDivisionError" in log.read_text()


# ---- 9. the cache: atomic, checked on use, orphans removed --------------------------------------

def test_a_torn_cache_entry_is_rebuilt(tmp_path, monkeypatch):
    """The kernels' build cache machinery on a one-file build: a truncated library and a torn
    probe memo are rebuilt, not used; a dead builder's temporary directory is removed."""
    from crnn_conformance.ctypes_kernels import build
    monkeypatch.setenv("CRNN_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(build, "sources", lambda: [build.SRC / "detmath.c"])
    so = build.build()
    good = so.read_bytes()
    so.write_bytes(good[: len(good) // 2])                 # truncated: would SIGBUS if loaded
    dead = build.cache_dir() / f".tmp-{build.cache._host()}-999999999-x"
    dead.mkdir()
    (dead / "obj.o").write_text("left by a killed build")
    mine = build.cache_dir() / f".tmp-{build.cache._host()}-{os.getpid()}-y"
    mine.mkdir()
    assert build.build() == so and so.read_bytes() == good
    assert not dead.exists() and mine.exists()             # a live builder's is left alone
    memo = next((tmp_path / "probes").glob("*.json"))
    memo.write_text(memo.read_text()[:10])                  # torn
    cc = build.find_compiler()
    assert build.probe_fp(cc, build.DEFAULT_OPT)["passed"] is True
    assert json.loads(memo.read_text())["passed"] is True   # rewritten whole


def test_a_torn_probe_memo_does_not_stop_the_gate(tmp_path):
    from crnn_conformance.ctypes_kernels import build
    objects = build.cache_dir() / "obj"       # the library is built (and the probe run) in
    if objects.is_dir():                      # the fresh cache, from the compiled objects
        shutil.copytree(objects, tmp_path / "build" / "obj")
    env = {"CRNN_CACHE_DIR": str(tmp_path)}
    assert gate(*LAYERS, "-q", env=env).returncode == 0
    for memo in (tmp_path / "probes").glob("*.json"):
        memo.write_text('{"cc": "/usr/bin/')
    r = gate(*LAYERS, "-q", env=env)
    assert r.returncode == 0, r.stdout + r.stderr


# ---- 10. signals --------------------------------------------------------------------------------

def _children(pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]



def _hanging_gate(so):
    p = subprocess.Popen([sys.executable, "-m", "crnn_conformance.harness.cli", "gate", "--port",
                          str(so), "--layers", "linear", "--case", "T16_I37_O37", "--timeout",
                          "inf", "-q"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    deadline = time.time() + 60
    while time.time() < deadline and not _children(p.pid):
        time.sleep(0.1)
    time.sleep(1.0)                          # the worker is in the hanging call by now
    kids = _children(p.pid)
    assert kids, "the gate started no worker"
    return p, kids


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_a_signal_ends_the_worker_and_exits_128_plus_n(sig, ports):
    p, kids = _hanging_gate(ports("-DTP_HANG"))
    p.send_signal(sig)
    out, err = p.communicate(timeout=30)
    assert p.returncode == 128 + sig, (p.returncode, err)
    assert err.strip() == f"crnn-conformance: gate: interrupted by {sig.name}"
    deadline = time.time() + 10
    while time.time() < deadline and not all(gone(k) for k in kids):
        time.sleep(0.1)
    assert all(gone(k) for k in kids), kids


def test_a_signal_whose_raise_python_drops_still_ends_the_command():
    """A signal taken while a weakref callback runs: Python prints the handler's exception as
    'ignored' and goes on, and the gate used to finish with PASS and exit 0 (10 of 18 signals
    sent early in a full gate). The signal is kept and ends the command with 128 + N, with
    nothing printed for the dropped raise."""
    import io
    import weakref
    from contextlib import redirect_stderr
    from crnn_conformance.harness.cli import common

    class Obj:
        pass

    def verdict():
        o = Obj()
        keep = weakref.ref(o, lambda r: common._raise(signal.SIGTERM, None))  # noqa: F841
        del o                                # the raise happens in the callback, and is dropped
        raise SystemExit(0)                  # what a passing gate ends with

    err = io.StringIO()
    with redirect_stderr(err), pytest.raises(SystemExit) as e:
        with common.last_resort("gate"):
            verdict()
    assert e.value.code == 128 + signal.SIGTERM
    assert "Traceback" not in err.getvalue() and "interrupted by SIGTERM" in err.getvalue()


def test_a_killed_gate_takes_its_worker_with_it(ports):
    p, kids = _hanging_gate(ports("-DTP_HANG"))
    p.kill()
    p.communicate(timeout=30)
    deadline = time.time() + 10
    while time.time() < deadline and not all(gone(k) for k in kids):
        time.sleep(0.1)
    assert all(gone(k) for k in kids), kids


# ---- 11. the report directory is checked before the run -------------------------------------------

def test_an_unwritable_report_dir_is_found_before_the_run(ports, tmp_path):
    """With a port that hangs forever (no timeout), only a check before the run can answer."""
    so = ports("-DTP_HANG")
    for args in (["--report-dir", str(unwritable(tmp_path))],
                 ["--junit", str(unwritable(tmp_path) / "junit.xml")]):
        cannot_run(gate("--port", str(so), "--layers", "linear", "--timeout", "inf", *args,
                        timeout=60), "not a writable directory")


# ---- stress ---------------------------------------------------------------------------------------

@pytest.mark.slow
def test_three_gates_on_one_fresh_cache_one_killed_mid_build(tmp_path):
    env = {**os.environ, "CRNN_CACHE_DIR": str(tmp_path / "cache")}
    cmd = [sys.executable, "-m", "crnn_conformance.harness.cli", "gate", "-q", "--layers",
           "dot16,linear,conv"]
    procs = [subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(3)]
    build = tmp_path / "cache" / "build"
    deadline, victim = time.time() + 300, None
    while time.time() < deadline and victim is None:
        tmps = list(build.glob(".tmp-*/obj/*.o")) if build.exists() else []
        if tmps:                                             # a build is under way
            pid = int(tmps[0].parent.parent.name.split("-")[-2])
            victim = next((p for p in procs if p.pid == pid), None)
        time.sleep(0.05)
    assert victim is not None, "no build was seen"
    victim.kill()
    for p in procs:
        out, err = p.communicate(timeout=600)
        if p is not victim:
            assert p.returncode == 0, (p.returncode, out[-2000:], err[-2000:])
    r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert not list(build.glob(".tmp-*")), list(build.iterdir())
