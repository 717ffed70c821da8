"""State metrics where Spark users look: in the streaming query's progress and on the driver.

In a streaming query each task of a stateful step, after committing its version, emits one
extra row whose only non-null column, ``__se_metrics``, holds the partition's sealed metrics
as JSON (``stateengine/metrics.py``). The step ``observe``s the aggregate of that column under
the name ``stateengine.<operator_id>`` and then drops the row and the column (handing its
figures to the Spark UI on the way, ui_metrics.py), so the user's rows and columns are
unchanged (their fields become nullable) and
``query.lastProgress.observedMetrics["stateengine.<operator_id>"]`` holds the batch's
figures, summed like Spark's ``stateOperators`` (``SPARK_FIELDS``); ``observed_metrics``
reads them from a classic or a Connect progress. ``state_metrics`` reads any committed
batch's metrics, per partition, from the checkpoint (no JVM: it works on Spark Connect too).
"""

from __future__ import annotations

import json
import os
from typing import Any, Iterator

import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import types as T

from ..checkpoint.storage import CheckpointStorage
from ..metrics import SPARK_FIELDS, StateMetrics, version_metrics
from .ui_metrics import ui_function

METRICS_COL = "__se_metrics"


def observed_name(operator_id: str) -> str:
    """The name the metrics of ``operator_id`` carry in ``observedMetrics``."""
    return f"stateengine.{operator_id}"


def state_metrics(checkpoint: CheckpointStorage | str | os.PathLike, batch_id: int,
                  operator_id: str = "default",
                  hmac_key: bytes | str | None = None) -> StateMetrics:
    """The state metrics of micro-batch ``batch_id`` (the version it committed, ``batch_id +
    1``) of ``operator_id``: ``.partitions`` (partition -> its metrics), ``.totals`` and
    ``.spark`` (summed like Spark's ``stateOperators``). Runs on the driver and reads the
    checkpoint through pyarrow.fs; no SparkContext is needed (Spark Connect works)."""
    if isinstance(batch_id, bool) or not isinstance(batch_id, int) or batch_id < 0:
        raise ValueError(f"batch_id must be an int >= 0, got {batch_id!r}")
    return version_metrics(checkpoint, batch_id + 1, operator_id, hmac_key)


def observed_metrics(progress: Any, operator_id: str = "default") -> dict[str, int] | None:
    """The state metrics of ``operator_id`` in a query progress (``query.lastProgress``,
    ``recentProgress[i]`` or a listener event's ``progress``: a StreamingQueryProgress, a dict
    or its JSON; on Connect a metric arrives as its row's values beside its schema), as plain
    ints; None when the progress has none (a batch that ran nothing)."""
    if progress is None:
        return None
    if isinstance(progress, str):
        progress = json.loads(progress)
    if isinstance(progress, dict):
        observed = progress.get("observedMetrics")
    else:
        observed = getattr(progress, "observedMetrics", None)
    entry = (observed or {}).get(observed_name(operator_id))
    if entry is None:
        return None
    if hasattr(entry, "asDict"):
        entry = entry.asDict()
    entry = dict(entry)
    if set(entry) == {"values", "schema"}:  # Connect: the row's JSON, values beside its schema
        names = [f["name"] for f in entry["schema"]["fields"]]
        entry = dict(zip(names, entry["values"]))
    return {k: int(v) if v is not None else 0 for k, v in entry.items()}


# ---- inside the query ------------------------------------------------------------------------

def internal_schema(out: T.StructType) -> T.StructType:
    """The tasks' output: the user's fields, nullable (the metrics row has no values), then
    the metrics column."""
    return T.StructType([T.StructField(f.name, f.dataType, True, f.metadata) for f in out.fields]
                        + [T.StructField(METRICS_COL, T.StringType(), True)])


def tagged(frames: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
    """The user's output frames with an empty metrics column (on a shallow copy: a frame the
    user's function returned is not modified)."""
    for frame in frames:
        frame = frame.copy(deep=False)
        frame[METRICS_COL] = None
        yield frame


def metrics_frame(columns: list[str], task: Any) -> pd.DataFrame:
    """The one row a task adds after its commit: no user values, its metrics as JSON."""
    sealed = dict(task.store.metrics.get("state") or {})
    sealed["partition"] = task.partition_id
    sealed["batch"] = task.batch.batch_id
    sealed["operator"] = task.cfg.operator_id
    row = {c: [None] for c in columns}
    row[METRICS_COL] = [json.dumps(sealed, sort_keys=True)]
    return pd.DataFrame(row, columns=[*columns, METRICS_COL])


def tagged_arrow(batches: Iterator[Any], schema: Any) -> Iterator[Any]:
    """The Arrow flavour of ``tagged``: each RecordBatch with an empty metrics column, under
    ``schema`` (the Arrow form of ``internal_schema``)."""
    import pyarrow as pa

    for batch in batches:
        yield pa.RecordBatch.from_arrays(
            [*batch.columns, pa.nulls(batch.num_rows, pa.string())], schema=schema)


def metrics_batch(schema: Any, task: Any) -> Any:
    """The Arrow flavour of ``metrics_frame``, under ``schema`` (as in ``tagged_arrow``)."""
    import pyarrow as pa

    row = metrics_frame([], task)[METRICS_COL].iloc[0]
    return pa.RecordBatch.from_arrays(
        [pa.nulls(1, f.type) for f in list(schema)[:-1]] + [pa.array([row], pa.string())],
        schema=schema)


def _aggregate(how: str, field: str) -> str:
    value = f"get_json_object({METRICS_COL}, '$.{field}')"
    if how == "sum":
        # exact: DECIMAL sums do not depend on the order Spark adds the tasks' values in, and
        # metrics.exact_rounded_sum gives the same figure from the manifests
        agg = f"CAST(round(sum(CAST({value} AS DECIMAL(38, 3)))) AS BIGINT)"
    elif how == "max":
        agg = f"max(CAST({value} AS BIGINT))"
    elif how == "count":
        agg = f"count({METRICS_COL})"
    else:  # count_load: partitions whose state was loaded this way
        agg = f"count(CASE WHEN get_json_object({METRICS_COL}, '$.load') = '{field}' THEN 1 END)"
    return f"coalesce({agg}, CAST(0 AS BIGINT))"


def _expr(df: DataFrame, sql: str, name: str) -> Any:
    """A Column of ``df``'s own kind (classic or Connect, which may share a process): the
    module-level functions pick one by a process-wide switch, not by the DataFrame."""
    if type(df).__module__.startswith("pyspark.sql.connect"):
        from pyspark.sql.connect import functions as fns
    else:
        from pyspark.sql import functions as fns
    return fns.expr(sql).alias(name)


def observe_state(df: DataFrame, operator_id: str) -> DataFrame:
    """``df`` (tasks' output with metrics rows) observed under ``observed_name(operator_id)``,
    then without the metrics rows and column. Written as SQL text, like routing.py."""
    aggs = [_expr(df, _aggregate(how, field), name)
            for name, (how, field) in SPARK_FIELDS.items()]
    aggs.append(_expr(df, f"coalesce(max(CAST(get_json_object({METRICS_COL}, '$.batch') AS "
                          f"BIGINT)), CAST(-1 AS BIGINT))", "batchId"))
    keep = f"{METRICS_COL} IS NULL"
    ui = ui_function(df.sparkSession)
    if ui is not None:  # the dropped rows' figures go to named accumulators (ui_metrics.py)
        keep = f"{keep} OR {ui}({METRICS_COL})"
    return df.observe(observed_name(operator_id), *aggs).filter(keep).drop(METRICS_COL)
