"""State metrics in the Spark UI, as named accumulators (``stateengine.rows_written``, ...).

Python workers cannot create or update named accumulators, so a small Java function does it
(``jvm/StateMetricsUi.java``): a stateful step inside a streaming query drops its metrics rows
with the filter ``__se_metrics IS NULL OR stateengine_ui_metrics_<n>(__se_metrics)``, and the
function adds each dropped row's figures to accumulators that the UI shows on the stage's page,
per task and in total, and that its REST API returns (``/api/v1/applications/<id>/stages``).

The jar must be on Spark's class path from the start, because the driver deserializes the
accumulators of finished tasks with its own class loader (a jar added later with ``ADD JAR``
or as a Connect artifact reaches the executors but not that loader, and the query would fail):

    spark = SparkSession.builder.config("spark.jars", ui_jar()).getOrCreate()
    # or: spark-submit --jars "$(stateengine ui-jar)" ...
    # a Connect server: start-connect-server.sh --jars "$(stateengine ui-jar)"

``ui_jar`` compiles it on first use with the JDK's ``javac`` against the installed pyspark's
jars and caches it. A stateful step uses it when ``spark.jars`` names it, or when
``spark.stateengine.uiMetrics`` is ``true`` (for a jar put on the class path another way);
otherwise, or when Spark refuses the function, the step keeps the plain filter and the
metrics stay in the query's progress (``observed_metrics``), with the reason logged once at
INFO.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
import weakref
import zipfile
from typing import Any

log = logging.getLogger("stateengine")

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "jvm", "StateMetricsUi.java")
CLASS_NAME = "io.stateengine.spark.StateMetricsUi"
FUNCTION = "stateengine_ui_metrics"
# session -> whether the jar is on its class path (conf reads are round trips on Connect)
_sessions: "weakref.WeakKeyDictionary[Any, bool]" = weakref.WeakKeyDictionary()
_registered = 0  # functions registered by this process: each gets a name of its own
_warned: set[str] = set()


class UiJarError(RuntimeError):
    """The metrics jar cannot be built here (no JDK, or javac failed)."""


def _javac() -> str:
    home = os.environ.get("JAVA_HOME")
    candidates = [os.path.join(home, "bin", "javac")] if home else []
    found = shutil.which("javac")
    if found:
        candidates.append(found)
    for c in candidates:
        if os.access(c, os.X_OK):
            return c
    raise UiJarError("building stateengine's Spark UI jar needs a JDK's javac (set JAVA_HOME "
                     "or put javac on PATH)")


def _spark_jars() -> str:
    import pyspark

    jars = os.path.join(os.path.dirname(pyspark.__file__), "jars")
    if not os.path.isdir(jars):
        raise UiJarError(f"pyspark at {os.path.dirname(pyspark.__file__)} has no jars directory")
    return jars


def ui_jar(cache_dir: str | None = None) -> str:
    """The path of the jar with ``StateMetricsUi``, compiled against the installed pyspark on
    first use and cached in ``cache_dir`` (default ``$XDG_CACHE_HOME/stateengine`` or
    ``~/.cache/stateengine``) under a name holding the source's hash and pyspark's version.
    Raises UiJarError without a JDK."""
    import pyspark

    with open(SOURCE, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()[:12]
    if cache_dir is None:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        cache_dir = os.path.join(base, "stateengine")
    path = os.path.join(cache_dir, f"stateengine-ui-{digest}-spark{pyspark.__version__}.jar")
    if os.path.exists(path):
        return path
    javac = _javac()
    os.makedirs(cache_dir, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="stateengine-ui-", dir=cache_dir) as work:
        classes = os.path.join(work, "classes")
        done = subprocess.run(
            [javac, "--release", "17", "-nowarn", "-cp", os.path.join(_spark_jars(), "*"),
             "-d", classes, SOURCE], capture_output=True, text=True)
        if done.returncode != 0:
            raise UiJarError(f"javac failed on {SOURCE}:\n{done.stderr[-2000:]}")
        staged = os.path.join(work, "ui.jar")
        with zipfile.ZipFile(staged, "w", zipfile.ZIP_DEFLATED) as jar:
            jar.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\r\n\r\n")
            for root, _, files in os.walk(classes):
                for name in sorted(files):
                    full = os.path.join(root, name)
                    jar.write(full, os.path.relpath(full, classes))
        os.replace(staged, path)  # atomic: concurrent builders leave one whole jar
    return path


def _on_class_path(session: Any) -> bool:
    conf = session.conf
    if (conf.get("spark.stateengine.uiMetrics", "") or "").lower() == "true":
        return True
    return any(os.path.basename(j).startswith("stateengine-ui-")
               for j in (conf.get("spark.jars", "") or "").split(",") if j)


def _register(session: Any) -> str | None:
    from pyspark.sql.types import BooleanType

    global _registered
    name = f"{FUNCTION}_{os.getpid()}_{_registered}"
    _registered += 1
    try:
        session.udf.registerJavaFunction(name, CLASS_NAME, BooleanType())
    except Exception as e:  # the metrics still reach the query's progress
        reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        if reason not in _warned:
            _warned.add(reason)
            log.info("stateengine: state metrics are not shown in the Spark UI (%s); they "
                     "remain in the query's progress", reason)
        return None
    return name


def ui_function(session: Any) -> str | None:
    """A new metrics function registered in ``session`` for one stateful step (each instance
    registers its own accumulators, so steps and queries do not add to each other's); None
    where the jar is not on the class path or the UI part is unavailable."""
    try:
        present = _sessions[session]
    except (KeyError, TypeError):
        present = None
    if present is None:
        try:
            present = _on_class_path(session)
        except Exception:  # a conf Spark cannot read: no UI part
            present = False
        try:
            _sessions[session] = present
        except TypeError:  # not weak-referenceable: ask again next time
            pass
    return _register(session) if present else None
