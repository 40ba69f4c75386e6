"""The gate's side of the worker (harness/sandbox/executor.py): batches queued to one worker, answered
run by run, and what happens to the queue when the worker dies."""
from __future__ import annotations

import time

from crnn_conformance.generators.h5io import read_fixture
from crnn_conformance.harness.sandbox.executor import Executor
from crnn_conformance.harness.runner import FIXTURES_DIR

LINEAR = FIXTURES_DIR / "linear.h5"
RUNS = [("scalar", 1), ("scalar", 2)]


def _other_case() -> str:
    return next(c.name for c in read_fixture(LINEAR).cases if c.name != "T16_I37_O37")


def test_a_batch_sent_after_the_worker_died_gets_its_own_answers(ports):
    """The port crashes on T16_I37_O37. A batch queued behind it, and one sent once the worker
    is already dead (before the gate read its end), are answered by a new worker: the crash
    is kept as the first run's answer and no answer is filed under the wrong batch."""
    other = _other_case()
    ex = Executor(ports("-DTP_SEGV"), ["linear"], 30)
    try:
        ex.submit("linear", LINEAR, "T16_I37_O37", RUNS)
        ex.submit("linear", LINEAR, other, RUNS)
        deadline = time.monotonic() + 20
        while ex.proc.is_alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not ex.proc.is_alive()
        ex.submit("linear", LINEAR, other, RUNS)         # sent to the dead worker
        ex.collect()
        crashed = ex._batches[("linear", str(LINEAR), "T16_I37_O37")]
        assert crashed[("scalar", 1)][0][0] == "crash"
        assert "SIGSEGV" in crashed[("scalar", 1)][0][1]
        for isa, threads in RUNS:
            out = ex.run("linear", LINEAR, other, isa, threads)
            assert set(out) >= {"y", "dW", "db"}
    finally:
        ex.close()


def test_a_hang_after_held_back_runs_is_that_runs_and_the_runs_before_it_pass(ports):
    """Runs whose outputs equal the first's are held back by the worker and answered
    together (worker._serve_batch). The port hangs only with 2 threads, run after 1, 3 and
    7: the held runs at 3 and 7 keep their passing answers, the hang is the 2-thread run's,
    and the run after it is not answered by this worker (run() redoes it)."""
    ex = Executor(ports("-DTP_HANG_THREADS=2"), ["linear"], 3)
    try:
        runs = [("scalar", n) for n in (1, 3, 7, 2, 4)]
        ex.submit("linear", LINEAR, "T16_I37_O37", runs)
        ex.collect()
        got = ex._batches[("linear", str(LINEAR), "T16_I37_O37")]
        assert [got[r][0][0] for r in runs[:4]] == ["ok", "ok", "ok", "crash"]
        assert ("scalar", 4) not in got
        assert got[("scalar", 2)][0][1].startswith("hang: no answer")
        assert all(got[r][0] is got[runs[0]][0] for r in runs[1:3])   # "the same as the first"
    finally:
        ex.close()


def test_each_run_of_a_batch_has_its_own_timeout(ports):
    """Four runs of 0.8 s each, answered together after 3.2 s, with a timeout of 2 s: no run
    took 2 s, so none is a hang (the worker records each run's start, deadline())."""
    ex = Executor(ports("-DTP_SLEEP_MS=800"), ["linear"], 2)
    try:
        runs = [("scalar", n) for n in (1, 2, 3, 7)]
        t0 = time.monotonic()
        ex.submit("linear", LINEAR, "T16_I37_O37", runs)
        ex.collect()
        assert time.monotonic() - t0 > 3.0
        got = ex._batches[("linear", str(LINEAR), "T16_I37_O37")]
        assert [got[r][0][0] for r in runs] == ["ok"] * 4
        assert all(got[r][2] > 0.7 for r in runs)                # each run's own seconds
    finally:
        ex.close()



def test_a_write_after_the_last_run_returned_fails_that_run(ports):
    """The port's crnn_linear_forward leaves a thread that writes y[0] 50 ms after the call
    returned, on T16_I37_O37. The batch's last run is sealed when it ends and checked
    runner.SETTLE seconds later, while the worker runs the next batch: that run fails naming
    y and the call, with its outputs kept; the first run, and the batch sent behind it (whose
    own check follows), pass."""
    import pytest
    from crnn_conformance.ctypes_kernels import abi
    from crnn_conformance.harness.runner import SETTLE
    other = _other_case()
    ex = Executor(ports("-DTP_LATE_WRITE_MS=50"), ["linear"], 30, settle=SETTLE)
    try:
        ex.submit("linear", LINEAR, "T16_I37_O37", RUNS)
        ex.submit("linear", LINEAR, other, RUNS)
        ex.collect()
        assert set(ex.run("linear", LINEAR, "T16_I37_O37", *RUNS[0])) >= {"y", "dW", "db"}
        with pytest.raises(abi.PortCallError) as e:
            ex.run("linear", LINEAR, "T16_I37_O37", *RUNS[1])
        assert "y changed after crnn_linear_forward returned at [0, 0]" in str(e.value)
        assert "-> 12345.0) (a write after return" in str(e.value)
        assert set(e.value.partial) >= {"y", "dW", "db"}
        for run in RUNS:
            assert set(ex.run("linear", LINEAR, other, *run)) >= {"y", "dW", "db"}
    finally:
        ex.close()


def test_a_write_after_return_outside_the_buffer_or_a_late_fault_fails_the_last_run(ports):
    """The same late thread writing the canary zone before y, or through a null pointer (the
    worker dies while the batch is watched, with nothing else running): the batch's last run
    fails, naming the zone or the crash."""
    import pytest
    from crnn_conformance.ctypes_kernels import abi
    from crnn_conformance.harness.runner import SETTLE
    expect = {"-DTP_LATE_AT=-1": "output y (float32[16, 37]) was written out of bounds after "
                                 "crnn_linear_forward returned: bytes -4..-1 before its start "
                                 "(element -1)",
              "-DTP_LATE_NULL": "after the case's last call returned, the port crashed: killed "
                                "by signal SIGSEGV"}
    for define, message in expect.items():
        ex = Executor(ports("-DTP_LATE_WRITE_MS=20", define), ["linear"], 30, settle=SETTLE)
        try:
            ex.submit("linear", LINEAR, "T16_I37_O37", RUNS)
            ex.collect()
            with pytest.raises(abi.PortCallError) as e:
                ex.run("linear", LINEAR, "T16_I37_O37", *RUNS[-1])
            assert message in str(e.value), (define, str(e.value))
            assert set(ex.run("linear", LINEAR, "T16_I37_O37", *RUNS[0])) >= {"y", "dW", "db"}
        finally:
            ex.close()
