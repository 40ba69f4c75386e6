"""Python ports: a port written with NumPy, PyTorch, JAX or CuPy, run by the worker as it runs
a C library (docs/python-ports.md).

`--port py:MODULE:OBJECT` or `--port path/to/file.py:OBJECT` names the port. The worker
imports it (load) and wraps it in a PyPort, which looks like the loaded ctypes library to
the layer modules: an attribute `crnn_<entry>` for each method `<entry>` of OBJECT, taking the
entry point's ctypes arguments. A call turns each pointer argument into a NumPy view of the
guarded buffer it points at, with the dtype and shape of abi.buffers (inputs read-only),
calls the method with every argument in the ABI's order, and copies what it returns into the
output buffers (no conversion: the dtype and shape must be the ABI's). So the guard zones,
the const-input checks, the floating-point environment checks and the records are the ones a
C port gets. The worker's C replay cannot play Python calls: it is off for a PyPort.
"""
from __future__ import annotations

import ctypes
import errno
import importlib
import importlib.util
import os
import re
import sys
import traceback
from pathlib import Path

import numpy as np

from ..ctypes_kernels import abi

_FILE_FORM = re.compile(r"^(?P<path>.+\.py):(?P<obj>[A-Za-z_][A-Za-z0-9_.]*)$")
_MODULE_FORM = re.compile(r"^py:(?P<mod>[A-Za-z_][A-Za-z0-9_.]*):(?P<obj>[A-Za-z_][A-Za-z0-9_.]*)$")
_CONFIG_NAME = re.compile(r"^[A-Za-z0-9_.:+-]{1,32}$")
DEFAULT_CONFIG = "python"          # the `isa` of a port that declares no configs
_CORE_DEFAULTS = set(abi.CORE)


class CrnnError(Exception):
    """Raised by a port's method to return the ABI error code `code` (abi.ERRORS), like a C
    entry point returning it; NotImplementedError is CRNN_E_UNSUPPORTED."""

    def __init__(self, code: int, message: str = ""):
        super().__init__(message or abi.ERRORS.get(code, f"error {code}"))
        self.code = int(code)


class PortException(abi.PortCallError):
    """A Python port's call failed: it raised, or returned what the ABI's buffers cannot take
    (a failure of the case, like an error code)."""


def is_python_port(spec) -> bool:
    """Whether `--port` names a Python port (py:MODULE:OBJECT or FILE.py:OBJECT)."""
    s = str(spec) if spec is not None else ""
    return bool(_MODULE_FORM.match(s) or _FILE_FORM.match(s))


def source_file(spec) -> Path | None:
    """The file a Python port's spec names (FILE.py:OBJECT), for its digest; None otherwise."""
    m = _FILE_FORM.match(str(spec))
    return Path(m["path"]) if m and not str(spec).startswith("py:") else None


def isa_choices(port):
    """The names `--isa` may give for `port`: the ISA paths, or for a Python port any of its
    configs (checked once it is loaded)."""
    return None if is_python_port(port) else abi.ISA_NAMES


def _import(spec: str):
    m = _MODULE_FORM.match(spec)
    if m:
        if os.getcwd() not in sys.path:   # py:MODULE is found from the current directory too
            sys.path.insert(0, os.getcwd())
        return importlib.import_module(m["mod"]), m["obj"]
    m = _FILE_FORM.match(spec)
    path = Path(m["path"])
    if not path.is_file():
        raise abi.PortError(f"python port file not found: {path}")
    folder = str(path.resolve().parent)
    if folder not in sys.path:            # its own helper modules import as they would alone
        sys.path.insert(0, folder)
    name = f"crnn_python_port_{path.stem}"
    mspec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(mspec)
    sys.modules[name] = module
    mspec.loader.exec_module(module)
    return module, m["obj"]


def load_object(spec: str):
    """The port object of `spec`: OBJECT, instantiated without arguments when it is a class.
    Raises abi.PortError (one line) when it cannot be imported or made."""
    try:
        module, name = _import(spec)
    except abi.PortError:
        raise
    except SyntaxError as e:
        raise abi.PortError(f"python port {spec} cannot be imported: SyntaxError: {e.msg} "
                            f"({e.filename}, line {e.lineno})") from None
    except BaseException as e:   # noqa: BLE001 (the import raising anything is the port's)
        where = traceback.extract_tb(e.__traceback__)[-1] if e.__traceback__ else None
        at = f" ({where.filename}, line {where.lineno})" if where else ""
        raise abi.PortError(f"python port {spec} cannot be imported: "
                            f"{_first_line(e)}{at}") from None
    obj = module
    for part in name.split("."):
        obj = _attribute(obj, part, spec)
        if obj is None:
            raise abi.PortError(f"python port {spec}: module {module.__name__} has no object "
                                f"{name!r}")
    if isinstance(obj, type):
        try:
            obj = obj()
        except BaseException as e:   # noqa: BLE001
            raise abi.PortError(f"python port {spec}: {name}() raised {_first_line(e)}") from None
    return obj


