"""A fault-injecting HTTP/1.1 proxy on 127.0.0.1 in front of an S3 server.

The checkpoint storage is pointed at the proxy (``endpoint_override``); the proxy forwards each
request to the server, counts it (method, path, status, bytes each way) and, when a fault is
armed, answers in its place:

* ``fail(status, times= | seconds=)``: answer 500/503 with S3's error XML instead of forwarding;
* ``stop_during_upload(after_bytes)``: the server stops in the middle of an upload: the proxy
  takes part of a PUT body, then drops every connection and refuses new ones (the listening
  socket is closed) until ``up()`` or the given downtime passes — what a client sees of a
  server that was stopped and started again;
* ``cut_download(keep_bytes)``: a GET answer is cut off after part of its body (the server
  announced the full length);
* ``delay(seconds)``: forward matching requests after a pause (slow uploads);
* ``truncate_upload(keep_bytes)``: the server receives a PUT body cut short, with a
  Content-Length that matches, and stores the truncated object.

Plain sockets and threads: the faults need control over exactly which bytes go out.
"""

from __future__ import annotations

import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

_ERROR_XML = ('<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code>'
              '<Message>injected by the test proxy</Message><RequestId>proxy</RequestId></Error>')
_CODES = {500: ("InternalError", "Internal Server Error"),
          503: ("SlowDown", "Service Unavailable")}


@dataclass
class Exchange:
    """One request as the proxy saw it."""

    method: str
    path: str
    query: str
    status: int  # 0: no answer (connection dropped)
    request_bytes: int  # request line, headers and body from the client
    body_bytes: int  # the request body alone (what an upload sends)
    response_bytes: int  # status line, headers and body back to the client
    fault: str = ""
    started: float = 0.0  # time.monotonic() when the request's head had arrived
    ended: float = 0.0  # ... and when the proxy had answered (or given up)


@dataclass
class _Fault:
    kind: str
    match: Callable[[str, str, str], bool]
    times: int | None = None
    until: float | None = None
    status: int = 503
    nbytes: int = 0
    downtime: float | None = None
    delay: float = 0.0
    hits: int = 0

    def live(self) -> bool:
        if self.times is not None and self.hits >= self.times:
            return False
        return self.until is None or time.monotonic() < self.until


@dataclass
class _Message:
    head: bytes
    first_line: str
    headers: list[tuple[str, str]] = field(default_factory=list)

    def header(self, name: str) -> str | None:
        name = name.lower()
        for k, v in self.headers:
            if k.lower() == name:
                return v
        return None


class _Closed(Exception):
    pass


def _read_head(f) -> _Message:
    lines = []
    while True:
        line = f.readline(65537)
        if not line:
            raise _Closed()
        if line in (b"\r\n", b"\n"):
            break
        lines.append(line)
    if not lines:
        raise _Closed()
    first = lines[0].decode("latin-1").rstrip("\r\n")
    headers = []
    for raw in lines[1:]:
        k, _, v = raw.decode("latin-1").partition(":")
        headers.append((k.strip(), v.strip()))
    return _Message(b"".join(lines) + b"\r\n", first, headers)


