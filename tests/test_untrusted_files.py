"""RocksDB files damaged behind every checksum never end the process (untrusted.py).

Each crafted checkpoint changes a RocksDB file the way a writer that damaged bytes before
checksumming would: RocksDB's own CRC of the changed record or block recomputed, the file's
size and CRC-32C in the handle recomputed and the handle resealed (no key). Without the check
these abort Debian's librocksdb (assertions) in the restoring process; with it the restore
raises CorruptionError naming the checkpoint and the process goes on.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from stateengine import (CorruptionError, KeyedStateBackend, ValueStateDescriptor,
                         load_handle)
from stateengine.checkpoint import untrusted
from tests.campaigns import rocksdb_files as rf

HERE = os.path.dirname(os.path.abspath(__file__))
PROJECT = os.path.dirname(HERE)
VALUE = ValueStateDescriptor("value", bytes)


@pytest.fixture(autouse=True)
def _fresh_memo(monkeypatch):
    # this process's memo only, as before any provider ran, unless a test says otherwise
    monkeypatch.setattr(untrusted, "_shared_root", None)
    monkeypatch.setattr(untrusted, "_shared_explicit", False)
    untrusted.forget_checks()
    yield
    untrusted.set_rocksdb_file_checks(True)
    untrusted.forget_checks()


def _checkpoint(tmp_path, rounds: int = 2) -> tuple[str, str]:
    """An incremental checkpoint written over `rounds` flushes (so the MANIFEST holds several
    edits with sequence numbers); values are random bytes, so data blocks stay uncompressed."""
    root = str(tmp_path / "ckpt")
    b = KeyedStateBackend(str(tmp_path / "src"), key_type=int)
    try:
        state = b.get_state(VALUE)
        for r in range(rounds):
            for k in range(r * 50, r * 50 + 50):
                b.set_current_key(k)
                state.update(os.urandom(40))
            b._native_flush()
        handle = b.checkpoint(1, root).result()
    finally:
        b.dispose()
    manifest = [f for f in os.listdir(os.path.join(root, "chk-1")) if f.endswith(".handle.json")]
    assert handle.checkpoint_id == 1 and len(manifest) == 1
    return root, f"chk-1/{manifest[0]}"


def _file(root: str, manifest: str, prefix: str) -> tuple[str, bytes]:
    rel = next(p for name, p in rf.rocksdb_files(root, manifest).items() if name.startswith(prefix)
               or (prefix == ".sst" and name.endswith(".sst")))
    return rel, open(os.path.join(root, rel), "rb").read()


def _backwards_sequence(root: str, manifest: str) -> None:
    """One more MANIFEST record, CRC and all, whose VersionEdit sets the last sequence to 0."""
    rel, data = _file(root, manifest, "MANIFEST")
    rf.replace_file(root, manifest, rel, rf.manifest_appended(data, bytes([rf.TAG_LAST_SEQUENCE, 0])))


def _bad_value_type(root: str, manifest: str) -> None:
    """The first key of an SST's first data block with value type 0xfe (beyond kMaxValue),
    the block's checksum recomputed."""
    rel, data = _file(root, manifest, ".sst")
    block = rf.sst_blocks(data)[0]
    at = rf.first_key_trailer(data, block)
    rf.replace_file(root, manifest, rel, rf.sst_with(data, block, at - block[0], 0xFE))


CRAFTED = {"manifest-sequence-backwards": _backwards_sequence,
           "sst-unknown-value-type": _bad_value_type}

RESTORE = textwrap.dedent("""
    import sys
    sys.path.insert(0, sys.argv[1])
    from stateengine import CorruptionError, KeyedStateBackend, load_handle
    from stateengine.checkpoint import untrusted
    untrusted.set_rocksdb_file_checks(sys.argv[4] == "on")
    try:
        b = KeyedStateBackend.restore(sys.argv[3], [load_handle(sys.argv[2], sys.argv[5])])
        b._raw_scan(b.column_family("value"))
        b.dispose()
        print("restored")
    except CorruptionError as e:
        print("CorruptionError:", e)
""")


