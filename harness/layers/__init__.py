"""Per-layer adapters: each module runs its layer through a port on fixture inputs.

A module defines LAYER (the name used by the CLI and results), FIXTURE (fixtures/<name>.h5)
and run(lib, case) -> {tensor: array}, the port's outputs named like the fixture's tensors.
A module whose run() returns tensors the fixture has no reference for (the identity tier still
checks them) also defines outputs(case) -> their names, so the pytest plugin can collect one
identity test for each (tests/test_plugin.py checks it against the gate).
"""
import importlib

# In the gate's order: the order of DESIGN.md's "Names".
LAYERS = ["dot16", "linear", "conv", "lstm", "ctc", "step", "clip", "adamw", "train3"]


def available() -> list[str]:
    """The layers whose harness module exists."""
    out = []
    for name in LAYERS:
        try:
            importlib.import_module(f"crnn_conformance.harness.layers.{name}")
        except ModuleNotFoundError as e:
            if e.name != f"crnn_conformance.harness.layers.{name}":
                raise
            continue
        out.append(name)
    return out


def module(name: str):
    return importlib.import_module(f"crnn_conformance.harness.layers.{name}")
