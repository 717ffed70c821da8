"""Results of a run as JSON, a Markdown table and a PNG chart, with the machine they ran on."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import platform
import subprocess
import sys
from typing import Any

from harness import Bench
from history import git_commit
from targets import FLOORS, evaluate

GROUP_ORDER = ("state", "baseline", "floor", "typed", "snapshot", "checkpoint", "rescale", "spark", "memory")


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _ram_gib() -> float:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal"):
                    return round(int(line.split()[1]) / (1 << 20), 1)
    except OSError:
        pass
    return 0.0


def _version(module: str) -> str:
    try:
        return __import__(module).__version__
    except Exception:
        try:
            from importlib.metadata import version

            return version(module)
        except Exception:
            return "-"


def machine_info(build: dict[str, str]) -> dict[str, Any]:
    from builds import REPO

    return {
        "date": dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "cpu": _cpu_model(), "cores": os.cpu_count(), "ram_gib": _ram_gib(),
        "kernel": platform.release(), "python": platform.python_version(),
        "load_at_start": [round(x, 2) for x in os.getloadavg()],
        "commit": git_commit(REPO),
        "versions": {m: _version(m) for m in ("numpy", "pandas", "pyarrow", "pyspark",
                                              "rocksdict")},
        **build,
    }


def _fmt(v: float | None, unit: str = "") -> str:
    if v is None:
        return ""
    if unit in ("s", "ratio") or abs(v) < 100:
        return f"{v:.3g}"
    return f"{v:,.0f}"


def write(out_dir: str, bench: Bench, machine: dict[str, Any], partial: bool = False) -> list[str]:
    """Writes the run as runs/<timestamp>.json (git ignores runs/), appends its line to
    history.jsonl and, for a complete run, writes latest.json/.md/.png (a partial run,
    ``--only``, leaves the last complete run's latest.* in place)."""
    import history

    os.makedirs(os.path.join(out_dir, "runs"), exist_ok=True)
    values = {r.name: r.value for r in bench.results}
    verdicts = evaluate(values)
    machine["load_at_end"] = [round(x, 2) for x in os.getloadavg()]
    doc = {"machine": machine, "scale": dataclasses.asdict(bench.scale),
           "results": [dataclasses.asdict(r) for r in bench.results], "targets": verdicts,
           "errors": bench.errors}
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    text = json.dumps(doc, indent=1, default=str)
    paths = []
    for name in (f"runs/{stamp}.json",) if partial else (f"runs/{stamp}.json", "latest.json"):
        path = os.path.join(out_dir, name)
        with open(path, "w") as f:
            f.write(text)
        paths.append(path)
    history.append(os.path.join(out_dir, "history.jsonl"), json.loads(text))
    paths.append(os.path.join(out_dir, "history.jsonl"))
    if partial:
        return paths
    md = os.path.join(out_dir, "latest.md")
    with open(md, "w") as f:
        f.write(markdown(doc))
    paths.append(md)
    png = os.path.join(out_dir, "latest.png")
    chart(doc, png)
    paths.append(png)
    return paths


def _ceiling_section(doc: dict[str, Any]) -> list[str]:
    """Batches of distinct keys against RocksDB alone on the same keys (floor.* cases): the
    batch/scalar ratio RocksDB's own per-key work allows at most, and how much of it the state
    calls reach."""
    res = {r["name"]: r["value"] for r in doc["results"]}
    rows = []
    for case, point, batch in FLOORS:
        names = [f"state.{case}.scalar", f"state.{case}.batch.distinct",
                 f"floor.{case}.{point}", f"floor.{case}.{batch}"]
        if not all(res.get(n) for n in names):
            continue
        scalar, batch_rate, floor_point, floor_batch = (res[n] for n in names)
        rows.append(f"| {case} | {batch_rate / scalar:.2f} | {floor_batch / scalar:.2f} | "
                    f"{floor_batch / floor_point:.2f} | {scalar / floor_point:.0%} | "
                    f"{batch_rate / floor_batch:.0%} |")
    if not rows:
        return []
    return ["## Batches of distinct keys against RocksDB alone", "",
            "| operation | batch.distinct / scalar | ceiling: RocksDB batch call / scalar "
            "| RocksDB batch call / RocksDB point call | scalar call vs RocksDB point call "
            "| batch call vs RocksDB batch call |",
            "|---|---:|---:|---:|---:|---:|", *rows, ""]


def markdown(doc: dict[str, Any]) -> str:
    m = doc["machine"]
    lines = [
        f"# stateengine benchmarks ({doc['scale']['name']} run)", "",
        f"- date: {m['date']}, wall time {m.get('wall_seconds', '-')} s, commit {m['commit']}",
        f"- machine: {m['cpu']}, {m['cores']} cores, {m['ram_gib']} GiB RAM, Linux {m['kernel']}",
        f"- load average (1/5/15 min) at start {m['load_at_start']}, at end {m['load_at_end']}",
        f"- Python {m['python']}; RocksDB {m['rocksdb']} ({m['extension']})",
        "- " + ", ".join(f"{k} {v}" for k, v in m["versions"].items()),
        f"- command: `{m.get('argv', '')}`", "",
    ]
    judged = [t for t in doc["targets"] if t["op"]]
    if judged:
        passed = sum(1 for t in judged if t["passed"])
        lines += [f"## Targets: {passed} of {len(judged)} met", "",
                  "| case | baseline | ratio | target | result |", "|---|---|---:|---:|---|"]
        for t in judged:
            lines.append(f"| {t['case']} | {t['baseline']} | {t['ratio']:.3g} | "
                         f"{t['op']} {t['threshold']:g} | {'pass' if t['passed'] else 'FAIL'} |")
        lines.append("")
    lines += _ceiling_section(doc)
    by_case: dict[str, dict[str, Any]] = {}
    for t in doc["targets"]:
        by_case.setdefault(t["case"], t)
    lines += ["## All cases", "",
              "| case | what | value | unit | baseline | ratio | target | pass | load |",
              "|---|---|---:|---|---|---:|---:|---|---|"]
    results = sorted(doc["results"], key=lambda r: (
        GROUP_ORDER.index(r["group"]) if r["group"] in GROUP_ORDER else 99))
    for r in results:
        t = by_case.get(r["name"])
        base = ratio = target = verdict = ""
        if t:
            base, ratio = t["baseline"], f"{t['ratio']:.3g}"
            if t["op"]:
                target = f"{t['op']} {t['threshold']:g}"
                verdict = "pass" if t["passed"] else "FAIL"
        lines.append(f"| {r['name']} | {r['label']} | {_fmt(r['value'], r['unit'])} | {r['unit']} "
                     f"| {base} | {ratio} | {target} | {verdict} | {r['load'][0]}/{r['load'][1]} |")
    if doc["errors"]:
        lines += ["", "## Errors", ""]
        for group, tb in doc["errors"].items():
            lines += [f"{group}:", "```", tb.strip(), "```"]
    notes = [r for r in doc["results"] if r["details"].get("note")]
    if notes:
        lines += ["", "## Notes", ""]
        lines += [f"- {r['name']}: {r['details']['note']}" for r in notes]
    return "\n".join(lines) + "\n"


def _log_or_empty(ax: Any, axis: str, has_data: bool) -> None:
    if has_data:
        (ax.set_xscale if axis == "x" else ax.set_yscale)("log")
    else:
        ax.text(0.5, 0.5, "not run", ha="center", va="center", transform=ax.transAxes)


def chart(doc: dict[str, Any], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    res = {r["name"]: r for r in doc["results"]}
    fig, axes = plt.subplots(1, 3, figsize=(18, 8), gridspec_kw={"width_ratios": [3, 2, 1.4]})
    # 1: state operations, scalar next to batch, log scale
    ops = []
    for r in doc["results"]:
        if r["group"] == "state" and r["name"].endswith(".scalar"):
            ops.append(r["name"].split(".")[1])
    kinds = [("scalar", "scalar", "#4477aa"), ("batch.distinct", "batch, distinct keys", "#228833"),
             ("batch.repeated", "batch, repeated keys", "#ccbb44")]
    ax = axes[0]
    height = 0.27
    for i, (suffix, label, color) in enumerate(kinds):
        ys, xs = [], []
        for j, op in enumerate(ops):
            r = res.get(f"state.{op}.{suffix}") or (res.get(f"state.{op}.batch")
                                                     if suffix == "batch.distinct" else None)
            if r:
                ys.append(j + (i - 1) * height)
                xs.append(r["value"])
        ax.barh(ys, xs, height=height, color=color, label=label)
    for name, color in (("baseline.rocksdict.get", "#aa3377"), ("baseline.rocksdict.put", "#ee6677")):
        if name in res:
            ax.axvline(res[name]["value"], color=color, ls="--", lw=1, label=name[9:])
    ax.set_yticks(range(len(ops)), ops)
    ax.invert_yaxis()
    _log_or_empty(ax, "x", bool(ops))
    ax.set_xlabel("operations per second (log)")
    ax.set_title("state access")
    ax.legend(loc="lower right", fontsize=8)
    # 2: targets as margins (>= 1 means met)
    ax = axes[1]
    judged = [t for t in doc["targets"] if t["op"]]
    names, margins, colors = [], [], []
    for t in judged:
        m = t["ratio"] / t["threshold"] if t["op"] == ">=" else (
            t["threshold"] / t["ratio"] if t["ratio"] else float("inf"))
        names.append(t["case"].replace("state.", "").replace(".batch", " batch"))
        margins.append(m)
        colors.append("#228833" if t["passed"] else "#cc3311")
    ax.barh(range(len(names)), margins, color=colors)
    ax.axvline(1.0, color="black", lw=1)
    ax.set_yticks(range(len(names)), names, fontsize=8)
    ax.invert_yaxis()
    _log_or_empty(ax, "x", bool(names))
    ax.set_xlabel("ratio / target (>= 1: met)")
    ax.set_title("targets")
    # 3: Spark end-to-end
    ax = axes[2]
    spark = [r for r in doc["results"] if r["group"] == "spark"]
    ax.bar(range(len(spark)), [r["value"] for r in spark], color="#4477aa")
    ax.set_xticks(range(len(spark)), [r["name"].split(".", 1)[1] for r in spark], rotation=30,
                  ha="right", fontsize=8)
    _log_or_empty(ax, "y", bool(spark))
    ax.set_ylabel("rows per second (log)")
    ax.set_title("Spark job, end to end")
    m = doc["machine"]
    fig.suptitle(f"stateengine {doc['scale']['name']} run, {m['date']}: {m['cpu']}, "
                 f"{m['cores']} cores, RocksDB {m['rocksdb']}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


if __name__ == "__main__":  # re-render from a JSON file: python bench/report.py results.json
    with open(sys.argv[1]) as f:
        d = json.load(f)
    print(markdown(d))
