"""harness/records.py: a record is built whole (fixture, repro, seconds, output given to
record()), and what belongs to a port run is given out by of_run() as new records."""
from __future__ import annotations

from crnn_conformance.harness.compare import Comparison
from crnn_conformance.harness.records import GateOptions, failure, of_run, record


def _ok(note=""):
    return Comparison(0.25, 0.0, 0, 4, True, note=note)


def test_record_is_built_with_its_fixture_seconds_output_and_repro():
    opts = GateOptions()
    r = record(opts, "linear", "c1", "y", "exact", "scalar", 1, _ok(), fixture="linear",
               seconds=0.5, output="hello", repro="never shown")
    assert (r.fixture, r.seconds, r.output, r.repro) == ("linear", 0.5, "hello", "")
    bad = failure(opts, "linear", "c1", "exact", "avx2", 3, "crashed", fixture="linear",
                  repro="crnn-conformance gate --layers linear")
    assert (bad.fixture, bad.repro, bad.passed) == ("linear", "crnn-conformance gate --layers linear",
                                                   False)
    own = failure(opts, "linear", "c1", "exact", "avx2", 3, "crashed")
    assert own.repro.endswith("--tiers exact --runs avx2:3") and own.fixture == ""


def test_of_run_shares_seconds_and_puts_the_output_on_the_first_record_only():
    opts = GateOptions()
    made = [record(opts, "linear", "c1", t, "exact", "scalar", 1, _ok(), fixture="linear")
            for t in ("y", "dx", "dw")]
    run = of_run(made, 3.0, "printed")
    assert [r.seconds for r in run] == [1.0, 1.0, 1.0]
    assert [r.output for r in run] == ["printed", "", ""]
    assert [r.seconds for r in made] == [0.0] * 3 and all(r.output == "" for r in made)
    assert "output" in run[0].to_dict() and "output" not in run[1].to_dict()
    assert [r.output for r in of_run(made, 3.0)] == ["", "", ""]
    assert of_run([], 1.0, "printed") == []
