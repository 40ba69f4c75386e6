"""A port whose result depends on an earlier call in the same process fails the gate: a worker
runs case after case of a layer, of every size, so a case that reads what an earlier, larger
call left behind fails (docs/port-abi.md, "No value crosses calls").

The mistakes are scratch kept between calls and not fully re-initialised: patches on a copy
of the bundled port's sources (built as the mutants are, harness/mutants). All but the LSTM
backward's dhRec (which reads what the same case's forward left, so every case shows it)
set their scratch only when it is allocated and are invisible after calls of the same size
or smaller ones. The default run builds one (CTC); the others are slow (pytest --slow)."""

from __future__ import annotations

import difflib
import json

import pytest

from testports import gate

# ---- the mistakes: (file under ctypes_kernels/src, old text, new text[, count]) -------------

MISTAKES = {
    # CTC: alpha and beta in a per-thread workspace kept between calls, all -inf when it is
    # allocated; a call sets only the entries it can reach of alpha's first row and beta's last
    "stale_ctc_rows": [
        ("ctc.c", "int32_t crnn_ctc(const float *logits, int32_t T, int32_t K,\n",
         "static double *workspace(size_t n)\n{\n"
         "    static _Thread_local double *ws;\n    static _Thread_local size_t have;\n"
         "    if (n > have) {\n        free(ws);\n        ws = malloc(sizeof(double) * n);\n"
         "        have = ws ? n : 0;\n        for (size_t i = 0; i < have; i++) ws[i] = NEG_INF;\n"
         "    }\n    return ws;\n}\n\n"
         "int32_t crnn_ctc(const float *logits, int32_t T, int32_t K,\n"),
        ("ctc.c", "    double *lp = malloc(sizeof(double) * ((size_t)nTK * 3 + (size_t)T * S * 2 + (size_t)nw * 5));\n",
         "    double *lp = workspace((size_t)nTK * 3 + (size_t)T * S * 2 + (size_t)nw * 5);\n"),
        ("ctc.c", "    if (!lp || !ext) { free(lp); free(ext); return CRNN_E_NOMEM; }\n",
         "    if (!lp || !ext) { free(ext); return CRNN_E_NOMEM; }\n"),
        ("ctc.c", "free(lp); free(ext);", "free(ext);", 2),
        ("ctc.c", "    for (int64_t s = 0; s < S; s++)\n        alpha[s] = s < 2 ? lp[ext[s]] : NEG_INF;\n",
         "    for (int64_t s = 0; s < S && s < 2; s++)\n        alpha[s] = lp[ext[s]];\n"),
        ("ctc.c", "    for (int64_t s = 0; s < S; s++)\n        beta[(T - 1) * S + s] = s >= S - 2 ? lp[(T - 1) * K + ext[s]] : NEG_INF;\n",
         "    for (int64_t s = S >= 2 ? S - 2 : 0; s < S; s++)\n        beta[(T - 1) * S + s] = lp[(T - 1) * K + ext[s]];\n"),
    ],
    # LSTM backward: dhRec and dcNext (the scratch the forward of the same case also uses)
    # zeroed only when W_hh is packed (nl > 1), not for the ABI's one line
    "stale_lstm_dhrec": [
        ("lstm.c", "    if (Whhp) crnn_kn_pack(G, H, Whh, H, 1, Whhp);      /* on d's thread */\n"
                   "    memset(dhRec, 0, sizeof(float) * 2 * (size_t)nl * H);   /* +0, all */\n",
         "    if (Whhp) {\n        crnn_kn_pack(G, H, Whh, H, 1, Whhp);      /* on d's thread */\n"
         "        memset(dhRec, 0, sizeof(float) * 2 * (size_t)nl * H);   /* +0, all */\n    }\n"),
    ],
    # LSTM forward: each line's and direction's cell state also kept in a per-thread
    # workspace, its row 0 (the state before the first step) zeroed only when allocated
    "stale_lstm_c0": [
        ("lstm.c", "static void forward_dir(fwd_ctx *k, int d)\n",
         "static float *cstate(size_t n)\n{\n"
         "    static _Thread_local float *ws;\n    static _Thread_local size_t have;\n"
         "    if (n > have) {\n        free(ws);\n        ws = calloc(n, sizeof(float));\n"
         "        have = ws ? n : 0;\n    }\n    return ws;\n}\n\n"
         "static void forward_dir(fwd_ctx *k, int d)\n"),
        ("lstm.c", "    if (nl > 1) crnn_kn_pack(H, G, Whh, 1, H, Whhp);   /* B(j, g) = W_hh[d][g][j], on d's thread */\n",
         "    if (nl > 1) crnn_kn_pack(H, G, Whh, 1, H, Whhp);   /* B(j, g) = W_hh[d][g][j], on d's thread */\n"
         "    float *cs = cstate((size_t)2 * nl * (T + 1) * H);\n    if (!cs) return;\n"),
        ("lstm.c", "            const float *cp = s > 0 ? k->c[li] + ((size_t)d * T + prev) * H : NULL;\n",
         "            float *cw = cs + ((size_t)li * 2 + d) * (T + 1) * H;\n"
         "            const float *cp = cw + (size_t)s * H;\n"),
        ("lstm.c", "            crnn_tanh_n(ct, tct, H);\n",
         "            crnn_tanh_n(ct, tct, H);\n"
         "            memcpy(cw + (size_t)(s + 1) * H, ct, sizeof(float) * (size_t)H);\n"),
    ],
    # conv: im2col leaves the padding columns K..KPadded as it finds them (but where its
    # 4-float moves spill into them), trusting scratch that comes zeroed when allocated
    "stale_im2col_pad": [
        ("scratch.c", "#include <stdlib.h>\n", "#include <stdlib.h>\n#include <string.h>\n"),
        ("scratch.c", "        s->n = s->p ? bytes : 0;\n",
         "        s->n = s->p ? bytes : 0;\n        if (s->p) memset(s->p, 0, bytes);\n"),
        ("conv_im2col.c", "    for (int64_t k = g->K; k < g->KP; k++) row[k] = 0.0f;\n}\n", "}\n"),
        ("conv_im2col.c", "            for (int64_t k = g->K; k < g->KP; k++) row[k] = 0.0f;\n", ""),
    ],
}


