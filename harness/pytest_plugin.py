"""pytest plugin: the conformance suite as pytest tests, one per (case, tensor, tier).

    pytest --port path/to/libport.so            # a port (alias: --crnn-port)
    pytest --crnn-conformance                   # the bundled port
    pytest --port libport.so -k "linear and dW" -n 2 --junitxml=conformance.xml

Registered through the `pytest11` entry point, it does nothing unless one of those options is
given, so a project's own test run is unaffected. The tests are

    crnn-conformance::<layer>::<case>::<tensor>[<tier>]

and they run exactly the gate's code (crnn_conformance.harness.runner.GateSession.run_case, the worker process,
crnn_conformance.harness.compare): the first test of a case runs that case through the port once in this
process (all tiers, every ISA x thread count) and every test of the case reads its records.
With pytest-xdist each worker keeps its own port worker; `--dist loadgroup` keeps a case's
tests on one worker (each test carries xdist_group = layer/case). A port that cannot be run
at all (not found, not loadable, missing symbols, wrong ABI version, bad fixture, FTZ/DAZ)
is a usage error with the gate's one-line message.

Options (each also has a --crnn- form): --crnn-layers, --crnn-tiers, --crnn-isa,
--crnn-threads, --crnn-case, --crnn-fixtures, --crnn-timeout.
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
                help="collect the conformance suite for this shared library (crnn_port.h)")
    g.addoption("--crnn-layers", default=None, metavar="LIST", help="comma list of layers")
    g.addoption("--crnn-tiers", default=None, metavar="LIST", help="comma list of tiers")
    g.addoption("--crnn-isa", default=None, metavar="LIST", help="comma list of ISA paths")
    g.addoption("--crnn-threads", default=None, metavar="LIST",
                help="comma list of thread counts for the identity tier")
    g.addoption("--crnn-case", default=None, metavar="GLOB", help="only cases matching this glob")
    g.addoption("--crnn-fixtures", default=None, metavar="DIR", help="fixture directory")
    g.addoption("--crnn-timeout", type=float, default=120.0, metavar="S",
                help="seconds one layer call on one case may take (hang)")


def _taken(parser, name: str) -> bool:
    """True when another plugin already registered the option (then only --crnn-port)."""
    groups = [getattr(parser, "_anonymous", None), *getattr(parser, "_groups", [])]
    return any(name in opt.names() for g in groups if g is not None for opt in g.options)


def _active(config) -> bool:
    return bool(config.getoption("crnn_conformance", False) or config.getoption("crnn_port", None))


def _options(config):
    from crnn_conformance.harness import layers as L
    from crnn_conformance.harness.cli.common import _split
    from crnn_conformance.harness.runner import FIXTURES_DIR, THREADS, TIERS, GateOptions
    from crnn_conformance.ctypes_kernels import abi
    import click
    try:
        return GateOptions(
            port=config.getoption("crnn_port"),
            fixtures=Path(config.getoption("crnn_fixtures") or FIXTURES_DIR),
            isas=_split(config.getoption("crnn_isa"), abi.ISA_NAMES, "ISA"),
            threads=tuple(_split(config.getoption("crnn_threads"), None, "thread count", int)
                          or THREADS),
            tiers=tuple(_split(config.getoption("crnn_tiers"), TIERS, "tier") or TIERS),
            layers=_split(config.getoption("crnn_layers"), L.LAYERS, "layer"),
            case=config.getoption("crnn_case"), timeout=config.getoption("crnn_timeout"))
    except click.BadParameter as e:
        raise pytest.UsageError(f"crnn-conformance: {e.message}") from None


class _State:
    """Per pytest process: the gate session (opened on first use) and records per case."""

    def __init__(self, config):
        from crnn_conformance.harness.runner import GateSession
        self.config = config
        self.opts = _options(config)
        self.session = _cannot_run_as_usage_error(lambda: GateSession(self.opts))
        self.opened = False
        self.records: dict[tuple, list] = {}

    def records_for(self, job) -> list:
        key = (job.layer, job.case.name)
        if key not in self.records:
            if not self.opened:
                self.session.open()
                self.opened = True
            self.records[key] = [r.to_dict() for r in self.session.run_case(job)]
        return self.records[key]

    def close(self):
        if self.opened:
            self.session.close()


def _cannot_run_as_usage_error(fn):
    from crnn_conformance.ctypes_kernels.abi import PortError
    from crnn_conformance.generators.h5io import FixtureError
    try:
        return fn()
    except (PortError, FixtureError, ValueError) as e:
        raise pytest.UsageError(f"crnn-conformance: cannot run: {e}") from None


def pytest_configure(config):
    if _active(config):
        config.addinivalue_line("markers", "crnn_conformance: a crnn-conformance check")


def pytest_sessionstart(session):
    """Fail early, once, with the gate's message when the port or fixtures cannot be used
    (in the xdist controller, or the only process without xdist)."""
    config = session.config
    if not _active(config) or hasattr(config, "workerinput"):
        return
    state = _State(config)
    _cannot_run_as_usage_error(state.session.open)   # loads the port in a worker and checks it
    state.session.close()


@pytest.hookimpl(tryfirst=True)   # before -k / -m deselection, so both apply to these tests
def pytest_collection_modifyitems(session, config, items):
    if not _active(config):
        return
    state = _State(config)
    config.stash[_STATE] = state
    suite = Suite.from_parent(session, name=SUITE, nodeid=SUITE)
    items.extend(suite.build(state))


def pytest_sessionfinish(session):
    state = session.config.stash.get(_STATE, None)
    if state is not None:
        state.close()


class Suite(pytest.Collector):
    def collect(self):   # the tree is built eagerly by build(); nothing is collected lazily
        return []

    def build(self, state) -> list:
        layers, items = {}, []
        for job in state.session.jobs:
            if job.layer not in layers:
                layers[job.layer] = LayerNode.from_parent(self, name=job.layer)
            case = CaseNode.from_parent(layers[job.layer], name=job.case.name)
            tensors = []
            for tier in state.opts.tiers:
                if tier == "identity":
                    names = [t for tr in job.case.expected.values() for t in tr]
                else:
                    names = list(job.case.expected.get(tier, {}))
                for tensor in dict.fromkeys(names):
                    tensors.append((tensor, tier))
            for tensor, tier in tensors:
                item = CheckItem.from_parent(case, name=f"{tensor}[{tier}]", job=job,
                                             tensor=tensor, tier=tier)
                item.add_marker(pytest.mark.crnn_conformance)
                item.add_marker(pytest.mark.xdist_group(name=f"{job.layer}/{job.case.name}"))
                items.append(item)
        return items


class LayerNode(pytest.Collector):
    def collect(self):
        return []


class CaseNode(pytest.Collector):
    def collect(self):
        return []


class ConformanceFailure(AssertionError):
    """A check failed: the message is the gate's failure lines (no traceback)."""


class CheckItem(pytest.Item):
    def __init__(self, *, job, tensor, tier, **kw):
        super().__init__(**kw)
        self.job, self.tensor, self.tier = job, tensor, tier

    def runtest(self):
        from crnn_conformance.reports.console import failure_line
        state = self.config.stash[_STATE]
        recs = [r for r in state.records_for(self.job) if r["tier"] == self.tier
                and r["tensor"] in (self.tensor, "*")]
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

    def repr_failure(self, excinfo, style=None):
        if isinstance(excinfo.value, ConformanceFailure):
            return str(excinfo.value)
        return super().repr_failure(excinfo, style)

    def reportinfo(self):
        return self.job.fixture, None, f"{self.job.layer}/{self.job.case.name}/{self.name}"
