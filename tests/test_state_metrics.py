"""Each commit seals its batch's state metrics into the version manifest; version_metrics and
``stateengine stats`` read them back, the seal covers them, and older manifests still read."""

from __future__ import annotations

import ast
import json
import os
import tarfile

import numpy as np
import pytest

from stateengine import (CheckpointNotFoundError, CorruptionError, StateStoreProvider,
                         ValueStateDescriptor)
from stateengine.cli import main
from stateengine.metrics import SPARK_FIELDS, version_metrics

COUNT = ValueStateDescriptor("count", value_type=int, default=0)
HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE = os.path.join(os.path.dirname(HERE), "stateengine")


def provider(ck, local, partition=0, n=2):
    return StateStoreProvider(ck, "op", partition, n, local_dir=local, descriptors=[COUNT])


def run_batch(p, version, keys, deletes=(), timers_due=None):
    """One batch of a partition: +1 per key of keys it owns, deletes, and optionally fire the
    event-time timers up to timers_due."""
    store = p.get_store(version)
    count = store.get_state(COUNT)
    b = store.backend
    for k in keys:
        if p.key_group_range.contains(b.key_group_of(k)):
            b.set_current_key(k)
            count.update(count.value() + 1)
            b.timer_service.register_event_time_timer(1_000 + k)
    for k in deletes:
        if p.key_group_range.contains(b.key_group_of(k)):
            b.set_current_key(k)
            count.clear()
    if timers_due is not None:
        for _ in b.timer_service.advance_watermark(timers_due):
            pass
    return store.commit(), store


def one_partition_checkpoint(tmp_path, *batches):
    """The checkpoint of one partition that ran ``run_batch`` once per (keys, deletes)."""
    ck = str(tmp_path / "ck")
    p = provider(ck, str(tmp_path / "local"), 0, 1)
    try:
        for version, (keys, deletes) in enumerate(batches):
            run_batch(p, version, keys, deletes=deletes)
    finally:
        p.close()
    return ck


def test_commits_seal_their_batch_metrics(tmp_path):
    ck, local = str(tmp_path / "ck"), str(tmp_path / "local")
    parts = [provider(ck, local, i) for i in range(2)]
    try:
        stores = [run_batch(p, 0, range(100))[1] for p in parts]
        owned = [sum(p.key_group_range.contains(s.backend.key_group_of(k)) for k in range(100))
                 for p, s in zip(parts, stores)]
        assert sum(owned) == 100 and 0 not in owned
        first = version_metrics(ck, 1, "op")
        assert first.num_partitions == 2 and sorted(first.partitions) == [0, 1]
        for i, m in first.partitions.items():
            assert m == stores[i].metrics["state"]
            assert m["load"] == "empty"
            assert m["rows_written"] == owned[i] and m["rows_read"] == owned[i]
            assert m["rows_deleted"] == 0 and m["timers_fired"] == 0
            assert m["keys"] == owned[i]  # one entry per key (timers live apart)
            assert m["files"] >= 1 and m["live_bytes"] > 0
            assert m["files_uploaded"] >= 1 and m["bytes_uploaded"] > 0
            assert m["commit_ms"] > 0 and m["load_ms"] >= 0
        assert first.totals["rows_written"] == 100 and first.totals["keys"] == 100
        spark = first.spark
        assert set(spark) == set(SPARK_FIELDS)
        assert spark["numRowsTotal"] == 100 and spark["numRowsUpdated"] == 100
        assert spark["numStateStoreInstances"] == 2 and spark["numEmpty"] == 2

        # batch 2: partition 0 continues on its open backend, partition 1 restores afresh;
        # each counts only this batch's rows, and the timers of keys 0..9 fire
        parts[1].close()
        parts[1] = provider(ck, local, 1)
        for p in parts:
            run_batch(p, 1, range(10), deletes=range(90, 100), timers_due=1_009)
        second = version_metrics(ck, operator="op")  # the newest version
        assert second.version == 2
        assert [second.partitions[i]["load"] for i in (0, 1)] == ["reused", "restored"]
        t = second.totals
        assert (t["rows_read"], t["rows_written"], t["rows_deleted"]) == (10, 10, 10)
        assert t["timers_fired"] == 10 and t["timers"] == 90
        assert 90 <= t["keys"] <= 100  # RocksDB's estimate: deletes leave once compacted
        assert second.spark["numRowsRemoved"] == 10 and second.spark["numReused"] == 1
    finally:
        for p in parts:
            p.close()


