"""How fast the bench's StatefulProcessor can run at best: its own ``handleInputRows`` per key
and batch, timed alone (no Spark, no engine: a dict holds its ValueState and its input frames
are cut beforehand); then the whole task path of ``transform_with_state_in_pandas`` without
Spark (grouping a routed partition by key, the engine's state, the output sink: the task's
code on pre-routed frames, in-process); both set beside the per key-batch wall times of the
last Spark bench run (``bench/results/latest.json``: ``spark.transformWithStateInPandas``,
``spark.processor``, ``spark.grouped``).

    python bench/processor_floor.py               # 50k keys, 4 rows each
    python bench/processor_floor.py --keys 200000
    python bench/processor_floor.py --results bench/results/runs/<time>.json
    python bench/processor_floor.py --rocksdb debian   # Debian's librocksdb (default: the wheel's)

The bench's job runs on local[2]: two Python workers share the keys, so a key-batch of CPU in
one worker is half of it in wall time.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

import numpy as np
import pandas as pd

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import builds  # noqa: E402
from cases_spark import OUTPUT_SCHEMA, PARTITIONS, running_totals  # noqa: E402

from stateengine.spark.frames import RowSlices  # noqa: E402


class _DictValue:
    """Only what RunningTotals calls on its ValueState, kept in a dict per key."""

    def __init__(self, store: dict, current: list) -> None:
        self.store, self.current = store, current

    def exists(self) -> bool:
        return self.current[0] in self.store

    def get(self) -> Any:
        return self.store[self.current[0]]

    def update(self, value: Any) -> None:
        self.store[self.current[0]] = value


class _Handle:
    def __init__(self) -> None:
        self.store: dict = {}
        self.current = [None]

    def getValueState(self, name: str, schema: Any, *args: Any) -> _DictValue:
        return _DictValue(self.store, self.current)


def body_us_per_key(keys: int, rows_per_key: int) -> float:
    processor, handle = running_totals(), _Handle()
    processor.init(handle)
    rng = np.random.default_rng(1)
    spent = 0.0
    # Frames cut as a task cuts them (RowSlices of the partition's frame), 1,000 at a time
    # outside the clock: a frame used twice would answer its column from pandas' item cache
    # (~15 us less), and one per key alive at once would make the garbage collector walk them
    # all, which a worker (one slice alive at a time) never does.
    for first in range(0, keys, 1000):
        count = min(1000, keys - first)
        rows = RowSlices(pd.DataFrame({
            "user": np.repeat(np.arange(first, first + count), rows_per_key),
            "amount": rng.random(count * rows_per_key)}))
        frames = [rows(i * rows_per_key, (i + 1) * rows_per_key) for i in range(count)]
        t0 = time.process_time()  # CPU, as the task path below: load on the machine
        for k, frame in enumerate(frames, first):  # inflates wall time, not this
            handle.current[0] = k
            for _ in processor.handleInputRows((k,), iter((frame,)), None):
                pass
        spent += time.process_time() - t0
    return spent / keys * 1e6


def task_us_per_key(keys: int, rows_per_key: int, batches: int = 4) -> float:
    """CPU per key and batch of the task code of transform_with_state_in_pandas over batches
    of every key (each task loads the last version and commits the next), without Spark. A
    local session only parses the processor's DDL schemas, as the driver does."""
    import tempfile

    from pyspark.sql import SparkSession

    from stateengine.keygroups import assign_key_group
    from stateengine.serializers import Codec
    from stateengine.spark.processor import _Job, _plan
    from stateengine.spark.routing import KG_COL, PID_COL
    from stateengine.spark.runtime import TaskConfig, TaskState

    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"  # loopback only
    spark = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false") \
        .config("spark.driver.host", "127.0.0.1") \
        .config("spark.driver.bindAddress", "127.0.0.1").getOrCreate()
    processor = running_totals()
    plan = _plan(processor, spark, "None")
    out = spark.createDataFrame([], OUTPUT_SCHEMA).schema
    users = np.repeat(np.arange(keys, dtype=np.int64), rows_per_key)
    groups = np.repeat([assign_key_group(int(u), 128, Codec.BIGINT) for u in range(keys)],
                       rows_per_key).astype(np.int32)
    spent = 0.0
    with tempfile.TemporaryDirectory(prefix="stateengine-task-") as root:
        for batch in range(batches + 1):
            rows = pd.DataFrame({"user": users, "amount": np.random.default_rng(batch).random(
                len(users)), KG_COL: groups, PID_COL: np.zeros(len(users), np.int32)})
            rows = rows.sort_values([KG_COL, "user"], kind="stable", ignore_index=True)
            cfg = TaskConfig(os.path.join(root, "state"), "bench", 1, 128, ["user"],
                             (int(Codec.BIGINT),), plan.descriptors(), batch,
                             local_dir=os.path.join(root, "local"))
            task = TaskState(cfg, (0, 0))
            job = _Job(processor, plan, "pandas", ["user"], out, False, None, True)
            t0 = time.process_time()
            emitted = sum(len(f) for f in job.run_pandas(task, iter([rows])))
            if batch:  # the first batch creates every key: time the steady state
                spent += time.process_time() - t0
            task.commit()
            assert emitted == keys
    return spent / (keys * batches) * 1e6


