"""stateengine.testing: the local harnesses.

Without Spark: no JVM anywhere (a child process with no java to find runs every harness and
cannot start a SparkSession), state seeded and inspected between batches, timers seeded and
fired, init/close once per task per batch, rescaling, a failed batch that is run again, time
that never moves back. Against stateengine.spark on a SparkSession: the same
``apply_with_state`` and ``map_with_state`` functions give the same rows, batch by batch,
through rescaling, timers, TTL and two-column keys, with each key in the same partition.
(Processor cases against Spark's own operator: test_spark_processor*.py, test_tws_tester.py.)
"""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pandas as pd
import pytest

from stateengine import (ListStateDescriptor, MapStateDescriptor, ReducingStateDescriptor,
                         StateTtlConfig, ValueStateDescriptor, reducers)
from stateengine.testing import ApplyHarness, MapHarness

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
needs_processors = pytest.mark.skipif(
    not __import__("importlib").util.find_spec("pyspark.sql.streaming.stateful_processor"),
    reason="StatefulProcessor needs pyspark >= 4.0")


# ---- no JVM -------------------------------------------------------------------------------

NO_JVM_SCRIPT = textwrap.dedent("""
    import shutil, sys
    import pandas as pd
    assert shutil.which("java") is None, shutil.which("java")
    from stateengine import ValueStateDescriptor
    from stateengine.testing import ApplyHarness, MapHarness

    def count(user, rows, ctx):
        c = ctx.state("n")
        c.update((c.value() or 0) + len(rows))
        return [(user, c.value())]

    with ApplyHarness(count, "user", "user string, n long",
                      [ValueStateDescriptor("n", value_type=int)]) as h:
        h.run_batch(pd.DataFrame({"user": ["a", "b", "a"]}))
        assert sorted(h.run_batch(pd.DataFrame({"user": ["a"]})).rows) == [("a", 3)]
    with MapHarness(lambda rows, ctx: [(len(rows),)], "user", "n long",
                    []) as h:
        assert sum(r.n for r in h.run_batch(pd.DataFrame({"user": ["a", "b"]})).rows) == 2
    try:
        from stateengine.testing import ProcessorHarness
        from tests import tws_processors as P
    except ImportError:  # pyspark < 4.0: no StatefulProcessor
        pass
    else:
        with ProcessorHarness(P.RunningTotals(), "user",
                              "user string, count long, total double") as h:
            h.run_batch(pd.DataFrame({"user": ["a", "a"], "amount": [1.0, 2.0]}))
            assert h.peek_value_state("acc", "a") == (2, 3.0)
    from pyspark import SparkContext
    assert SparkContext._gateway is None and SparkContext._jvm is None
    try:
        from pyspark.sql import SparkSession
        SparkSession.builder.master("local[1]").getOrCreate()
    except Exception as e:
        print("no JVM could start:", type(e).__name__)
    else:
        sys.exit("a SparkSession started: java was reachable")
    print("harnesses ran")
""")


