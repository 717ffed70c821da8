"""Moving a Spark streaming query's state into stateengine, for the same query to go on there.

``migrate_spark_state(spark, query_checkpoint, checkpoint, processor)`` reads every state
variable of the query's stateful operator through Spark's state data source
(``spark_state.py``): a ``transformWithState`` / ``transformWithStateInPandas`` operator's
value, list and map states with their TTL expiry times and its timers, or an
``applyInPandasWithState`` operator's GroupStates with their timeouts. It writes them, in one
Spark job, as the stateengine state that ``transform_with_state(_in_pandas)`` (or
``apply_in_pandas_with_state``) keeps for the same processor:

* each state under its own name, typed by its schema (the descriptors the processor's
  ``init()`` declares, as ``state_descriptors`` gives them; without a processor, the schemas
  Spark recorded), list elements in list order;
* TTL: an entry Spark expires at ``ttlExpirationMs`` gets the last access
  ``ttlExpirationMs - ttlDurationMs`` (the processor's duration), so that it expires in the
  same batch as in Spark (stateengine: batch time >= last access + ttl);
* timers in the timer service of the operator's time mode and in the per-key ``$timers``
  index; GroupState timeouts as timers at ``timeoutTimestamp + 1`` (``group_state.py``);
* in time mode EventTime (and with ``EventTimeTimeout``) the watermark of Spark's last batch,
  which the next batch drops late rows by.

Which version: Spark's last committed batch ``c`` left the state that batch ``c + 1`` loads.
The query keeps its checkpointLocation, so its batch ids go on from ``c + 1``, and a
stateengine operator in it loads version ``c + 1`` in that batch. The job therefore commits
version ``c + 1`` on an operator whose state begins (empty) at version ``c``: a retried
task starts over from that empty state, and a replay of batch ``c + 1`` loads it again. The
manifests record where the state came from (``migrated_from``).

Last, Spark's metadata of the operator (``state/<op>/_metadata``) is moved aside: Spark refuses
to restart a query whose plan lost a stateful operator its state metadata lists. Spark's state
files stay where they are.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass, field
from typing import Any, Iterator

import numpy as np
from pyspark.sql import DataFrame
from pyspark.sql import types as T

from ..checkpoint.storage import CheckpointStorage
from ..checkpoint.versions import VersionCatalog
from ..descriptors import StateDescriptor
from ..errors import CheckpointNotFoundError
from ..keygroups import DEFAULT_MAX_PARALLELISM
from ..serializers import Codec
from .batch import query_id
from .group_state import GROUP_STATE, NO_TIMESTAMP, group_state_descriptor, timeout_name
from .processor import WATERMARK_STATE, state_descriptors
from .routing import MARKER_COL, PID_COL, key_codecs_for, quote, route
from .spark_state import GROUP_STATE_KIND, SparkOperator, SparkStateError, SparkVariable, \
    committed_batches, retire_operator_metadata, spark_operator
from .workers import check_workers

log = logging.getLogger("stateengine")
VAR_COL = "__se_var"
TIMEOUTS_PART = -1  # the write job's count of GroupState timeouts
EXP_COL = "__se_exp"


@dataclass
class SparkMigration:
    """What ``migrate_spark_state`` did."""

    spark_operator: str  # Spark's operator name
    spark_batch_id: int  # the last batch Spark committed
    version: int  # the stateengine version written: the id of the query's next batch
    num_partitions: int
    states: dict[str, int] = field(default_factory=dict)  # entries (list elements) per state
    timers: int = 0
    retired: bool = False  # whether Spark's operator metadata was moved aside now

    @property
    def next_batch_id(self) -> int:
        """The batch the restarted query runs next (it loads ``version``)."""
        return self.version


@dataclass(frozen=True)
class _Part:
    """One Spark variable as the write job sees it: its payload column and how to write it."""

    index: int
    variable: SparkVariable
    state: str | None  # the stateengine state it goes to (timers: None)
    ttl_ms: int | None = None


def migrate_spark_state(spark: Any, query_checkpoint: str, checkpoint: str,
                        processor: Any = None, *, operator_id: str = "default",
                        spark_operator_id: int = 0, num_partitions: int | None = None,
                        max_parallelism: int = DEFAULT_MAX_PARALLELISM,
                        timeout_conf: str | None = None,
                        retire_spark_operator: bool = True) -> SparkMigration:
    """Moves the state of a stopped streaming query's Spark operator into stateengine, as the
    version its next batch loads (module docstring), and returns what it wrote.

    ``query_checkpoint`` is the query's checkpointLocation; ``checkpoint`` and ``operator_id``
    where the query's stateengine operator keeps its state (it must hold none yet).
    ``processor`` is the StatefulProcessor the query ran (for transformWithState): its
    ``init()`` declares the states' schemas and TTL durations, and the migration refuses
    state that does not fit them; without it the schemas Spark recorded are used, and states
    with a TTL are refused (their durations are not in Spark's checkpoint).
    ``timeout_conf`` is the applyInPandasWithState operator's GroupStateTimeout (needed when
    a key has a timeout). ``num_partitions`` defaults to the Spark operator's.
    ``retire_spark_operator=False`` leaves Spark's operator metadata in place (then the query
    restarts only on Spark's operator). Stop the query first: a batch that Spark commits while
    this runs fails the migration before Spark's metadata is touched.
    """
    op = spark_operator(spark, query_checkpoint, spark_operator_id)
    storage = CheckpointStorage(checkpoint)
    catalog = VersionCatalog(storage, operator_id)
    catalog.check_properties(max_parallelism)
    version = op.batch_id + 1
    done = _earlier_migration(catalog, op, version)
    n = num_partitions or min(op.num_partitions, max_parallelism)
    result = SparkMigration(op.name, op.batch_id, version, n)
    if done is None:
        domain = _timeout_domain(op, timeout_conf)
        parts, descriptors, frames, key_names = _plan(spark, op, processor, timeout_conf, domain)
        union = functools.reduce(lambda a, b: a.unionByName(b, allowMissingColumns=True), frames)
        written = _write(union, op, parts, descriptors, key_names, storage.uri, operator_id, n,
                         max_parallelism, domain, query_checkpoint)
        for p in parts:
            if p.state is not None:
                result.states[p.state] = written.get(p.index, 0)
            else:
                result.timers += written.get(p.index, 0)
        result.timers += written.get(TIMEOUTS_PART, 0)
        catalog.mark_committed(version, n)
        after = committed_batches(query_checkpoint)
        if after and after[-1] != op.batch_id:
            raise SparkStateError(
                f"the query committed batch {after[-1]} on Spark's operator while its state "
                f"of batch {op.batch_id} was being migrated: stop the query, delete "
                f"{catalog.describe()} and migrate again")
    else:
        result.num_partitions = done
    if retire_spark_operator:
        result.retired = retire_operator_metadata(query_checkpoint, op.operator_id)
    log.info("migrated %s of %s (batch %d) into %s as version %d: %s, %d timers", op.name,
             query_checkpoint, op.batch_id, catalog.describe(), version, result.states,
             result.timers)
    return result


def _earlier_migration(catalog: VersionCatalog, op: SparkOperator, version: int) -> int | None:
    """The partition count of an earlier run of this same migration (a rerun after the move
    of Spark's metadata failed); None when the operator holds no state. Refuses any other
    state."""
    if catalog.first_version() is None:
        return None
    origin = None
    try:
        manifests = catalog.manifests(version)
        origin = manifests[0][2].get("migrated_from") if manifests else None
    except CheckpointNotFoundError:
        pass
    if isinstance(origin, dict) and origin.get("batch_id") == op.batch_id and \
            origin.get("operator_id") == op.operator_id and \
            origin.get("query_id") == query_id(op.path) and \
            catalog.versions() == [version]:
        return manifests[0][1]
    raise SparkStateError(
        f"{catalog.describe()} already holds state (versions {catalog.versions()}); the "
        f"migration writes into an operator without state: pass another operator_id or "
        f"checkpoint directory")


def _timeout_domain(op: SparkOperator, timeout_conf: str | None) -> str | None:
    """The timer domain timers are written to: "processing", "event" or None."""
    if op.flavour == GROUP_STATE_KIND:
        timeout = timeout_name(timeout_conf) if timeout_conf is not None else None
        return {"ProcessingTimeTimeout": "processing", "EventTimeTimeout": "event"}.get(timeout)
    return {"ProcessingTime": "processing", "EventTime": "event"}.get(op.time_mode or "")


def _plan(spark: Any, op: SparkOperator, processor: Any, timeout_conf: str | None,
          domain: str | None
          ) -> tuple[list[_Part], list[StateDescriptor], list[DataFrame], list[str]]:
    """The write job's parts, the descriptors of the states written, each variable's
    payload frame and the key's column names (module docstring)."""
    from .processor_handle import TIMER_INDEX, timer_index_descriptor  # pyspark >= 4.0

    declared: dict[str, StateDescriptor] | None = None
    if op.flavour == GROUP_STATE_KIND:
        if processor is not None:
            raise ValueError(f"the Spark operator is {op.name}, which runs a function, not a "
                             f"StatefulProcessor: drop processor= (and pass timeout_conf=)")
    else:
        if timeout_conf is not None:
            raise ValueError(f"timeout_conf= is for applyInPandasWithState; the Spark "
                             f"operator is {op.name}")
        if processor is not None:
            declared = state_descriptors(processor, spark, op.time_mode or "None")
    parts: list[_Part] = []
    descriptors: list[StateDescriptor] = []
    frames: list[DataFrame] = []
    key_schema: T.StructType | None = None
    for i, var in enumerate(op.variables):
        df = op.read(spark, var)
        keys = df.schema["key"].dataType
        if key_schema is None:
            key_schema = keys
        elif [f.name for f in keys.fields] != [f.name for f in key_schema.fields]:
            raise SparkStateError(f"state '{var.name}' is keyed by {keys.simpleString()}, the "
                                  f"others by {key_schema.simpleString()}")
        payload, exp = _payload(var)
        if var.kind == "timers":
            parts.append(_Part(i, var, None))
            if op.time_mode is not None and op.time_mode != "None":
                descriptors.append(timer_index_descriptor())
        elif var.kind == GROUP_STATE_KIND:
            stored = df.schema["value"].dataType["groupState"].dataType
            descriptors.append(group_state_descriptor(stored))
            parts.append(_Part(i, var, GROUP_STATE))
            if domain is None and df.where("value.timeoutTimestamp != -1").limit(1).count():
                raise ValueError(
                    f"keys of the {op.name} operator have timeouts: pass timeout_conf= (its "
                    f"GroupStateTimeout: ProcessingTimeTimeout or EventTimeTimeout), got "
                    f"{timeout_conf!r}")
        else:
            desc = _descriptor(var, df.schema, declared, op)
            descriptors.append(desc)
            parts.append(_Part(i, var, var.name, desc.ttl.ttl_ms if desc.ttl else None))
        cols = [f"key.{quote(f.name)} AS {quote(f.name)}" for f in keys.fields]
        cols += [f"CAST({i} AS INT) AS {VAR_COL}", f"{payload} AS __se_v{i}"]
        if exp:
            cols.append(f"{exp} AS {EXP_COL}")
        frames.append(df.selectExpr(*cols))
    if declared is not None:  # states the processor declares that Spark never wrote
        have = {d.name for d in descriptors}
        descriptors += [d for name, d in declared.items() if name not in have]
        if op.time_mode not in (None, "None") and TIMER_INDEX not in {d.name for d in descriptors}:
            descriptors.append(timer_index_descriptor())
    if not frames or key_schema is None:
        raise SparkStateError(f"operator {op.operator_id} ({op.name}) declares no state "
                              f"variable: there is nothing to migrate")
    return parts, descriptors, frames, list(key_schema.names)


def _payload(var: SparkVariable) -> tuple[str, str | None]:
    """(payload expression, TTL expiry expression) of a variable's frame."""
    if var.kind == "value":
        return ("value.value", "value.ttlExpirationMs") if var.ttl else ("value", None)
    if var.kind == "list":
        return "list_value", None  # TTL: each element's expiry rides in the array
    if var.kind == "map":
        if var.ttl:
            return ("struct(user_map_key AS k, user_map_value.value AS v)",
                    "user_map_value.ttlExpirationMs")
        return "struct(user_map_key AS k, user_map_value AS v)", None
    if var.kind == "timers":
        return "expiration_timestamp_ms", None
    return "value", None  # GroupState: struct<groupState, timeoutTimestamp>


def _spark_schemas(var: SparkVariable,
                   schema: T.StructType) -> tuple[T.DataType, T.DataType | None]:
    """(value or element schema, user key schema) of a variable as Spark stores it."""
    def unwrap(t: T.DataType) -> T.DataType:
        return t["value"].dataType if var.ttl else t

    if var.kind == "value":
        return unwrap(schema["value"].dataType), None
    if var.kind == "list":
        return unwrap(schema["list_value"].dataType.elementType), None
    return unwrap(schema["user_map_value"].dataType), schema["user_map_key"].dataType


def _descriptor(var: SparkVariable, schema: T.StructType,
                declared: dict[str, StateDescriptor] | None, op: SparkOperator) -> StateDescriptor:
    """The stateengine descriptor a Spark state variable is written as: the processor's
    declaration (checked against what Spark stores), or Spark's own schemas."""
    from .processor_handle import StateDecl

    value, user_key = _spark_schemas(var, schema)
    if declared is None:
        if var.ttl:
            raise ValueError(
                f"state '{var.name}' has a TTL, whose duration Spark's checkpoint does not "
                f"hold (only each entry's expiry time): pass processor= (the StatefulProcessor "
                f"the query ran), whose init() declares it")
        return StateDecl(var.name, var.kind, value, user_key).descriptor()
    desc = declared.get(var.name)
    if desc is None:
        raise SparkStateError(
            f"Spark's checkpoint holds state '{var.name}' ({var.kind} state), which the "
            f"processor's init() does not declare (it declares {', '.join(declared) or 'none'}); "
            f"pass the processor the query ran")
    problems = []
    if desc.kind.value != var.kind:
        problems.append(f"a {desc.kind.value} state, not a {var.kind} state")
    if (desc.ttl is not None) != var.ttl:
        problems.append("TTL " + ("on" if desc.ttl is not None else "off") +
                        f", Spark's {'has' if var.ttl else 'has none'}")
    if not problems:
        for what, mine, spark_type in (("schema", desc.value_schema, value),
                                       ("map key schema", desc.user_key_schema, user_key)):
            if spark_type is not None and _shape(mine) != _shape(_model(spark_type)):
                problems.append(f"{what} {mine} where Spark stores {_model(spark_type)}")
    if problems:
        raise SparkStateError(f"the processor declares state '{var.name}' as "
                              f"{'; '.join(problems)}: pass the processor the query ran "
                              f"(operator {op.operator_id}, {op.name})")
    return desc


def _model(t: T.DataType) -> Any:
    from .. import sparktypes

    return sparktypes.to_schema(t)


def _shape(t: Any) -> str:
    """A type's canonical text without NOT NULL: the data of one fits the other."""
    return "" if t is None else str(t).replace(" NOT NULL", "")


# ---- the write job -----------------------------------------------------------------------

def _write(union: DataFrame, op: SparkOperator, parts: list[_Part],
           descriptors: list[StateDescriptor], key_names: list[str], uri: str,
           operator_id: str, n: int, max_parallelism: int, timer_domain: str | None,
           query_checkpoint: str) -> dict[int, int]:
    """Routes every variable's rows to the partition owning their key group and writes them
    there in one task per partition, which commits version ``op.batch_id + 1``. Returns the
    rows written per part."""
    codecs = key_codecs_for(union, key_names)
    routed = route(union, key_names, n, max_parallelism, every_partition=True)
    spark = union.sparkSession
    check_workers(spark)
    origin = {"spark_checkpoint": query_checkpoint, "query_id": query_id(query_checkpoint),
              "operator_id": op.operator_id, "operator": op.name, "batch_id": op.batch_id,
              "watermark": op.watermark, "timestamp": op.timestamp}
    keep_watermark = (op.time_mode == "EventTime" or
                      (op.flavour == GROUP_STATE_KIND and timer_domain == "event"))
    job = _WriteJob(parts, descriptors, key_names, codecs, uri, operator_id, n, max_parallelism,
                    op.batch_id, timer_domain, op.watermark if keep_watermark else None, origin)
    rows = routed.mapInArrow(job.run, "part int, rows long").collect()
    written: dict[int, int] = {}
    for r in rows:
        written[r["part"]] = written.get(r["part"], 0) + r["rows"]
    return written


class _WriteJob:
    """The task side of the write job (pickled into the closure)."""

    def __init__(self, parts: list[_Part], descriptors: list[StateDescriptor],
                 key_names: list[str], codecs: tuple[int, ...], uri: str, operator_id: str,
                 n: int, max_parallelism: int, batch_id: int, timer_domain: str | None,
                 watermark: int | None, origin: dict[str, Any]) -> None:
        self.parts = parts
        self.descriptors = descriptors
        self.key_names = key_names
        self.codecs = codecs
        self.uri = uri
        self.operator_id = operator_id
        self.n = n
        self.max_parallelism = max_parallelism
        self.batch_id = batch_id
        self.timer_domain = timer_domain
        self.watermark = watermark
        self.origin = origin

    def run(self, batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa
        from pyspark import TaskContext

        from ..store import StateStoreProvider

        pid = TaskContext.get().partitionId()
        key_type = (tuple(Codec(c) for c in self.codecs) if len(self.codecs) > 1
                    else Codec(self.codecs[0]))
        provider = StateStoreProvider(self.uri, self.operator_id, pid, self.n,
                                      self.max_parallelism, key_type=key_type,
                                      descriptors=self.descriptors, key_names=self.key_names)
        counts = {p.index: 0 for p in self.parts}
        try:
            store = provider.get_store(self.batch_id)  # empty: the state begins here
            try:
                writer = _PartitionWriter(store.backend, self.descriptors, self.key_names,
                                          self.timer_domain)
                for rb in batches:
                    for part, rows in writer.write(rb, pid, self.parts):
                        counts[part] += rows
                counts[TIMEOUTS_PART] = writer.timeouts
                if self.watermark is not None:
                    store.backend.operator_state.get_list_state(WATERMARK_STATE, "union") \
                        .update([self.watermark])
                store.commit(extra={"migrated_from": self.origin})
            except BaseException:
                store.abort()
                raise
        finally:
            provider.close()
        yield pa.RecordBatch.from_pydict(
            {"part": pa.array(list(counts), pa.int32()),
             "rows": pa.array(list(counts.values()), pa.int64())})


class _PartitionWriter:
    """Writes one partition's rows of every part with the batch calls (per TTL expiry, list
    run and variable), timers one by one."""

    def __init__(self, backend: Any, descriptors: list[StateDescriptor], key_names: list[str],
                 timer_domain: str | None) -> None:
        self.backend = backend
        self.handles = {d.name: backend.get_state(d) for d in descriptors}
        self.timeouts = 0  # GroupState timeouts written as timers
        self.key_names = key_names
        self.timer_domain = timer_domain

    def write(self, rb: Any, pid: int, parts: list[_Part]) -> Iterator[tuple[int, int]]:
        import pyarrow.compute as pc

        names = rb.schema.names
        if MARKER_COL in names:
            rb = rb.filter(pc.is_null(rb.column(names.index(MARKER_COL))))
        if not rb.num_rows:
            return
        if (np.asarray(rb.column(names.index(PID_COL))) != pid).any():
            raise RuntimeError(f"rows routed to partition {pid} carry other partition ids")
        var = np.asarray(rb.column(names.index(VAR_COL)))
        for part in parts:
            mask = var == part.index
            if not mask.any():
                continue
            sub = rb.filter(mask)
            yield part.index, self._write_part(sub, part)

    def _keys(self, rb: Any) -> Any:
        """The key column (single key) or the keys as tuples (several columns)."""
        arrays = [rb.column(rb.schema.get_field_index(k)) for k in self.key_names]
        if len(arrays) == 1:
            return arrays[0]
        return list(zip(*[a.to_pylist() for a in arrays]))

    def _write_part(self, rb: Any, part: _Part) -> int:
        payload = rb.column(rb.schema.get_field_index(f"__se_v{part.index}"))
        keys = self._keys(rb)
        kind = part.variable.kind
        if kind == "timers":
            return self._timers(keys, np.asarray(payload, dtype=np.int64), index=True)
        if kind == GROUP_STATE_KIND:
            self.handles[GROUP_STATE].put_many(keys, payload)
            ts = np.asarray(payload.field("timeoutTimestamp").fill_null(NO_TIMESTAMP),
                            dtype=np.int64)
            has = ts != NO_TIMESTAMP
            if has.any():
                if self.timer_domain is None:
                    raise ValueError("GroupStates with timeouts need timeout_conf=")
                self.timeouts += self._timers(_take(keys, np.flatnonzero(has)), ts[has] + 1,
                                              index=False)
            return rb.num_rows
        state = self.handles[part.state]
        if kind == "list":
            return self._list(state, keys, payload, part.ttl_ms)
        exps = None
        if part.ttl_ms is not None:
            exps = np.asarray(rb.column(rb.schema.get_field_index(EXP_COL)), dtype=np.int64)
        for idx, clock in _by_expiry(exps, rb.num_rows, part.ttl_ms):
            if clock is not None:
                self.backend.set_ttl_time(clock)
            k = keys if idx is None else _take(keys, idx)
            p = payload if idx is None else payload.take(idx)
            if kind == "value":
                state.put_many(k, p)
            else:
                state.put_many(k, p.field("k"), p.field("v"))
        return rb.num_rows

    def _list(self, state: Any, keys: Any, lists: Any, ttl_ms: int | None) -> int:
        """Appends each key's elements in list order. With TTL, element i of a key is written
        at its own last access, so the elements go in runs: run r of every key (the r-th
        stretch of equal expiry times along its list) after run r - 1."""
        import pyarrow.compute as pc

        flat = lists.flatten()
        parents = np.asarray(pc.list_parent_indices(lists), dtype=np.int64)
        if not len(parents):
            return 0
        if ttl_ms is None:
            state.add_many(_take(keys, parents), flat)
            return len(parents)
        exps = np.asarray(flat.field("ttlExpirationMs"), dtype=np.int64)
        values = flat.field("value")
        first = np.r_[True, parents[1:] != parents[:-1]]
        change = np.r_[False, exps[1:] != exps[:-1]] & ~first
        counted = np.cumsum(change)
        start = np.maximum.accumulate(np.where(first, np.arange(len(parents)), 0))
        runs = counted - counted[start]
        for r in range(int(runs.max()) + 1):
            in_run = np.flatnonzero(runs == r)
            for idx, clock in _by_expiry(exps[in_run], len(in_run), ttl_ms):
                take = in_run if idx is None else in_run[idx]
                self.backend.set_ttl_time(clock)
                state.add_many(_take(keys, parents[take]), values.take(take))
        return len(parents)

    def _timers(self, keys: Any, times: np.ndarray, index: bool) -> int:
        """Registers each (key, time) in the timer service (and the ``$timers`` index of a
        StatefulProcessor's keys)."""
        backend = self.backend
        timers = backend.timer_service
        register = (timers.register_processing_time_timer if self.timer_domain == "processing"
                    else timers.register_event_time_timer)
        listed = keys.to_pylist() if hasattr(keys, "to_pylist") else keys
        for key, ts in zip(listed, times.tolist()):
            backend.set_current_key(key)
            register(ts)
        if index:
            from .processor_handle import TIMER_INDEX

            self.handles[TIMER_INDEX].put_many(keys, times, np.ones(len(times), dtype=bool))
        return len(times)


def _take(keys: Any, idx: np.ndarray) -> Any:
    if isinstance(keys, list):
        return [keys[i] for i in idx.tolist()]
    return keys.take(idx)


def _by_expiry(exps: np.ndarray | None, n: int,
               ttl_ms: int | None) -> Iterator[tuple[np.ndarray | None, int | None]]:
    """(row indices or None for all, the TTL clock to write them at) per distinct expiry."""
    if exps is None or ttl_ms is None:
        yield None, None
        return
    values = np.unique(exps)
    if len(values) == 1:
        yield None, int(values[0]) - ttl_ms
        return
    for v in values.tolist():
        yield np.flatnonzero(exps == v), int(v) - ttl_ms
