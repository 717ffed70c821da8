"""The compact history of bench runs: one JSON line per run in bench/results/history.jsonl,
with when, where and on which RocksDB it ran and its headline figures. The full results of
the last complete run stay in latest.json/.md/.png; each run's own JSON goes to results/runs/,
which git ignores.

    python bench/history.py RUN.json [...]   # appends the lines of older result files

The other bench scripts keep their last result as ``<name>-latest.json`` and add their own
kind of line through ``record``: bench/s3_commit.py ("bench": "s3_commit": requests, MB and
seconds per commit and per restore), bench/scale.py ("bench": "scale": per size the best
seconds and floor ratios, per restore the best times), bench/crosscheck_cost.py (its whole,
small report).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
from typing import Any

from targets import evaluate

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")

# The figures a reader compares across runs: the state calls against RocksDB, snapshots and
# checkpoints, the Spark jobs against Spark's own stateful operators, and memory.
HEADLINE = (
    "state.valueGet.scalar", "state.valueUpdate.scalar", "state.valueGet.batch.distinct",
    "state.valueUpdate.batch.distinct", "typed.valueGet.batch.struct3",
    "snapshot.full.write", "snapshot.full.restore", "checkpoint.incremental.seconds",
    "spark.vectorized", "spark.grouped", "spark.processor", "spark.applyInPandasWithState",
    "spark.transformWithStateInPandas", "memory.peak_rss",
)


def _build(machine: dict[str, Any]) -> str:
    """release or debian (results from before the build field say it in their rocksdb text)."""
    if machine.get("build"):
        return machine["build"]
    return "debian" if "Debian" in machine.get("rocksdb", "") else "release"


def line(doc: dict[str, Any]) -> dict[str, Any]:
    """One run's history entry, from its results document (report.write's JSON)."""
    m = doc["machine"]
    values = {r["name"]: r["value"] for r in doc["results"]}
    figures = {n: values[n] for n in HEADLINE if n in values}
    if not figures:  # a partial run of other cases: it has few, keep them all
        figures = values
    judged = [t for t in (doc.get("targets") or evaluate(values)) if t["op"]]
    return {
        "bench": "run", "date": m["date"], "commit": m["commit"], "scale": doc["scale"]["name"],
        "rocksdb": _build(m), "command": m.get("argv", ""),
        "load": [(m.get(k) or [None])[0] for k in ("load_at_start", "load_at_end")],
        "wall_s": m.get("wall_seconds"), "cases": len(values),
        "targets_met": f"{sum(1 for t in judged if t['passed'])}/{len(judged)}",
        "errors": sorted(doc.get("errors") or {}),
        "figures": {n: round(v, 4) if abs(v) < 100 else int(round(v)) for n, v in figures.items()},
    }


def s3_line(doc: dict[str, Any]) -> dict[str, Any]:
    """bench/s3_commit.py's entry: [requests, MB up, MB down, seconds] per commit and restore."""
    def cost(r: dict[str, Any]) -> list[Any]:
        return [r["requests"], round(r["bytes_up"] / 1e6, 2), round(r["bytes_down"] / 1e6, 2),
                r["seconds"]]

    # (runs before the machine-local file cache had one restore, on another machine)
    restores = {k[len("restore_"):] if k != "restore" else "other_machine": cost(v)
                for k, v in doc.items() if k.startswith("restore")}
    return {"bench": "s3_commit", "date": doc.get("date"), "commit": doc.get("commit"),
            "keys": doc["keys"], "value_bytes": doc["value_bytes"], "change": doc["change"],
            **{k: doc[k] for k in ("latency_ms", "transfer_threads") if k in doc},
            "commits": [cost(c) for c in doc["commits"]], "restores": restores}


def scale_line(doc: dict[str, Any]) -> dict[str, Any]:
    """bench/scale.py's entry: per size the best seconds of each variant and its ratio to the
    floor (best, and per round); per restore the best sum and slowest partition per mode."""
    sizes = []
    for size in doc.get("sizes", []):
        sizes.append({"rows": size["rows"], "keys": size["keys"],
                      **{v: [e["best_s"], e.get("best_ratio"), e.get("round_ratios")]
                         for v, e in size["variants"].items()}})
    restore = {name: {mode: [r["best_sum_s"], r["best_max_s"]] for mode, r in by.items()}
               for name, by in (doc.get("restore") or {}).items()
               if name in ("2to2", "2to3", "3to2")}
    load = [round((doc.get(k) or [0])[0], 2) for k in ("load_at_start", "load_at_end")]
    return {"bench": "scale", "date": doc.get("date"), "commit": doc.get("commit"),
            "command": doc.get("command"), "rocksdb": doc.get("rocksdb"), "load": load,
            "sizes": sizes, "restore": restore}


def append(path: str, doc: dict[str, Any], bench: str = "run") -> None:
    """Appends the history line of a results document: bench/run.py's (``run``), or another
    bench script's (s3_commit's cost table, any other's small report as it is)."""
    if bench == "run":
        entry = line(doc)
    elif bench == "s3_commit":
        entry = s3_line(doc)
    elif bench == "scale":
        entry = scale_line(doc)
    else:
        entry = {"bench": bench, "date": doc.get("date"), "commit": doc.get("commit"),
                 **{k: v for k, v in doc.items() if k not in ("date", "commit")}}
    with open(path, "a") as f:
        f.write(json.dumps(entry, separators=(",", ":")) + "\n")


def git_commit(repo: str) -> str:
    """The checkout's short commit, +dirty with uncommitted changes to tracked files."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=repo,
                              capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=repo, capture_output=True, text=True).stdout.strip()
        return head + ("+dirty" if dirty else "")
    except OSError:
        return "-"


def record(out_dir: str, bench: str, doc: dict[str, Any]) -> str:
    """A bench script's result: dated and stamped with the commit, written as
    ``<bench>-latest.json`` (replacing the previous one) and appended to history.jsonl."""
    doc = {"date": dt.datetime.now().astimezone().isoformat(timespec="seconds"),
           "commit": git_commit(os.path.dirname(os.path.abspath(__file__))), **doc}
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, f"{bench.replace('_', '-')}-latest.json")
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)
    append(os.path.join(out_dir, "history.jsonl"), doc, bench)
    return path


if __name__ == "__main__":
    for name in sys.argv[1:]:
        with open(name) as f:
            append(os.path.join(RESULTS, "history.jsonl"), json.load(f))
        print(f"{name} -> {os.path.join(RESULTS, 'history.jsonl')}")
