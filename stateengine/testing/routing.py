"""Rows placed on the partitions that own their keys, as ``stateengine.spark.routing.route``
places them in Spark, without Spark.

Spark computes a row's key group with SQL, ``pmod(hash(key columns), max_parallelism)``; here
the engine computes the same number (its Spark-identical hash, which tests/test_spark_hash.py
checks against Spark), so a key lands in the partition, key group and state that it would in a
Spark job with the same partition count and maximum parallelism.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import _native
from ..keygroups import operator_for_key_group
from ..spark.routing import KG_COL, PID_COL

_SPARK_HASH_SEED = 42  # hash() of only nulls: Spark's Murmur3 seed passes through


def key_group(key: tuple, codecs: tuple[int, ...], max_parallelism: int) -> int:
    """The key group of one key (a tuple of column values). Null columns are left out of the
    hash, as Spark's hash() leaves them out (the task then refuses the null key)."""
    present = [(v, c) for v, c in zip(key, codecs) if v is not None]
    if not present:
        h = _SPARK_HASH_SEED
    else:
        values, kinds = zip(*present)
        h = _native.spark_hash(values if len(values) > 1 else values[0], kinds)
    return _native.key_group_for_hash(h, max_parallelism)


def partition_of(key: tuple, codecs: tuple[int, ...], num_partitions: int,
                 max_parallelism: int) -> int:
    """The partition that owns a key."""
    return operator_for_key_group(key_group(key, codecs, max_parallelism), num_partitions,
                                  max_parallelism)


def route(table: Any, cols: list[str], codecs: tuple[int, ...], num_partitions: int,
          max_parallelism: int) -> list[Any]:
    """Each partition's rows of an Arrow table, with ``__se_kg`` and ``__se_pid`` as Spark's
    routed rows carry them, sorted by key group and key as ``sortWithinPartitions`` sorts a
    batch DataFrame's (stable: a key's rows keep their input order)."""
    import pyarrow as pa

    groups = _key_groups(table, cols, codecs, max_parallelism)
    pids = (groups.astype(np.int64) * num_partitions // max_parallelism).astype(np.int32)
    routed = table.append_column(KG_COL, pa.array(groups)).append_column(PID_COL,
                                                                         pa.array(pids))
    # one stable sort by key group and key: a partition owns a contiguous run of key groups,
    # so its rows come out contiguous, in the order sorting its rows alone would give
    order = [(KG_COL, "ascending")] + [(c, "ascending") for c in cols]
    ordered = routed.sort_by(order)
    counts = np.bincount(pids, minlength=num_partitions)
    starts = np.cumsum(counts) - counts
    return [ordered.slice(int(s), int(n)) for s, n in zip(starts, counts)]


def _key_groups(table: Any, cols: list[str], codecs: tuple[int, ...],
                max_parallelism: int) -> np.ndarray:
    """The key group of every row: computed once per distinct key."""
    import pyarrow as pa
    import pyarrow.compute as pc

    n = table.num_rows
    groups = np.empty(n, dtype=np.int32)
    if not n:
        return groups
    if len(cols) == 1:
        column = table.column(cols[0])
        kind = column.type
        # integers and strings compare exactly as their Python values do: distinct values
        # from Arrow's dictionary (floats are left to the per-row path: -0.0 and NaN)
        if pa.types.is_integer(kind) or pa.types.is_string(kind) or \
                pa.types.is_large_string(kind):
            encoded = pc.dictionary_encode(column.combine_chunks(), null_encoding="encode")
            per_value = np.array([key_group((v,), codecs, max_parallelism)
                                  for v in encoded.dictionary.to_pylist()], dtype=np.int32)
            return per_value[encoded.indices.to_numpy(zero_copy_only=False)]
    columns = [table.column(c).to_pylist() for c in cols]
    seen: dict[tuple, int] = {}
    for i, key in enumerate(zip(*columns)):
        kg = seen.get(key)
        if kg is None:
            kg = seen[key] = key_group(key, codecs, max_parallelism)
        groups[i] = kg
    return groups
