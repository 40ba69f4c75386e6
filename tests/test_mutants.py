"""The mutant catalogue (docs/mutants.md): every mutant is killed by exactly the tiers the doc
names; the catalogue, the patches and the doc agree; every patch applies to the shipped
sources, which hold no mutant code; `crnn-conformance mutants` prints the kill table and
exits 0 / 1 / 2.

Gating every mutant takes minutes, so only FAST (one mutant per kind of catch: exact,
float64 + pytorch, identity) runs by default; the rest are marked slow (pytest --slow, and
.ci/run runs them)."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from crnn_conformance.ctypes_kernels.build import MUTANT_FLAGS, BuildError, build
from crnn_conformance.harness import mutants as M
from crnn_conformance.harness.mutants import patches

ROOT = Path(__file__).resolve().parent.parent
FAST = ["dot8", "lstm_no_dc_carry", "vec_tail_zero_pad"]
DOT_LAYERS = {"dot16", "linear", "conv", "lstm", "step", "clip", "train3"}


def doc_table() -> dict[str, tuple]:
    """mutant -> expected tiers, from the catalogue table of docs/mutants.md."""
    rows = {}
    for line in (ROOT / "docs" / "mutants.md").read_text().splitlines():
        m = re.match(r"\|\s*`(\w+)`\s*\|\s*([a-z0-9, ]+?)\s*\|", line)
        if m:
            rows[m.group(1)] = tuple(t.strip() for t in m.group(2).split(","))
    return rows


def test_doc_names_every_mutant_with_its_tiers():
    assert doc_table() == {m.name: m.expect for m in M.CATALOGUE}
    assert len(M.CATALOGUE) >= 15


# ---- the patches ------------------------------------------------------------------------------

PATCH_MUTANTS = [m.name for m in M.CATALOGUE if m.kind == "patch"]


def test_catalogue_and_patches_are_one_to_one():
    """Every patch mutant has exactly one patches/<name>.diff, no .diff belongs to no mutant,
    and the flag mutants are the build's MUTANT_FLAGS, without a patch."""
    assert sorted(PATCH_MUTANTS) == patches.patch_names()
    flags = [m.name for m in M.CATALOGUE if m.kind == "flags"]
    assert sorted(flags) == sorted(MUTANT_FLAGS) == ["contract_fast"]
    assert [p.name for p in patches.PATCHES.iterdir() if p.suffix != ".diff"] == []


def shipped_copy(tmp_path) -> Path:
    """A copy of what the build compiles, laid out as in ctypes_kernels/."""
    root = tmp_path / "tree"
    shutil.copytree(ROOT / "ctypes_kernels" / "src", root / "src")
    shutil.copy(ROOT / "ctypes_kernels" / "crnn_port.h", root / "crnn_port.h")
    return root


@pytest.mark.parametrize("name", PATCH_MUTANTS)
def test_every_patch_applies_to_the_shipped_sources(name, tmp_path):
    root = shipped_copy(tmp_path)
    before = {str(p.relative_to(root)): p.read_text() for p in root.rglob("*") if p.is_file()}
    changed = patches.apply(name, root)
    assert changed and all(rel.startswith("src/") for rel in changed), changed
    for rel in changed:       # each file it names is changed, created or deleted
        after = (root / rel).read_text() if (root / rel).exists() else None
        assert before.get(rel) != after, rel


def test_a_patch_whose_context_changed_names_mutant_file_and_hunk(tmp_path):
    root = shipped_copy(tmp_path)
    name = "pool_ties_last"
    fp = patches.parse(name, patches.read_patch(name))[0]
    h = fp.hunks[1]
    src = root / fp.path
    lines = src.read_text().split("\n")
    at = h.old_start - 1              # hunk 2's first line, a context line, in the shipped file
    assert lines[at] == h.old[0]
    lines[at] += "   /* edited */"
    src.write_text("\n".join(lines))
    with pytest.raises(patches.MutantPatchError) as e:
        patches.apply(name, root)
    msg = str(e.value)
    assert msg.startswith(f"mutant {name}: hunk 2 of {fp.path} does not apply: line {at + 1} is "), msg
    assert repr(h.old[0]) in msg and "/* edited */" in msg
    # nothing was written: hunk 1, which applies, is not in the file either
    assert src.read_text() == "\n".join(lines)


