"""The contract tier: the ABI's error contract, checked (docs/port-abi.md, "The error contract").

Per layer, a list of calls into the layer's own entry points, each with the return code the
ABI documents for it:
  - invalid calls (CRNN_E_ARG, CRNN_E_ISA): each derived from one valid base call of the
    entry point by one change: a size made negative, a size that must be positive made 0,
    NULL for one buffer that may not be NULL (one call per buffer of abi.BUFFERS, at the
    smallest sizes that give every buffer one element: ONE), or one of
    the entry point's value rules (RULES: labels outside 1..K-1, bad pool geometry, a
    malformed cfg, ...). They must return their code and write nothing: every output keeps
    its poison, every input and in/out buffer its bytes;
  - valid calls (CRNN_OK): the base call and the edges the ABI allows (EDGES: T = 0, I = 0,
    n = 0, an empty target, a NULL dx, ...), which must write every output, and where the
    right values are cheap to state (a dot of 0 terms is +0, y = b when I = 0, ...) give them.
Every buffer is sized from abi.buffers() (of the base call, unless the change itself resizes
one, e.g. a longer target) and guarded by the worker's arena (harness/sandbox/guard.py): an
out-of-bounds write or a changed const input is named as in the gate. The calls run in the
worker, one answer each (Executor.contract), so a crash or hang is the failing record of the
call that caused it. The control functions' calls (crnn_set_isa, crnn_set_threads) go with
the first layer of the run.

Each entry point belongs to the first layer of harness.layers.LAYERS that lists it
(abi.LAYER_SYMBOLS): train3 has no entry point of its own, so no contract checks.
"""
from __future__ import annotations

import fnmatch
import traceback
from dataclasses import dataclass, field

import numpy as np

from ..ctypes_kernels import abi, layer_table
from . import pyport
from .sandbox import guard
from .compare import Comparison, compare, is_poison
from .layers import LAYERS
from .records import THREADS, record

TIER = "contract"
FIXTURE = "contract"     # the fixture and case name of every contract record
E_ARG, E_ISA, OK = -1, -2, 0

# A small model: [H_in, C_in, nBlocks, {Out, kh, kw, padH, padW, poolH, poolW}, nLstm,
# hidden, classes]; a line 8 wide pools to 4 columns of 8 LSTM inputs.
CFG = [8, 1, 1, 2, 3, 3, 1, 1, 2, 2, 1, 2, 3]
CFG_NLSTM = 3 + 7 * 1     # the index of nLstm in CFG


@dataclass
class Call:
    """One call of the contract tier: `label` is its record's tensor name."""
    label: str
    fn: str
    args: dict                          # the non-pointer arguments by name
    want: int                           # the documented return code
    values: dict = field(default_factory=dict)   # input contents by buffer name
    null: tuple = ()                    # buffers passed as NULL
    sized: tuple | None = None          # (args, values) the buffers are sized from (None:
                                        # this call's own; an invalid call: its base call's)
    expect: dict = field(default_factory=dict)   # valid calls: output name -> its value


def _base() -> dict:
    """The valid base call of every entry point: (args, input values)."""
    conv = dict(H=4, W=4, C=1, Out=2, kh=3, kw=3, padH=1, padW=1, poolH=2, poolW=2)
    lstm = dict(T=2, I=3, H=2)
    return {
        "crnn_dot16": (dict(n=5), {}),
        "crnn_linear_forward": (dict(T=2, I=3, O=2), {}),
        "crnn_linear_backward": (dict(T=2, I=3, O=2), {}),
        "crnn_conv_forward": (conv, {}),
        "crnn_conv_backward": (conv, {"winners": -1}),
        "crnn_lstm_forward": (lstm, {}),
        "crnn_lstm_backward": (lstm, {}),
        "crnn_sigmoid": (dict(n=5), {}),
        "crnn_tanh": (dict(n=5), {}),
        "crnn_detmath_exp": (dict(n=5), {}),
        "crnn_detmath_log": (dict(n=5), {"x": 1.5}),
        "crnn_ctc": (dict(T=4, K=3, L=2, scale=0.5), {"target": [1, 2]}),
        "crnn_model_sizes": ({}, {"cfg": CFG}),
        "crnn_step_gradients": (dict(B=1), {"cfg": CFG, "widths": [8], "targetLens": [2],
                                            "targets": [1, 2]}),
        "crnn_clip_gradients": (dict(nTensors=2, limit=1.0, enabled=1), {"sizes": [3, 2]}),
        "crnn_adamw": (dict(n=4, lr=1e-3, beta1=0.9, beta2=0.999, eps=1e-8, wd=0.01, decay=1,
                            b1t=0.9, b2t=0.999), {}),
    }


