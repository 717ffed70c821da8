"""Checkpoints on object storage: a real S3-protocol server (moto's, on 127.0.0.1) reached
through pyarrow.fs, as a job with its checkpoint at ``s3://bucket/path`` would.

Every kind of state through full and incremental checkpoints, StateStore versions committed
and restored by number, rescaling, retention and the CLI; and the visibility rule of a store
without rename: a version is published by one object written last (its manifest), so a
reader listing while a writer commits sees the version whole or not at all.
"""

from __future__ import annotations

import json
import random
import threading

import pyarrow
import pytest

from stateengine import KeyedStateBackend, KeyGroupRange, StateStoreProvider
from stateengine.checkpoint.storage import CheckpointStorage
from stateengine.checkpoint.versions import VersionCatalog
from stateengine.cli import main as cli
from tests.ckpt_model import (Harness, Model, assert_backend_matches, descriptors, new_backend,
                              random_ops)

KEYS = list(range(200))


def filled(tmp_path, ops=1500, seed=3) -> Harness:
    h = Harness(new_backend(str(tmp_path)), Model())
    for op in random_ops(random.Random(seed), KEYS, ops):
        h.apply(op)
    h.apply(("op_add", 0, None, ("offsets", "union", 42)))
    return h


def provider(uri, tmp_path, partition=0, n=1, **kw) -> StateStoreProvider:
    return StateStoreProvider(uri, "agg", partition, n, 128, key_type=int,
                              descriptors=descriptors(), local_dir=str(tmp_path / "local"), **kw)


def owner(key: int, n: int, backend) -> int:
    return backend.key_group_of(key) * n // 128


@pytest.mark.parametrize("kind", ["full", "incremental"])
def test_every_state_kind_round_trips_through_s3(s3, tmp_path, kind):
    h = filled(tmp_path)
    uri = s3.uri("snapshots")
    if kind == "full":
        handle = h.backend.snapshot(uri, "savepoint-1").result()
    else:
        handle = h.backend.checkpoint(1, uri).result()
    h.backend.close()
    assert not CheckpointStorage(uri).is_local
    assert s3.objects("snapshots"), "nothing reached the bucket"
    restored = KeyedStateBackend.restore(tmp_path / "r", [handle])
    assert_backend_matches(restored, h.model)
    assert restored.operator_state.get_list_state("offsets", "union").get() == [42]
    restored.dispose()


def test_incremental_checkpoints_upload_only_new_files(s3, tmp_path):
    h = filled(tmp_path, ops=800)
    uri = s3.uri("inc")
    first = h.backend.checkpoint(1, uri).result()
    h.backend.notify_checkpoint_complete(1)
    for op in random_ops(random.Random(9), KEYS[:10], 50):
        h.apply(op)
    second = h.backend.checkpoint(2, uri).result()
    h.backend.close()
    assert second.stats["files_reused"] >= 1
    assert {f.path for f in first.shared} & {f.path for f in second.shared}
    restored = KeyedStateBackend.restore(tmp_path / "r", [second])
    assert_backend_matches(restored, h.model)
    restored.dispose()


def test_state_store_versions_commit_and_restore_by_number(s3, tmp_path):
    uri = s3.uri("store")
    models = {}
    model = Model()
    rng = random.Random(5)
    with provider(uri, tmp_path) as prov:
        for version in range(3):
            store = prov.get_store(version)
            h = Harness(store.backend, model)
            for op in random_ops(rng, KEYS, 300):
                h.apply(op)
            assert store.commit() == version + 1
            assert store.metrics["files_uploaded"] >= 1
            models[version + 1] = model.restricted(lambda k: True)
    # another process (a fresh provider and local directory) restores each version
    with provider(uri, tmp_path / "elsewhere") as other:
        assert other.latest_version() == 3
        for version, want in models.items():
            store = other.get_store(version)
            assert not other.last_load["reused"]
            assert_backend_matches(store.backend, want, timers=False)
            store.abort()
    objects = s3.objects("store")
    assert not [k for k in objects if ".tmp-" in k], "temporary objects left behind"
    assert {k.rsplit("/", 1)[-1] for k in objects if k.startswith("agg/v3/") and
            k.endswith(".json")} == {"p00000-of-00001.json"}