def test_an_ambiguous_or_malformed_patch_is_an_error(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "f.c").write_text("a\nb\nx\na\nb\n")
    diff = ("diff --git a/ctypes_kernels/src/f.c b/ctypes_kernels/src/f.c\n"
            "--- a/ctypes_kernels/src/f.c\n+++ b/ctypes_kernels/src/f.c\n"
            "@@ -9,2 +9,2 @@\n a\n-b\n+c\n")
    with pytest.raises(patches.MutantPatchError, match=r"mutant m: hunk 1 of src/f.c does not "
                       r"apply: its old text occurs 2 times \(lines 1, 4\)"):
        patches.apply("m", tmp_path, diff)
    patches.apply("m", tmp_path, diff.replace("-9,2 +9,2", "-4,2 +4,2"))   # at the stated line
    assert (tmp_path / "src" / "f.c").read_text() == "a\nb\nx\na\nc\n"
    with pytest.raises(patches.MutantPatchError, match="paths must be a/ctypes_kernels/"):
        patches.apply("m", tmp_path, diff.replace("a/ctypes_kernels/src/f.c", "a/src/f.c"))
    with pytest.raises(patches.MutantPatchError, match="changes no file"):
        patches.apply("m", tmp_path, "")


def test_the_shipped_sources_hold_no_mutant_code():
    """The mutants live in patches/ only: no CRNN_MUTANT switch and no mutant kernel in any
    file under ctypes_kernels/."""
    hits = [f"{p.relative_to(ROOT)}:{n}" for p in sorted((ROOT / "ctypes_kernels").rglob("*"))
            if p.is_file() and p.suffix in (".c", ".h")
            for n, line in enumerate(p.read_text(errors="replace").splitlines(), 1)
            if "CRNN_MUTANT" in line or "crnn_mutant" in line]
    assert hits == []


def test_normal_build_is_no_mutant_and_a_typo_does_not_build():
    assert M.mutant_marker(build()) is None
    assert M.mutant_marker(build(mutant="dot8")) == "dot8"
    with pytest.raises(BuildError, match=r"mutant nosuch_mutant: its patch \S*nosuch_mutant.diff "
                       "is missing"):
        build(mutant="nosuch_mutant")


def test_plans():
    assert M.plan(M.BY_NAME["dot8"])["tiers"] == M.BASE_TIERS
    assert M.plan(M.BY_NAME["dot8"])["threads"] == (1,)
    assert M.plan(M.BY_NAME["thread_split"])["threads"] == (1, 2, 3, 7)
    assert "identity" in M.plan(M.BY_NAME["avx2_tail_drop"])["tiers"]
    assert M.plan(M.BY_NAME["dot8"], full=True)["threads"] == (1, 2, 3, 7)
    for m in M.CATALOGUE:   # a mistake only the identity tier can see is gated with it
        assert ("identity" in m.expect) == bool(m.threads), m.name


_KILLS: dict[str, M.Kill] = {}


def kill(name) -> M.Kill:
    if name not in _KILLS:
        _KILLS[name] = M.run_mutant(name)
    return _KILLS[name]


@pytest.mark.parametrize("name", [pytest.param(m.name, marks=() if m.name in FAST else
                                               pytest.mark.slow) for m in M.CATALOGUE])
def test_mutant_is_killed_by_the_documented_tiers(name):
    k = kill(name)
    if k.skipped:
        pytest.skip(k.skipped)
    assert k.error is None, k.error
    assert k.killed, f"{name} survived"
    assert k.tiers_failed == doc_table()[name], (k.tiers_failed, k.first)
    assert k.caught_by == next(t for t in M.TOLERANT_FIRST if t in k.tiers_failed)
    assert k.first and k.first["tier"] == k.caught_by


def test_dot_mistake_reaches_every_layer_with_dots():
    """dot8 changes every dot: every layer that sums anything fails, so no product bypasses
    the mutant hook (a new kernel entry point that did would show here)."""
    assert DOT_LAYERS <= set(kill("dot8").layers_failed)