def test_the_seal_covers_the_metrics(tmp_path):
    ck = one_partition_checkpoint(tmp_path, (range(5), ()))
    path = os.path.join(ck, "op", "v1", "p00000-of-00001.json")
    doc = json.loads(open(path).read())
    doc["metrics"]["rows_written"] += 1  # a figure changed after sealing
    with open(path, "w") as f:
        json.dump(doc, f)
    with pytest.raises(CorruptionError):
        version_metrics(ck, 1, "op")


def test_manifests_without_metrics_still_read(tmp_path):
    """Format-1 manifests (tests/data/legacy-format1.tar.gz, written before metrics existed)."""
    with tarfile.open(os.path.join(HERE, "data", "legacy-format1.tar.gz")) as tar:
        tar.extractall(tmp_path / "legacy", filter="data")
    store = str(tmp_path / "legacy" / "store")
    stats = version_metrics(store)
    assert stats.partitions and all(m is None for m in stats.partitions.values())
    assert stats.totals["with_metrics"] == 0 and stats.spark["numRowsTotal"] == 0


def test_missing_checkpoint_operator_or_version_names_what_exists(tmp_path):
    ck = one_partition_checkpoint(tmp_path, (range(3), ()))
    with pytest.raises(CheckpointNotFoundError, match=r"operators: op"):
        version_metrics(ck, 1, "nope")
    with pytest.raises(CheckpointNotFoundError, match=r"versions: 1\)"):
        version_metrics(ck, 7, "op")
    with pytest.raises(CheckpointNotFoundError, match="does not exist"):
        version_metrics(str(tmp_path / "absent"))


def test_cli_stats(tmp_path, capsys):
    ck = one_partition_checkpoint(tmp_path, (range(30), ()), (range(4), [29]))
    assert main(["stats", ck]) == 0
    out = capsys.readouterr().out
    assert "operator op version 2 (1 partition(s))" in out
    assert "rows read/written/deleted 4/4/1" in out and "load reused" in out
    assert main(["stats", ck, "--operator", "op", "--version", "1", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["version"] == 1 and doc["partitions"]["0"]["rows_written"] == 30
    assert doc["spark"]["numRowsTotal"] == 30 and doc["totals"]["keys"] == 30
    # missing pieces: exit 1 and a listing of what exists
    assert main(["stats", ck, "--version", "9"]) == 1
    assert "versions: 1, 2" in capsys.readouterr().err
    assert main(["stats", ck, "--operator", "other"]) == 1
    assert "operators: op" in capsys.readouterr().err
    assert main(["stats", str(tmp_path / "absent")]) == 1
    assert "does not exist" in capsys.readouterr().err


def test_cli_stats_options_all_have_help(capsys):
    with pytest.raises(SystemExit):
        main(["stats", "--help"])
    usage = capsys.readouterr().out
    for option, text in (("--operator", "operator id"), ("--version", "version to read"),
                         ("--key-file", "checkpoint key"), ("--json", "as JSON")):
        assert option in usage and text in usage
    assert "-v" not in usage.replace("--version", "")


def test_library_code_never_prints():
    """Library code logs through the ``stateengine`` logger; only the command line (cli.py)
    and the demo (spark/demo.py) print."""
    offenders = []
    for root, _, files in os.walk(PACKAGE):
        for name in files:
            if not name.endswith(".py") or name in ("cli.py", "demo.py"):
                continue
            path = os.path.join(root, name)
            tree = ast.parse(open(path, encoding="utf-8").read(), path)
            for node in ast.walk(tree):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
                        node.func.id == "print":
                    offenders.append(f"{os.path.relpath(path, PACKAGE)}:{node.lineno}")
    assert not offenders, f"print() in library code: {offenders}"
