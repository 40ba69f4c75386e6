"""One strategy module per layer (the layer names of harness/layers): each defines
`cases()`, a Hypothesis strategy of (params, inputs) for one case of that layer, in the
format the layer's harness module runs and generators/exact.py computes the golden bits of.

A strategy is ordinary data mixed with the edge families of docs/edge-cases.md (special
values, boundaries, signed zeros, underflow, values rounded once); `st.one_of` shrinks towards
its first, ordinary alternative, the shapes towards their smallest sizes and the arrays towards
plain values (harness/fuzz/values.py)."""
import importlib

from crnn_conformance.harness import layers as L


def module(layer: str):
    return importlib.import_module(f"crnn_conformance.harness.fuzz.strategies.{layer}")


def available() -> list[str]:
    """The layers that have a harness module and a strategy, in the gate's order."""
    return L.importable("crnn_conformance.harness.fuzz.strategies", L.available())
