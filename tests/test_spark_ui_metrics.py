"""State metrics in the Spark UI: with stateengine's jar on Spark's class path, a streaming
query's stateful step fills named accumulators that the UI's stage pages show and its REST API
returns; their values are compared with what the batches' commits sealed (state_metrics).
Classic: a child process with its own SparkContext and UI; Connect: the test server (started
with the jar and its UI on, tests/spark_connect.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request

import pytest

from stateengine.spark import observed_metrics, state_metrics, ui_jar
from stateengine.spark.ui_metrics import UiJarError, ui_function
from tests.test_spark_metrics import events, run_query

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COUNTERS = ("rows_read", "rows_written", "rows_deleted", "timers_fired", "bytes_uploaded",
            "files_uploaded", "files_reused")
GAUGES = ("keys", "timers", "live_bytes", "files", "memory_bytes")


def stage_accumulators(ui_url: str) -> list[dict[str, int]]:
    """Per completed stage holding stateengine accumulators (in stage order): name -> value."""
    apps = json.load(urllib.request.urlopen(f"{ui_url}/api/v1/applications", timeout=30))
    out = []
    for app in apps:
        stages = json.load(urllib.request.urlopen(
            f"{ui_url}/api/v1/applications/{app['id']}/stages?status=complete", timeout=30))
        for s in sorted(stages, key=lambda s: s["stageId"]):
            accs = {a["name"][len("stateengine."):]: int(a["value"])
                    for a in s.get("accumulatorUpdates", [])
                    if a.get("name", "").startswith("stateengine.")}
            if accs:
                out.append(accs)
    return out


def check_ui(session, ui_url: str, tmp_path, operator_id: str) -> None:
    source, base = str(tmp_path / "in"), str(tmp_path / "job")
    os.makedirs(source)
    for i, pdf in enumerate(events()):
        pdf.to_parquet(os.path.join(source, f"part-{i:03d}.parquet"), index=False)
    before = len(stage_accumulators(ui_url))
    query, state = run_query(session, source, base, operator_id)
    # every batch the query ran (Spark 3.5 reports no observed metrics for a batch without
    # data, such as the one the step asks for after the watermark moved)
    batches = sorted({p["batchId"] if isinstance(p, dict) else p.batchId
                      for p in query.recentProgress})
    assert all(observed_metrics(p, operator_id) is not None for p in query.recentProgress
               if (p["numInputRows"] if isinstance(p, dict) else p.numInputRows))
    assert len(batches) >= 3
    sealed = [state_metrics(state, b, operator_id) for b in batches]

    deadline = time.time() + 30  # the UI's store catches up with the listener bus
    while True:
        stages = stage_accumulators(ui_url)[before:]
        if len(stages) >= len(batches) or time.time() > deadline:
            break
        time.sleep(0.5)
    assert len(stages) == len(batches), stages
    for i, (accs, m) in enumerate(zip(stages, sealed)):
        # counters: summed over the tasks of every batch so far
        for name in COUNTERS:
            want = sum(int(x.get(name, 0)) for s in sealed[:i + 1]
                       for x in s.partitions.values())
            assert accs[name] == want, (i, name, accs)
        # gauges: each partition's latest reading, summed (the state's current size)
        for name in GAUGES:
            assert accs[name] == m.totals[name], (i, name, accs)
        assert accs["keys"] == m.spark["numRowsTotal"]
    assert stages[-1]["timers_fired"] > 0 and stages[-1]["rows_written"] > 0


CHILD = r"""
import os, sys, tempfile
sys.path.insert(0, {root!r})
from pyspark.sql import SparkSession
spark = (SparkSession.builder.master("local[2,4]").appName("stateengine-ui")
         .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
         .config("spark.ui.port", {port!r}).config("spark.ui.showConsoleProgress", "false")
         .config("spark.sql.shuffle.partitions", "4").config("spark.sql.session.timeZone", "UTC")
         .config("spark.jars", {jar!r}).getOrCreate())
from pathlib import Path
from tests.test_spark_ui_metrics import check_ui
check_ui(spark, spark.sparkContext.uiWebUrl, Path({tmp!r}), "ui")
print("UI-OK")
"""


def test_classic_session_shows_state_metrics_in_the_spark_ui(tmp_path):
    from tests.spark_connect import _free_port

    jar = ui_jar(str(tmp_path / "cache"))
    assert os.path.basename(jar).startswith("stateengine-ui-")
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable,
               PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]))
    code = CHILD.format(root=ROOT, port=str(_free_port()), jar=jar, tmp=str(tmp_path / "job"))
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=600, cwd=str(tmp_path))
    assert done.returncode == 0 and "UI-OK" in done.stdout, done.stderr[-4000:]


@pytest.mark.connect
def test_connect_session_shows_state_metrics_in_the_spark_ui(connect, connect_server, tmp_path):
    assert ui_function(connect) is not None  # the server was started with the jar
    check_ui(connect, f"http://127.0.0.1:{connect_server.ui_port}", tmp_path, "ui_connect")


def test_without_the_jar_the_step_keeps_the_plain_filter(spark):
    # the test session has no stateengine jar in spark.jars: metrics go to the progress only
    assert ui_function(spark) is None


def test_building_the_jar_without_a_jdk_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "no-jdk"))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(UiJarError, match="javac"):
        ui_jar(str(tmp_path / "cache"))
