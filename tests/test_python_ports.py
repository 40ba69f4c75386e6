"""Python ports (docs/python-ports.md): `--port FILE.py:OBJECT` / `py:MODULE:OBJECT` run in the
worker through harness/pyport.py with the C port's checks and verdicts; the two example
ports pass the float64 and pytorch tiers of every layer."""
from __future__ import annotations

import ctypes
import json
import re
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from crnn_conformance.ctypes_kernels import abi
from crnn_conformance.harness import pyport

from testports import ROOT, cannot_run, gate  # noqa: E402

DOC = ROOT / "docs" / "python-ports.md"
NUMPY_PORT = f"{ROOT / 'examples' / 'numpy_port.py'}:Port"
TORCH_PORT = f"{ROOT / 'examples' / 'torch_port.py'}:Port"

LINEAR = """
import numpy as np

class Port:
    def linear_forward(self, x, W, b, T, I, O, y):
        return x @ W.T + b

    def linear_backward(self, x, W, dY, T, I, O, dx, dW, db):
        return dY @ W, dY.T @ x, dY.sum(axis=0)
"""


def port_file(tmp_path, source: str, name: str = "port.py") -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(source))
    return str(path)


def linear_gate(tmp_path, source, *args):
    """The gate on linear's float64 tier with the port `source` (Port in a file)."""
    return gate("--port", port_file(tmp_path, source) + ":Port", "--layers", "linear",
                "--tiers", "float64", "-q", *args)


# ---- the signatures: one description with the C ABI ----------------------------------------

def test_doc_method_table_is_the_abi_table():
    text = DOC.read_text()
    start = text.index("<!-- signatures:")
    table = text[text.index("\n", start) + 1:text.index("<!-- end signatures -->")].strip()
    assert table == pyport.signature_table()


def test_method_table_lists_every_entry_point_with_its_buffers():
    rows = pyport.signature_table().splitlines()[2:]
    layer_symbols = {s for syms in abi.LAYER_SYMBOLS.values() for s in syms}
    assert {r.split("`")[1] for r in rows} == {s[5:] for s in layer_symbols}
    adamw = next(r for r in rows if r.startswith("| `adamw`"))
    assert "`p` f32[n] inout" in adamw and "`g` f32[n] in," in adamw


def _address(a):
    return a.ctypes.data


def test_adapter_passes_views_of_the_abi_shapes():
    seen = {}

    class Port:
        def linear_backward(self, x, W, dY, T, I, O, dx, dW, db):
            seen.update(x=(x.dtype.str, x.shape, x.flags.writeable),
                        dx=None if dx is None else (dx.dtype.str, dx.shape, dx.flags.writeable),
                        dW=(dW.dtype.str, dW.shape, dW.flags.writeable), ints=(T, I, O))
            dW[...] = 1
            return {"db": np.full(O, 2, np.float32)}

    lib = pyport.PyPort(Port(), "test")
    x, W, dY = np.ones((3, 5), np.float32), np.ones((4, 5), np.float32), np.ones((3, 4), np.float32)
    dW, db = np.zeros((4, 5), np.float32), np.zeros(4, np.float32)
    rc = lib.crnn_linear_backward(_address(x), _address(W), _address(dY), 3, 5, 4, None,
                                  _address(dW), _address(db))
    assert rc == 0
    assert seen == {"x": ("<f4", (3, 5), False), "dx": None, "dW": ("<f4", (4, 5), True),
                    "ints": (3, 5, 4)}
    assert (dW == 1).all() and (db == 2).all()
    want = {b.name: (b.dtype, b.shape) for b in abi.buffers("crnn_linear_backward",
                                                            {"T": 3, "I": 5, "O": 4})}
    assert want["x"] == seen["x"][:2] and want["dW"] == seen["dW"][:2]


def test_adapter_refuses_a_null_the_abi_refuses_without_calling():
    called = []

    class Port:
        def linear_forward(self, *args):
            called.append(args)

    lib = pyport.PyPort(Port(), "test")
    x = np.ones((2, 2), np.float32)
    assert lib.crnn_linear_forward(_address(x), None, _address(x), 2, 2, 2, _address(x)) == -1
    assert called == []


