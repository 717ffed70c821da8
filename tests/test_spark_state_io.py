"""State as DataFrames: reading committed state and bootstrapping state from a DataFrame."""

import pandas as pd
import pytest

from stateengine import (AggregatingStateDescriptor, ListStateDescriptor, MapStateDescriptor,
                         SortedMapStateDescriptor, UnknownStateError, ValueStateDescriptor,
                         aggregates)
from stateengine.errors import CheckpointNotFoundError
from stateengine.spark import apply_with_state, bootstrap_state, read_state

pytestmark = pytest.mark.spark

VALUE = ValueStateDescriptor("last", value_type=str)
ITEMS = ListStateDescriptor("items", value_type=int)
BY_DAY = MapStateDescriptor("by_day", user_key_type=int, value_type=float)
ANY = ValueStateDescriptor("anything")


def fill(spark, ck):
    pdf = pd.DataFrame({"user": ["a", "a", "b", "c"], "day": [1, 2, 1, 3],
                        "amount": [1.5, 2.0, 3.0, 4.25]})

    def fn(user, rows, ctx):
        ctx.state("last").update(f"{user}-{len(rows)}")
        ctx.state("items").add_all(rows["day"].tolist())
        for d, a in zip(rows["day"], rows["amount"]):
            ctx.state("by_day").put(int(d), float(a))
        ctx.state("anything").update({"n": len(rows), "user": user})
        return None

    apply_with_state(spark.createDataFrame(pdf), "user", fn, "x int", [VALUE, ITEMS, BY_DAY, ANY],
                     ck, 0, num_partitions=2, operator_id="op").collect()


def test_read_every_kind_of_state(spark, tmp_path):
    ck = str(tmp_path / "ck")
    fill(spark, ck)
    last = read_state(spark, ck, "last", operator_id="op", key_names=["user"])
    assert [f.name for f in last.schema.fields] == ["user", "namespace", "value"]
    assert sorted((r.user, r.value) for r in last.collect()) == [("a", "a-2"), ("b", "b-1"), ("c", "c-1")]
    items = {r.key: sorted(r.value) for r in read_state(spark, ck, "items", operator_id="op").collect()}
    assert items == {"a": [1, 2], "b": [1], "c": [3]}
    by_day = read_state(spark, ck, "by_day", operator_id="op")
    assert by_day.schema["user_key"].dataType.simpleString() == "bigint"
    assert sorted((r.key, r.user_key, r.value) for r in by_day.collect()) == [
        ("a", 1, 1.5), ("a", 2, 2.0), ("b", 1, 3.0), ("c", 3, 4.25)]
    anything = read_state(spark, ck, "anything", operator_id="op")
    # the "any" serializer's dicts with text keys and mixed values read as records
    assert anything.schema["value"].dataType.simpleString() == "struct<n:bigint,user:string>"
    assert {r.key: r.value.asDict() for r in anything.collect()}["a"] == {"n": 2, "user": "a"}


def test_read_state_errors_name_what_is_missing(spark, tmp_path):
    ck = str(tmp_path / "ck")
    fill(spark, ck)
    with pytest.raises(UnknownStateError, match="no state 'nope'.*states: anything, by_day, items, last"):
        read_state(spark, ck, "nope", operator_id="op")
    with pytest.raises(CheckpointNotFoundError, match="version 7 .* does not exist"):
        read_state(spark, ck, "last", operator_id="op", version=7)
    with pytest.raises(UnknownStateError, match="no committed version"):
        read_state(spark, str(tmp_path / "empty"), "last", operator_id="op")


def test_bootstrap_then_continue_with_apply_with_state(spark, tmp_path):
    ck = str(tmp_path / "ck")
    seed = spark.createDataFrame(pd.DataFrame({"user": list(range(40)), "total": [float(u) for u in range(40)]}))
    totals = ValueStateDescriptor("total", value_type=float)
    version = bootstrap_state(seed, "user", totals, "total", ck, operator_id="op",
                              num_partitions=3)
    assert version == 1
    events = seed.selectExpr("user", "cast(1.0 as double) as amount")

    def fn(user, rows, ctx):
        t = ctx.state("total")
        t.update(t.value() + float(rows["amount"].sum()))
        return [(user, t.value())]

    out = apply_with_state(events, "user", fn, "user bigint, total double", [totals], ck, version,
                           num_partitions=2, operator_id="op")
    assert {r.user: r.total for r in out.collect()} == {u: u + 1.0 for u in range(40)}


def test_bootstrap_map_list_sorted_map_and_aggregating_state(spark, tmp_path):
    ck = str(tmp_path / "ck")
    df = spark.createDataFrame(pd.DataFrame({"k": ["x", "x", "y"], "uk": [3, 1, 2],
                                             "v": [30, 10, 20]}))
    v = bootstrap_state(df, "k", SortedMapStateDescriptor("sm", int, value_type=int), "v", ck,
                        user_key="uk", operator_id="op")
    v = bootstrap_state(df, "k", ListStateDescriptor("l", value_type=int), "v", ck,
                        operator_id="op", version=v)
    v = bootstrap_state(df, "k", AggregatingStateDescriptor("n", aggregates.COUNT), "v", ck,
                        operator_id="op", version=v)
    assert v == 3
    rows = read_state(spark, ck, "sm", operator_id="op").collect()
    assert sorted((r.key, r.user_key, r.value) for r in rows) == [("x", 1, 10), ("x", 3, 30), ("y", 2, 20)]
    lists = {r.key: sorted(r.value) for r in read_state(spark, ck, "l", operator_id="op").collect()}
    assert lists == {"x": [10, 30], "y": [20]}
    counts = {r.key: r.value for r in read_state(spark, ck, "n", operator_id="op").collect()}
    assert counts == {"x": 2, "y": 1}
    with pytest.raises(ValueError, match="needs user_key"):
        bootstrap_state(df, "k", MapStateDescriptor("m"), "v", ck, operator_id="op", version=v)
