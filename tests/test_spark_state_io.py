"""State as DataFrames: reading committed state and bootstrapping state from a DataFrame."""

import datetime as dt
from decimal import Decimal

import pandas as pd
import pytest

from stateengine import (AggregatingStateDescriptor, ListStateDescriptor, MapStateDescriptor,
                         MixedTypesError, SortedMapStateDescriptor, StateStoreProvider,
                         UnknownStateError, ValueStateDescriptor, aggregates)
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


# ---- typed state as typed columns ------------------------------------------------------------

PROFILE = ValueStateDescriptor("profile", value_type=(
    "visits long, code int, small short, tiny byte, score double, ratio float, name string, "
    "raw binary, active boolean, price decimal(12,2), born date, seen timestamp, "
    "tags array<string>, attrs map<string,int>, last struct<page: string, at timestamp_ntz>"))
PROFILE_SPARK = ("struct<visits:bigint,code:int,small:smallint,tiny:tinyint,score:double,"
                 "ratio:float,name:string,raw:binary,active:boolean,price:decimal(12,2),"
                 "born:date,seen:timestamp,tags:array<string>,attrs:map<string,int>,"
                 "last:struct<page:string,at:timestamp_ntz>>")
PAGES = MapStateDescriptor("pages", user_key_type="day date, kind string", value_type="n long")
CLICKS = ListStateDescriptor("clicks", value_type="page string, at long")
UTC = dt.timezone.utc


def profile(u):
    return (u * 1_000_000_007, -u, u, -1, u / 4, 0.5, f"user {u}", bytes([u, 0]), u % 2 == 0,
            Decimal(u) / 100, dt.date(2024, 1, u + 1),
            dt.datetime(2024, 5, 6, 7, 8, u, 250_000, tzinfo=UTC), [f"t{u}", None], {"a": u},
            ("/home", dt.datetime(2024, 1, 1, 0, 0, u)))


def commit_typed(ck, tmp_path):
    """Typed states written through the native API (StateStoreProvider, no Spark)."""
    with StateStoreProvider(ck, "op", 0, 1, key_type=int, descriptors=[PROFILE, PAGES, CLICKS],
                            local_dir=str(tmp_path / "local")) as provider:
        store = provider.get_store(0)
        prof, pages, clicks = (store.get_state(d) for d in (PROFILE, PAGES, CLICKS))
        for u in range(1, 4):
            store.backend.set_current_key(u)
            prof.update(profile(u))
            pages.put((dt.date(2024, 2, u), "buy"), (u * 10,))
            pages.put((dt.date(2024, 2, u), "view"), None)
            clicks.add_all([("/a", u), ("/b", u + 1)])
        store.backend.set_current_key(9)
        prof.update((9,) + (None,) * 14)  # null fields stay null
        store.commit()