def test_adapter_answers_set_isa_and_set_threads_out_of_range_without_calling():
    """docs/port-abi.md's error contract on a Python port's configs and declared threads: an
    index outside the configs or a count outside 1..256 or undeclared is CRNN_E_ARG, a config
    isa_available() does not advertise CRNN_E_ISA; the port's own methods never see them."""
    called = []

    class Port:
        configs, threads = ["a", "b"], [1, 2]

        def isa_available(self):
            return 0b01                   # "b" is declared but not available here

        def set_config(self, name):
            called.append(name)

        def set_threads(self, n):
            called.append(n)

    lib = pyport.PyPort(Port(), "test")
    assert [lib.crnn_set_isa(i) for i in (-1, 2, 4, 1)] == [-1, -1, -1, -2]
    assert [lib.crnn_set_threads(n) for n in (0, 3, 257, -1)] == [-1] * 4
    assert called == []
    assert (lib.crnn_set_isa(0), lib.crnn_set_threads(2)) == (0, 0) and called == ["a", 2]
    bare = pyport.PyPort(object(), "test")           # the defaults: one config, 1 thread
    assert [bare.crnn_set_isa(i) for i in (-1, 1, 0)] == [-1, -1, 0]
    assert [bare.crnn_set_threads(n) for n in (0, 2, 1)] == [-1, -1, 0]


# ---- exactness of the conversions -----------------------------------------------------------

PAYLOAD = np.array([0x7FA12345, 0xFFC00001, 0x80000000, 0x00000001], np.uint32).view(np.float32)


class _ArrayOnly:
    def __init__(self, a):
        self.a = a

    def __array__(self, dtype=None, copy=None):
        return self.a


def _routes():
    yield "numpy", PAYLOAD.copy()
    yield "__array__", _ArrayOnly(PAYLOAD.copy())
    try:
        import torch
    except ImportError:
        return
    yield "torch", torch.from_numpy(PAYLOAD.copy())


@pytest.mark.parametrize("route,value", list(_routes()), ids=lambda v: v if isinstance(v, str) else "")
def test_returned_bits_arrive_unchanged(route, value):
    """A signalling NaN payload, a negative quiet NaN, -0 and the smallest subnormal."""
    out = np.zeros(4, np.float32)
    pyport._store("sigmoid", abi.buffers("crnn_sigmoid", {"n": 4})[1:], {"y": out}, value)
    assert out.view(np.uint32).tolist() == PAYLOAD.view(np.uint32).tolist()


@pytest.mark.parametrize("value,message", [
    (np.zeros(4, np.float64), "returned y as float64[4]; the ABI's y is float32[4]"),
    (np.zeros(4, ">f4"), "returned y as >f4[4]"),
    (np.zeros((2, 2), np.float32), "returned y as float32[2, 2]"),
    ((np.zeros(4, np.float32), None), "returned 2 values; it has 1 outputs (y)"),
    ({"z": np.zeros(4, np.float32)}, "returned 'z', which is not among its outputs (y)"),
    ("text", "returned y as a builtins.str, which NumPy cannot read"),
])
def test_no_silent_conversion(value, message):
    out = np.zeros(4, np.float32)
    with pytest.raises(pyport.PortException) as e:
        pyport._store("sigmoid", abi.buffers("crnn_sigmoid", {"n": 4})[1:], {"y": out}, value)
    assert message in str(e.value)
    assert (out == 0).all()


def test_a_zero_d_value_fills_a_one_element_buffer():
    out = np.zeros(1, np.float64)
    pyport._store("ctc", [b for b in abi.buffers("crnn_ctc", {"T": 0, "K": 2, "L": 0})
                          if b.role != "in"], {"loss": out, "dlogits": np.zeros((0, 2), np.float32)},
                  {"loss": -0.0})
    assert out.view(np.uint64)[0] == 1 << 63


# ---- the gate: loading -----------------------------------------------------------------------

@pytest.mark.parametrize("source,obj,fragments", [
    (None, "Port", ["python port file not found"]),
    ("class Port:\n    def f(self:\n", "Port", ["cannot be imported: SyntaxError", "line 2"]),
    ("raise RuntimeError('no GPU here')\n", "Port", ["cannot be imported: RuntimeError: no GPU here"]),
    ("class Port:\n    pass\n", "Nope", ["has no object 'Nope'"]),
    ("class Port:\n    def __init__(self):\n        1 / 0\n", "Port", ["Port() raised ZeroDivisionError"]),
    ("class Port:\n    configs = ['a b']\n", "Port", ["configs must be distinct names"]),
    ("class Port:\n    def abi_version(self):\n        return 2\n", "Port", ["has ABI version 2"]),
    ("class Port:\n    def dot16(self, a, b, n, out):\n        return 0\n", "Port",
     ["missing 2 method(s)", "linear: linear_forward, linear_backward",
      "--layers available"]),
    # (before: an IndexError in the gate, or "crashed while loading (exited with status 1)")
    ("class Port:\n    def isa_available(self):\n        return 0\n", "Port",
     ["isa_available() returned 0x0, without bit 0 (its first config, python"]),
    ("class Port:\n    def isa_available(self):\n        return -1\n", "Port",
     ["isa_available() returned -1; it returns a bit mask"]),
    ("class Port:\n    def abi_version(self):\n        return True\n", "Port",
     ["abi_version returned True; it returns an int"]),
    ("class Port:\n    def abi_version(self):\n        return 1.0\n", "Port",
     ["abi_version returned 1.0; it returns an int"]),
    ("class Port:\n    def abi_version(self):\n        raise KeyboardInterrupt\n", "Port",
     ["abi_version raised KeyboardInterrupt"]),
    ("class Port:\n    threads = ['x']\n", "Port",
     ["threads must be a list of thread counts, ints in 1..256 (got ['x'])"]),
    ("class Port:\n    threads = 5\n", "Port", ["threads must be a list (got 5)"]),
    ("class Port:\n    configs = 'cpu'\n", "Port", ["configs must be a list (got 'cpu')"]),
])
def test_a_port_that_cannot_be_loaded_is_one_line_and_exit_2(tmp_path, source, obj, fragments):
    path = tmp_path / "port.py" if source is None else port_file(tmp_path, source)
    r = gate("--port", f"{path}:{obj}", "--layers", "dot16,linear", "-q")
    cannot_run(r, *fragments)