def patch_text(edits) -> str:
    """The edits as a patch in the mutants' format (a/ctypes_kernels/src/FILE)."""
    from crnn_conformance.ctypes_kernels.build import SRC
    texts: dict = {}
    for f, old, new, *count in edits:
        text = texts.get(f) or (SRC / f).read_text()
        assert text.count(old) == (count[0] if count else 1), (f, old[:60])
        texts[f] = text.replace(old, new)
    out = []
    for f, text in texts.items():
        out.append(f"diff --git a/ctypes_kernels/src/{f} b/ctypes_kernels/src/{f}\n")
        out += difflib.unified_diff((SRC / f).read_text().splitlines(keepends=True),
                                    text.splitlines(keepends=True),
                                    f"a/ctypes_kernels/src/{f}", f"b/ctypes_kernels/src/{f}")
    return "".join(out)


def build_mistake(name, monkeypatch):
    """The bundled port with the mistake `name` (built and cached as a mutant is)."""
    from crnn_conformance.ctypes_kernels import build
    patch = patch_text(MISTAKES[name])
    monkeypatch.setattr(build, "_mutant_patch", lambda m: patch if m == name else "")
    return str(build.build(mutant=name))


def failing(tmp_path, *args) -> tuple[int, dict]:
    """(the gate's exit code, {case: the failing records}) of `gate ARGS`."""
    out = tmp_path / "results.json"
    r = gate(*args, "-q", "--json", str(out), timeout=300)
    assert r.returncode in (0, 1), r.stdout + r.stderr
    bad: dict = {}
    for t in json.loads(out.read_text())["tensors"]:
        if not t["passed"]:
            bad.setdefault(t["case"], []).append(t)
    return r.returncode, bad


