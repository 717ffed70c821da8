"""Runs the fuzz harnesses: the libFuzzer binaries of tests/fuzz/native (built by build.py with
ASan + UBSan) and the atheris harnesses of tests/fuzz/python.

    python -m tests.fuzz.run --list
    python -m tests.fuzz.run row_codec --seconds 60
    python -m tests.fuzz.run all --hours 2        # the hours shared round-robin, 10 min slices
    python -m tests.fuzz.run all --replay          # every corpus input once (regressions)

Each harness fuzzes a working corpus under build/fuzz/corpus/<harness> that starts as a copy
of the seed corpus tests/fuzz/corpus/<harness> and keeps what libFuzzer adds; crashes and
oracle failures land in build/fuzz/findings/<harness>/ (libFuzzer's crash-*, leak-*,
timeout-*, oom-* files). Everything runs at nice 19 on one core (one libFuzzer process).
The log (build/fuzz/log.jsonl) gets one line per run: harness, seconds, CPU seconds, exit
status, new findings; ``--summary`` adds them up.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import resource
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PROJECT = os.path.dirname(os.path.dirname(HERE))
OUT = os.path.join(PROJECT, "build", "fuzz")
SEEDS = os.path.join(HERE, "corpus")
LOG = os.path.join(OUT, "log.jsonl")
PYTHON_HARNESSES = sorted(os.path.basename(p)[:-len("_fuzz.py")]
                          for p in glob.glob(os.path.join(HERE, "python", "*_fuzz.py")))
# libFuzzer options: inputs up to 16 KiB, 2 GiB of RSS, 20 s per input at most
OPTIONS = ["-max_len=16384", "-rss_limit_mb=2048", "-timeout=20", "-print_final_stats=1"]


def native_harnesses() -> list[str]:
    from tests.fuzz.build import harnesses

    return harnesses()


def all_harnesses() -> list[str]:
    return native_harnesses() + PYTHON_HARNESSES


def command(name: str, corpus: list[str], extra: list[str]) -> list[str]:
    """The command line that fuzzes (or, with -runs=0 and files, replays) one harness."""
    if name in PYTHON_HARNESSES:
        script = os.path.join(HERE, "python", f"{name}_fuzz.py")
        return [sys.executable, script, *OPTIONS, *extra, *corpus]
    from tests.fuzz.build import build

    return [build([name])[name], *OPTIONS, *extra, *corpus]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    # Python's own allocations are not ours to report; UB must stop the run
    env.setdefault("ASAN_OPTIONS", "detect_leaks=0:abort_on_error=1:allocator_may_return_null=1")
    env.setdefault("UBSAN_OPTIONS", "print_stacktrace=1:halt_on_error=1")
    return env


def fuzz(name: str, seconds: float, quiet: bool = True) -> dict:
    """Fuzzes one harness for about ``seconds``; returns the log record."""
    work = os.path.join(OUT, "corpus", name)
    findings = os.path.join(OUT, "findings", name)
    os.makedirs(work, exist_ok=True)
    os.makedirs(findings, exist_ok=True)
    for seed in glob.glob(os.path.join(SEEDS, name, "*")):
        dest = os.path.join(work, os.path.basename(seed))
        if not os.path.exists(dest):
            shutil.copyfile(seed, dest)
    before = set(os.listdir(findings))
    cmd = command(name, [work], [f"-max_total_time={max(1, int(seconds))}",
                                 f"-artifact_prefix={findings}/"])
    usage0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    proc = subprocess.run(["nice", "-n", "19", *cmd], cwd=os.path.join(HERE, "python"),
                          env=_env(), stdout=subprocess.DEVNULL if quiet else None,
                          stderr=subprocess.PIPE, text=True)
    usage1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    record = {"harness": name, "seconds": round(time.monotonic() - started, 1),
              "cpu_seconds": round(usage1.ru_utime - usage0.ru_utime
                                   + usage1.ru_stime - usage0.ru_stime, 1),
              "exit": proc.returncode, "findings": sorted(set(os.listdir(findings)) - before),
              "when": time.strftime("%Y-%m-%dT%H:%M:%S")}
    stats = [line for line in proc.stderr.splitlines() if line.startswith(("stat::", "Done "))]
    record["stats"] = stats[-8:]
    if proc.returncode != 0:
        record["tail"] = proc.stderr[-3000:]
    os.makedirs(OUT, exist_ok=True)
    with open(LOG, "a") as f:
        f.write(json.dumps(record) + "\n")
    return record


def replay(name: str, dirs: list[str] | None = None) -> subprocess.CompletedProcess:
    """Runs every input of the seed corpus (and dirs) through the harness once."""
    files = [p for d in ([os.path.join(SEEDS, name)] + (dirs or []))
             for p in sorted(glob.glob(os.path.join(d, "*"))) if os.path.isfile(p)]
    return subprocess.run(command(name, files, ["-runs=0"] if name in PYTHON_HARNESSES else []),
                          cwd=os.path.join(HERE, "python"), env=_env(), capture_output=True,
                          text=True)


def summary() -> dict:
    """CPU hours and findings per harness, from the log."""
    per: dict[str, dict] = {}
    if os.path.exists(LOG):
        for line in open(LOG):
            r = json.loads(line)
            s = per.setdefault(r["harness"], {"runs": 0, "cpu_hours": 0.0, "findings": []})
            s["runs"] += 1
            s["cpu_hours"] += r["cpu_seconds"] / 3600
            s["findings"] += r["findings"]
    for s in per.values():
        s["cpu_hours"] = round(s["cpu_hours"], 3)
    return {"per_harness": per,
            "cpu_hours": round(sum(s["cpu_hours"] for s in per.values()), 3)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("harness", nargs="?", default="all", help="a harness name, or all")
    p.add_argument("--seconds", type=float, default=None)
    p.add_argument("--hours", type=float, default=None)
    p.add_argument("--slice", type=float, default=600.0, help="seconds per turn with --hours")
    p.add_argument("--replay", action="store_true", help="run the corpus once, no fuzzing")
    p.add_argument("--list", action="store_true")
    p.add_argument("--summary", action="store_true")
    args = p.parse_args(argv)
    sys.path.insert(0, PROJECT)
    if args.list:
        print("\n".join(all_harnesses()))
        return 0
    if args.summary:
        print(json.dumps(summary(), indent=1))
        return 0
    names = all_harnesses() if args.harness == "all" else [args.harness]
    unknown = set(names) - set(all_harnesses())
    if unknown:
        p.error(f"unknown harness {sorted(unknown)}; --list shows them")
    if args.replay:
        bad = 0
        for name in names:
            proc = replay(name)
            print(f"{name}: exit {proc.returncode}")
            if proc.returncode != 0:
                bad += 1
                print(proc.stderr[-3000:])
        return 1 if bad else 0
    total = args.hours * 3600 if args.hours else (args.seconds or 60) * len(names)
    deadline = time.monotonic() + total
    found = False
    while time.monotonic() < deadline - 5:
        for name in names:
            left = deadline - time.monotonic()
            if left < 5:
                break
            turn = min(left, args.slice if args.hours else (args.seconds or 60))
            rec = fuzz(name, turn)
            print(json.dumps({k: rec[k] for k in ("harness", "seconds", "cpu_seconds", "exit",
                                                  "findings")}), flush=True)
            found |= bool(rec["findings"]) or rec["exit"] != 0
        if not args.hours:
            break
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
