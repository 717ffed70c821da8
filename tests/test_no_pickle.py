"""Reading a checkpoint never runs code from it.

A pickle whose unpickling creates a marker file (``__reduce__`` returns ``(open, (marker,
"w"))``) is planted in every place a pickle could have lived: values of every state kind, list
elements, map values, map user keys, namespaces (also of a state declared ``int``), timer
namespaces of both time domains, ``value_type="pickle"`` and ``user_key_type="pickle"`` states,
and the operator-state file. Checkpoints of every kind (full snapshot, incremental checkpoint,
StateStore version, each also as an old format-1 checkpoint) are then read through every read
entry point with the default settings. Each call must return data or raise the documented
error (``PickleNotAllowedError``; ``StateRegistrationError`` when registering a pickle state),
and the marker must never appear. With ``allow_pickle=True`` the same reads do unpickle: the
control that shows the payload is live.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pickle
import struct

import pytest

from stateengine import (AggregatingStateDescriptor, KeyedStateBackend, ListStateDescriptor,
                         MapStateDescriptor, OperatorStateBackend, PickleNotAllowedError,
                         ReducingStateDescriptor, SortedMapStateDescriptor, StateRegistrationError,
                         StateStoreProvider, ValueStateDescriptor, _native, reducers)
from stateengine.checkpoint.handles import FileRef
from stateengine.checkpoint.meta import SnapshotMeta
from stateengine.cli import main as cli
from tests.user_functions import Average

KEY, CLEAN_KEY = 1, 2  # payloads live under KEY; CLEAN_KEY holds ordinary values


class Payload:
    """Unpickling this creates ``path``: proof that code from the data ran."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def pick(a, b):
    return b


DESCRIPTORS = [
    ValueStateDescriptor("v"),
    ValueStateDescriptor("vi", value_type=int, namespace_type=object),  # declared int
    ListStateDescriptor("l", namespace_type=object),
    MapStateDescriptor("m"),
    SortedMapStateDescriptor("sm", int),
    ReducingStateDescriptor("r", pick, namespace_type=object),
    ReducingStateDescriptor("rn", reducers.SUM),
    AggregatingStateDescriptor("a", Average(), namespace_type=object),
    ValueStateDescriptor("p", value_type="pickle"),
    MapStateDescriptor("pk", user_key_type="pickle", value_type=int),
]
PLAIN = [d for d in DESCRIPTORS if d.name not in ("p", "pk")]


def varint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    return bytes(out + bytes([n]))


def ns(value) -> bytes:
    return _native.encode_for_codec(1, value)


def plant(backend: KeyedStateBackend, marker: str) -> dict[str, int]:
    """Writes ordinary entries for CLEAN_KEY and payload entries for KEY; returns how many
    raw entries each state got."""
    payload = pickle.dumps(Payload(marker), protocol=5)
    any_pickle = b"\x07" + varint(len(payload)) + payload   # the old ANY codec's tag 7
    codec_pickle = varint(len(payload)) + payload           # the PICKLE codec
    h = {d.name: backend.get_state(d) for d in DESCRIPTORS}
    backend.set_current_key(CLEAN_KEY)
    h["v"].update((1, "clean"))
    h["vi"].update(5)
    h["l"].add_all([1, "x"])
    h["m"].put(("clean", 1), [1])
    h["sm"].put(3, "three")
    h["r"].add(1)
    h["rn"].add(2)
    h["a"].add(4)
    h["p"].update({"clean": True})
    h["pk"].put(("clean",), 1)
    backend.timer_service.register_event_time_timer(10, ("clean",))
    prefix = bytes([backend.key_group_of(KEY)]) + struct.pack(">q", KEY)
    default_ns = b"\x00"
    raw = {
        "v": [(prefix + default_ns, any_pickle)],
        "vi": [(prefix + any_pickle, struct.pack(">q", 7))],             # pickled namespace
        "l": [(prefix + default_ns, ns(1) + b"," + any_pickle + b"," + ns("x"))],
        "m": [(prefix + default_ns + any_pickle, b"\x00" + ns(1)),      # pickled user key
              (prefix + default_ns + ns("k"), b"\x00" + any_pickle)],   # pickled map value
        "sm": [(prefix + default_ns + struct.pack(">Q", 5 ^ (1 << 63)), b"\x00" + any_pickle)],
        "r": [(prefix + ns(1), any_pickle)],
        "rn": [(prefix + default_ns, any_pickle)],
        "a": [(prefix + ns(1), any_pickle)],
        "p": [(prefix + default_ns, codec_pickle)],
        "pk": [(prefix + default_ns + codec_pickle, b"\x00" + struct.pack(">q", 1))],
    }
    for name, entries in raw.items():
        for k, v in entries:
            backend._raw_put(backend._cf_index[name], k, v)
    for timers, ts in (("__timers_event__", 20), ("__timers_processing__", 30)):
        cf = backend.timer_service._cf(timers)
        stamp = struct.pack(">Q", ts ^ (1 << 63))
        backend._raw_put(cf, prefix[:1] + stamp + prefix[1:] + any_pickle, b"")
    return {n: len(e) + 1 for n, e in raw.items()}


