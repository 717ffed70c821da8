"""A full snapshot pins iterators, not a RocksDB snapshot, so releasing it rewrites nothing.

Releasing a RocksDB snapshot lets RocksDB mark every bottommost SST file whose sequence
numbers lie below the new oldest snapshot for compaction; the compaction rewrites them under
new names, and the next incremental checkpoint uploads all of them again. The full snapshot's
synchronous part therefore pins one iterator per column family at one sequence number
(csrc/snapshot_writer.cc), which registers no snapshot.
"""

from __future__ import annotations

import time

import numpy as np

from stateengine import KeyedStateBackend, KeyGroupRange, ListStateDescriptor, ValueStateDescriptor


def test_the_checkpoint_after_a_full_snapshot_uploads_only_new_files(tmp_path):
    b = KeyedStateBackend(tmp_path / "b", key_type=int)
    v = b.get_state(ValueStateDescriptor("v", int))
    lst = b.get_state(ListStateDescriptor("l", int))
    keys = np.arange(200_000, dtype=np.int64)
    v.put_many(keys, keys)
    lst.add_many(keys[:50_000], keys[:50_000])
    b._native_compact()  # everything in bottommost files
    first = b.checkpoint(1, tmp_path / "chk").result()
    b.notify_checkpoint_complete(1)
    v.put_many(keys[:10], -keys[:10])
    full = b.snapshot(tmp_path / "full", "savepoint").result()  # taken and released
    time.sleep(2)  # time for any compaction the release would schedule
    second = b.checkpoint(2, tmp_path / "chk").result()
    stats = second.stats
    print(f"full checkpoint {first.stats['bytes_uploaded']} bytes; after the full snapshot: "
          f"{stats['bytes_uploaded']} of {stats['bytes_total']} bytes uploaded")
    assert stats["files_reused"] >= 1
    assert stats["bytes_uploaded"] < 0.05 * stats["bytes_total"], stats
    # and the snapshot holds the state of its sync point
    r = KeyedStateBackend.restore(tmp_path / "r", [full], KeyGroupRange(0, 127))
    got, found = r.get_state(ValueStateDescriptor("v", int)).get_many(keys[:20])
    assert found.all() and list(got) == [-k for k in range(10)] + list(range(10, 20))
    r.close()
    b.close()


def test_writes_after_the_sync_part_are_not_in_the_snapshot(tmp_path):
    """The pinned iterators see every column family as of one moment."""
    b = KeyedStateBackend(tmp_path / "b", key_type=int)
    states = [b.get_state(ValueStateDescriptor(f"s{i}", int)) for i in range(5)]
    keys = np.arange(1000, dtype=np.int64)
    for s in states:
        s.put_many(keys, keys)
    snap = b.snapshot(tmp_path / "full", "s")
    for s in states:
        s.put_many(keys, keys + 1)
        b._native_flush()  # new memtables and files after the sync point
    b._native_compact()
    handle = snap.result()
    r = KeyedStateBackend.restore(tmp_path / "r", [handle])
    for i in range(5):
        got, _ = r.get_state(ValueStateDescriptor(f"s{i}", int)).get_many(keys)
        assert (got == keys).all()
    r.close()
    b.close()
