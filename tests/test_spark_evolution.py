"""Schema evolution through the Spark entry points: apply_with_state's states, a
StatefulProcessor's getValueState / getListState / getMapState (compared with Spark's own
transformWithStateInPandas under encodingFormat=avro), bootstrap_state and read_state, on a
classic and a Spark Connect session; refused changes fail on the driver before any task and
leave the checkpoint as it was."""

from __future__ import annotations

import hashlib
import json
import os

import pandas as pd
import pytest

from stateengine import ListStateDescriptor, MapStateDescriptor, ValueStateDescriptor
from stateengine.errors import SchemaEvolutionError
from stateengine.spark import apply_with_state, bootstrap_state, map_with_state, read_state

pytestmark = pytest.mark.spark

V1 = [ValueStateDescriptor("session", "clicks int, last_page string"),
      ListStateDescriptor("pages", "page string, at int"),
      MapStateDescriptor("by_page", "string", "n int")]
V2 = [ValueStateDescriptor("session", "visits int NOT NULL, clicks bigint, page string",
                           renamed_from={"page": "last_page"}, field_defaults={"visits": 1}),
      ListStateDescriptor("pages", "page string, at bigint, referrer string"),
      MapStateDescriptor("by_page", "string", "n double, first_seen string")]


def _digest(root: str) -> dict[str, str]:
    out = {}
    for d, _, files in os.walk(root):
        for f in files:
            with open(os.path.join(d, f), "rb") as fh:
                out[os.path.relpath(os.path.join(d, f), root)] = hashlib.sha256(
                    fh.read()).hexdigest()
    return out


def _v1(user, rows, ctx):
    s, pages, by_page = ctx.state("session"), ctx.state("pages"), ctx.state("by_page")
    for page, at in zip(rows["page"], rows["at"]):
        clicks, _ = s.value() or (0, None)
        s.update((clicks + 1, page))
        pages.add((page, int(at)))
        by_page.put(page, ((by_page.get(page) or (0,))[0] + 1,))
    return None


def _v2(user, rows, ctx):
    s, pages, by_page = ctx.state("session"), ctx.state("pages"), ctx.state("by_page")
    old = s.value()
    before = json.dumps([old, pages.get(), sorted(by_page.items())], default=str)
    visits, clicks, _ = old or (0, 0, None)
    for page, at in zip(rows["page"], rows["at"]):
        clicks += 1
        s.update((visits + 1, clicks, page))
        pages.add((page, int(at), "ad"))
        by_page.put(page, (2.5, "now"))
    return [(int(user), before)]


def _run(session, ck, rows, descriptors, fn, batch_id):
    df = session.createDataFrame(pd.DataFrame(rows, columns=["user", "page", "at"]))
    return apply_with_state(df, "user", fn, "user bigint, before string", descriptors, ck,
                            batch_id, num_partitions=2, operator_id="op")


# what batch 1 (_v2) read of batch 0's (_v1) entries, in the new schemas: user 1 wrote in
# batch 0, user 3 is new (the local harnesses give the same: test_spark_harness.py)
APPLY_BEFORE = {
    1: [[1, 2, "cart"], [["home", 10, None], ["cart", 11, None]],
        [["cart", [1.0, None]], ["home", [1.0, None]]]],
    3: [None, [], []]}
BATCH_0 = [(1, "home", 10), (1, "cart", 11), (2, "home", 12)]
BATCH_1 = [(1, "pay", 20), (3, "home", 21)]


def _evolve_with_apply(session, ck):
    _run(session, ck, BATCH_0, V1, _v1, 0).collect()
    out = _run(session, ck, BATCH_1, V2, _v2, 1).collect()
    return {r.user: json.loads(r.before) for r in out}