class HostileOldOperatorState(OperatorStateBackend):
    """Writes what a format-1 writer wrote: a pickle (here carrying the payload)."""

    def __init__(self, marker: str) -> None:
        super().__init__()
        self.marker = marker

    def is_empty(self) -> bool:
        return False

    def snapshot_bytes(self) -> bytes:
        return pickle.dumps((1, 0, 1, {"offsets": ("split", [Payload(self.marker)])}), protocol=5)


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    """Checkpoints of every kind holding the payloads, with and without a pickled operator
    state file, in format 2 and (patched) format 1."""
    root = tmp_path_factory.mktemp("planted")
    marker = str(root / "MARKER")
    out = {"marker": marker, "root": root}
    for with_opstate in (False, True):
        tag = "op" if with_opstate else "keyed"
        writer = KeyedStateBackend(root / f"writer-{tag}", key_type=int, allow_pickle=True)
        out["counts"] = plant(writer, marker)
        if with_opstate:
            writer.operator_state = HostileOldOperatorState(marker)
        full = writer.snapshot(root / "ck", f"full-{tag}").result()
        inc = writer.checkpoint(1, root / "ck", private_dir=f"inc-{tag}").result()
        out[f"full-{tag}"], out[f"incremental-{tag}"] = full, inc
        writer.dispose()
        provider = StateStoreProvider(root / f"store-{tag}", "op", 0, 1, key_type=int,
                                      descriptors=DESCRIPTORS, local_dir=str(root / "local"),
                                      allow_pickle=True)
        store = provider.get_store(0)
        plant(store.backend, marker)
        if with_opstate:
            store.backend.operator_state = HostileOldOperatorState(marker)
        store.commit()
        provider.close()
    out["full-legacy"] = as_format_1(out["full-keyed"])
    # a manifest without value_format 2: what stateengine wrote before format 2 (handle
    # objects, not dicts: a sealed document cannot be edited without failing its checksum)
    out["incremental-legacy"] = dataclasses.replace(out["incremental-keyed"], value_format=1)
    assert not os.path.exists(marker)
    return out


def as_format_1(handle):
    """A copy of a full snapshot whose meta block is rewritten in format 1 (the sections are
    the same; their offsets move by the change of the meta block's length). The handle is
    built as an object: a sealed handle dict cannot be edited without failing its checksum."""
    src = os.path.join(handle.root, handle.file.path)
    with open(src, "rb") as f:
        data = f.read()
    meta, old_len = SnapshotMeta.decode(data[:handle.meta_length])
    head = meta.encode(version=1)
    data = head + data[old_len:]
    rel = handle.file.path + "-format1"
    with open(os.path.join(handle.root, rel), "wb") as f:
        f.write(data)
    return dataclasses.replace(
        handle, file=FileRef(rel, len(data), _native.crc32c(data)), meta_length=len(head),
        offsets={kg: off - old_len + len(head) for kg, off in handle.offsets.items()})


def restored(planted, kind: str, tmp_path, **kw) -> KeyedStateBackend:
    return KeyedStateBackend.restore(tmp_path / f"r-{kind}", [planted[kind]], **kw)


# ---- the read entry points ----------------------------------------------------------------

