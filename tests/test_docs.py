"""The docs and comments speak of the project alone, and the port author's tables stay true:
no reference to a document, a tracker or a history outside the repository anywhere in docs/,
README.md, .ci/run, the package sources or the tests; docs/port-abi.md's table of the symbols
each layer needs is abi.LAYER_SYMBOLS, its crnn-v0 sizes are the model's, and the cfg limit
it states (nLstm >= 1) is what the bundled and the reference port enforce."""
from __future__ import annotations

import ctypes as C
import re
from pathlib import Path

import numpy as np
import pytest

from crnn_conformance.ctypes_kernels import abi
from crnn_conformance.generators import model

ROOT = Path(__file__).resolve().parent.parent
# Case-sensitive: `DESIGN` as a name (not "by design"), a design document's section numbers,
# a tracker's issue numbers, a draft's promises.
STALE = {
    "DESIGN.md or DESIGN": re.compile(r"\bDESIGN\b"),
    "seed 000": re.compile(r"\bseed 0{3}\b"),
    "the seed (a design document)": re.compile(r"\b[Tt]he seed\b"),
    "issue N": re.compile(r"\b[Ii]ssues? #?\d+"),
    "sections may follow": re.compile(r"\bsections? may follow\b"),
}
SOURCES = ("harness", "generators", "reports", "ctypes_kernels", "fixtures", "tests")
SUFFIXES = {".py", ".c", ".h", ".toml", ".j2", ".json", ".md", ".yml", ".yaml", ".cfg", ".txt"}


def _scanned() -> list[Path]:
    files = [ROOT / "README.md", ROOT / ".ci" / "run", ROOT / "pyproject.toml",
             *sorted((ROOT / "docs").glob("*.md"))]
    for top in SOURCES:
        files += sorted(p for p in (ROOT / top).rglob("*") if p.is_file()
                        and p.suffix in SUFFIXES and "__pycache__" not in p.parts)
    return [p for p in files if p.exists() and p != Path(__file__).resolve()]


def test_no_reference_outside_the_project():
    hits = []
    for path in _scanned():
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            hits += [f"{path.relative_to(ROOT)}:{n}: {what}: {line.strip()[:100]}"
                     for what, rx in STALE.items() if rx.search(line)]
    assert not hits, "\n".join(hits)


def test_the_scan_sees_what_it_looks_for(tmp_path):
    """Each pattern matches the wording it is for, and not the project's own uses of the words."""
    for what, text in (("DESIGN.md or DESIGN", "(DESIGN.md)"), ("DESIGN.md or DESIGN", 'DESIGN, "x"'),
                       ("seed 000", "(seed 000, "), ("the seed (a design document)", "as in the seed"),
                       ("issue N", "(issue 15)"), ("issue N", "Issue 17, item 6"),
                       ("sections may follow", "the CTC sections may follow.")):
        assert STALE[what].search(text), (what, text)
    for text in ("by design", "--seed S", "the run's seed", "seeds 16, 17", "issued from"):
        assert not any(rx.search(text) for rx in STALE.values()), text
    assert {"README.md", "run", "port-abi.md", "rule.py", "conv.c"} <= \
        {p.name for p in _scanned()}


def _layer_table() -> dict:
    text = (ROOT / "docs" / "port-abi.md").read_text()
    block = text[text.index("<!-- layer symbols: begin -->"):text.index("<!-- layer symbols: end -->")]
    rows = {}
    for line in block.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 2 and cells[0] not in ("layer", "---"):
            rows[cells[0]] = re.findall(r"`(crnn_\w+)`", cells[1])
    return rows


def test_the_abi_page_lists_each_layers_symbols_as_the_gate_requires_them():
    assert _layer_table() == abi.LAYER_SYMBOLS


def test_the_abi_pages_crnn_v0_sizes_are_the_models():
    text = " ".join((ROOT / "docs" / "port-abi.md").read_text().split())
    cfg = model.default_config()
    kp = ", ".join(str(model.kpadded(g["kh"] * g["kw"] * g["C"]))
                   for g in model.block_geometry(cfg, 64))
    assert f"`KPadded` {kp};" in text
    assert f"so `I = {model.sequence_features(cfg)}`" in text
    assert f"the classifier's input {2 * cfg['hidden']}; {len(model.param_specs(cfg))} tensors" in text
    assert "`T = (width / 2) / 2`" in text and all(
        model.steps_for_width(cfg, w) == (w // 2) // 2 for w in range(4, 300))


def _model_sizes(lib, cfg) -> int:
    n = np.zeros(1, np.int32)
    cfg = np.ascontiguousarray(cfg, np.int32)
    return lib.crnn_model_sizes(cfg.ctypes.data_as(C.c_void_p), n.ctypes.data_as(C.c_void_p), None)


@pytest.mark.parametrize("which", ["bundled", "reference"])
def test_nlstm_zero_is_refused_as_the_abi_page_says(which):
    if which == "bundled":
        from crnn_conformance.ctypes_kernels.build import load_bundled
        lib = load_bundled(("step",))
    else:
        from crnn_conformance.harness import reference
        if not reference.available():
            pytest.skip("the reference port cannot be built here")
        lib = reference.library()
    cfg = model.cfg_array(model.default_config())
    assert _model_sizes(lib, cfg) == 0
    for at, value in ((-3, 0), (-2, 0), (-1, 1), (2, 0)):   # nLstm, hidden, classes, nBlocks
        bad = cfg.copy()
        bad[at] = value
        assert _model_sizes(lib, bad) == -1, (at, value)          # CRNN_E_ARG