def test_py_module_form(tmp_path):
    port_file(tmp_path, LINEAR, "my_linear_port.py")
    r = gate("--port", "py:my_linear_port:Port", "--layers", "linear", "--tiers", "float64",
             "-q", env={"PYTHONPATH": str(tmp_path)})
    assert r.returncode == 0, r.stdout + r.stderr
    assert "ISA python; threads 1" in r.stdout


def test_worked_example_from_the_docs(tmp_path):
    text = DOC.read_text()
    at = text.index("## A worked example")
    source = re.search(r"```python\n(.*?)```", text[at:], re.S).group(1)
    command, expected = re.search(r"```sh\n\$ crnn-conformance (.*?)\n(.*?)\n```", text[at:],
                                  re.S).groups()
    (tmp_path / "tiny_port.py").write_text(source)
    args = command.split()
    args[args.index("--port") + 1] = f"{tmp_path / 'tiny_port.py'}:Port"
    r = gate(*args[1:])
    assert r.returncode == 0, r.stdout + r.stderr
    strip = lambda s: re.sub(r"; [0-9.]+ s\)", ")", s)   # noqa: E731 (the time varies)
    assert strip(r.stdout.strip().splitlines()[-1]) == strip(expected.strip())


# ---- the gate: a port's failures stay in their case -----------------------------------------

def test_an_exception_fails_the_case_with_its_traceback(tmp_path):
    source = LINEAR.replace("return dY @ W, dY.T @ x, dY.sum(axis=0)",
                            "if T == 16:\n            raise ValueError('T16 is unlucky')\n"
                            "        return dY @ W, dY.T @ x, dY.sum(axis=0)")
    r = linear_gate(tmp_path, source, "--report-dir", str(tmp_path / "out"))
    assert r.returncode == 1, r.stdout + r.stderr
    assert "linear_backward raised ValueError: T16 is unlucky (the port's traceback is in this " \
           "case's output)" in r.stdout
    doc = json.loads((tmp_path / "out" / "results.json").read_text())
    failed = [t for t in doc["tensors"] if not t["passed"]]
    assert failed and all(t["case"].startswith("T16") for t in failed)
    # (the output of a run is on its first record: here the forward's y, compared as usual)
    case = failed[0]["case"]
    output = next(t["output"] for t in doc["tensors"] if t["case"] == case and t.get("output"))
    assert "Traceback (most recent call last)" in output and "T16 is unlucky" in output
    assert "port.py" in output and "in linear_backward" in output
    html = (tmp_path / "out" / "index.html").read_text()
    assert "T16 is unlucky" in html and "Traceback (most recent call last)" in html
    assert "PASS" not in r.stdout.splitlines()[-1]
    assert any(t["passed"] for t in doc["tensors"])          # the other cases still ran


@pytest.mark.parametrize("raised", ["KeyboardInterrupt", "GeneratorExit", "SystemExit",
                                    "Boom"])
def test_a_base_exception_fails_the_case_like_any_other(tmp_path, raised):
    """Before: KeyboardInterrupt, GeneratorExit and BaseException subclasses escaped the
    adapter and ended the worker ("the port crashed ... exited with status 1")."""
    source = ("class Boom(BaseException):\n    pass\n\n" + LINEAR).replace(
        "return dY @ W, dY.T @ x, dY.sum(axis=0)",
        f"if T == 16:\n            raise {raised}('from the port')\n"
        "        return dY @ W, dY.T @ x, dY.sum(axis=0)")
    r = linear_gate(tmp_path, source)
    assert r.returncode == 1, r.stdout + r.stderr
    assert f"linear_backward raised {raised}: from the port (the port's traceback" in r.stdout
    assert "crashed" not in r.stdout


