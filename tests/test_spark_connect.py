"""Every Spark-facing call of stateengine.spark works through Spark Connect, the client of shared
and serverless clusters: no SparkContext, RDD or JVM handle on the client side.

The Connect session talks to a real Connect server the tests start (a separate JVM on
127.0.0.1, tests/spark_connect.py); the classic session runs the same calls on the same data,
and the results must be equal. The test code itself writes no ``Column`` objects (SQL text
only), as the classic and Connect sessions share this process.
"""

import os

import numpy as np
import pandas as pd
import pytest

from stateengine import (KeyGroupRange, ListStateDescriptor, MapStateDescriptor,
                         ReducingStateDescriptor, StateStoreProvider, ValueStateDescriptor,
                         assign_key_group, operator_for_key_group, reducers)
from stateengine.spark import (apply_with_state, bootstrap_state, map_with_state,
                               mark_batch_committed, read_state, route, with_routing_columns)
from stateengine.spark.routing import KG_COL, PID_COL

pytestmark = [pytest.mark.spark, pytest.mark.connect]

COUNT = ValueStateDescriptor("count", value_type=int, default=0)
TOTAL = ReducingStateDescriptor("total", reducers.SUM, value_type=int)
KINDS = MapStateDescriptor("by_kind", user_key_type=str, value_type=int)
OPEN = ValueStateDescriptor("open_since", value_type=int)
OUT = "user string, what string, count long, total long, at long, partitions int"


def batches(seed=5, n=4, rows=300, users=40):
    rng = np.random.default_rng(seed)
    return [pd.DataFrame({"user": [f"u{u}" for u in rng.integers(0, users, rows)],
                          "amount": rng.integers(1, 100, rows).astype("int64"),
                          "kind": rng.choice(["a", "b", "c"], rows),
                          "t": np.sort(rng.integers(b * 1000, (b + 1) * 1000, rows))})
            for b in range(n)]


def per_user(user, rows, ctx):
    count, total, kinds, opened = (ctx.state(n) for n in ("count", "total", "by_kind",
                                                           "open_since"))
    count.update(count.value() + len(rows))
    total.add(int(rows["amount"].sum()))
    for kind, amount in zip(rows["kind"], rows["amount"]):
        kinds.put(kind, int(amount))
    if opened.value() is None:
        opened.update(int(rows["t"].min()))
        ctx.timers.register_event_time_timer(int(rows["t"].min()) + 1500)
    return [(user, "update", count.value(), total.get(), int(rows["t"].max()),
             ctx.num_partitions)]


def on_timer(user, timer, ctx):
    ctx.state("open_since").clear()
    return [(user, "timer", ctx.state("count").value(), ctx.state("total").get(),
             timer.timestamp, ctx.num_partitions)]


def run_apply(session, data, ck, partitions):
    results = []
    for b, (pdf, n) in enumerate(zip(data, partitions)):
        out = apply_with_state(session.createDataFrame(pdf), "user", per_user, OUT,
                               [COUNT, TOTAL, KINDS, OPEN], ck, b, num_partitions=n,
                               operator_id="agg", on_timer=on_timer,
                               watermark=int(pdf["t"].max()) - 200)
        results.append(sorted(tuple(r) for r in out.collect()))
        mark_batch_committed(ck, b, n or 4, "agg")
    return results


def state_rows(session, ck, name, operator_id="agg"):
    return sorted(tuple(r) for r in read_state(session, ck, name, operator_id=operator_id)
                  .collect())