def base_run_fails(records, tier="exact") -> bool:
    """A record of the base run (scalar x 1 thread) failing in `tier`: the run judged by the
    tiers, not only a later ISA or thread count."""
    return any(t["tier"] == tier and (t["isa"], t["threads"]) == ("scalar", 1) for t in records)


# ---- the gate fails them, with either number of workers -------------------------------------

def test_stale_ctc_rows_fail_the_ctc_layer(monkeypatch, tmp_path):
    """CTC's alpha and beta kept between calls, -inf only when allocated: the single lines
    that follow a longer one fail in their base run."""
    so = build_mistake("stale_ctc_rows", monkeypatch)
    code, bad = failing(tmp_path, "--port", so, "--layers", "ctc", "--isa", "scalar",
                        "--threads", "1")
    assert code == 1
    assert any(base_run_fails(r) for c, r in bad.items() if not c.startswith("many"))


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(MISTAKES))
def test_every_stale_state_mistake_fails_the_default_gate(monkeypatch, tmp_path, name):
    """The whole default gate fails each mistake in some case's base run, with two workers
    and with one."""
    so = build_mistake(name, monkeypatch)
    for jobs in ("2", "1"):
        code, bad = failing(tmp_path, "--port", so, "--jobs", jobs)
        assert code == 1
        assert any(base_run_fails(r) for r in bad.values()), (jobs, sorted(bad))


# ---- a path that keeps state another path clears: the order of a case's runs ------------------

def test_rotated_groups_runs_by_isa_and_turns_the_groups():
    from crnn_conformance.harness.runner import rotated
    runs = [("scalar", 1), ("scalar", 2), ("sse", 1), ("sse", 2), ("avx2", 1), ("avx2", 2)]
    assert rotated(runs, 0) == runs
    assert rotated(runs, 1) == runs[2:] + runs[:2]
    assert rotated(runs, 2) == runs[4:] + runs[:4]
    assert rotated(runs, 3) == runs
    # a --runs order with an ISA's runs apart: each ISA's runs together, in their order
    mixed = [("sse", 1), ("scalar", 1), ("sse", 7)]
    assert rotated(mixed, 0) == [("sse", 1), ("sse", 7), ("scalar", 1)]
    assert rotated(mixed, 1) == [("scalar", 1), ("sse", 1), ("sse", 7)]
    assert rotated([], 5) == []


def test_a_vector_path_that_leaves_a_scratch_row_stale_fails_identity(tmp_path):
    """The catalogue's vec_pool_stale_dropped: the vector paths' pool backward leaves dC's
    dropped partial rows as the scratch held them, which the scalar path clears. With every
    case's runs made base (scalar) first it passed every tier; each ISA now leads the runs of
    some cases of a fixture, right after another case, and the identity tier fails it (on every
    vector path of a Zen 4: sse, avx2 and avx512), with one worker and with two. The failure names the case run just before."""
    from crnn_conformance.ctypes_kernels import abi
    from crnn_conformance.ctypes_kernels.build import build
    from crnn_conformance.harness import runner
    from crnn_conformance.harness.runner import GateOptions, run_gate
    so = str(build(mutant="vec_pool_stale_dropped"))
    vector = [i for i in abi.available_isas(abi.load(so, layers=())) if i != "scalar"]
    if not vector:
        pytest.skip("no vector ISA path on this CPU")
    for jobs in ("2", "1"):
        code, bad = failing(tmp_path, "--port", so, "--layers", "conv", "--jobs", jobs)
        assert code == 1
        records = [t for r in bad.values() for t in r]
        assert {t["tier"] for t in records} == {"identity"}
        assert records and {t["isa"] for t in records} <= set(vector), (jobs, sorted(bad))
        assert all("just before this case" in t["note"] for t in records), records[0]["note"]
    before = runner.rotated
    try:
        runner.rotated = lambda runs, k: runs
        result = run_gate(GateOptions(port=so, layers=["conv"], workers=1))
    finally:
        runner.rotated = before
    assert result.passed
