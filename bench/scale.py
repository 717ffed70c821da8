"""Speed at scale: the Spark bench's job with one typed struct state against the same job
without state, side by side, at millions of keys; then the restore and rescale of its state.

The job is bench/cases_spark.py's: events (user bigint, amount double) in ``--batches``
batches; per user a running count and sum, emitting (user, count, total) for every user a
batch touched, written to Parquet per batch; 2 partitions on ``local[2]``, bound to 127.0.0.1.

Variants (``--variants``), alternated round by round (ABBA: drifting load on the shared
machine hits each alike; before the rounds of a size, the first variant runs its first batch
once, unrecorded, so the JVM's first job at that size lands on no clock); each round starts
from empty state:

* ``nostate`` (the floor): the same routing (``stateengine.spark.route``: key group and
  partition columns, the shuffle by key group, a task per partition even when empty), the same
  mapInPandas step handed each partition's rows as one frame exactly as ``map_with_state``
  hands them (``_whole_partition``: internal columns dropped, frames joined), the same body up
  to the state (``np.unique`` of the users, per-user counts and sums with ``np.bincount``) and
  the same output written the same way, but counts and sums are those of the batch alone and
  no stateengine task code runs. So the difference to ``typed`` is the state: opening or
  restoring the partition's backend, ``get_many`` and ``put_many`` of the struct, and the
  commit of each version. (Spark's own stateful operators are not the floor: they are tens of
  times slower, bench/cases_spark.py.)
* ``typed``: ``map_with_state`` with one ``ValueState`` of ``count long, total double``:
  ``get_many`` of the batch's distinct users (a pyarrow StructArray), numpy arithmetic,
  ``put_many`` of the new structs.
* ``ints``: bench/cases_spark.py's ``spark.vectorized`` job, run by its own runner (a
  ``ValueState`` of int count and a native ``ReducingState`` SUM of the amounts: two states,
  three batch calls; its batches are not timed apart).
* ``empty``: ``map_with_state`` with no state at all running the ``nostate`` body: what
  stateengine's task code costs beside the state (backend open, commit of an empty version,
  output checks).

Each run is timed from the first batch read to the last batch written (as cases_spark.py
times it); the report gives each variant's best round, each round's ratio to the floor of
the same round, the batches' own times, the CPU seconds of the JVM and of the Python workers,
each task's load/update/commit times (from the metrics its commit sealed), and checks every
variant's output against pandas (running totals for the stateful ones, per-batch figures for
the others).

Then (``--rescale``) the state of the last ``typed`` round at the largest size, committed by 2
partitions, is restored the way a Spark task restores it (``StateStoreProvider.get_store``,
checkpoint on local disk): 2 -> 2, 2 -> 3 and, from a version the 3 partitions commit,
3 -> 2, partitions one after another in this process, each as the first restore of its
process, in three modes (``MODES``): the child-process check of RocksDB files
(docs/reliability/untrusted-files.md) off; on with no table trusted (cold: another
machine's state); on with the records the writers left in the machine's memo.

    python bench/scale.py                  # small: 200k rows over 100k keys, 2 rounds, ~2 min
    python bench/scale.py --full           # 4M rows / 2M keys and 20M / 10M, 2 rounds, rescale
                                           # (~17 min: docs/performance/scale.md)
    python bench/scale.py --sizes 4000000:2000000 --rounds 3 --variants nostate,typed,ints
    python bench/scale.py --rescale-only --keys 10000000   # state built without Spark
    python bench/scale.py --rocksdb debian

Like bench/run.py it runs on the release wheel's Release RocksDB unless ``--rocksdb debian``.
Results: bench/results/scale-latest.json and one line in history.jsonl (a run without
``--full`` writes into bench/results/quick/ unless ``--out`` says otherwise).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from typing import Any, Callable

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # see run.py

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import builds  # noqa: E402

PARTITIONS = 2
MAX_PARALLELISM = 128
OUTPUT_SCHEMA = "user long, count long, total double"
STRUCT = "count long, total double"
VARIANTS = ("nostate", "typed", "ints", "empty")
SMALL = [(200_000, 100_000)]
FULL = [(4_000_000, 2_000_000), (20_000_000, 10_000_000)]


# ---- the job ----------------------------------------------------------------------------------

def per_user(rows: Any) -> tuple[Any, Any, Any]:
    """(distinct users, rows per user, amount per user) of one partition's rows."""
    import numpy as np

    users, inverse, n = np.unique(rows["user"].to_numpy(), return_inverse=True,
                                  return_counts=True)
    sums = np.bincount(inverse, weights=rows["amount"].to_numpy(), minlength=len(users))
    return users, n, sums


