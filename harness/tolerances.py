"""Reads the tolerance table (harness/tolerances.toml): Atol, Rtol and the reason for each."""
from __future__ import annotations

import tomllib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

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


def lookup(layer: str, tensor: str) -> Tolerance:
    """The most specific entry: (layer, tensor), else (layer, "*")."""
    entries = table()
    for want in (tensor, "*"):
        for e in entries:
            if e.layer == layer and e.tensor == want:
                return e
    raise KeyError(f"no tolerance for {layer}.{tensor} in {TABLE}: add one with its reason")