def _build_head(first_line: str, headers: list[tuple[str, str]]) -> bytes:
    return (first_line + "\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers) + "\r\n").encode("latin-1")


def _read_body(f, msg: _Message) -> bytes:
    """The body exactly as framed on the wire (chunked bodies keep their chunk framing)."""
    if (msg.header("transfer-encoding") or "").lower() == "chunked":
        parts = []
        while True:
            size_line = f.readline(65537)
            if not size_line:
                raise _Closed()
            parts.append(size_line)
            size = int(size_line.split(b";")[0].strip(), 16)
            if size == 0:
                while True:  # trailers, then the blank line
                    t = f.readline(65537)
                    if not t:
                        raise _Closed()
                    parts.append(t)
                    if t in (b"\r\n", b"\n"):
                        return b"".join(parts)
            chunk = f.read(size + 2)
            if len(chunk) < size + 2:
                raise _Closed()
            parts.append(chunk)
    n = int(msg.header("content-length") or 0)
    body = f.read(n) if n else b""
    if len(body) < n:
        raise _Closed()
    return body


class FaultProxy:
    """Forwards 127.0.0.1:``port`` to the S3 server at 127.0.0.1:``upstream_port``."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.port = 0
        self.exchanges: list[Exchange] = []
        self._faults: list[_Fault] = []
        self._lock = threading.Lock()
        self._thread = threading.local()  # the request being served by this thread
        self._listener: socket.socket | None = None
        self._clients: set[socket.socket] = set()
        self._down = False
        self._stopped = False

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.port}"

    # ---- lifecycle -------------------------------------------------------------------------

    def start(self) -> "FaultProxy":
        self._listen()
        return self

    def _listen(self) -> None:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", self.port))
        s.listen(64)
        self.port = s.getsockname()[1]
        self._listener = s
        threading.Thread(target=self._accept, args=(s,), daemon=True,
                         name="s3-proxy-accept").start()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return  # closed: down() or stop()
            with self._lock:
                if self._down or self._stopped:
                    _abort(conn)
                    continue
                self._clients.add(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True,
                             name="s3-proxy-conn").start()

    def down(self) -> None:
        """The server disappears: open connections are reset, new ones refused."""
        with self._lock:
            self._down = True
            listener, self._listener = self._listener, None
            clients, self._clients = self._clients, set()
        if listener is not None:
            listener.close()
        for c in clients:
            _abort(c)

    def up(self) -> None:
        """The server is back (same port)."""
        with self._lock:
            if not self._down or self._stopped:
                return
            self._down = False
        self._listen()

    def stop(self) -> None:
        self.down()
        self._stopped = True

    # ---- faults ----------------------------------------------------------------------------

    @staticmethod
    def _matcher(method: str | None, path: str | None) -> Callable[[str, str, str], bool]:
        return lambda m, p, q: (method is None or m == method) and (path is None or path in p)

    def fail(self, status: int = 503, *, times: int | None = None, seconds: float | None = None,
             method: str | None = None, path: str | None = None) -> None:
        """Answer matching requests with ``status`` (not forwarded), ``times`` times or for
        ``seconds``."""
        until = None if seconds is None else time.monotonic() + seconds
        self._arm(_Fault("status", self._matcher(method, path), times, until, status=status))

    def stop_during_upload(self, after_bytes: int, *, path: str | None = None,
                           downtime: float | None = 1.0) -> None:
        """The next matching PUT: take ``after_bytes`` of its body, then go down (for
        ``downtime`` seconds, or until ``up()`` if None)."""
        self._arm(_Fault("stop", self._matcher("PUT", path), 1, nbytes=after_bytes,
                         downtime=downtime))

    def delay(self, seconds: float, *, method: str | None = None, path: str | None = None,
              times: int | None = None) -> None:
        """Forward matching requests ``seconds`` late (all of them unless ``times``)."""
        self._arm(_Fault("delay", self._matcher(method, path), times, delay=seconds))

    def cut_download(self, keep_bytes: int, *, path: str | None = None, times: int = 1) -> None:
        self._arm(_Fault("cut", self._matcher("GET", path), times, nbytes=keep_bytes))

    def truncate_upload(self, keep_bytes: int, *, path: str | None = None, times: int = 1) -> None:
        self._arm(_Fault("truncate", self._matcher("PUT", path), times, nbytes=keep_bytes))

    def _arm(self, fault: _Fault) -> None:
        with self._lock:
            self._faults.append(fault)

    def clear_faults(self) -> None:
        with self._lock:
            self._faults.clear()

    def _take_fault(self, method: str, path: str, query: str) -> _Fault | None:
        with self._lock:
            self._faults = [f for f in self._faults if f.live()]
            for f in self._faults:
                if f.match(method, path, query):
                    f.hits += 1
                    return f
        return None

    # ---- counting --------------------------------------------------------------------------

    def reset_counts(self) -> None:
        with self._lock:
            self.exchanges = []

    def snapshot(self) -> list[Exchange]:
        with self._lock:
            return list(self.exchanges)

    def _record(self, ex: Exchange) -> None:
        ex.started = getattr(self._thread, "started", 0.0)
        ex.ended = time.monotonic()
        with self._lock:
            self.exchanges.append(ex)

    # ---- forwarding ------------------------------------------------------------------------

    def _serve(self, conn: socket.socket) -> None:
        upstream: socket.socket | None = None
        up_file = None
        f = conn.makefile("rb")
        try:
            while True:
                try:
                    req = _read_head(f)
                except (_Closed, OSError, ValueError):
                    return
                self._thread.started = time.monotonic()
                method, target, _ = (req.first_line.split(" ", 2) + ["", ""])[:3]
                path, _, query = target.partition("?")
                expect = (req.header("expect") or "").lower() == "100-continue"
                headers = [(k, v) for k, v in req.headers if k.lower() != "expect"]
                fault = self._take_fault(method, path, query)
                if expect:
                    conn.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
                if fault is not None and fault.kind == "stop":
                    n = int(req.header("content-length") or 0)
                    got = f.read(min(fault.nbytes, n))
                    self._record(Exchange(method, path, query, 0, len(req.head) + len(got),
                                          len(got), 0, "stop"))
                    self.down()
                    if fault.downtime is not None:
                        threading.Timer(fault.downtime, self.up).start()
                    return
                try:
                    body = _read_body(f, req)
                except (_Closed, OSError, ValueError):
                    return
                sent_up = len(req.head) + len(body)
                if fault is not None and fault.kind == "status":
                    code, reason = _CODES.get(fault.status, ("InternalError", "Error"))
                    payload = _ERROR_XML.format(code=code).encode()
                    head = _build_head(f"HTTP/1.1 {fault.status} {reason}", [
                        ("Content-Type", "application/xml"), ("Content-Length", str(len(payload))),
                        ("Connection", "close")])
                    conn.sendall(head + payload)
                    self._record(Exchange(method, path, query, fault.status, sent_up, len(body),
                                          len(head) + len(payload), "status"))
                    return
                if fault is not None and fault.kind == "delay":
                    time.sleep(fault.delay)
                if fault is not None and fault.kind == "truncate" and body:
                    headers, body = _truncated(req, headers, body, fault.nbytes)
                if upstream is None:
                    upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
                    up_file = upstream.makefile("rb")
                upstream.sendall(_build_head(req.first_line, headers) + body)
                try:
                    resp = _read_head(up_file)
                    while resp.first_line.split(" ")[1:2] == ["100"]:
                        resp = _read_head(up_file)
                except _Closed:
                    return
                status = int(resp.first_line.split(" ")[1])
                framed = True
                if method == "HEAD" or status in (204, 304) or 100 <= status < 200:
                    resp_body = b""
                elif resp.header("content-length") is not None or \
                        (resp.header("transfer-encoding") or "").lower() == "chunked":
                    resp_body = _read_body(up_file, resp)
                else:
                    resp_body = up_file.read()  # until the server closes
                    framed = False
                if fault is not None and fault.kind == "cut" and resp_body:
                    keep = resp_body[:fault.nbytes]
                    conn.sendall(resp.head + keep)
                    self._record(Exchange(method, path, query, status, sent_up, len(body),
                                          len(resp.head) + len(keep), "cut"))
                    return
                conn.sendall(resp.head + resp_body)
                self._record(Exchange(method, path, query, status, sent_up, len(body),
                                      len(resp.head) + len(resp_body),
                                      fault.kind if fault is not None else ""))
                server_closes = (resp.header("connection") or "").lower() == "close"
                if not framed or server_closes:
                    upstream.close()
                    upstream = None
                    if not framed:
                        return
        except OSError:
            return
        finally:
            with self._lock:
                self._clients.discard(conn)
            _abort(conn)
            if upstream is not None:
                upstream.close()


def _dechunk(body: bytes) -> bytes:
    """The payload of an HTTP chunked body."""
    out, pos = [], 0
    while True:
        end = body.index(b"\r\n", pos)
        size = int(body[pos:end].split(b";")[0], 16)
        if size == 0:
            return b"".join(out)
        out.append(body[end + 2:end + 2 + size])
        pos = end + 2 + size + 2


def _truncated(req: _Message, headers: list[tuple[str, str]], body: bytes,
               keep: int) -> tuple[list[tuple[str, str]], bytes]:
    """The request with only the first ``keep`` bytes of the object, its lengths adjusted to
    match (an aws-chunked upload keeps its checksum trailer, now wrong), sent with a
    Content-Length."""
    if (req.header("transfer-encoding") or "").lower() == "chunked":
        body = _dechunk(body)
    drop = {"content-length", "transfer-encoding", "x-amz-decoded-content-length"}
    headers = [(k, v) for k, v in headers if k.lower() not in drop]
    if "aws-chunked" in (req.header("content-encoding") or ""):
        data, trailer, pos = [], b"", 0
        while True:  # aws-chunked: hex size, data, ..., 0, trailer lines
            end = body.index(b"\r\n", pos)
            size = int(body[pos:end].split(b";")[0], 16)
            if size == 0:
                trailer = body[end + 2:]
                break
            data.append(body[end + 2:end + 2 + size])
            pos = end + 2 + size + 2
        payload = b"".join(data)[:keep]
        body = b"%x\r\n%s\r\n0\r\n" % (len(payload), payload) + trailer
        headers.append(("x-amz-decoded-content-length", str(len(payload))))
    else:
        body = body[:keep]
    headers.append(("Content-Length", str(len(body))))
    return headers, body


def _abort(conn: socket.socket) -> None:
    """Close with a reset (SO_LINGER 0), as a process that died would."""
    try:
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    except OSError:
        pass
    try:
        conn.close()
    except OSError:
        pass


def totals(exchanges: list[Exchange]) -> dict[str, int]:
    """Requests by method, and bytes up and down."""
    out: dict[str, int] = {"requests": len(exchanges),
                           "bytes_up": sum(e.request_bytes for e in exchanges),
                           "bytes_down": sum(e.response_bytes for e in exchanges)}
    for e in exchanges:
        out[e.method] = out.get(e.method, 0) + 1
    return out