def test_clean_port_margin():
    """The bundled port uses at most 0.7 of every float64/pytorch allowance, or says why."""
    from crnn_conformance.harness.runner import GateOptions, run_gate
    r = run_gate(GateOptions(tiers=("float64", "pytorch"), threads=(1,)))
    assert r.passed
    assert all(e["reason"] for e in M.margin_exceptions(r.records)), M.margin_exceptions(r.records)


# ---- the command ------------------------------------------------------------------------------

def mutants_cli(*args, **kw):
    return subprocess.run([sys.executable, "-m", "crnn_conformance.harness.cli", "mutants", *args], cwd=ROOT,
                          capture_output=True, text=True, **kw)


def test_command_prints_the_kill_table(tmp_path):
    r = mutants_cli("--only", "dot8", "--only", "lstm_no_dc_carry", "--skip-clean",
                    "--jobs", "2", "--json", str(tmp_path / "k.json"))
    assert r.returncode == 0, r.stdout + r.stderr
    rows = {l.split()[0]: l for l in r.stdout.splitlines() if l.split()[:1] in (["dot8"],
                                                                                ["lstm_no_dc_carry"])}
    assert " KILLED " in rows["dot8"] and "exact dot16/order_n0_100/dot" in rows["dot8"]
    assert " KILLED " in rows["lstm_no_dc_carry"] and "pytorch lstm/" in rows["lstm_no_dc_carry"]
    assert "2 of 2 mutants killed, 2 by exactly the expected tiers" in r.stdout
    doc = json.loads((tmp_path / "k.json").read_text())
    assert doc["passed"] is True and doc["clean"] is None
    assert [k["name"] for k in doc["mutants"]] == ["dot8", "lstm_no_dc_carry"]
    assert doc["mutants"][1]["tiers_failed"] == ["exact", "float64", "pytorch"]


def test_command_exits_1_when_a_mutant_survives(tmp_path):
    """Without the fixtures that hold signed-zero lanes (dot16_zeros.h5 and the edge cases,
    docs/edge-cases.md) the zero-padded tail survives."""
    fx = tmp_path / "fixtures"
    fx.mkdir()
    signed_zero_lanes = {"dot16_zeros", "dot16_edges", "linear_edges", "conv_edges", "lstm_edges",
                         "step_edges", "clip_edges", "adamw_edges"}
    for f in (ROOT / "fixtures").glob("*.h5"):
        if f.stem not in signed_zero_lanes:
            os.symlink(f, fx / f.name)
    r = mutants_cli("--only", "vec_tail_zero_pad", "--skip-clean", "--fixtures", str(fx))
    assert r.returncode == 1, r.stdout + r.stderr
    if " skipped " in r.stdout:
        pytest.skip("no vector ISA path on this CPU")
    assert re.search(r"^vec_tail_zero_pad\s+SURVIVED", r.stdout, re.M), r.stdout
    assert "vec_tail_zero_pad: SURVIVED every tier" in r.stdout


def test_command_exits_1_when_the_tiers_differ(monkeypatch, capsys):
    """A kill by other tiers than the catalogue names is not a pass (in-process, one job)."""
    from click.testing import CliRunner

    from crnn_conformance.harness.cli import main
    wrong = M.Mutant("dot8", "dot16 with 8 lanes", ("exact", "float64"))
    monkeypatch.setitem(M.BY_NAME, "dot8", wrong)
    r = CliRunner().invoke(main, ["mutants", "--only", "dot8", "--skip-clean", "--jobs", "1"])
    assert r.exit_code == 1, r.output
    assert "dot8: killed, but it survived the float64 tier it should fail" in r.output


def test_command_cannot_run():
    r = mutants_cli("--only", "nosuch")
    assert r.returncode == 2 and "unknown mutant(s) nosuch" in r.stderr
    assert "Traceback" not in r.stderr
    r = mutants_cli("--fixtures", "/nonexistent/fixtures", "--only", "dot8")
    assert r.returncode == 2 and r.stderr.startswith("crnn-conformance: cannot run:"), r.stderr


def test_command_lists_the_catalogue():
    r = mutants_cli("--list")
    assert r.returncode == 0
    assert [l.split()[0] for l in r.stdout.splitlines()] == [m.name for m in M.CATALOGUE]