def nostate_body(rows: Any, ctx: Any = None) -> Any:
    """The batch's own count and total per user."""
    import pandas as pd

    users, n, sums = per_user(rows)
    return pd.DataFrame({"user": users, "count": n, "total": sums})


def typed_body(rows: Any, ctx: Any) -> Any:
    """Running count and total per user in one struct state."""
    import pandas as pd
    import pyarrow.compute as pc

    users, n, sums = per_user(rows)
    acc = ctx.state("acc")
    before, _ = acc.get_many(users)  # missing users are null structs
    count = n + pc.fill_null(pc.struct_field(before, "count"), 0).to_numpy()
    total = sums + pc.fill_null(pc.struct_field(before, "total"), 0.0).to_numpy()
    acc.put_many(users, {"count": count, "total": total})
    return pd.DataFrame({"user": users, "count": count, "total": total})


def descriptors(variant: str) -> list[Any]:
    from stateengine import ValueStateDescriptor

    return [ValueStateDescriptor("acc", value_type=STRUCT)] if variant == "typed" else []


def nostate_step(df: Any) -> Any:
    """The floor's Spark step: route() and mapInPandas over the partition's rows."""
    from stateengine.spark.apply import _whole_partition
    from stateengine.spark.routing import route

    routed = route(df, "user", PARTITIONS, MAX_PARALLELISM, every_partition=True)

    def run(batches: Any) -> Any:
        from pyspark import TaskContext

        for rows in _whole_partition(batches, ["user"], TaskContext.get().partitionId()):
            yield nostate_body(rows)
    return routed.mapInPandas(run, OUTPUT_SCHEMA)


BODIES: dict[str, Callable[..., Any]] = {"typed": typed_body, "empty": nostate_body}


def task_times(checkpoint: str, batches: int) -> list[list[Any]]:
    """Per batch, each partition's [load kind, load, update (load to commit), commit] in ms,
    as its commit sealed them in the checkpoint (state_metrics)."""
    from stateengine.spark import state_metrics

    out = []
    for i in range(batches):
        parts = state_metrics(checkpoint, i).partitions
        out.append([[m["load"], round(m["load_ms"]), round(m["update_ms"]), round(m["commit_ms"])]
                    for _, m in sorted(parts.items()) if m])
    return out


MEMORY_BUDGET_MB: int | None = None  # --memory-budget-mb: each worker's (default: 256 MiB)


def run_variant(spark: Any, variant: str, paths: list[str], work: str) -> list[float]:
    """The job over every batch; the seconds each batch took (read to written)."""
    from stateengine.spark import map_with_state, mark_batch_committed

    if variant == "ints":  # cases_spark.py's own runner (its batches are not timed apart)
        import cases_spark

        t0 = time.perf_counter()
        cases_spark.run_vectorized(spark, paths, "", work)
        return [time.perf_counter() - t0]
    checkpoint = os.path.join(work, "state")
    times = []
    for i, path in enumerate(paths):
        t0 = time.perf_counter()
        df = spark.read.parquet(path)
        if variant == "nostate":
            out = nostate_step(df)
        else:
            out = map_with_state(df, "user", BODIES[variant], OUTPUT_SCHEMA,
                                 descriptors(variant), checkpoint=checkpoint, batch_id=i,
                                 num_partitions=PARTITIONS, max_parallelism=MAX_PARALLELISM,
                                 local_dir=os.path.join(work, "local"),
                                 memory_budget_mb=MEMORY_BUDGET_MB)
        out.write.mode("overwrite").parquet(os.path.join(work, "out", f"batch={i}"))
        if variant != "nostate":
            mark_batch_committed(checkpoint, i, PARTITIONS)
        times.append(time.perf_counter() - t0)
    return times


# ---- data and checks --------------------------------------------------------------------------

