"""A checkpoint's catalog from its own metadata alone (stateengine/catalog.py): operators, keys,
states, kinds, types and schemas, TTL, versions; through ``checkpoint_catalog``, the
``stateengine catalog`` command and ``read_state`` without descriptors (Spark, classic and
Connect). Checkpoints written before manifests recorded key names still read."""

from __future__ import annotations

import json
import os

import pytest

from stateengine import (ListStateDescriptor, MapStateDescriptor, ReducingStateDescriptor,
                         StateStoreProvider, StateTtlConfig, ValueStateDescriptor, reducers)
from stateengine.catalog import checkpoint_catalog
from stateengine.cli import main
from stateengine.errors import CorruptionError
from stateengine.serializers import Codec
from tests.test_legacy_checkpoints import fixtures  # noqa: F401  (the legacy fixture copy)

SESSION = "user string, region int"
EVENT = "tag string, amount double"


def _descriptors():
    return [ValueStateDescriptor("session", value_type=SESSION),
            ListStateDescriptor("events", value_type=EVENT,
                                ttl=StateTtlConfig(ttl_ms=60_000)),
            MapStateDescriptor("by_tag", user_key_type="tag string", value_type="n bigint"),
            ReducingStateDescriptor("total", reducers.SUM, value_type=float),
            ValueStateDescriptor("anything"),
            ValueStateDescriptor("windows", value_type=int, namespace_type=object)]


def write_checkpoint(root: str, local: str, n: int = 2, versions: int = 2, **extra) -> None:
    """Operator 'sessions' keyed by (user string, region int) with one state of each kind,
    committed ``versions`` times by ``n`` partitions with key names recorded."""
    for v in range(versions):
        for p in range(n):
            provider = StateStoreProvider(root, "sessions", p, n,
                                          key_type=(Codec.STRING, Codec.INT),
                                          descriptors=_descriptors(), local_dir=local,
                                          key_names=["user", "region"])
            store = provider.get_store(v)
            b = store.backend
            b.set_ttl_time(1_000 + v)
            h = {d.name: store.get_state(d) for d in _descriptors()}
            for i in range(20):
                key = (f"u{i}", i % 3)
                if b.key_group_range.contains(_kg(key)):
                    b.set_current_key(key)
                    h["session"].update((f"u{i}", i))
                    h["events"].add(("t", float(i)))
                    h["by_tag"].put(("t",), (i,))
                    h["total"].add(1.5)
                    h["anything"].update({"n": i})
                    h["windows"].set_current_namespace(("w", v))
                    h["windows"].update(i)
                    b.timer_service.register_event_time_timer(10_000 + i)
            store.commit(extra=extra or None)
            provider.close()


def _kg(key) -> int:
    from stateengine import _native

    return _native.key_group_for_hash(_native.spark_hash(key, (Codec.STRING, Codec.INT)), 128)


def test_every_operator_and_state_from_the_checkpoint_alone(tmp_path, capsys):
    root = str(tmp_path / "ck")
    write_checkpoint(root, str(tmp_path / "local"))
    (op,) = checkpoint_catalog(root)
    assert (op.name, op.version, op.versions, op.num_partitions, op.first_version) == \
        ("sessions", 2, [1, 2], 2, 0)
    assert op.key_names == ["user", "region"] and op.key_names_recorded
    assert op.key_types == ["string", "int"] and op.max_parallelism == 128
    assert op.timers >= 20 and op.damage is None and op.migrated_from is None  # estimates
    got = {s.name: (s.kind, s.user_key_type, s.value_type, s.namespace_type, s.ttl, s.ttl_ms,
                    s.function) for s in op.states}
    assert got == {
        "session": ("value", None, "struct<user:string,region:int>", None, False, None, None),
        "events": ("list", None, "struct<tag:string,amount:double>", None, True, 60_000, None),
        "by_tag": ("map", "struct<tag:string>", "struct<n:bigint>", None, False, None, None),
        "total": ("reducing", None, "double", None, False, None, "sum"),
        "anything": ("value", None, "any", None, False, None, None),
        "windows": ("value", None, "bigint", "any", False, None, None),
    }
    assert op.state("events").attributes == {"value_schema": "struct<tag:string,amount:double>",
                                             "ttl": True}

    assert main(["catalog", root]) == 0
    text = capsys.readouterr().out
    assert "key: user string, region int" in text
    assert "version 2 (2 partition(s); versions 1..2; state began at 0" in text
    assert "events    list        struct<tag:string,amount:double>  (ttl 60000 ms)" in text
    assert "by_tag    map         struct<tag:string> -> struct<n:bigint>" in text
    assert "windows   value       bigint  (namespace any)" in text
    assert main(["catalog", root, "--json", "--version", "1"]) == 0
    (doc,) = json.loads(capsys.readouterr().out)
    assert doc["version"] == 1 and doc["key_names"] == ["user", "region"]
    assert {s["name"] for s in doc["states"]} == {s.name for s in op.states}


