"""Per-layer adapters: each module runs its layer through a port on fixture inputs.

A module defines LAYER (the name used by the CLI and results), FIXTURES and TIERS (the
fixture stems it reads and their tiers, from ctypes_kernels/layer_table.py) and run(lib, case) -> {tensor: array}, the port's outputs named like the fixture's tensors.
A module whose run() returns tensors the fixture has no reference for (the identity tier still
checks them) also defines outputs(case) -> their names, so the pytest plugin can collect one
identity test for each (tests/test_plugin.py checks it against the gate).
A module whose cases pack many problems or apply a function element by element may define
worst_context(case, tensor, flat_index) -> the worst element's `input` or `subcase` (with the
sub-case's parameters) for the record's `worst` (docs/report-schema.md); {} for other cases.
"""
import importlib

from ...ctypes_kernels import layer_table

# In the gate's order (the table's: the order of README.md's "Names").
LAYERS = layer_table.layer_names()


def importable(package: str, names) -> list[str]:
    """The names (in order) that have a module in `package`; an import error inside a module
    that exists is raised, not taken for its absence."""
    out = []
    for name in names:
        try:
            importlib.import_module(f"{package}.{name}")
        except ModuleNotFoundError as e:
            if e.name != f"{package}.{name}":
                raise
            continue
        out.append(name)
    return out


def available() -> list[str]:
    """The layers whose harness module exists."""
    return importable("crnn_conformance.harness.layers", LAYERS)


def module(name: str):
    return importlib.import_module(f"crnn_conformance.harness.layers.{name}")


def tiers_for(mod, fixture_name: str) -> tuple:
    """The tiers every case of the fixture file `fixture_name` (its stem) must hold: the
    module's TIERS entry, else pytorch for a pytorch_* file and exact + float64 otherwise."""
    declared = getattr(mod, "TIERS", {})
    if fixture_name in declared:
        return tuple(declared[fixture_name])
    if fixture_name.startswith("fuzz-"):   # a fuzz finding (harness/fuzz/writer.py)
        return ("exact",)
    return ("pytorch",) if fixture_name.startswith("pytorch_") else ("exact", "float64")


def required_inputs(mod, case) -> list[str]:
    fn = getattr(mod, "required_inputs", None)
    return list(fn(case)) if fn else list(getattr(mod, "INPUTS", ()))


def check_fixture(mod, fx, role: str | None = None):
    """Refuses (FixtureError) a fixture that is not the one the harness asked for: its root
    `layer` attribute must be the module's layer, and every case must hold the tiers of the
    file's role (tiers_for) and the inputs the module reads. Returns the fixture."""
    from ...generators.h5io import FixtureError
    role = role or fx.path.stem
    layer = fx.attrs.get("layer")
    if layer != mod.LAYER:
        raise FixtureError(f"fixture {fx.path} is a {layer!r} fixture, but the harness reads "
                           f"{fx.path.name} as the {mod.LAYER} fixture {role!r} (a renamed or "
                           "misplaced file?)")
    want = tiers_for(mod, role)
    for case in fx.cases:
        missing = [t for t in want if t not in case.expected]
        if missing:
            raise FixtureError(f"fixture {fx.path} lacks the {', '.join(missing)} tier(s) that "
                               f"{role!r} must hold (case {case.name})")
        missing = [k for k in required_inputs(mod, case) if k not in case.inputs]
        if missing:
            raise FixtureError(f"fixture {fx.path} lacks the input(s) {', '.join(missing)} that "
                               f"the {mod.LAYER} layer reads (case {case.name})")
    return fx
