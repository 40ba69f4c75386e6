"""`crnn-conformance fuzz` (docs/fuzz.md): it passes the bundled port, finds a mutant, shrinks
the case, writes it as a fixture the gate runs, replays it from its database first, is
deterministic for a seed, reports a crash as a finding, and refuses bad options with exit 2.
The slow tests are the evidence of docs/mutants.md: `fuzz --seconds 60` alone kills every edge
mutant, and a longer fuzz of the bundled port finds nothing."""
from __future__ import annotations

import re
import subprocess
import sys
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from crnn_conformance.ctypes_kernels.build import build
from crnn_conformance.generators import exact
from crnn_conformance.generators.h5io import read_fixture
from crnn_conformance.harness import fuzz as F
from crnn_conformance.harness import mutants as M
from crnn_conformance.harness.fuzz import engine, strategies, values

from testports import build_port  # noqa: E402

EDGE_MUTANTS = [m.name for m in M.CATALOGUE[M.CATALOGUE.index(M.BY_NAME["ctc_libm"]):]]


def cli(*args, **kw):
    return subprocess.run([sys.executable, "-m", "crnn_conformance.harness.cli", *args],
                          capture_output=True, text=True, **kw)


def test_bundled_port_passes_a_short_fuzz(tmp_path):
    r = cli("fuzz", "--seconds", "4", "--layers", "dot16,clip", "--seed", "3", "--no-database",
            "--out", str(tmp_path / "out"))
    assert r.returncode == 0, r.stdout + r.stderr
    lines = {l.split()[1]: l for l in r.stdout.splitlines() if l.startswith("fuzz ")}
    assert set(lines) == {"dot16", "clip"}
    assert all(int(l.split()[2]) > 0 and "no failure" in l for l in lines.values())
    assert r.stdout.splitlines()[-1].startswith("PASS: no failure in ")
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").glob("*.h5"))


def test_a_mutant_is_found_shrunk_and_written_as_a_fixture(tmp_path):
    port = build(mutant="pool_maxps")
    out = tmp_path / "found"
    r = cli("fuzz", "--port", str(port), "--layers", "conv", "--seconds", "30", "--seed", "1",
            "--jobs", "1",
            "--no-database", "--out", str(out))
    assert r.returncode == 1, r.stdout + r.stderr
    assert re.search(r"^FOUND conv after [\d.]+ s", r.stdout, re.M), r.stdout
    assert re.search(r"^FAIL conv/fuzz_\w+/\w+ tier=exact isa=\w+ threads=\d+ ", r.stdout, re.M)
    assert "__REPRO: crnn-conformance gate --port" in r.stdout and f"--fixtures {out}" in r.stdout
    files = list(out.glob("fuzz-conv-*.h5"))
    assert len(files) == 1
    fx = read_fixture(files[0])                         # checksummed, the fixtures format
    assert fx.attrs["layer"] == "conv" and len(fx.cases) == 1
    c = fx.cases[0]
    assert c.inputs["dPooled"].size <= 4 and c.params["Out"] == 1    # shrunk to a window or so
    assert cli("gate", "--port", str(port), "--fixtures", str(out), "--layers", "conv",
               "-q").returncode == 1
    assert cli("gate", "--fixtures", str(out), "--layers", "conv", "-q").returncode == 0


LAYERS = strategies.available()


def decoded(layer, data: bytes):
    return strategies.module(layer).decode(values.Reader(data))


def key(layer, case) -> str:
    return engine.inputs_key(layer, *case)


def random_bytes(layer, rng, first=None) -> bytes:
    data = bytearray(rng.integers(0, 256, strategies.module(layer).SIZE, dtype=np.uint8))
    if first is not None:
        data[0] = first
    return bytes(data)