def test_the_traceback_is_kept_when_sys_stderr_is_replaced(tmp_path, monkeypatch):
    """In-process (the pytest plugin's way), with sys.stdout and sys.stderr not the process's
    file descriptors: what the port prints still goes to its run's output."""
    import io
    from crnn_conformance.harness.runner import GateOptions, run_gate
    monkeypatch.setattr(sys, "stdout", io.StringIO())
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    source = LINEAR.replace("return x @ W.T + b", "print('from the port')\n"
                            "        raise KeyError('lost?')")
    result = run_gate(GateOptions(port=port_file(tmp_path, source) + ":Port", layers=["linear"],
                                  tiers=("float64",), threads=(1,), case="T16_I37_O37"))
    outputs = [r.output for r in result.records if r.output]
    assert len(outputs) == 1 and "from the port" in outputs[0] and "KeyError: 'lost?'" in outputs[0]


@pytest.mark.parametrize("change,fragment", [
    ("return x @ W.T + b", "return (x @ W.T + b).astype(np.float64)",
     ), ("return x @ W.T + b", "return (x @ W.T + b).reshape(-1)"),
])
def test_a_wrong_return_fails_the_case_with_one_line(tmp_path, change, fragment):
    r = linear_gate(tmp_path, LINEAR.replace(change, fragment))
    assert r.returncode == 1, r.stdout + r.stderr
    line = next(l for l in r.stdout.splitlines() if "returned y as" in l)
    assert "the ABI's y is float32[" in line and "no conversion is made" in line
    assert "Traceback" not in r.stdout + r.stderr


def test_an_unwritten_output_is_poison_left(tmp_path):
    r = linear_gate(tmp_path, LINEAR.replace("return x @ W.T + b", "y[:, 1:] = (x @ W.T + b)[:, 1:]"))
    assert r.returncode == 1, r.stdout + r.stderr
    assert re.search(r"linear/\S+/y tier=float64 .*poison left \(never written\)", r.stdout)


def test_a_modified_input_fails_the_case(tmp_path):
    r = linear_gate(tmp_path, LINEAR.replace("return x @ W.T + b",
                                             "W.setflags(write=True)\n        W[0, 0] += 1\n"
                                             "        return x @ W.T + b"))
    assert r.returncode == 1, r.stdout + r.stderr
    assert "crnn_linear_forward modified input W" in r.stdout and "it is const" in r.stdout


def test_writing_a_read_only_input_raises_in_the_port(tmp_path):
    r = linear_gate(tmp_path, LINEAR.replace("return x @ W.T + b", "x[0, 0] = 0\n        return 0"))
    assert r.returncode == 1
    assert "linear_forward raised ValueError: assignment destination is read-only" in r.stdout


def test_a_crash_is_isolated(tmp_path):
    r = linear_gate(tmp_path, LINEAR.replace("return x @ W.T + b",
                                             "import os\n        if T == 16:\n"
                                             "            os.abort()\n        return x @ W.T + b"))
    assert r.returncode == 1, r.stdout + r.stderr
    assert "SIGABRT" in r.stdout and "crnn_linear_forward" in r.stdout


def test_a_hang_is_isolated(tmp_path):
    r = linear_gate(tmp_path, LINEAR.replace("return x @ W.T + b",
                                             "import time\n        if T == 16 and I == 37:\n"
                                             "            time.sleep(600)\n"
                                             "        return x @ W.T + b"), "--timeout", "3")
    assert r.returncode == 1, r.stdout + r.stderr
    hung = [l for l in r.stdout.splitlines() if l.startswith("FAIL ")]
    assert hung and all("T16_I37" in l and "crnn_linear_forward" in l for l in hung), hung


# ---- partial ports, error codes --------------------------------------------------------------

def test_missing_and_unsupported_methods_are_not_implemented(tmp_path):
    source = LINEAR + textwrap.dedent("""
        def dot16(self, a, b, n, out):
            raise NotImplementedError
    """).replace("\n", "\n    ")
    path = port_file(tmp_path, source) + ":Port"
    r = gate("--port", path, "--layers", "available", "--tiers", "float64", "-q",
             "--json", str(tmp_path / "r.json"))
    assert r.returncode == 0, r.stdout + r.stderr
    meta = json.loads((tmp_path / "r.json").read_text())["meta"]
    assert set(meta["not_implemented"]) == set(abi.LAYER_SYMBOLS) - {"linear"}
    assert "missing symbol(s) crnn_conv_forward" in meta["not_implemented"]["conv"]
    assert "CRNN_E_UNSUPPORTED" in meta["not_implemented"]["dot16"]
    strict = gate("--port", path, "--layers", "dot16", "--tiers", "float64", "-q")
    assert strict.returncode == 1 and "returned -4 (CRNN_E_UNSUPPORTED)" in strict.stdout


