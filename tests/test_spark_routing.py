"""Routing: every row reaches the Spark partition that owns its key group."""

import numpy as np
import pytest
from pyspark.sql import functions as F

from stateengine import KeyGroupRange, assign_key_group, operator_for_key_group
from stateengine.spark.routing import KG_COL, key_codecs_for, route

pytestmark = pytest.mark.spark


@pytest.mark.parametrize("n,max_p", [(1, 128), (2, 128), (3, 128), (7, 128), (128, 128),
                                     (4, 1000), (5, 32768)])
def test_every_row_reaches_the_partition_owning_its_key_group(spark, n, max_p):
    df = spark.range(4000).select((F.col("id") * 7919 % 100003).alias("k"),
                                  F.col("id").cast("string").alias("s"))
    rows = (route(df, "k", n, max_p).withColumn("part", F.spark_partition_id())
            .select("k", KG_COL, "part").collect())
    assert len(rows) == 4000
    for r in rows:
        kg = r[KG_COL]
        assert kg == assign_key_group(r.k, max_p)  # Spark and the engine agree
        assert r.part == operator_for_key_group(kg, n, max_p)
        assert KeyGroupRange.for_operator(r.part, n, max_p).contains(kg)


@pytest.mark.parametrize("n,max_p", [(3, 128), (6, 4096)])
def test_string_int_and_two_column_keys(spark, n, max_p):
    df = spark.range(3000).select(
        F.concat(F.lit("user-é-"), (F.col("id") % 997).cast("string")).alias("name"),
        (F.col("id") % 13).cast("int").alias("region"))
    for key, make in (("name", lambda r: r.name),
                      ("region", lambda r: np.int32(r.region)),
                      (["name", "region"], lambda r: (r.name, np.int32(r.region)))):
        cols = [key] if isinstance(key, str) else key
        rows = (route(df, key, n, max_p).withColumn("part", F.spark_partition_id())
                .select(*cols, KG_COL, "part").collect())
        for r in rows:
            assert r[KG_COL] == assign_key_group(make(r), max_p)
            assert r.part == operator_for_key_group(r[KG_COL], n, max_p)


def test_key_codecs_follow_spark_types(spark):
    df = spark.createDataFrame([(1, 2, "x", b"b", 1.5, True)],
                               "a bigint, b int, c string, d binary, e double, f boolean")
    assert key_codecs_for(df, ["a", "b", "c", "d", "e", "f"]) == (2, 8, 4, 5, 3, 6)
    with pytest.raises(Exception, match="not in the DataFrame"):
        key_codecs_for(df, ["nope"])
    arr = spark.createDataFrame([([1],)], "xs array<int>")
    with pytest.raises(Exception, match="key columns must be"):
        key_codecs_for(arr, ["xs"])
