"""Stateful pandas functions in Spark tasks: batches, failures, replays and rescaling."""

import datetime
import os

import numpy as np
import pandas as pd
import pytest
from pyspark import TaskContext

from stateengine import (ListStateDescriptor, MapStateDescriptor, ReducingStateDescriptor,
                         ValueStateDescriptor, reducers)
from stateengine.spark import apply_with_state, read_state

pytestmark = pytest.mark.spark

COUNT = ValueStateDescriptor("count", value_type=int, default=0)
TOTAL = ReducingStateDescriptor("total", reducers.SUM, value_type=int)
LAST = MapStateDescriptor("last_by_kind", user_key_type=str, value_type=int)
OUT = "user string, count long, total long"


def make_batches(seed, n_batches, rows, users):
    rng = np.random.default_rng(seed)
    return [pd.DataFrame({
        "user": [f"u{u}" for u in rng.integers(0, users, rows)],
        "amount": rng.integers(1, 100, rows).astype("int64"),
        "kind": rng.choice(["a", "b", "c"], rows),
    }) for _ in range(n_batches)]


def count_and_total(fail_batches=()):
    def fn(user, rows, ctx):
        tc = TaskContext.get()
        if ctx.batch_id in fail_batches and tc.attemptNumber() == 0 and tc.partitionId() == 1:
            raise RuntimeError("injected failure before commit")
        count, total, last = ctx.state("count"), ctx.state("total"), ctx.state("last_by_kind")
        count.update(count.value() + len(rows))
        for a in rows["amount"].tolist():
            total.add(a)
        for kind, amount in zip(rows["kind"], rows["amount"]):
            last.put(kind, int(amount))
        return [(user, count.value(), total.get())]
    return fn


def fail_after_everything_on_first_attempt(batches):
    """A downstream step that consumes the whole partition (so the state is already committed)
    and then fails its first attempt: the re-executed task must not count twice."""
    rows = [b for b in batches]
    if TaskContext.get().attemptNumber() == 0:
        raise RuntimeError("injected failure after commit")
    yield from rows


def expected(batches):
    df = pd.concat(batches)
    return df.groupby("user")["amount"].agg(["count", "sum"])


def run_batch(spark, pdf, ck, batch_id, n, fn, post_commit_failure=False):
    df = spark.createDataFrame(pdf)
    out = apply_with_state(df, "user", fn, OUT, [COUNT, TOTAL, LAST], ck, batch_id,
                           num_partitions=n, operator_id="agg")
    if post_commit_failure:
        out = out.mapInPandas(fail_after_everything_on_first_attempt, out.schema)
    return {r.user: (r["count"], r.total) for r in out.collect()}


def test_many_batches_with_task_failures_and_a_replayed_batch(spark, tmp_path):
    ck = str(tmp_path / "ck")
    batches = make_batches(1, 8, 600, 90)
    fn = count_and_total(fail_batches={2, 5})
    latest = {}
    for b, pdf in enumerate(batches):
        result = run_batch(spark, pdf, ck, b, 3, fn, post_commit_failure=(b == 3))
        if b == 4:  # foreachBatch replays a batch id after a driver failure
            again = run_batch(spark, pdf, ck, b, 3, fn)
            assert again == result
        latest.update(result)
    want = expected(batches)
    assert set(latest) == set(want.index)
    for user, (count, total) in latest.items():
        assert (count, total) == (want.loc[user, "count"], want.loc[user, "sum"]), user
    # the committed state agrees with the outputs
    state = {r.key: int(r.value) for r in read_state(spark, ck, "count", operator_id="agg").collect()}
    assert state == {u: int(c) for u, c in want["count"].items()}


def test_rescaling_two_then_three_then_one_keeps_every_key(spark, tmp_path):
    ck = str(tmp_path / "ck")
    batches = make_batches(2, 3, 500, 120)
    fn = count_and_total()
    latest = {}
    for b, n in enumerate([2, 3, 1]):
        latest.update(run_batch(spark, batches[b], ck, b, n, fn))
    want = expected(batches)
    for user in want.index:
        assert latest[user] == (want.loc[user, "count"], want.loc[user, "sum"])
    maps = read_state(spark, ck, "last_by_kind", operator_id="agg").collect()
    assert {r.key for r in maps} == set(want.index)


