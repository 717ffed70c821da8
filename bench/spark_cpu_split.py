"""Where the CPU of the bench's Spark job goes: per key-batch, the wall time and the CPU time of
the JVM and of Spark's Python workers (read from /proc for the session's JVM and every Python
process below it), for each variant of bench/cases_spark.py on the bench's full-size data.

    python bench/spark_cpu_split.py                                  # grouped, processor
    python bench/spark_cpu_split.py --variants grouped,processor,transformWithStateInPandas
    python bench/spark_cpu_split.py --rows 400000 --keys 20000 --batches 4

Each variant runs twice on one session and the second (warm) run is reported; results go to
bench/results/cpu-split.json. Linux only (/proc).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import cases_spark  # noqa: E402

TICKS = os.sysconf("SC_CLK_TCK")


def _processes(with_reaped: bool = False) -> dict[int, tuple[int, str, float]]:
    """pid -> (parent pid, command name, user + system CPU seconds); ``with_reaped`` adds the
    CPU of the process's children that ended and were waited for (a JVM's short-lived
    ``readlink``/``chmod`` helpers, a daemon's finished workers)."""
    out = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:  # ended meanwhile
            continue
        name = stat[stat.index("(") + 1:stat.rindex(")")]
        fields = stat.rsplit(")", 1)[1].split()
        ticks = int(fields[11]) + int(fields[12])
        if with_reaped:
            ticks += int(fields[13]) + int(fields[14])
        out[int(entry)] = (int(fields[1]), name, ticks / TICKS)
    return out


def cpu_seconds(jvm_pid: int, with_reaped: bool = False) -> tuple[float, float]:
    """(the JVM's CPU seconds, the summed CPU seconds of the Python processes below it);
    ``with_reaped`` as in ``_processes``."""
    procs = _processes(with_reaped)
    below, todo = [], [jvm_pid]
    while todo:
        parent = todo.pop()
        children = [p for p, (pp, _, _) in procs.items() if pp == parent]
        below += children
        todo += children
    return procs[jvm_pid][2], sum(procs[p][2] for p in below if "python" in procs[p][1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--variants", default="grouped,processor",
                   help=f"comma-separated, of {', '.join(cases_spark.RUNNERS)}")
    p.add_argument("--rows", type=int, default=1_200_000)
    p.add_argument("--keys", type=int, default=50_000)
    p.add_argument("--batches", type=int, default=6)
    args = p.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = cases_spark.session()
    jvm = spark.sparkContext._gateway.proc.pid  # bench-only: classic session in this process
    root = tempfile.mkdtemp(prefix="stateengine-cpu-split-")
    report = []
    try:
        paths, stream_dir, _ = cases_spark.generate(os.path.join(root, "data"), args.rows,
                                                    args.keys, args.batches, seed=21)
        per_batch = [len(set(pd_users)) for pd_users in _users(paths)]
        key_batches = sum(per_batch)
        for name in args.variants.split(","):
            for attempt in range(2):  # the first run warms the JVM and the workers
                work = os.path.join(root, f"{name}-{attempt}")
                os.makedirs(work)
                jvm0, py0 = cpu_seconds(jvm)
                t0 = time.perf_counter()
                cases_spark.RUNNERS[name](spark, paths, stream_dir, work)
                wall = time.perf_counter() - t0
                jvm1, py1 = cpu_seconds(jvm)
                shutil.rmtree(work, ignore_errors=True)
            row = {"variant": name, "rows_per_s": round(args.rows / wall),
                   "wall_us": round(wall / key_batches * 1e6, 1),
                   "jvm_cpu_us": round((jvm1 - jvm0) / key_batches * 1e6, 1),
                   "python_cpu_us": round((py1 - py0) / key_batches * 1e6, 1)}
            report.append(row)
            print(f"{name:28s} {row['rows_per_s']:>9,} rows/s; per key-batch: wall "
                  f"{row['wall_us']:6.1f} us, JVM CPU {row['jvm_cpu_us']:6.1f} us, Python "
                  f"workers' CPU {row['python_cpu_us']:6.1f} us", flush=True)
    finally:
        spark.stop()
        shutil.rmtree(root, ignore_errors=True)
    out = os.path.join(HERE, "results", "cpu-split.json")
    with open(out, "w") as f:
        json.dump({"rows": args.rows, "keys": args.keys, "batches": args.batches,
                   "key_batches": key_batches, "variants": report}, f, indent=2)
    print(f"wrote {out}")


def _users(paths: list[str]) -> list:
    import pyarrow.parquet as pq

    return [pq.read_table(p, columns=["user"]).column("user").to_numpy() for p in paths]


if __name__ == "__main__":
    main()