# The NULL calls' sizes: the smallest at which every buffer holds one element (where the base
# call's are larger), so a port that refuses NULL from the wrong count on (n > 1 instead of
# n > 0) meets the NULL it lets through.
ONE = {**{fn: (dict(n=1), {}) for fn in ("crnn_dot16", "crnn_sigmoid", "crnn_tanh",
                                         "crnn_detmath_exp", "crnn_detmath_log", "crnn_adamw")},
       **{fn: (dict(T=1, I=1, O=1), {}) for fn in ("crnn_linear_forward",
                                                   "crnn_linear_backward")},
       **{fn: (dict(T=1, I=1, H=1), {}) for fn in ("crnn_lstm_forward", "crnn_lstm_backward")},
       "crnn_ctc": (dict(T=1, L=1), {"target": [1]}),
       "crnn_step_gradients": ({}, {"targetLens": [1], "targets": [1]}),
       "crnn_clip_gradients": (dict(nTensors=1), {"sizes": [1]})}


def _one(fn: str, args: dict, values: dict) -> tuple:
    a, v = ONE.get(fn, ({}, {}))
    return {**args, **a}, {**values, **v}


# Sizes a port must refuse when negative, and those it must refuse at 0 too (the table's).
NEGATIVE = {e.name: e.negative for e in layer_table.ENTRIES if e.negative}
ZERO = {e.name: e.zero for e in layer_table.ENTRIES if e.zero}


def _cfg(**at) -> list:
    cfg = list(CFG)
    for i, v in at.items():
        cfg[int(i[1:])] = v
    return cfg


def _rules() -> dict:
    """The value rules of each entry point beyond sizes and NULLs: (label, changed args,
    changed input values, want)."""
    geometry = [("pool 0x2", dict(poolH=0), {}), ("kernel > padded input", dict(kh=7), {}),
                ("no whole pool window", dict(poolH=5), {})]
    cfg_rules = [("cfg nBlocks -1", {}, {"cfg": _cfg(i2=-1)}),
                 ("cfg nBlocks 0", {}, {"cfg": _cfg(i2=0)}),
                 ("cfg nLstm 0", {}, {"cfg": _cfg(**{f"i{CFG_NLSTM}": 0})}),
                 ("cfg pool 0", {}, {"cfg": _cfg(i8=0)}),
                 ("cfg kernel > padded input", {}, {"cfg": _cfg(i4=CFG[0] + 2 * CFG[6] + 1)}),
                 ("cfg no whole pool window", {}, {"cfg": _cfg(i8=CFG[0] + 1)})]
    return {
        "crnn_conv_forward": geometry,
        "crnn_conv_backward": geometry + [("winner outside its window", {},
                                           {"winners": [[[4, -1], [-1, -1]],
                                                        [[-1, -1], [-1, -1]]]})],
        "crnn_ctc": [("label 0", {}, {"target": [0, 2]}), ("label K", {}, {"target": [1, 3]}),
                     ("label -1", {}, {"target": [-1, 2]}),
                     ("logit NaN", {}, {"logits": np.float32("nan")}),
                     ("logit -inf", {}, {"logits": np.float32("-inf")})],
        "crnn_model_sizes": cfg_rules,
        "crnn_step_gradients": cfg_rules + [
            ("width 1: no pooled column", {}, {"widths": [1]}),
            ("width 2, kernel 5 wide", {}, {"cfg": _cfg(i5=5), "widths": [2]}),
            ("width 0, padW 2", {}, {"cfg": _cfg(i7=2), "widths": [0]}),
            ("targetLens -1", {}, {"targetLens": [-1]}),
            ("label 0", {}, {"targets": [0, 2]}), ("label classes", {}, {"targets": [1, 3]})],
        "crnn_clip_gradients": [("sizes -1", {}, {"sizes": [3, -1]}),
                                ("enabled 2", dict(enabled=2), {}),
                                ("limit -1", dict(limit=-1.0), {}),
                                ("limit NaN", dict(limit=float("nan")), {})],
        "crnn_adamw": [("decay 2", dict(decay=2), {}), ("b1t 1", dict(b1t=1.0), {}),
                       ("b2t 1", dict(b2t=1.0), {}), ("b1t -0.5", dict(b1t=-0.5), {})],
    }