def test_timers_close_sessions_when_the_watermark_passes(spark, tmp_path):
    ck = str(tmp_path / "ck")
    start = ValueStateDescriptor("start", value_type=int)
    timer_at = ValueStateDescriptor("timer_at", value_type=int)

    def fn(user, rows, ctx):
        if ctx.state("start").value() is None:
            ctx.state("start").update(int(rows["t"].min()))
        previous = ctx.state("timer_at").value()
        if previous is not None:  # a new event moves the session's end
            ctx.timers.delete_event_time_timer(previous)
        due = int(rows["t"].max()) + 100
        ctx.timers.register_event_time_timer(due)
        ctx.state("timer_at").update(due)
        return None

    def on_timer(user, timer, ctx):
        s = ctx.state("start").value()
        ctx.state("start").clear()
        ctx.state("timer_at").clear()
        return [(user, s, timer.timestamp)]

    schema = "user bigint, start bigint, fired bigint"
    events = [pd.DataFrame({"user": [1, 2, 1], "t": [0, 10, 50]}),
              pd.DataFrame({"user": [2, 3], "t": [120, 130]}),
              pd.DataFrame({"user": [3], "t": [400]})]
    watermarks = [40, 160, 1000]
    fired = []
    for b, (pdf, wm) in enumerate(zip(events, watermarks)):
        out = apply_with_state(spark.createDataFrame(pdf), "user", fn, schema, [start, timer_at],
                               ck, b, num_partitions=2, on_timer=on_timer, watermark=wm)
        fired.append(sorted((r.user, r.start, r.fired) for r in out.collect()))
    assert fired == [[], [(1, 0, 150)], [(2, 10, 220), (3, 130, 500)]]


def test_an_empty_batch_commits_every_partition_and_fires_the_timers_due(spark, tmp_path):
    """An empty DataFrame (Spark would plan no task for it) still commits version
    batch_id + 1 of every partition and fires what the new watermark made due. Times may be
    datetimes and pandas Timestamps (naive ones in the session time zone, UTC here)."""
    ck = str(tmp_path / "ck")
    seen = ValueStateDescriptor("seen", value_type=int, default=0)

    def fn(user, rows, ctx):
        # the routing's marker rows must not turn int columns into floats
        assert rows["user"].dtype == np.int64 and rows["t"].dtype == np.int64, rows.dtypes
        ctx.state("seen").update(ctx.state("seen").value() + len(rows))
        ctx.timers.register_event_time_timer(int(rows["t"].max()) + 100)
        return [(user, "event", int(rows["t"].max()))]

    def on_timer(user, timer, ctx):
        return [(user, "timer", timer.timestamp)]

    schema = "user bigint, kind string, at bigint"
    pdf = pd.DataFrame({"user": [1, 2, 3, 4, 5], "t": [10, 20, 30, 40, 1_000]})
    first = apply_with_state(spark.createDataFrame(pdf), "user", fn, schema, [seen], ck, 0,
                             num_partitions=3, on_timer=on_timer,
                             watermark=datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc))
    assert sorted(r.user for r in first.collect()) == [1, 2, 3, 4, 5]
    empty = spark.createDataFrame([], "user bigint, t bigint")
    fired = apply_with_state(empty, "user", fn, schema, [seen], ck, 1, num_partitions=3,
                             on_timer=on_timer, watermark=pd.Timestamp("1970-01-01 00:00:00.500"))
    assert sorted((r.user, r.at) for r in fired.collect()) == [(1, 110), (2, 120), (3, 130),
                                                               (4, 140)]
    manifests = set(os.listdir(os.path.join(ck, "default", "v2")))
    assert {f"p{p:05d}-of-00003.json" for p in range(3)} <= manifests
    later = apply_with_state(empty, "user", fn, schema, [seen], ck, 2, num_partitions=3,
                             on_timer=on_timer, watermark=np.datetime64("1970-01-01T00:00:02"))
    assert [(r.user, r.at) for r in later.collect()] == [(5, 1_100)]
    with pytest.raises(TypeError, match="watermark must be int milliseconds since the epoch, "
                                        "datetime, pandas.Timestamp or numpy.datetime64"):
        apply_with_state(empty, "user", fn, schema, [seen], ck, 3, num_partitions=3,
                         on_timer=on_timer, watermark="2024-01-01")  # refused on the driver


def test_a_new_operator_starts_at_any_batch_id(spark, tmp_path):
    """Adding stateengine to a query whose batch ids are past 0 starts from empty state (that
    a missing version is an error once state exists is tests/test_store.py's, without Spark's
    four attempts of a failing task)."""
    ck = str(tmp_path / "ck")
    df = spark.createDataFrame(pd.DataFrame({"user": ["a", "b"], "amount": [1, 2],
                                             "kind": ["x", "y"]}))

    def run(batch_id):
        return {r.user: r["count"] for r in apply_with_state(
            df, "user", count_and_total(), OUT, [COUNT, TOTAL, LAST], ck, batch_id,
            num_partitions=2).collect()}

    assert run(41) == {"a": 1, "b": 1}
    assert run(42) == {"a": 2, "b": 2}
    assert run(41) == {"a": 1, "b": 1}  # a replay of the first batch starts empty again