def test_a_layer_unsupported_on_one_case_is_named_partly_implemented(tmp_path):
    """linear answering CRNN_E_UNSUPPORTED on one case: the layer is not implemented, and
    its other cases' checks still run. The verdict said '28 tensors in 0 layers; not
    implemented: linear' without a word of the checks that ran."""
    source = LINEAR.replace("return x @ W.T + b", "if T == 16 and I == 37 and O == 37:\n"
                            "            return -4\n        return x @ W.T + b")
    r = gate("--port", port_file(tmp_path, source) + ":Port", "--layers", "available",
             "--tiers", "float64", "-q")
    assert r.returncode == 0, r.stdout + r.stderr
    assert re.search(r"not implemented: .*linear \(partly: \d+ checks of the cases it "
                     r"answered\)", r.stdout), r.stdout


@pytest.mark.parametrize("code", ["return -3", "raise CrnnError(-3)"])
def test_an_error_code_fails_the_case(tmp_path, code):
    source = ("from crnn_conformance.harness.pyport import CrnnError\n" + LINEAR).replace(
        "return x @ W.T + b", f"if T == 16:\n            {code}\n        return x @ W.T + b")
    r = linear_gate(tmp_path, source)
    assert r.returncode == 1
    assert "crnn_linear_forward returned -3 (CRNN_E_NOMEM)" in r.stdout


# ---- a wrong pool winner or a failed conv: the comparisons judge them, never crash -----------

WINNERS = f"""
import sys
sys.path.insert(0, {str(ROOT / 'examples')!r})
import numpy as np
import numpy_port


class Port(numpy_port.Port):
    def conv_forward(self, x, H, W, C, Wt, b, Out, kh, kw, padH, padW, poolH, poolW,
                     conv, pooled, winners):
        conv[...], pooled[...], w = numpy_port.conv_forward(x, Wt, b, kh, kw, padH, padW,
                                                            poolH, poolW)
        w.reshape(-1)[1] = WINNER   # window [0, 0, 1]
        winners[...] = w
"""


@pytest.mark.parametrize("winner", ["2 ** 31 - 1", "-2", "0", "Out * (W + 2) + 1"])
@pytest.mark.parametrize("layer, tiers", [("conv", "float64,pytorch"), ("step", "pytorch")])
def test_a_winner_that_is_no_cell_of_its_window_fails_the_winners(tmp_path, winner, layer,
                                                                   tiers):
    """Window [0, 0, 1]'s winner past the conv output, below -1, in channel 0, or a cell of
    the window below it: none is a pool decision. Before, the float64 and pytorch tiers read
    the conv value at the index: an out-of-range one ended the gate with an internal error
    (IndexError, exit 2), an in-range one was judged as if a decision."""
    source = WINNERS.replace("WINNER", winner)
    r = gate("--port", port_file(tmp_path, source) + ":Port", "--layers", layer, "--tiers",
             tiers, "--threads", "1", "--case", "b1_*W[67]?" if layer == "conv" else
             "crnn_v0_trained_b4")
    assert r.returncode == 1, r.stdout[-3000:] + r.stderr
    failed = [x for x in r.stdout.splitlines() if x.startswith("FAIL ") and "/winners " in x]
    assert failed and all("whose winner is neither -1 nor a cell of the window" in x
                          and "usage=inf" in x for x in failed), r.stdout[-3000:]
    assert "internal error" not in r.stderr


def test_a_failed_conv_forward_in_the_step_fails_the_case(tmp_path):
    """The pytorch_step case calls the port's conv forward for its pool decisions; when that
    call fails, the gradients are judged without any flip. Before: KeyError 'winners', an
    internal error (exit 2)."""
    source = WINNERS.replace("""        conv[...], pooled[...], w""", """        return -1
        conv[...], pooled[...], w""")
    r = gate("--port", port_file(tmp_path, source) + ":Port", "--layers", "step", "--tiers",
             "pytorch", "--threads", "1", "--case", "crnn_v0_trained_b4", "-q")
    assert r.returncode == 1, r.stdout[-3000:] + r.stderr
    assert "crnn_conv_forward returned -1" in r.stdout and "internal error" not in r.stderr


# ---- identity: configs and threads, every run through Python ---------------------------------

CONFIGS = LINEAR.replace("class Port:", """class Port:
    configs = ["ref", "shifted"]
    threads = [1, 2]
    shift = 0

    def set_config(self, name):
        self.shift = {"ref": 0, "shifted": 1}[name]

    def set_threads(self, n):
        self.n = n
""").replace("return x @ W.T + b", """y = x @ W.T + b
        if self.shift and T == 16:
            y = np.nextafter(y, np.float32(np.inf))   # one ulp: a legal value, other bits
        return y""")


@pytest.mark.skipif(__import__("platform").machine() not in ("x86_64", "aarch64"),
                    reason="x86-64 or aarch64")
