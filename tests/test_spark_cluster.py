"""A real Spark standalone cluster on loopback: master and two workers started with
bin/spark-class, executors running Python from a separate virtualenv into which only the
release wheel (the ``wheel`` fixture of conftest.py) and pandas/pyarrow/numpy were installed.
tests/test_spark_netns_cluster.py runs a cluster whose machines share nothing but a network."""

import json
import os
import socket
import subprocess
import sys
import textwrap
import time

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.cluster, pytest.mark.slow]

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port: int, proc: subprocess.Popen, what: str, timeout: float = 90) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.5)
    raise TimeoutError(f"{what} did not listen on 127.0.0.1:{port}")


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def worker_python(wheel, tmp_path_factory):
    venv = tmp_path_factory.mktemp("workers-venv")
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = str(venv / "bin" / "python")
    # Away from the checkout: with the repo (and its stateengine.egg-info) on sys.path through
    # the working directory or PYTHONPATH, pip would call the wheel "already satisfied".
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    subprocess.run([py, "-m", "pip", "install", "-q", "--disable-pip-version-check", wheel,
                    "pandas>=2,<3", "pyarrow", "numpy"], check=True, cwd=str(venv), env=env)
    where = subprocess.run([py, "-c", "import stateengine._native, stateengine; "
                            "print(stateengine.__file__)"], cwd=str(venv), env=env,
                           capture_output=True, text=True)
    assert where.returncode == 0 and where.stdout.startswith(str(venv)), \
        f"the wheel is not importable from the workers' virtualenv: {where.stdout}{where.stderr}"
    return py


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    import pyspark

    spark_home = os.path.dirname(pyspark.__file__)
    spark_class = os.path.join(spark_home, "bin", "spark-class")
    logs = tmp_path_factory.mktemp("cluster-logs")
    env = dict(os.environ, SPARK_HOME=spark_home, SPARK_LOCAL_IP="127.0.0.1",
               SPARK_NO_DAEMONIZE="1")
    env.pop("PYTHONPATH", None)
    port, ui = free_port(), free_port()
    procs = []
    try:
        master = subprocess.Popen(
            [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
             "--port", str(port), "--webui-port", str(ui)],
            env=env, stdout=open(logs / "master.log", "wb"), stderr=subprocess.STDOUT)
        procs.append(master)
        wait_for_port(port, master, "master")
        for i in range(2):
            wport, wui = free_port(), free_port()
            work_dir = logs / f"worker-{i}"
            worker = subprocess.Popen(
                [spark_class, "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                 "--port", str(wport), "--webui-port", str(wui), "--cores", "1", "--memory",
                 "1g", "--work-dir", str(work_dir), f"spark://127.0.0.1:{port}"],
                env=env, stdout=open(logs / f"worker-{i}.log", "wb"), stderr=subprocess.STDOUT)
            procs.append(worker)
            wait_for_port(wport, worker, f"worker {i}")
        yield f"spark://127.0.0.1:{port}", logs
    finally:
        for p in reversed(procs):
            stop(p)


DRIVER = textwrap.dedent("""
    import json, os, sys
    import numpy as np, pandas as pd
    from pyspark.sql import SparkSession
    from stateengine import ValueStateDescriptor, ReducingStateDescriptor, reducers
    from stateengine.spark import apply_with_state, read_state

    master, worker_python, ck = sys.argv[1:4]
    spark = (SparkSession.builder.master(master).appName("stateengine-cluster-test")
             .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
             .config("spark.pyspark.python", worker_python)
             .config("spark.pyspark.driver.python", sys.executable)
             .config("spark.executor.memory", "512m").config("spark.cores.max", "2")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    count = ValueStateDescriptor("count", value_type=int, default=0)
    total = ReducingStateDescriptor("total", reducers.SUM, value_type=int)

    def fn(user, rows, ctx):
        import os, stateengine
        from pyspark import TaskContext
        c, t = ctx.state("count"), ctx.state("total")
        c.update(c.value() + len(rows))
        t.add(int(rows["amount"].sum()))
        return [(user, c.value(), t.get(), stateengine.__file__, os.getpid(),
                 TaskContext.get().getLocalProperty("spark.job.description") or "")]

    rng = np.random.default_rng(7)
    batches = [pd.DataFrame({"user": rng.integers(0, 200, 2000), "amount": rng.integers(1, 50, 2000)})
               for _ in range(4)]
    latest, files, pids = {}, set(), set()
    for b, pdf in enumerate(batches):
        out = apply_with_state(spark.createDataFrame(pdf), "user", fn,
                               "user long, count long, total long, module string, pid long, d string",
                               [count, total], ck, b, num_partitions=2).collect()
        for r in out:
            latest[r.user] = (r["count"], r.total)
            files.add(r.module)
            pids.add(r.pid)
    want = pd.concat(batches).groupby("user")["amount"].agg(["count", "sum"])
    ok = all(latest[u] == (want.loc[u, "count"], want.loc[u, "sum"]) for u in want.index)
    state_rows = read_state(spark, ck, "count").count()
    print(json.dumps({"ok": ok, "keys": len(latest), "expected_keys": len(want), "files": sorted(files),
                      "pids": len(pids), "state_rows": state_rows,
                      "executors": spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1}))
    spark.stop()
""")


def test_stateful_job_on_a_standalone_cluster_with_the_repaired_wheel(cluster, worker_python,
                                                                       tmp_path):
    master, logs = cluster
    script = tmp_path / "driver.py"
    script.write_text(DRIVER)
    # Executors must use the workers' virtualenv; an inherited PYSPARK_PYTHON would win.
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=worker_python,
               PYSPARK_DRIVER_PYTHON=sys.executable,
               PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, str(script), master, worker_python,
                           str(tmp_path / "ck")], env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["ok"], report
    assert report["keys"] == report["expected_keys"] == report["state_rows"]
    assert report["executors"] == 2
    venv = os.path.dirname(os.path.dirname(worker_python))
    # the executors imported stateengine from the workers' virtualenv, not from this checkout
    assert report["files"] and all(f.startswith(venv) for f in report["files"]), report["files"]