def _attribute(obj, name: str, spec: str):
    """getattr(obj, name, None), the port's: a lookup that raises (a property, __getattr__)
    is abi.PortError, one line."""
    try:
        return getattr(obj, name, None)
    except BaseException as e:   # noqa: BLE001
        raise abi.PortError(f"python port {spec}: looking up its attribute {name!r} raised "
                            f"{_first_line(e)}") from None


def load(spec: str, layers) -> "PyPort":
    """abi.load for a Python port: imports it, checks its configs, ABI version and (for the
    layers asked for) that every method they need exists. Raises abi.PortError."""
    port = PyPort(load_object(spec), spec)
    try:
        version = port.crnn_abi_version()
        advertised(port)
    except abi.PortCallError as e:       # (a PortException: raised, or not an int)
        raise abi.PortError(f"python port {spec}: {str(e).split(' (the port', 1)[0]}") from None
    if version != abi.ABI_VERSION:
        raise abi.PortError(f"port {spec} has ABI version {version}; this harness speaks "
                            f"version {abi.ABI_VERSION} (crnn_port.h)")
    if any(not abi.has(port, s) for s in abi.required_symbols(layers)):
        message = abi.missing_message(spec, abi.exported(port), layers)
        head, _, tail = message.partition(" is missing ")
        raise abi.PortError(f"{head} is missing " + tail.replace("symbol(s)", "method(s)")
                            .replace("crnn_", ""))
    return port


def advertised(port: "PyPort") -> list[str]:
    """The configs isa_available() advertises, as crnn_isa_available's mask: an int in
    0..0xffffffff with bit 0 (the first config, the base run) set, as a C port's must have
    bit 0 (scalar). Raises abi.PortError, or PortException when the method raises."""
    mask = port.crnn_isa_available()
    if not 0 <= mask <= 0xFFFFFFFF:
        raise abi.PortError(f"python port {port.spec}: isa_available() returned {mask}; it "
                            "returns a bit mask, an int in 0..0xffffffff")
    if not mask & 1:
        raise abi.PortError(f"python port {port.spec}: isa_available() returned 0x{mask:x}, "
                            f"without bit 0 (its first config, {port.isa_names[0]}: the base "
                            "run), which every port must set")
    return [n for i, n in enumerate(port.isa_names) if mask >> i & 1]


def _names(obj, attr, default, spec):
    value = _attribute(obj, attr, spec)
    if value is None:
        return list(default)
    if isinstance(value, (str, bytes, dict)) or not hasattr(value, "__iter__"):
        raise abi.PortError(f"python port {spec}: {attr} must be a list (got {_repr(value)})")
    try:
        return list(value)
    except BaseException as e:   # noqa: BLE001
        raise abi.PortError(f"python port {spec}: reading its {attr} raised "
                            f"{_first_line(e)}") from None


def _thread_counts(obj, spec):
    """The declared `threads`: a list of ints in 1..256; None (undeclared) with set_threads,
    else [1]."""
    declared = _attribute(obj, "threads", spec)
    if declared is None:
        return None if callable(_attribute(obj, "set_threads", spec)) else [1]
    counts = _names(obj, "threads", (), spec)
    if not counts or not all(isinstance(t, (int, np.integer)) and not isinstance(t, bool)
                             and 1 <= t <= 256 for t in counts):
        raise abi.PortError(f"python port {spec}: threads must be a list of thread counts, "
                            f"ints in 1..256 (got {_repr(declared)})")
    return [int(t) for t in counts]