def test_schema_history_and_other_attributes_are_listed(tmp_path, capsys):
    """A state's schema history (schema evolution's ``value_schema_history`` attribute, as
    docs/ARCHITECTURE.md lays it out) and any other attribute its meta carries reach the
    catalog from the sealed manifest alone."""
    root = str(tmp_path / "ck")
    write_checkpoint(root, str(tmp_path / "local"), n=1, versions=1)
    provider = StateStoreProvider(root, "sessions", 0, 1, key_type=(Codec.STRING, Codec.INT),
                                  descriptors=_descriptors(), local_dir=str(tmp_path / "l2"),
                                  key_names=["user", "region"])
    store = provider.get_store(1)
    meta = store.backend._cf_metas["session"]  # what a later format writes into the meta
    meta["value_schema_history"] = [
        {"schema": "struct<name:string,region:int>"},
        {"schema": "struct<user:string,region:int>", "renamed_from": {"user": "name"}}]
    meta["origin"] = {"tool": "test"}
    store.commit()
    provider.close()
    (op,) = checkpoint_catalog(root)
    session = op.state("session")
    assert session.schema_history == [
        {"version": 0, "schema": "struct<name:string,region:int>", "renamed": []},
        {"version": 1, "schema": "struct<user:string,region:int>", "renamed": ["name -> user"]}]
    assert session.extra_attributes == {"origin": {"tool": "test"}}
    assert main(["catalog", root]) == 0
    out = capsys.readouterr().out
    assert 'session   value       struct<user:string,region:int>  (origin {"tool": "test"})' \
        in out
    assert "schema version 0: struct<name:string,region:int>\n" in out
    assert "schema version 1: struct<user:string,region:int> (renamed name -> user)" in out


def test_checkpoints_from_before_key_names_were_recorded(fixtures, capsys):  # noqa: F811
    """Format-1 StateStore checkpoints (tests/legacy_fixtures): keys named key, every state
    listed with the types its meta holds."""
    for kind in ("primitive", "mixed"):
        (op,) = checkpoint_catalog(os.path.join(fixtures, kind, "store"))
        assert op.name == "op" and op.version is not None and op.damage is None
        assert op.key_names == ["key"] and not op.key_names_recorded
        assert op.key_types == ["string"]
        names = {s.name for s in op.states}
        assert {"count", "any", "events", "pages", "windows", "total", "prices"} <= names
        assert op.state("count").value_type == "bigint"
        assert op.state("prices").kind == "sorted_map"
        assert op.state("prices").user_key_type == "double"
        assert main(["catalog", os.path.join(fixtures, kind, "store")]) == 0
        assert "(column names not recorded)" in capsys.readouterr().out


