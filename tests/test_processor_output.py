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


def test_runs_join_only_frames_of_one_layout():
    # a run joins frames block by block: frames whose blocks hold other columns or dtypes
    # start a run of their own, and every value keeps its column and its dtype
    schema = T.StructType([T.StructField("a", T.LongType()), T.StructField("b", T.DoubleType()),
                           T.StructField("c", T.LongType()), T.StructField("t", T.TimestampType())])
    sink = proc._FrameSink(schema)
    t = pd.Timestamp("2026-01-02 03:04:05")

    def frame(a, b, c):  # int block of columns a and c (not adjacent), float block of b
        return pd.DataFrame({"a": [a], "b": [b], "c": [c], "t": [t + pd.Timedelta(seconds=a)]})

    unconsolidated = frame(3, 3.5, 30)
    unconsolidated["c"] = [31]  # a block of its own for c
    wider = frame(5, 5.5, 50)
    wider["c"] = wider["c"].astype("int32")
    results = [[frame(1, 1.5, 10), frame(2, 2.5, 20)], [unconsolidated], [frame(4, 4.5, 40)],
               [wider], [frame(6, 6.5, 60)]]
    got = _flush(sink, results)
    assert got["a"].tolist() == [1, 2, 3, 4, 5, 6]
    assert got["b"].tolist() == [1.5, 2.5, 3.5, 4.5, 5.5, 6.5]
    assert got["c"].tolist() == [10, 20, 31, 40, 50, 60]
    assert got["t"].tolist() == [t + pd.Timedelta(seconds=s) for s in range(1, 7)]
    assert str(got["t"].dtype) == "datetime64[ns]"


def test_a_frame_of_another_layout_is_checked_against_the_schema():
    # frames that join a run share its first frame's labels and dtypes; one with another
    # dtype starts a run of its own and is checked again
    schema = T.StructType([T.StructField("k", T.LongType()), T.StructField("b", T.BinaryType())])
    sink = proc._FrameSink(schema)
    sink.add([pd.DataFrame({"k": [1], "b": [b"x"]}), pd.DataFrame({"k": [2], "b": [b"y"]})])
    with pytest.raises(TypeError, match="column 'b' has dtype int64"):
        sink.add([pd.DataFrame({"k": [3], "b": [3]})])
    with pytest.raises(TypeError, match="yield pandas DataFrames"):
        sink.add([pd.Series({"k": 3, "b": b"z"})])
    assert list(sink.flush())[0]["b"].tolist() == [b"x", b"y"]
