"""Shared test set-up: the --slow option, the bundled library, the ISA x threads grid, and
the hostile test ports (tests/ports/testport.c)."""
from __future__ import annotations

import pytest

THREADS = (1, 2, 3, 7)


def pytest_addoption(parser):
    parser.addoption("--slow", action="store_true", default=False,
                     help="also run tests marked slow (exhaustive activations, mutants)")


def pytest_collection_modifyitems(config, items):
    if config.getoption("--slow"):
        return
    skip = pytest.mark.skip(reason="slow: run with --slow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def lib():
    """The bundled port, built on demand (all layers it implements)."""
    from crnn_conformance.ctypes_kernels.abi import load
    from crnn_conformance.ctypes_kernels.build import build
    return load(build(), layers=())


@pytest.fixture(scope="session")
def isas(lib):
    from crnn_conformance.ctypes_kernels.abi import available_isas
    return available_isas(lib)


@pytest.fixture(scope="module")
def ports(tmp_path_factory):
    """ports("-DTP_SEGV") -> a variant of tests/ports/testport.c, built once per module."""
    from testports import build_port
    d = tmp_path_factory.mktemp("ports")
    return lambda *defines: build_port(d, *defines)
