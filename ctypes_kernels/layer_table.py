"""The one description of the port ABI's entry points and of every layer the gate runs.

Every registry that names a layer or an entry point is derived from here: abi.SIGNATURES,
ARGS, BUFFERS, CORE and LAYER_SYMBOLS, the replay's ENTRIES, harness.layers.LAYERS and each
layer module's FIXTURES and TIERS, allowance.LAYERS, the fuzzer's CHUNK and AUDIT_EVERY,
generators/exact.py's EXPECTED, regen's BUILDERS and the contract tier's size rules. Generated
from it: the replay's enum and switch (harness/sandbox/replay.py, entries_c) and crnn-run's entry
table (runner/crnn_entries.h, ctypes_kernels/crossbuild.py). The copies written by hand
(crnn_port.h's prototypes, results.schema.json's layer enum) are held to it by
tests/test_layer_table.py. Imports nothing: modules are named by dotted strings.

An entry's `proto` is its crnn_port.h prototype: a `const T *` argument is an input, a plain
`T *` one the call writes. `buffers` sizes every pointer argument (abi.buffers): name:dtype[shape]
with role ":out" (written whole) or ":inout" (read and updated), "?" when NULL is allowed.
`negative` / `zero`: the integer arguments the port must refuse when negative / also at 0
(harness/contract.py).
"""
from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Entry:
    name: str
    proto: str
    buffers: str = ""
    negative: str = ""
    zero: str = ""
    control: bool = False      # an execution-control function (no layer, no replay)


@dataclass(frozen=True)
class Fixture:
    stem: str                  # fixtures/<stem>.h5
    builder: str               # the module regen-fixtures writes it with
    tiers: tuple               # the tiers every case of the file must hold
    group: str = "main"        # regen's write order: main, then edges, then pytorch


@dataclass(frozen=True)
class Layer:
    name: str
    entries: tuple             # the entry points a port needs for the layer
    fixtures: tuple            # Fixture, in the gate's order
    exact: str                 # the exact tier's function (generators/exact.py)
    fuzz_chunk: int            # cases per Hypothesis run (harness/fuzz/engine.py)
    audit_every: int           # a passing fuzz case is checked against the NumPy spec 1 in N


