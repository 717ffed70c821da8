"""Small pandas frames in and out of per-key handlers, at a few microseconds each.

A StatefulProcessor gets its key's rows as a pandas DataFrame indexed 0..n-1 (as Spark's
``transformWithStateInPandas`` gives them) and typically yields one small frame per key. With
four rows per key, pandas' general paths (``iloc`` plus a new index: ~8 us; ``_mgr.column_arrays``:
~3.5 us) cost as much as the state calls, so both ends read pandas' block manager directly:

* ``RowSlices(frame)(start, stop)`` is rows start..stop-1 as a frame of their own (views of
  the frame's blocks, a fresh ``RangeIndex``), built from the block manager's row slice;
* ``column_arrays(frame)`` is a frame's columns as 1-d numpy arrays, read off its blocks;
* ``without_columns(frame, names)`` leaves out the internal columns routing appends (once
  per Arrow batch of a task), as a slice of the manager's leading columns;
* ``FrameRun`` joins handlers' output frames of one layout block by block.

Each falls back to pandas' public API (``iloc``, ``drop``, ``None`` for "take the slow path")
on a pandas whose internals differ, so a pandas upgrade costs speed, never correctness.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd


class RowSlices:
    """Row ranges of one frame as frames indexed 0..n-1 (their columns views of the frame's)."""

    def __init__(self, frame: pd.DataFrame) -> None:
        self.frame = frame
        mgr = getattr(frame, "_mgr", None)
        # The slice of each block and a manager around them, as the manager's own get_slice
        # builds it but without slicing the row index only to replace it: ~1.5 us less a key.
        blocks = getattr(mgr, "blocks", None)
        self.fast = (hasattr(pd.DataFrame, "_from_mgr") and getattr(mgr, "ndim", 0) == 2
                     and isinstance(blocks, tuple)
                     and all(hasattr(b, "slice_block_rows") for b in blocks))
        if self.fast:
            self.blocks, self.items, self.manager = blocks, mgr.axes[0], type(mgr)
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
                rows = slice(start, stop)
                mgr = self.manager(tuple([b.slice_block_rows(rows) for b in self.blocks]),
                                   [self.items, index], verify_integrity=False)
                return pd.DataFrame._from_mgr(mgr, mgr.axes)
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
            values = _block_array(block)
            if values is None:
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


def _block_array(block: Any) -> np.ndarray | None:
    """A block's values as a 2-d numpy array (naive datetimes: their datetime64 array), or
    None for extension arrays, zoned timestamps and layouts of another pandas."""
    values = block.values
    if type(values) is not np.ndarray:
        if getattr(values, "tz", None) is not None:
            return None
        values = getattr(values, "_ndarray", None)
        if type(values) is not np.ndarray or values.dtype.kind not in "mM":
            return None
    return values if values.ndim == 2 else None


class FrameRun:
    """Frames of one layout (the same column labels; blocks of the same dtypes holding the
    same columns), kept as their blocks' 2-d arrays and joined block by block into one frame.

    Handlers yield a small frame per key; the few attribute reads that match a frame's blocks
    to the run's cost less than a view per column (``column_arrays``), and a frame that
    matches has the labels and dtypes of the run's first frame, so it needs no schema check
    of its own. ``FrameRun.start`` gives None for what must take ``pd.concat`` instead
    (extension arrays, zoned timestamps, repeated labels, no columns)."""

    __slots__ = ("labels", "layout", "blocks", "rows")

    def __init__(self, labels: list, layout: list) -> None:
        self.labels = labels  # the column labels, in order
        self.layout = layout  # per block: (its columns: a slice or a tuple, its dtype)
        self.blocks: list[list[np.ndarray]] = []  # per frame: its blocks' arrays
        self.rows = 0

    @classmethod
    def start(cls, frame: pd.DataFrame) -> FrameRun | None:
        """An empty run of frame's layout, or None where frames of it cannot join this way."""
        try:
            mgr: Any = frame._mgr
            labels = mgr.items._values.tolist()
            if not labels or len(set(labels)) != len(labels):
                return None
            layout = []
            for block in mgr.blocks:
                values = _block_array(block)
                if values is None:
                    return None
                locs = block.mgr_locs.indexer
                layout.append((locs if type(locs) is slice else tuple(locs.tolist()),
                               values.dtype))
        except (AttributeError, TypeError, ValueError):
            return None
        return cls(labels, layout)

    def take(self, frame: pd.DataFrame) -> int:
        """Adds frame to the run if it has the run's layout: its number of rows; -1 (nothing
        added) if it has another."""
        try:
            mgr: Any = frame._mgr
            blocks = mgr.blocks
            if len(blocks) != len(self.layout) or mgr.items._values.tolist() != self.labels:
                return -1
            arrays = []
            for block, (locs, dtype) in zip(blocks, self.layout):
                values = block.values
                if type(values) is not np.ndarray:
                    values = _block_array(block)
                    if values is None:
                        return -1
                at = block.mgr_locs.indexer
                if values.dtype != dtype or (at != locs if type(at) is slice
                                             else tuple(at.tolist()) != locs):
                    return -1
                arrays.append(values)
        except (AttributeError, TypeError, ValueError):
            return -1
        n = arrays[0].shape[1]
        self.blocks.append(arrays)
        self.rows += n
        return n

    def frame(self) -> pd.DataFrame:
        """The run's frames as one, rows in the order they were taken."""
        columns: list[Any] = [None] * len(self.labels)
        positions = range(len(self.labels))
        for i, (locs, _) in enumerate(self.layout):
            joined = np.concatenate([arrays[i] for arrays in self.blocks], axis=1)
            for at, column in zip(positions[locs] if type(locs) is slice else locs, joined):
                columns[at] = column
        return pd.DataFrame(dict(zip(self.labels, columns)), copy=False)