def test_a_config_named_for_another_architectures_isa_is_left_out(tmp_path):
    """As a C port's ISA bit (tests/test_worker_hardening.py): a config named neon on x86-64
    (avx2 on aarch64) is not run, and stderr says so. Before: it was gated under that name."""
    other = "neon" if __import__("platform").machine() == "x86_64" else "avx2"
    source = LINEAR.replace("class Port:\n", f"class Port:\n    configs = ['cpu', '{other}']\n\n"
                            "    def set_config(self, name):\n        pass\n\n")
    r = linear_gate(tmp_path, source)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "ISA cpu;" in r.stdout.splitlines()[-1]
    assert f"cannot execute: {other} (an " in r.stderr


def test_configs_are_the_identity_tiers_isas(tmp_path):
    path = port_file(tmp_path, CONFIGS) + ":Port"
    r = gate("--port", path, "--layers", "linear", "--tiers", "float64,identity", "-q",
             "--json", str(tmp_path / "r.json"))
    assert r.returncode == 1, r.stdout + r.stderr
    doc = json.loads((tmp_path / "r.json").read_text())
    ident = [t for t in doc["tensors"] if t["tier"] == "identity"]
    assert {(t["isa"], t["threads"]) for t in ident} == {("ref", 2), ("shifted", 1), ("shifted", 2)}
    bad = {(t["isa"], t["case"].startswith("T16"), t["tensor"]) for t in ident if not t["passed"]}
    assert bad == {("shifted", True, "y")}
    assert all(t["passed"] for t in doc["tensors"] if t["tier"] == "float64")
    assert {t["repro"].split("--runs ")[1] for t in ident if not t["passed"]} == {
        "ref:1,shifted:1", "ref:1,shifted:2"}   # the base and the config that differed
    only = gate("--port", path, "--layers", "linear", "--tiers", "identity", "--isa", "ref",
                "-q")
    assert only.returncode == 0, only.stdout + only.stderr
    cannot_run(gate("--port", path, "--layers", "linear", "--threads", "3", "-q"),
               "runs thread count(s) 1, 2 only")


def test_a_port_without_one_thread_has_its_base_run_at_its_fewest(tmp_path):
    """threads = [2, 4] (a BLAS pool fixed at 2 or 4): the tiers judge config ref at 2 threads
    and identity compares the rest with it; --runs takes the port's config names. Before:
    the base run was always 1 thread, which the port refuses, so every case failed
    (crnn_set_threads(1) returned -1), and --runs refused any name but the C ISA paths."""
    path = port_file(tmp_path, CONFIGS.replace("threads = [1, 2]", "threads = [2, 4]")) + ":Port"
    r = gate("--port", path, "--layers", "linear", "--tiers", "float64,identity", "--isa", "ref", "--threads", "1,2,4",
             "--json", str(tmp_path / "r.json"))
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads((tmp_path / "r.json").read_text())
    assert {(t["tier"], t["threads"]) for t in doc["tensors"]} == {("float64", 2),
                                                                  ("identity", 4)}
    assert doc["meta"]["threads"] == [2, 4]
    runs = gate("--port", path, "--layers", "linear", "--tiers", "float64", "--runs",
                "shifted:4", "-q")
    assert runs.returncode == 0, runs.stdout + runs.stderr
    cannot_run(gate("--port", path, "--layers", "linear", "--runs", "ref:1", "-q"),
               "runs thread count(s) 2, 4 only (--runs ref:1)")
    colon = port_file(tmp_path, CONFIGS.replace('"shifted"', '"cuda:0"'), "colon.py") + ":Port"
    runs = gate("--port", colon, "--layers", "linear", "--tiers", "float64", "--runs",
                "cuda:0:2", "-q")      # a config name with a colon: the count is after the last
    assert runs.returncode == 0 and "runs cuda:0:2" in runs.stdout, runs.stdout + runs.stderr


def test_the_summary_names_the_base_runs_threads(tmp_path):
    """gate --threads 3 runs the base run at 1 thread and the 3-thread runs against it: the
    summary and meta name both (they said "threads 3" alone)."""
    r = gate("--layers", "dot16", "--threads", "3", "--json", str(tmp_path / "r.json"), "-q")
    assert r.returncode == 0 and "threads 1,3;" in r.stdout, r.stdout + r.stderr
    assert json.loads((tmp_path / "r.json").read_text())["meta"]["threads"] == [1, 3]


