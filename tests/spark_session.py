"""One local SparkSession for the Spark tests, bound to loopback only.

``local[2,4]`` gives two cores and up to four attempts per task, so tests can inject task
failures (spark.task.maxFailures does not apply to local mode)."""

from __future__ import annotations

import os
import sys


def get_spark():
    try:
        from pyspark.sql import SparkSession
    except ImportError as e:  # the test command installs pyspark; a missing one is an error
        raise RuntimeError("pyspark is required for the Spark tests: pip install '.[spark]'") from e
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if root not in paths:  # workers import stateengine from this checkout
        os.environ["PYTHONPATH"] = os.pathsep.join([root, *paths])
    spark = (SparkSession.builder.master("local[2,4]").appName("stateengine-tests")
             .config("spark.driver.host", "127.0.0.1")
             .config("spark.driver.bindAddress", "127.0.0.1")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "4")
             .config("spark.default.parallelism", "4")
             .config("spark.python.worker.reuse", "true")
             .config("spark.sql.session.timeZone", "UTC")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark
