"""State TTL in Spark tasks: the batch's timestamp is the clock, so a retried task and a
replayed batch see the same expiry, whatever the wall clock says; bootstrapped TTL state carries
the bootstrap's time, and read_state shows each entry's last access."""

import pandas as pd
import pytest
from pyspark import TaskContext

from stateengine import (ListStateDescriptor, StateStoreProvider, StateTtlConfig,
                         TtlTimeNotSetError, TtlTimeRangeError, ValueStateDescriptor)
from stateengine.spark import apply_with_state, bootstrap_state, read_state

pytestmark = pytest.mark.spark

TTL = 1_000
# Batch times far in the past: an engine that read the wall clock would expire everything.
T0 = 1_000_000
SEEN = ValueStateDescriptor("seen", value_type=int, ttl=StateTtlConfig(TTL))
VISITS = ListStateDescriptor("visits", value_type=int, ttl=StateTtlConfig(TTL))
OUT = "user string, previous long, visits long"


def remember(fail_batches=()):
    def fn(user, rows, ctx):
        previous = ctx.state("seen").value()  # None once the last visit is TTL old
        ctx.state("seen").update(ctx.batch_timestamp_ms)
        ctx.state("visits").add(ctx.batch_timestamp_ms)
        visits = len(ctx.state("visits").get())
        tc = TaskContext.get()
        if ctx.batch_id in fail_batches and tc.attemptNumber() == 0 and tc.partitionId() == 1:
            raise RuntimeError("injected failure after the state was read and written")
        return [(user, previous, visits)]
    return fn


def run(spark, ck, batch_id, ts, users, fn):
    df = spark.createDataFrame(pd.DataFrame({"user": users}))
    out = apply_with_state(df, "user", fn, OUT, [SEEN, VISITS], ck, batch_id, num_partitions=2,
                           operator_id="ttl", batch_timestamp_ms=ts)
    return {r.user: (r.previous, r.visits) for r in out.collect()}


def test_expiry_follows_the_batch_timestamp_through_retries_and_replays(spark, tmp_path):
    ck = str(tmp_path / "ck")
    users = [f"u{i}" for i in range(12)]
    early, late = users[:6], users[6:]
    fn = remember(fail_batches={2})
    assert run(spark, ck, 0, T0, users, fn) == {u: (None, 1) for u in users}
    assert run(spark, ck, 1, T0 + 600, late, fn) == {u: (T0, 2) for u in late}
    # At T0 + 1200 what was written at T0 expired (the early users' value, every first visit),
    # what was written at T0 + 600 did not; the first attempt of partition 1 fails after its
    # reads and writes and is retried.
    want = {**{u: (None, 1) for u in early}, **{u: (T0 + 600, 2) for u in late}}
    assert run(spark, ck, 2, T0 + 1_200, users, fn) == want
    # foreachBatch replays batch 2 (driver restart): same state version, same timestamp, same
    # expiry, although the wall clock moved on
    assert run(spark, ck, 2, T0 + 1_200, users, fn) == want
    state = read_state(spark, ck, "visits", operator_id="ttl").collect()
    assert {r.key: r.last_access_ms for r in state} == {
        **{u: [T0 + 1_200] for u in early}, **{u: [T0 + 600, T0 + 1_200] for u in late}}
    flat = read_state(spark, ck, "visits", operator_id="ttl", flatten=True).collect()
    assert sorted((r.key, r.value, r.last_access_ms) for r in flat) == sorted(
        [(u, T0 + 1_200, T0 + 1_200) for u in users] + [(u, T0 + 600, T0 + 600) for u in late])
    with pytest.raises(TtlTimeNotSetError, match="batch_timestamp_ms"):
        apply_with_state(spark.createDataFrame(pd.DataFrame({"user": users})), "user", fn, OUT,
                         [SEEN, VISITS], ck, 3, num_partitions=2, operator_id="ttl")


def test_bootstrapped_ttl_state_expires_from_the_bootstrap_time(spark, tmp_path):
    ck = str(tmp_path / "ck")
    df = spark.createDataFrame(pd.DataFrame({"user": ["a", "b"], "seen": [5, 6]}))
    version = bootstrap_state(df, "user", SEEN, "seen", ck, operator_id="ttl", num_partitions=2,
                              batch_timestamp_ms=T0)
    rows = read_state(spark, ck, "seen", operator_id="ttl").collect()
    assert sorted((r.key, r.value, r.last_access_ms) for r in rows) == [("a", 5, T0), ("b", 6, T0)]
    fn = remember()
    assert run(spark, ck, version, T0 + TTL - 1, ["a"], fn) == {"a": (5, 1)}
    assert run(spark, ck, version + 1, T0 + TTL, ["b"], fn) == {"b": (None, 1)}


def test_a_batch_time_whose_expiry_leaves_int64_fails_on_the_driver(spark, tmp_path):
    """2**63 - 1 would make every entry written in the batch read back as expired: the driver
    refuses it before any task runs, and nothing is committed."""
    ck = str(tmp_path / "ck")
    users = ["a", "b"]
    assert run(spark, ck, 0, T0, users, remember()) == {u: (None, 1) for u in users}
    with pytest.raises(TtlTimeRangeError, match="batch_timestamp_ms 9223372036854775807 ms plus "
                                                "the TTL of state 'seen'"):
        run(spark, ck, 1, (1 << 63) - 1, users, remember())
    with StateStoreProvider(ck, "ttl", 0, 2) as prov:
        assert prov.latest_version() == 1
