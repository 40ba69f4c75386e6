"""Reads the tolerance table (harness/tolerances.toml): per (layer, tensor) an extra Atol and
Rtol with the reason for each, and the per-element error model's parameters. A tensor's
allowance is the model's per-element Atol (harness/allowance/) plus the table's entry:
`elementwise` joins the two."""
from __future__ import annotations

import tomllib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

TABLE = Path(__file__).with_name("tolerances.toml")


@dataclass(frozen=True)
class Tolerance:
    layer: str
    tensor: str
    atol: float
    rtol: float
    reason: str


@lru_cache(maxsize=None)
def table(path: str = str(TABLE)) -> tuple[Tolerance, ...]:
    data = tomllib.loads(Path(path).read_text())
    out = []
    for e in data.get("tolerance", []):
        if not e.get("reason", "").strip():
            raise ValueError(f"tolerance {e.get('layer')}.{e.get('tensor')} has no reason")
        out.append(Tolerance(e["layer"], e["tensor"], float(e["atol"]), float(e["rtol"]),
                             " ".join(e["reason"].split())))
    return tuple(out)


@dataclass(frozen=True)
class Elementwise:
    """A tolerance entry with its Atol per element: atol = the error model's array (None: the
    layer has no model for this tensor) + the table's atol. `arrays` holds the model's arrays
    of every tensor of the case (a compare hook may need another tensor's, e.g. the pool
    flip rule's conv values)."""
    layer: str
    tensor: str
    atol: object
    rtol: float
    reason: str
    table_atol: float = 0.0
    arrays: dict | None = None

    @property
    def atol_max(self) -> float:
        return float(np.max(self.atol)) if np.size(self.atol) else 0.0


def elementwise(tol: Tolerance, model, arrays=None) -> Elementwise:
    atol = tol.atol if model is None else np.asarray(model, np.float64) + tol.atol
    return Elementwise(tol.layer, tol.tensor, atol, tol.rtol, tol.reason, tol.atol, arrays)


@dataclass(frozen=True)
class Parameter:
    name: str
    value: float
    reason: str


@lru_cache(maxsize=None)
def parameters(path: str = str(TABLE)) -> dict:
    """The error model's parameters ([[parameter]] entries: name, value, reason), by name."""
    data = tomllib.loads(Path(path).read_text())
    out = {}
    for e in data.get("parameter", []):
        if not e.get("reason", "").strip():
            raise ValueError(f"model parameter {e.get('name')} has no reason")
        out[e["name"]] = Parameter(e["name"], float(e["value"]), " ".join(e["reason"].split()))
    return out


def lookup(layer: str, tensor: str) -> Tolerance:
    """The most specific entry: (layer, tensor), else (layer, "*")."""
    entries = table()
    for want in (tensor, "*"):
        for e in entries:
            if e.layer == layer and e.tensor == want:
                return e
    raise KeyError(f"no tolerance for {layer}.{tensor} in {TABLE}: add one with its reason")
