"""Whether Spark's Python workers can run stateengine, found out on the driver.

Spark starts its Python workers with the interpreter named by ``PYSPARK_PYTHON`` when the
session started (``python3`` from ``PATH`` if unset) in classic sessions, and the server's in
Spark Connect. When that interpreter lacks stateengine (or pandas and pyarrow), every task
would fail in the worker with an import error far from its cause. So before the first job of
an application, one one-row job asks a worker which interpreter it runs and whether it imports
``stateengine._native``; if not, the driver raises ``WorkerEnvironmentError`` saying what to
set. The answer is remembered per Spark application in this process.
"""

from __future__ import annotations

import sys
import threading
from typing import Any

from ..errors import WorkerEnvironmentError

_checked: set[tuple[str, str]] = set()
_lock = threading.Lock()


def _application(spark: Any) -> str:
    try:
        return str(spark.conf.get("spark.app.id"))
    except Exception:  # a session that does not expose it: check once per session object
        return f"session-{id(spark)}"


def _advice() -> str:
    return (f"Set PYSPARK_PYTHON to a Python that has stateengine installed before the "
            f"SparkSession starts (for this driver's own: export PYSPARK_PYTHON={sys.executable}"
            f"); on a cluster, install stateengine into the Python every executor runs, or ship "
            f"it (docs/spark/cluster.md); with Spark Connect, into the Python of the "
            f"server's workers")


def check_workers(spark: Any, module: str = "stateengine._native") -> None:
    """Raises WorkerEnvironmentError if Spark's Python workers cannot import ``module``."""
    app = _application(spark)
    with _lock:
        if (app, module) in _checked:
            return

    # Defined here so that it is pickled by value: the worker runs it even when it cannot
    # import stateengine, and reports why.
    def probe(batches: Any) -> Any:
        import importlib
        import sys as worker_sys

        import pandas as pd

        for _ in batches:
            pass
        try:
            importlib.import_module(module)
            error = ""
        except Exception as e:  # any failure to import is the answer, not a crash
            error = f"{type(e).__name__}: {e}"
        yield pd.DataFrame({"python": [worker_sys.executable],
                            "version": [worker_sys.version.split()[0]], "error": [error]})

    try:
        row = spark.range(1).mapInPandas(probe, "python string, version string, error string") \
            .collect()[0]
    except Exception as e:
        lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
        cause = next((ln for ln in reversed(lines) if "Error" in ln), lines[-1] if lines else "")
        raise WorkerEnvironmentError(
            f"Spark's Python workers cannot run stateengine's tasks: a one-row pandas job "
            f"failed in the worker ({cause[:300]}). {_advice()}") from None
    if row["error"]:
        raise WorkerEnvironmentError(
            f"Spark's Python workers run {row['python']} (Python {row['version']}), which cannot "
            f"import {module} ({row['error']}). {_advice()}")
    with _lock:
        _checked.add((app, module))
