"""The gate's side of the worker (harness/executor.py): batches queued to one worker, answered
run by run, and what happens to the queue when the worker dies."""
from __future__ import annotations

import time

from crnn_conformance.generators.h5io import read_fixture
from crnn_conformance.harness.executor import Executor
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
