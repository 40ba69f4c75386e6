"""The layer table (ctypes_kernels/layer_table.py) is the one description of every layer and
entry point: each registry derived from it says what the table says, and the copies written in
C and JSON (crnn_port.h, results.schema.json) agree with it; the replay's enum and switch
are generated from it."""
from __future__ import annotations

import ast
import dataclasses
import importlib.util
import json
import re
from pathlib import Path

import pytest

from crnn_conformance.ctypes_kernels import abi, layer_table as T

ROOT = Path(__file__).resolve().parents[1]
KINDS = {"int32_t": "I", "int64_t": "L", "uint32_t": "I", "double": "D"}


def _c_text(path: Path) -> str:
    """The C source without comments, whitespace collapsed."""
    text = re.sub(r"/\*.*?\*/", " ", path.read_text(), flags=re.S)
    return " ".join(re.sub(r"//[^\n]*", " ", text).split())


def _header_protos() -> dict:
    text = _c_text(ROOT / "ctypes_kernels" / "crnn_port.h")
    found = re.findall(r"\b((?:u?int32_t|int64_t|double)\s+(crnn_\w+)\s*\(([^)]*)\))\s*;", text)
    return {name: T.parse_proto(proto) for proto, name, _ in found}


def _replay_c() -> Path:
    from crnn_conformance.harness.sandbox import replay
    return Path(replay.__file__).with_name("replay.c")


def test_abi_registries_are_the_tables():
    names = [e.name for e in T.ENTRIES]
    assert list(abi.SIGNATURES) == names
    assert abi.CORE == [e.name for e in T.ENTRIES if e.control]
    for e in T.ENTRIES:
        res, _, args = T.parse_proto(e.proto)
        want = [abi.P if ptr else {"int32_t": abi.i32, "int64_t": abi.i64, "uint32_t": abi.u32,
                                   "double": abi.f64}[t] for t, ptr, _, _ in args]
        assert abi.SIGNATURES[e.name] == ({"int32_t": abi.i32, "uint32_t": abi.u32}[res], want)
        assert abi.ARGS.get(e.name, "").split() == [("*" if p and not c else "") + a
                                                    for _, p, c, a in args]
        assert abi.BUFFERS.get(e.name, "") == e.buffers
    assert abi.LAYER_SYMBOLS == {lay.name: list(lay.entries) for lay in T.LAYERS}


def test_harness_registries_are_the_tables():
    from crnn_conformance.harness import allowance, contract, pyport
    from crnn_conformance.harness.sandbox import replay
    from crnn_conformance.harness import layers as L
    from crnn_conformance.harness.fuzz import engine, strategies
    names = T.layer_names()
    assert list(L.LAYERS) == names and list(allowance.LAYERS) == names
    assert L.available() == names, "every layer in the table needs harness/layers/<name>.py"
    assert strategies.available() == names, "and a fuzz strategy"
    for package in (L, strategies):          # and a module there is a layer of the table
        here = sorted(p.stem for p in Path(package.__file__).parent.glob("[!_]*.py"))
        assert here == sorted(names), f"{package.__name__}: modules {here}"
    for lay in T.LAYERS:
        mod = L.module(lay.name)
        assert mod.LAYER == lay.name
        assert list(mod.FIXTURES) == [f.stem for f in lay.fixtures]
        assert {s: L.tiers_for(mod, s) for s in mod.FIXTURES} == {f.stem: f.tiers
                                                                   for f in lay.fixtures}
        assert allowance.module(lay.name).__name__.endswith(f".allowance.{lay.name}")
        assert (engine.CHUNK[lay.name], engine.AUDIT_EVERY[lay.name]) == (lay.fuzz_chunk,
                                                                          lay.audit_every)
    assert set(engine.CHUNK) == set(engine.AUDIT_EVERY) == set(names)
    assert list(replay.ENTRIES) == [e.name for e in T.ENTRIES if not e.control]
    assert set(contract._base()) == set(replay.ENTRIES), "a contract base call per entry point"
    assert contract.NEGATIVE == {e.name: e.negative for e in T.ENTRIES if e.negative}
    assert contract.ZERO == {e.name: e.zero for e in T.ENTRIES if e.zero}
    assert pyport._CORE_DEFAULTS == set(abi.CORE)


