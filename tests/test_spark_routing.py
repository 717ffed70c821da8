"""Routing: every row reaches the Spark partition that owns its key group.

Both placements are checked against the running Spark: ``repartitionById`` (pyspark >= 4.1)
and the hash route (any version: ``repartition(N, r)`` with a routing int ``r`` per partition
whose Spark hash lands on it), which ``route`` picks where ``repartitionById`` is missing."""

import numpy as np
import pandas as pd
import pytest
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from stateengine import KeyGroupRange, assign_key_group, operator_for_key_group
from stateengine.spark.routing import (KG_COL, default_num_partitions, hash_routing_values,
                                       key_codecs_for, route, routing_method)

pytestmark = pytest.mark.spark

# The placements this pyspark offers: the hash route always, repartitionById from 4.1 on.
METHODS = ["hash"] + (["by_id"] if hasattr(DataFrame, "repartitionById") else [])


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("n,max_p", [(1, 128), (2, 128), (3, 128), (7, 128), (128, 128),
                                     (4, 1000), (5, 32768)])
def test_every_row_reaches_the_partition_owning_its_key_group(spark, n, max_p, method):
    df = spark.range(4000).select((F.col("id") * 7919 % 100003).alias("k"),
                                  F.col("id").cast("string").alias("s"))
    rows = (route(df, "k", n, max_p, method=method).withColumn("part", F.spark_partition_id())
            .select("k", KG_COL, "part").collect())
    assert len(rows) == 4000
    for r in rows:
        kg = r[KG_COL]
        assert kg == assign_key_group(r.k, max_p)  # Spark and the engine agree
        assert r.part == operator_for_key_group(kg, n, max_p)
        assert KeyGroupRange.for_operator(r.part, n, max_p).contains(kg)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("n,max_p", [(3, 128), (6, 4096)])
def test_string_int_and_two_column_keys(spark, n, max_p, method):
    df = spark.range(3000).select(
        F.concat(F.lit("user-é-"), (F.col("id") % 997).cast("string")).alias("name"),
        (F.col("id") % 13).cast("int").alias("region"))
    for key, make in (("name", lambda r: r.name),
                      ("region", lambda r: np.int32(r.region)),
                      (["name", "region"], lambda r: (r.name, np.int32(r.region)))):
        cols = [key] if isinstance(key, str) else key
        rows = (route(df, key, n, max_p, method=method).withColumn("part", F.spark_partition_id())
                .select(*cols, KG_COL, "part").collect())
        for r in rows:
            assert r[KG_COL] == assign_key_group(make(r), max_p)
            assert r.part == operator_for_key_group(r[KG_COL], n, max_p)


@pytest.mark.parametrize("n", [1, 2, 3, 7, 128, 1000, 32768])
def test_hash_routing_values_land_on_their_partition_under_spark_hash(spark, n):
    """The driver's routing ints, hashed by Spark as the partitioner does (pmod(hash(r), N))."""
    values = hash_routing_values(n)
    assert len(values) == n and len(set(values)) == n
    got = (spark.createDataFrame(pd.DataFrame({"p": np.arange(n, dtype="int32"),
                                               "r": np.array(values, dtype="int32")}))
           .selectExpr("p", f"pmod(hash(CAST(r AS INT)), {n}) AS spark_p").toPandas())
    assert (got["p"] == got["spark_p"]).all(), got[got["p"] != got["spark_p"]].head()


@pytest.mark.parametrize("method", METHODS)
def test_adaptive_execution_keeps_one_task_per_partition(spark, method):
    """A few rows over 48 partitions: AQE (on, with partition coalescing) would merge such tiny
    shuffle partitions were it free to; every partition must still run as its own task, empty
    ones included, since each commits its state version."""
    assert spark.conf.get("spark.sql.adaptive.enabled") == "true"
    assert spark.conf.get("spark.sql.adaptive.coalescePartitions.enabled") == "true"

    def per_task(batches):
        from pyspark import TaskContext

        rows = sum(len(b) for b in batches)
        yield pd.DataFrame({"part": [TaskContext.get().partitionId()], "rows": [rows]})

    df = spark.range(10).select(F.col("id").alias("k"))
    out = route(df, "k", 48, 128, method=method).mapInPandas(per_task, "part int, rows long")
    tasks = sorted((r.part, r.rows) for r in out.collect())
    assert [p for p, _ in tasks] == list(range(48))
    assert sum(n for _, n in tasks) == 10


def test_auto_picks_repartition_by_id_where_the_dataframe_has_it(spark):
    df = spark.range(3)
    assert routing_method(df) == ("by_id" if hasattr(df, "repartitionById") else "hash")
    assert routing_method(df, "hash") == "hash"
    with pytest.raises(ValueError, match="routing method must be one of"):
        routing_method(df, "random")


def test_default_partitions_follow_the_shuffle_partitions_capped_at_max_parallelism(spark):
    assert spark.conf.get("spark.sql.shuffle.partitions") == "4"
    assert default_num_partitions(spark, 128) == 4
    assert default_num_partitions(spark, 3) == 3


def test_key_codecs_follow_spark_types(spark):
    df = spark.createDataFrame([(1, 2, "x", b"b", 1.5, True)],
                               "a bigint, b int, c string, d binary, e double, f boolean")
    assert key_codecs_for(df, ["a", "b", "c", "d", "e", "f"]) == (2, 8, 4, 5, 3, 6)
    with pytest.raises(Exception, match="not in the DataFrame"):
        key_codecs_for(df, ["nope"])
    arr = spark.createDataFrame([([1],)], "xs array<int>")
    with pytest.raises(Exception, match="key columns must be"):
        key_codecs_for(arr, ["xs"])


def test_partition_counts_are_checked_and_numpy_ints_accepted(spark):
    df = spark.range(20).select(F.col("id").alias("k"))
    for bad in (0, 129, True, 2.0):
        with pytest.raises(ValueError, match="must be an int in"):
            route(df, "k", bad, 128)
    parts = route(df, "k", np.int64(3), 128, method="hash").selectExpr(
        "spark_partition_id() AS part", KG_COL).collect()
    assert all(r.part == operator_for_key_group(r[KG_COL], 3, 128) for r in parts)
