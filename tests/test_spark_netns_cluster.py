"""A Spark standalone cluster whose machines share nothing but the network.

The S3 server (moto), the Spark master, the driver and the workers each live in their own
network namespace on a private subnet of this test (10.231.7.0/24 behind a bridge in a
namespace of its own; no namespace has a route anywhere else and the host's namespace is not
on it), with a private /tmp, /var/tmp and /dev/shm each (a private mount namespace per
process over the machine's own directory). Every worker creates its own virtualenv from a
private copy of the release wheel (and numpy/pyarrow/pandas wheels), with pip offline. The
keyed state lives on the S3 server. The job (tests/cluster_job.py: a stateful streaming query,
deterministic input) runs two batches on workers A and B, worker B's machine dies (every
process in its namespace gets SIGKILL, by PID), worker C joins, two more batches run, then the
query restarts from its checkpoint with three partitions instead of two for two batches more.
Every batch's output must equal a single-process run of the same job, every row must come
from a worker that imported stateengine from its own virtualenv and saw no other machine's
files, and no row after the kill may come from B.

The project's rule "bind Spark to loopback" is about the real network: here Spark binds to
addresses of namespaces this test creates, on a subnet that reaches nothing but those
namespaces, which is the point of the test. Where the sandbox refuses namespaces (no root, no
CAP_NET_ADMIN/CAP_SYS_ADMIN) the test skips and says why.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import subprocess
import sys
import threading
import uuid

import pytest

from tests.netns_cluster import NamespacesRefused, PrivateNetwork

pytestmark = [pytest.mark.spark, pytest.mark.cluster, pytest.mark.slow]

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
JOB = os.path.join(ROOT, "tests", "cluster_job.py")
SUBNET = "10.231.7"
S3_PORT = 9000
BUCKET = "stateengine"


def _spark_home() -> str:
    import pyspark

    return os.path.dirname(pyspark.__file__)


@pytest.fixture(scope="module")
def network(tmp_path_factory):
    net = PrivateNetwork(f"se{uuid.uuid4().hex[:6]}", SUBNET,
                         str(tmp_path_factory.mktemp("machines")),
                         read_only=[sys.prefix, ROOT, _spark_home()])
    try:
        net.create()
    except NamespacesRefused as e:
        net.destroy()
        pytest.skip(f"the sandbox refuses network/mount namespaces: {e}")
    yield net
    net.destroy()


@pytest.fixture(scope="module")
def wheels(wheel, tmp_path_factory):
    """The release wheel and the wheels of what a worker needs beside it (the driver's own
    numpy/pyarrow/pandas versions), fetched once by the host."""
    import numpy
    import pandas
    import pyarrow

    out = tmp_path_factory.mktemp("worker-wheels")
    shutil.copy(wheel, out)
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check",
                    "--only-binary=:all:", "-d", str(out), f"numpy=={numpy.__version__}",
                    f"pyarrow=={pyarrow.__version__}", f"pandas=={pandas.__version__}"],
                   check=True, cwd=str(out))
    return str(out)


def _worker(network, name: str, host: int, wheels: str):
    """A worker machine with its own virtualenv at /tmp/venv, installed offline from a private
    copy of the wheels."""
    m = network.machine(name, host)
    shutil.copytree(wheels, m.path("/tmp/wheels"))
    base = getattr(sys, "_base_executable", sys.executable)
    m.run([base, "-m", "venv", "/tmp/venv"])
    m.run(["/tmp/venv/bin/python", "-m", "pip", "install", "-q", "--disable-pip-version-check",
           "--no-index", "--find-links", "/tmp/wheels", "stateengine", "pandas"])
    where = m.run(["/tmp/venv/bin/python", "-c", "import stateengine._native, stateengine; "
                   "print(stateengine.__file__)"]).strip()
    assert where.startswith("/tmp/venv/"), where
    return m


def _start_worker(m, master: str, s3_env: dict[str, str], logs: str):
    proc = m.start([os.path.join(_spark_home(), "bin", "spark-class"),
                    "org.apache.spark.deploy.worker.Worker", "--host", m.address, "--port",
                    "7078", "--webui-port", "8081", "--cores", "1", "--memory", "1g",
                    "--work-dir", "/tmp/work", f"spark://{master}:7077"],
                   os.path.join(logs, f"{m.name}.log"),
                   env=m.env(SPARK_HOME=_spark_home(), SPARK_NO_DAEMONIZE="1",
                             SPARK_LOCAL_DIRS="/tmp/local", SPARK_LOG_DIR="/tmp/logs", **s3_env))
    m.wait_for_port(m.address, 7078, proc=proc)
    return proc


class Driver:
    """The job's driver process on the driver machine, its stdout read line by line."""

    def __init__(self, machine, args: list[str], env: dict[str, str], log: str) -> None:
        self.log = open(log, "a")
        self.proc = machine.start([sys.executable, JOB, *args], log, env=env,
                                  stdout=subprocess.PIPE, stderr=self.log,
                                  stdin=subprocess.PIPE, text=True)
        self.lines: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.log.write(line)
            self.log.flush()
            self.lines.put(line.strip())
        self.lines.put(None)

    def wait_for(self, prefix: str, timeout: float = 600) -> str:
        while True:
            try:
                line = self.lines.get(timeout=timeout)
            except queue.Empty:
                raise TimeoutError(f"the driver did not print {prefix!r} (log {self.log.name})")
            if line is None:
                raise RuntimeError(f"the driver exited ({self.proc.wait()}) before {prefix!r}; "
                                   f"log {self.log.name}")
            if line.startswith(prefix):
                return line

    def finish(self, timeout: float = 600) -> None:
        self.proc.stdin.close()
        code = self.proc.wait(timeout)
        assert code == 0, f"the driver exited with {code}; log {self.log.name}"