def generate(root: str, rows: int, keys: int, batches: int, seed: int = 21) -> tuple[list[str], list[Any], Any]:
    """Parquet files, one directory per batch, drawn as bench/cases_spark.py draws them; the
    per-batch and the running expectations."""
    import numpy as np
    import pandas as pd
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(seed)
    paths, per_batch, frames = [], [], []
    per = rows // batches
    for i in range(batches):
        pdf = pd.DataFrame({"user": rng.integers(0, keys, per).astype(np.int64),
                            # whole numbers: float sums are exact in any order
                            "amount": rng.integers(0, 1000, per).astype(np.float64)})
        d = os.path.join(root, f"batch={i}")
        os.makedirs(d)
        pq.write_table(pa.Table.from_pandas(pdf, preserve_index=False),
                       os.path.join(d, "part-0.parquet"))
        paths.append(d)
        frames.append(pdf)
        per_batch.append(_totals(pdf))
    running = _totals(pd.concat(frames, ignore_index=True))
    return paths, per_batch, running


def _totals(pdf: Any) -> Any:
    return pdf.groupby("user").agg(count=("amount", "size"), total=("amount", "sum"))


def _read(path: str) -> Any:
    import pyarrow.parquet as pq

    return pq.read_table(path).to_pandas().set_index("user").sort_index()[["count", "total"]]


def mismatch(variant: str, work: str, per_batch: list[Any], running: Any) -> str | None:
    """What differs from pandas: each batch's output (floor, empty) or the running totals
    after the last batch (stateful)."""
    import numpy as np
    import pandas as pd

    out = os.path.join(work, "out")
    if variant in ("nostate", "empty"):
        pairs = [(_read(os.path.join(out, f"batch={i}")), e) for i, e in enumerate(per_batch)]
    else:
        got = pd.concat([_read(os.path.join(out, f"batch={i}")).assign(batch=i)
                         for i in range(len(per_batch))])
        last = got.reset_index().sort_values(["user", "batch"]).groupby("user").tail(1)
        pairs = [(last.set_index("user").sort_index()[["count", "total"]], running)]
    for got, expected in pairs:
        if len(got) != len(expected) or not (got.index == expected.index).all():
            return f"{len(got)} users in the output, {len(expected)} expected"
        if not (got["count"].to_numpy() == expected["count"].to_numpy()).all():
            return "per-user counts differ"
        if not np.array_equal(got["total"].to_numpy(), expected["total"].to_numpy()):
            return "per-user totals differ"
    return None


# ---- Spark ------------------------------------------------------------------------------------

def session() -> Any:
    import cases_spark

    # A worker caches the providers of a few partitions (one per partition and round here);
    # two are enough to keep each round's backends open between its batches, and the
    # previous round's are closed instead of piling up.
    os.environ["STATEENGINE_MAX_CACHED_PARTITIONS"] = "2"
    return cases_spark.session()


def cpu_seconds(spark: Any) -> tuple[float, float]:
    """CPU seconds so far of the session's JVM and of the Python workers below it (Linux
    /proc; a classic session started by this process)."""
    from spark_cpu_split import cpu_seconds as split

    return split(spark.sparkContext._gateway.proc.pid)


def load() -> float:
    return round(os.getloadavg()[0], 2)