class PyPort:
    """A Python port seen as the ctypes library: `crnn_<entry>` for each method of the port
    object, plus the core entry points' defaults. `isa_names` are the port's configs (the
    identity tier's ISA paths), `thread_counts` the thread counts it runs (None: any).
    `returned` (set by the worker: worker._only_the_worker) is called as soon as a method
    returns or raises, before anything else: a child of a fork() the method made ends there."""

    returned = None

    def __init__(self, obj, spec: str):
        self._obj, self.spec = obj, spec
        self.isa_names = [_config_name(c, spec)
                          for c in _names(obj, "configs", [DEFAULT_CONFIG], spec)]
        bad = [c for c in self.isa_names if not _CONFIG_NAME.match(c)]
        if not self.isa_names or bad or len(set(self.isa_names)) != len(self.isa_names):
            raise abi.PortError(f"python port {spec}: configs must be distinct names of 1-32 "
                                f"letters, digits or _.:+- (got {self.isa_names!r})")
        if len(self.isa_names) > 1 and not callable(_attribute(obj, "set_config", spec)):
            raise abi.PortError(f"python port {spec} declares configs {self.isa_names} but no "
                                "set_config(name) method")
        self.thread_counts = _thread_counts(obj, spec)
        self._isa, self._threads = 0, 1

    def __getattr__(self, name):
        if not name.startswith("crnn_") or name not in abi.SIGNATURES:
            raise AttributeError(name)
        method = _attribute(self._obj, name[5:], self.spec)
        if not callable(method):
            if name in _CORE_DEFAULTS:
                return self._ranged(name, getattr(self, "_default_" + name[5:]))
            raise AttributeError(name)
        if name in _CORE_DEFAULTS:
            fn = self._ranged(name, self._core(name, method))
        else:
            fn = lambda *args: self._call(name, method, args)   # noqa: E731
        fn.__name__ = name
        setattr(self, name, fn)
        return fn

    # the core entry points' defaults (docs/python-ports.md)
    def _default_abi_version(self) -> int:
        return abi.ABI_VERSION

    def _default_isa_available(self) -> int:
        return (1 << len(self.isa_names)) - 1

    def _default_set_isa(self, isa: int) -> int:
        self._isa = isa
        try:
            set_config = getattr(self._obj, "set_config", None)
        except BaseException as e:   # noqa: BLE001 (a failure of the call, as set_config's own)
            raise self._raised("set_config", e) from None
        if callable(set_config):
            return self._call_core("set_config", set_config, self.isa_names[isa])
        return 0

    def _default_get_isa(self) -> int:
        return self._isa

    def _default_set_threads(self, n: int) -> int:
        self._threads = n
        return 0

    def _ranged(self, name: str, fn):
        """crnn_set_isa and crnn_set_threads (the port's own or the default) behind the codes the
        adapter answers without calling them: CRNN_E_ARG for an index outside the configs and
        for a thread count outside 1..256 or not among the declared `threads`, CRNN_E_ISA for a
        config isa_available() does not advertise."""
        if name not in ("crnn_set_isa", "crnn_set_threads"):
            return fn

        def ranged(n):
            n = int(n)
            if name == "crnn_set_threads":
                declared = self.thread_counts is None or n in self.thread_counts
                rc = fn(n) if 1 <= n <= 256 and declared else -1        # CRNN_E_ARG
            elif not 0 <= n < len(self.isa_names):
                rc = -1                                                  # CRNN_E_ARG
            else:
                rc = fn(n) if int(self.crnn_isa_available()) >> n & 1 else -2   # CRNN_E_ISA
            if rc == 0:     # the default getters name the last selection, the port's own or not
                setattr(self, "_threads" if name == "crnn_set_threads" else "_isa", n)
            return rc
        ranged.__name__ = name
        return ranged

    def _default_get_threads(self) -> int:
        return self._threads

    def _core(self, name, method):
        def fn(*args):
            return self._call_core(name[5:], method, *args)
        return fn

    def _returned(self) -> None:
        if self.returned is not None:
            self.returned()

    def _call_core(self, what, method, *args):
        raised = None
        try:
            rc = method(*args)
        except BaseException as e:   # noqa: BLE001 (SystemExit, KeyboardInterrupt too)
            raised = e
        self._returned()
        if raised is not None:
            return self._failed(what, raised)
        if rc is None and what.startswith("set_"):
            return 0
        if not isinstance(rc, (int, np.integer)) or isinstance(rc, bool):
            raise PortException(f"{what} returned {_repr(rc)}; it returns an int")
        try:
            return int(rc)
        except BaseException as e:   # noqa: BLE001 (an int subclass of the port's)
            raise PortException(f"{what} returned an int that int() cannot read: "
                                f"{_first_line(e)}") from None

    def _failed(self, what: str, e: BaseException) -> int:
        """A method that raised `e`: NotImplementedError is CRNN_E_UNSUPPORTED, CrnnError its
        code, anything else (SystemExit, KeyboardInterrupt too) PortException."""
        if isinstance(e, NotImplementedError):
            return abi.E_UNSUPPORTED
        if isinstance(e, CrnnError):
            return e.code
        raise self._raised(what, e) from None

    def _raised(self, what: str, e: BaseException) -> PortException:
        """The port's traceback goes to the worker's output, which the gate attaches to the
        case's records; the failure itself is one line."""
        try:
            traceback.print_exception(type(e), e, e.__traceback__, file=sys.stderr)
            sys.stderr.flush()
        except BaseException:   # noqa: BLE001 (the output full, or a str() that raises)
            pass
        if isinstance(e, OSError) and e.errno == errno.EFBIG:    # (RLIMIT_FSIZE in the worker)
            from .sandbox.worker import full_output
            return PortException(f"{what} raised {_first_line(e)}: {full_output()}")
        return PortException(f"{what} raised {_first_line(e)} (the port's traceback is in this "
                             "case's output)")

    def _call(self, name: str, method, args) -> int:
        sig = abi.SIGNATURES[name][1]
        arg_names = [a.lstrip("*") for a in abi.ARGS[name].split()]
        ints = {a: int(v) for a, t, v in zip(arg_names, sig, args) if t in (abi.i32, abi.i64)}
        pointers = {a: v for a, t, v in zip(arg_names, sig, args) if t is abi.P}
        try:
            bufs = abi.buffers(name, ints, _reader(pointers))
        except (ValueError, KeyError):
            return -1                     # CRNN_E_ARG: sizes that cannot be derived
        views = {}
        for b in bufs:
            addr = pointers.get(b.name)
            if not addr and 0 in b.shape:    # no element: NULL is as good as a buffer
                views[b.name] = _empty(b.dtype, b.shape, writable=b.role != "in")
                continue
            if not addr:
                if not b.nullable:
                    return -1             # CRNN_E_ARG: a NULL the ABI does not allow
                views[b.name] = None
                continue
            if any(n < 0 for n in b.shape):
                return -1
            views[b.name] = _view(addr, b.dtype, b.shape, writable=b.role != "in")
        call_args = [views[a] if t is abi.P else (float(v) if t is abi.f64 else int(v))
                     for a, t, v in zip(arg_names, sig, args)]
        raised = None
        try:
            result = method(*call_args)
        except BaseException as e:   # noqa: BLE001 (SystemExit, KeyboardInterrupt too)
            raised = e
        self._returned()
        if raised is not None:
            return self._failed(name[5:], raised)
        if isinstance(result, int) and not isinstance(result, bool):
            return result                 # an error code (0: done in place)
        if result is not None:
            try:
                _store(name[5:], [b for b in bufs if b.role != "in"], views, result)
            except PortException:
                raise
            except BaseException as e:   # noqa: BLE001 (what it returned misbehaved when read)
                raise PortException(f"{name[5:]} returned a value that raised "
                                    f"{_first_line(e)} when read") from None
        return 0


