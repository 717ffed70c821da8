"""OutputSchemaError: a result that does not fit the declared output schema says what was
expected and what came, before pandas or Arrow fail with their own words."""

import numpy as np
import pandas as pd
import pytest
from pyspark.sql import Row
from pyspark.sql import types as T

from stateengine import OutputSchemaError
from stateengine.spark.apply import _Output
from stateengine.spark.output_schema import FrameCheck, check_frame, check_rows

SCHEMA = T.StructType([T.StructField("key", T.StringType()), T.StructField("n", T.LongType())])
EXPECTED = "struct<key:string,n:bigint>"


def test_is_a_value_error_and_a_type_error():
    assert issubclass(OutputSchemaError, ValueError) and issubclass(OutputSchemaError, TypeError)


def test_a_frame_missing_a_named_column_names_both_schemas():
    with pytest.raises(OutputSchemaError) as info:
        check_frame(pd.DataFrame({"key": ["a"], "count": [1]}), SCHEMA)
    msg = str(info.value)
    assert EXPECTED in msg and "[key, count]" in msg
    assert "missing n" in msg and "unexpected count" in msg


def test_named_columns_in_another_order_or_with_extras_fit():
    check_frame(pd.DataFrame({"n": [1], "key": ["a"]}), SCHEMA)
    check_frame(pd.DataFrame({"n": [1], "key": ["a"], "debug": [0.5]}), SCHEMA)


def test_positional_columns_are_counted():
    check_frame(pd.DataFrame([["a", 1]]), SCHEMA)
    with pytest.raises(OutputSchemaError) as info:
        check_frame(pd.DataFrame([["a"]]), SCHEMA)
    assert f"expected a DataFrame with 2 columns ({EXPECTED}), got 1 columns" in str(info.value)


def test_dtypes_that_cannot_hold_the_spark_type_are_refused_per_column():
    nested = T.StructType([T.StructField("xs", T.ArrayType(T.LongType())),
                           T.StructField("at", T.TimestampType())])
    with pytest.raises(OutputSchemaError) as info:
        check_frame(pd.DataFrame({"xs": np.arange(2), "at": pd.Timestamp(0)}), nested)
    assert "column 'xs' has dtype int64, which cannot hold array<bigint>" in str(info.value)
    with pytest.raises(OutputSchemaError, match="column 'at' has dtype bool"):
        check_frame(pd.DataFrame({"xs": [[1], [2]], "at": [True, False]}), nested)
    # object columns are not looked into, numbers for numbers fit
    check_frame(pd.DataFrame({"xs": [[1], [2]], "at": [pd.Timestamp(0)] * 2}), nested)
    check_frame(pd.DataFrame({"key": ["a"], "n": [1.0]}), SCHEMA)


def test_rows_are_checked_by_their_first_row():
    check_rows([("a", 1), ("b", 2)], SCHEMA)
    check_rows([Row(key="a", n=1)], SCHEMA)
    check_rows([{"n": 1, "key": "a"}], SCHEMA)
    with pytest.raises(OutputSchemaError) as info:
        check_rows([("a",)], SCHEMA)
    assert str(info.value) == f"expected rows of 2 values ({EXPECTED}), got a row of 1: ('a',)"
    with pytest.raises(OutputSchemaError, match=r"got a Row with fields \[key, count\]"):
        check_rows([Row(key="a", count=1)], SCHEMA)
    with pytest.raises(OutputSchemaError, match=r"got a dict with keys \[key\]"):
        check_rows([{"key": "a"}], SCHEMA)
    with pytest.raises(OutputSchemaError, match="got int: 5"):
        check_rows([5], SCHEMA)


def test_apply_output_refuses_what_pandas_would_report_as_a_column_count():
    sink = _Output(SCHEMA)
    with pytest.raises(OutputSchemaError, match="expected rows of 2 values"):
        list(sink.add([("a",)]))
    # a later row of another length is caught where the rows become a frame
    sink = _Output(SCHEMA)
    list(sink.add([("a", 1), ("b",), ("c", 1, 2)]))
    with pytest.raises(OutputSchemaError) as info:
        list(sink.flush())
    assert f"rows returned do not fit {EXPECTED}" in str(info.value)
    with pytest.raises(OutputSchemaError, match="not int"):
        list(_Output(SCHEMA).add(5))


def test_a_task_s_frame_check_remembers_fitting_labels_but_reads_dtypes_every_time():
    schema = T.StructType([T.StructField("k", T.StringType()),
                           T.StructField("at", T.TimestampType())])
    check = FrameCheck(schema)
    check(pd.DataFrame({"k": ["a"], "at": [pd.Timestamp(0)]}))
    assert list(check.fitting) == [("k", "at")]
    with pytest.raises(OutputSchemaError, match="column 'at' has dtype bool"):
        check(pd.DataFrame({"k": ["a"], "at": [True]}))
    with pytest.raises(OutputSchemaError, match="missing at"):
        check(pd.DataFrame({"k": ["a"]}))