def wall_us_per_key_batch(results: dict, name: str) -> float | None:
    r = results.get(name)
    if r is None:
        return None
    d = r["details"]
    return d["seconds"] / (d["keys"] * d["batches"]) * 1e6


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--keys", type=int, default=50_000)
    p.add_argument("--rows-per-key", type=int, default=4)
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--results", default=os.path.join(HERE, "results", "latest.json"))
    p.add_argument("--rocksdb", choices=("debian", "release"), default=None,
                   help="the librocksdb measured: the release wheel's (default) or Debian's")
    args = p.parse_args()
    build = builds.use(args.rocksdb, False, __file__)  # may restart this script
    print(f"build: {builds.describe(build)['rocksdb']}")
    # Body and task path alternate round by round, so that drifting load reaches both alike;
    # the figures are the best of the rounds, and each round's own share is shown beside.
    bodies, tasks = [], []
    for r in range(args.rounds):
        bodies.append(body_us_per_key(args.keys, args.rows_per_key))
        tasks.append(task_us_per_key(args.keys // PARTITIONS, args.rows_per_key))
        print(f"round {r + 1}/{args.rounds} (load {os.getloadavg()[0]:.1f}): body "
              f"{bodies[-1]:.1f} us, task path {tasks[-1]:.1f} us, "
              f"{100 * (tasks[-1] - bodies[-1]) / bodies[-1]:.1f}% beyond the body", flush=True)
    body, task = min(bodies), min(tasks)
    print(f"the processor's own handleInputRows: {body:.1f} us of CPU per key and batch "
          f"({body / PARTITIONS:.1f} us of wall time on {PARTITIONS} workers)")
    print(f"the task path without Spark (grouping, engine state, output sink and the body): "
          f"{task:.1f} us of CPU per key and batch, {task - body:.1f} beyond the body "
          f"({100 * (task - body) / body:.1f}% of it; best of {args.rounds} rounds each)")
    print(f"load average {', '.join(f'{x:.2f}' for x in os.getloadavg())} "
          f"({os.cpu_count()} CPUs)")
    if not os.path.exists(args.results):
        return
    results = {r["name"]: r for r in json.load(open(args.results))["results"]}
    spark = wall_us_per_key_batch(results, "spark.transformWithStateInPandas")
    ours = wall_us_per_key_batch(results, "spark.processor")
    apply = wall_us_per_key_batch(results, "spark.grouped")
    for label, v in (("Spark transformWithStateInPandas", spark),
                     ("stateengine transform_with_state_in_pandas", ours),
                     ("stateengine apply_with_state", apply)):
        if v is not None:
            print(f"{label:45s} {v:7.1f} us of wall time per key and batch")
    if spark is not None:
        budget = spark / 10
        print(f"10x Spark leaves {budget:.1f} us of wall time per key and batch; the "
              f"processor's body takes {body / PARTITIONS:.1f}, leaving "
              f"{budget - body / PARTITIONS:.1f} for Spark's Arrow path, routing and the engine"
              + (f" (apply_with_state's whole job takes {apply:.1f})" if apply else ""))


if __name__ == "__main__":
    main()