def _plus0(*shape) -> np.ndarray:
    return np.zeros(shape, np.float32)


B2 = np.array([0.75, -1.5], np.float32)    # a linear bias of O = 2 (y = b when I = 0)


def _linear_edges(T0=None, I0=None, O0=None) -> list:
    return [("T=0", dict(T=0), {}, (), T0 or {}), ("I=0", dict(I=0), {"b": B2}, (), I0 or {}),
            ("O=0", dict(O=0), {}, (), O0 or {})]


def _edges() -> dict:
    """The valid edges of each entry point: (label, changed args, changed values, NULL
    buffers, expected outputs). A dot of 0 terms is +0; so y = b when I = 0, dW = db = +0
    when T = 0, dx = +0 when O = 0."""
    lstm_t0 = {"dW_ih": _plus0(2, 8, 3), "dW_hh": _plus0(2, 8, 2), "db": _plus0(2, 8)}
    n0 = [("n=0", dict(n=0), {}, (), {})]
    return {
        "crnn_dot16": [("n=0", dict(n=0), {}, (), {"out": _plus0(1)}),
                       ("n=0, a=b=NULL", dict(n=0), {}, ("a", "b"), {"out": _plus0(1)})],
        "crnn_linear_forward": _linear_edges(I0={"y": np.tile(B2, (2, 1))}),
        "crnn_linear_backward": _linear_edges(T0={"dW": _plus0(2, 3), "db": _plus0(2)},
                                              O0={"dx": _plus0(2, 3)})
        + [("dx=NULL", {}, {}, ("dx",), {})],
        "crnn_conv_forward": [("kernel = padded input", dict(kh=6, kw=6, poolH=1, poolW=1),
                               {}, (), {})],
        "crnn_conv_backward": [("dx=NULL", {}, {}, ("dx",), {})],
        "crnn_lstm_forward": [("T=0", dict(T=0), {}, (), {}), ("I=0", dict(I=0), {}, (), {})],
        "crnn_lstm_backward": [("T=0", dict(T=0), {}, (), lstm_t0),
                               ("I=0", dict(I=0), {}, (), {}), ("dx=NULL", {}, {}, ("dx",), {})],
        "crnn_sigmoid": n0, "crnn_tanh": n0, "crnn_detmath_exp": n0, "crnn_detmath_log": n0,
        "crnn_ctc": [("L=0", dict(L=0), {"target": []}, (), {}),
                     ("T=0", dict(T=0), {}, (), {"loss": np.array([np.inf])}),
                     ("T=0, L=0", dict(T=0, L=0), {"target": []}, (), {"loss": np.array([np.inf])}),
                     ("L plus repeats > T", dict(T=2, L=2), {"target": [1, 1]}, (),
                      {"loss": np.array([np.inf]), "dlogits": _plus0(2, 3)})],
        "crnn_model_sizes": [("sizes=NULL", {}, {}, ("sizes",),
                              {"nTensors": np.array([len(abi._cfg_sizes(CFG)["sizes"])],
                                                    np.int32)})],
        "crnn_step_gradients": [("a line without target", {}, {"targetLens": [0], "targets": []},
                                 (), {})],
        "crnn_clip_gradients": [("nTensors=0", dict(nTensors=0), {"sizes": []}, (),
                                 {"norm": np.zeros(1)}),
                                ("a tensor of 0 elements", {}, {"sizes": [3, 0]}, (), {})],
        "crnn_adamw": n0,
    }


def owner(fn: str) -> str:
    """The layer an entry point's contract checks go with."""
    return next(layer for layer in LAYERS if fn in abi.LAYER_SYMBOLS[layer])


def entry_points(layer: str) -> list[str]:
    return [fn for fn in abi.LAYER_SYMBOLS.get(layer, []) if owner(fn) == layer]


def _short(fn: str) -> str:
    return fn.removeprefix("crnn_")


