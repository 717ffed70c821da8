"""Shared fixtures: throwaway backends in pytest's tmp dirs, one local SparkSession and one
Spark Connect session (to a server the tests start), and a local S3 server (moto's, a child
process on 127.0.0.1) with a fresh prefix per test and a fault-injecting proxy.

The Spark fixtures are session-scoped because starting a JVM costs seconds; every test that uses
one is marked ``spark`` automatically, and ``connect`` for the Connect session (``-m "not spark"``
or ``-m "not connect"`` deselect them explicitly, nothing is skipped silently).
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import uuid
from dataclasses import dataclass

import pytest

from stateengine import KeyedStateBackend, configure_batch_ingest, configure_file_cache
from stateengine import local_s3

# S3 clients in this process and in every process it starts (Spark's JVM and Python workers
# inherit the environment at their start, hence at import): the local server's static
# credentials, never a developer's own, and no EC2 metadata lookups (169.254.169.254 is not
# loopback). The endpoint rides in each test's URI (s3_server.uri), as the port is chosen later.
for _name, _value in local_s3.LocalS3Server().env().items():
    if _name != "AWS_ENDPOINT_URL":
        os.environ[_name] = _value
for _name in ("AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
    os.environ.pop(_name, None)
os.environ["AWS_CONFIG_FILE"] = os.environ["AWS_SHARED_CREDENTIALS_FILE"] = os.devnull


@pytest.fixture(autouse=True)
def _no_file_cache_across_tests():
    """A StateStoreProvider on remote storage turns the process-wide file cache on under its
    local directory: each test starts without one, as a fresh worker would."""
    yield
    configure_file_cache(None)


@pytest.fixture
def ingest_above():
    """``ingest_above(keys)`` sets the batch-ingestion threshold (csrc/batch_ingest.h) for the
    test (None: batch puts never ingest); the old threshold comes back when the test ends."""
    old = configure_batch_ingest(0)

    def set_to(keys: int | None) -> None:
        configure_batch_ingest(keys or 0)

    yield set_to
    configure_batch_ingest(old)


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


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory):
    """moto's S3 server as a child process on 127.0.0.1 (a free port) with one bucket,
    stopped by its PID when the session ends; see stateengine/local_s3.py."""
    log = tmp_path_factory.mktemp("s3-server") / "moto.log"
    server = local_s3.LocalS3Server(log_path=str(log))
    try:
        server.start()
    except RuntimeError as e:  # moto missing or not starting: an error, never a skip
        pytest.fail(str(e), pytrace=False)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def wheel(tmp_path_factory) -> str:
    """The release wheel (static Release RocksDB, repaired by auditwheel): the one in
    $STATEENGINE_WHEELHOUSE if set (scripts/test-wheel.sh sets it), else built by
    scripts/build-wheel.sh, which reuses its cached RocksDB build (the first build compiles
    RocksDB)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = os.environ.get("STATEENGINE_WHEELHOUSE") or str(tmp_path_factory.mktemp("wheelhouse"))
    tag = "cp%d%d" % sys.version_info[:2]
    if not any(f.endswith(".whl") and f"-{tag}-" in f for f in os.listdir(out)):
        subprocess.run([os.path.join(root, "scripts", "build-wheel.sh"), out], check=True,
                       cwd=root, stdout=subprocess.DEVNULL)
    wheels = sorted(f for f in os.listdir(out)
                    if f.startswith("stateengine-") and "manylinux" in f and f"-{tag}-" in f)
    assert wheels, f"no repaired {tag} wheel in {out}"
    return os.path.join(out, wheels[-1])


@dataclass
class S3Place:
    """A fresh prefix of the test bucket for one test."""

    server: local_s3.LocalS3Server
    prefix: str

    def uri(self, sub: str = "", endpoint: str | None = None) -> str:
        """s3://bucket/prefix/sub?endpoint_override=...: reaches the server (or ``endpoint``,
        a proxy in front of it) from any process with the test environment."""
        return self.server.uri(f"{self.prefix}/{sub}".rstrip("/"), endpoint)

    @property
    def fs(self):
        """The tests' side door to the bucket (pyarrow, straight to the server)."""
        return self.server.filesystem()

    def path(self, sub: str = "") -> str:
        return f"{self.server.bucket}/{self.prefix}/{sub}".rstrip("/")

    def objects(self, sub: str = "") -> dict[str, int]:
        """Every object under prefix/sub: its path relative to prefix/sub -> size."""
        import pyarrow.fs as pafs

        base = self.path(sub)
        infos = self.fs.get_file_info(pafs.FileSelector(base, recursive=True,
                                                        allow_not_found=True))
        return {i.path[len(base) + 1:]: i.size for i in infos if i.type == pafs.FileType.File}


@pytest.fixture
def s3(s3_server) -> S3Place:
    return S3Place(s3_server, f"t-{uuid.uuid4().hex[:12]}")


@pytest.fixture
def s3_proxy(s3_server):
    """A fault-injecting proxy on 127.0.0.1 in front of the S3 server (tests/s3_proxy.py)."""
    from tests.s3_proxy import FaultProxy

    proxy = FaultProxy(s3_server.port).start()
    yield proxy
    proxy.stop()


def pytest_collection_modifyitems(config, items):
    for item in items:
        fixtures = getattr(item, "fixturenames", ())
        if {"spark", "connect", "connect_server"} & set(fixtures):
            item.add_marker(pytest.mark.spark)
        if {"connect", "connect_server"} & set(fixtures):
            item.add_marker(pytest.mark.connect)
