"""Exceptions raised by stateengine.

Every error says what was wrong and what to do about it. Each subclasses the built-in exception
a Python user would catch for the same mistake (``TypeError`` for a wrong type, ``ValueError``
for a bad value), so ``except TypeError`` keeps working.
"""

from __future__ import annotations


class StateEngineError(Exception):
    """Base class of every stateengine error."""


class StateRegistrationError(StateEngineError, ValueError):
    """A state name is reserved, or is already registered with another kind or serializer."""


class UnknownStateError(StateEngineError, KeyError):
    """A state name that no descriptor registered (and no snapshot holds)."""

    def __str__(self) -> str:  # KeyError would print the repr of the message
        return str(self.args[0]) if self.args else ""


class NoCurrentKeyError(StateEngineError, RuntimeError):
    """Keyed state was accessed before ``set_current_key``."""


class KeyGroupOutOfRangeError(StateEngineError, ValueError):
    """A key hashes to a key group that this backend does not own."""


class KeyTypeError(StateEngineError, TypeError):
    """A key does not match the backend's key type."""


class SerializationError(StateEngineError, TypeError):
    """A value cannot be encoded by its state's serializer."""


class NullElementError(StateEngineError, ValueError):
    """``None`` where the state does not allow it (list elements)."""


class BackendClosedError(StateEngineError, RuntimeError):
    """The backend (or a state handle of it) was used after ``close()``."""


class StorageError(StateEngineError, OSError):
    """RocksDB or the checkpoint file system reported an I/O failure."""


class CorruptionError(StorageError):
    """Stored bytes (in RocksDB or a checkpoint file) failed a consistency check."""


class CheckpointNotFoundError(StateEngineError, FileNotFoundError):
    """A checkpoint, version or checkpoint file that does not exist."""


class CheckpointFileMissingError(CorruptionError, CheckpointNotFoundError):
    """A file that a checkpoint's manifest or handle names is not there: the checkpoint is
    damaged (a CorruptionError) and the file not found (a CheckpointNotFoundError)."""


class StaleCommitError(StateEngineError, RuntimeError):
    """A commit would publish a checkpoint that reuses files the checkpoint it builds on no
    longer protects: that checkpoint was removed (retention pruned it, or another writer
    replaced it) since this writer loaded it, typically a zombie task still committing long
    after the query moved on. Nothing is published; load the latest version and commit again."""


class IncompatibleStateError(StateEngineError, ValueError):
    """Restored state does not fit the descriptors registered now (kind, serializers, key type,
    max parallelism)."""


class SchemaEvolutionError(IncompatibleStateError, StateRegistrationError):
    """A typed state's declared schema cannot evolve from the stored one (narrowing, a changed
    type, NOT NULL where old entries have no value, a changed map user key or key type).
    Raised before anything is read or written; ``problems`` lists each offending path as
    ``(where, old, new, why)`` and the message shows them all, one per line."""

    def __init__(self, message: str, problems: list[tuple[str, str, str, str]] | None = None):
        super().__init__(message)
        self.problems = list(problems or [])


class TtlTimeNotSetError(StateEngineError, RuntimeError):
    """A state with TTL was read or written before the backend was given a TTL time
    (``set_ttl_time``; ``batch_timestamp_ms=`` in stateengine.spark). TTL never reads the
    wall clock."""


class TtlTimeRangeError(StateEngineError, ValueError):
    """A TTL time whose expiry arithmetic (time + the state's TTL) would leave int64
    milliseconds: given to ``set_ttl_time``, or found stored with an entry."""


class IllegalStoreStateError(StateEngineError, RuntimeError):
    """A StateStore call that its current state (committed, aborted) does not allow."""


class SnapshotCancelledError(StateEngineError):
    """An asynchronous snapshot was cancelled before it finished."""


class PickleNotAllowedError(StateEngineError, RuntimeError):
    """Stored data is a pickle and the reader did not pass ``allow_pickle=True``. Unpickling
    runs code chosen by whoever wrote the checkpoint, so it happens only on opt-in."""


class MixedTypesError(StateEngineError, TypeError):
    """The values of a default-serializer state have no single Spark type to read them as
    (``read_state``); pass the type (``value_type=``...) explicitly."""


class StreamingBatchError(StateEngineError, RuntimeError):
    """A task cannot tell which micro-batch it runs in: no batch id where one is needed, or a
    streaming query's offset log that is missing, unreadable or belongs to another query."""


class WorkerEnvironmentError(StateEngineError, RuntimeError):
    """Spark's Python workers cannot import stateengine (raised on the driver, before a job)."""


class ProcessorUsageError(StateEngineError, RuntimeError):
    """A Spark StatefulProcessor used its handle in a way transformWithState refuses too:
    timers in time mode None, TTL outside ProcessingTime, state access without a grouping key,
    null values, a state its init() did not declare on the driver. ``error_class`` is the
    error class Spark raises for the same misuse (None where Spark has none); the message
    starts with it in brackets, as Spark's messages do."""

    def __init__(self, message: str, error_class: str | None = None) -> None:
        super().__init__(f"[{error_class}] {message}" if error_class else message)
        self.error_class = error_class

    def __reduce__(self) -> tuple:  # the class survives pickling (Spark workers to driver)
        text = str(self)
        if self.error_class:
            text = text[len(self.error_class) + 3:]
        return type(self), (text, self.error_class)


class UserFunctionError(StateEngineError, RuntimeError):
    """A user function (``apply_with_state``/``map_with_state`` function, ``on_timer``, a
    StatefulProcessor method) raised. The first line names the function, the original
    exception and where it ran (operator, key, batch, partition); the rest of the message is
    the function's own traceback, as text, because Spark shows the worker's exception without
    its ``__cause__``. Nothing of the failed batch is committed."""

    def __init__(self, message: str, *, function: str | None = None,
                 operator: str | None = None, key: object = None,
                 batch_id: int | None = None, partition: int | None = None) -> None:
        super().__init__(message)
        self.function = function
        self.operator = operator
        self.key = key
        self.batch_id = batch_id
        self.partition = partition

    def __reduce__(self) -> tuple:  # keyword attributes survive pickling
        return (_rebuild_user_error, (self.args[0] if self.args else "", self.__dict__.copy()))


def _rebuild_user_error(message: str, attrs: dict) -> UserFunctionError:
    err = UserFunctionError(message)
    err.__dict__.update(attrs)
    return err


class OutputSchemaError(StateEngineError, ValueError, TypeError):
    """What a user function returned does not fit the declared output schema (column count,
    column names, or a type that cannot hold the schema's type). The message names the
    expected schema and what was received."""