ENTRIES = (
    Entry("crnn_abi_version", "int32_t crnn_abi_version(void)", control=True),
    Entry("crnn_isa_available", "uint32_t crnn_isa_available(void)", control=True),
    Entry("crnn_set_isa", "int32_t crnn_set_isa(int32_t isa)", control=True),
    Entry("crnn_get_isa", "int32_t crnn_get_isa(void)", control=True),
    Entry("crnn_set_threads", "int32_t crnn_set_threads(int32_t n)", control=True),
    Entry("crnn_get_threads", "int32_t crnn_get_threads(void)", control=True),
    Entry("crnn_dot16", "int32_t crnn_dot16(const float *a, const float *b, int64_t n, float *out)",
          "a:f32[n] b:f32[n] out:f32[1]:out", negative="n"),
    Entry("crnn_linear_forward",
          "int32_t crnn_linear_forward(const float *x, const float *W, const float *b, "
          "int32_t T, int32_t I, int32_t O, float *y)",
          "x:f32[T,I] W:f32[O,I] b:f32[O] y:f32[T,O]:out", negative="T I O"),
    Entry("crnn_linear_backward",
          "int32_t crnn_linear_backward(const float *x, const float *W, const float *dY, "
          "int32_t T, int32_t I, int32_t O, float *dx, float *dW, float *db)",
          "x:f32[T,I] W:f32[O,I] dY:f32[T,O] dx:f32[T,I]:out? dW:f32[O,I]:out db:f32[O]:out",
          negative="T I O"),
    Entry("crnn_conv_forward",
          "int32_t crnn_conv_forward(const float *x, int32_t H, int32_t W, int32_t C, "
          "const float *Wt, const float *b, int32_t Out, int32_t kh, int32_t kw, "
          "int32_t padH, int32_t padW, int32_t poolH, int32_t poolW, "
          "float *conv, float *pooled, int32_t *winners)",
          "x:f32[H,W,C] Wt:f32[Out,KP] b:f32[Out] conv:f32[P,Out]:out "
          "pooled:f32[Hp,Wp,Out]:out winners:i32[Hp,Wp,Out]:out",
          negative="H W C Out kh kw padH padW poolH poolW", zero="H W C Out kh kw poolH poolW"),
    Entry("crnn_conv_backward",
          "int32_t crnn_conv_backward(const float *x, int32_t H, int32_t W, int32_t C, "
          "const float *Wt, int32_t Out, int32_t kh, int32_t kw, int32_t padH, int32_t padW, "
          "int32_t poolH, int32_t poolW, const float *dPooled, const int32_t *winners, "
          "float *dW, float *db, float *dx)",
          "x:f32[H,W,C] Wt:f32[Out,KP] dPooled:f32[Hp,Wp,Out] winners:i32[Hp,Wp,Out] "
          "dW:f32[Out,KP]:out db:f32[Out]:out dx:f32[H,W,C]:out?",
          negative="H W C Out kh kw padH padW poolH poolW", zero="H W C Out kh kw poolH poolW"),
    Entry("crnn_lstm_forward",
          "int32_t crnn_lstm_forward(const float *x, int32_t T, int32_t I, int32_t H, "
          "const float *W_ih, const float *W_hh, const float *b, "
          "float *out, float *gates, float *c, float *tc, float *hPrev)",
          "x:f32[T,I] W_ih:f32[2,G,I] W_hh:f32[2,G,H] b:f32[2,G] out:f32[T,H2]:out "
          "gates:f32[2,T,G]:out c:f32[2,T,H]:out tc:f32[2,T,H]:out hPrev:f32[2,T,H]:out",
          negative="T I H", zero="H"),
    Entry("crnn_lstm_backward",
          "int32_t crnn_lstm_backward(const float *x, int32_t T, int32_t I, int32_t H, "
          "const float *W_ih, const float *W_hh, const float *gates, const float *c, "
          "const float *tc, const float *hPrev, const float *dOut, "
          "float *dW_ih, float *dW_hh, float *db, float *dx)",
          "x:f32[T,I] W_ih:f32[2,G,I] W_hh:f32[2,G,H] gates:f32[2,T,G] c:f32[2,T,H] "
          "tc:f32[2,T,H] hPrev:f32[2,T,H] dOut:f32[T,H2] dW_ih:f32[2,G,I]:out "
          "dW_hh:f32[2,G,H]:out db:f32[2,G]:out dx:f32[T,I]:out?",
          negative="T I H", zero="H"),
    Entry("crnn_sigmoid", "int32_t crnn_sigmoid(const float *x, int64_t n, float *y)",
          "x:f32[n] y:f32[n]:out", negative="n"),
    Entry("crnn_tanh", "int32_t crnn_tanh(const float *x, int64_t n, float *y)",
          "x:f32[n] y:f32[n]:out", negative="n"),
    Entry("crnn_detmath_exp", "int32_t crnn_detmath_exp(const double *x, int64_t n, double *y)",
          "x:f64[n] y:f64[n]:out", negative="n"),
    Entry("crnn_detmath_log", "int32_t crnn_detmath_log(const double *x, int64_t n, double *y)",
          "x:f64[n] y:f64[n]:out", negative="n"),
    Entry("crnn_ctc",
          "int32_t crnn_ctc(const float *logits, int32_t T, int32_t K, const int32_t *target, "
          "int32_t L, double scale, double *loss, float *dlogits)",
          "logits:f32[T,K] target:i32[L] loss:f64[1]:out dlogits:f32[T,K]:out",
          negative="T K L", zero="K"),
    Entry("crnn_model_sizes",
          "int32_t crnn_model_sizes(const int32_t *cfg, int32_t *nTensors, int64_t *sizes)",
          "cfg:i32[NCFG] nTensors:i32[1]:out sizes:i64[NT]:out?"),
    Entry("crnn_step_gradients",
          "int32_t crnn_step_gradients(const int32_t *cfg, const float *params, int32_t B, "
          "const int32_t *widths, const float *images, const int32_t *targetLens, "
          "const int32_t *targets, float *grads, double *losses, double *batchLoss)",
          "cfg:i32[NCFG] params:f32[NP] widths:i32[B] images:f32[NPIX] targetLens:i32[B] "
          "targets:i32[NLAB] grads:f32[NP]:out losses:f64[B]:out batchLoss:f64[1]:out",
          negative="B", zero="B"),
    Entry("crnn_clip_gradients",
          "int32_t crnn_clip_gradients(float *grads, const int64_t *sizes, int32_t nTensors, "
          "double limit, int32_t enabled, double *norm)",
          "grads:f32[NG]:inout sizes:i64[nTensors] norm:f64[1]:out", negative="nTensors"),
    Entry("crnn_adamw",
          "int32_t crnn_adamw(float *p, float *m, float *v, const float *g, int64_t n, "
          "double lr, double beta1, double beta2, double eps, double wd, int32_t decay, "
          "double b1t, double b2t)",
          "p:f32[n]:inout m:f32[n]:inout v:f32[n]:inout g:f32[n]", negative="n"),
)

