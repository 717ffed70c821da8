"""Local harnesses for stateful code: micro-batches in this process, no SparkSession, no JVM.

``ProcessorHarness`` runs a Spark ``StatefulProcessor`` (pandas or Row flavour),
``ApplyHarness`` an ``apply_with_state`` function and ``MapHarness`` a ``map_with_state``
function, each through the task code that ``stateengine.spark`` runs inside Spark's tasks:
the same routing by key group, state, timers, watermark, late rows, TTL, initial state and
output checks. A test controls the batch timestamp and the watermark, seeds and inspects
state and timers, and gets each batch's output (``BatchOutput``). pyspark must be importable
(``StatefulProcessor`` comes from it); no JVM is started. See docs/spark/testing.md.
"""

from .functions import ApplyHarness, MapHarness
from .harness import BatchOutput
from .processor import ProcessorHarness

__all__ = ["ApplyHarness", "BatchOutput", "MapHarness", "ProcessorHarness"]