def calls(layer: str, core: bool = False) -> list[Call]:
    """The contract calls of `layer` (with `core`: crnn_set_isa's and crnn_set_threads' too)."""
    base, rules, edges = _base(), _rules(), _edges()
    out = []
    for fn in entry_points(layer):
        args, values = base[fn]
        out.append(Call(f"{_short(fn)}(valid)", fn, dict(args), OK, dict(values)))
        for label, a, v, null, expect in edges.get(fn, []):
            out.append(Call(f"{_short(fn)}({label})", fn, {**args, **a}, OK, {**values, **v},
                            null, None, expect))
        for name in NEGATIVE.get(fn, "").split():
            out.append(Call(f"{_short(fn)}({name}=-1)", fn, {**args, name: -1}, E_ARG,
                            dict(values), sized=(args, values)))
        for name in ZERO.get(fn, "").split():
            out.append(Call(f"{_short(fn)}({name}=0)", fn, {**args, name: 0}, E_ARG,
                            dict(values), sized=(args, values)))
        one_args, one_values = _one(fn, args, values)
        for b in abi.buffers(fn, _ints(one_args), _reader(one_values)):
            if not b.nullable:
                out.append(Call(f"{_short(fn)}({b.name}=NULL)", fn, one_args, E_ARG,
                                dict(one_values), (b.name,)))
        for label, a, v in rules.get(fn, []):
            out.append(Call(f"{_short(fn)}({label})", fn, {**args, **a}, E_ARG, {**values, **v},
                            sized=(args, values)))
    if core:
        out += [Call(f"set_threads({n})", "crnn_set_threads", {"n": n}, E_ARG) for n in (0, 257)]
        out += [Call(f"set_isa({i})", "crnn_set_isa", {"isa": i}, E_ARG) for i in (-1, len(abi.ISA_NAMES))]
        out.append(Call("set_isa(not advertised)", "crnn_set_isa", {"isa": None}, E_ISA))
        out += [Call("get_isa after each set_isa", "crnn_get_isa", {}, OK),
                Call("get_threads after set_threads", "crnn_get_threads", {}, OK)]
    return out


def _ints(args: dict) -> dict:
    return {k: v for k, v in args.items() if isinstance(v, int)}


def _reader(values: dict):
    def read(arg, dtype, n):
        v = np.ravel(np.asarray(values.get(arg, []), np.int64))
        return [int(x) for x in v[:max(n, 0)]]
    return read


# ---- in the worker ---------------------------------------------------------------------

def _fill(b: abi.Buffer, value) -> np.ndarray:
    """The content of input buffer `b`: `value` (an array of its shape, or a scalar for every
    element), else deterministic small values in (-0.5, 0.5)."""
    n = int(np.prod(b.shape))
    if value is None:
        if np.dtype(b.dtype).kind == "i":
            return np.zeros(b.shape, b.dtype)
        return (((np.arange(n) * 0.371) % 1.0) - 0.5).astype(b.dtype).reshape(b.shape)
    a = np.asarray(value)
    return (np.full(b.shape, a, b.dtype) if a.ndim == 0
            else a.astype(b.dtype).reshape(b.shape))


def _buffers(call: Call) -> list:
    args, values = call.sized if call.sized is not None else (call.args, call.values)
    return abi.buffers(call.fn, _ints(args), _reader(values))


def run(traced, call: Call, base_isa: int) -> tuple:
    """One contract call on guarded buffers -> ("ok", rc, [problem, ...]) or ("skip", why),
    ("fpenv", message), ("exception", traceback). The ISA and threads are the base run's."""
    from .sandbox.fpenv import FpEnvError
    arena = guard.Arena()
    try:
        abi.check(traced.crnn_set_isa(base_isa), "crnn_set_isa")
        abi.check(traced.crnn_set_threads(1), "crnn_set_threads(1)")
        if call.fn in ("crnn_set_isa", "crnn_set_threads"):
            return _control(traced, call, base_isa)
        if call.fn in ("crnn_get_isa", "crnn_get_threads"):
            return _readback(traced, call.fn, base_isa)
        return _entry(traced, arena, call)
    except FpEnvError as e:
        return ("fpenv", str(e))
    except abi.PortCallError as e:     # the base ISA or 1 thread refused: nothing ran
        return ("setup", str(e))
    except Exception:  # noqa: BLE001 (a harness bug: reported whole)
        return ("exception", traceback.format_exc())
    finally:
        guard.activate(None)
        arena.release()


