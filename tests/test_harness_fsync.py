"""A test harness's throwaway checkpoint commits without fsync (stateengine.testing): the same
files and rows as with fsync, and every other storage keeps syncing."""

import os

import pandas as pd
import pytest

from stateengine import ValueStateDescriptor
from stateengine.checkpoint.storage import CheckpointStorage, skip_syncs
from stateengine.testing import ApplyHarness

OUT = "user long, count long"


def _count(user, rows, ctx):
    acc = ctx.state("acc")
    n = (acc.value() or 0) + len(rows)
    acc.update(n)
    return [(user, n)]


def _batch(i: int) -> pd.DataFrame:
    return pd.DataFrame({"user": [1, 2, 3, 1, 2][: 3 + i % 3], "amount": [1.0] * (3 + i % 3)})


@pytest.fixture
def fsyncs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    real = os.fsync

    def counting(fd: int) -> None:
        calls.append(fd)
        real(fd)
    monkeypatch.setattr(os, "fsync", counting)
    return calls


def _run(harness: ApplyHarness) -> list[list[tuple]]:
    with harness:
        return [sorted(tuple(r) for r in harness.run_batch(_batch(i)).rows) for i in range(3)]


def test_storage_under_a_skipped_directory_writes_without_fsync(tmp_path, fsyncs) -> None:
    src = tmp_path / "file"
    src.write_bytes(b"x" * 10)
    skip_syncs(str(tmp_path / "throwaway"))
    try:
        quiet = CheckpointStorage(str(tmp_path / "throwaway" / "checkpoint"))
        quiet.upload(str(src), "a/f")
        quiet.write_atomic("a/g", b"y")
        assert fsyncs == [] and not quiet.sync
        # a sibling whose name only starts the same is not under it
        assert CheckpointStorage(str(tmp_path / "throwaway2")).sync
    finally:
        skip_syncs(str(tmp_path / "throwaway"), False)
    assert (tmp_path / "throwaway" / "checkpoint" / "a" / "f").read_bytes() == b"x" * 10
    assert (tmp_path / "throwaway" / "checkpoint" / "a" / "g").read_bytes() == b"y"
    durable = CheckpointStorage(str(tmp_path / "throwaway" / "checkpoint"))
    durable.write_atomic("a/h", b"z")
    assert durable.sync and len(fsyncs) == 2  # the file, then its directory


def test_a_harness_commits_its_own_directory_without_fsync(tmp_path, fsyncs) -> None:
    acc = [ValueStateDescriptor("acc")]
    quiet = _run(ApplyHarness(_count, "user", OUT, acc))
    assert fsyncs == []
    # the same batches with every commit synced, as the Spark path commits
    synced = _run(ApplyHarness(_count, "user", OUT, acc, fsync=True))
    assert len(fsyncs) > 0
    assert quiet == synced == [[(1, 1), (2, 1), (3, 1)], [(1, 3), (2, 2), (3, 2)],
                               [(1, 5), (2, 4), (3, 3)]]


def test_a_given_directory_is_synced_unless_asked_otherwise(tmp_path, fsyncs) -> None:
    acc = [ValueStateDescriptor("acc")]
    given = _run(ApplyHarness(_count, "user", OUT, acc, directory=str(tmp_path / "a")))
    assert len(fsyncs) > 0
    fsyncs.clear()
    quiet = _run(ApplyHarness(_count, "user", OUT, acc, directory=str(tmp_path / "b"),
                              fsync=False))
    assert fsyncs == [] and quiet == given
    # closing the harness ends it: a later harness over that directory syncs again
    _run(ApplyHarness(_count, "user", OUT, acc, directory=str(tmp_path / "b")))
    assert len(fsyncs) > 0