def test_typed_state_reads_as_typed_columns_flattened_or_not(spark, tmp_path):
    ck = str(tmp_path / "ck")
    commit_typed(ck, tmp_path)
    prof = read_state(spark, ck, "profile", operator_id="op")
    assert prof.schema["value"].dataType.simpleString() == PROFILE_SPARK
    got = {r.key: r for r in prof.selectExpr(
        "key", "value.visits", "value.price", "CAST(value.born AS STRING) AS born",
        "CAST(value.seen AS STRING) AS seen", "value.tags", "value.attrs", "value.last.page",
        "CAST(value.last.at AS STRING) AS last_at", "hex(value.raw) AS raw", "value.ratio",
        "value.tiny", "value.name").collect()}
    assert got[2].asDict() == {"key": 2, "visits": 2_000_000_014, "price": Decimal("0.02"),
                               "born": "2024-01-03", "seen": "2024-05-06 07:08:02.25",
                               "tags": ["t2", None], "attrs": {"a": 2}, "page": "/home",
                               "last_at": "2024-01-01 00:00:02", "raw": "0200", "ratio": 0.5,
                               "tiny": -1, "name": "user 2"}
    assert got[9].visits == 9 and got[9].price is None and got[9].tags is None
    flat = read_state(spark, ck, "profile", operator_id="op", flatten=True)
    assert flat.columns == ["key", "namespace", *PROFILE.value_schema.names]
    assert flat.schema["price"].dataType.simpleString() == "decimal(12,2)"
    assert sorted(flat.selectExpr("key", "code").collect()) == [(1, -1), (2, -2), (3, -3), (9, None)]

    pages = read_state(spark, ck, "pages", operator_id="op")
    assert pages.schema["user_key"].dataType.simpleString() == "struct<day:date,kind:string>"
    assert pages.schema["value"].dataType.simpleString() == "struct<n:bigint>"
    flat = read_state(spark, ck, "pages", operator_id="op", flatten=True)
    assert flat.columns == ["key", "namespace", "day", "kind", "n"]
    assert sorted(tuple(r) for r in flat.where("key = 1").collect()) == [
        (1, None, dt.date(2024, 2, 1), "buy", 10), (1, None, dt.date(2024, 2, 1), "view", None)]

    clicks = read_state(spark, ck, "clicks", operator_id="op")
    assert clicks.schema["value"].dataType.simpleString() == "array<struct<page:string,at:bigint>>"
    assert [tuple(e) for e in clicks.where("key = 2").first().value] == [("/a", 2), ("/b", 3)]
    flat = read_state(spark, ck, "clicks", operator_id="op", flatten=True)  # a row per element
    assert flat.columns == ["key", "namespace", "page", "at"]
    assert sorted(tuple(r) for r in flat.where("key = 2").collect()) == [
        (2, None, "/a", 2), (2, None, "/b", 3)]
    with pytest.raises(ValueError, match="declares its value type .struct<visits.*drop it"):
        read_state(spark, ck, "profile", operator_id="op", value_type="string")
    with pytest.raises(ValueError, match="two columns named 'kind'.*flatten=False"):
        read_state(spark, ck, "pages", operator_id="op", key_names=["kind"], flatten=True)


def test_bootstrap_typed_state_from_struct_or_field_columns(spark, tmp_path):
    ck = str(tmp_path / "ck")
    commit_typed(ck, tmp_path)
    want = {r.key: r.value for r in read_state(spark, ck, "profile", operator_id="op").collect()}
    # the read DataFrame goes back in as it is (a struct column) and as one column per field
    for name, value, flatten in (("struct", "value", False), ("fields", None, True)):
        out = str(tmp_path / name)
        df = read_state(spark, ck, "profile", operator_id="op", flatten=flatten)
        assert bootstrap_state(df, "key", PROFILE, value, out, num_partitions=2) == 1
        again = read_state(spark, out, "profile")
        assert again.schema == read_state(spark, ck, "profile", operator_id="op").schema
        assert {r.key: r.value for r in again.collect()} == want
    pages = read_state(spark, ck, "pages", operator_id="op", flatten=True)
    out = str(tmp_path / "pages")
    bootstrap_state(pages, "key", PAGES, ["n"], out, user_key=["day", "kind"])
    assert sorted(read_state(spark, out, "pages", flatten=True).collect()) == sorted(pages.collect())
    # the rows that make a list state, in input order per key
    events = spark.createDataFrame(
        [(1, "/x", 5), (2, "/y", 6), (1, "/z", 7)], "user long, page string, at long")
    out = str(tmp_path / "clicks")
    bootstrap_state(events.coalesce(1), "user", CLICKS, None, out, num_partitions=1)
    lists = {r.key: [tuple(e) for e in r.value] for r in read_state(spark, out, "clicks").collect()}
    assert lists == {1: [("/x", 5), ("/z", 7)], 2: [("/y", 6)]}


