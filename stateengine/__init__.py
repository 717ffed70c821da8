"""stateengine: Flink-style keyed state on embedded RocksDB for Python code inside Spark.

Quick use::

    from stateengine import KeyedStateBackend, ValueStateDescriptor
    backend = KeyedStateBackend("/tmp/state")
    backend.set_current_key("alice")
    count = backend.get_state(ValueStateDescriptor("count", default=0))
    count.update(count.value() + 1)
"""

import os

from . import aggregates, evolution, reducers
from ._native import (configure_batch_ingest, configure_bloom_filters, configure_memory,
                      memory_usage)
from .backend import KeyedStateBackend
from .descriptors import (AggregatingStateDescriptor, ListStateDescriptor, MapStateDescriptor,
                          ReducingStateDescriptor, SortedMapStateDescriptor, StateDescriptor,
                          StateKind, ValueStateDescriptor)
from .errors import (BackendClosedError, CheckpointFileMissingError, CheckpointNotFoundError,
                     CorruptionError, IllegalStoreStateError, IncompatibleStateError,
                     KeyGroupOutOfRangeError, KeyTypeError, MixedTypesError, NoCurrentKeyError,
                     NullElementError, OutputSchemaError, PickleNotAllowedError,
                     SchemaEvolutionError, SerializationError, StaleCommitError,
                     StateEngineError, StateRegistrationError, StorageError, TtlTimeNotSetError,
                     TtlTimeRangeError, UnknownStateError, UserFunctionError)
from .functions import AggregateFunction
from .checkpoint.file_cache import configure_file_cache, file_cache_stats
from .checkpoint.handles import load_handle
from .checkpoint.storage import CheckpointStorage
from .checkpoint.transfers import set_transfer_threads, transfer_threads
from .metrics import StateMetrics, version_metrics
from .keygroups import (KeyGroupRange, assign_key_group, key_group_prefix_bytes,
                        operator_for_key_group, spark_hash)
from .operator_state import OperatorListState, OperatorStateBackend
from .state import (AggregatingState, ListState, MapState, ReducingState, SortedMapState,
                    ValueState)
from .store import StateStore, StateStoreProvider, StoreState
from .timers import Timer, TimerService
from .ttl import StateTtlConfig, StateVisibility, UpdateType

__version__ = "0.1.0"


def _batch_ingest_from_environment() -> None:
    raw = os.environ.get("STATEENGINE_BATCH_INGEST_MIN_KEYS", "").strip()
    if not raw:
        return
    try:
        keys = int(raw)
    except ValueError:
        keys = -1
    if keys < 0:
        raise ValueError(f"STATEENGINE_BATCH_INGEST_MIN_KEYS ({raw!r}) must be an int >= 0 "
                         f"(0: batch puts never ingest)")
    configure_batch_ingest(keys)


_batch_ingest_from_environment()

__all__ = [
    "StateMetrics", "version_metrics",
    "AggregateFunction", "AggregatingState", "CheckpointStorage", "OperatorListState",
    "OperatorStateBackend", "StateStore", "StateStoreProvider", "StoreState", "Timer",
    "TimerService", "AggregatingStateDescriptor", "BackendClosedError",
    "CheckpointFileMissingError", "CheckpointNotFoundError", "CorruptionError",
    "IllegalStoreStateError", "IncompatibleStateError", "KeyGroupOutOfRangeError",
    "KeyGroupRange", "KeyTypeError",
    "KeyedStateBackend", "ListState", "ListStateDescriptor", "MapState", "MapStateDescriptor",
    "MixedTypesError",
    "NoCurrentKeyError", "NullElementError", "OutputSchemaError", "PickleNotAllowedError",
    "ReducingState", "ReducingStateDescriptor", "SchemaEvolutionError", "SerializationError",
    "SortedMapState", "StaleCommitError", "TtlTimeRangeError",
    "SortedMapStateDescriptor", "StateDescriptor", "StateEngineError", "StateKind",
    "StateRegistrationError", "StateTtlConfig", "StateVisibility", "StorageError",
    "TtlTimeNotSetError", "UnknownStateError", "UserFunctionError", "UpdateType", "ValueState",
    "ValueStateDescriptor", "aggregates", "assign_key_group", "configure_batch_ingest",
    "configure_bloom_filters", "evolution",
    "configure_file_cache", "configure_memory", "file_cache_stats", "key_group_prefix_bytes",
    "load_handle", "memory_usage",
    "operator_for_key_group", "reducers", "set_transfer_threads", "spark_hash",
    "transfer_threads",
]