def run_size(spark: Any, scratch: str, rows: int, keys: int, batches: int, rounds: int,
             variants: list[str], keep_state: bool) -> tuple[dict[str, Any], str | None]:
    """Every variant ``rounds`` times in alternation; the figures, and the checkpoint of the
    last typed round when ``keep_state``."""
    root = tempfile.mkdtemp(prefix=f"scale-{rows}-", dir=scratch)
    t0 = time.perf_counter()
    paths, per_batch, running = generate(os.path.join(root, "data"), rows, keys, batches)
    print(f"[{rows:,} rows over {keys:,} keys ({len(running):,} distinct), {batches} batches; "
          f"data in {time.perf_counter() - t0:.0f} s]", flush=True)
    runs: dict[str, list[dict[str, Any]]] = {v: [] for v in variants}
    kept = None
    # the JVM's first job at this size (JIT, shuffle buffers) lands on no variant's clock
    shutil.rmtree(os.path.join(root, "warm"), ignore_errors=True)
    run_variant(spark, variants[0], paths[:1], os.path.join(root, "warm"))
    shutil.rmtree(os.path.join(root, "warm"), ignore_errors=True)
    for r in range(rounds):
        # ABBA: whichever goes first in a round goes last in the next
        for v in (variants if r % 2 == 0 else variants[::-1]):
            work = os.path.join(root, f"{v}-{r}")
            before = load()
            cpu0 = cpu_seconds(spark)
            times = run_variant(spark, v, paths, work)
            cpu = [round(b - a, 1) for a, b in zip(cpu0, cpu_seconds(spark))]
            problem = mismatch(v, work, per_batch, running)
            runs[v].append({"seconds": round(sum(times), 2),
                            "batches": [round(t, 2) for t in times], "cpu_jvm_python": cpu,
                            "load": [before, load()], "matches_pandas": problem is None})
            print(f"  round {r} {v:8s} {sum(times):7.2f} s  {rows / sum(times):>10,.0f} rows/s"
                  f"  batches {' '.join(f'{t:.2f}' for t in times)}  CPU s JVM {cpu[0]} Python "
                  f"{cpu[1]}  load {before} -> {load()}"
                  + (f"  RESULTS DIFFER: {problem}" if problem else ""), flush=True)
            if v != "nostate":
                tasks = task_times(os.path.join(work, "state"), batches)
                runs[v][-1]["tasks"] = tasks
                print("      per batch, each task's [load: empty/restored/reused, load ms, update "
                      "ms, commit ms]: "
                      + "  ".join(str(t) for t in tasks), flush=True)
            if keep_state and v == "typed" and r == rounds - 1:
                kept = os.path.join(work, "state")
            else:
                shutil.rmtree(work, ignore_errors=True)
    floor = runs.get("nostate")
    figures: dict[str, Any] = {"rows": rows, "keys": keys, "distinct": len(running),
                               "batches": batches, "variants": {}}
    for v, rs in runs.items():
        best = min(x["seconds"] for x in rs)
        entry: dict[str, Any] = {"best_s": best, "rows_per_s": int(rows / best), "rounds": rs}
        if floor and v != "nostate":
            entry["best_ratio"] = round(min(x["seconds"] for x in floor) / best, 3)
            entry["round_ratios"] = [round(f["seconds"] / x["seconds"], 3)
                                     for f, x in zip(floor, rs)]
        figures["variants"][v] = entry
    shutil.rmtree(os.path.join(root, "data"), ignore_errors=True)
    return figures, kept


# ---- restore and rescale ------------------------------------------------------------------------

def bigint_key_groups(keys: Any, max_parallelism: int = MAX_PARALLELISM) -> Any:
    """Key groups of int64 keys, vectorized: Spark's Murmur3 hashLong (seed 42) of each key,
    pmod max_parallelism, as routing's ``pmod(hash(user), maxP)`` computes them."""
    import numpy as np

    def mix(h: Any, k: Any) -> Any:
        k = (k * np.uint32(0xCC9E2D51)) & 0xFFFFFFFF
        k = ((k << 15) | (k >> 17)) & 0xFFFFFFFF
        k = (k * np.uint32(0x1B873593)) & 0xFFFFFFFF
        h = h ^ k
        h = ((h << 13) | (h >> 19)) & 0xFFFFFFFF
        return (h * np.uint32(5) + np.uint32(0xE6546B64)) & 0xFFFFFFFF

    k = keys.astype(np.int64).view(np.uint64)
    h = np.full(len(k), 42, dtype=np.uint64)
    h = mix(h, k & 0xFFFFFFFF)
    h = mix(h, k >> np.uint64(32))
    h ^= np.uint64(8)
    h ^= h >> np.uint64(16)
    h = (h * np.uint64(0x85EBCA6B)) & 0xFFFFFFFF
    h ^= h >> np.uint64(13)
    h = (h * np.uint64(0xC2B2AE35)) & 0xFFFFFFFF
    h ^= h >> np.uint64(16)
    signed = h.astype(np.uint32).view(np.int32).astype(np.int64)
    return np.mod(signed, max_parallelism)