_CASES = "crnn_conformance.generators.cases."
_EXACT = "crnn_conformance.generators.exact."
EXACT_ONLY, SPEC_AND_F64, PYTORCH = ("exact",), ("exact", "float64"), ("pytorch",)


def _fx(stem: str, tiers=SPEC_AND_F64, group: str = "main") -> Fixture:
    return Fixture(stem, _CASES + stem, tuple(tiers), group)


def _edges(stem: str) -> Fixture:
    return _fx(stem, EXACT_ONLY, "edges")


def _pytorch(stem: str) -> Fixture:
    return _fx(stem, PYTORCH, "pytorch")


# In the gate's order: the order of README.md's "Names".
LAYERS = (
    Layer("dot16", ("crnn_dot16",),
          # the order cases have no float64 tier; dot16_zeros: signed-zero tails
          (_fx("dot16", EXACT_ONLY), _fx("dot16_zeros", EXACT_ONLY), _edges("dot16_edges")),
          _EXACT + "_dot16", fuzz_chunk=300, audit_every=8),
    Layer("linear", ("crnn_linear_forward", "crnn_linear_backward"),
          (_fx("linear"), _pytorch("pytorch_linear"), _edges("linear_edges")),
          _EXACT + "_linear", fuzz_chunk=300, audit_every=8),
    Layer("conv", ("crnn_conv_forward", "crnn_conv_backward"),
          (_fx("conv"), _pytorch("pytorch_conv"), _edges("conv_edges")),
          _EXACT + "_conv", fuzz_chunk=150, audit_every=16),
    Layer("lstm", ("crnn_lstm_forward", "crnn_lstm_backward", "crnn_sigmoid", "crnn_tanh"),
          (_fx("lstm"), _pytorch("pytorch_lstm"), _edges("lstm_edges"), _edges("activations")),
          _EXACT + "_lstm", fuzz_chunk=250, audit_every=16),
    Layer("ctc", ("crnn_ctc", "crnn_detmath_exp", "crnn_detmath_log"),
          (_fx("ctc"), _pytorch("pytorch_ctc"), _edges("ctc_edges"), _edges("detmath")),
          _EXACT + "_ctc", fuzz_chunk=200, audit_every=16),
    Layer("step", ("crnn_model_sizes", "crnn_step_gradients"),
          (_fx("step"), _pytorch("pytorch_step"), _edges("step_edges")),
          _EXACT + "_step", fuzz_chunk=150, audit_every=128),
    Layer("clip", ("crnn_clip_gradients",),
          (_fx("clip"), _edges("clip_edges")),
          _EXACT + "_clip", fuzz_chunk=300, audit_every=8),
    Layer("adamw", ("crnn_adamw",),
          (_fx("adamw"), _pytorch("pytorch_adamw"), _edges("adamw_edges")),
          _EXACT + "_adamw", fuzz_chunk=300, audit_every=8),
    Layer("train3", ("crnn_model_sizes", "crnn_step_gradients", "crnn_clip_gradients",
                     "crnn_adamw"),
          (_fx("train3"), _pytorch("pytorch_train3")),
          _EXACT + "_train3", fuzz_chunk=120, audit_every=128),
)

GROUPS = ("main", "edges", "pytorch")
C_TYPES = {"int32_t": "i32", "int64_t": "i64", "uint32_t": "u32", "double": "f64",
           "float": "f32"}
_ARG = re.compile(r"^(const\s+)?(\w+)\s*(\*?)\s*(\w+)$")
_PROTO = re.compile(r"^(\w+)\s+(\w+)\((.*)\)$")


class TableError(ValueError):
    """The table contradicts itself (raised when it is imported)."""


def parse_proto(proto: str) -> tuple[str, str, list]:
    """(result type, name, [(C type, is pointer, is const, arg name)]) of a prototype."""
    m = _PROTO.match(" ".join(proto.split()))
    if not m:
        raise TableError(f"not a prototype: {proto!r}")
    res, name, body = m.groups()
    args = []
    for a in ([] if body.strip() in ("", "void") else body.split(",")):
        am = _ARG.match(a.strip())
        if not am:
            raise TableError(f"{name}: cannot read argument {a.strip()!r}")
        const, ctype, star, arg = am.groups()
        args.append((ctype, bool(star), bool(const), arg))
    return res, name, args


def parse_buffers(spec: str) -> list[tuple[str, str, str, str, bool]]:
    """[(arg, dtype, dims, role, nullable)] of an entry's buffers string."""
    out = []
    for item in spec.split():
        arg, rest = item.split(":", 1)
        dt, rest = rest.split("[", 1)
        dims, _, role = rest.partition("]")
        role = role.lstrip(":") or "in"
        out.append((arg, dt, dims, role.rstrip("?"), role.endswith("?")))
    return out


def entry(name: str) -> Entry:
    return _BY_NAME[name]


def layer(name: str) -> Layer:
    return _LAYER[name]


def layer_names() -> list[str]:
    return [lay.name for lay in LAYERS]


def kernel_entries() -> list[str]:
    """The entry points a layer run calls (everything but the control functions), table order."""
    return [e.name for e in ENTRIES if not e.control]


def fixtures(layer_name: str) -> list[str]:
    return [f.stem for f in _LAYER[layer_name].fixtures]


def tiers(layer_name: str) -> dict:
    return {f.stem: f.tiers for f in _LAYER[layer_name].fixtures}


def builders() -> dict:
    """{fixture stem: builder module} in regen's write order (GROUPS, then the layers')."""
    return {f.stem: f.builder for g in GROUPS for lay in LAYERS for f in lay.fixtures
            if f.group == g}


def fixture_groups() -> dict:
    """{fixture stem: its group} ("main", "edges" or "pytorch")."""
    return {f.stem: f.group for lay in LAYERS for f in lay.fixtures}


def _check() -> None:
    """Names unique, prototypes readable and named like their entry, buffers consistent with
    the signature (one per pointer argument, in order; role "in" exactly for const), every
    contract size an integer argument, every layer's entries and fixtures known."""
    def fail(msg):
        raise TableError(f"ctypes_kernels/layer_table.py: {msg}")
    names = [e.name for e in ENTRIES]
    for seq, what in ((names, "entry"), ([lay.name for lay in LAYERS], "layer"),
                      ([f.stem for lay in LAYERS for f in lay.fixtures], "fixture")):
        dup = sorted({n for n in seq if seq.count(n) > 1})
        if dup:
            fail(f"{what} name(s) listed twice: {', '.join(dup)}")
    for e in ENTRIES:
        res, pname, args = parse_proto(e.proto)
        if pname != e.name:
            fail(f"entry {e.name}: its prototype names {pname}")
        bad = [t for t in [res] + [a[0] for a in args] if t not in C_TYPES]
        if bad or res == "float":
            fail(f"entry {e.name}: unknown C type(s) {bad or [res]}")
        ptrs = [(a[3], a[2]) for a in args if a[1]]
        bufs = parse_buffers(e.buffers)
        if [b[0] for b in bufs] != [p[0] for p in ptrs]:
            fail(f"entry {e.name}: buffers {[b[0] for b in bufs]} are not its pointer "
                 f"arguments {[p[0] for p in ptrs]}")
        ctypes_of = {a[3]: a[0] for a in args}
        for (arg, dt, dims, role, _n), (_, const) in zip(bufs, ptrs):
            if role not in ("in", "out", "inout") or (role == "in") != const:
                fail(f"entry {e.name}: buffer {arg} has role {role!r} but is "
                     f"{'const' if const else 'written'} in the prototype")
            if C_TYPES[ctypes_of[arg]] != dt:
                fail(f"entry {e.name}: buffer {arg} is {dt} but {ctypes_of[arg]} * in the "
                     "prototype")
        ints = {a[3] for a in args if not a[1] and a[0] in ("int32_t", "int64_t")}
        for s in (e.negative + " " + e.zero).split():
            if s not in ints:
                fail(f"entry {e.name}: contract size {s!r} is not an integer argument")
        if e.control and bufs:
            fail(f"entry {e.name}: a control function takes no buffers")
    for lay in LAYERS:
        unknown = [n for n in lay.entries if n not in names or _BY_NAME[n].control]
        if unknown:
            fail(f"layer {lay.name}: unknown or control entry point(s) {', '.join(unknown)}")
        if not lay.fixtures:
            fail(f"layer {lay.name}: no fixture")
        for f in lay.fixtures:
            if f.group not in GROUPS:
                fail(f"layer {lay.name}: fixture {f.stem} has group {f.group!r}")
        if lay.fuzz_chunk < 1 or lay.audit_every < 1:
            fail(f"layer {lay.name}: fuzz_chunk and audit_every must be >= 1")


_BY_NAME = {e.name: e for e in ENTRIES}
_LAYER = {lay.name: lay for lay in LAYERS}
_check()
