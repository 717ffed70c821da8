"""frames.py: per-key row slices and output column arrays read off pandas' block manager must
be exactly what pandas' public API gives, for every dtype pandas keeps in a block."""

import types
import warnings

import numpy as np
import pandas as pd
import pytest

from stateengine.spark.frames import RowSlices, column_arrays, without_columns


def _frame(n: int = 50) -> pd.DataFrame:
    rng = np.random.default_rng(1)
    frame = pd.DataFrame({
        "i": np.arange(n), "f": rng.random(n), "s": [f"x{i}" for i in range(n)],
        "b": rng.random(n) > .5, "i32": np.arange(n, dtype=np.int32),
        "ts": pd.date_range("2020-01-01", periods=n, freq="s"),
        "tz": pd.date_range("2020-01-01", periods=n, freq="s", tz="UTC"),
        "td": pd.to_timedelta(np.arange(n), unit="s"),
        "ni": pd.array(list(range(n - 1)) + [None], dtype="Int64"),
        "cat": pd.Categorical(["a", "b"] * (n // 2)),
        "i2": np.arange(n) * 2,  # joins "i" in one 2-d block
    })
    frame.index = np.arange(100, 100 + n)  # not 0..n-1: slices must not keep it
    return frame


@pytest.mark.parametrize("start,stop", [(0, 4), (4, 5), (10, 50), (49, 50), (0, 50), (7, 7)])
def test_row_slices_equal_iloc_with_a_fresh_index(start: int, stop: int) -> None:
    frame = _frame()
    rows = RowSlices(frame)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no deprecation of the block-manager path either
        got = rows(start, stop)
    pd.testing.assert_frame_equal(got, frame.iloc[start:stop].reset_index(drop=True))
    assert isinstance(got.index, pd.RangeIndex) and rows.fast
    got["added"] = 1  # a column added to a slice stays in that slice
    assert "added" not in frame.columns and "added" not in rows(start, stop).columns


def test_row_slices_fall_back_to_iloc_when_the_internals_differ() -> None:
    frame = _frame(8)
    rows = RowSlices(frame)
    rows.blocks = (object(),)  # blocks without slice_block_rows: the public path
    pd.testing.assert_frame_equal(rows(2, 5), frame.iloc[2:5].reset_index(drop=True))
    assert not rows.fast


def test_column_arrays_are_the_columns_in_order() -> None:
    frame = _frame()
    cols = ["i", "f", "s", "b", "ts", "td", "i2", "i32"]
    arrays = column_arrays(frame[cols])
    assert arrays is not None
    for name, array in zip(cols, arrays):
        assert type(array) is np.ndarray and array.ndim == 1
        np.testing.assert_array_equal(array, frame[name].to_numpy())
        assert array.dtype == frame[name].to_numpy().dtype
    one_row = pd.DataFrame({"user": [5], "count": [3], "total": [1.5]})
    assert [a.tolist() for a in column_arrays(one_row)] == [[5], [3], [1.5]]


@pytest.mark.parametrize("column", ["ni", "tz", "cat"])
def test_column_arrays_refuse_extension_columns(column: str) -> None:
    # nullable ints, zoned timestamps and categoricals have no exact numpy array: the caller
    # takes such frames through pd.concat
    assert column_arrays(_frame()[["i", column]]) is None


INTERNAL = ("__se_kg", "__se_pid", "__se_route", "__se_marker")


@pytest.mark.parametrize("order", ["last", "middle", "first", "none"])
def test_without_columns_equals_drop(order: str) -> None:
    frame = _frame(12)
    n = len(frame)
    extra = {"__se_kg": np.arange(n, dtype=np.int32), "__se_pid": np.zeros(n, np.int32)}
    cols = list(frame.columns)
    if order == "last":
        frame = frame.assign(**extra)
    elif order != "none":
        at = 0 if order == "first" else 3
        for i, (name, values) in enumerate(extra.items()):
            frame.insert(at + i, name, values)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = without_columns(frame, INTERNAL)
    pd.testing.assert_frame_equal(got, frame.drop(columns=[c for c in INTERNAL
                                                          if c in frame.columns]))
    assert list(got.columns) == cols
    if order == "none":
        assert got is frame  # nothing to leave out: no new frame
    else:
        got["added"] = 1  # a column added to the result stays there
        assert "added" not in frame.columns


def test_without_columns_falls_back_to_drop_when_the_internals_differ(
        monkeypatch: pytest.MonkeyPatch) -> None:
    frame = _frame(6).assign(__se_pid=np.zeros(6, np.int32))
    expected = frame.drop(columns=["__se_pid"])
    from stateengine.spark import frames

    # a pandas without DataFrame._from_mgr (other internals): the public path
    monkeypatch.setattr(frames, "pd", types.SimpleNamespace(DataFrame=object))
    pd.testing.assert_frame_equal(without_columns(frame, INTERNAL), expected)


def test_groups_of_sorted_batches_are_whole_keys_indexed_from_zero() -> None:
    # apply_with_state and the processor cut a partition's Arrow batches per key: a key that
    # spans batches (with an empty batch between) comes out once, whole
    from stateengine.spark.apply import _iter_groups
    from stateengine.spark.routing import PID_COL

    def batch(keys: list[int], values: list[float]) -> pd.DataFrame:
        return pd.DataFrame({"k": np.array(keys, dtype=np.int64), "v": values,
                             PID_COL: np.zeros(len(keys), np.int32)})

    batches = [batch([1, 1, 2, 2], [1, 2, 3, 4]), batch([2, 3, 3], [5, 6, 7]), batch([], []),
               batch([3, 4], [8, 9])]
    got = [(k, rows["v"].tolist(), list(rows.index), list(rows.columns))
           for k, rows in _iter_groups(batches, ["k"], 0)]
    assert got == [(1, [1, 2], [0, 1], ["k", "v"]), (2, [3, 4, 5], [0, 1, 2], ["k", "v"]),
                   (3, [6, 7, 8], [0, 1, 2], ["k", "v"]), (4, [9], [0], ["k", "v"])]
