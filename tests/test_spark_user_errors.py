"""A user function that raises, seen from the driver: the first line of stateengine's error
(function, exception, operator, key, batch, partition) and the function's own traceback
survive Spark's wrapping in a classic session, inside a streaming query and over Spark
Connect; the failed batch commits nothing, so the last committed version stays and a rerun
with the function fixed works."""

import os
import re

import pandas as pd
import pytest

from stateengine import ValueStateDescriptor, assign_key_group, operator_for_key_group
from stateengine.spark import apply_with_state, map_with_state, read_state

pytestmark = pytest.mark.spark

COUNT = ValueStateDescriptor("count", value_type=int, default=0)
OUT = "user string, count long"
PARTS = 3
PREFIX = "user function tests.test_spark_user_errors."


def partition_of(key):
    return operator_for_key_group(assign_key_group(key, 128), PARTS, 128)


def count_rows(user, rows, ctx):
    count = ctx.state("count")
    count.update(count.value() + len(rows))
    return [(user, count.value())]


def count_with_lookup(user, rows, ctx):
    count = ctx.state("count")
    count.update(count.value() + len(rows))
    limits = {"a": 10}  # no limit for "b": the bug this test plants
    return [(user, min(count.value(), limits[user]))]


def events(spark, users):
    return spark.createDataFrame(pd.DataFrame({"user": users}))


def first_line_of(text, head):
    """The line of a driver-side exception text that starts with stateengine's error."""
    lines = [line for line in text.splitlines() if head in line]
    assert lines, text[-3000:]
    return lines[0][lines[0].index(head):]


def test_classic_session_names_function_key_batch_partition_and_keeps_the_last_version(
        spark, tmp_path):
    ck = str(tmp_path / "state")
    apply_with_state(events(spark, ["a", "b", "b"]), "user", count_rows, OUT, [COUNT], ck,
                     batch_id=0, num_partitions=PARTS, operator_id="agg").collect()
    with pytest.raises(Exception) as info:
        apply_with_state(events(spark, ["a", "b"]), "user", count_with_lookup, OUT, [COUNT],
                         ck, batch_id=1, num_partitions=PARTS, operator_id="agg").collect()
    text = str(info.value)
    assert first_line_of(text, PREFIX) == (
        f"{PREFIX}count_with_lookup raised KeyError: 'b' (operator 'agg', key 'b', batch 1, "
        f"partition {partition_of('b')})")
    assert "UserFunctionError" in text
    # the user's traceback, copied into the message, points at the failing line
    assert "in count_with_lookup" in text and "limits[user]" in text
    # the failed task committed nothing (the other partitions' tasks did, as they would for
    # any failed batch); version 1 is intact and a rerun of batch 1 reloads it
    failed = f"p{partition_of('b'):05d}-of-{PARTS:05d}.json"
    assert failed not in os.listdir(os.path.join(ck, "agg", "v2"))
    state = read_state(spark, ck, "count", operator_id="agg", version=1).toPandas()
    assert dict(zip(state["key"], state["value"])) == {"a": 1, "b": 2}
    apply_with_state(events(spark, ["a", "b"]), "user", count_rows, OUT, [COUNT], ck,
                     batch_id=1, num_partitions=PARTS, operator_id="agg").collect()
    state = read_state(spark, ck, "count", operator_id="agg").toPandas()
    assert dict(zip(state["key"], state["value"])) == {"a": 2, "b": 3}


def test_timer_and_map_functions_and_wrong_output_shapes(spark, tmp_path):
    def late_timer(user, timer, ctx):
        raise ValueError(f"no timer handling for {user}")

    def register(user, rows, ctx):
        ctx.timers.register_event_time_timer(5)
        return None

    with pytest.raises(Exception) as info:
        apply_with_state(events(spark, ["c"]), "user", register, OUT, [COUNT],
                         str(tmp_path / "t"), batch_id=0, num_partitions=PARTS,
                         on_timer=late_timer, watermark=10).collect()
    assert re.search(r"test_timer_and_map_functions_and_wrong_output_shapes\.<locals>\."
                     r"late_timer raised ValueError: no timer handling for c \(operator "
                     rf"'default', key 'c', batch 0, partition {partition_of('c')}\)",
                     str(info.value)), str(info.value)[-2000:]

    def per_partition(rows, ctx):
        return pd.DataFrame({"user": rows["user"], "count": rows["missing"]})

    def per_partition_lazily(rows, ctx):  # a generator: the error comes while Spark reads it
        yield pd.DataFrame({"user": rows["user"], "count": rows["missing"]})

    for fn, directory in ((per_partition, "m"), (per_partition_lazily, "g")):
        with pytest.raises(Exception) as info:
            map_with_state(events(spark, ["d"]), "user", fn, OUT, [COUNT],
                           str(tmp_path / directory), batch_id=0, num_partitions=PARTS).collect()
        line = first_line_of(str(info.value), "user function ")
        assert line.endswith(f"{fn.__name__} raised KeyError: 'missing' (operator 'default', "
                             f"batch 0, partition {partition_of('d')})"), line

    def one_value(user, rows, ctx):
        return [(user,)]

    with pytest.raises(Exception) as info:
        apply_with_state(events(spark, ["e"]), "user", one_value, OUT, [COUNT],
                         str(tmp_path / "o"), batch_id=0, num_partitions=PARTS).collect()
    line = first_line_of(str(info.value), "OutputSchemaError: ")
    assert "one_value does not fit the output schema (operator 'default', key 'e', batch 0" in line
    assert line.endswith("expected rows of 2 values (struct<user:string,count:bigint>), got a "
                         "row of 1: ('e',)")


def test_inside_a_streaming_query(spark, tmp_path):
    source, base = str(tmp_path / "in"), str(tmp_path / "job")
    os.makedirs(source)
    pd.DataFrame({"user": ["a", "b"]}).to_parquet(os.path.join(source, "p0.parquet"))
    stream = spark.readStream.schema("user string").parquet(source)
    out = apply_with_state(stream, "user", count_with_lookup, OUT, [COUNT],
                           os.path.join(base, "state"), num_partitions=PARTS, operator_id="agg")
    query = (out.writeStream.format("parquet").option("path", os.path.join(base, "out"))
             .option("checkpointLocation", os.path.join(base, "query"))
             .trigger(availableNow=True).start())
    with pytest.raises(Exception) as info:
        query.awaitTermination()
    assert first_line_of(str(info.value), PREFIX) == (
        f"{PREFIX}count_with_lookup raised KeyError: 'b' (operator 'agg', key 'b', batch 0, "
        f"partition {partition_of('b')})")
    assert "limits[user]" in str(info.value)
    failed = f"p{partition_of('b'):05d}-of-{PARTS:05d}.json"
    assert failed not in os.listdir(os.path.join(base, "state", "agg", "v1"))


@pytest.mark.connect
def test_over_spark_connect(connect, tmp_path):
    df = connect.createDataFrame(pd.DataFrame({"user": ["a", "b"]}))
    with pytest.raises(Exception) as info:
        apply_with_state(df, "user", count_with_lookup, OUT, [COUNT], str(tmp_path / "s"),
                         batch_id=0, num_partitions=PARTS, operator_id="agg").collect()
    assert first_line_of(str(info.value), PREFIX) == (
        f"{PREFIX}count_with_lookup raised KeyError: 'b' (operator 'agg', key 'b', batch 0, "
        f"partition {partition_of('b')})")
