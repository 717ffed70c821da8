"""S3 file systems for checkpoint URIs: ``s3://bucket/path`` with optional query options.

Built here rather than by ``pyarrow.fs.FileSystem.from_uri`` so that

* the AWS SDK makes one attempt per request: ``retry.py`` retries whole storage calls with a
  bound, and logs and counts every retry (the SDK's own retries would be invisible);
* a small object goes up as one PutObject (``allow_delayed_open``) instead of a three-request
  multipart upload; objects above the part size (10 MB) still go up in parts;
* one S3FileSystem, hence one connection pool, serves every storage object of a URI in a
  process (restore opens storage per handle).

Options ride in the query string, under pyarrow's names: ``region``, ``endpoint_override``
(host:port), ``scheme`` (http or https), ``allow_bucket_creation``, ``connect_timeout``,
``request_timeout``, ``force_virtual_addressing``. Without ``endpoint_override`` the endpoint
comes from ``AWS_ENDPOINT_URL_S3`` or ``AWS_ENDPOINT_URL`` if set (else AWS). Credentials come
from the standard AWS chain of each process (``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY``
/ ``AWS_SESSION_TOKEN``, ``~/.aws``, an instance or container role): never from the URI, which
ends up in logs, Spark plans and error messages.
"""

from __future__ import annotations

import os
import threading
from urllib.parse import parse_qsl, urlsplit

import pyarrow.fs as pafs

from ..errors import StorageError
from .retry import Retrier

_BOOL = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}
_OPTIONS = {"region": str, "endpoint_override": str, "scheme": str,
            "allow_bucket_creation": bool, "connect_timeout": float, "request_timeout": float,
            "force_virtual_addressing": bool}

_cache: dict[tuple, tuple[pafs.S3FileSystem, Retrier]] = {}
_cache_lock = threading.Lock()


def parse(uri: str) -> tuple[str, str, dict]:
    """(display URI without options, bucket/path root, S3FileSystem keyword arguments)."""
    parts = urlsplit(uri)
    if parts.username is not None or parts.password is not None:
        raise StorageError(
            f"checkpoint URI s3://{parts.hostname}{parts.path} carries credentials; take them "
            f"out of the URI (it is logged and shipped to executors) and set "
            f"AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY or an AWS profile on the driver and "
            f"the executors")
    bucket = parts.netloc
    if not bucket:
        raise StorageError(f"checkpoint URI {uri} names no bucket; write s3://bucket/path")
    path = parts.path.strip("/")
    kwargs: dict = {}
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        kind = _OPTIONS.get(name)
        if kind is None:
            raise StorageError(f"checkpoint URI option {name!r} is not supported; the options "
                               f"are {', '.join(sorted(_OPTIONS))}")
        try:
            kwargs[name] = _BOOL[value.lower()] if kind is bool else kind(value)
        except (KeyError, ValueError):
            raise StorageError(f"checkpoint URI option {name}={value!r} is not a valid "
                               f"{kind.__name__}") from None
    if "endpoint_override" not in kwargs:
        env = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
        if env:
            endpoint = urlsplit(env if "://" in env else f"https://{env}")
            kwargs["endpoint_override"] = endpoint.netloc
            kwargs.setdefault("scheme", endpoint.scheme)
    root = f"{bucket}/{path}" if path else bucket
    display = f"s3://{root}"
    return display, root, kwargs


def open_s3(uri: str) -> tuple[pafs.S3FileSystem, str, str, Retrier]:
    """(file system, root, display URI, retrier) for an s3:// URI; file systems and their
    retry counters are shared per set of options within the process."""
    display, root, kwargs = parse(uri)
    ident = tuple(sorted(kwargs.items()))
    with _cache_lock:
        cached = _cache.get(ident)
    if cached is None:
        retry = pafs.AwsStandardS3RetryStrategy(max_attempts=1)
        try:
            try:
                fs = pafs.S3FileSystem(allow_delayed_open=True, retry_strategy=retry, **kwargs)
            except TypeError:  # pyarrow < 20: every upload is a multipart upload (3 requests)
                fs = pafs.S3FileSystem(retry_strategy=retry, **kwargs)
        except Exception as e:  # pyarrow raises ArrowInvalid / OSError variants
            raise StorageError(f"cannot open checkpoint storage {display}: {e}") from e
        with _cache_lock:
            cached = _cache.setdefault(ident, (fs, Retrier()))
    return cached[0], root, display, cached[1]
