"""pytest plugin: the conformance suite as pytest tests, one per (fixture, case, tensor, tier).

    pytest --port path/to/libport.so            # a port (alias: --crnn-port)
    pytest --crnn-conformance                   # the bundled port
    pytest --port libport.so -k "linear and dW" -n 2 --junitxml=conformance.xml
    pytest --port libport.so --crnn-layers available   # a partial port

Registered through the `pytest11` entry point, it does nothing unless one of those options is
given, so a project's own test run is unaffected. When one is given, pytest collects the
conformance suite only (a project's own tests too only when their paths are named on the
command line), from any directory: the fixtures ship inside the package. The tests are

    crnn-conformance::<fixture>::<case>::<tensor>[<tier>]

and, for the contract tier, `crnn-conformance::contract::contract::<call>[contract]` (one test
per call of harness/contract.py, the layer a keyword; the first of a layer runs its calls).
(fixture = the fixture file's stem, e.g. adamw or pytorch_adamw; the layer is a keyword, so
`-k conv` selects conv's and pytorch_conv's tests) and they run exactly the gate's code
(crnn_conformance.harness.runner.GateSession.run_case, the worker process,
crnn_conformance.harness.compare): the first test of a case runs that case through the port
once in this process (all tiers, every ISA x thread count) and every test of the case reads
its records. A test is one (fixture, case, tensor, tier); it covers the gate's checks of that
tier for the tensor: one for exact, float64 and pytorch, one per ISA x threads run other than
the base for identity. With pytest-xdist each worker keeps its own port worker; `--dist
loadgroup` keeps a case's tests on one worker, so each case runs once (each test carries
xdist_group = fixture/case). A port that cannot be run at all (not found, not loadable,
missing symbols, wrong ABI version, bad fixture, FTZ/DAZ) is a usage error with the gate's
one-line message. Under `--crnn-layers available` the tests of a layer the port does not
implement (missing symbols, or CRNN_E_UNSUPPORTED from its base run) are skipped with the
reason "not implemented".

Options (each also has a --crnn- form): --crnn-layers, --crnn-tiers, --crnn-isa,
--crnn-threads, --crnn-case, --crnn-fixtures, --crnn-draw, --crnn-timeout, --crnn-keep-going.
"""
from __future__ import annotations

from pathlib import Path

import pytest

SUITE = "crnn-conformance"
_STATE = pytest.StashKey["_State"]()


def pytest_addoption(parser):
    g = parser.getgroup("crnn-conformance", "crnn-conformance: gate a port from pytest")
    g.addoption("--crnn-conformance", action="store_true", default=False,
                help="collect the conformance suite (with the bundled port unless --port)")
    names = ["--crnn-port"]
    if not _taken(parser, "--port"):
        names.insert(0, "--port")
    g.addoption(*names, dest="crnn_port", default=None, metavar="PATH",
                help="collect the conformance suite for this shared library (crnn_port.h) or "
                     "Python port (FILE.py:OBJECT, py:MODULE:OBJECT)")
    g.addoption("--crnn-layers", default=None, metavar="LIST",
                help="comma list of layers, or `available`: those the port implements")
    g.addoption("--crnn-tiers", default=None, metavar="LIST", help="comma list of tiers")
    g.addoption("--crnn-isa", default=None, metavar="LIST", help="comma list of ISA paths")
    g.addoption("--crnn-threads", default=None, metavar="LIST",
                help="comma list of thread counts for the identity tier")
    g.addoption("--crnn-case", default=None, metavar="GLOB", help="only cases matching this glob")
    g.addoption("--crnn-fixtures", default=None, metavar="DIR", help="fixture directory")
    g.addoption("--crnn-draw", type=int, default=None, metavar="N",
                help="fresh draw N of the fixtures instead (gate --draw; docs/fixtures.md)")
    g.addoption("--crnn-timeout", type=float, default=120.0, metavar="S",
                help="seconds one layer call on one case may take (hang)")
    g.addoption("--crnn-keep-going", action="store_true", default=False,
                help="run every case, also after two cases of a layer hung in one entry point")


def _taken(parser, name: str) -> bool:
    """True when another plugin already registered the option (then only --crnn-port)."""
    groups = [getattr(parser, "_anonymous", None), *getattr(parser, "_groups", [])]
    return any(name in opt.names() for g in groups if g is not None for opt in g.options)


def _active(config) -> bool:
    return bool(config.getoption("crnn_conformance", False) or config.getoption("crnn_port", None))


def _options(config):
    import click
    from ..ctypes_kernels import abi
    from . import layers as L
    from . import pyport
    from .cli.common import _split, parse_timeout
    from .runner import FIXTURES_DIR, THREADS, TIERS, GateOptions
    layers = config.getoption("crnn_layers")
    available = layers is not None and layers.strip() == "available"
    try:
        names = None if available else _split(layers, L.LAYERS, "layer")
        return GateOptions(
            port=config.getoption("crnn_port"),
            fixtures=_fixtures(config, names, FIXTURES_DIR), draw=config.getoption("crnn_draw"),
            isas=_split(config.getoption("crnn_isa"), pyport.isa_choices(config.getoption("crnn_port")), "ISA"),
            threads=tuple(_split(config.getoption("crnn_threads"), None, "thread count", int)
                          or THREADS),
            tiers=tuple(_split(config.getoption("crnn_tiers"), TIERS, "tier") or TIERS),
            layers=names, case=config.getoption("crnn_case"),
            timeout=parse_timeout(config.getoption("crnn_timeout")), available=available,
            keep_going=config.getoption("crnn_keep_going"))
    except click.BadParameter as e:
        raise pytest.UsageError(f"crnn-conformance: {e.message}") from None