def _reader(pointers: dict):
    """abi.buffers' `read`: the first n values of the input buffer at pointer `arg`."""
    def read(arg, dtype, n):
        addr = pointers.get(arg)
        if not addr or n <= 0:
            return []
        return _view(addr, abi.DTYPES[dtype], (n,), writable=False).tolist()
    return read


def _empty(dtype: str, shape: tuple, writable: bool) -> np.ndarray:
    a = np.zeros(shape, np.dtype(dtype))
    a.flags.writeable = writable
    return a


def _view(addr: int, dtype: str, shape: tuple, writable: bool) -> np.ndarray:
    dt = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
    raw = (ctypes.c_char * nbytes).from_address(addr)
    a = np.frombuffer(raw, dt, count=nbytes // dt.itemsize).reshape(shape)
    if not writable:
        a.flags.writeable = False
    return a


def _store(what: str, written: list, views: dict, result) -> None:
    """Copies a method's returned outputs into their buffers: one value (the only written
    argument, or the only `out` one), a tuple or list (every written argument in order, None
    for one written in place) or a dict by argument name."""
    names = [b.name for b in written]
    if isinstance(result, dict):
        unknown = [k for k in result if k not in names]
        if unknown:
            raise PortException(f"{what} returned {', '.join(map(repr, unknown))}, which "
                                f"{'is' if len(unknown) == 1 else 'are'} not among its "
                                f"outputs ({', '.join(names)})")
        pairs = [(b, result[b.name]) for b in written if b.name in result]
    elif isinstance(result, (tuple, list)):
        if len(result) != len(written):
            raise PortException(f"{what} returned {len(result)} values; it has {len(written)} "
                                f"outputs ({', '.join(names)}), in that order (None for one "
                                "written in place)")
        pairs = list(zip(written, result))
    else:
        outs = [b for b in written if b.role == "out"]
        one = written if len(written) == 1 else outs if len(outs) == 1 else None
        if one is None:
            raise PortException(f"{what} returned one value; it has {len(written)} outputs "
                                f"({', '.join(names)}): return a tuple in that order or a dict")
        pairs = [(one[0], result)]
    for b, value in pairs:
        view = views.get(b.name)
        if value is None or view is None:
            continue
        a = _as_numpy(what, b.name, value)
        if view.ctypes.data == a.ctypes.data and a.shape == view.shape:
            continue                      # the buffer itself, written in place
        if a.dtype != view.dtype or not (a.shape == view.shape
                                         or (a.shape == () and view.shape == (1,))):
            raise PortException(f"{what} returned {b.name} as {_kind(a)}; the ABI's {b.name} is "
                                f"{_kind(view)} (no conversion is made: cast or reshape it "
                                "in the port)")
        np.copyto(view, a.reshape(view.shape), casting="no")


def _first_line(e: BaseException) -> str:
    """'TypeName: the first line of str(e)', for an exception of the port's: its str() (or
    its type's name) may raise too, which is said instead."""
    try:
        kind = str(type(e).__name__)
    except BaseException:   # noqa: BLE001
        kind = "an exception"
    try:
        text = str(e).strip()
    except BaseException as inner:   # noqa: BLE001
        try:
            what = str(type(inner).__name__)
        except BaseException:   # noqa: BLE001
            what = "an exception"
        return f"{kind} (whose str() raised {what})"
    return kind + (f": {text.splitlines()[0]}" if text else "")


def _repr(value) -> str:
    """repr(value) of a port's object, or what its repr() raised."""
    try:
        return repr(value)
    except BaseException as e:   # noqa: BLE001
        return f"a {type(value).__name__} (whose repr() raised {_first_line(e)})"


def _config_name(c, spec) -> str:
    if isinstance(c, str):
        return str.__str__(c)
    try:
        return str(c)
    except BaseException as e:   # noqa: BLE001
        raise abi.PortError(f"python port {spec}: a config's str() raised "
                            f"{_first_line(e)}") from None


def _kind(a) -> str:
    return f"{a.dtype.str if a.dtype.byteorder not in '=|' else a.dtype.name}{list(a.shape)}"


def _as_numpy(what: str, arg: str, value) -> np.ndarray:
    """`value` as a NumPy array without a cast: a NumPy array as it is, a DLPack producer
    (torch, JAX, CuPy) through np.from_dlpack, anything else with __array__ (or a Python or
    NumPy scalar) through np.asarray."""
    if isinstance(value, np.ndarray):
        return value
    problem = ""
    if hasattr(value, "__dlpack__"):
        try:
            return np.from_dlpack(value)
        except Exception as e:   # noqa: BLE001 (a device tensor, requires_grad, bfloat16 ...)
            problem = _first_line(e)
    if hasattr(value, "__array__") or isinstance(value, (float, int, complex, np.generic)):
        try:
            return np.asarray(value)
        except Exception as e:   # noqa: BLE001
            problem = problem or _first_line(e)
    raise PortException(f"{what} returned {arg} as a {type(value).__module__}."
                        f"{type(value).__name__}, which NumPy cannot read"
                        + (f" ({problem})" if problem else "")
                        + ": return a host array (e.g. tensor.detach().cpu())")


def signature_table() -> str:
    """The Markdown table of every method a Python port may define, from abi.SIGNATURES,
    abi.ARGS and abi.BUFFERS (docs/python-ports.md holds it; a test compares the two)."""
    scalar = {abi.i32: "int", abi.i64: "int", abi.u32: "int", abi.f64: "float"}
    rows = ["| method | arguments, in order | a returned value fills |", "|---|---|---|"]
    for name, (_, types) in abi.SIGNATURES.items():
        if name in _CORE_DEFAULTS:
            continue
        specs = {s.split(":", 1)[0]: s for s in abi.BUFFERS.get(name, "").split()}
        args, filled = [], []
        for arg, t in zip((a.lstrip("*") for a in abi.ARGS[name].split()), types):
            if t is not abi.P:
                args.append(f"`{arg}` {scalar[t]}")
                continue
            dtype, rest = specs[arg].split(":", 1)[1].split("]", 1)   # (as abi.buffers reads it)
            role = rest.lstrip(":") or "in"
            null = " or None" if role.endswith("?") else ""
            role, dtype = role.rstrip("?"), dtype + "]"
            args.append(f"`{arg}` {dtype} {role}{null}")
            if role != "in":
                filled.append(f"`{arg}`")
        rows.append(f"| `{name[5:]}` | {', '.join(args)} | {', '.join(filled)} |")
    return "\n".join(rows)
