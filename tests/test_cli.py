"""The stateengine command: versions, verify, dump and meta on real checkpoints."""

import datetime as dt
import json
import os
from decimal import Decimal

from stateengine import (ListStateDescriptor, MapStateDescriptor, StateStoreProvider,
                         ValueStateDescriptor)
from stateengine.cli import main

DESCS = [ValueStateDescriptor("count", value_type=int, default=0),
         MapStateDescriptor("m", user_key_type=str)]


def commit_two_versions(ck, local):
    provider = StateStoreProvider(ck, "op", 0, 1, local_dir=local, descriptors=DESCS)
    version = 0
    for _ in range(2):
        store = provider.get_store(version)
        count, m = store.get_state(DESCS[0]), store.get_state(DESCS[1])
        for k in range(20):
            store.backend.set_current_key(k)
            count.update(count.value() + 1)
            m.put("x", k)
        version = store.commit()
    provider.close()
    return version


def test_versions_verify_and_dump(tmp_path, capsys):
    ck = str(tmp_path / "ck")
    commit_two_versions(ck, str(tmp_path / "local"))
    assert main(["versions", ck]) == 0
    out = capsys.readouterr().out
    assert "operator op" in out and "version      2: 1 manifest(s)" in out
    assert main(["verify", ck, "--operator", "op"]) == 0
    assert "version 2: 1 partition(s)" in capsys.readouterr().out
    assert main(["dump", ck, "--operator", "op", "--state", "count"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert sorted((r["key"], r["value"]) for r in rows) == [(k, 2) for k in range(20)]
    assert main(["dump", ck, "--operator", "op", "--state", "m", "--version", "1", "--limit", "3"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(rows) == 3 and all(r["user_key"] == "x" and r["value"] == r["key"] for r in rows)


def test_damaged_files_and_missing_versions_exit_1_naming_the_problem(tmp_path, capsys):
    ck = str(tmp_path / "ck")
    commit_two_versions(ck, str(tmp_path / "local"))
    assert main(["dump", ck, "--operator", "op", "--state", "count", "--version", "9"]) == 1
    assert "version 9 of operator 'op'" in capsys.readouterr().err
    shared = os.path.join(ck, "op", "shared")
    victim = os.path.join(shared, sorted(os.listdir(shared))[-1])
    with open(victim, "r+b") as f:
        f.seek(100)
        byte = f.read(1)
        f.seek(100)
        f.write(bytes([byte[0] ^ 0xFF]))
    assert main(["verify", ck, "--operator", "op"]) == 1
    err = capsys.readouterr().err
    assert "corrupted" in err and os.path.basename(victim) in err


def test_meta_of_a_full_snapshot(tmp_path, capsys, make_backend):
    backend = make_backend()
    backend.set_current_key("k")
    backend.get_state(DESCS[0]).update(3)
    handle = backend.snapshot(str(tmp_path / "snaps"), "s1").result()
    assert main(["meta", os.path.join(str(tmp_path / "snaps"), handle.file.path)]) == 0
    meta = json.loads(capsys.readouterr().out)
    assert meta["key_columns"] == ["string"] and meta["states"][0]["name"] == "count"


def test_dump_prints_typed_values_as_json_objects_with_field_names(tmp_path, capsys):
    descs = [ValueStateDescriptor("s", value_type="count long, price decimal(10,2), at timestamp, "
                                                  "d date, raw binary, seen array<long>, "
                                                  "m map<int,string>"),
             MapStateDescriptor("m", user_key_type="day date, kind string", value_type="n long"),
             ListStateDescriptor("l", value_type="a int, b double"),
             ValueStateDescriptor("t")]
    ck = str(tmp_path / "ck")
    with StateStoreProvider(ck, "op", 0, 1, local_dir=str(tmp_path / "local"),
                            descriptors=descs) as provider:
        store = provider.get_store(0)
        s, m, lst, t = (store.get_state(d) for d in descs)
        store.backend.set_current_key(1)
        s.update((3, Decimal("1.50"), dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc),
                  dt.date(2024, 1, 2), b"\x00\x01", [1, 2], {7: "x"}))
        m.put((dt.date(2024, 1, 1), "buy"), (5,))
        m.put((dt.date(2024, 1, 1), "view"), None)
        lst.add_all([(1, 2.5), (2, None)])
        t.update((1800000075294, 1800000079944, 7))
        store.commit()

    def dump(state):
        assert main(["dump", ck, "--operator", "op", "--state", state]) == 0
        return [json.loads(line) for line in capsys.readouterr().out.splitlines()]

    assert dump("s")[0]["value"] == {"count": 3, "price": "1.50", "at": "2024-01-02T03:04:05+00:00",
                                     "d": "2024-01-02", "raw": "AAE=", "seen": [1, 2],
                                     "m": [{"key": 7, "value": "x"}]}
    assert sorted((r["user_key"]["kind"], r["user_key"]["day"], r["value"]) for r in dump("m")) == [
        ("buy", "2024-01-01", {"n": 5}), ("view", "2024-01-01", None)]
    assert dump("l")[0]["value"] == [{"a": 1, "b": 2.5}, {"a": 2, "b": None}]
    assert dump("t")[0]["value"] == [1800000075294, 1800000079944, 7]  # untyped tuple: a list


def test_dump_shows_the_last_access_of_state_with_ttl(tmp_path, capsys):
    from stateengine import ListStateDescriptor, StateTtlConfig

    ttl = StateTtlConfig(ttl_ms=60_000)
    descs = [ValueStateDescriptor("seen", value_type=int, ttl=ttl),
             ListStateDescriptor("visits", value_type=int, ttl=ttl),
             ListStateDescriptor("typed", value_type="at long", ttl=ttl)]
    ck = str(tmp_path / "ck")
    provider = StateStoreProvider(ck, "op", 0, 1, local_dir=str(tmp_path / "local"),
                                  descriptors=descs)
    store = provider.get_store(0)
    seen, visits, typed = (store.get_state(d) for d in descs)
    store.backend.set_current_key(7)
    for t in (1_000, 2_000):
        store.backend.set_ttl_time(t)
        seen.update(t)
        visits.add(t)
        typed.add((t,))
    store.commit()
    provider.close()
    assert main(["dump", ck, "--operator", "op", "--state", "seen"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["key"], r["value"], r["last_access_ms"]) for r in rows] == [(7, 2_000, 2_000)]
    assert main(["dump", ck, "--operator", "op", "--state", "visits"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["value"], r["last_access_ms"]) for r in rows] == [([1_000, 2_000], [1_000, 2_000])]
    assert main(["dump", ck, "--operator", "op", "--state", "typed"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["value"], r["last_access_ms"]) for r in rows] == [
        ([{"at": 1_000}, {"at": 2_000}], [1_000, 2_000])]
