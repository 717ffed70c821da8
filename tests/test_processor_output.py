"""How the DataFrames that StatefulProcessor handlers yield reach Spark: joined into large
frames (per column for runs of same-shaped frames), in the order they were yielded."""

from __future__ import annotations

import pandas as pd
import pytest
from pyspark.sql import types as T

from stateengine.spark import processor as proc

SCHEMA = T.StructType([T.StructField("k", T.LongType()), T.StructField("v", T.DoubleType())])


def _add(sink, result):
    """What a task does with a handler's result: take it, and flush when the sink says so."""
    return list(sink.flush()) if sink.add(proc._consume(result)) else []


def _flush(sink, results):
    out = []
    for r in results:
        out += _add(sink, r)
    out += list(sink.flush())
    return pd.concat(out, ignore_index=True) if out else None


def test_frames_keep_their_order_whatever_their_shape():
    sink = proc._FrameSink(SCHEMA)
    results = [
        iter([pd.DataFrame({"k": [1], "v": [1.5]}), pd.DataFrame({"k": [2, 3], "v": [2.0, 3]})]),
        [pd.DataFrame({"v": [4.0], "k": [4]})],                      # other column order
        pd.DataFrame({"k": pd.array([5], dtype="Int64"), "v": [5.0]}),  # an extension array
        None,
        iter([pd.DataFrame({"k": [], "v": []}), pd.DataFrame({0: [6], 1: [6.5]})]),  # positional
        [pd.DataFrame({"k": [7], "v": [7.0]})],
    ]
    got = _flush(sink, results)
    assert got["k"].tolist() == [1, 2, 3, 4, 5, 6, 7]
    assert got["v"].tolist() == [1.5, 2.0, 3.0, 4.0, 5.0, 6.5, 7.0]


def test_large_outputs_are_handed_over_in_chunks(monkeypatch):
    monkeypatch.setattr(proc, "_FLUSH_ROWS", 10)
    sink = proc._FrameSink(SCHEMA)
    handed = []
    for i in range(25):
        handed += _add(sink, iter([pd.DataFrame({"k": [i], "v": [float(i)]})]))
    handed += list(sink.flush())
    assert [len(f) for f in handed] == [10, 10, 5]
    assert pd.concat(handed)["k"].tolist() == list(range(25))


def test_handlers_must_yield_dataframes():
    sink = proc._FrameSink(SCHEMA)
    with pytest.raises(TypeError, match="yield pandas DataFrames"):
        _add(sink, iter([(1, 2.0)]))
