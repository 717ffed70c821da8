"""The main job runs as the README says, and a second run resumes where the first stopped."""

import os
import re
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.slow]
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_demo(ck, batches):
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1",
               PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run(
        [sys.executable, "-m", "stateengine.spark.demo", "--checkpoint", ck, "--batches",
         str(batches), "--rows-per-second", "4000", "--users", "300", "--partitions", "2",
         "--trigger-ms", "1000", "--master", "local[2]"],
        capture_output=True, text=True, timeout=600, env=env, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    return [int(m) for m in re.findall(r"^batch\s+(\d+) \|", proc.stdout, re.M)], proc.stdout


def test_demo_runs_and_resumes(tmp_path):
    ck = str(tmp_path / "demo")
    first, out1 = run_demo(ck, 3)
    assert first == [0, 1, 2], out1
    assert "done: 3 batches" in out1
    second, out2 = run_demo(ck, 2)
    assert second == [3, 4], out2  # Structured Streaming resumes; state continues at version 3
    assert "run the same command again to resume from batch 5" in out2
    sessions = re.search(r"(\d+) sessions closed so far", out2)
    assert sessions and int(sessions.group(1)) > 0
