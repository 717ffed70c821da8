"""Shared fixtures: throwaway backends in pytest's tmp dirs, one local SparkSession and one
Spark Connect session (to a server the tests start).

The Spark fixtures are session-scoped because starting a JVM costs seconds; every test that uses
one is marked ``spark`` automatically, and ``connect`` for the Connect session (``-m "not spark"``
or ``-m "not connect"`` deselect them explicitly, nothing is skipped silently).
"""

from __future__ import annotations

import itertools

import pytest

from stateengine import KeyedStateBackend


@pytest.fixture
def make_backend(tmp_path):
    """Factory: ``make_backend(**kwargs)`` opens a KeyedStateBackend in a fresh directory and
    closes it when the test ends."""
    opened: list[KeyedStateBackend] = []
    counter = itertools.count()

    def factory(**kwargs) -> KeyedStateBackend:
        backend = KeyedStateBackend(tmp_path / f"backend-{next(counter)}", **kwargs)
        opened.append(backend)
        return backend

    yield factory
    for backend in opened:
        backend.close()


@pytest.fixture
def backend(make_backend):
    """A backend owning all 128 key groups, keys typed by the first key."""
    return make_backend()


@pytest.fixture(scope="session")
def spark():
    """One local SparkSession (``local[2,4]``: two cores, four attempts per task so tests can
    inject task failures), on loopback; see tests/spark_session.py."""
    try:
        import pyspark  # noqa: F401
    except ImportError as e:  # a missing pyspark must fail loudly, never skip
        pytest.fail(f"pyspark is not importable ({e}); install the test extras with "
                    f"`pip install -e '.[test,spark]'` (./run.sh test does this)", pytrace=False)
    from tests.spark_session import get_spark

    session = get_spark()
    yield session
    session.stop()


@pytest.fixture(scope="session")
def connect_server(tmp_path_factory):
    """A Spark Connect server that the tests start: a separate JVM on 127.0.0.1
    (``local[2,4]``, the classic session's confs); see tests/spark_connect.py. Needs
    pyspark >= 4.0 (3.5's pip package ships no Connect server)."""
    from tests.spark_connect import ConnectServer

    server = ConnectServer(str(tmp_path_factory.mktemp("connect-server") / "server.log"))
    yield server
    server.stop()


@pytest.fixture(scope="session")
def connect(connect_server):
    """A Spark Connect client session to ``connect_server``."""
    try:
        session = connect_server.session()
    except ImportError as e:  # the client's packages are missing: an error, never a skip
        pytest.fail(f"the Spark Connect client does not import ({e}); install the spark extras "
                    f"with `pip install -e '.[test,spark]'`", pytrace=False)
    yield session
    session.stop()


def pytest_collection_modifyitems(config, items):
    for item in items:
        fixtures = getattr(item, "fixturenames", ())
        if {"spark", "connect", "connect_server"} & set(fixtures):
            item.add_marker(pytest.mark.spark)
        if {"connect", "connect_server"} & set(fixtures):
            item.add_marker(pytest.mark.connect)
