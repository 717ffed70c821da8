"""stateengine inside Spark: route rows to the partition owning their key group and run
stateful pandas functions there, batch after batch or as a step of a streaming query
(pyspark 3.5 to 4.x, classic sessions and Spark Connect)."""

from .apply import apply_with_state, map_with_state
from .batch import BatchInfo, batch_times
from .context import BatchContext, GroupContext
from .group_state import apply_in_pandas_with_state
from .metrics import observed_metrics, state_metrics
from .migrate import SparkMigration, migrate_spark_state
from .no_data_batches import with_no_data_batches
from .processor import state_descriptors, transform_with_state, \
    transform_with_state_in_pandas
from .routing import route, with_routing_columns
from .runtime import drop_cached
from .state_io import bootstrap_state, read_state
from .ui_metrics import ui_jar

__all__ = ["BatchContext", "BatchInfo", "GroupContext", "SparkMigration",
           "apply_in_pandas_with_state", "apply_with_state", "batch_times", "bootstrap_state",
           "drop_cached", "map_with_state", "mark_batch_committed", "migrate_spark_state",
           "observed_metrics", "read_state", "route", "state_descriptors", "state_metrics",
           "transform_with_state", "transform_with_state_in_pandas", "ui_jar",
           "with_no_data_batches",
           "with_routing_columns"]


def mark_batch_committed(checkpoint: str, batch_id: int, num_partitions: int,
                         operator_id: str = "default") -> None:
    """Driver side, after a batch's output was written: records that all partitions committed
    version ``batch_id + 1`` (optional; it settles which partition count a version used if a
    batch was ever re-run with another one)."""
    from ..checkpoint.storage import CheckpointStorage
    from ..checkpoint.versions import VersionCatalog

    VersionCatalog(CheckpointStorage(checkpoint), operator_id).mark_committed(batch_id + 1,
                                                                            num_partitions)