def test_rescale_state_store_partitions_on_s3(s3, tmp_path):
    uri = s3.uri("rescale")
    model = Model()
    rng = random.Random(7)
    version = 0
    for n in (2, 3, 1):  # every partition count reads the previous one's version
        for p in range(n):
            with provider(uri, tmp_path, p, n) as prov:
                store = prov.get_store(version)
                mine = [k for k in KEYS if owner(k, n, store.backend) == p]
                h = Harness(store.backend, model)
                for op in random_ops(rng, mine, 4 * len(mine)):
                    h.apply(op)
                committed = store.commit()
        version = committed
    with provider(uri, tmp_path, 0, 1) as prov:
        store = prov.get_store(version)
        assert_backend_matches(store.backend, model, timers=False)
        store.abort()


def test_retention_deletes_old_versions_and_their_files_from_the_bucket(s3, tmp_path):
    uri = s3.uri("retention")
    model = Model()
    rng = random.Random(11)
    with provider(uri, tmp_path, min_versions_to_retain=2) as prov:
        for version in range(6):
            store = prov.get_store(version)
            h = Harness(store.backend, model)
            for op in random_ops(rng, KEYS, 200):
                h.apply(op)
            store.commit()
    catalog = VersionCatalog(CheckpointStorage(uri), "agg")
    assert catalog.versions() == [5, 6]
    objects = s3.objects("retention")
    assert not [k for k in objects if k.startswith(("agg/v1/", "agg/v2/", "agg/v3/", "agg/v4/"))]
    referenced = {f.path for v in (5, 6) for h in catalog.handles_for(v, KeyGroupRange.all(128))
                  for f in h.shared}
    assert {k for k in objects if k.startswith("agg/shared/")} == referenced
    with provider(uri, tmp_path / "again") as prov:
        store = prov.get_store(6)
        assert_backend_matches(store.backend, model, timers=False)
        store.abort()


