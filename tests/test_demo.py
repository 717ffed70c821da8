"""The main job runs as docs/getting-started.md says, and a second run resumes where the first
stopped."""

import os
import re
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.slow]
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_demo(ck, batches, *extra):
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1",
               PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run(
        [sys.executable, "-m", "stateengine.spark.demo", "--checkpoint", ck, "--batches",
         str(batches), "--rows-per-second", "4000", "--users", "300", "--partitions", "2",
         "--trigger-ms", "1000", "--gap-ms", "1000", "--master", "local[2]", *extra],
        capture_output=True, text=True, timeout=600, env=env, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    return [int(m) for m in re.findall(r"^batch\s+(\d+) \|", proc.stdout, re.M)], proc.stdout


STATE = re.compile(r"^batch\s+(\d+) \|.*\| state \|\s+(\d+) keys \|\s+([\d.]+) MB \|\s+(\d+) rows "
                   r"written \|\s+(\d+) timers fired \| commit\s+(\d+) ms \| load (.+)$", re.M)


def state_figures(out):
    """batch id -> (keys, MB, rows written, timers fired, commit ms, loads) of each line."""
    return {int(m[0]): (int(m[1]), float(m[2]), int(m[3]), int(m[4]), int(m[5]), m[6])
            for m in STATE.findall(out)}


def test_demo_runs_and_resumes(tmp_path):
    ck = str(tmp_path / "demo")
    first, out1 = run_demo(ck, 3)
    assert first == [0, 1, 2], out1
    assert "done: 3 batches" in out1
    state = state_figures(out1)
    assert sorted(state) == [0, 1, 2], out1  # every batch line carries its state metrics
    assert state[0][5] == "empty 2"  # the first batch starts both partitions from empty state
    keys, _, _, _, commit_ms, _ = state[2]
    assert keys > 0 and commit_ms >= 0, out1  # users' states exist by the third batch
    assert sum(written for _, _, written, *_ in state.values()) > 0, out1
    # Three batches: batch 3 replays the range the first run planned, batch 4 holds the rows of
    # the restart's downtime, and batch 5 runs under a watermark (batch 4's newest event less
    # 1 s) past the first 6 s burst boundary plus the 1 s gap, since three 1 s triggers and a
    # restart lie before batch 4: its timers close sessions however fast the machine is (with
    # two batches and the default 3 s gap that depended on how long the restart took).
    second, out2 = run_demo(ck, 3)
    assert second == [3, 4, 5], out2  # Structured Streaming resumes; state continues at version 3
    assert "run the same command again to resume from batch 6" in out2
    sessions = re.search(r"(\d+) sessions closed so far", out2)
    assert sessions and int(sessions.group(1)) > 0, out2
    state = state_figures(out2)
    assert sorted(state) == [3, 4, 5], out2
    # the restarted query restores batch 3's state from the checkpoint
    assert state[3][5] == "restored 2", out2
    assert state[3][0] > 0, out2  # and it holds the users' state


def test_demo_keeps_its_state_on_a_local_s3_server_it_starts(tmp_path):
    """``--local-s3``: moto's server on 127.0.0.1 for the run, the state at s3://; the tasks
    commit every batch there and the final read_state reads it back from there."""
    batches, out = run_demo("s3://demo-bucket/run", 2, "--local-s3", "--work-dir",
                            str(tmp_path / "work"))
    assert batches == [0, 1], out
    assert sorted(state_figures(out)) == [0, 1], out  # read back from the S3 checkpoint
    assert re.search(r"local S3 server \(moto\) on 127\.0\.0\.1:\d+, bucket demo-bucket", out)
    assert "checkpoint s3://demo-bucket/run" in out
    objects = re.search(r"state on s3://demo-bucket/run: (\d+) objects", out)
    assert objects and int(objects.group(1)) > 2, out
    assert "busiest users" in out
    assert (tmp_path / "work" / "stream").is_dir()  # Spark's own checkpoint stayed local