def test_the_harnesses_run_where_no_jvm_can_start(tmp_path):
    empty = tmp_path / "bin"
    empty.mkdir()
    env = {k: v for k, v in os.environ.items()
           if k not in ("JAVA_HOME", "SPARK_HOME", "PYSPARK_SUBMIT_ARGS")}
    env.update(PATH=str(empty), PYTHONPATH=ROOT, SPARK_LOCAL_IP="127.0.0.1")
    done = subprocess.run([sys.executable, "-c", NO_JVM_SCRIPT], env=env, cwd=str(tmp_path),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "harnesses ran" in done.stdout and "no JVM could start" in done.stdout


# ---- processors without Spark ---------------------------------------------------------------

@needs_processors
def test_state_and_timers_seeded_and_inspected_between_batches(tmp_path):
    from stateengine.testing import ProcessorHarness
    from tests import tws_processors as P

    out = "key string, kind string, at long, rows long, state string"
    with ProcessorHarness(P.TimersAndTtl(), "key", out, time_mode="ProcessingTime",
                          input_schema="key string, n long", num_partitions=3,
                          directory=str(tmp_path)) as h:
        with pytest.raises(KeyError, match="declares no state 'nope'"):
            h.peek_value_state("nope", "a")
        h.update_value_state("count", "a", (41,))
        h.update_list_state("events", "a", [(7,), (8,)])
        h.update_map_state("seen", "a", {(1,): (2,)})
        h.register_timer("z", 500)
        # pending changes are visible to peeks before the batch that applies them
        assert h.peek_value_state("count", "a") == (41,)
        assert h.peek_list_state("events", "a") == [(7,), (8,)]
        assert h.peek_map_state("seen", "a") == {(1,): (2,)}
        assert h.peek_timers("z") == [500]
        first = h.run_batch(pd.DataFrame({"key": ["a"], "n": [1]}), processing_time=1000)
        rows = {(r.key, r.kind): r for r in first.rows}
        assert rows[("z", "timer")].at == 500  # the seeded timer fired in this batch
        assert h.peek_value_state("count", "a") == (42,)  # the handler counted on from 41
        assert h.peek_list_state("events", "a") == [(7,), (8,), (42,)]
        assert h.peek_timers("a") == [1001] and h.peek_timers("z") == []
        # TTL against the batch timestamp: "short" (1 ms) is gone once time moves on
        assert h.peek_value_state("short", "a") == (42,)
        h.run_batch(processing_time=2000)  # no data: a's timer fires
        assert h.peek_value_state("short", "a") is None
        assert h.peek_value_state("long", "a") == (42,)
        h.delete_timer("a", 5000)  # nothing to delete: no error, as in Spark
        h.update_value_state("count", "a", None)
        assert h.peek_value_state("count", "a") is None
        with pytest.raises(ValueError, match="1 column"):
            h.peek_value_state("count", ("a", "b"))


@needs_processors
def test_init_and_close_run_in_every_task_of_every_batch_and_state_survives_rescaling(
        tmp_path):
    from stateengine.testing import ProcessorHarness
    from tests import tws_processors as P

    folder = tmp_path / "inits"
    folder.mkdir()
    users = [f"u{i}" for i in range(40)]
    with ProcessorHarness(P.TesterProbe(str(folder)), "key", P.TESTER_PROBE_OUT,
                          time_mode="ProcessingTime", num_partitions=2,
                          directory=str(tmp_path / "h")) as h:
        assert len(glob.glob(f"{folder}/init-*")) == 1  # the driver's init()
        totals = {}
        for b, n in enumerate([2, 3, 1, 4]):
            out = h.run_batch(pd.DataFrame({"key": users, "n": [1] * len(users)}),
                              processing_time=1000 * (b + 1), num_partitions=n)
            inputs = [r for r in out.rows if r.kind == "input"]
            assert sorted(r.key for r in inputs) == sorted(users)
            # calls counts the handler's calls on this task's own copy of the processor
            assert [r.calls for r in inputs].count(1) == n  # one first call per task
            totals[b] = len(glob.glob(f"{folder}/init-*"))
        assert totals == {0: 1 + 2, 1: 1 + 2 + 3, 2: 1 + 2 + 3 + 1, 3: 1 + 2 + 3 + 1 + 4}


@needs_processors
def test_a_failed_batch_commits_nothing_and_runs_again(tmp_path):
    from stateengine import UserFunctionError
    from stateengine.testing import ProcessorHarness
    from tests import tws_processors as P

    class Picky(P.RunningTotals):
        def handleInputRows(self, key, rows, timerValues):
            if key[0] == "boom":
                raise LookupError("no boom")
            yield from super().handleInputRows(key, rows, timerValues)

    with ProcessorHarness(Picky(), "user", "user string, count long, total double",
                          num_partitions=3, directory=str(tmp_path)) as h:
        h.run_batch(pd.DataFrame({"user": ["a", "b", "c"], "amount": [1.0, 2.0, 3.0]}))
        with pytest.raises(UserFunctionError, match="handleInputRows raised LookupError: no "
                                                    "boom .*key 'boom', batch 1"):
            h.run_batch(pd.DataFrame({"user": ["a", "b", "boom"], "amount": [1.0, 1.0, 1.0]}))
        assert h.batch_id == 1
        again = h.run_batch(pd.DataFrame({"user": ["a", "b"], "amount": [1.0, 1.0]}),
                            num_partitions=2)  # rescaled, too: state follows its key groups
        assert sorted(again.rows) == [("a", 2, 2.0), ("b", 2, 3.0)]
        assert again.batch_id == 1 and h.num_partitions == 2
        assert h.peek_value_state("acc", "c") == (1, 3.0)


def test_restores_of_the_harnesses_own_commits_spawn_no_file_check(tmp_path, monkeypatch):
    """A batch after a peek and a rescaled batch restore state the harness itself committed:
    the restore's check of RocksDB files (a child process, checkpoint/untrusted.py) finds it
    recorded as written here and spawns nothing, and the state is intact."""
    from stateengine.checkpoint import restore

    checks = []
    real = restore.check_rocksdb_files
    monkeypatch.setattr(restore, "check_rocksdb_files",
                        lambda db, source: checks.append(real(db, source)) or checks[-1])

    def count(user, rows, ctx):
        n = ctx.state("n")
        n.update((n.value() or 0) + len(rows))
        return [(user, n.value())]

    rows = pd.DataFrame({"user": ["a", "b", "c", "a"]})
    with ApplyHarness(count, "user", "user string, n long", [ValueStateDescriptor("n")],
                      directory=str(tmp_path)) as h:
        h.run_batch(rows)
        assert h.peek("n", "a") == 2  # the next batch restores the peeked partition
        assert sorted(h.run_batch(rows).rows) == [("a", 4), ("b", 2), ("c", 2)]
        assert sorted(h.run_batch(rows, num_partitions=3).rows) == [("a", 6), ("b", 3),
                                                                    ("c", 3)]
    assert checks and all(c == {"memo": True} for c in checks), checks


@needs_processors
def test_time_never_moves_back_and_belongs_to_its_time_mode(tmp_path):
    from stateengine.testing import ProcessorHarness
    from tests import tws_processors as P

    out = "key string, kind string, at long, watermark long, info string"
    with ProcessorHarness(P.EventTimeSessions(), "key", out, time_mode="EventTime",
                          input_schema="key string, ts timestamp", directory=str(tmp_path)) as h:
        h.run_batch(watermark=5000)
        with pytest.raises(ValueError, match="never moves back"):
            h.run_batch(watermark=4000)
    with ProcessorHarness(P.RunningTotals(), "user", "user string, count long, total double",
                          input_schema="user string, amount double") as h:
        with pytest.raises(ValueError, match="belongs to time mode EventTime"):
            h.run_batch(watermark=1)
    with pytest.raises(ValueError, match="flavour must be"):
        ProcessorHarness(P.RunningTotals(), "user", "user string", flavour="arrow")


def test_a_harness_resumed_with_changed_code_evolves_state_as_the_spark_path(tmp_path):
    """A harness given a closed harness's directory resumes from its newest version, as a
    restarted query resumes from its checkpoint; changed schemas evolve there as through
    apply_with_state and transform_with_state_in_pandas (test_spark_evolution.py asserts
    the same reads on Spark), and a refused change fails the batch and leaves the state."""
    from stateengine.errors import SchemaEvolutionError
    from tests import test_spark_evolution as E

    d, out = str(tmp_path / "apply"), "user bigint, before string"

    def batch(fn, states, rows):
        with ApplyHarness(fn, "user", out, states, num_partitions=2, operator_id="op",
                          directory=d) as h:
            return h.batch_id, h.run_batch(pd.DataFrame(rows, columns=["user", "page", "at"]))

    assert batch(E._v1, E.V1, E.BATCH_0)[0] == 0
    first, rows = batch(E._v2, E.V2, E.BATCH_1)
    assert first == 1 and {r.user: json.loads(r.before) for r in rows.rows} == E.APPLY_BEFORE
    before = E._digest(os.path.join(d, "checkpoint"))
    with pytest.raises(SchemaEvolutionError, match="session value.clicks: bigint -> smallint"):
        batch(E._v2, [ValueStateDescriptor("session", "clicks smallint, page string")],
              E.BATCH_1)
    assert E._digest(os.path.join(d, "checkpoint")) == before


@needs_processors
def test_a_processor_harness_resumed_with_changed_code_evolves_state(tmp_path):
    """The processor of test_spark_evolution.py (whose first two versions it runs against
    Spark's own operator with Avro encoding) through three ProcessorHarness runs over one
    directory: the same reads of old entries, renames and defaults included."""
    from stateengine.testing import ProcessorHarness
    from tests import test_spark_evolution as E

    old = []
    for i, ((schema, value), evolve) in enumerate(E.PROBES):
        with ProcessorHarness(E._processor(schema, value, **evolve), "id",
                              "id string, old string", directory=str(tmp_path)) as h:
            assert h.batch_id == i
            [(_, got)] = h.run_batch(pd.DataFrame({"id": ["a"]})).rows
            old.append(json.loads(got))
    assert old[0] == [None, [], []] and old[1:] == E.PROBES_OLD


# ---- functions, against stateengine.spark -------------------------------------------------

COUNT = ValueStateDescriptor("count", value_type=int, default=0)
TOTAL = ReducingStateDescriptor("total", reducers.SUM, value_type=int)
LAST = MapStateDescriptor("last", user_key_type=str, value_type=int)
SEEN = ValueStateDescriptor("seen", value_type=int, ttl=StateTtlConfig(1500))
APPLY_OUT = "user string, kind string, count long, total long, seen long, part int, at long"


def counting(user, rows, ctx):
    count, total, last, seen = (ctx.state(n) for n in ("count", "total", "last", "seen"))
    before = seen.value()
    count.update(count.value() + len(rows))
    for a, kind in zip(rows["amount"].tolist(), rows["kind"]):
        total.add(a)
        last.put(kind, a)
    seen.update(len(rows))
    if ctx.watermark is not None:
        ctx.timers.register_event_time_timer(int(rows["t"].max()) + 100)
    return [(user, "input", count.value(), total.get(), before, ctx.partition_id,
             ctx.batch_id)]


def timer_fired(user, timer, ctx):
    return [(user, "timer", ctx.state("count").value(), None, None, ctx.partition_id,
             timer.timestamp)]


def partition_sums(rows, ctx):
    total = ctx.state("total")
    keys = rows["user"].to_numpy()
    total.add_many(keys, rows["amount"].to_numpy())
    values, _ = total.get_many(np.unique(keys))
    return pd.DataFrame({"user": np.unique(keys), "total": values.astype("int64"),
                         "part": np.int32(ctx.partition_id)})


def apply_batches():
    rng = np.random.default_rng(7)
    return [pd.DataFrame({"user": [f"u{u}" for u in rng.integers(0, 30, 120)],
                          "amount": rng.integers(1, 50, 120).astype("int64"),
                          "kind": rng.choice(["a", "b"], 120),
                          "t": rng.integers(0, 1000, 120).astype("int64") + 1000 * b})
            for b in range(4)]


PLAN = [  # (partitions, watermark, processing time) per batch
    (2, 500, 1_000), (3, 1_400, 2_000), (1, 2_600, 4_000), (4, 3_500, 4_100)]


@pytest.mark.spark
def test_apply_and_map_harnesses_give_the_spark_paths_rows(spark, tmp_path):
    from stateengine.spark import apply_with_state, map_with_state

    batches = apply_batches()
    states = [COUNT, TOTAL, LAST, SEEN]
    spark_rows, harness_rows = [], []
    with ApplyHarness(counting, "user", APPLY_OUT, states, on_timer=timer_fired,
                      directory=str(tmp_path / "h")) as h:
        for b, (pdf, (n, wm, pt)) in enumerate(zip(batches, PLAN)):
            out = apply_with_state(spark.createDataFrame(pdf), "user", counting, APPLY_OUT,
                                   states, str(tmp_path / "s"), b, num_partitions=n,
                                   on_timer=timer_fired, watermark=wm, processing_time=pt)
            spark_rows.append(sorted(tuple(r) for r in out.collect()))
            harness_rows.append(sorted(h.run_batch(pdf, watermark=wm, processing_time=pt,
                                                   num_partitions=n).rows))
        assert harness_rows == spark_rows
        assert any(r[1] == "timer" for rows in spark_rows for r in rows)
        assert any(r[4] is None for r in spark_rows[2] if r[1] == "input")  # TTL expired
        every = pd.concat(batches, ignore_index=True)
        u1 = every[every["user"] == "u1"]
        assert h.peek("count", "u1") == len(u1)
        assert h.peek("last", "u1") == {k: int(g["amount"].iloc[-1])
                                        for k, g in u1.groupby("kind")}  # input order
        left = h.timers()
        assert left and all(kind == "event" and at > 3_500 for kind, _, at, _ in left)

    map_spark, map_harness = [], []
    with MapHarness(partition_sums, "user", "user string, total long, part int", [TOTAL],
                    directory=str(tmp_path / "m")) as h:
        for b, (pdf, (n, _, _)) in enumerate(zip(batches, PLAN)):
            out = map_with_state(spark.createDataFrame(pdf), "user", partition_sums,
                                 "user string, total long, part int", [TOTAL],
                                 str(tmp_path / "ms"), b, num_partitions=n)
            map_spark.append(sorted(tuple(r) for r in out.collect()))
            map_harness.append(sorted(h.run_batch(pdf, num_partitions=n).rows))
    assert map_harness == map_spark


@pytest.mark.spark
def test_two_column_keys_list_state_and_seeds_against_the_spark_path(spark, tmp_path):
    from stateengine.spark import apply_with_state

    items = ListStateDescriptor("items", value_type=str)

    def fn(key, rows, ctx):
        ctx.state("items").add_all(rows["item"].tolist())
        return [(key[0], int(key[1]), len(ctx.state("items").get()), ctx.partition_id)]

    out = "shop string, day int, n long, part int"
    pdf = pd.DataFrame({"shop": ["x", "x", "y", "z"],
                        "day": np.array([1, 1, 2, 3], dtype="int32"),
                        "item": ["p", "q", "r", "s"]})
    # the same Spark types on both sides (Spark 3.5 without Arrow infers int32 as bigint)
    schema = "shop string, day int, item string"
    with ApplyHarness(fn, ["shop", "day"], out, [items], num_partitions=3,
                      directory=str(tmp_path / "h")) as h:
        for b in range(2):
            theirs = sorted(tuple(r) for r in apply_with_state(
                spark.createDataFrame(pdf, schema), ["shop", "day"], fn, out, [items],
                str(tmp_path / "s"), b, num_partitions=3).collect())
            assert sorted(h.run_batch(pdf).rows) == theirs
        # inferred from the pandas dtypes as Arrow maps them
        assert h.input_schema.simpleString() == "struct<shop:string,day:int,item:string>"
        h.seed(("x", 1), lambda ctx: ctx.state("items").update(["seeded"]))
        assert h.peek("items", ("x", 1)) == ["seeded"]
        nxt = h.run_batch(pdf.iloc[:1])
        assert [(r.shop, r.n) for r in nxt.rows] == [("x", 2)]