def _control(traced, call: Call, base_isa: int) -> tuple:
    """crnn_set_isa's indices are the port's ISA names (abi.ISA_NAMES, or a Python port's
    configs): an index past them is outside the range, one among them not advertised is
    CRNN_E_ISA."""
    fn = getattr(traced, call.fn)
    arg = call.args.get("isa", call.args.get("n"))
    if call.fn == "crnn_set_isa" and arg is None:      # the first ISA not advertised
        mask = int(traced.crnn_isa_available())
        absent = [i for i in range(len(traced.isa_names)) if not mask & (1 << i)]
        if not absent:
            return ("skip", "the port advertises every ISA")
        arg = absent[0]
    elif call.fn == "crnn_set_isa" and 0 <= arg < len(traced.isa_names):
        return ("skip", f"{arg} is the index of the port's config {traced.isa_names[arg]}")
    rc = int(fn(arg))
    traced.crnn_set_isa(base_isa)        # whatever it did, the later calls run on the base
    traced.crnn_set_threads(1)
    return ("ok", rc, [])


def _readback(traced, fn: str, base_isa: int) -> tuple:
    """Every run is recorded under the ISA path and thread count it selected, so the selection
    must take: after each crnn_set_isa of a path the port advertises (crnn_set_threads of
    each of the gate's default THREADS) that returned CRNN_OK, crnn_get_isa (crnn_get_threads)
    names it. A port whose selection falls back to another path would pass the identity tier
    without ever running the paths it names. A count a Python port does not declare is refused by the
    adapter and not read back."""
    if fn == "crnn_get_isa":
        mask = int(traced.crnn_isa_available())
        picks = [(i, traced.crnn_set_isa, f" ({name})") for i, name in enumerate(traced.isa_names)
                 if mask & (1 << i)]
    else:
        picks = [(n, traced.crnn_set_threads, "") for n in THREADS]
    problems = []
    for want, select, name in picks:
        try:
            got = int(getattr(traced, fn)()) if int(select(want)) == OK else want
        except abi.PortCallError as e:     # a Python port's getter raised or returned no int
            return ("ok", OK, [str(e)])
        if got != want:
            problems.append(f"{fn}() returned {got} after {fn.replace('get', 'set')}({want})"
                            f"{name} returned CRNN_OK")
    traced.crnn_set_isa(base_isa)
    traced.crnn_set_threads(1)
    return ("ok", OK, problems)


def _entry(traced, arena, call: Call) -> tuple:
    """An entry point's call: every buffer guarded (outputs poisoned), the call made with the
    arena's checks (an out-of-bounds write or a changed const input is a problem, not an
    exception), then what it wrote compared with what the contract allows."""
    guard.activate(arena)
    bufs = {}
    for b in _buffers(call):
        if b.name in call.null:
            bufs[b.name] = (b, None)
        elif b.role == "out":
            bufs[b.name] = (b, guard.output(b.shape, b.dtype))
        elif b.role == "inout":
            bufs[b.name] = (b, guard.inout(_fill(b, call.values.get(b.name))))
        else:
            bufs[b.name] = (b, arena.private(b.name, _fill(b, call.values.get(b.name))))
    guard.activate(None)
    before = {n: a.copy() for n, (b, a) in bufs.items() if a is not None and b.role != "in"}
    args = []
    for name, typ in zip(abi.ARGS[call.fn].split(), abi.SIGNATURES[call.fn][1]):
        name = name.lstrip("*")
        if typ is abi.P:
            a = bufs[name][1]
            args.append(None if a is None else arena.address(a))
        else:
            args.append(call.args[name])
    problems = []
    touched = arena.before(call.fn, args)
    traced._shared.table.value = traced.table = arena.guard_pages(touched)
    try:
        rc = int(getattr(traced, call.fn)(*args))    # (no arena active: checked here)
    except pyport.PortException as e:   # a Python port raised: the call's failure, no code
        rc = None
        problems.append(str(e))
    try:
        arena.after(call.fn, touched, rc)
        arena.finish()
    except guard.Violation as e:
        problems.append(str(e))
    if call.want != OK and rc not in (OK, None):
        problems += _written(bufs, before)
    if call.want == OK and rc == OK:
        problems += _unwritten(bufs) + _values(bufs, call.expect)
    return ("ok", rc, problems)


def _written(bufs: dict, before: dict) -> list[str]:
    out = []
    for name, old in before.items():
        b, a = bufs[name]
        if a.tobytes() != old.tobytes():
            what = "output" if b.role == "out" else "in/out buffer"
            out.append(f"wrote {what} {name} before rejecting")
    return out


def _unwritten(bufs: dict) -> list[str]:
    out = []
    for name, (b, a) in bufs.items():
        if a is not None and b.role == "out" and is_poison(a).any():
            out.append(f"left {int(is_poison(a).sum())} element(s) of {name} unwritten (poison)")
    return out


