"""State as DataFrames: read any state of a committed version (like Spark's state data source
and Flink's State Processor API) and bootstrap state from a DataFrame.

``read_state`` returns one row per stored entry with columns ``key`` (or ``key_0``..), then
``namespace`` (JSON text, null for the default namespace), ``user_key`` (map states) and
``value``. Values of typed serializers keep their Spark type; values of the default "any"
serializer are JSON text unless ``value_type`` names a Spark type. List states give arrays.
Nothing is unpickled unless ``allow_pickle=True``: a pickled value (a ``value_type="pickle"``
state, or a value a version before format 2 pickled) otherwise fails the read with
``PickleNotAllowedError``.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import uuid
from typing import Any, Iterator, Sequence

import pandas as pd
from pyspark.sql import DataFrame, SparkSession

from .. import _native
from ..backend import KeyedStateBackend
from ..checkpoint.handles import handle_from_dict
from ..checkpoint.storage import CheckpointStorage
from ..checkpoint.versions import VersionCatalog
from ..descriptors import StateDescriptor, StateKind, check_no_pickle
from ..errors import UnknownStateError
from ..keygroups import DEFAULT_MAX_PARALLELISM, KeyGroupRange
from ..serializers import Codec, to_json
from .routing import check_no_null_keys, check_partition, default_num_partitions, \
    key_codecs_for, key_columns, route
from .runtime import TaskConfig, guarded, ttl_clock

_SPARK_TYPES = {Codec.BIGINT: "bigint", Codec.INT: "int", Codec.DOUBLE: "double",
                Codec.FLOAT: "float", Codec.STRING: "string", Codec.BINARY: "binary",
                Codec.BOOLEAN: "boolean", Codec.ORDERED_BIGINT: "bigint",
                Codec.ORDERED_DOUBLE: "double", Codec.ORDERED_STRING: "string",
                Codec.ORDERED_BINARY: "binary"}
_CHUNK = 4096


def _json(value: Any) -> str | None:
    if value is None:
        return None
    return json.dumps(to_json(value), ensure_ascii=False)


def _spark_type(codec: int, override: str | None) -> tuple[str, bool]:
    """(Spark type, values need JSON) for a codec."""
    if override:
        return override, False
    t = _SPARK_TYPES.get(Codec(codec))
    return (t, False) if t else ("string", True)


def _version_handles(storage: CheckpointStorage, operator_id: str,
                     version: int | None, max_parallelism: int) -> tuple[int, list[dict]]:
    catalog = VersionCatalog(storage, operator_id)
    full = KeyGroupRange.all(max_parallelism)
    v = catalog.latest_version(full) if version is None else version
    if v == 0:
        return 0, []
    return v, [h.to_dict() for h in catalog.handles_for(v, full)]


def read_state(spark: SparkSession, checkpoint: str, state_name: str,
               operator_id: str = "default", version: int | None = None,
               max_parallelism: int = DEFAULT_MAX_PARALLELISM,
               key_names: Sequence[str] | None = None, value_type: str | None = None,
               user_key_type: str | None = None, allow_pickle: bool = False) -> DataFrame:
    """The entries of ``state_name`` at ``version`` (default: the latest) as a DataFrame;
    ``allow_pickle`` unpickles pickled values (only for checkpoints you trust).

    A state with TTL gets a ``last_access_ms`` column (for a list, one per element). The
    reader returns what is stored, which includes entries that expired but were not cleaned up
    yet: the duration is configuration, not stored, so keep the rows with
    ``last_access_ms + ttl_ms > now`` to see what the job would see at ``now``."""
    storage = CheckpointStorage(checkpoint)
    v, handles = _version_handles(storage, operator_id, version, max_parallelism)
    if not handles:
        raise UnknownStateError(f"operator '{operator_id}' in {storage.uri} has no committed "
                                f"version yet")
    metas = {m["name"]: m for m in handles[0]["states"]}
    meta = metas.get(state_name)
    if meta is None:
        known = ", ".join(sorted(n for n in metas if not n.startswith("__"))) or "none"
        raise UnknownStateError(f"version {v} of operator '{operator_id}' has no state "
                                f"'{state_name}' (states: {known})")
    key_codecs = handles[0]["key_codecs"] or [Codec.BIGINT]
    names = list(key_names) if key_names else (
        ["key"] if len(key_codecs) == 1 else [f"key_{i}" for i in range(len(key_codecs))])
    kind = meta["kind"]
    vtype, v_json = _spark_type(meta["value_codec"], value_type)
    fields = [f"`{n}` {_SPARK_TYPES[Codec(c)]}" for n, c in zip(names, key_codecs)]
    fields.append("namespace string")
    uk_json = False
    if kind in (StateKind.MAP.value, StateKind.SORTED_MAP.value):
        uktype, uk_json = _spark_type(meta["user_key_codec"], user_key_type)
        fields.append(f"user_key {uktype}")
    fields.append(f"value array<{vtype}>" if kind == StateKind.LIST.value else f"value {vtype}")
    has_ttl = bool(meta.get("ttl"))
    if has_ttl:
        fields.append("last_access_ms array<bigint>" if kind == StateKind.LIST.value else
                      "last_access_ms bigint")
    schema = ", ".join(fields)
    has_uk = kind in (StateKind.MAP.value, StateKind.SORTED_MAP.value)
    columns = [*names, "namespace", *(["user_key"] if has_uk else []), "value",
               *(["last_access_ms"] if has_ttl else [])]

    def rows_of(handle_json: str) -> Iterator[pd.DataFrame]:
        handle = handle_from_dict(json.loads(handle_json))
        scratch = os.path.join(tempfile.gettempdir(), "stateengine-reader", uuid.uuid4().hex)
        backend = KeyedStateBackend.open_for_reading(scratch, [handle], handle.key_group_range,
                                                     allow_pickle)
        gate = _native.PickleGate(_native.PICKLE_ALLOW if allow_pickle else _native.PICKLE_REFUSE,
                                  f"state '{state_name}'")
        try:
            cf = backend._cf_index[state_name]
            out: list[tuple] = []
            lower = b""
            while True:
                chunk = backend._raw_scan(cf, lower, b"", _CHUNK)
                for raw_key, raw_value in chunk:
                    _, key, ns, uk = backend._parse_state_key(raw_key, meta["namespace_codec"], has_uk)
                    ns_value = _native.decode_for_codec(meta["namespace_codec"], ns, gate)
                    if has_ttl:  # the last-access stamps go to their own column (csrc/ttl.h)
                        raw_value, stamps = _native.split_ttl_value(kind, meta["value_codec"],
                                                                    raw_value)
                    value = _native.decode_stored_value(kind, meta["value_codec"], raw_value, gate)
                    if v_json:
                        value = [_json(e) for e in value] if kind == "list" else _json(value)
                    row = [*(key if isinstance(key, tuple) else (key,)), _json(ns_value)]
                    if has_uk:
                        u = _native.decode_for_codec(meta["user_key_codec"], uk, gate)
                        row.append(_json(u) if uk_json else u)
                    row.append(value)
                    if has_ttl:
                        row.append(stamps)
                    out.append(tuple(row))
                if len(out) >= 16_384 or (len(chunk) < _CHUNK and out):
                    yield pd.DataFrame.from_records(out, columns=columns)
                    out = []
                if len(chunk) < _CHUNK:
                    return
                lower = chunk[-1][0] + b"\x00"
        finally:
            backend.dispose()
            shutil.rmtree(scratch, ignore_errors=True)

    def run(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        for pdf in batches:
            for handle_json in pdf["handle"]:
                yield from rows_of(handle_json)

    seeds = spark.createDataFrame([(json.dumps(h),) for h in handles], "handle string")
    return seeds.repartition(len(handles)).mapInPandas(run, schema)


def bootstrap_state(df: DataFrame, key: str | Sequence[str], descriptor: StateDescriptor,
                    value: str, checkpoint: str, operator_id: str = "default",
                    user_key: str | None = None, namespace: str | None = None,
                    version: int = 0, num_partitions: int | None = None,
                    max_parallelism: int = DEFAULT_MAX_PARALLELISM,
                    allow_pickle: bool = False, batch_timestamp_ms: int | None = None) -> int:
    """Writes one state from a DataFrame and commits it; returns the new version.

    Each row sets the state of its key: value states take the ``value`` column (the last row
    of a key wins), list states append it, map states put ``user_key`` -> ``value``, reducing and
    aggregating states add it. The state at ``version`` is loaded first (0: empty), so several
    states can be bootstrapped one after another, each call adding a version. A descriptor
    with TTL needs ``batch_timestamp_ms``, the time its entries are written at.
    """
    if not allow_pickle:
        check_no_pickle(descriptor)
    clock = ttl_clock([descriptor], batch_timestamp_ms)
    cols = key_columns(key)
    extra = [c for c in (value, user_key, namespace) if c]
    n = num_partitions or default_num_partitions(df.sparkSession, max_parallelism)
    cfg = TaskConfig(checkpoint=CheckpointStorage(checkpoint).uri, operator_id=operator_id,
                     num_partitions=n, max_parallelism=max_parallelism, key_cols=cols,
                     key_codecs=key_codecs_for(df, cols), descriptors=[descriptor],
                     batch_id=version, output_cols=["partition", "rows"],
                     allow_pickle=allow_pickle, ttl_time_ms=clock)
    kind = descriptor.kind
    if kind in (StateKind.MAP, StateKind.SORTED_MAP) and not user_key:
        raise ValueError(f"bootstrapping map state '{descriptor.name}' needs user_key=<column>")
    needed = list(dict.fromkeys([*cols, *extra]))  # a column may serve twice (key and user key)
    routed = route(df.select(*needed), cols, n, max_parallelism)

    def body(task, batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        state = task.handles[descriptor.name]
        backend = task.backend
        written = 0
        for pdf in batches:
            if not len(pdf):
                continue
            check_partition(pdf, task.partition_id)
            check_no_null_keys(pdf, cols)
            keys = list(zip(*[pdf[c].tolist() for c in cols])) if len(cols) > 1 else pdf[cols[0]].tolist()
            values = pdf[value].tolist()
            uks = pdf[user_key].tolist() if user_key else None
            nss = pdf[namespace].tolist() if namespace else None
            for i, k in enumerate(keys):
                backend.set_current_key(k)
                if nss is not None:
                    state.set_current_namespace(nss[i])
                if kind is StateKind.VALUE:
                    state.update(values[i])
                elif kind in (StateKind.MAP, StateKind.SORTED_MAP):
                    state.put(uks[i], values[i])
                else:
                    state.add(values[i])
            written += len(keys)
        yield pd.DataFrame({"partition": [task.partition_id], "rows": [written]})

    def run(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        yield from guarded(cfg, lambda task: body(task, batches))

    routed.mapInPandas(run, "partition int, rows long").collect()
    VersionCatalog(CheckpointStorage(checkpoint), operator_id).mark_committed(version + 1, n)
    return version + 1