def _batches(path: str) -> dict[int, list[dict]]:
    out: dict[int, list[dict]] = {}
    with open(path) as f:
        for line in f:
            b = json.loads(line)
            assert b["batch"] not in out, f"batch {b['batch']} was written twice"
            out[b["batch"]] = b["rows"]
    return out


def _state(rows: list[dict]) -> list[tuple]:
    return sorted((r["user"], r["batch_events"], r["events"], r["amount"]) for r in rows)


@pytest.mark.timeout(2400)  # six JVMs, three virtualenvs and two Spark runs; slow when loaded
def test_share_nothing_cluster_survives_a_dead_worker_and_a_rescale(network, wheels, tmp_path):
    from stateengine.local_s3 import LocalS3Server

    logs = str(tmp_path)
    s3_machine = network.machine("s3", 10)
    endpoint = f"{s3_machine.address}:{S3_PORT}"
    s3 = LocalS3Server(bucket=BUCKET)
    s3_env = s3.env(endpoint=endpoint)
    server = s3_machine.start([sys.executable, "-m", "moto.server", "-H", s3_machine.address,
                               "-p", str(S3_PORT)], os.path.join(logs, "s3.log"),
                              env=s3_machine.env(**s3_env))
    s3_machine.wait_for_port(s3_machine.address, S3_PORT, proc=server)
    s3_machine.run([sys.executable, "-c",
                    "import sys; from stateengine.local_s3 import LocalS3Server as S; "
                    "S(bucket=sys.argv[1]).filesystem(sys.argv[2], allow_bucket_creation=True)"
                    ".create_dir(sys.argv[1])", BUCKET, endpoint],
                   env=s3_machine.env(PYTHONPATH=ROOT, **s3_env))

    master = network.machine("master", 11)
    master_proc = master.start([os.path.join(_spark_home(), "bin", "spark-class"),
                                "org.apache.spark.deploy.master.Master", "--host",
                                master.address, "--port", "7077", "--webui-port", "8080"],
                               os.path.join(logs, "master.log"),
                               env=master.env(SPARK_HOME=_spark_home(), SPARK_NO_DAEMONIZE="1",
                                              SPARK_LOG_DIR="/tmp/logs"))
    master.wait_for_port(master.address, 7077, proc=master_proc)

    a, b, c = (_worker(network, n, h, wheels) for n, h in (("worker-a", 21), ("worker-b", 22),
                                                          ("worker-c", 23)))
    for w in (a, b):
        _start_worker(w, master.address, s3_env, logs)

    driver = network.machine("driver", 12)
    driver_env = driver.env(PYTHONPATH=ROOT, PYSPARK_PYTHON="/tmp/venv/bin/python",
                            PYSPARK_DRIVER_PYTHON=sys.executable, **s3_env)
    checkpoint = s3.uri("job", endpoint=endpoint)
    common = ["--master", f"spark://{master.address}:7077", "--host", driver.address,
              "--checkpoint", checkpoint, "--stream-dir", "/tmp/stream", "--out",
              "/tmp/out.jsonl", "--executor-python", "/tmp/venv/bin/python"]

    # batches 0-1 on A and B; B dies; C joins; batches 2-3 on A and C
    first = Driver(driver, [*common, "--partitions", "2", "--batches", "4", "--pause-after",
                            "1", "--wait-hosts", f"{a.address},{b.address}"],
                   driver_env, os.path.join(logs, "driver-1.log"))
    first.wait_for("PAUSED 1")
    killed = b.kill()
    assert killed, "worker B had no processes"
    _start_worker(c, master.address, s3_env, logs)
    first.proc.stdin.write(json.dumps([a.address, c.address]) + "\n")
    first.proc.stdin.flush()
    first.wait_for("RESUMED")
    first.finish()
    # the query restarts from its checkpoint with 3 partitions: batches 4-5 on A and C
    second = Driver(driver, [*common, "--partitions", "3", "--batches", "6", "--wait-hosts",
                             f"{a.address},{c.address}"],
                    driver_env, os.path.join(logs, "driver-2.log"))
    second.finish()
    cluster = _batches(driver.path("/tmp/out.jsonl"))

    # the same job in one process: local mode on loopback, state on local disk
    ref_dir = tmp_path / "single"
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable,
               PYSPARK_DRIVER_PYTHON=sys.executable,
               PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, JOB, "--master", "local[1]", "--checkpoint",
                           str(ref_dir / "state"), "--stream-dir", str(ref_dir / "stream"),
                           "--out", str(ref_dir / "out.jsonl"), "--partitions", "2",
                           "--batches", "6"], env=env, capture_output=True, text=True,
                          timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    single = _batches(str(ref_dir / "out.jsonl"))

    assert sorted(cluster) == sorted(single) == list(range(6))
    for batch in range(6):
        assert _state(cluster[batch]) == _state(single[batch]), f"batch {batch} differs"
        assert cluster[batch], f"batch {batch} is empty"
    rows = [(batch, r) for batch, rs in cluster.items() for r in rs]
    # every row came from a worker's own virtualenv, on a machine that saw only its own files
    assert all(r["module"].startswith("/tmp/venv/") for _, r in rows)
    assert all(r["seen"] == r["machine"] for _, r in rows), \
        {(r["machine"], r["seen"]) for _, r in rows if r["seen"] != r["machine"]}
    machines = {batch: {r["machine"] for r in cluster[batch]} for batch in cluster}
    assert set().union(*(machines[i] for i in (0, 1))) == {a.address, b.address}
    assert all(machines[i] <= {a.address, c.address} for i in range(2, 6)), machines
    assert c.address in set().union(*(machines[i] for i in range(2, 6))), machines
