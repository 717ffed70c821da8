"""stateengine benchmarks: state access, typed state, snapshots, checkpoints, Spark jobs and
memory.

    python bench/run.py                    # full run (~30 min on 2 cores)
    python bench/run.py --quick            # seconds-long smoke run of every case
    python bench/run.py --only 'state.value*,baseline.*'
    python bench/run.py --only 'typed.*'     # typed (struct) state against int64 state
    python bench/run.py --rocksdb debian   # Debian's librocksdb instead of the wheel's

By default the extension links what the release wheel links: the static Release RocksDB of
scripts/build-rocksdb.sh (built on first use, then cached); ``--rocksdb debian`` measures
Debian's librocksdb (no NDEBUG) instead.

Writes into bench/results (or --out): one line per run appended to history.jsonl (its headline
figures, see bench/history.py), the run's full JSON in runs/ (not kept in git), and for a run
of every case latest.json, latest.md and latest.png. A --quick run without --out writes into
bench/results/quick/ (not kept in git), so it never replaces the latest real run.
Numbers are never asserted anywhere; targets are evaluated and reported (bench/targets.py).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback

# numpy's OpenBLAS threads spin-wait after a BLAS call; on a 2-core machine they take CPU from
# the loop being timed (seen in perf profiles of the batch cases). Nothing here needs them.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import builds  # noqa: E402

GROUPS = ("state", "typed", "snapshot", "spark", "memory")


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="tiny sizes: checks that cases run")
    p.add_argument("--only", default="", help="comma-separated case name patterns (fnmatch), "
                   "e.g. 'state.valueGet.*,spark.*'; see --list")
    p.add_argument("--rocksdb", choices=("debian", "release"), default=None,
                   help="librocksdb to link (default: release, the release wheel's static "
                   "Release RocksDB; debian: Debian's shared librocksdb, built without NDEBUG)")
    p.add_argument("--out", default=None, help="results directory (default: bench/results, "
                   "with --quick bench/results/quick)")
    p.add_argument("--scratch", default=None, help="parent of the scratch directory "
                   "(default: the system temp dir; the full run needs ~5 GB)")
    p.add_argument("--rebuild", action="store_true", help="force rebuilding the extension")
    p.add_argument("--list", action="store_true", help="print the case names and exit")
    return p.parse_args(argv)


def all_case_names() -> list[str]:
    import cases_memory
    import cases_snapshot
    import cases_spark
    import cases_state
    import cases_typed

    return (cases_state.case_names() + cases_typed.case_names() + cases_snapshot.case_names()
            + cases_spark.case_names() + cases_memory.case_names())


def main(argv: list[str]) -> int:
    args = parse(argv)
    if args.out is None:
        args.out = os.path.join(HERE, "results", *(("quick",) if args.quick else ()))
    if args.list:
        print("\n".join(all_case_names()))
        return 0
    build = builds.use(args.rocksdb, args.rebuild, __file__)  # may restart this script

    import cases_memory
    import cases_snapshot
    import cases_spark
    import cases_state
    import cases_typed
    import report
    from harness import FULL, QUICK, Bench

    only = [p.strip() for p in args.only.split(",") if p.strip()]
    names = all_case_names()
    unknown = [p for p in only if not any(__import__("fnmatch").fnmatchcase(n, p) for n in names)]
    if unknown:
        raise SystemExit(f"bench: no case matches {unknown}; see --list")
    bench = Bench(QUICK if args.quick else FULL, only, args.scratch)
    machine = report.machine_info(builds.describe(build))
    print(f"stateengine bench ({bench.scale.name}), {machine['rocksdb']}, scratch {bench.scratch}",
          flush=True)
    started = time.time()
    modules = {"state": cases_state, "typed": cases_typed, "snapshot": cases_snapshot,
               "spark": cases_spark, "memory": cases_memory}
    try:
        for group in GROUPS:
            module = modules[group]
            if not bench.wants_any(module.case_names()):
                continue
            print(f"[{group}]", flush=True)
            try:
                module.run(bench)
            except Exception:  # one broken group must not lose the others' numbers
                bench.errors[group] = traceback.format_exc()
                print(bench.errors[group], file=sys.stderr, flush=True)
    finally:
        bench.cleanup()
    machine["wall_seconds"] = round(time.time() - started, 1)
    machine["argv"] = " ".join(["python bench/run.py", *argv])
    paths = report.write(args.out, bench, machine, partial=bool(only))
    print("wrote " + ", ".join(paths), flush=True)
    return 1 if bench.errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