def _values(bufs: dict, expect: dict) -> list[str]:
    out = []
    for name, want in expect.items():
        got = bufs[name][1]
        c = compare(got, np.asarray(want, got.dtype).reshape(got.shape), "exact")
        if not c.passed:
            w = c.worst or {}
            out.append(f"{name} is not the documented value: at {w.get('index')} "
                       f"{w.get('ours')}, want {w.get('ref')}")
    return out


# ---- in the gate -----------------------------------------------------------------------

def selected(opts) -> bool:
    """The contract tier runs when asked for and --case, if given, matches `contract`."""
    return TIER in opts.tiers and (opts.case is None or fnmatch.fnmatch(FIXTURE, opts.case))


def code_name(rc) -> str:
    return f"{abi.ERRORS.get(rc, 'an unknown code')} ({rc})"


def verdict(call: Call, answer: tuple) -> Comparison | None:
    """The Comparison of one call's answer; None when it checks nothing (skipped)."""
    kind = answer[0]
    if kind == "skip":
        return None
    if kind == "ok":
        rc, problems = answer[1], list(answer[2])
        if rc is not None and rc != call.want:      # (None: a Python port raised)
            problems.insert(0, f"returned {code_name(rc)}, want {code_name(call.want)}")
        note = "; ".join(problems)
    elif kind == "crash":
        note = answer[1]
    elif kind == "exception":      # as a run's: the port may have written the worker's memory
        from .sandbox.executor import worker_raised
        note = worker_raised(answer[1], "during the call")
    else:
        note = f"{kind}: {answer[1]}"
    passed = not note
    return Comparison(0.0 if passed else float("inf"), 0.0 if passed else float("inf"),
                      0 if passed else 1, 1, passed, note=note)


def repro(opts, layer: str) -> str:
    """The command that reruns the contract tier of `layer` alone."""
    from .records import _shell_quote
    cmd = ["crnn-conformance", "gate"]
    if opts.port:
        cmd += ["--port", str(opts.port)]
    cmd += ["--layers", layer, "--tiers", TIER]
    return " ".join(map(_shell_quote, cmd))


def layer_records(session, layer: str, core: bool = False) -> list:
    """The contract records of `layer` from the session's first worker, or [] when the layer
    is not implemented (then, under --layers available, a valid call that returned
    CRNN_E_UNSUPPORTED says so in session.not_implemented)."""
    import time
    if layer in session.not_implemented:
        return []
    todo = calls(layer, core)
    if not todo:
        return []
    isa = session.isas[0]
    t0 = time.perf_counter()
    answers = session.executors[0].contract(todo, isa)
    share = (time.perf_counter() - t0) / len(todo)
    if session.opts.available:
        for call, answer in zip(todo, answers):
            if call.want == OK and answer[0] == "ok" and answer[1] == abi.E_UNSUPPORTED:
                session.not_implemented.setdefault(
                    layer, f"{call.fn} returned {code_name(abi.E_UNSUPPORTED)} on a valid call "
                    f"of the contract tier ({call.label})")
                return []
    out = []
    for call, answer in zip(todo, answers):
        if answer[0] == "fpenv":
            raise abi.PortError(answer[1])
        c = verdict(call, answer)
        if c is None:
            continue
        # its share of the one contract run's time; what the port printed (a traceback)
        # on the first record; the repro reruns the layer's whole contract tier
        out.append(record(session.opts, layer, FIXTURE, call.label, TIER, isa, 1, c,
                          repro=repro(session.opts, layer), fixture=FIXTURE, seconds=share,
                          output="" if out else session.executors[0].last_output or ""))
    return out


def merged(session, records: list) -> list:
    """The gate's records with the contract tier's: each layer's after its cases' (so the
    records stay grouped by layer), made once every case ran (a layer its cases found not
    implemented has none, and a case that broke the floating-point environment has stopped
    the gate before any contract call). The control functions' calls go with the first layer
    that has any."""
    if not selected(session.opts):
        return records
    by_layer: dict[str, list] = {}
    for r in records:
        by_layer.setdefault(r.layer, []).append(r)
    core = True
    for layer in session.layer_names:
        recs = layer_records(session, layer, core)
        core = core and not recs
        by_layer.setdefault(layer, []).extend(recs)
    return [r for recs in by_layer.values() for r in recs]