def test_a_case_is_one_fixed_size_byte_string():
    """Each layer's strategy draws one choice (Hypothesis charges per choice), a byte string
    of the SIZE its decoder reads at most."""
    rng = np.random.default_rng(0)
    for layer in LAYERS:
        m = strategies.module(layer)
        choices = []

        @settings(database=None, max_examples=5, phases=[Phase.generate],
                  suppress_health_check=list(HealthCheck))
        @given(st.data())
        def draw(data):
            data.draw(m.cases())
            choices.append([type(c) for c in data.conjecture_data.choices])
        draw()
        assert choices and all(c == [bytes] for c in choices), (layer, choices)
        for data in [bytes([255]) * m.SIZE] + [random_bytes(layer, rng) for _ in range(200)]:
            r = values.Reader(data)
            m.decode(r)
            assert r.at <= m.SIZE, (layer, r.at)


def test_zero_bytes_decode_to_the_simplest_case_of_each_layer():
    """Byte 0 is every decision's simplest option, and past the end every byte reads 0."""
    for layer in LAYERS:
        assert key(layer, decoded(layer, b"")) == key(layer, decoded(layer, bytes(300))), layer
    params, inputs = decoded("conv", b"")
    assert {k: params[k] for k in ("H", "W", "C", "Out", "kh", "kw", "padH", "padW", "poolH",
                                   "poolW", "dx")} == dict(H=1, W=1, C=1, Out=1, kh=1, kw=1,
                                                           padH=0, padW=0, poolH=1, poolW=1,
                                                           dx=False)
    assert all(not v.any() for v in inputs.values())
    params, inputs = decoded("linear", b"")
    assert params == {"T": 1, "I": 1, "O": 1} and all(not v.any() for v in inputs.values())
    params, inputs = decoded("lstm", b"")
    assert params == {"T": 1, "I": 1, "H": 1} and all(not v.any() for v in inputs.values())
    assert decoded("dot16", b"")[1]["a"].size == 0
    params, inputs = decoded("ctc", b"")
    assert params == {"T": 0, "K": 1, "L": 0, "scale": 1.0} and inputs["logits"].size == 0
    params, inputs = decoded("clip", b"")
    assert params["shapes"] == [[0]] and inputs["enabled"][0] == 1
    params, inputs = decoded("adamw", b"")
    assert params == {"steps": 1, "shape": [1]} and not inputs["p"].any()
    assert inputs["hparams"].tolist() == list(strategies.module("adamw").DEFAULTS)
    for layer in ("step", "train3"):
        params, inputs = decoded(layer, b"")
        c = params["config"]
        assert (c["classes"], c["hidden"], c["input_height"]) == (2, 1, 4), layer
        assert c["blocks"] == [{"out": 1, "kh": 1, "kw": 1, "padH": 0, "padW": 0, "poolH": 1,
                                "poolW": 1}], layer
        images = [v for k, v in inputs.items() if k.endswith("images")]
        assert len(images) == 1 and not images[0].any(), layer
    assert decoded("step", b"")[0]["B"] == 1 and decoded("train3", b"")[0]["steps"] == 1


def test_the_same_bytes_decode_to_the_same_case():
    """Decoding is deterministic: no state carried from one case to the next (the arrays'
    generator is reset from each recipe's seed)."""
    rng = np.random.default_rng(1)
    for layer in LAYERS:
        datas = [random_bytes(layer, rng) for _ in range(20)]
        first = [key(layer, decoded(layer, d)) for d in datas]
        assert first == [key(layer, decoded(layer, d)) for d in reversed(datas)][::-1], layer
        assert len(set(first)) > 15, layer


def test_reading_past_the_end_gives_zeros():
    r = values.Reader(bytes([7, 200]))
    assert [r.byte(), r.u16(), r.u16(), r.take(3), r.at] == [7, 200 << 8, 0, bytes(3), 8]
    rng = np.random.default_rng(2)
    for layer in LAYERS:
        data = random_bytes(layer, rng)[:20]
        assert key(layer, decoded(layer, data)) == key(layer, decoded(layer, data + bytes(300)))


def test_every_family_of_every_layer_is_reached_and_gives_a_valid_case(monkeypatch):
    """A family's byte makes the decoder call that family, and the spec runs on its cases."""
    rng = np.random.default_rng(3)
    for layer in LAYERS:
        m = strategies.module(layer)
        family = getattr(m, "FAMILY", None)
        for name in family.options if family else [None]:
            seen = []
            if name:
                real = m.FAMILIES[name]
                monkeypatch.setitem(m.FAMILIES, name,
                                    lambda *a, real=real: (seen.append(1), real(*a))[1])
            for _ in range(3):
                calls = len(seen)
                params, inputs = decoded(layer, random_bytes(
                    layer, rng, family.byte_of(name) if name else None))
                assert not name or len(seen) > calls, (layer, name)
                exact.expected(layer, params, inputs)


def every_choice():
    for layer in LAYERS:
        m = strategies.module(layer)
        yield from ((layer, n, c) for n, c in vars(m).items() if isinstance(c, values.Choice))
    yield from (("values", n, c) for n, c in vars(values).items() if isinstance(c, values.Choice))


def test_every_option_of_every_choice_has_a_byte_and_byte_0_is_the_first():
    choices = list(every_choice())
    assert len(choices) > 20
    for where, name, c in choices:
        assert len(c.lut) == 256 and c.lut[0] is c.options[0], (where, name)
        assert len(set(map(repr, c.lut))) == len(set(map(repr, c.options))), (where, name)


def outputs(read, nbytes: int) -> set:
    """Every value read() gives over every string of nbytes bytes."""
    return {read(values.Reader(v.to_bytes(nbytes, "big"))) for v in range(256 ** nbytes)}


def test_every_entry_of_a_table_can_be_drawn():
    """Special values (one byte for tables of up to 80, two beyond) and table indices (two
    bytes) reach every entry, whatever the table's size; 0 is an inactive slot."""
    for m in (1, 13, 80, 81, 691, 3080):
        nbytes = 1 if m <= 256 - values.INACTIVE else 2
        assert outputs(lambda r: values.special(r, m), nbytes) == set(range(m)) | {None}, m
        assert outputs(lambda r: r.index(m), 2) == set(range(m)), m
    for n in (1, 3, 80, 128):
        assert outputs(lambda r: r.below(n), 1) == set(range(n))
        assert outputs(lambda r: r.size(5, 4 + n), 1) == set(range(5, 5 + n))
    with pytest.raises(ValueError):
        values.Reader().size(0, 128)               # a size of one byte has at most 128 values
    assert outputs(lambda r: r.size(256, 1100, wide=True), 2) == set(range(256, 1101))