def _restore_in_child(root: str, manifest: str, target: str, checks: str):
    return subprocess.run([sys.executable, "-c", RESTORE, PROJECT, root, target, checks, manifest],
                          capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("craft", sorted(CRAFTED))
def test_crafted_file_is_corruption_not_a_signal(tmp_path, craft):
    root, manifest = _checkpoint(tmp_path)
    CRAFTED[craft](root, manifest)
    with pytest.raises(CorruptionError) as e:
        KeyedStateBackend.restore(str(tmp_path / "restored"), [load_handle(root, manifest)])
    text = str(e.value)
    assert "RocksDB files are damaged" in text and root in text, text  # names the checkpoint
    assert not os.path.exists(tmp_path / "restored")  # nothing half-restored left behind
    # The process goes on: the pristine state of another checkpoint still restores.
    other, other_manifest = _checkpoint(tmp_path / "other")
    b = KeyedStateBackend.restore(str(tmp_path / "again"), [load_handle(other, other_manifest)])
    assert len(b._raw_scan(b.column_family("value"))) == 100
    b.dispose()


@pytest.mark.parametrize("craft", sorted(CRAFTED))
def test_crafted_file_reaches_rocksdb_parsers(tmp_path, craft):
    """The same files without the check: RocksDB reads them in the restoring process itself.
    Debian's librocksdb (assertions kept) aborts; a Release build may read on or report
    corruption. The check's own outcome is the same in a fresh process."""
    root, manifest = _checkpoint(tmp_path)
    CRAFTED[craft](root, manifest)
    off = _restore_in_child(root, manifest, str(tmp_path / "off"), "off")
    if off.returncode < 0:
        assert "Assertion" in off.stderr, off.stderr[-2000:]
    else:
        assert off.returncode == 0, off.stderr[-2000:]
    on = _restore_in_child(root, manifest, str(tmp_path / "on"), "on")
    assert on.returncode == 0, on.stderr[-2000:]
    assert on.stdout.startswith("CorruptionError:") and "damaged" in on.stdout, on.stdout


def test_pristine_checkpoint_is_read_once(tmp_path):
    """What the check reads, and the memo: a directory checked before spawns no child."""
    root, manifest = _checkpoint(tmp_path)
    b = KeyedStateBackend.restore(str(tmp_path / "r"), [load_handle(root, manifest)])
    db = tmp_path / "materialized"
    shutil.copytree(os.path.join(b.path, "db"), db)
    b.dispose()
    untrusted.forget_checks()
    read = untrusted.check_rocksdb_files(str(db), "probe")
    assert read["files"] == read["scanned"] >= 2 and read["entries"] >= 100, read
    assert untrusted.check_rocksdb_files(str(db), "probe") == {"memo": True}


def test_memo_skips_tables_checked_before(tmp_path):
    root = str(tmp_path / "ckpt")
    b = KeyedStateBackend(str(tmp_path / "src"), key_type=int)
    try:
        state = b.get_state(VALUE)
        for k in range(100):
            b.set_current_key(k)
            state.update(b"x" * 10)
        b._native_flush()
        first = b.checkpoint(1, root).result()
        b.notify_checkpoint_complete(1)
        b.set_current_key(1000)
        state.update(b"new")
        b._native_flush()
        second = b.checkpoint(2, root).result()
    finally:
        b.dispose()
    untrusted.forget_checks()  # as in another process than the writer's
    KeyedStateBackend.restore(str(tmp_path / "r1"), [first]).dispose()
    calls = []
    real = untrusted.check_rocksdb_files

    def spy(db_dir, source):
        calls.append(real(db_dir, source))
        return calls[-1]
    restore_mod = sys.modules["stateengine.checkpoint.restore"]
    restore_mod.check_rocksdb_files, saved = spy, restore_mod.check_rocksdb_files
    try:
        KeyedStateBackend.restore(str(tmp_path / "r2"), [second]).dispose()
        KeyedStateBackend.restore(str(tmp_path / "r3"), [second]).dispose()
    finally:
        restore_mod.check_rocksdb_files = saved
    assert calls[0]["scanned"] == 1 and calls[0]["files"] == len(second.shared), calls
    assert calls[1] == {"memo": True}


def _spy_checks():
    """Records what every restore's check returns, until the returned undo is called."""
    calls = []
    real = untrusted.check_rocksdb_files
    restore_mod = sys.modules["stateengine.checkpoint.restore"]

    def spy(db_dir, source):
        calls.append(real(db_dir, source))
        return calls[-1]
    restore_mod.check_rocksdb_files = spy
    return calls, lambda: setattr(restore_mod, "check_rocksdb_files", real)


def test_tables_written_here_are_not_read(tmp_path):
    """A commit records what its own RocksDB wrote: restoring exactly that in the same
    process spawns no child at all; elsewhere (here: with the directory memo dropped) the
    child reads no table (only the MANIFEST replay and each table's open); a table changed
    afterwards is a new file to the memo and is read."""
    root, manifest = _checkpoint(tmp_path)
    calls, undo = _spy_checks()
    try:
        for target in ("r0", "r1"):
            b = KeyedStateBackend.restore(str(tmp_path / target), [load_handle(root, manifest)])
            assert len(b._raw_scan(b.column_family("value"))) == 100
            b.dispose()
            untrusted._CHECKED_DIRS.clear()  # as another process would restore it
    finally:
        undo()
    assert calls[0] == {"memo": True}, calls
    assert calls[1]["files"] >= 2 and calls[1]["scanned"] == 0, calls
    _bad_value_type(root, manifest)  # rewritten: another file than the one recorded
    with pytest.raises(CorruptionError, match="RocksDB files are damaged"):
        KeyedStateBackend.restore(str(tmp_path / "r2"), [load_handle(root, manifest)])


MEMO_CHILD = textwrap.dedent("""
    import sys
    sys.path.insert(0, sys.argv[1])
    from stateengine import KeyedStateBackend, load_handle
    from stateengine.checkpoint import restore, untrusted
    untrusted.configure_check_memo(sys.argv[4])
    real = untrusted.check_rocksdb_files
    restore.check_rocksdb_files = lambda d, s: print(real(d, s))
    KeyedStateBackend.restore(sys.argv[3], [load_handle(sys.argv[2], sys.argv[5])]).dispose()
""")


def test_machine_memo_is_shared_between_processes(tmp_path):
    """With the machine-wide memo (StateStoreProvider's local directory), another process
    restoring what this one wrote reads no table; without it, it reads them all."""
    memo = tmp_path / "memo"
    untrusted.configure_check_memo(str(memo))
    root, manifest = _checkpoint(tmp_path)
    untrusted.configure_check_memo(None)
    assert len(os.listdir(memo)) >= 2
    outcomes = {}
    for name, memo_dir in (("shared", str(memo)), ("other", str(tmp_path / "empty"))):
        proc = subprocess.run([sys.executable, "-c", MEMO_CHILD, PROJECT, root,
                               str(tmp_path / f"r-{name}"), memo_dir, manifest],
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-2000:]
        outcomes[name] = eval(proc.stdout.strip().splitlines()[-1])
    assert outcomes["shared"]["scanned"] == 0, outcomes
    assert outcomes["other"]["scanned"] == outcomes["other"]["files"] >= 2, outcomes


PROVIDER_CHILD = textwrap.dedent("""
    import sys
    sys.path.insert(0, sys.argv[1])
    from stateengine import StateStoreProvider, ValueStateDescriptor
    from stateengine.checkpoint import restore, untrusted
    real = untrusted.check_rocksdb_files
    restore.check_rocksdb_files = lambda d, s: print(real(d, s))
    p = StateStoreProvider(sys.argv[2], "op", 0, 1, key_type=int, local_dir=sys.argv[3],
                           descriptors=[ValueStateDescriptor("value", bytes)])
    store = p.get_store(1)
    print(len(store.backend._raw_scan(store.backend.column_family("value"))))
    p.close()
""")


def test_next_worker_restores_without_reading_tables(tmp_path):
    """A Spark task that lands on another Python worker: the provider there (same local
    directory, another process) restores what this one committed without reading its tables."""
    from stateengine import StateStoreProvider

    local = str(tmp_path / "local")
    p = StateStoreProvider(str(tmp_path / "ckpt"), "op", 0, 1, key_type=int, local_dir=local,
                           descriptors=[VALUE])
    assert untrusted.check_memo_root() == os.path.join(local, "checked-tables")
    store = p.get_store(0)
    state = store.get_state(VALUE)
    for k in range(100):
        store.backend.set_current_key(k)
        state.update(b"v%d" % k)
    assert store.commit() == 1
    p.close()
    proc = subprocess.run([sys.executable, "-c", PROVIDER_CHILD, PROJECT, str(tmp_path / "ckpt"),
                           local], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    read, entries = proc.stdout.strip().splitlines()[-2:]
    assert eval(read)["scanned"] == 0 and eval(read)["files"] >= 1, read
    assert int(entries) == 100


def test_machine_memo_refuses_a_directory_others_may_write(tmp_path):
    memo = tmp_path / "memo"
    memo.mkdir()
    os.chmod(memo, 0o777)
    untrusted.configure_check_memo(str(memo))
    assert untrusted.check_memo_root() is None
    os.chmod(memo, 0o700)
    untrusted.configure_check_memo(str(memo))
    assert untrusted.check_memo_root() == str(memo)
    # chosen explicitly: a provider's local directory does not replace it
    untrusted.follow_local_dir(str(tmp_path / "local"))
    assert untrusted.check_memo_root() == str(memo)


def test_checks_can_be_turned_off(tmp_path):
    root, manifest = _checkpoint(tmp_path)
    assert untrusted.set_rocksdb_file_checks(False) is True
    assert untrusted.rocksdb_file_checks() is False
    assert untrusted.check_rocksdb_files(str(tmp_path), "x") is None
    b = KeyedStateBackend.restore(str(tmp_path / "r"), [load_handle(root, manifest)])
    assert len(b._raw_scan(b.column_family("value"))) == 100
    b.dispose()


def test_child_that_dies_is_corruption(tmp_path, monkeypatch):
    """Whatever ends the child (here SIGKILL of a stand-in) is reported, never propagated."""
    monkeypatch.setattr(untrusted, "_CHILD", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)")
    db = tmp_path / "db"
    db.mkdir()
    (db / "CURRENT").write_text("MANIFEST-000001\n")
    with pytest.raises(CorruptionError, match="SIGKILL"):
        untrusted.check_rocksdb_files(str(db), "checkpoint X")


def test_crafted_campaign_small():
    """tests/campaigns/rocksdb_files.py, small: MANIFEST, CURRENT, OPTIONS and SST bytes changed
    behind every checksum, each loaded in a worker: never a crash, a raw error or a hang."""
    report = rf.run(seed=3, limit=30, sst_per_block=2)
    assert report["cases"] == 30
    assert report["bad"] == [], report["bad"]
    assert set(report["outcomes"]) <= {"identical", "corruption", "wrong"}, report


# What the campaign (tests/campaigns/rocksdb_files.py) crashed the restoring process with while
# the check read tables forwards only (restart points read by a Seek through the database, a
# value type turned into a blob index), and the MANIFEST edit it restored as a state without
# its data: each must be a CorruptionError now.
CAMPAIGN_CRASHES = [
    "000019.sst block 0 byte 131 = 0x8d", "000016.sst block 0 byte 456 = 0x80",
    "000019.sst block 0 byte 113 = 0x01", "000017.sst block 0 byte 554 = 0x30",
    "000016.sst block 0 byte 448 = 0x80", "000018.sst block 0 byte 161 = 0x01",
    "000018.sst block 0 byte 182 = 0x10", "000016.sst block 0 byte 456 = 0x01",
    "000019.sst block 0 byte 37 = 0x11",
    "MANIFEST-000005 record 9 byte 7 = 0x2e", "MANIFEST-000005 record 5 byte 33 = 0x01",
    # not a crash but a silent loss: a table moved to RocksDB's default column family
    "MANIFEST-000005 record 7 byte 99 = 0x00",
]


def test_campaign_crashes_are_corruption():
    report = rf.run(replay=CAMPAIGN_CRASHES)
    assert report["bad"] == [], report["bad"]
    assert report["outcomes"] == {"corruption": len(CAMPAIGN_CRASHES)}, report
