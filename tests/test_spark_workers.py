"""Spark's Python workers must import stateengine; when they cannot, the driver says so, and
what to set, before any stateful job runs (not a worker traceback per task)."""

import os
import subprocess
import sys
import textwrap

import pytest

from stateengine.errors import WorkerEnvironmentError
from stateengine.spark.workers import check_workers

pytestmark = pytest.mark.spark
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_a_module_the_workers_cannot_import_is_reported_on_the_driver(spark):
    check_workers(spark)  # this session's workers run this interpreter: nothing to report
    with pytest.raises(WorkerEnvironmentError) as e:
        check_workers(spark, module="stateengine_not_installed_anywhere")
    message = str(e.value)
    assert f"workers run {sys.executable}" in message
    assert "ModuleNotFoundError" in message and "PYSPARK_PYTHON" in message


DRIVER = textwrap.dedent("""
    import os, sys
    from pyspark.sql import SparkSession
    from stateengine import ValueStateDescriptor
    from stateengine.errors import WorkerEnvironmentError
    from stateengine.spark import apply_with_state

    spark = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
             .config("spark.driver.host", "127.0.0.1")
             .config("spark.driver.bindAddress", "127.0.0.1").getOrCreate())
    spark.sparkContext.setLogLevel("OFF")
    df = spark.createDataFrame([(1, 2)], "user bigint, amount bigint")
    try:
        apply_with_state(df, "user", lambda k, rows, ctx: None, "user bigint",
                         [ValueStateDescriptor("n", value_type=int)], sys.argv[1], 0)
    except WorkerEnvironmentError as e:
        print("REFUSED:", e)
    spark.stop()
""")


@pytest.mark.slow
def test_workers_on_a_python_without_stateengine_fail_on_the_driver_saying_what_to_set(tmp_path):
    """PYSPARK_PYTHON unset: Spark runs its workers with ``python3`` from PATH, here a bare
    virtualenv (a real interpreter without stateengine, pandas or pyarrow)."""
    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True)
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON",
                                                            "PYSPARK_DRIVER_PYTHON")}
    env.update(PATH=f"{bare / 'bin'}{os.pathsep}{env.get('PATH', '')}",
               SPARK_LOCAL_IP="127.0.0.1",
               PYTHONPATH=os.pathsep.join([ROOT, env.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "-c", DRIVER, str(tmp_path / "state")], env=env,
                          capture_output=True, text=True, timeout=600, cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-3000:]
    refused = [ln for ln in proc.stdout.splitlines() if ln.startswith("REFUSED:")]
    assert refused, proc.stdout + proc.stderr[-3000:]
    assert f"export PYSPARK_PYTHON={sys.executable}" in refused[0]
    assert "No module named" in refused[0]
    assert not os.path.exists(tmp_path / "state")  # refused before any stateful job