def test_each_threshold_reaches_the_activations():
    """End to end, the biggest table: a run of sigmoid's and tanh's thresholds starts at any
    of its 3080 entries (family, n, the run flag, x's recipe, the run's length, its first)."""
    lstm = strategies.module("lstm")
    table = lstm.THRESHOLDS
    at = 3 + values.recipe_bytes(lstm.ACT_SPECIALS, 6) + 1
    for i in sorted({0, 1, len(table) - 1} | set(range(0, len(table), 97))):
        first = -(-i * 65536 // len(table))
        data = bytearray(at + 4)
        data[:3] = bytes([lstm.FAMILY.byte_of("activations"), 0, 255])
        data[at:at + 2] = first.to_bytes(2, "big")
        params, inputs = decoded("lstm", bytes(data))
        assert params == {"kind": "activations"}
        assert inputs["x"][:1].tobytes() == np.float32(table[i]).tobytes(), i


def test_an_input_nan_never_meets_a_value_that_overflows():
    """Conv draws NaN inputs (the pool's rules): its values stay below 2^59, so no product
    (below 2^118) nor any dot of them (576 terms at most) reaches infinity, and every NaN
    the port returns is an input's (generators/edge_values.py)."""
    rng = np.random.default_rng(4)
    nans = 0
    for _ in range(400):
        _, inputs = decoded("conv", random_bytes("conv", rng))
        v = np.concatenate([a.ravel() for a in inputs.values()])
        if np.isnan(v).any():
            nans += 1
            assert np.abs(v[np.isfinite(v)]).max(initial=0) < 2.0 ** 59
    assert nans > 20


def test_clip_draws_its_limits_at_the_specs_norm():
    """clip's strategy computes the norm its limits are drawn at in one call (all tensors
    zero-padded as rows of one matrix): the spec's norm, bit for bit, overflow included."""
    from crnn_conformance.generators.spec import clip as spec
    clip = strategies.module("clip")
    rng = np.random.default_rng(5)
    infinite = 0
    for _ in range(500):
        r = values.Reader(random_bytes("clip", rng))
        ts = clip.tensors(r, clip.COUNT.read(r))
        with np.errstate(over="ignore"):
            want = spec.global_norm(ts)
        assert np.float64(clip.global_norm(ts)).tobytes() == np.float64(want).tobytes()
        infinite += np.isinf(want)
    assert 10 < infinite < 400


def test_step_lays_out_the_weights_as_the_model_does():
    """The step strategy's own parameter specs (cheaper than generators/model's) name the same
    tensors with the same shapes and decay flags, and its initialisation keeps model.init_params'
    ranges and zero padding columns."""
    from crnn_conformance.generators import model
    step = strategies.module("step")
    rng = np.random.default_rng(6)
    for _ in range(60):
        r = values.Reader(random_bytes("step", rng, first=0))
        r.byte()
        c = step.config(r)
        want = model.param_specs(c)
        specs = step.specs_of(c)
        assert [(s.name, s.shape, s.decay) for s in specs] == \
            [(s.name, tuple(s.shape), s.decay) for s in want]
        p = step.weights(values.Reader(bytes([0, 9, 0])), specs)     # seed 9, none replaced
        refs = [model.init_params(c, np.random.default_rng(k)) for k in range(20)]
        assert p.flat.size == sum(v.size for v in refs[0].values())
        for s in specs:
            widest = max(np.abs(ref[s.name]).max() for ref in refs)
            assert 0.8 * s.bound <= widest <= s.bound, s.name
            assert np.abs(p[s.name]).max() <= s.bound, s.name
            assert np.array_equal(p[s.name] == 0, refs[0][s.name] == 0), s.name


def names_of_a_chunk(opts, layer, seed):
    fz = engine.Fuzzer(opts, [layer])
    seen = []
    real = fz.check
    fz.check = lambda la, p, i: (seen.append(engine.case_name(la, p, i)), real(la, p, i))[1]
    try:
        assert fz.chunk(layer, 15, seed, time.monotonic() + 60) is None
    finally:
        fz.close()
    return seen


@pytest.mark.parametrize("name", ["thread_split", "avx2_tail_drop", "avx2_tail_overread",
                                  "vec_tail_zero_pad"])
def test_a_port_whose_bits_depend_on_the_path_or_the_threads_is_a_finding(tmp_path, name, isas):
    """The identity-only mutants (their base run passes): the fuzzer's per-case identity check,
    with the worker's "same as the first run" answers and the all-golden short cut, still sees a
    path or a thread count that differs (thread_split needs a dot of 256 terms or more)."""
    if name.startswith("avx2") and "avx2" not in isas:
        pytest.skip("no AVX2 on this CPU")
    r = cli("fuzz", "--port", str(build(mutant=name)), "--layers", "dot16", "--seconds", "30",
            "--seed", "16", "--no-database", "--first", "--out", str(tmp_path))
    assert r.returncode == 1, r.stdout + r.stderr
    assert re.search(r"^FAIL dot16/fuzz_\w+/dot tier=identity isa=\w+ threads=\d+ .*"
                     r"differs from \w+ x 1 thread", r.stdout, re.M), r.stdout


def test_a_failing_meanwhile_does_not_leave_the_batch_answer_unread():
    """prefetch reads the worker's answer even when the work done meanwhile (the spec) raises,
    so the next request gets its own answer, not the stale one."""
    from crnn_conformance.generators.h5io import Case
    from crnn_conformance.harness import runner
    from crnn_conformance.harness.sandbox.executor import Executor
    a = np.arange(1, 21, dtype=np.float32)
    mk = lambda name, b: Case(name, {"count": 1}, {"a": a, "b": b,           # noqa: E731
                                                    "lengths": np.array([20], np.int64)})
    ex = Executor(runner._bundled(), ["dot16"], 30)
    try:
        def boom():
            raise ValueError("spec failed")
        with pytest.raises(ValueError):
            ex.prefetch("dot16", "<t>", "one", [("scalar", 1)],
                        case=mk("one", np.ones(20, np.float32)), meanwhile=boom)
        ex.prefetch("dot16", "<t>", "two", [("scalar", 1), ("scalar", 2)],
                    case=mk("two", np.full(20, 2, np.float32)))
        assert [k for k, _ in ex.prefetched()] == ["ok", "ok"]
        assert ex.run("dot16", "<t>", "two", "scalar", 1)["dot"].tolist() == [420.0]
    finally:
        ex.close()


def test_a_seed_makes_the_cases_deterministic(tmp_path):
    opts = engine.FuzzOptions(out=tmp_path, database=False, threads=(1,))
    a = names_of_a_chunk(opts, "linear", 5)
    assert a == names_of_a_chunk(opts, "linear", 5) and len(a) == 15
    assert a != names_of_a_chunk(opts, "linear", 6)


def test_found_failures_replay_first(tmp_path, monkeypatch):
    monkeypatch.setattr(engine, "database_dir", lambda: tmp_path / "db")
    opts = engine.FuzzOptions(port=str(build(mutant="clip_ge")), out=tmp_path, threads=(1,))
    fz = engine.Fuzzer(opts, ["clip"])
    try:
        first = next(f for f in (fz.chunk("clip", 150, s, time.monotonic() + 60) for s in range(5))
                     if f is not None)
        assert first.cases_before >= 1
        before = fz.stats["clip"].cases
        again = fz.chunk("clip", 150, 12345, time.monotonic() + 60)
    finally:
        fz.close()
    assert again is not None and again.cases_before == before + 1   # the saved one, run first
    assert again.case.name == first.case.name


def test_a_crash_is_a_finding(tmp_path, monkeypatch):
    """A port that segfaults on one shape: the worker dies, the case fails as a crash, the
    fuzzer goes on (shrinking reruns it) and reports it like any finding."""
    port = build_port(tmp_path, "-DTP_SEGV")
    rng = np.random.default_rng(0)
    u = lambda *s: rng.uniform(-1, 1, s).astype(np.float32)
    drawn = ({"T": 16, "I": 37, "O": 37},
             {"x": u(16, 37), "W": u(37, 37), "b": u(37), "dY": u(16, 37)})

    class Fixed:
        @staticmethod
        def cases():
            return st.just(drawn)
    monkeypatch.setattr(strategies, "module", lambda layer: Fixed)
    opts = engine.FuzzOptions(port=str(port), out=tmp_path, database=False, isas=["scalar"],
                              threads=(1,), timeout=20)
    fz = engine.Fuzzer(opts, ["linear"])
    try:
        f = fz.chunk("linear", 3, 0, time.monotonic() + 60)
    finally:
        fz.close()
    assert f is not None
    assert any("crashed" in r.note and "SIGSEGV" in r.note for r in f.records), \
        [r.note for r in f.records]


def test_bad_options_exit_2_without_a_traceback(tmp_path):
    for args, msg in ((["--layers", "nosuch"], "unknown layer nosuch"),
                      (["--port", str(tmp_path / "missing.so")], "port library not found"),
                      (["--seconds", "0"], "--seconds > 0"),
                      (["--threads", "0"], "between 1 and 256"),
                      (["--isa", "mmx"], "unknown ISA mmx")):
        r = cli("fuzz", *args, "--out", str(tmp_path))
        assert r.returncode == 2, (args, r.stdout, r.stderr)
        assert msg in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_jobs_share_the_layers():
    assert F.split(["a", "b", "c", "d", "e"], 2) == [["a", "c", "e"], ["b", "d"]]
    assert F.split(["a"], 3) == [["a"], ["a"], ["a"]]
    assert set(engine.CHUNK) == set(strategies.available())


@pytest.mark.slow
@pytest.mark.parametrize("name", EDGE_MUTANTS)
def test_fuzz_alone_kills_each_edge_mutant_within_60_s(tmp_path, name):
    r = cli("fuzz", "--port", str(build(mutant=name)), "--seconds", "60", "--jobs", "2",
            "--seed", "16", "--no-database", "--first", "--out", str(tmp_path))
    assert r.returncode == 1, r.stdout + r.stderr
    found = [float(m) for m in re.findall(r"FOUND after ([\d.]+) s", r.stdout)]
    assert found and min(found) < 60, r.stdout


@pytest.mark.slow
def test_bundled_port_passes_a_longer_fuzz(tmp_path):
    r = cli("fuzz", "--seconds", "300", "--jobs", "2", "--seed", "1616", "--no-database",
            "--out", str(tmp_path))
    assert r.returncode == 0, r.stdout + r.stderr


def test_the_verdict_counts_every_finding_written(tmp_path):
    """With more processes than layers (`fuzz --layers dot16 --jobs 2`, with or without
    --first: a process that found its case before the other's stop arrived still writes it)
    each process may write a finding of the same layer. The verdict counts the fixture files
    written, the layer's line names its earliest and how many more, and two processes that
    shrank to the same case (one file) count once."""
    from crnn_conformance.harness.fuzz import writer
    from crnn_conformance.harness.records import FIXTURES_DIR
    base = read_fixture(FIXTURES_DIR / "dot16.h5").cases[0]

    def process(name, found_s):
        case = type(base)(f"fuzz_{name}", dict(base.params), dict(base.inputs))
        case.expected = {"exact": base.expected["exact"]}
        f = engine.Finding("dot16", case, [], found_s, 3)
        writer.write(tmp_path, f, 16, None)
        return {"dot16": engine.LayerStats("dot16", cases=10, seconds=2.0, finding=f)}

    parts = [process("aaaa", 2.5), process("bbbb", 1.5), process("bbbb", 1.7)]
    res = F.FuzzResult(F.merge(parts), 3.0, 16, ["scalar"], [1, 8], True, F.written(parts))
    files = sorted(tmp_path.glob("fuzz-dot16-*.h5"))
    lines = F.render(res).splitlines()
    assert len(files) == 2 and lines[-1].startswith(f"FAIL: {len(files)} finding(s) in 30 cases")
    assert lines[0].endswith(f"FOUND after 1.5 s -> {tmp_path / 'fuzz-dot16-bbbb.h5'} "
                             "(+1 more written)"), lines[0]


def test_the_seed_draws_one_more_thread_count(tmp_path):
    """Besides --threads, a run's identity checks use one more thread count drawn by its seed
    (MORE_THREADS): a port that goes wrong at 8 threads only is a finding of a run whose seed
    draws 8, and not of the same run with --no-more-threads."""
    seed = engine.MORE_THREADS.index(8)
    opts = engine.FuzzOptions(seed=seed)
    assert engine.more_threads(opts) == (8,)
    assert engine.more_threads(engine.FuzzOptions(seed=seed, threads=(1, 8))) == ()
    assert engine.more_threads(engine.FuzzOptions(seed=seed, more_threads=False)) == ()
    port = build_port(tmp_path, "-DTP_ULP_AT_THREADS=8")
    args = ["fuzz", "--port", str(port), "--layers", "linear", "--seconds", "20", "--seed",
            str(seed), "--jobs", "1", "--no-database", "--first", "--out", str(tmp_path / "f")]
    r = cli(*args)
    assert r.returncode == 1, r.stdout + r.stderr
    assert re.search(r"^FAIL linear/fuzz_\w+/y tier=identity isa=\w+ threads=8 ", r.stdout, re.M)
    r = cli(*args[:-2], "--out", str(tmp_path / "g"), "--seconds", "4", "--no-more-threads")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "threads 1,2,3,7;" in r.stdout