def test_bootstrap_refuses_values_that_do_not_fit_the_schema_and_commits_nothing(spark, tmp_path):
    out = str(tmp_path / "ck")
    bad = spark.createDataFrame([(1, "/x", "soon")], "user long, page string, at string")
    with pytest.raises(Exception, match="SerializationError.*field 'at'"):
        bootstrap_state(bad, "user", CLICKS, None, out, num_partitions=1)
    with pytest.raises(UnknownStateError, match="no committed version"):
        read_state(spark, out, "clicks")


# ---- the default serializer: inferred types --------------------------------------------------

def commit_untyped(ck, tmp_path):
    descs = [ValueStateDescriptor("session"), ListStateDescriptor("series"),
             MapStateDescriptor("tags", user_key_type=str), ValueStateDescriptor("mixed"),
             ValueStateDescriptor("big"), ValueStateDescriptor("windowed", namespace_type=object)]
    with StateStoreProvider(ck, "op", 0, 1, key_type=str, descriptors=descs,
                            local_dir=str(tmp_path / "local")) as provider:
        store = provider.get_store(0)
        session, series, tags, mixed, big, windowed = (store.get_state(d) for d in descs)
        for i, u in enumerate(["a", "b"]):
            store.backend.set_current_key(u)
            session.update((1800000075294, 1800000079944, 7 + i))
            series.add_all([[1, 2.5], []])
            tags.put("x", {"n": i, "m": 2})
            mixed.update(1 if u == "a" else "one")
            big.update(2 ** 70 + i)
            windowed.set_current_namespace((1000, 2000))
            windowed.update([u])
        store.commit()


def test_containers_of_the_default_serializer_read_as_inferred_spark_types(spark, tmp_path):
    ck = str(tmp_path / "ck")
    commit_untyped(ck, tmp_path)

    def read(name, **kw):
        df = read_state(spark, ck, name, operator_id="op", **kw)
        return df, {r.key: r for r in df.collect()}

    df, rows = read("session")  # a tuple is a struct, never the text "[1800000075294, ...]"
    assert df.schema["value"].dataType.simpleString() == "struct<_1:bigint,_2:bigint,_3:bigint>"
    assert tuple(rows["b"].value) == (1800000075294, 1800000079944, 8)
    df, rows = read("session", value_type="start long, end long, n int")  # or name its fields
    assert rows["a"].value.asDict() == {"start": 1800000075294, "end": 1800000079944, "n": 7}
    df, rows = read("series")  # an int where doubles are seen widens to double
    assert df.schema["value"].dataType.simpleString() == "array<array<double>>"
    assert rows["a"].value == [[1.0, 2.5], []]
    df, rows = read("tags")  # a dict whose values agree is a map
    assert df.schema["value"].dataType.simpleString() == "map<string,bigint>"
    assert rows["b"].value == {"n": 1, "m": 2} and rows["b"].user_key == "x"
    df, rows = read("big")
    assert df.schema["value"].dataType.simpleString() == "decimal(38,0)"
    assert rows["b"].value == Decimal(2 ** 70 + 1)
    df, rows = read("windowed")
    assert df.schema["namespace"].dataType.simpleString() == "struct<_1:bigint,_2:bigint>"
    assert tuple(rows["a"].namespace) == (1000, 2000) and rows["a"].value == ["a"]
    with pytest.raises(MixedTypesError, match='(bigint and string|string and bigint).*value_type=.*value_type="json"'):
        read_state(spark, ck, "mixed", operator_id="op")
    df, rows = read("mixed", value_type="json")
    assert df.schema["value"].dataType.simpleString() == "string"
    assert (rows["a"].value, rows["b"].value) == ("1", '"one"')
    with pytest.raises(Exception, match="MixedTypesError.*is not of type bigint.*value_type="):
        read_state(spark, ck, "mixed", operator_id="op", value_type="bigint").collect()
    with pytest.raises(ValueError, match="value state, which has no user keys"):
        read_state(spark, ck, "session", operator_id="op", user_key_type="string")