def build_state(checkpoint: str, local: str, keys: int, batches: int = 4) -> int:
    """The typed job's state without Spark: ``batches`` versions committed by 2 partitions,
    each putting the structs of a batch's users (``keys`` rows per version drawn over
    ``keys``, as the full-size job draws them). Returns the last version."""
    import numpy as np

    from stateengine import StateStoreProvider, ValueStateDescriptor

    rng = np.random.default_rng(5)
    for b in range(batches):
        users = np.unique(rng.integers(0, keys, 2 * keys // batches))
        groups = bigint_key_groups(users)
        for p in range(PARTITIONS):
            provider = StateStoreProvider(checkpoint, "default", p, PARTITIONS, key_type=int,
                                          descriptors=[ValueStateDescriptor("acc", value_type=STRUCT)],
                                          local_dir=local)
            store = provider.get_store(b)
            acc = store.get_state(ValueStateDescriptor("acc", value_type=STRUCT))
            mine = users[groups * PARTITIONS // MAX_PARALLELISM == p]
            acc.put_many(mine, {"count": np.full(len(mine), b + 1),
                                "total": mine.astype(np.float64)})
            store.commit()
            provider.close()
    return batches


MODES = {"check off": "restores open the files directly (set_rocksdb_file_checks(False))",
         "check, cold": "the child reads every table (no memo: another machine's state)",
         "check, memo": "the machine-wide memo holds what the writers recorded (this machine)"}


def restore_rescale(checkpoint: str, version: int, scratch: str, rounds: int,
                    memo_dir: str) -> dict[str, Any]:
    """2 -> 2, 2 -> 3 and 3 -> 2 restores of ``checkpoint``, partitions one after another in
    this process, each as the first restore of its process, in the three MODES in alternation.
    ``memo_dir`` is the machine-wide memo the writers used."""
    from stateengine import StateStoreProvider, ValueStateDescriptor
    from stateengine.checkpoint import untrusted

    desc = [ValueStateDescriptor("acc", value_type=STRUCT)]
    out: dict[str, Any] = {}
    untrusted.configure_check_memo(memo_dir)
    written: list[str] = []  # the writers' records

    def restore(parallelism: int, v: int, tag: str, mode: str,
                commit: bool = False) -> dict[str, Any]:
        parts, keys = [], 0
        for p in range(parallelism):
            if mode != "prep":
                untrusted.forget_checks()  # a first restore in its own process
            if mode == "check, memo":
                for name in written:
                    open(os.path.join(memo_dir, name), "w").close()
            untrusted.set_rocksdb_file_checks(mode not in ("check off", "prep"))
            local = tempfile.mkdtemp(prefix=f"{tag}-p{p}-", dir=scratch)
            provider = StateStoreProvider(checkpoint, "default", p, parallelism, key_type=int,
                                          descriptors=desc, local_dir=local)
            t0 = time.perf_counter()
            store = provider.get_store(v)
            secs = time.perf_counter() - t0
            keys += store.backend.num_state_entries()
            parts.append(round(secs, 3))
            if commit:
                t0 = time.perf_counter()
                store.commit()
                parts[-1] = [parts[-1], round(time.perf_counter() - t0, 3)]
            else:
                store.abort()
            provider.close()
            shutil.rmtree(local, ignore_errors=True)
        first = [x[0] if isinstance(x, list) else x for x in parts]
        return {"partitions_s": parts, "sum_s": round(sum(first), 3),
                "max_s": round(max(first), 3), "keys": keys}

    # what the writers recorded, plus what 3 partitions record committing version + 1 (the
    # 3 -> 2 restores' state), as a job that ran at 3 partitions on this machine leaves it
    out["commit_3"] = restore(3, version, "prep", "prep", commit=True)
    written[:] = os.listdir(memo_dir)
    for r in range(rounds):
        for mode in (MODES if r % 2 == 0 else list(MODES)[::-1]):
            for name, (n, v) in {"2to2": (2, version), "2to3": (3, version),
                                 "3to2": (2, version + 1)}.items():
                res = restore(n, v, name, mode)
                out.setdefault(name, {}).setdefault(mode, []).append(res)
                print(f"  restore {name} ({mode}): sum {res['sum_s']:.2f} s, slowest partition "
                      f"{res['max_s']:.2f} s, {res['keys']:,} keys, partitions "
                      f"{res['partitions_s']}, load {load()}", flush=True)
    untrusted.set_rocksdb_file_checks(True)
    untrusted.configure_check_memo(None)
    summary: dict[str, Any] = {"commit_3": out.pop("commit_3"), "modes": MODES,
                               "checkpoint_bytes": sum(
                                   os.path.getsize(os.path.join(d, f))
                                   for d, _, fs in os.walk(checkpoint) for f in fs)}
    for name, by in out.items():
        summary[name] = {mode: {"best_sum_s": min(x["sum_s"] for x in rs),
                                "best_max_s": min(x["max_s"] for x in rs),
                                "keys": rs[0]["keys"],
                                "rounds": [[x["sum_s"], x["max_s"], x["partitions_s"]] for x in rs]}
                         for mode, rs in by.items()}
    return summary


# ---- driver -------------------------------------------------------------------------------------

def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--full", action="store_true", help="4M rows over 2M keys and 20M over 10M, "
                   "then restore/rescale of the 10M-key state")
    p.add_argument("--sizes", default=None, help="ROWS:KEYS[,ROWS:KEYS...] (default 200000:100000)")
    p.add_argument("--batches", type=int, default=4)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--variants", default="nostate,typed",
                   help=f"comma-separated, of {', '.join(VARIANTS)} (nostate is the floor)")
    p.add_argument("--rescale", action=argparse.BooleanOptionalAction, default=None,
                   help="restore/rescale the last typed state (default: with --full)")
    p.add_argument("--rescale-only", action="store_true", help="no Spark: build a typed state "
                   "of --keys keys and restore/rescale it")
    p.add_argument("--keys", type=int, default=1_000_000, help="keys of --rescale-only")
    p.add_argument("--rescale-rounds", type=int, default=2)
    p.add_argument("--memory-budget-mb", type=int, default=None,
                   help="each Python worker's memory budget (map_with_state's memory_budget_mb; "
                   "default: the engine's 256 MiB)")
    p.add_argument("--rocksdb", choices=("debian", "release"), default=None)
    p.add_argument("--scratch", default=None, help="parent of the scratch directory")
    p.add_argument("--out", default=None, help="results directory (default bench/results; "
                   "bench/results/quick unless --full)")
    args = p.parse_args(argv)
    unknown = set(args.variants.split(",")) - set(VARIANTS)
    if unknown:
        p.error(f"unknown variants {sorted(unknown)}")
    return args


def main(argv: list[str]) -> int:
    args = parse(argv)
    build = builds.use(args.rocksdb, False, __file__)  # may restart this script
    import history

    global MEMORY_BUDGET_MB
    MEMORY_BUDGET_MB = args.memory_budget_mb
    sizes = ([tuple(int(x) for x in s.split(":")) for s in args.sizes.split(",")]
             if args.sizes else FULL if args.full else SMALL)
    rescale = (args.full or args.rescale_only) if args.rescale is None else args.rescale
    out_dir = args.out or os.path.join(HERE, "results", *(() if args.full else ("quick",)))
    scratch = tempfile.mkdtemp(prefix="stateengine-scale-", dir=args.scratch)
    doc: dict[str, Any] = {"command": " ".join(["python bench/scale.py", *argv]),
                           "rocksdb": builds.describe(build)["rocksdb"],
                           "cpus": os.cpu_count(), "memory_budget_mb": args.memory_budget_mb,
                           "load_at_start": list(os.getloadavg())}
    print(f"bench/scale.py on {doc['rocksdb']}, scratch {scratch}, load {load()}", flush=True)
    failed = False
    try:
        kept, version = None, args.batches
        if args.rescale_only:
            kept = os.path.join(scratch, "built", "state")
            t0 = time.perf_counter()
            from stateengine.checkpoint import untrusted

            untrusted.configure_check_memo(os.path.join(scratch, "built", "local", "checked-tables"))
            version = build_state(kept, os.path.join(scratch, "built", "local"), args.keys)
            doc["state"] = {"keys": args.keys, "build_s": round(time.perf_counter() - t0, 1)}
            print(f"[state of {args.keys:,} keys built in {doc['state']['build_s']} s]")
        else:
            from stateengine.spark.runtime import drop_cached

            variants = args.variants.split(",")
            spark = session()
            try:
                doc["worker_extension"] = os.path.relpath(builds.check_workers(spark, build),
                                                          os.path.dirname(HERE))
                warm = tempfile.mkdtemp(dir=scratch)  # worker start-up, imports: not recorded
                run_size(spark, warm, 20_000, 2_000, 2, 1, variants, False)
                doc["sizes"] = []
                for i, (rows, keys) in enumerate(sizes):
                    figures, kept = run_size(spark, scratch, rows, keys, args.batches,
                                             args.rounds, variants,
                                             rescale and i == len(sizes) - 1)
                    doc["sizes"].append(figures)
                    failed |= any(not x["matches_pandas"] for e in figures["variants"].values()
                                  for x in e["rounds"])
                    for v, e in figures["variants"].items():
                        if "best_ratio" in e:
                            print(f"  {v}: best {e['best_s']} s, {e['best_ratio']} of the floor "
                                  f"(rounds {e['round_ratios']})", flush=True)
            finally:
                spark.stop()
                drop_cached()
        if rescale and kept:
            print("[restore and rescale]", flush=True)
            memo = os.path.join(os.path.dirname(kept), "local", "checked-tables")
            doc["restore"] = restore_rescale(kept, version, scratch, args.rescale_rounds, memo)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    doc["load_at_end"] = list(os.getloadavg())
    path = history.record(out_dir, "scale", doc)
    print(f"wrote {path}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
