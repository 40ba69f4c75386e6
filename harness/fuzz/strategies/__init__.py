"""One strategy module per layer (the layer names of harness/layers): each defines
`cases()`, a Hypothesis strategy of (params, inputs) for one case of that layer, in the
format the layer's harness module runs and generators/exact.py computes the golden bits of.

A case is one fixed-size byte string (the module's SIZE), turned into the case by the
module's decode(Reader) (harness/fuzz/values.py): ordinary data mixed with the edge families
of docs/edge-cases.md (special values, boundaries, signed zeros, underflow, values rounded
once), the first, ordinary family and the smallest shapes and plainest arrays at byte 0, so
that Hypothesis, which shrinks bytes towards 0, shrinks a case towards them."""
import importlib

from ... import layers as L


def module(layer: str):
    return importlib.import_module(f"crnn_conformance.harness.fuzz.strategies.{layer}")


def available() -> list[str]:
    """The layers that have a harness module and a strategy, in the gate's order."""
    return L.importable("crnn_conformance.harness.fuzz.strategies", L.available())