def test_generator_registries_are_the_tables():
    from crnn_conformance.generators import exact, regen
    assert {k: f"{v.__module__}.{v.__name__}" for k, v in exact.EXPECTED.items()} == \
        {lay.name: lay.exact for lay in T.LAYERS}
    stems = {f.stem: (lay.name, f.builder) for lay in T.LAYERS for f in lay.fixtures}
    assert regen.BUILDERS == {s: b for s, (_, b) in stems.items()}
    for stem, (layer, builder) in stems.items():
        spec = importlib.util.find_spec(builder)
        assert spec is not None, f"{stem}: no builder module {builder}"
        tree = ast.parse(Path(spec.origin).read_text())     # (no import: some need torch)
        declared = [n.value.value for n in tree.body if isinstance(n, ast.Assign)
                    and any(getattr(t, "id", None) == "LAYER" for t in n.targets)]
        assert declared == [layer], f"{builder} writes a {declared} fixture, not {layer}"


def test_crnn_port_h_declares_the_tables_prototypes():
    header = _header_protos()
    assert list(header) == [e.name for e in T.ENTRIES]
    for e in T.ENTRIES:
        assert header[e.name] == T.parse_proto(e.proto), e.name


def test_replay_entries_enum_and_switch_follow_the_table():
    """The helper's source holds one enum and one switch of the entry points, both generated:
    replay.c itself names no entry point."""
    from crnn_conformance.harness.sandbox import replay
    kernel = [e for e in T.ENTRIES if not e.control]
    own = _c_text(_replay_c())
    assert "crnn_dot16" not in own and "E_DOT16" not in own and "RP_CASES" in own
    text = " ".join(replay.source().split())
    assert text.count("enum { E_") == 1 and text.count("#define RP_CASES") == 1
    enum = re.search(r"enum \{ (E_[^}]*)\}", text).group(1)
    assert [s.strip() for s in enum.split(",")] == \
        [f"E_{e.name[len('crnn_'):].upper()}" for e in kernel] + ["E_COUNT"]
    cases = dict(re.findall(r"case (E_\w+): return (CALL\(\w+\)\([^;]*\));", text))
    assert len(cases) == len(kernel)
    for e in kernel:
        ints = dbls = 0
        actuals = []
        for ctype, ptr, _, _ in T.parse_proto(e.proto)[2]:
            if ctype == "double" and not ptr:
                actuals.append(f"D({dbls})")
                dbls += 1
            else:
                actuals.append(f"P({ints})" if ptr else f"{KINDS[ctype]}({ints})")
                ints += 1
        want = f"CALL({e.name})({', '.join(actuals)})"
        assert cases[f"E_{e.name[5:].upper()}"] == want, e.name


def test_results_schema_names_the_tables_layers():
    schema = json.loads((ROOT / "reports" / "results.schema.json").read_text())
    assert schema["$defs"]["layer"]["enum"] == T.layer_names()


ENTRIES, LAYERS = T.ENTRIES, T.LAYERS


def _broken(monkeypatch, entries=None, layers=None):
    monkeypatch.setattr(T, "ENTRIES", entries or ENTRIES)
    monkeypatch.setattr(T, "LAYERS", layers or LAYERS)
    monkeypatch.setattr(T, "_BY_NAME", {e.name: e for e in T.ENTRIES})
    with pytest.raises(T.TableError) as err:
        T._check()
    return str(err.value)


def test_the_import_check_names_what_is_inconsistent(monkeypatch):
    T._check()   # the shipped table passes
    dot = T.entry("crnn_dot16")
    rest = tuple(e for e in T.ENTRIES if e.name != "crnn_dot16")
    swap = lambda **kw: rest + (dataclasses.replace(dot, **kw),)
    assert "listed twice: crnn_dot16" in _broken(monkeypatch, T.ENTRIES + (dot,))
    assert "role 'in' but is written" in _broken(
        monkeypatch, swap(buffers="a:f32[n] b:f32[n] out:f32[1]"))
    assert "role 'out' but is const" in _broken(
        monkeypatch, swap(buffers="a:f32[n] b:f32[n]:out out:f32[1]:out"))
    assert "are not its pointer arguments" in _broken(
        monkeypatch, swap(buffers="a:f32[n] out:f32[1]:out"))
    assert "buffer a is f64" in _broken(monkeypatch,
                                        swap(buffers="a:f64[n] b:f32[n] out:f32[1]:out"))
    assert "contract size 'm'" in _broken(monkeypatch, swap(negative="m"))
    assert "prototype names crnn_dot8" in _broken(
        monkeypatch, swap(proto=dot.proto.replace("crnn_dot16", "crnn_dot8")))
    lay = dataclasses.replace(T.layer("dot16"), entries=("crnn_dot8",))
    assert "layer dot16: unknown" in _broken(monkeypatch, layers=(lay,) + T.LAYERS[1:])