def test_damage_is_reported_per_operator_and_fails_the_command(tmp_path, capsys):
    root = str(tmp_path / "ck")
    write_checkpoint(root, str(tmp_path / "local"), n=1, versions=1)
    write_checkpoint(str(tmp_path / "ck2"), str(tmp_path / "local2"), n=1, versions=1)
    os.rename(str(tmp_path / "ck2" / "sessions"), os.path.join(root, "other"))
    manifest = os.path.join(root, "other", "v1", "p00000-of-00001.json")
    with open(manifest, "r+b") as f:
        data = bytearray(f.read())
        data[len(data) // 2] ^= 1
        f.seek(0)
        f.write(bytes(data))
    entries = {e.name: e for e in checkpoint_catalog(root)}
    assert entries["sessions"].damage is None and entries["sessions"].version == 1
    assert "p00000-of-00001.json" in entries["other"].damage
    assert main(["catalog", root]) == 1
    captured = capsys.readouterr()
    assert "operator other\n  DAMAGED:" in captured.out and "other" in captured.err
    assert main(["catalog", str(tmp_path / "missing")]) == 1
    assert main(["catalog", root, "--operator", "nope"]) == 1
    assert "has no operator 'nope' (operators: other, sessions)" in capsys.readouterr().err


def test_malformed_key_names_behind_a_valid_seal_are_corruption(tmp_path):
    root = str(tmp_path / "ck")
    write_checkpoint(root, str(tmp_path / "local"), n=1, versions=1,
                     key_names=["user", "user"])
    (op,) = checkpoint_catalog(root)
    assert "records key_names ['user', 'user']" in op.damage and "corrupted" in op.damage
    assert main(["catalog", root, "--operator", "sessions"]) == 1
    from stateengine.catalog import recorded_key_names

    with pytest.raises(CorruptionError, match="not 2 distinct non-empty column names"):
        recorded_key_names({"key_names": ["user", "user"]}, 2, "manifest m")
    with pytest.raises(CorruptionError, match="records key_names 'user'"):
        recorded_key_names({"key_names": "user"}, 1, "manifest m")
    assert recorded_key_names({}, 1, "manifest m") is None


def test_read_state_lists_and_reads_without_descriptors(spark, tmp_path):
    _read_without_descriptors(spark, tmp_path)


def test_read_state_lists_and_reads_without_descriptors_on_spark_connect(connect, tmp_path):
    _read_without_descriptors(connect, tmp_path)


def _read_without_descriptors(session, tmp_path):
    from stateengine.spark import read_state

    root = str(tmp_path / "ck")
    write_checkpoint(root, str(tmp_path / "local"))
    listing = read_state(session, root)
    rows = {r["state"]: r for r in listing.collect()}
    assert set(rows) == {"session", "events", "by_tag", "total", "anything", "windows"}
    assert rows["events"]["ttl"] and rows["events"]["ttl_ms"] == 60_000
    assert rows["by_tag"]["user_key_type"] == "struct<tag:string>"
    assert rows["session"]["key_columns"] == ["user", "region"]
    assert rows["session"]["versions"] == [1, 2] and rows["session"]["partitions"] == 2
    assert rows["session"]["schema_history"] == [] and rows["total"]["function"] == "sum"
    events = read_state(session, root, "events", operator_id="sessions", flatten=True,
                        key_names="recorded")
    assert events.columns == ["user", "region", "namespace", "tag", "amount", "last_access_ms"]
    got = sorted((r.user, r.region, r.amount, r.last_access_ms) for r in events.collect())
    assert got[:2] == [("u0", 0, 0.0, 1_000), ("u0", 0, 0.0, 1_001)] and len(got) == 40
    by_tag = read_state(session, root, "by_tag", operator_id="sessions")
    assert by_tag.schema.simpleString() == (  # without key_names="recorded": key_0, key_1
        "struct<key_0:string,key_1:int,namespace:string,user_key:struct<tag:string>,"
        "value:struct<n:bigint>>")
    anything = read_state(session, root, "anything", operator_id="sessions")
    assert anything.schema["value"].dataType.simpleString() == "map<string,bigint>"  # inferred


# ---- a typed state whose schema evolved --------------------------------------------------------

V0, V1 = "name string, visits int", "name string, visits bigint, score double"


def write_evolved(root: str, local: str) -> None:
    """Operator 'sessions' (one partition): version 1 writes 'session' in schema V0 for users
    u0..u5, version 2 in V1 (a field added, int widened to bigint) for u3..u8, so u0..u2 keep
    entries of schema version 0."""
    for v, (schema, users) in enumerate(((V0, range(0, 6)), (V1, range(3, 9)))):
        d = ValueStateDescriptor("session", value_type=schema)
        provider = StateStoreProvider(root, "sessions", 0, 1, key_type=(Codec.STRING, Codec.INT),
                                      descriptors=[d], local_dir=local,
                                      key_names=["user", "region"])
        store = provider.get_store(v)
        h = store.get_state(d)
        for i in users:
            store.backend.set_current_key((f"u{i}", i % 3))
            h.update((f"u{i}", i) if v == 0 else (f"u{i}", 10 * i, i / 2))
        store.commit()
        provider.close()


def test_an_evolved_schema_and_its_history_from_the_checkpoint_alone(tmp_path, capsys):
    """Schema evolution writes the history the catalog lists: the current schema as the
    state's type, every version with what its step did; as of version 1, the old schema
    alone."""
    root = str(tmp_path / "ck")
    write_evolved(root, str(tmp_path / "local"))
    (op,) = checkpoint_catalog(root)
    session = op.state("session")
    now = "struct<name:string,visits:bigint,score:double>"
    assert session.value_type == now and session.extra_attributes == {}
    assert session.schema_history == [
        {"version": 0, "schema": "struct<name:string,visits:int>", "renamed": []},
        {"version": 1, "schema": now, "renamed": []}]
    (old,) = checkpoint_catalog(root, version=1)
    assert old.state("session").value_type == "struct<name:string,visits:int>"
    assert old.state("session").schema_history == []
    assert main(["catalog", root]) == 0
    text = capsys.readouterr().out
    assert f"session  value       {now}\n" in text
    assert "schema version 0: struct<name:string,visits:int>\n" in text
    assert f"schema version 1: {now}" in text
    assert main(["catalog", root, "--json"]) == 0
    (doc,) = json.loads(capsys.readouterr().out)
    (state,) = doc["states"]
    assert state["value_type"] == now and [h["schema"] for h in state["schema_history"]] == \
        ["struct<name:string,visits:int>", now]


def test_read_state_reads_an_evolved_state_without_descriptors(spark, tmp_path):
    _read_evolved(spark, tmp_path)


def test_read_state_reads_an_evolved_state_without_descriptors_on_spark_connect(connect,
                                                                                tmp_path):
    _read_evolved(connect, tmp_path)


def _read_evolved(session, tmp_path):
    from stateengine.spark import read_state

    root = str(tmp_path / "ck")
    write_evolved(root, str(tmp_path / "local"))
    (row,) = read_state(session, root).collect()
    assert row["state"] == "session"
    assert row["value_type"] == "struct<name:string,visits:bigint,score:double>"
    assert row["schema_history"] == ["struct<name:string,visits:int>", row["value_type"]]
    frame = read_state(session, root, "session", operator_id="sessions", flatten=True,
                       key_names="recorded")
    assert frame.schema.simpleString() == (
        "struct<user:string,region:int,namespace:string,name:string,visits:bigint,"
        "score:double>")
    got = sorted(tuple(r)[3:] for r in frame.collect())
    # u0..u2: schema version 0's entries upgraded (widened, the added field null)
    assert got == [("u0", 0, None), ("u1", 1, None), ("u2", 2, None), ("u3", 30, 1.5),
                   ("u4", 40, 2.0), ("u5", 50, 2.5), ("u6", 60, 3.0), ("u7", 70, 3.5),
                   ("u8", 80, 4.0)]
    value = read_state(session, root, "session", operator_id="sessions")
    assert value.schema["value"].dataType.simpleString() == \
        "struct<name:string,visits:bigint,score:double>"
