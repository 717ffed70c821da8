"""Before pyspark 4.0 Spark has no StatefulProcessor: stateengine's transformWithState entry
points say which pyspark they need instead of failing on an import inside a task."""

import pytest

from stateengine.errors import ProcessorUsageError
from stateengine.spark import transform_with_state, transform_with_state_in_pandas

pytestmark = pytest.mark.spark

try:
    from pyspark.sql.streaming import StatefulProcessor  # noqa: F401
    HAS_PROCESSOR = True
except ImportError:
    HAS_PROCESSOR = False


@pytest.mark.skipif(HAS_PROCESSOR, reason="this pyspark has StatefulProcessor")
@pytest.mark.parametrize("run", [transform_with_state_in_pandas, transform_with_state])
def test_before_spark_4_a_processor_is_refused_with_the_version_it_needs(spark, run):
    df = spark.createDataFrame([("a", 1)], "user string, amount long")
    with pytest.raises(ProcessorUsageError, match=r"pyspark >= 4\.0"):
        run(df, object(), "user", "user string", "/nonexistent")
