"""Small pandas frames in and out of per-key handlers, at a few microseconds each.

A StatefulProcessor gets its key's rows as a pandas DataFrame indexed 0..n-1 (as Spark's
``transformWithStateInPandas`` gives them) and typically yields one small frame per key. With
four rows per key, pandas' general paths (``iloc`` plus a new index: ~8 us; ``_mgr.column_arrays``:
~3.5 us) cost as much as the state calls, so both ends read pandas' block manager directly:

* ``RowSlices(frame)(start, stop)`` is rows start..stop-1 as a frame of their own (views of
  the frame's blocks, a fresh ``RangeIndex``), built from the block manager's row slice;
* ``column_arrays(frame)`` is a frame's columns as 1-d numpy arrays, read off its blocks.

Both fall back to pandas' public API (``iloc``, ``None`` for "take the slow path") on a pandas
whose internals differ, so a pandas upgrade costs speed, never correctness.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd


class RowSlices:
    """Row ranges of one frame as frames indexed 0..n-1 (their columns views of the frame's)."""

    def __init__(self, frame: pd.DataFrame) -> None:
        self.frame = frame
        self.mgr = getattr(frame, "_mgr", None)
        self.fast = (hasattr(pd.DataFrame, "_from_mgr") and hasattr(self.mgr, "get_slice")
                     and getattr(self.mgr, "ndim", 0) == 2)
        self.indexes: dict[int, pd.RangeIndex] = {}  # immutable: one per length, shared

    def _index(self, n: int) -> pd.RangeIndex:
        index = self.indexes.get(n)
        if index is None:
            index = self.indexes[n] = pd.RangeIndex(n)
        return index

    def __call__(self, start: int, stop: int) -> pd.DataFrame:
        index = self._index(stop - start)
        if self.fast:
            try:
                mgr = self.mgr.get_slice(slice(start, stop), axis=1)
                axes = mgr.axes  # a new list per slice: setting the index touches only it
                axes[1] = index
                return pd.DataFrame._from_mgr(mgr, axes)
            except (AttributeError, TypeError):  # internals of another shape: the public path
                self.fast = False
        rows = self.frame.iloc[start:stop]
        rows.index = index
        return rows


def without_columns(frame: pd.DataFrame, names: Any) -> pd.DataFrame:
    """The frame without the columns among ``names`` that it has (the same frame when it has
    none), its other columns in order as views. ``drop(columns=...)`` costs ~130 us a call
    and a task calls this once per Arrow batch; the internal columns Spark's routing appends
    come last, so the usual case is a block manager's slice of the leading columns (~40 us)."""
    columns = frame.columns
    keep = [i for i, c in enumerate(columns) if c not in names]
    if len(keep) == len(columns):
        return frame
    mgr: Any = getattr(frame, "_mgr", None)
    if keep == list(range(len(keep))) and hasattr(pd.DataFrame, "_from_mgr") and \
            getattr(mgr, "ndim", 0) == 2:
        try:
            sliced = mgr.get_slice(slice(0, len(keep)), axis=0)
            return pd.DataFrame._from_mgr(sliced, sliced.axes)
        except (AttributeError, TypeError):  # internals of another shape: the public path
            pass
    return frame.drop(columns=[c for c in columns if c in names])


def column_arrays(frame: pd.DataFrame) -> list[np.ndarray] | None:
    """The frame's columns in order as 1-d numpy arrays (views), or None where that is not
    cheap and exact (extension arrays such as nullable ints or Arrow strings, another pandas
    layout): the caller then takes the frame through ``pd.concat``."""
    mgr: Any = getattr(frame, "_mgr", None)
    try:
        blocks = mgr.blocks
        out: list[Any] = [None] * len(mgr.items)
        for block in blocks:
            values = block.values
            if type(values) is not np.ndarray:  # naive datetimes: their datetime64 array
                if getattr(values, "tz", None) is not None:
                    return None
                values = getattr(values, "_ndarray", None)
                if type(values) is not np.ndarray or values.dtype.kind not in "mM":
                    return None
            if values.ndim != 2:
                return None
            locs = block.mgr_locs.indexer
            if isinstance(locs, slice):  # list(2-d array): its rows as 1-d views
                out[locs] = list(values)
            else:
                for at, column in zip(locs.tolist(), values):
                    out[at] = column
    except (AttributeError, TypeError, IndexError, ValueError):
        return None
    if any(a is None for a in out):
        return None
    return out