def read_everything(backend: KeyedStateBackend) -> list[str]:
    """Calls every read entry point of a restored backend; each must return or raise the
    documented error. Returns the names of the calls that raised PickleNotAllowedError."""
    refused: list[str] = []

    def call(name, fn):
        try:
            result = fn()
            if hasattr(result, "__next__"):
                list(result)
        except PickleNotAllowedError as e:
            assert "allow_pickle=True" in str(e)
            refused.append(name)

    for d in ("p", "pk"):
        with pytest.raises(StateRegistrationError, match="allow_pickle=True"):
            backend.get_state(next(x for x in DESCRIPTORS if x.name == d))
    h = {d.name: backend.get_state(d) for d in PLAIN}
    for key in (CLEAN_KEY, KEY):
        backend.set_current_key(key)
        call(f"v.value[{key}]", h["v"].value)
        call(f"vi.value[{key}]", h["vi"].value)
        call(f"l.get[{key}]", h["l"].get)
        call(f"m.get[{key}]", lambda: h["m"].get("k"))
        call(f"m.contains[{key}]", lambda: h["m"].contains("k"))
        call(f"m.is_empty[{key}]", h["m"].is_empty)
        for what in ("entries", "items", "keys", "values", "__iter__"):
            call(f"m.{what}[{key}]", getattr(h["m"], what))
        call(f"sm.get[{key}]", lambda: h["sm"].get(5))
        for what in ("first_entry", "last_entry"):
            call(f"sm.{what}[{key}]", getattr(h["sm"], what))
        call(f"sm.head[{key}]", lambda: h["sm"].head(10))
        call(f"sm.tail[{key}]", lambda: h["sm"].tail(0))
        call(f"sm.sub[{key}]", lambda: h["sm"].sub(0, 10))
        call(f"rn.get[{key}]", h["rn"].get)
        for name in ("r", "a"):
            h[name].set_current_namespace(1)
            call(f"{name}.get[{key}]", h[name].get)
            call(f"{name}.add[{key}]", lambda: h[name].add(3))
            call(f"{name}.merge_namespaces[{key}]", lambda: h[name].merge_namespaces(9, [1]))
            h[name].set_current_namespace(None)
    keys = [CLEAN_KEY, KEY]
    call("v.get_many", lambda: h["v"].get_many(keys))
    call("l.get_many", lambda: h["l"].get_many(keys))
    call("m.get_many", lambda: h["m"].get_many(keys, ["k", "k"]))
    call("sm.get_many", lambda: h["sm"].get_many(keys, [5, 5]))
    call("rn.get_many", lambda: h["rn"].get_many(keys))
    for name in ("r", "a"):
        h[name].set_current_namespace(1)
        call(f"{name}.get_many", lambda: h[name].get_many(keys))
        call(f"{name}.add_many", lambda: h[name].add_many(keys, [1, 2]))
        h[name].set_current_namespace(None)
    for d in DESCRIPTORS:
        call(f"get_keys({d.name})", lambda: backend.get_keys(d.name))
        call(f"num_state_entries({d.name})", lambda: backend.num_state_entries(d.name))
        backend.state_meta(d.name)
    call("get_keys(vi, ns)", lambda: backend.get_keys("vi", 1))
    timers = backend.timer_service
    before = (timers.num_event_time_timers(), timers.num_processing_time_timers())
    call("next_event_time", timers.next_event_time)
    call("next_processing_time", timers.next_processing_time)
    call("advance_watermark", lambda: timers.advance_watermark(100))
    call("advance_processing_time", lambda: timers.advance_processing_time(100))
    # a refused timer is put back, not lost
    assert (timers.num_event_time_timers(), timers.num_processing_time_timers()) == before
    for key in keys:  # moves raw bytes between namespaces: nothing to decode
        backend.set_current_key(key)
        call(f"l.merge_namespaces[{key}]", lambda: h["l"].merge_namespaces(9, [None]))
    return refused


EXPECTED_REFUSALS = {
    "v.value[1]", "l.get[1]", "m.get[1]", "m.entries[1]", "m.items[1]", "m.keys[1]",
    "m.values[1]", "m.__iter__[1]", "sm.get[1]", "sm.first_entry[1]", "sm.last_entry[1]",
    "sm.head[1]", "sm.tail[1]", "sm.sub[1]", "rn.get[1]", "r.get[1]", "r.add[1]",
    "r.merge_namespaces[1]", "a.get[1]", "a.add[1]", "a.merge_namespaces[1]",
    "v.get_many", "l.get_many", "m.get_many", "sm.get_many", "rn.get_many", "r.get_many",
    "r.add_many", "a.get_many", "a.add_many", "advance_watermark", "advance_processing_time",
}


