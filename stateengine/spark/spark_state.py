"""A Spark streaming query's own state, read through Spark's state data source (pyspark >= 4.0).

``spark_operator(spark, query_checkpoint)`` tells what the query's checkpoint holds for one
stateful operator, from Spark's own metadata (``spark.read.format("state-metadata")``, the
commit and offset logs): the operator, its partition count, the last committed batch with its
watermark and timestamp, the time mode, and its state variables with their kinds and TTL flags.
``SparkOperator.read(spark, variable)`` is the variable's content as of that batch through
``spark.read.format("statestore")``, one column per part:

* a ``transformWithState`` value state: ``value`` (a struct of the state's schema);
* a list state: ``list_value`` (an array of such structs, in list order:
  ``flattenCollectionTypes`` false);
* a map state: ``user_map_key`` and ``user_map_value``, one row per entry;
* with TTL, Spark stores each value (list element, map value) as ``struct<value, ttlExpirationMs>``:
  the time from which the entry is gone (``batchTimestampMs >= ttlExpirationMs``);
* timers (``readRegisteredTimers``): ``expiration_timestamp_ms``, one row per timer, in the
  operator's time mode;
* ``applyInPandasWithState``: ``value`` is ``struct<groupState, timeoutTimestamp>``, the
  GroupState's value (null once removed while a timeout is still set) and its timeout (-1 for
  none); Spark times a key out once the batch timestamp (processing time) or the watermark
  (event time) is past it.

Every row has ``key``, the grouping key as a struct named by the grouping columns. What Spark's
state data source offers was determined by running it (Spark 4.3, RocksDB state store
provider); Spark 3.5 has no state data source, which ``spark_operator`` reports.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import DataFrame

from ..errors import CheckpointNotFoundError, StateEngineError
from .batch import batch_times, query_storage

PROCESSOR = "processor"  # transformWithState / transformWithStateInPandas
GROUP_STATE_KIND = "group_state"  # applyInPandasWithState
_KINDS = {"ValueState": "value", "ListState": "list", "MapState": "map", "TimerState": "timers"}
METADATA_DIR = "_metadata"
RETIRED_SUFFIX = ".moved-to-stateengine"


class SparkStateError(StateEngineError, ValueError):
    """A Spark checkpoint that cannot be migrated as asked (what is wrong is in the message)."""


@dataclass(frozen=True)
class SparkVariable:
    """One state variable of a Spark operator: its name, kind (value, list, map, timers,
    group_state) and whether it has a TTL."""

    name: str
    kind: str
    ttl: bool = False


@dataclass
class SparkOperator:
    """One stateful operator of a Spark query checkpoint, as of its last committed batch."""

    path: str  # the query's checkpointLocation, as Spark reads it
    operator_id: int
    name: str  # Spark's operator name (state metadata)
    num_partitions: int
    batch_id: int  # the last committed batch; its state is what Spark's next batch loads
    watermark: int  # batchWatermarkMs of that batch
    timestamp: int  # batchTimestampMs of that batch
    time_mode: str | None = None  # transformWithState: None, ProcessingTime or EventTime
    variables: list[SparkVariable] = field(default_factory=list)

    @property
    def flavour(self) -> str:
        return GROUP_STATE_KIND if self.name == "applyInPandasWithState" else PROCESSOR

    def read(self, spark: Any, variable: SparkVariable) -> DataFrame:
        """The variable's content as of ``batch_id`` (see the module docstring)."""
        reader = (spark.read.format("statestore").option("path", self.path)
                  .option("batchId", self.batch_id).option("operatorId", self.operator_id))
        if variable.kind == "timers":
            reader = reader.option("readRegisteredTimers", "true")
        elif variable.kind != GROUP_STATE_KIND:
            reader = reader.option("stateVarName", variable.name)
            if variable.kind == "list":
                reader = reader.option("flattenCollectionTypes", "false")
        return reader.load()


def check_spark_version(spark: Any) -> None:
    """Refuses a session whose Spark has no state data source (before 4.0)."""
    version = str(spark.version)
    try:
        major = int(version.split(".")[0])
    except ValueError:
        return  # a vendor build: let the read itself tell
    if major < 4:
        raise SparkStateError(
            f"this session runs Spark {version}, whose pip package has no state data source "
            f"(spark.read.format('statestore') arrives in Spark 4.0), so Spark's state cannot "
            f"be read: run the migration from a pyspark >= 4.0 session (classic or Spark "
            f"Connect) pointed at the same checkpointLocation")


def committed_batches(path: str) -> list[int]:
    """The batch ids in the query's commit log, ascending."""
    storage = query_storage(path)
    return sorted(int(e.base_name) for e in storage.list_dir("commits")
                  if e.base_name.isdigit())