def test_the_c_replay_is_off_for_a_python_port(monkeypatch):
    from crnn_conformance.harness.sandbox import worker
    from crnn_conformance.harness.sandbox.fpenv import fpenv_helper
    helper = fpenv_helper()
    if helper is None or not helper.replays or helper.crnn_h_arch() not in (1, 2):
        pytest.skip("no C replay on this machine")
    monkeypatch.delenv("CRNN_NO_REPLAY", raising=False)
    from crnn_conformance.ctypes_kernels.build import build
    lib = abi.load(build())
    assert worker._Traced(lib, None, helper).replays
    assert not worker._Traced(pyport.PyPort(object(), "test"), None, helper).replays


def test_every_run_goes_through_python(tmp_path):
    """No replay of a Python port's calls: the port counts its calls in a file."""
    log = tmp_path / "calls.txt"
    source = LINEAR.replace("class Port:", "class Port:\n    threads = [1, 2, 3]\n\n"
                            "    def set_threads(self, n):\n        pass\n").replace(
        "return x @ W.T + b", f"open({str(log)!r}, 'a').write('x')\n        return x @ W.T + b")
    r = gate("--port", port_file(tmp_path, source) + ":Port", "--layers", "linear",
             "--tiers", "float64,identity", "--case", "T16*", "--jobs", "1", "-q",
             "--json", str(tmp_path / "r.json"))
    assert r.returncode == 0, r.stdout + r.stderr
    cases = {t["case"] for t in json.loads((tmp_path / "r.json").read_text())["tensors"]}
    assert len(log.read_text()) == 3 * len(cases)       # 3 runs (threads 1, 2, 3) a case


# ---- the contract tier on a Python port ------------------------------------------------------

def _contract(doc) -> dict:
    return {(t["layer"], t["tensor"]): t for t in doc["tensors"] if t["tier"] == "contract"}


def test_contract_tier_runs_on_a_python_port_with_configs(tmp_path):
    """The tier maps the base run's config name to its index in the port's own list (it once
    stopped the gate, exit 2, on a name that is not one of the four ISAs). The adapter answers
    every invalid call of linear (a negative size gives a buffer a negative extent; a NULL)
    and NumPy's matmul gives the empty edges, so this port keeps linear's contract unchecked."""
    r = gate("--port", port_file(tmp_path, CONFIGS) + ":Port", "--layers", "linear",
             "--tiers", "contract", "-q", "--json", str(tmp_path / "r.json"))
    assert r.returncode == 0, r.stdout + r.stderr
    recs = _contract(json.loads((tmp_path / "r.json").read_text()))
    assert {t["isa"] for t in recs.values()} == {"ref"}
    assert {("linear", c) for c in ("linear_forward(T=-1)", "linear_backward(dx=NULL)",
                                    "set_isa(-1)", "set_isa(5)", "set_threads(0)",
                                    "set_threads(257)")} <= set(recs)


def test_a_python_port_raising_on_a_contract_call_fails_that_call(tmp_path):
    source = """
        class Port:
            def dot16(self, a, b, n, out):
                if n == 0:
                    raise ValueError("no terms")
                return a @ b
    """
    r = gate("--port", port_file(tmp_path, source) + ":Port", "--layers", "dot16", "--tiers",
             "contract", "-q", "--json", str(tmp_path / "r.json"))
    assert r.returncode == 1, r.stdout + r.stderr
    recs = _contract(json.loads((tmp_path / "r.json").read_text()))
    failed = {t for (_, t), rec in recs.items() if not rec["passed"]}
    assert failed == {"dot16(n=0)", "dot16(n=0, a=b=NULL)"}
    assert recs[("dot16", "dot16(n=0)")]["note"] == (
        "dot16 raised ValueError: no terms (the port's traceback is in this case's output)")
    output = next(rec["output"] for rec in recs.values() if rec.get("output"))
    assert "Traceback (most recent call last)" in output and "no terms" in output


def test_the_selection_is_read_back(tmp_path):
    """A port's own set_threads with the adapter's get_threads: the default getter names the
    last count set (it once kept 1, failing a correct port); a port whose own get_threads
    ignores the count fails the read-back call."""
    own_set = LINEAR.replace("class Port:", "class Port:\n    threads = [1, 2]\n\n"
                             "    def set_threads(self, n):\n        pass\n")
    stuck = own_set.replace("class Port:", "class Port:\n    def get_threads(self):\n"
                            "        return 1\n")
    for source, code in ((own_set, 0), (stuck, 1)):
        r = gate("--port", port_file(tmp_path, source) + ":Port", "--layers", "linear",
                 "--tiers", "contract", "-q", "--json", str(tmp_path / "r.json"))
        assert r.returncode == code, r.stdout + r.stderr
        rec = _contract(json.loads((tmp_path / "r.json").read_text()))[
            ("linear", "get_threads after set_threads")]
        assert rec["note"] == ("" if code == 0 else "crnn_get_threads() returned 1 after "
                               "crnn_set_threads(2) returned CRNN_OK")
    raising = own_set.replace("class Port:", "class Port:\n    def get_threads(self):\n"
                              "        raise RuntimeError('boom')\n")
    r = gate("--port", port_file(tmp_path, raising) + ":Port", "--layers", "linear",
             "--tiers", "contract", "-q", "--json", str(tmp_path / "r.json"))
    assert r.returncode == 1, r.stdout + r.stderr
    assert _contract(json.loads((tmp_path / "r.json").read_text()))[
        ("linear", "get_threads after set_threads")]["note"].startswith(
        "get_threads raised RuntimeError: boom")


