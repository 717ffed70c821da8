"""Where the time of the bench's Spark job goes when stateengine runs Spark's StatefulProcessor
(``spark.processor``) and, for comparison, ``apply_with_state`` (``spark.grouped``): py-spy over
the Spark Python workers (``--subprocesses``) while one batch of the bench's job runs.

    python bench/profile_processor.py                        # 200k rows over 50k users
    python bench/profile_processor.py --rows 400000 --variants processor

Writes bench/results/profile-processor.txt: per variant the rate while sampled and the share
of the workers' samples per stage (the user's code, pandas DataFrame construction inside it,
stateengine's grouping and output, the state calls).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import builds  # noqa: E402

# (label, frame name): shares of worker samples whose stack holds the frame (the name as
# py-spy gives it, or its last dotted parts; a name ending in "." matches as a prefix)
STAGES = {
    "processor": [
        ("stateengine task (run_pandas)", "_Job.run_pandas"),
        ("  the processor's handleInputRows (user code)", "RunningTotals.handleInputRows"),
        ("    pandas.DataFrame(...) of its output row", "DataFrame.__init__"),
        ("    pdf['amount'].sum()", "Series.sum"),
        ("    ValueState exists/get/update", "ValueState."),
        ("  grouping rows by key (slices)", "_iter_groups"),
        ("  joining the handlers' frames", "column_arrays"),
    ],
    "grouped": [
        ("stateengine task (apply_with_state body)", "apply_with_state.<locals>.body"),
        ("  the user function", "run_grouped.<locals>.per_user"),
        ("    rows['amount'].sum()", "Series.sum"),
        ("  grouping rows by key (slices)", "_iter_groups"),
        ("  output rows to a frame", "_Output.flush"),
    ],
}


def child(variant: str, rows: int, keys: int) -> None:
    import cases_spark

    spark = cases_spark.session()
    root = tempfile.mkdtemp(prefix="stateengine-profile-")
    try:
        paths, stream_dir, _ = cases_spark.generate(os.path.join(root, "data"), rows, keys, 1, 5)
        work = os.path.join(root, variant)
        os.makedirs(work)
        t0 = time.perf_counter()
        cases_spark.RUNNERS[variant](spark, paths, stream_dir, work)
        print(f"RATE {rows / (time.perf_counter() - t0):.0f}", flush=True)
    finally:
        spark.stop()
        shutil.rmtree(root, ignore_errors=True)


def _matches(name: str, pattern: str) -> bool:
    if pattern.endswith("."):
        return name.startswith(pattern)
    return name == pattern or name.endswith("." + pattern)


def summarize(raw: str, variant: str) -> tuple[list[str], int]:
    """Stage shares over the samples of Spark's Python workers (pyspark.daemon processes)."""
    inclusive: Counter = Counter()
    total = 0
    for line in open(raw):
        stack, _, n = line.rstrip("\n").rpartition(" ")
        if "pyspark.daemon" not in stack or "main (worker.py" not in stack:
            continue
        total += int(n)
        names = {frame.split(" (")[0] for frame in stack.split(";")}
        for label, frame in STAGES[variant]:
            if any(_matches(name, frame) for name in names):
                inclusive[label] += int(n)
    lines = [f"{label:<52} {100 * inclusive[label] / max(total, 1):5.1f}%"
             for label, _ in STAGES[variant]]
    return lines, total


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=200_000)
    p.add_argument("--keys", type=int, default=50_000)
    p.add_argument("--variants", default="processor,grouped")
    p.add_argument("--rocksdb", choices=("debian", "release"), default=None)
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        child(args.child, args.rows, args.keys)
        return 0
    build = builds.use(args.rocksdb, False, __file__)
    pyspy = shutil.which("py-spy") or os.path.join(os.path.dirname(sys.executable), "py-spy")
    out = [f"Spark job of bench/cases_spark.py, one batch: {args.rows} rows over {args.keys} "
           f"users, local[2], build {build}; shares of the Spark Python workers' samples", ""]
    for variant in args.variants.split(","):
        raw = tempfile.mktemp(suffix=".txt")
        proc = subprocess.run(
            [pyspy, "record", "--subprocesses", "-r", "100", "-f", "raw", "-o", raw, "--",
             sys.executable, __file__, "--child", variant, "--rows", str(args.rows),
             "--keys", str(args.keys)], capture_output=True, text=True)
        rate = [ln.split()[1] for ln in proc.stdout.splitlines() if ln.startswith("RATE ")]
        if proc.returncode or not rate:
            raise SystemExit(f"profiling {variant} failed:\n{proc.stdout[-2000:]}"
                             f"{proc.stderr[-2000:]}")
        lines, total = summarize(raw, variant)
        os.unlink(raw)
        out += [f"spark.{variant}: {int(rate[0]):,} rows/s while sampled, {total} worker "
                f"samples", *lines, ""]
    text = "\n".join(out)
    print(text)
    with open(os.path.join(HERE, "results", "profile-processor.txt"), "w") as f:
        f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
