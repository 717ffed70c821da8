"""A Spark Connect server for the tests: a separate JVM (pyspark's own ``bin/spark-submit``
running ``SparkConnectServer``) bound to 127.0.0.1 on a free port, guarded by a random token,
and a Connect client session to it.

The server's Python workers inherit this process's environment (``PYTHONPATH`` with this
checkout, ``PYSPARK_PYTHON``), so they import the same stateengine as the classic session's.
The client is made with ``pyspark.sql.connect``'s own builder: it leaves the process-wide
"Connect mode" switch alone, so the classic session of the other tests keeps working beside it.
"""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
import sys
import time

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tail(path: str, chars: int = 3000) -> str:
    try:
        with open(path, errors="replace") as f:
            return f.read()[-chars:]
    except OSError:
        return ""


class ConnectServer:
    """Starts the server process; ``stop()`` ends it (only this process, by its handle)."""

    def __init__(self, log_path: str, timeout: float = 180) -> None:
        import pyspark

        spark_home = os.path.dirname(pyspark.__file__)
        from stateengine.spark import ui_jar

        self.port = _free_port()
        self.ui_port = _free_port()
        self.token = secrets.token_hex(16)
        self.log_path = log_path
        paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
        env = dict(os.environ, SPARK_HOME=spark_home, SPARK_LOCAL_IP="127.0.0.1",
                   PYSPARK_PYTHON=os.environ.get("PYSPARK_PYTHON", sys.executable),
                   PYTHONPATH=os.pathsep.join([ROOT, *[p for p in paths if p != ROOT]]),
                   SPARK_CONNECT_AUTHENTICATE_TOKEN=self.token)
        env.pop("SPARK_REMOTE", None)
        env.pop("SPARK_CONNECT_MODE_ENABLED", None)
        confs = {
            "spark.connect.grpc.binding.address": "127.0.0.1",
            "spark.connect.grpc.binding.port": str(self.port),
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
            # the UI, with stateengine's metrics jar, for tests/test_spark_ui_metrics.py
            "spark.ui.enabled": "true",
            "spark.ui.port": str(self.ui_port),
            "spark.jars": ui_jar(),
            "spark.ui.showConsoleProgress": "false",
            "spark.sql.shuffle.partitions": "4",
            "spark.default.parallelism": "4",
            "spark.python.worker.reuse": "true",
            "spark.sql.session.timeZone": "UTC",
        }
        cmd = [os.path.join(spark_home, "bin", "spark-submit"), "--class", SERVER_CLASS,
               "--name", "stateengine-connect-tests", "--master", "local[2,4]"]
        for k, v in confs.items():
            cmd += ["--conf", f"{k}={v}"]
        self.log = open(log_path, "wb")
        self.proc = subprocess.Popen(cmd, env=env, stdout=self.log, stderr=subprocess.STDOUT,
                                     cwd=os.path.dirname(log_path))
        self._wait(timeout)

    def _wait(self, timeout: float) -> None:
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the Spark Connect server exited with {self.proc.returncode}:"
                                   f"\n{_tail(self.log_path)}")
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            time.sleep(0.5)
        self.stop()
        raise TimeoutError(f"the Spark Connect server did not listen on 127.0.0.1:{self.port} "
                           f"within {timeout:.0f}s:\n{_tail(self.log_path)}")

    @property
    def url(self) -> str:
        # "localhost" (not an address) lets the client send the token without TLS, over a
        # channel that only accepts local connections.
        return f"sc://localhost:{self.port}/;token={self.token}"

    def session(self):
        from pyspark.sql.connect.session import SparkSession as ConnectSession

        return ConnectSession.builder.remote(self.url).getOrCreate()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
