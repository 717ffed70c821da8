"""bench/run.py --quick runs every case and writes its outputs and its history line.

Only that the benchmark runs is specified here; no time or rate is ever asserted (numbers
depend on the machine and its load, see bench/results/latest.md for a real run).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[1]
RUN = REPO / "bench" / "run.py"


def _env() -> dict[str, str]:
    # The bench picks its own stateengine build; a PYTHONPATH pointing elsewhere must not win.
    env = dict(os.environ)
    env.pop("STATEENGINE_BENCH_BUILD", None)
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    return env


def test_quick_run_writes_json_markdown_and_png_with_every_case(tmp_path):
    listed = subprocess.run([sys.executable, str(RUN), "--list"], capture_output=True, text=True,
                            env=_env(), check=True).stdout.split()
    assert "state.valueGet.scalar" in listed and "spark.transformWithStateInPandas" in listed

    out = tmp_path / "results"
    proc = subprocess.run(
        [sys.executable, str(RUN), "--quick", "--rocksdb", "debian", "--out", str(out),
         "--scratch", str(tmp_path)],
        capture_output=True, text=True, env=_env(), timeout=900)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]

    doc = json.loads((out / "latest.json").read_text())
    assert doc["errors"] == {}
    assert doc["machine"]["build"] == "debian"
    ran = {r["name"] for r in doc["results"]}
    assert sorted(set(listed) - ran) == []
    assert all(r["value"] >= 0 and r["unit"] for r in doc["results"])
    assert all(r["details"]["results_match_pandas"] for r in doc["results"]
               if r["group"] == "spark")
    assert {t["case"] for t in doc["targets"] if t["op"]} >= {
        "state.valueGet.scalar", "snapshot.full.write", "checkpoint.incremental.seconds",
        "spark.vectorized", "spark.grouped", "memory.peak_rss"}

    md = (out / "latest.md").read_text()
    for name in listed:
        assert f"| {name} |" in md, name
    assert (out / "latest.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [p.name for p in out.glob("*.json")] == ["latest.json"]
    assert len(list((out / "runs").glob("*.json"))) == 1
    history = [json.loads(line) for line in (out / "history.jsonl").read_text().splitlines()]
    assert len(history) == 1 and history[0]["scale"] == "quick"
    assert history[0]["rocksdb"] == "debian" and history[0]["cases"] == len(listed)
    assert history[0]["figures"]["spark.vectorized"] == pytest.approx(next(
        r["value"] for r in doc["results"] if r["name"] == "spark.vectorized"), abs=0.5)
    assert not list(tmp_path.glob("stateengine-bench-*")), "the scratch directory was left behind"
