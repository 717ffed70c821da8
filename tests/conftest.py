"""Shared fixtures: throwaway backends in pytest's tmp dirs and one local SparkSession.

The Spark fixture is session-scoped because starting a JVM costs seconds; every test that uses
it is marked ``spark`` automatically (``-m "not spark"`` skips them explicitly, nothing is
skipped silently).
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


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "spark" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.spark)