def test_apply_with_state_states_evolve_between_batches(spark, tmp_path):
    ck = str(tmp_path / "ck")
    before = _evolve_with_apply(spark, ck)
    assert before == APPLY_BEFORE  # batch 1 read batch 0's entries in the new schemas
    # read_state: the current schema, entries of both versions
    rows = {r.key: r.value for r in read_state(spark, ck, "session", operator_id="op").collect()}
    assert {k: tuple(v) for k, v in rows.items()} == {
        1: (2, 3, "pay"), 2: (1, 1, "home"), 3: (1, 1, "home")}
    pages = {r.key: [tuple(e) for e in r.value]
             for r in read_state(spark, ck, "pages", operator_id="op").collect()}
    assert pages[1] == [("home", 10, None), ("cart", 11, None), ("pay", 20, "ad")]
    # map_with_state's batch calls read entries of both versions (user 2's is of version 0)
    def batch_read(rows, ctx):
        keys = sorted(set(rows["user"].tolist()))
        values, _ = ctx.state("session").get_many(keys)
        return pd.DataFrame({"user": keys, "before": [json.dumps(v) for v in values.to_pylist()]})

    users = spark.createDataFrame(pd.DataFrame({"user": [1, 2]}))
    got = map_with_state(users, "user", batch_read, "user bigint, before string", V2, ck, 2,
                         num_partitions=2, operator_id="op").collect()
    assert {r.user: json.loads(r.before) for r in got} == {
        1: {"visits": 2, "clicks": 3, "page": "pay"}, 2: {"visits": 1, "clicks": 1, "page": "home"}}
    flat = read_state(spark, ck, "by_page", operator_id="op", flatten=True)
    assert flat.columns == ["key", "namespace", "user_key", "n", "first_seen"]
    assert sorted(tuple(r) for r in flat.drop("namespace").collect()) == [
        (1, "cart", 1.0, None), (1, "home", 1.0, None), (1, "pay", 2.5, "now"),
        (2, "home", 1.0, None), (3, "home", 2.5, "now")]


def test_refused_changes_fail_on_the_driver_and_leave_the_checkpoint(spark, tmp_path):
    ck = str(tmp_path / "ck")
    _run(spark, ck, [(1, "home", 10)], V1, _v1, 0).collect()
    before = _digest(ck)
    narrowed = [ValueStateDescriptor("session", "clicks smallint, last_page string"),
                ListStateDescriptor("pages", "page string, at int NOT NULL"),
                MapStateDescriptor("by_page", "bigint", "n int")]
    df = spark.createDataFrame(pd.DataFrame({"user": [1], "page": ["x"], "at": [1]}))
    with pytest.raises(SchemaEvolutionError) as e:
        apply_with_state(df.selectExpr("cast(user as int) user", "page", "at"), "user", _v2,
                         "user bigint, before string", narrowed, ck, 1, num_partitions=2,
                         operator_id="op")
    lines = [w for w, *_ in e.value.problems]
    assert lines == ["key", "session value.clicks", "pages value.at", "by_page user_key"]
    assert "key: bigint -> int (the grouping key's types never change" in str(e.value)
    assert _digest(ck) == before
    with pytest.raises(SchemaEvolutionError):
        bootstrap_state(df, "user", narrowed[0], "page", ck, operator_id="op", version=1)
    assert _digest(ck) == before


def test_bootstrap_state_writes_an_evolved_schema(spark, tmp_path):
    ck = str(tmp_path / "ck")
    df = spark.createDataFrame(pd.DataFrame({"user": [1, 2], "a": [1, 2], "b": ["x", "y"]}))
    v = bootstrap_state(df, "user", ValueStateDescriptor("s", "a int, b string"), None, ck,
                        operator_id="op")
    new = spark.createDataFrame(pd.DataFrame({"user": [2, 3], "a": [20, 30], "c": [0.5, 1.5]}))
    v = bootstrap_state(new, "user", ValueStateDescriptor("s", "a bigint, c double"), None, ck,
                        operator_id="op", version=v)
    assert v == 2
    rows = sorted(tuple(r) for r in read_state(spark, ck, "s", operator_id="op",
                                               flatten=True).drop("namespace").collect())
    assert rows == [(1, 1, None), (2, 20, 0.5), (3, 30, 1.5)]


def test_evolution_on_spark_connect(connect, tmp_path):
    ck = str(tmp_path / "ck")
    before = _evolve_with_apply(connect, ck)
    assert before[1][0] == [1, 2, "cart"]
    rows = {r.key: tuple(r.value) for r in
            read_state(connect, ck, "session", operator_id="op").collect()}
    assert rows[2] == (1, 1, "home")


# ---- a StatefulProcessor, against Spark's own operator with Avro state encoding -------------