def _fixtures(config, layers, default) -> Path:
    """--crnn-fixtures, or the directory of --crnn-draw N (drawn on first use, as gate --draw)."""
    fixtures, draw = config.getoption("crnn_fixtures"), config.getoption("crnn_draw")
    if draw is None:
        return Path(fixtures or default)
    if fixtures is not None:
        raise pytest.UsageError("crnn-conformance: give --crnn-draw or --crnn-fixtures, not both")
    if draw < 0:
        raise pytest.UsageError(f"crnn-conformance: --crnn-draw {draw}: a draw is a number >= 0")
    from ..generators import regen
    try:
        return regen.drawn(draw, layers)
    except regen.DrawError as e:
        raise pytest.UsageError(f"crnn-conformance: {e}") from None


class _State:
    """Per pytest process: the gate session (opened on first use) and records per case."""

    def __init__(self, config):
        from .runner import GateSession
        self.config = config
        self.opts = _options(config)
        self.session = _cannot_run_as_usage_error(lambda: GateSession(self.opts))
        self.opened = False
        self.records: dict[tuple, list] = {}
        self.contract: dict[str, list] = {}

    def open(self):
        if not self.opened:
            self.session.open()
            self.opened = True

    def records_for(self, job) -> list:
        key = (str(job.fixture), job.case.name)
        if key not in self.records:
            self.open()
            if job.layer in self.session.not_implemented:   # missing symbols (available)
                self.records[key] = []
            else:
                self.records[key] = [r.to_dict() for r in self.session.run_case(job)]
        return self.records[key]

    def contract_for(self, layer: str, core: bool) -> list:
        """The contract tier's records of `layer` (harness/contract.py), made once."""
        from . import contract
        if layer not in self.contract:
            self.open()
            self.contract[layer] = [r.to_dict() for r in
                                    contract.layer_records(self.session, layer, core)]
        return self.contract[layer]

    def close(self):
        if self.opened:
            self.session.close()


def _cannot_run_as_usage_error(fn):
    from ..ctypes_kernels.abi import PortError
    from ..generators.h5io import FixtureError
    try:
        return fn()
    except (PortError, FixtureError, ValueError) as e:
        raise pytest.UsageError(f"crnn-conformance: cannot run: {e}") from None


def pytest_configure(config):
    if _active(config):
        config.addinivalue_line("markers", "crnn_conformance: a crnn-conformance check")


def pytest_ignore_collect(collection_path, config):
    """Active, the plugin collects the conformance suite only: a project's own test files are
    collected too only when the command line names them."""
    if _active(config) and config.args_source != pytest.Config.ArgsSource.ARGS:
        return True
    return None


def pytest_sessionstart(session):
    """Fail early, once, with the gate's message when the port or fixtures cannot be used
    (in the xdist controller, or the only process without xdist)."""
    config = session.config
    if not _active(config) or hasattr(config, "workerinput"):
        return
    state = _State(config)
    _cannot_run_as_usage_error(state.open)   # loads the port in a worker and checks it
    state.close()


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    """The suite is one more child of the session, collected like any other node (so the
    collection counts, --co and -k see it)."""
    outcome = yield
    if isinstance(collector, pytest.Session) and _active(collector.config):
        rep = outcome.get_result()
        if rep.passed:
            rep.result.append(Suite.from_parent(collector, name=SUITE, nodeid=SUITE))


def pytest_sessionfinish(session):
    state = session.config.stash.get(_STATE, None)
    if state is not None:
        state.close()


class Suite(pytest.Collector):
    def collect(self):
        state = _State(self.config)
        self.config.stash[_STATE] = state
        fixtures = {}
        for job in state.session.jobs:
            fixtures.setdefault(job.fixture, []).append(job)
        for path, jobs in fixtures.items():
            node = FixtureNode.from_parent(self, name=Path(path).stem, jobs=jobs,
                                           tiers=state.opts.tiers)
            node.extra_keyword_matches.add(jobs[0].layer)
            yield node
        yield from _contract_nodes(self, state)


def _contract_nodes(parent, state):
    """crnn-conformance::contract::contract::<call>[contract]: the contract tier's calls of
    each layer (the layer a keyword; the control functions' with the first layer), as the
    gate's records name them (fixture and case `contract`), when the tier is selected."""
    from . import contract
    if not contract.selected(state.opts):
        return
    layers = [(layer, contract.calls(layer, core=i == 0))
              for i, layer in enumerate(state.session.layer_names)]
    if any(calls for _, calls in layers):
        node = ContractNode.from_parent(parent, name=contract.FIXTURE)
        node.layers = layers
        yield node