def spark_operator(spark: Any, path: str, operator_id: int = 0) -> SparkOperator:
    """The stateful operator ``operator_id`` of the query whose checkpointLocation is
    ``path``, as of its last committed batch (see the module docstring). Refuses a query with
    no committed batch, an operator other than transformWithState(InPandas) and
    applyInPandasWithState, and a query with other stateful operators (Spark numbers the
    operators of a plan anew at every start, so theirs would no longer line up)."""
    check_spark_version(spark)
    if isinstance(operator_id, bool) or not isinstance(operator_id, int) or operator_id < 0:
        raise ValueError(f"spark_operator_id must be an int >= 0, got {operator_id!r}")
    storage = query_storage(path)
    if not storage.exists("metadata"):
        raise CheckpointNotFoundError(
            f"{storage.describe('metadata')} does not exist: pass the checkpointLocation of "
            f"the streaming query whose state to migrate")
    batches = committed_batches(path)
    if not batches:
        raise SparkStateError(f"the query at {storage.location} has committed no batch yet: "
                              f"there is no state to migrate (start it on stateengine)")
    last = batches[-1]
    watermark, timestamp = batch_times(storage.uri, last)
    rows = spark.read.format("state-metadata").load(path).collect()
    ops = {int(r["operatorId"]): r for r in rows}
    retired = storage.exists(f"state/{operator_id}/{METADATA_DIR}{RETIRED_SUFFIX}")
    if operator_id not in ops:
        if retired:
            raise SparkStateError(
                f"operator {operator_id} of the query at {storage.location} was already moved "
                f"to stateengine (its Spark metadata is under state/{operator_id}/"
                f"{METADATA_DIR}{RETIRED_SUFFIX})")
        known = ", ".join(f"{i} ({r['operatorName']})" for i, r in sorted(ops.items())) or "none"
        raise SparkStateError(f"the query at {storage.location} has no stateful operator "
                              f"{operator_id} in its state metadata (operators: {known})")
    row = ops[operator_id]
    name = str(row["operatorName"])
    op = SparkOperator(path, operator_id, name, int(row["numPartitions"]), last, watermark,
                       timestamp)
    if name.startswith("transformWithState"):
        props = json.loads(row["operatorProperties"] or "{}")
        op.time_mode = str(props.get("timeMode", "None"))
        for var in props.get("stateVariables", []):
            kind = _KINDS.get(var.get("stateVariableType"))
            if kind is None:
                raise SparkStateError(f"state variable {var.get('stateName')!r} of operator "
                                      f"{operator_id} has type {var.get('stateVariableType')!r}, "
                                      f"which stateengine does not migrate")
            op.variables.append(SparkVariable(str(var["stateName"]), kind,
                                              bool(var.get("ttlEnabled"))))
    elif name == "applyInPandasWithState":
        op.variables.append(SparkVariable("groupState", GROUP_STATE_KIND))
    else:
        raise SparkStateError(
            f"operator {operator_id} of the query at {storage.location} is Spark's {name}; "
            f"stateengine migrates transformWithState / transformWithStateInPandas and "
            f"applyInPandasWithState operators")
    others = [f"{i} ({r['operatorName']})" for i, r in sorted(ops.items()) if i != operator_id]
    if others:
        raise SparkStateError(
            f"the query at {storage.location} has other stateful operators besides "
            f"{operator_id}: {', '.join(others)}. Spark numbers a plan's stateful operators "
            f"anew at every start, so with operator {operator_id} gone theirs would no longer "
            f"match their state; move a query whose only Spark stateful operator is the one "
            f"migrated")
    return op


def retire_operator_metadata(path: str, operator_id: int) -> bool:
    """Moves ``state/<op>/_metadata`` aside (to ``_metadata.moved-to-stateengine``), so that the
    query restarts without the operator: on its first batch after a restart Spark compares the
    stateful operators of its plan with those of the state metadata and refuses a mismatch
    (STREAMING_STATEFUL_OPERATOR_NOT_MATCH_IN_STATE_METADATA); an operator without metadata is
    not compared. Moving it back undoes this. Returns whether anything was moved."""
    storage = query_storage(path)
    src = f"state/{operator_id}/{METADATA_DIR}"
    dst = f"{src}{RETIRED_SUFFIX}"
    files = _files_under(storage, src)
    if not files:
        return False
    for rel in files:  # copies first: a crash leaves the original in place
        storage.write_atomic(dst + rel[len(src):], storage.read_bytes(rel, 1 << 30))
    storage.delete_dir(src)
    if storage.exists(src):
        raise SparkStateError(f"could not delete {storage.describe(src)} after copying it to "
                              f"{storage.describe(dst)}; delete it to restart the query")
    return True


def _files_under(storage: Any, rel: str) -> list[str]:
    import pyarrow.fs as pafs

    out = []
    for entry in storage.list_dir(rel):
        sub = f"{rel}/{entry.base_name}"
        if entry.type == pafs.FileType.Directory:
            out += _files_under(storage, sub)
        elif entry.type == pafs.FileType.File:
            out.append(sub)
    return out