def listening_addresses(port):
    """IPv4 addresses listening on TCP port, from /proc/net/tcp and tcp6 (IPv4-mapped IPv6
    addresses, as a JVM binds them, are given as IPv4; other IPv6 ones as "v6:<hex>")."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        if not os.path.exists(table):
            continue
        with open(table) as f:
            next(f)
            for line in f:
                local, state = line.split()[1], line.split()[3]
                addr, p = local.split(":")
                if int(p, 16) != port or state != "0A":  # 0A: LISTEN
                    continue
                if len(addr) == 32 and addr[:24] == "0000000000000000FFFF0000":
                    addr = addr[24:]  # ::ffff:a.b.c.d
                if len(addr) == 8:  # little-endian IPv4
                    found.append(".".join(str(int(addr[i:i + 2], 16)) for i in (6, 4, 2, 0)))
                else:
                    found.append(f"v6:{addr}")
    return found


def test_the_session_is_a_connect_client_of_a_loopback_server(connect, connect_server):
    assert type(connect).__module__.startswith("pyspark.sql.connect")
    with pytest.raises(Exception):
        connect.sparkContext  # Connect sessions have none; nothing below may need one
    assert connect_server.proc.pid != os.getpid()  # a server process of its own
    assert listening_addresses(connect_server.port) == ["127.0.0.1"]  # no wildcard address


@pytest.mark.parametrize("method", ["auto", "hash"])
def test_route_through_connect_places_every_key_group_on_its_partition(connect, method):
    df = connect.range(3000).selectExpr("id * 7919 % 100003 AS k")
    with_cols = with_routing_columns(df, "k", 5, 128)
    assert {KG_COL, PID_COL} <= set(with_cols.columns)
    rows = (route(df, "k", 5, 128, method=method)
            .selectExpr("k", KG_COL, "spark_partition_id() AS part").collect())
    assert len(rows) == 3000
    for r in rows:
        assert r[KG_COL] == assign_key_group(r.k, 128)
        assert r.part == operator_for_key_group(r[KG_COL], 5, 128)
        assert KeyGroupRange.for_operator(r.part, 5, 128).contains(r[KG_COL])


def test_apply_with_state_through_connect_equals_classic(spark, connect, tmp_path):
    """Three batches with timers, rescaled 3 -> default (spark.sql.shuffle.partitions, read
    through each session's conf: 4) -> 1; outputs and every state must agree."""
    data = batches(n=3)
    partitions = [3, None, 1]
    classic = run_apply(spark, data, str(tmp_path / "classic"), partitions)
    remote = run_apply(connect, data, str(tmp_path / "connect"), partitions)
    assert remote == classic
    assert {r[-1] for r in classic[1]} == {4}  # the default partition count
    assert any(r[1] == "timer" for b in classic for r in b)
    want = pd.concat(data).groupby("user")["amount"].agg(["count", "sum"])
    last = {}
    for b in classic:
        last.update({r[0]: (r[2], r[3]) for r in b if r[1] == "update"})
    assert last == {u: (want.loc[u, "count"], want.loc[u, "sum"]) for u in want.index}
    for name in ("count", "total", "by_kind", "open_since"):
        theirs = state_rows(spark, str(tmp_path / "classic"), name)
        assert state_rows(connect, str(tmp_path / "connect"), name) == theirs, name
    # and Connect reads what classic wrote
    assert state_rows(connect, str(tmp_path / "classic"), "by_kind") == \
        state_rows(spark, str(tmp_path / "classic"), "by_kind")


def test_map_with_state_through_connect_equals_classic(spark, connect, tmp_path):
    def per_partition(rows, ctx):
        users = rows["user"].to_numpy()
        count, total = ctx.state("count"), ctx.state("total")
        distinct, n = np.unique(users, return_counts=True)
        before, _ = count.get_many(distinct)
        count.put_many(distinct, before + n)
        total.add_many(users, rows["amount"].to_numpy())
        sums, _ = total.get_many(distinct)
        return pd.DataFrame({"user": distinct, "count": before + n, "total": sums,
                             "part": ctx.partition_id})

    data = batches(seed=9, n=3)
    results = {}
    for name, session in (("classic", spark), ("connect", connect)):
        ck = str(tmp_path / name)
        results[name] = [
            sorted(tuple(r) for r in map_with_state(
                session.createDataFrame(pdf), "user", per_partition,
                "user string, count long, total long, part int", [COUNT, TOTAL], ck, b,
                num_partitions=3).collect())
            for b, pdf in enumerate(data)]
    assert results["connect"] == results["classic"]
    want = pd.concat(data).groupby("user")["amount"].agg(["count", "sum"])
    final = {r[0]: (r[1], r[2]) for r in results["connect"][-1]}
    for u, got in final.items():
        assert got == (want.loc[u, "count"], want.loc[u, "sum"])


def test_bootstrap_then_read_state_through_connect_equals_classic(spark, connect, tmp_path):
    seed = pd.DataFrame({"user": np.arange(60, dtype="int64"),
                         "day": np.arange(60, dtype="int64") % 7,
                         "total": np.arange(60, dtype="float64") * 1.5})
    totals = ValueStateDescriptor("total", value_type=float)
    days = ListStateDescriptor("days", value_type=int)
    got = {}
    for name, session in (("classic", spark), ("connect", connect)):
        ck = str(tmp_path / name)
        df = session.createDataFrame(seed)
        v = bootstrap_state(df, "user", totals, "total", ck, operator_id="op", num_partitions=3)
        v = bootstrap_state(df, "user", days, "day", ck, operator_id="op", version=v)  # default N
        assert v == 2
        got[name] = (state_rows(session, ck, "total", "op"), state_rows(session, ck, "days", "op"))
    assert got["connect"] == got["classic"]
    assert got["connect"][0] == [(u, None, u * 1.5) for u in range(60)]
    assert got["connect"][1] == [(u, None, [u % 7]) for u in range(60)]


def test_typed_and_inferred_state_as_dataframes_through_connect_equals_classic(spark, connect,
                                                                              tmp_path):
    visits = ValueStateDescriptor("visits", value_type="n long, last string, at timestamp, "
                                                       "tags array<string>")
    untyped = str(tmp_path / "untyped")  # the default serializer's tuples, written natively
    pair_state = ValueStateDescriptor("pair")
    with StateStoreProvider(untyped, "op", 0, 1, key_type=int, descriptors=[pair_state],
                            local_dir=str(tmp_path / "local")) as provider:
        store = provider.get_store(0)
        pair = store.get_state(pair_state)
        for u in range(20):
            store.backend.set_current_key(u)
            pair.update((1800000075294 + u, f"p{u}"))
        store.commit()
    got = {}
    for name, session in (("classic", spark), ("connect", connect)):
        ck = str(tmp_path / name)
        df = session.sql("SELECT id AS user, id * 3 AS n, concat('p', id) AS last, "
                         "timestamp_seconds(id) AS at, array(concat('t', id)) AS tags FROM range(30)")
        assert bootstrap_state(df, "user", visits, None, ck, operator_id="op", num_partitions=3) == 1
        struct = read_state(session, ck, "visits", operator_id="op")
        flat = read_state(session, ck, "visits", operator_id="op", flatten=True)
        pairs = read_state(session, untyped, "pair", operator_id="op")
        got[name] = (
            struct.schema.simpleString(), flat.columns, pairs.schema.simpleString(),
            sorted(tuple(r) for r in struct.selectExpr(
                "key", "value.n", "value.last", "CAST(value.at AS STRING)", "value.tags").collect()),
            sorted(tuple(r) for r in flat.selectExpr("key", "n", "last").collect()),
            sorted((r.key, tuple(r.value)) for r in pairs.collect()))
    assert got["connect"] == got["classic"]
    schema, flat_columns, pair_schema, rows, flat_rows, pairs = got["connect"]
    assert schema == ("struct<key:bigint,namespace:string,"
                      "value:struct<n:bigint,last:string,at:timestamp,tags:array<string>>>")
    assert flat_columns == ["key", "namespace", "n", "last", "at", "tags"]
    assert rows[2] == (2, 6, "p2", "1970-01-01 00:00:02", ["t2"])
    assert flat_rows == [(u, 3 * u, f"p{u}") for u in range(30)]
    assert pair_schema == "struct<key:bigint,namespace:string,value:struct<_1:bigint,_2:string>>"
    assert pairs == [(u, (1800000075294 + u, f"p{u}")) for u in range(20)]


def test_user_function_errors_reach_the_connect_client_and_commit_nothing(connect, tmp_path):
    ck = str(tmp_path / "ck")
    pdf = pd.DataFrame({"user": ["a", "b"], "amount": [1, 2], "kind": ["a", "a"],
                        "t": [0, 1]})

    def broken(user, rows, ctx):
        ctx.state("count").update(99)
        raise ValueError("user code broke over Connect")

    with pytest.raises(Exception, match="user code broke over Connect"):
        apply_with_state(connect.createDataFrame(pdf), "user", broken, OUT, [COUNT], ck, 0,
                         num_partitions=2).collect()
    with pytest.raises(Exception, match="no committed version"):
        read_state(connect, ck, "count")


def test_streaming_foreach_batch_through_connect(connect, tmp_path):
    """The main job's query path over Connect: a file stream whose foreachBatch (run by the
    server in its own Python process) calls apply_with_state; per-key results must equal
    pandas over all input."""
    source, base = tmp_path / "in", str(tmp_path / "job")
    source.mkdir()
    frames = batches(seed=3, n=4, rows=200, users=25)
    for i, pdf in enumerate(frames):
        pdf[["user", "amount"]].to_parquet(source / f"part-{i}.parquet", index=False)

    def each_batch(batch_df, batch_id):
        from stateengine import ReducingStateDescriptor, reducers
        from stateengine.spark import apply_with_state, mark_batch_committed

        def add(user, rows, ctx):
            total = ctx.state("total")
            total.add(int(rows["amount"].sum()))
            return [(user, total.get())]

        state = os.path.join(base, "state")
        out = apply_with_state(batch_df, "user", add, "user string, total long",
                               [ReducingStateDescriptor("total", reducers.SUM, value_type=int)],
                               state, batch_id, num_partitions=2)
        out.write.mode("overwrite").parquet(os.path.join(base, "out", f"batch={batch_id}"))
        mark_batch_committed(state, batch_id, 2)

    query = (connect.readStream.schema("user string, amount bigint")
             .option("maxFilesPerTrigger", 1).parquet(str(source))
             .writeStream.foreachBatch(each_batch)
             .option("checkpointLocation", os.path.join(base, "stream"))
             .trigger(availableNow=True).start())
    query.awaitTermination()
    outputs = connect.read.parquet(os.path.join(base, "out")).toPandas()
    assert sorted(outputs["batch"].unique()) == [0, 1, 2, 3]
    latest = outputs.sort_values("batch").groupby("user")["total"].last().to_dict()
    assert latest == pd.concat(frames).groupby("user")["amount"].sum().to_dict()
    state = state_rows(connect, os.path.join(base, "state"), "total", "default")
    assert {user: value for user, _, value in state} == latest


def test_stateful_step_inside_a_streaming_query_through_connect(connect, tmp_path):
    """apply_with_state on a Connect streaming DataFrame: the server runs the stateful step
    as part of the query; its tasks take the batch id from Spark and the watermark from the
    query's offset log, and timers fire by it."""
    import json

    source, base = tmp_path / "in", str(tmp_path / "job")
    source.mkdir()
    frames = batches(seed=7, n=3, rows=60, users=10)
    for i, pdf in enumerate(frames):
        pdf[["user", "amount", "t"]].to_parquet(source / f"part-{i}.parquet", index=False)
    query_ck, state = os.path.join(base, "query"), os.path.join(base, "state")

    def add(user, rows, ctx):
        count = ctx.state("count")
        count.update(count.value() + len(rows))
        ctx.timers.register_event_time_timer(int(rows["t"].max()) + 500)
        return [(user, "update", count.value(), ctx.batch_id, ctx.watermark)]

    def fire(user, timer, ctx):
        return [(user, "timer", timer.timestamp, ctx.batch_id, ctx.watermark)]

    events = (connect.readStream.schema("user string, amount bigint, t bigint")
              .option("maxFilesPerTrigger", 1).parquet(str(source))
              .selectExpr("*", "timestamp_millis(t) AS ts").withWatermark("ts", "0 seconds"))
    out = apply_with_state(events, "user", add, "user string, kind string, n long, batch long, "
                           "watermark long", [COUNT], state, num_partitions=2, on_timer=fire,
                           query_checkpoint=query_ck)
    query = (out.writeStream.format("parquet").option("path", os.path.join(base, "out"))
             .option("checkpointLocation", query_ck).trigger(availableNow=True).start())
    query.awaitTermination()
    rows = connect.read.parquet(os.path.join(base, "out")).toPandas()
    # batch 3: the batch without data that the step asks for once the watermark moved
    # (docs/spark/quiet-streams.md); the timers due by then fire in it
    assert sorted(rows["batch"].unique()) == [0, 1, 2, 3]
    assert (rows[rows.batch == 3].kind == "timer").all()
    for b, part in rows.groupby("batch"):
        with open(os.path.join(query_ck, "offsets", str(b))) as f:
            watermark = json.loads(f.read().split("\n")[1])["batchWatermarkMs"]
        assert (part["watermark"] == watermark).all()
    updates = rows[rows.kind == "update"].sort_values("batch").groupby("user")["n"].last()
    assert updates.to_dict() == pd.concat(frames).groupby("user").size().to_dict()
    timers = rows[rows.kind == "timer"]
    assert len(timers) and (timers["n"] <= timers["watermark"]).all()
