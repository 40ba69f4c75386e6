"""The worker's replay of a batch's repeat runs (harness/sandbox/replay.py, replay.c): the gate reports
exactly what it reports without it (CRNN_NO_REPLAY=1), for a good port and for a port that
breaks a rule only in a later run of the batch, where the replay meets it first; and the
replay refuses what it cannot repeat faithfully."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from crnn_conformance.harness.sandbox import guard, replay

from testports import build_port, gate  # noqa: E402

LATE = "-DTP_LATE=3"          # the mistake happens only in the run at 3 threads
MISTAKES = ["-DTP_OOB_Y=1", "-DTP_OOB_Y=-1", "-DTP_OOB_DB=1", "-DTP_MODIFY_B", "-DTP_NAN",
            "-DTP_UNWRITTEN", "-DTP_ERRCODE", "-DTP_BACKWARD_ERR", "-DTP_PRINT_BYTES=100",
            "-DTP_FTZ_ON_TRIGGER", "-DTP_SEGV", "-DTP_ABORT", "-DTP_MODIFY_W=3"]


def _records(path: Path) -> list[dict]:
    doc = json.loads(path.read_text())
    return [{k: v for k, v in r.items() if k != "seconds"} for r in doc["tensors"]]


def _both(tmp_path, *args):
    """The gate with and without the replay -> [(exit code, records, failure lines)] x 2."""
    out = []
    for env in ({}, {"CRNN_NO_REPLAY": "1"}):
        d = tmp_path / ("plain" if env else "replay")
        r = gate(*args, "-q", "--json", str(d / "r.json"), env=env)
        lines = [l for l in r.stdout.splitlines() if l.startswith(("FAIL ", "ERROR", "  "))]
        recs = _records(d / "r.json") if (d / "r.json").exists() else None
        out.append((r.returncode, recs, lines, r.stderr))
    return out


@pytest.mark.parametrize("mistake", MISTAKES)
def test_a_mistake_in_a_later_run_is_reported_as_without_the_replay(tmp_path, mistake):
    port = build_port(tmp_path, mistake, LATE)
    (code, recs, lines, err), (code0, recs0, lines0, err0) = _both(
        tmp_path, "--port", str(port), "--layers", "linear", "--case", "T16_I37_O37")
    assert code == code0 and recs == recs0 and lines == lines0, (lines, lines0, err, err0)
    failing = [r for r in recs or [] if not r["passed"]]
    if mistake != "-DTP_PRINT_BYTES=100":       # printing is attached, not a failure
        assert code != 0 and (failing or code == 2), (code, lines)
        if failing:                             # the late run is the one that failed
            assert {r["threads"] for r in failing} == {3}, failing


def test_a_good_port_and_the_bundled_one_give_the_same_records_either_way(tmp_path):
    port = build_port(tmp_path)
    (code, recs, _, _), (code0, recs0, _, _) = _both(tmp_path / "tp", "--port", str(port),
                                                     "--layers", "linear")
    assert code == code0 == 0 and recs == recs0 and recs
    # train3: copies between buffers and crnn_model_sizes; clip and adamw: `many` cases
    (code, recs, _, _), (code0, recs0, _, _) = _both(tmp_path / "bundled", "--layers",
                                                     "clip,adamw,train3")
    assert code == code0 == 0 and recs == recs0 and len(recs) > 100


def _arena_with(*arrays):
    arena = guard.Arena()
    guard.activate(arena)
    return arena, [arena.private(f"a{i}", a) for i, a in enumerate(arrays)]


def test_a_tape_refuses_a_pointer_outside_the_runs_buffers():
    arena, (a,) = _arena_with(np.ones(4, np.float32))
    try:
        out = guard.output(1, np.float32)
        tape = replay.Tape()
        temp = np.ones(4, np.float32)              # not a buffer of the run
        args = (guard.address(a), temp.ctypes.data, 4, guard.address(out))
        tape.call(arena, "crnn_dot16", args, arena.before("crnn_dot16", args))
        assert not tape.usable and "outside" in tape.why
        tape = replay.Tape()
        args = (guard.address(a), guard.address(a), 4, guard.address(out))
        tape.call(arena, "crnn_dot16", args, arena.before("crnn_dot16", args))
        tape.call(arena, "crnn_get_threads", (), [])
        assert not tape.usable and "not replayed" in tape.why
    finally:
        guard.activate(None)
        arena.release()


def test_a_copy_between_buffers_is_recorded_and_one_outside_refuses():
    arena, (a, b) = _arena_with(np.ones(4, np.float32), np.zeros(4, np.float32))
    try:
        dst = guard.inout(np.zeros(4, np.float32))
        tape = replay.Tape()
        guard.assign(dst, a)                       # not recording: a plain copy
        assert not tape.ops
        arena.tape = tape
        guard.assign(dst, b)
        assert tape.usable and tape.ops[0][0] == 1 and dst.tolist() == [0.0] * 4
        guard.assign(dst, np.ones(4, np.float32))  # from a temporary
        assert not tape.usable
    finally:
        arena.tape = None
        guard.activate(None)
        arena.release()