def test_cli_reads_a_checkpoint_on_s3(s3, tmp_path, capsys):
    uri = s3.uri("cli")
    with provider(uri, tmp_path) as prov:
        store = prov.get_store(0)
        h = Harness(store.backend, Model())
        for k in range(20):
            h.apply(("value_update", k, None, k * 10))
        store.commit()
    assert cli(["versions", uri]) == 0
    assert "version      1: 1 manifest(s)" in capsys.readouterr().out
    assert cli(["verify", uri, "--operator", "agg"]) == 0
    assert "files verified" in capsys.readouterr().out
    assert cli(["dump", uri, "--operator", "agg", "--state", "value"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert {(r["key"], r["value"]) for r in rows if r["namespace"] is None} == \
        {(k, k * 10) for k in range(20)}
    s3.fs.delete_file(s3.path(f"cli/{next(k for k in s3.objects('cli') if k.endswith('.sst'))}"))
    assert cli(["verify", uri, "--operator", "agg"]) == 1
    assert "does not exist" in capsys.readouterr().err


def test_a_reader_never_sees_a_partial_version(s3, tmp_path):
    """A reader lists and restores the latest version in a loop while a writer commits:
    every version it finds restores completely, with the state that version committed."""
    uri = s3.uri("visible")
    expected = {0: {}}
    done = threading.Event()
    seen, errors = [], []

    def reader():
        try:
            prov = provider(uri, tmp_path / "reader")
            while not done.is_set():
                latest = prov.latest_version()
                if latest == 0:
                    done.wait(0.05)
                    continue
                store = prov.get_store(latest)
                b = store.backend
                got = {}
                for k in b.get_keys("value"):
                    b.set_current_key(k)
                    got[k] = store.get_state(descriptors()[0]).value()
                store.abort()
                seen.append((latest, got))
            prov.close()
        except BaseException as e:  # reported by the main thread
            errors.append(e)

    with provider(uri, tmp_path) as prov:
        t = threading.Thread(target=reader)
        t.start()
        try:
            for version in range(6):
                store = prov.get_store(version)
                b = store.backend
                value = store.get_state(descriptors()[0])
                for k in KEYS:
                    b.set_current_key(k)
                    value.update(version * 1000 + k)
                store.commit()
                expected[version + 1] = {k: version * 1000 + k for k in KEYS}
        finally:
            done.set()
            t.join()
    assert not errors, errors
    assert seen, "the reader never saw a version"
    for version, got in seen:
        assert got == expected[version], f"version {version} was seen incomplete"


def test_a_commit_puts_each_object_once_and_the_manifest_last(s3, s3_proxy, tmp_path):
    """What a commit sends (counted at the proxy): one PUT per new file, straight to its final
    name (no temporary object, copy or delete: S3 has no rename), a HEAD per PUT to check the
    stored size, no directory marker objects, and the manifest as the last PUT; and, as it
    reuses files of version 1, a HEAD of version 1's manifest before publishing and a read of
    it (HEAD and GET) after (incremental.py: a base pruned meanwhile is no base)."""
    uri = s3.uri("requests", endpoint=s3_proxy.endpoint)
    with provider(uri, tmp_path) as prov:
        store = prov.get_store(0)
        h = Harness(store.backend, Model())
        for op in random_ops(random.Random(2), KEYS, 400):
            h.apply(op)
        store.commit()
        store = prov.get_store(1)
        h = Harness(store.backend, h.model)
        for op in random_ops(random.Random(3), KEYS[:5], 20):
            h.apply(op)
        s3_proxy.reset_counts()
        store.commit()
        metrics = store.metrics
    sent = s3_proxy.snapshot()
    puts = [e.path.split("/requests/", 1)[1] for e in sent if e.method == "PUT"]
    assert not [p for p in puts if p.endswith("/") or ".tmp-" in p], puts
    assert [p for p in puts if p.endswith(".json")] == ["agg/v2/p00000-of-00001.json"]
    assert puts[-1] == "agg/v2/p00000-of-00001.json"
    heads = [e.path.split("/requests/", 1)[1] for e in sent if e.method == "HEAD"]
    base = "agg/v1/p00000-of-00001.json"
    assert heads.count(base) == 2 and metrics["files_reused"] > 0
    assert [e.path.split("/requests/", 1)[1] for e in sent
            if e.method == "GET" and not e.query].count(base) == 1
    heads = [h for h in heads if h != base]
    assert sorted(heads) == sorted(set(puts))
    assert len(heads) == metrics["files_uploaded"] + 1  # + the manifest
    assert not [e for e in sent if e.method == "DELETE"]
    if int(pyarrow.__version__.split(".")[0]) >= 20:  # small objects in one PutObject
        assert len(puts) == len(heads) and not [e for e in sent if e.method == "POST"]
    assert metrics["storage_retries"] == 0


def test_uri_options_endpoint_variables_and_credentials(monkeypatch):
    from stateengine import StorageError
    from stateengine.checkpoint import s3 as s3_uri

    shown, root, options = s3_uri.parse(
        "s3://bucket/app/state/?endpoint_override=127.0.0.1:9000&scheme=http&region=eu-west-1"
        "&allow_bucket_creation=true")
    assert (shown, root) == ("s3://bucket/app/state", "bucket/app/state")
    assert options == {"endpoint_override": "127.0.0.1:9000", "scheme": "http",
                       "region": "eu-west-1", "allow_bucket_creation": True}
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9100")
    assert s3_uri.parse("s3://bucket/x")[2] == {"endpoint_override": "127.0.0.1:9100",
                                                "scheme": "http"}
    with pytest.raises(StorageError, match="carries credentials; take them out of the URI"):
        s3_uri.parse("s3://AKIAEXAMPLE:secret@bucket/x")
    with pytest.raises(StorageError, match="option 'endpoint' is not supported"):
        s3_uri.parse("s3://bucket/x?endpoint=127.0.0.1:9000")
    with pytest.raises(StorageError, match="connect_timeout='soon' is not a valid float"):
        s3_uri.parse("s3://bucket/x?connect_timeout=soon")


def test_messages_show_the_uri_without_its_options(s3):
    from stateengine import CheckpointNotFoundError

    storage = CheckpointStorage(s3.uri("nothing-here"))
    assert "?" in storage.uri and storage.location == f"s3://{s3.path('nothing-here')}"
    with pytest.raises(CheckpointNotFoundError) as e:
        storage.read_bytes("op/_operator.json")
    assert str(e.value) == f"checkpoint file {storage.location}/op/_operator.json does not exist"


def test_retention_over_many_partitions_on_s3_reads_concurrently_and_keeps_its_rules(s3,
                                                                                     tmp_path):
    """Partition 0's retention reads the other partitions' manifests and deletes with
    concurrent requests on object storage (VersionCatalog._concurrently): it still deletes
    exactly the old versions and the files only they named, passes over a damaged manifest of
    a version it deletes anyway, and deletes nothing when a retained version's manifest is
    damaged (the commit reports it)."""
    from stateengine import ValueStateDescriptor
    from stateengine.keygroups import assign_key_group, operator_for_key_group

    n, uri, value = 3, s3.uri("many"), ValueStateDescriptor("v", value_type=int)
    keys = {p: [k for k in range(60) if operator_for_key_group(
        assign_key_group(k, 128), n, 128) == p] for p in range(n)}
    provs = [StateStoreProvider(uri, "op", p, n, 128, key_type=int, descriptors=[value],
                                local_dir=str(tmp_path / f"w{p}"), min_versions_to_retain=2)
             for p in range(n)]
    catalog = VersionCatalog(CheckpointStorage(uri), "op")

    def batch(b: int) -> dict:
        for p in (1, 2, 0):  # partition 0 prunes once all have committed the version
            store = provs[p].get_store(b)
            for k in keys[p]:
                store.backend.set_current_key(k)
                store.get_state(value).update(k * 100 + b)
            assert store.commit() == b + 1
        return store.metrics

    for b in range(5):
        assert batch(b)["prune_error"] is None
    assert catalog.versions() == [4, 5]

    def manifest(v: int, p: int) -> str:
        return s3.path(f"many/op/v{v}/p{p:05d}-of-{n:05d}.json")

    with s3.fs.open_output_stream(manifest(4, 1)) as f:  # v4 goes at the next commit anyway
        f.write(b"{")
    assert batch(5)["prune_error"] is None
    assert catalog.versions() == [5, 6]
    objects = s3.objects("many")
    assert not [k for k in objects if k.startswith(("op/v1/", "op/v2/", "op/v3/", "op/v4/"))]
    referenced = {f.path for v in (5, 6) for _, _, h in catalog.manifest_handles(v)
                  for f in h.shared}
    # v4's files are orphans for the grace-period sweep, or still named by v5 and v6
    assert referenced <= {k for k in objects if k.startswith("op/shared/")}

    with s3.fs.open_output_stream(manifest(6, 2)) as f:  # retained at the next commit
        f.write(b"{")
    error = batch(6)["prune_error"]
    assert error is not None and "p00002-of-00003.json" in error
    assert {5, 6, 7} <= set(catalog.version_dirs())  # nothing deleted
    for p in (0, 1):  # the undamaged partitions restore their newest values
        with StateStoreProvider(uri, "op", p, n, 128, key_type=int, descriptors=[value],
                                local_dir=str(tmp_path / f"r{p}")) as fresh:
            store = fresh.get_store(7)
            for k in keys[p]:
                store.backend.set_current_key(k)
                assert store.get_state(value).value() == k * 100 + 6
            store.abort()
    for prov in provs:
        prov.close()
