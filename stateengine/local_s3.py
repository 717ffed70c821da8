"""A local S3-protocol server for the tests, the bench and the demo: moto's standalone server
(``moto[server]``, in the ``test`` extra) started as a child process on 127.0.0.1.

It keeps its objects in memory, so stopping it loses them; it is a real HTTP server speaking
the S3 REST protocol (signed requests, multipart uploads, listings, bulk deletes), which is
what ``pyarrow.fs.S3FileSystem`` talks to. Never for production data.

    with LocalS3Server() as s3:
        os.environ.update(s3.env())             # credentials, region, endpoint
        uri = s3.uri("checkpoints")             # s3://stateengine/checkpoints
"""

from __future__ import annotations

import atexit
import os
import socket
import subprocess
import sys
import time
from typing import IO

# moto accepts any credentials; fixed ones keep a developer's real keys out of requests.
ACCESS_KEY = "stateengine-local"
SECRET_KEY = "stateengine-local-secret"
REGION = "us-east-1"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port: int, timeout: float, proc: subprocess.Popen | None = None) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            return False
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return True
        except OSError:
            time.sleep(0.05)
    return False


class LocalS3Server:
    """moto's S3 server on 127.0.0.1 (a free port), with one bucket created."""

    def __init__(self, bucket: str = "stateengine", log_path: str | None = None) -> None:
        self.bucket = bucket
        self.log_path = log_path
        self.port = 0
        self.proc: subprocess.Popen | None = None
        self._log: IO[bytes] | None = None

    @property
    def endpoint(self) -> str:
        """host:port, what ``endpoint_override`` takes."""
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> "LocalS3Server":
        try:
            import moto.server  # noqa: F401  (fail with the install hint, not a child's traceback)
        except ImportError as e:
            raise RuntimeError(f"the local S3 server needs moto ({e}); install it with "
                               f"`pip install 'moto[server]'` (the test extra has it)") from None
        self._log = open(self.log_path, "ab") if self.log_path else None
        for _ in range(3):  # another process may take the free port before moto binds it
            self.port = free_port()
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
                stdout=self._log or subprocess.DEVNULL, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, env={**os.environ, **self.env()})
            if wait_for_port(self.port, timeout, self.proc):
                break
            self._stop_process()
        else:
            raise RuntimeError(f"moto's S3 server did not start on 127.0.0.1 (log: "
                               f"{self.log_path or 'not kept'})")
        atexit.register(self.stop)  # a caller that dies of an exception leaves no server behind
        self.filesystem(allow_bucket_creation=True).create_dir(self.bucket)
        return self

    def env(self, endpoint: str | None = None) -> dict[str, str]:
        """Environment for S3 clients (pyarrow, boto) that should reach this server: static
        credentials, the region, the endpoint, and no EC2 metadata lookups."""
        return {
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_DEFAULT_REGION": REGION,
            "AWS_REGION": REGION,
            "AWS_ENDPOINT_URL": f"http://{endpoint or self.endpoint}",
            "AWS_EC2_METADATA_DISABLED": "true",
        }

    def uri(self, path: str = "", endpoint: str | None = None, options: bool = True) -> str:
        """``s3://bucket/path``; with ``options`` the endpoint, scheme and region ride in the
        query string, so the URI alone reaches this server (executors need no endpoint
        variable). ``endpoint``: another host:port in front of the server (a proxy)."""
        base = f"s3://{self.bucket}/{path.strip('/')}".rstrip("/")
        if not options:
            return base
        return (f"{base}?endpoint_override={endpoint or self.endpoint}&scheme=http"
                f"&region={REGION}")

    def filesystem(self, endpoint: str | None = None, **kwargs):
        """A pyarrow S3FileSystem on this server (the tests' side door to the bucket)."""
        import pyarrow.fs as pafs

        return pafs.S3FileSystem(access_key=ACCESS_KEY, secret_key=SECRET_KEY, region=REGION,
                                 scheme="http", endpoint_override=endpoint or self.endpoint,
                                 **kwargs)

    def _stop_process(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.proc = None

    def stop(self) -> None:
        """Stops the server (by its PID); its objects are gone."""
        atexit.unregister(self.stop)
        self._stop_process()
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> "LocalS3Server":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
