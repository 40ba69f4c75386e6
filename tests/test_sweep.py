"""The operator sweep (harness/mutants/sweep.py, docs/mutants.md "The operator sweep"): its
sites are code tokens of the shipped C, each site's patch applies and changes exactly that
token, files of ISA paths the CPU lacks are left out, and a swept mistake the fixtures reach
is killed while an equivalent one survives."""
from __future__ import annotations

import random
import re
import shutil

import pytest
from click.testing import CliRunner

from crnn_conformance.harness.cli import main
from crnn_conformance.harness.mutants import patches
from crnn_conformance.harness.mutants import sweep as S


@pytest.fixture(scope="module")
def every_site():
    return S.sites()


def test_sites_are_code_tokens_of_every_kind(every_site):
    kinds = {s.old.strip() for s in every_site}
    assert kinds == {"<", "<=", ">", ">=", "==", "!=", "+", "-", "*", "&&", "||", "0", "1"}
    for s in every_site:
        line = (S.KERNELS / s.path).read_text().splitlines()[s.line - 1]
        assert not line.lstrip().startswith(("#", "*", "//", "/*")), s.id
        assert s.col < len(S._code(line)), f"{s.id}: inside a comment"


def test_a_sample_of_patches_applies_and_changes_one_token(every_site, tmp_path):
    """40 sites drawn at random: the patch applies to a copy of the sources (the applier the
    build uses) and the copy differs from the shipped file in that token alone."""
    for s in random.Random(5).sample(every_site, 40):
        root = tmp_path / s.name
        shutil.copytree(S.KERNELS / "src", root / "src")
        assert patches.apply(s.name, root, S.patch(s)) == [s.path]
        old = (S.KERNELS / s.path).read_text().splitlines()
        new = (root / s.path).read_text().splitlines()
        changed = [i for i, (a, b) in enumerate(zip(old, new)) if a != b]
        assert len(old) == len(new) and changed == [s.line - 1], s.id
        assert new[s.line - 1] == old[s.line - 1][:s.col] + s.new + old[s.line - 1][s.col + len(s.old):]


def test_files_of_missing_paths_are_left_out(every_site):
    scalar = S.sites({"scalar"})
    assert not [s for s in scalar if S.ISA_FILE.search(s.path)]
    assert any(s.path.endswith("vec_avx512.h") for s in every_site)
    assert any(s.path.endswith("_impl.h") for s in scalar)   # the shared algorithm stays
    assert {s.path for s in every_site} > {s.path for s in scalar}


def _site(path, snippet, old):
    """The site of token `old` on the line of `path` that holds `snippet` (content, not line
    numbers, so that the test follows edits of the sources)."""
    for s in S.sites(files=re.escape(path)):
        line = (S.KERNELS / s.path).read_text().splitlines()[s.line - 1]
        if snippet in line and s.old.strip() == old:
            return s
    raise AssertionError(f"no {old!r} on a line of {path} holding {snippet!r}")


@pytest.mark.slow
def test_a_reached_mistake_is_killed_and_an_equivalent_one_survives():
    # the strict comparison of the global norm with the limit (clipping when norm > limit)
    killed = S.gate_site(_site("src/clip.c", "enabled && n > limit", ">"), timeout=10)
    assert killed.verdict == "killed" and "exact" in killed.tiers, killed
    # each thread skipping the tensors outside its run: with && none is skipped, every run
    # computes every tensor's dot, the same bits written twice
    same = S.gate_site(_site("src/clip.c", "start < lo ||", "||"), timeout=10)
    assert same.verdict == "survived", same


def test_cli_refuses_a_bad_files_expression():
    r = CliRunner().invoke(main, ["mutants", "--sweep", "1", "--files", "("])
    assert r.exit_code == 2 and "not a regular expression" in r.output
    r = CliRunner().invoke(main, ["mutants", "--sweep", "1", "--files", "no_such_file"])
    assert r.exit_code == 2 and "no site" in r.output
