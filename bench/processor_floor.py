"""How fast the bench's StatefulProcessor can run at best: its own ``handleInputRows`` per key
and batch, timed alone (no Spark, no engine: a dict holds its ValueState and its input frames
are cut beforehand), set beside the per key-batch wall times of the last Spark bench run
(``bench/results/latest.json``: ``spark.transformWithStateInPandas``, ``spark.processor``,
``spark.grouped``).

    python bench/processor_floor.py               # 50k keys, 4 rows each
    python bench/processor_floor.py --keys 200000
    python bench/processor_floor.py --results bench/results/20261125-140223.json

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

from cases_spark import PARTITIONS, running_totals  # noqa: E402


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
    # 1,000 frames used in turn: holding one per key alive would make the garbage collector
    # walk them all, which a worker (one slice alive at a time) never does
    frames = [pd.DataFrame({"user": np.full(rows_per_key, k),
                            "amount": rng.random(rows_per_key)}) for k in range(1000)]
    t0 = time.perf_counter()
    for k in range(keys):
        frame = frames[k % len(frames)]
        handle.current[0] = k
        for _ in processor.handleInputRows((k,), iter((frame,)), None):
            pass
    return (time.perf_counter() - t0) / keys * 1e6


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
    p.add_argument("--results", default=os.path.join(HERE, "results", "latest.json"))
    args = p.parse_args()
    body = min(body_us_per_key(args.keys, args.rows_per_key) for _ in range(3))
    print(f"the processor's own handleInputRows: {body:.1f} us of CPU per key and batch "
          f"({body / PARTITIONS:.1f} us of wall time on {PARTITIONS} workers)")
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
