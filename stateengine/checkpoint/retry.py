"""Bounded retries of checkpoint-storage calls that failed transiently.

Object stores answer 500 and 503 (SlowDown) under load and drop connections; a checkpoint must
ride those out, but never for ever and never silently. A storage call is attempted at most
``max_attempts`` times with exponential backoff (each delay between half and all of
``base_delay * 2**n``, at most ``max_delay``); every retry is logged on the ``stateengine``
logger (``stateengine.storage``, WARNING) and counted, and StateStore reports the count in its
commit and load metrics. Only failures that can pass are retried: network errors, 5xx
answers, throttling, and an upload that the store kept shorter than the file (a truncated
object). A missing file, a denied request or a wrong bucket fail at once.

Defaults: 8 attempts, 0.2 s first delay, 5 s largest (about 16 s of waiting in all); the
environment variables ``STATEENGINE_STORAGE_ATTEMPTS`` and ``STATEENGINE_STORAGE_RETRY_DELAY``
(the first delay, in seconds) change them in every process that reads them, executors included.
"""

from __future__ import annotations

import logging
import os
import random
import re
import threading
import time
from dataclasses import dataclass
from typing import Callable, TypeVar

from ..errors import StorageError

log = logging.getLogger("stateengine.storage")

T = TypeVar("T")

# Markers of transient failures in the messages of pyarrow's S3 client (AWS SDK error names,
# curl failures, HTTP statuses) and of Python's own socket errors.
_TRANSIENT = re.compile(
    r"NETWORK_CONNECTION|SLOW_DOWN|SERVICE_UNAVAILABLE|INTERNAL_FAILURE|THROTTL|"
    r"REQUEST_TIMEOUT|REQUEST_TIME_TOO_SKEWED|curlCode|HTTP status (?:5\d\d|429|408)|"
    r"Connection reset|Connection refused|timed out|Broken pipe", re.IGNORECASE)


class ShortUploadError(OSError):
    """The store holds fewer (or more) bytes than were uploaded: a truncated object."""


def is_transient(error: BaseException) -> bool:
    if isinstance(error, ShortUploadError):
        return True
    if isinstance(error, StorageError):  # ours: already retried where it happened, or damage
        return False
    if isinstance(error, (FileNotFoundError, PermissionError, IsADirectoryError,
                          NotADirectoryError)) or not isinstance(error, OSError):
        return False
    return _TRANSIENT.search(str(error)) is not None


@dataclass(frozen=True)
class RetryPolicy:
    max_attempts: int = 8
    base_delay: float = 0.2
    max_delay: float = 5.0

    @classmethod
    def from_env(cls) -> "RetryPolicy":
        attempts = os.environ.get("STATEENGINE_STORAGE_ATTEMPTS", "")
        delay = os.environ.get("STATEENGINE_STORAGE_RETRY_DELAY", "")
        try:
            return cls(max(1, int(attempts)) if attempts else cls.max_attempts,
                       max(0.0, float(delay)) if delay else cls.base_delay)
        except ValueError:
            raise ValueError(f"STATEENGINE_STORAGE_ATTEMPTS ({attempts!r}) must be an int and "
                             f"STATEENGINE_STORAGE_RETRY_DELAY ({delay!r}) a number of "
                             f"seconds") from None

    def delay(self, retry: int) -> float:
        """Seconds to wait before retry number ``retry`` (1, 2, ...)."""
        ceiling = min(self.max_delay, self.base_delay * (2 ** (retry - 1)))
        return ceiling / 2 + random.uniform(0, ceiling / 2)


class Retrier:
    """Runs storage calls under a policy and counts the retries (shared by every storage
    object of one file system in a process)."""

    def __init__(self, policy: RetryPolicy | None = None) -> None:
        self._policy = policy
        self._retries = 0
        self._lock = threading.Lock()

    @property
    def policy(self) -> RetryPolicy:
        """The policy given, else the environment's at the time of the call."""
        return self._policy or RetryPolicy.from_env()

    @property
    def retries(self) -> int:
        """Retries so far (monotonic; callers take differences)."""
        with self._lock:
            return self._retries

    def call(self, what: str, fn: Callable[[], T]) -> T:
        """fn(), retried while it fails transiently; raises StorageError naming ``what`` and
        the attempts once they are used up, or fn's own error if it is not transient."""
        policy = self.policy
        attempt = 1
        while True:
            try:
                return fn()
            except OSError as e:
                if not is_transient(e):
                    raise
                if attempt >= policy.max_attempts:
                    raise StorageError(
                        f"{what} failed {attempt} times, giving up (retries are bounded by "
                        f"STATEENGINE_STORAGE_ATTEMPTS={policy.max_attempts}); last "
                        f"error: {e}") from e
                wait = policy.delay(attempt)
                with self._lock:
                    self._retries += 1
                log.warning("%s failed (attempt %d of %d), retrying in %.2f s: %s", what,
                            attempt, policy.max_attempts, wait, e)
                time.sleep(wait)
                attempt += 1