@pytest.mark.parametrize("port", [NUMPY_PORT, TORCH_PORT], ids=["numpy", "torch"])
def test_example_ports_keep_the_error_contract(tmp_path, port):
    if port == TORCH_PORT:
        pytest.importorskip("torch")
    r = gate("--port", port, "--tiers", "contract", "-q", "--json", str(tmp_path / "r.json"),
             timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr
    recs = _contract(json.loads((tmp_path / "r.json").read_text()))
    assert {layer for layer, _ in recs} == set(abi.LAYER_SYMBOLS) - {"train3"}
    assert {t for _, t in recs} >= {"conv_backward(winner outside its window)", "ctc(logit NaN)",
                                    "step_gradients(width 1: no pooled column)",
                                    "clip_gradients(limit NaN)", "adamw(b1t 1)",
                                    "set_threads(0)", "set_isa(5)"}


# ---- the example ports -----------------------------------------------------------------------

def _summary(path):
    doc = json.loads(Path(path).read_text())
    return {(t["layer"], t["tier"]) for t in doc["tensors"] if not t["passed"]}, doc


def test_numpy_port_fails_only_exact_under_the_default_gate(tmp_path):
    """Every tier of every layer: exact fails (NumPy's matmul does not sum in dot16's order);
    float64, pytorch and contract pass (1 config and 1 thread: no identity run)."""
    r = gate("--port", NUMPY_PORT, "-q", "--json", str(tmp_path / "r.json"), timeout=600)
    assert r.returncode == 1, r.stdout[-3000:] + r.stderr
    failed, doc = _summary(tmp_path / "r.json")
    assert {t["layer"] for t in doc["tensors"]} == set(abi.LAYER_SYMBOLS)
    assert {t["tier"] for t in doc["tensors"]} == {"exact", "float64", "pytorch", "contract"}
    assert {tier for _, tier in failed} == {"exact"}
    assert re.search(r"FAIL linear/\S+/y tier=exact isa=python", r.stdout)


def test_pytest_plugin_runs_a_python_port(tmp_path):
    import subprocess
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        f"--port={ROOT / 'examples' / 'numpy_port.py'}:Port",
                        "--crnn-layers", "linear", "--crnn-tiers", "float64,exact"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert r.returncode == 1, r.stdout[-2000:]
    assert re.search(r"\d+ failed, \d+ passed", r.stdout)
    assert "linear::T16_I128_O37::y[float64] PASSED" in subprocess.run(
        [sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider",
         f"--port={ROOT / 'examples' / 'numpy_port.py'}:Port", "--crnn-layers", "linear",
         "--crnn-tiers", "float64", "-k", "T16_I128_O37 and y"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300).stdout


def test_fuzz_runs_a_python_port(tmp_path):
    r = gate("--port", NUMPY_PORT, "--layers", "linear", "--seconds", "60", "--first",
             "--jobs", "1", "--out", str(tmp_path / "found"), command="fuzz", timeout=300)
    assert r.returncode == 1, r.stdout + r.stderr         # NumPy's matmul is not dot16's order
    assert "isa=python threads=1" in r.stdout and list((tmp_path / "found").glob("*.h5"))


def test_torch_port_passes_the_tolerance_tiers(tmp_path):
    pytest.importorskip("torch")
    r = gate("--port", TORCH_PORT, "--tiers", "float64,pytorch", "--threads", "1", "-q",
             "--json", str(tmp_path / "r.json"), timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr
    _, doc = _summary(tmp_path / "r.json")
    assert {t["layer"] for t in doc["tensors"]} == set(abi.LAYER_SYMBOLS)
    assert {t["isa"] for t in doc["tensors"]} == {"cpu"}


def test_torch_tensor_that_requires_grad_is_one_line(tmp_path):
    pytest.importorskip("torch")
    source = LINEAR.replace("import numpy as np", "import numpy as np\nimport torch").replace(
        "return x @ W.T + b",
        "return torch.tensor(x @ W.T + b, requires_grad=True) * 1")
    r = linear_gate(tmp_path, source)
    assert r.returncode == 1
    line = next(l for l in r.stdout.splitlines() if "returned y as a torch.Tensor" in l)
    assert "NumPy cannot read" in line and "tensor.detach().cpu()" in line