# the processor's three versions: reorder, widen, add; then a rename and a default
# (stateengine's handle only: Spark's has no such keywords)
PROBES = [(("a int, b string", (1, "x")), {}),
          (("b string, a bigint, c double", ("y", 2, 0.5)), {}),
          (("bb string, a bigint, c double, d int NOT NULL", ("z", 3, 1.0, 4)),
           {"renamed_from": {"bb": "b"}, "field_defaults": {"d": 7}})]
# what versions 2 and 3 read of the entries before them
PROBES_OLD = [[["x", 1, None], [["x", 1, None]], [[["u"], ["x", 1, None]]]],
              [["y", 2, 0.5, 7], [["x", 1, None, 7], ["y", 2, 0.5, 7]],
               [[["u"], ["y", 2, 0.5, 7]]]]]


def _processor(schema, value, **evolve):
    from pyspark.sql.streaming import StatefulProcessor

    class Probe(StatefulProcessor):
        def init(self, handle):
            self.s = handle.getValueState("s", schema, **evolve)
            self.l = handle.getListState("l", schema, **evolve)
            self.m = handle.getMapState("m", "k string", schema, **evolve)

        def handleInputRows(self, key, rows, timerValues):
            for _ in rows:
                pass
            old = [list(self.s.get()) if self.s.exists() else None,
                   [list(x) for x in self.l.get()] if self.l.exists() else [],
                   [[list(k), list(v)] for k, v in self.m.iterator()] if self.m.exists() else []]
            self.s.update(value)
            self.l.appendValue(value)
            self.m.updateValue(("u",), value)
            yield pd.DataFrame({"id": [key[0]], "old": [json.dumps(old)]})

        def close(self):
            pass

    return Probe()


def test_a_processor_evolves_as_spark_with_avro_encoding_does(spark, tmp_path):
    pytest.importorskip("pyspark.sql.streaming.stateful_processor",
                        reason="StatefulProcessor needs pyspark >= 4.0")
    from tests.tws_compare import ROCKSDB_PROVIDER, sort_rows

    from stateengine.spark import transform_with_state_in_pandas

    (v1, _), (v2, _), (v3, evolve) = PROBES
    src, ck = str(tmp_path / "in"), str(tmp_path / "spark-ck")
    os.makedirs(src)
    confs = {"spark.sql.streaming.stateStore.providerClass": ROCKSDB_PROVIDER,
             "spark.sql.streaming.stateStore.encodingFormat": "avro"}
    saved = {k: spark.conf.get(k, None) for k in confs}
    spark_out = []
    try:
        for k, v in confs.items():
            spark.conf.set(k, v)
        for i, (schema, value) in enumerate((v1, v2)):
            pd.DataFrame({"id": ["a"]}).to_json(os.path.join(src, f"{i}.json"), orient="records",
                                               lines=True)
            q = (spark.readStream.schema("id string").json(src).groupBy("id")
                 .transformWithStateInPandas(_processor(schema, value), "id string, old string",
                                             "Update", "None")
                 .writeStream.foreachBatch(lambda b, _: spark_out.append(sort_rows(b.collect())))
                 .trigger(availableNow=True).option("checkpointLocation", ck).start())
            q.awaitTermination(240)
            assert q.exception() is None, q.exception()
    finally:
        for k, v in saved.items():
            spark.conf.unset(k) if v is None else spark.conf.set(k, v)
    ours = []
    for i, (schema, value) in enumerate((v1, v2)):
        df = spark.createDataFrame([("a",)], "id string")
        ours.append(sort_rows(transform_with_state_in_pandas(
            df, _processor(schema, value), "id", "id string, old string",
            str(tmp_path / "se"), batch_id=i).collect()))
    assert ours == spark_out
    assert json.loads(ours[1][0][1]) == PROBES_OLD[0]
    # stateengine's handle also takes renames and defaults (Spark's has no such keywords)
    [(_, old)] = transform_with_state_in_pandas(
        spark.createDataFrame([("a",)], "id string"), _processor(*v3, **evolve), "id",
        "id string, old string", str(tmp_path / "se"), batch_id=2).collect()
    assert json.loads(old) == PROBES_OLD[1]