def test_backend_stays_open_when_the_same_worker_continues_a_partition(spark, tmp_path):
    """Which Python worker runs a task is Spark's choice; whenever a partition lands on the
    worker that committed its previous version, that worker continues the open backend."""
    ck = str(tmp_path / "ck")

    def fn(user, rows, ctx):
        import os

        c = ctx.state("count")
        c.update(c.value() + len(rows))
        return [(user, c.value(), int(ctx.reused_backend), os.getpid())]

    seen = []
    for b in range(6):
        pdf = pd.DataFrame({"user": ["a", "b"], "amount": [1, 2]})
        out = apply_with_state(spark.createDataFrame(pdf), "user", fn,
                               "user string, count long, reused long, pid long", [COUNT], ck, b,
                               num_partitions=1, operator_id="reuse").collect()
        assert {r.user: r["count"] for r in out} == {"a": b + 1, "b": b + 1}
        seen.append((out[0].pid, out[0].reused))
    assert seen[0][1] == 0
    for (prev_pid, _), (pid, reused) in zip(seen, seen[1:]):
        assert reused == (pid == prev_pid), seen


def test_task_state_reuses_the_open_backend_at_the_expected_version(tmp_path):
    from stateengine.spark.runtime import TaskConfig, TaskState, drop_cached

    def cfg(batch_id):
        return TaskConfig(checkpoint=str(tmp_path / "ck"), operator_id="op", num_partitions=2,
                          max_parallelism=128, key_cols=["k"], key_codecs=(2,),
                          descriptors=[COUNT], batch_id=batch_id)

    def run(batch_id, key):
        task = TaskState(cfg(batch_id), partition=(0, 0))
        task.backend.set_current_key(key)
        task.handles["count"].update(task.handles["count"].value() + 1)
        task.commit()
        return task.provider.last_load["reused"]

    key = next(k for k in range(100) if task_range_contains(k))
    try:
        assert run(0, key) is False      # first load: restore (empty)
        assert run(1, key) is True       # next version on the same worker: no restore
        assert run(2, key) is True
        assert run(2, key) is False      # a replayed batch: version 2 again, restored
        task = TaskState(cfg(3), partition=(0, 0))
        task.backend.set_current_key(key)
        assert task.handles["count"].value() == 3  # the replay did not count twice
        task.abort()
    finally:
        drop_cached()


def task_range_contains(k):
    from stateengine import KeyGroupRange, assign_key_group

    return KeyGroupRange.for_operator(0, 2, 128).contains(assign_key_group(k, 128))


def test_errors_in_the_user_function_fail_the_job_and_keep_the_last_version(spark, tmp_path):
    ck = str(tmp_path / "ck")
    pdf = pd.DataFrame({"user": ["a", "b", "c"], "amount": [1, 2, 3], "kind": ["a"] * 3})
    run_batch(spark, pdf, ck, 0, 2, count_and_total())

    def broken(user, rows, ctx):
        ctx.state("count").update(10_000)
        raise ValueError("user code broke")

    with pytest.raises(Exception, match="user code broke"):
        apply_with_state(spark.createDataFrame(pdf), "user", broken, OUT, [COUNT, TOTAL, LAST],
                         ck, 1, num_partitions=2, operator_id="agg").collect()
    # batch 1 never committed: running it again starts from version 1
    again = run_batch(spark, pdf, ck, 1, 2, count_and_total())
    assert again == {"a": (2, 2), "b": (2, 4), "c": (2, 6)}


def test_list_state_and_two_column_keys(spark, tmp_path):
    ck = str(tmp_path / "ck")
    items = ListStateDescriptor("items", value_type=str)

    def fn(key, rows, ctx):
        ctx.state("items").add_all(rows["item"].tolist())
        return [(key[0], int(key[1]), len(ctx.state("items").get()))]

    pdf = pd.DataFrame({"shop": ["x", "x", "y"], "day": np.array([1, 1, 2], dtype="int32"),
                        "item": ["p", "q", "r"]})
    for b in range(2):
        out = apply_with_state(spark.createDataFrame(pdf), ["shop", "day"], fn,
                               "shop string, day int, n long", [items], ck, b, num_partitions=2)
        assert sorted(tuple(r) for r in out.collect()) == [("x", 1, 2 * (b + 1)), ("y", 2, b + 1)]