@pytest.mark.parametrize("kind", ["full-keyed", "incremental-keyed"])
def test_restored_backend_never_unpickles(planted, kind, tmp_path):
    backend = restored(planted, kind, tmp_path)
    try:
        refused = set(read_everything(backend))
        assert refused == EXPECTED_REFUSALS
        # what it holds moves on untouched: a snapshot and a checkpoint of it read nothing
        backend.snapshot(tmp_path / "again", "s").result()
        backend.checkpoint(2, tmp_path / "again").result()
    finally:
        backend.dispose()
    assert not os.path.exists(planted["marker"])


def test_state_store_version_never_unpickles(planted, tmp_path):
    with StateStoreProvider(planted["root"] / "store-keyed", "op", 0, 1, key_type=int,
                            descriptors=PLAIN, local_dir=str(tmp_path)) as provider:
        assert provider.latest_version() == 1
        store = provider.get_store(1)
        assert set(read_everything(store.backend)) == EXPECTED_REFUSALS
        store.abort()
    with pytest.raises(StateRegistrationError, match='value_type="pickle".*allow_pickle=True'):
        StateStoreProvider(planted["root"] / "store-keyed", "op", 0, 1, key_type=int,
                           descriptors=DESCRIPTORS, local_dir=str(tmp_path))
    with pytest.raises(StateRegistrationError, match='user_key_type="pickle"'):
        KeyedStateBackend.restore(tmp_path / "r", [planted["full-keyed"]],
                                  descriptors=DESCRIPTORS[-1:])
    assert not os.path.exists(planted["marker"])


@pytest.mark.parametrize("kind", ["full-op", "incremental-op", "full-legacy",
                                  "incremental-legacy"])
def test_pickled_operator_state_or_old_pickled_keys_fail_the_restore(planted, kind, tmp_path):
    """A format-1 operator-state file is a pickle; a format-1 checkpoint's pickled namespaces
    and user keys would need unpickling to be found again. Without allow_pickle both fail
    the restore, naming the flag, and nothing is left behind."""
    with pytest.raises(PickleNotAllowedError, match="allow_pickle=True") as e:
        restored(planted, kind, tmp_path)
    if kind.endswith("legacy"):
        assert "'m' (1)" in str(e.value) and "'vi' (1)" in str(e.value)
        assert "'__timers_event__' (1)" in str(e.value)
    else:
        assert "operator state written by stateengine before format 2" in str(e.value)
    assert not os.path.exists(tmp_path / f"r-{kind}")
    with pytest.raises(PickleNotAllowedError):
        StateStoreProvider(planted["root"] / "store-op", "op", 0, 1, key_type=int,
                           descriptors=PLAIN, local_dir=str(tmp_path)).get_store(1)
    assert not os.path.exists(planted["marker"])


def test_cli_never_unpickles_and_prints_pickles_as_bytes(planted, tmp_path, capsys):
    ck = str(planted["root"] / "store-op")
    assert cli(["versions", ck]) == 0
    assert cli(["verify", ck, "--operator", "op"]) == 0
    assert cli(["meta", os.path.join(planted["full-op"].root, planted["full-op"].file.path)]) == 0
    capsys.readouterr()
    payload = pickle.dumps(Payload(planted["marker"]), protocol=5)
    for d in DESCRIPTORS:
        assert cli(["dump", ck, "--operator", "op", "--state", d.name]) == 0, d.name
        rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
        assert {r["key"] for r in rows} >= {KEY}, d.name
        text = json.dumps(rows)
        assert '"pickled"' in text and f'"bytes": {len(payload)}' in text, d.name
    assert not os.path.exists(planted["marker"])


def test_allow_pickle_unpickles_on_opt_in(planted, tmp_path):
    """The control: the same data with allow_pickle=True does run the payload, so the tests
    above would have seen it."""
    backend = restored(planted, "full-keyed", tmp_path, allow_pickle=True)
    try:
        backend.set_current_key(CLEAN_KEY)
        assert backend.get_state(DESCRIPTORS[8]).value() == {"clean": True}  # a pickle state
        assert not os.path.exists(planted["marker"])
        backend.set_current_key(KEY)
        backend.get_state(DESCRIPTORS[0]).value().close()  # the payload opens a file
        assert os.path.exists(planted["marker"])
    finally:
        backend.dispose()
        os.remove(planted["marker"])