class ContractNode(pytest.Collector):
    def collect(self):
        from . import contract
        yield ContractCase.from_parent(self, name=contract.FIXTURE, layers=self.layers)


class ContractCase(pytest.Collector):
    def __init__(self, *, layers, **kw):
        super().__init__(**kw)
        self.layers = layers

    def collect(self):
        for i, (layer, calls) in enumerate(self.layers):
            for call in calls:
                item = ContractItem.from_parent(self, name=f"{call.label}[contract]",
                                                label=call.label, layer=layer, core=i == 0)
                item.extra_keyword_matches.add(layer)
                item.add_marker(pytest.mark.crnn_conformance)
                item.add_marker(pytest.mark.xdist_group(name=f"contract/{layer}"))
                yield item


class ContractItem(pytest.Item):
    def __init__(self, *, label, layer, core, **kw):
        super().__init__(**kw)
        self.label, self.layer, self.core = label, layer, core

    def runtest(self):
        from ..reports.console import failure_line
        state, layer = self.config.stash[_STATE], self.layer
        recs = state.contract_for(layer, self.core)
        reason = state.session.not_implemented.get(layer)
        if reason and not recs:
            pytest.skip(f"not implemented: {reason}")
        recs = [r for r in recs if r["tensor"] == self.label]
        if not recs:
            pytest.skip("checks nothing on this port (e.g. it advertises every ISA)")
        if not recs[0]["passed"]:
            raise ConformanceFailure(failure_line(recs[0]))

    def repr_failure(self, excinfo, style=None):
        if isinstance(excinfo.value, ConformanceFailure):
            return str(excinfo.value)
        return super().repr_failure(excinfo, style)

    def reportinfo(self):
        return "contract", None, f"contract/{self.layer}/{self.name}"


class FixtureNode(pytest.Collector):
    def __init__(self, *, jobs, tiers, **kw):
        super().__init__(**kw)
        self.jobs, self.tiers = jobs, tiers

    def collect(self):
        for job in self.jobs:
            yield CaseNode.from_parent(self, name=job.case.name, job=job, tiers=self.tiers)


class CaseNode(pytest.Collector):
    def __init__(self, *, job, tiers, **kw):
        super().__init__(**kw)
        self.job, self.tiers = job, tiers

    def collect(self):
        job = self.job
        group = f"{Path(job.fixture).stem}/{job.case.name}"
        for tier in self.tiers:
            names = identity_tensors(job) if tier == "identity" else list(
                job.case.expected.get(tier, {}))
            for tensor in dict.fromkeys(names):
                item = CheckItem.from_parent(self, name=f"{tensor}[{tier}]", job=job,
                                             tensor=tensor, tier=tier)
                item.add_marker(pytest.mark.crnn_conformance)
                item.add_marker(pytest.mark.xdist_group(name=group))
                yield item


def identity_tensors(job) -> list[str]:
    """The tensors the gate checks in the identity tier: every output of the layer's run()
    (a layer module's outputs(case), where it returns tensors the fixture has no reference
    for), else those with a reference in some tier of the case."""
    fn = getattr(job.module, "outputs", None)
    if fn is not None:
        return list(fn(job.case))
    return list(dict.fromkeys(t for tr in job.case.expected.values() for t in tr))


class ConformanceFailure(AssertionError):
    """A check failed: the message is the gate's failure lines (no traceback)."""


class CheckItem(pytest.Item):
    def __init__(self, *, job, tensor, tier, **kw):
        super().__init__(**kw)
        self.job, self.tensor, self.tier = job, tensor, tier

    def runtest(self):
        from ..reports.console import failure_line
        state = self.config.stash[_STATE]
        all_recs = state.records_for(self.job)
        reason = state.session.not_implemented.get(self.job.layer)
        if reason and not all_recs:
            pytest.skip(f"not implemented: {reason}")
        recs = [r for r in all_recs if r["tier"] == self.tier and r["tensor"] in (self.tensor, "*")]
        if not recs:
            if self.tier == "identity":
                pytest.skip("identity: only one ISA x thread count to compare")
            raise ConformanceFailure(f"{self.job.layer}/{self.job.case.name}/{self.tensor}: the "
                                     f"port produced no {self.tensor!r} to compare")
        bad = [r for r in recs if not r["passed"]]
        if bad:
            raise ConformanceFailure("\n".join(failure_line(r) for r in bad))
        worst = max(recs, key=lambda r: r["usage"] if r["usage"] is not None else float("inf"))
        self.user_properties.append(("usage", worst["usage"]))
        if worst.get("resolution") is not None:
            self.user_properties.append(("resolution", worst["resolution"]))

    def repr_failure(self, excinfo, style=None):
        if isinstance(excinfo.value, ConformanceFailure):
            return str(excinfo.value)
        return super().repr_failure(excinfo, style)

    def reportinfo(self):
        return self.job.fixture, None, f"{Path(self.job.fixture).stem}/{self.job.case.name}/{self.name}"
