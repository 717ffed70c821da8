"""Schema evolution of typed state (stateengine/evolution.py, csrc/row_evolution.h): what may
change, the one error for what may not, old entries upgraded on read (scalar and batch calls,
every kind), the schema history in checkpoints, rescaling, TTL, the CLI, and checkpoints
written before evolution existed (tests/data/typed-before-evolution.tar.gz)."""

from __future__ import annotations

import decimal
import hashlib
import json
import logging
import os
import struct
import sys
import tarfile
import uuid

import pytest

from stateengine import (AggregatingStateDescriptor, CorruptionError, IncompatibleStateError,
                         KeyedStateBackend, KeyGroupRange, ListStateDescriptor,
                         MapStateDescriptor, ReducingStateDescriptor, StateRegistrationError,
                         StateStoreProvider, StateTtlConfig, ValueStateDescriptor, _native,
                         evolution, load_handle)
from stateengine.errors import SchemaEvolutionError
from stateengine.evolution import HISTORY, escape_of
from stateengine.sparktypes import NODE_IDS, parse_ddl, program

HERE = os.path.dirname(__file__)
sys.path.insert(0, os.path.join(HERE, "data"))
import typed_state_v1 as v1  # noqa: E402


def _restore(tmp_path, handles, descriptors, **kw):
    return KeyedStateBackend.restore(str(tmp_path / f"r-{uuid.uuid4().hex[:8]}"), handles,
                                     key_type=int, descriptors=descriptors, **kw)


def _both_handles(backend, tmp_path):
    """A full snapshot and an incremental checkpoint of backend, as they are now."""
    root = str(tmp_path / f"cp-{uuid.uuid4().hex[:6]}")
    return [backend.snapshot(root, "full").result(), backend.checkpoint(1, root).result()]


def _tree_digest(root) -> dict[str, str]:
    out = {}
    for d, _, files in os.walk(root):
        for f in files:
            p = os.path.join(d, f)
            with open(p, "rb") as fh:
                out[os.path.relpath(p, root)] = hashlib.sha256(fh.read()).hexdigest()
    return out


# ---- what may change --------------------------------------------------------------------------

def test_allowed_changes_upgrade_old_entries_of_every_kind(make_backend, tmp_path):
    b = make_backend(key_type=int)
    old = [ValueStateDescriptor("v", "a int, b string, c float"),
           ListStateDescriptor("l", "a int, b string"),
           MapStateDescriptor("m", "string", "a int, b string"),
           ReducingStateDescriptor("r", v1.add_totals, "sum int, n int"),
           AggregatingStateDescriptor("g", v1.Mean(), "sum float, n int")]
    v, l, m, r, g = (b.get_state(d) for d in old)
    for k in range(20):
        b.set_current_key(k)
        v.update((k, f"s{k}", 0.5))
        l.add_all([(k, "x"), (k + 1, None)])
        m.put("u", (k, "y"))
        m.put("w", None)
        r.add((k, 1))
        g.add(1.5)
    new = [ValueStateDescriptor("v", "c double, extra string, a bigint, renamed string",
                                renamed_from={"renamed": "b"}),
           ListStateDescriptor("l", "a double, b string, n int NOT NULL",
                               field_defaults={"n": 7}),
           MapStateDescriptor("m", "string", "a bigint"),
           ReducingStateDescriptor("r", lambda x, y: (x[0] + y[0], x[1] + y[1]),
                                   "sum bigint, n bigint"),
           AggregatingStateDescriptor("g", v1.Mean(), "sum double, n bigint")]
    for handle in _both_handles(b, tmp_path):
        rb = _restore(tmp_path, [handle], new)
        try:
            v2, l2, m2, r2, g2 = (rb.get_state(d) for d in new)
            rb.set_current_key(3)
            assert v2.value() == (0.5, None, 3, "s3")
            assert l2.get() == [(3.0, "x", 7), (4.0, None, 7)]
            assert m2.get("u") == (3,) and m2.get("w") is None and dict(m2.items()) == {
                "u": (3,), "w": None}
            assert r2.get() == (3, 1)
            assert g2.get() == 1.5  # Mean's result of the upgraded accumulator (1.5, 1)
            # writes are in the new schema; old and new entries mix in one list
            v2.update((1.0, "e", 9, "r"))
            l2.add((9.5, "z", 1))
            r2.add((10, 2))
            g2.add(0.5)
            assert v2.value() == (1.0, "e", 9, "r")
            assert l2.get() == [(3.0, "x", 7), (4.0, None, 7), (9.5, "z", 1)]
            assert r2.get() == (13, 3) and g2.get() == 1.0
            # the batch calls read both versions
            values, found = v2.get_many([2, 3, 99])
            assert values.to_pylist() == [
                {"c": 0.5, "extra": None, "a": 2, "renamed": "s2"},
                {"c": 1.0, "extra": "e", "a": 9, "renamed": "r"}, None]
            assert found.tolist() == [True, True, False]
            assert l2.get_many([3]).to_pylist() == [[
                {"a": 3.0, "b": "x", "n": 7}, {"a": 4.0, "b": None, "n": 7},
                {"a": 9.5, "b": "z", "n": 1}]]
            mv, mf = m2.get_many([4, 4], ["u", "w"])
            assert mv.to_pylist() == [{"a": 4}, None] and mf.tolist() == [True, True]
            assert rb.state_meta("v")[HISTORY][0] == {"schema": "struct<a:int,b:string,c:float>"}
        finally:
            rb.dispose()


def test_batch_writes_store_the_bytes_scalar_writes_do(make_backend, tmp_path):
    b = make_backend(key_type=int)
    v = b.get_state(ValueStateDescriptor("v", "a int"))
    b.set_current_key(1)
    v.update((1,))
    rb = _restore(tmp_path, _both_handles(b, tmp_path)[:1],
                  [ValueStateDescriptor("v", "a bigint, b string")])
    try:
        v2 = rb.get_state(ValueStateDescriptor("v", "a bigint, b string"))
        v2.put_many([10, 11], [(5, "x"), (6, None)])
        rb.set_current_key(12)
        v2.update((5, "x"))
        stored = dict(rb.stored_entries("v").__next__())
        by_key = {rb.parse_state_key(k, 0, False)[1]: val for k, val in stored.items()}
        assert by_key[10] == by_key[12]
        assert by_key[10][:2] == b"\xff\x01"  # version marker: escape of struct<a int>, id 1
        assert by_key[1] == b"\x00" + (1).to_bytes(4, "big")  # version 0: as it was written
    finally:
        rb.dispose()


@pytest.mark.parametrize("old,new,paths", [
    ("a bigint, b string", "a int, b bigint",
     ["v value.a: bigint -> int (narrowing", "v value.b: string -> bigint (type changed"]),
    ("a int", "a int, c int NOT NULL",
     ["v value.c: (absent) -> int NOT NULL (a NOT NULL field old entries lack"]),
    ("a int", "a int NOT NULL", ["v value.a: int -> int NOT NULL"]),
    ("s struct<x double>, t array<struct<y bigint>>, m map<string,int>",
     "s struct<x float>, t array<struct<y int>>, m map<int,int>",
     ["value.s.x: double -> float (narrowing", "value.t.element.y: bigint -> int (narrowing",
      "value.m.key: string -> int (map keys never change"]),
    ("d decimal(10,2)", "d decimal(12,3)", ["value.d: decimal(10,2) -> decimal(12,3)"]),
])
def test_refused_changes_are_one_error_and_touch_nothing(make_backend, tmp_path, old, new, paths):
    b = make_backend(key_type=int)
    v = b.get_state(ValueStateDescriptor("v", old))
    for handle in _both_handles(b, tmp_path):
        root = handle.root if hasattr(handle, "root") else None
        before = _tree_digest(tmp_path)
        with pytest.raises(SchemaEvolutionError) as e:
            _restore(tmp_path, [handle], [ValueStateDescriptor("v", new)])
        for p in paths:
            assert p in str(e.value)
        assert len(e.value.problems) == len(paths)
        assert "nothing was read or written" in str(e.value)
        assert isinstance(e.value, IncompatibleStateError) and \
            isinstance(e.value, StateRegistrationError)
        after = _tree_digest(tmp_path)
        assert {k: d for k, d in after.items() if k in before} == before, root
    del v


def test_one_error_lists_every_state_of_a_restore(make_backend, tmp_path):
    b = make_backend(key_type=int)
    b.get_state(ValueStateDescriptor("v", "a bigint"))
    b.get_state(MapStateDescriptor("m", "k int", "x int"))
    [full] = _both_handles(b, tmp_path)[:1]
    with pytest.raises(SchemaEvolutionError) as e:
        _restore(tmp_path, [full], [ValueStateDescriptor("v", "a int"),
                                    MapStateDescriptor("m", "k bigint", "x string")])
    text = str(e.value)
    assert "states 'v', 'm'" in text
    assert "v value.a: bigint -> int (narrowing" in text
    assert "m user_key.k: int -> bigint (map user keys never change" in text
    assert "m value.x: int -> string (type changed" in text


def test_a_bare_rename_is_a_drop_and_an_add_and_is_logged(make_backend, tmp_path, caplog):
    b = make_backend(key_type=int)
    v = b.get_state(ValueStateDescriptor("v", "a int, name string"))
    b.set_current_key(1)
    v.update((1, "ann"))
    [full] = _both_handles(b, tmp_path)[:1]
    with caplog.at_level(logging.WARNING, "stateengine.evolution"):
        rb = _restore(tmp_path, [full], [ValueStateDescriptor("v", "a int, user string")])
    try:
        rb.set_current_key(1)
        assert rb.get_state(ValueStateDescriptor("v", "a int, user string")).value() == (1, None)
    finally:
        rb.dispose()
    text = caplog.text
    assert "added user" in text and "dropped name" in text and "renamed_from" in text


def test_declarations_are_checked_against_the_schema():
    with pytest.raises(StateRegistrationError, match="'b' does not name a struct field"):
        ValueStateDescriptor("v", "a int", renamed_from={"b": "x"})
    with pytest.raises(StateRegistrationError, match="does not fit the field's type int"):
        ValueStateDescriptor("v", "a int", field_defaults={"a": "text"})
    with pytest.raises(StateRegistrationError, match="is None but the field is NOT NULL"):
        ValueStateDescriptor("v", "a int NOT NULL", field_defaults={"a": None})
    with pytest.raises(StateRegistrationError, match="typed value schema"):
        ValueStateDescriptor("v", renamed_from={"a": "b"})
    d = ValueStateDescriptor("v", "s array<struct<`x.y` int>>",
                             field_defaults={"s.element.`x.y`": 3})
    assert list(d.evolution.defaults) == [("s", "element", "x.y")]


# ---- chains of versions ----------------------------------------------------------------------

def test_a_chain_of_versions_composes_renames_defaults_and_widening(make_backend, tmp_path):
    schemas = [("a int, b string", {}, {}),
               ("a bigint, c int NOT NULL, b string", {}, {"c": 5}),
               ("a double, cc bigint NOT NULL", {"cc": "c"}, {}),     # b dropped, c renamed
               ("a double, cc double, b string", {}, {})]             # b added again: new field
    b = make_backend(key_type=int)
    handles = []
    backend = b
    for i, (schema, renames, defaults) in enumerate(schemas):
        d = ValueStateDescriptor("v", schema, renamed_from=renames, field_defaults=defaults)
        if i:
            backend = _restore(tmp_path, handles[-1:], [d])
        s = backend.get_state(d)
        backend.set_current_key(i)
        s.update({0: (0, "zero"), 1: (1, 7, "one"), 2: (2.5, 8), 3: (3.5, 9.0, "three")}[i])
        handles.append(backend.snapshot(str(tmp_path / f"cp{i}"), "s").result())
        if i == len(schemas) - 1:
            got = {}
            for k in range(4):
                backend.set_current_key(k)
                got[k] = s.value()
            assert got == {0: (0.0, 5.0, None), 1: (1.0, 7.0, None), 2: (2.5, 8.0, None),
                           3: (3.5, 9.0, "three")}
            meta = backend.state_meta("v")
            assert len(meta[HISTORY]) == 4
            assert meta[HISTORY][2]["renamed_from"] == {"cc": "c"}
            assert [row.as_py() for row in s.get_many([0, 1, 2, 3])[0]] == [
                {"a": 0.0, "cc": 5.0, "b": None}, {"a": 1.0, "cc": 7.0, "b": None},
                {"a": 2.5, "cc": 8.0, "b": None}, {"a": 3.5, "cc": 9.0, "b": "three"}]
        if backend is not b:
            backend.dispose()


def test_evolving_back_to_an_earlier_layout_writes_unmarked_entries(make_backend, tmp_path):
    b = make_backend(key_type=int)
    b.get_state(ValueStateDescriptor("v", "a int"))
    h = _both_handles(b, tmp_path)[0]
    r1 = _restore(tmp_path, [h], [ValueStateDescriptor("v", "a int, b int")])
    h1 = r1.snapshot(str(tmp_path / "c1"), "s").result()
    r1.dispose()
    r2 = _restore(tmp_path, [h1], [ValueStateDescriptor("v", "x int", renamed_from={"x": "a"})])
    try:
        s = r2.get_state(ValueStateDescriptor("v", "x int", renamed_from={"x": "a"}))
        r2.set_current_key(1)
        s.update((4,))
        [(_, raw)] = next(r2.stored_entries("v"))
        assert raw == b"\x00" + (4).to_bytes(4, "big")  # laid out as version 0: no marker
        assert s.value() == (4,)
    finally:
        r2.dispose()


# ---- markers ------------------------------------------------------------------------------

@pytest.mark.parametrize("schema,escape", [
    ("a int", b"\xff"),
    ("a int, b int, c int, d int, e int, f int, g int, h int", b"\xff\xfe"),
    ("a int NOT NULL, b int, c int, d int, e int, f int, g int, h int", b"\xff"),
    ("array<int>", b"\x80\x00"),
    ("map<string,int>", b"\x80\x00"),
    ("decimal(10,2)", b"\xff"),
    ("smallint", None),
])
def test_marker_escapes_no_encoding_of_version_0_begins_with(schema, escape):
    assert escape_of(parse_ddl(schema)) == escape


def test_a_struct_of_eight_nullable_fields_keeps_its_all_null_value_apart(make_backend,
                                                                          tmp_path):
    eight = ", ".join(f"f{i} int" for i in range(8))
    b = make_backend(key_type=int)
    s = b.get_state(ListStateDescriptor("l", eight))
    b.set_current_key(1)
    s.add_all([(None,) * 8, (1,) * 8, (None,) * 8])  # 0xFF, the escape's first byte
    [h] = _both_handles(b, tmp_path)[:1]
    d = ListStateDescriptor("l", eight + ", f8 string")
    rb = _restore(tmp_path, [h], [d])
    try:
        s2 = rb.get_state(d)
        rb.set_current_key(1)
        s2.add((None,) * 9)
        assert s2.get() == [(None,) * 9, (1,) * 8 + (None,), (None,) * 9, (None,) * 9]
    finally:
        rb.dispose()


def test_a_top_level_tinyint_cannot_widen(make_backend, tmp_path):
    b = make_backend(key_type=int)
    b.get_state(ValueStateDescriptor("v", "tinyint"))
    [h] = _both_handles(b, tmp_path)[:1]
    with pytest.raises(SchemaEvolutionError, match="a top-level tinyint cannot change"):
        _restore(tmp_path, [h], [ValueStateDescriptor("v", "smallint")])


# ---- TTL, rescaling, registration ---------------------------------------------------------

def test_ttl_lists_of_mixed_versions_expire_and_compact(make_backend, tmp_path):
    ttl = StateTtlConfig(ttl_ms=100)
    b = make_backend(key_type=int)
    b.set_ttl_time(1_000)
    s = b.get_state(ListStateDescriptor("l", "a int", ttl=ttl))
    for k in range(10):
        b.set_current_key(k)
        s.add((k,))
    [h] = _both_handles(b, tmp_path)[:1]
    d = ListStateDescriptor("l", "a bigint, b string", ttl=ttl)
    rb = _restore(tmp_path, [h], [d])
    try:
        rb.set_ttl_time(1_050)
        s2 = rb.get_state(d)
        for k in range(10):
            rb.set_current_key(k)
            s2.add((k * 10, "new"))
        rb.set_current_key(3)
        assert s2.get() == [(3, None), (30, "new")]
        rb.set_ttl_time(1_120)  # the old elements expired, the new ones live
        assert s2.get() == [(30, "new")]
        assert s2.get_many([4]).to_pylist() == [[{"a": 40, "b": "new"}]]
        h2 = rb.snapshot(str(tmp_path / "ttl2"), "s").result()  # purges expired elements
    finally:
        rb.dispose()
    r3 = _restore(tmp_path, [h2], [d])
    try:
        r3.set_ttl_time(1_120)
        r3.set_current_key(5)
        assert r3.get_state(d).get() == [(50, "new")]
    finally:
        r3.dispose()


def test_rescaling_merges_histories_that_extend_each_other(make_backend, tmp_path):
    left, right = KeyGroupRange(0, 63), KeyGroupRange(64, 127)
    ds = [ValueStateDescriptor("v", "a int")]
    handles = []
    for i, r in enumerate((left, right)):
        b = make_backend(key_group_range=r, key_type=int)
        s = b.get_state(ds[0])
        for k in range(40):
            if r.contains(__import__("stateengine").assign_key_group(k)):
                b.set_current_key(k)
                s.update((k,))
        handles.append(b.checkpoint(1, str(tmp_path / f"p{i}")).result())
    # one partition moves on to schema version 1, the other stays at version 0
    evolved = ValueStateDescriptor("v", "a bigint, b string")
    rb = KeyedStateBackend.restore(str(tmp_path / "mv"), [handles[1]], key_type=int,
                                   descriptors=[evolved])
    s = rb.get_state(evolved)
    rb.set_current_key(next(k for k in range(40) if right.contains(
        __import__("stateengine").assign_key_group(k))))
    s.update((-1, "new"))
    handles[1] = rb.checkpoint(2, str(tmp_path / "p1b")).result()
    rb.dispose()
    both = KeyedStateBackend.restore(str(tmp_path / "all"), handles, key_type=int,
                                     descriptors=[evolved])
    try:
        s = both.get_state(evolved)
        values, found = s.get_many(list(range(40)))
        got = values.to_pylist()
        assert all(found)
        assert sum(1 for g in got if g["b"] == "new") == 1
        assert sorted(g["a"] for g in got if g["b"] is None) == sorted(
            set(range(40)) - {next(g for g in range(40) if got[g]["b"] == "new")})
        assert len(both.state_meta("v")[HISTORY]) == 2
    finally:
        both.dispose()
    # histories that diverge cannot be merged
    other = KeyedStateBackend.restore(str(tmp_path / "mv2"), [handles[0]], key_type=int,
                                      descriptors=[ValueStateDescriptor("v", "a double")])
    h0 = other.checkpoint(3, str(tmp_path / "p0b")).result()
    other.dispose()
    with pytest.raises(IncompatibleStateError, match="handles of one checkpoint version agree"):
        KeyedStateBackend.restore(str(tmp_path / "bad"), [h0, handles[1]], key_type=int)


def test_a_registered_state_keeps_its_schema_in_its_backend(backend):
    backend.get_state(ValueStateDescriptor("v", "a int"))
    with pytest.raises(StateRegistrationError, match="one schema per state"):
        backend.get_state(ValueStateDescriptor("v", "a bigint"))


def test_a_malformed_history_behind_valid_checksums_is_corruption():
    meta = {"name": "v", "kind": "value", "value_schema": "struct<a:string>",
            HISTORY: [{"schema": "struct<a:int>"}, {"schema": "struct<a:string>"}]}
    with pytest.raises(CorruptionError, match="not an allowed change"):
        evolution.value_codec(meta)
    meta["value_schema"] = "struct<a:bigint>"
    with pytest.raises(CorruptionError, match="last version's schema is not the value schema"):
        evolution.value_codec(meta)
    meta[HISTORY] = [{"schema": "struct<a:int>"}, {"schema": "struct<a:bigint>",
                                                   "defaults": {"a": "!!"}}]
    meta["value_schema"] = "struct<a:bigint>"
    with pytest.raises(CorruptionError, match="not an encoding"):
        evolution.value_codec(meta)
    meta[HISTORY] = [{"schema": "struct<a:int>"}]
    with pytest.raises(CorruptionError, match="two or more versions"):
        evolution.value_codec(meta)


def _spec(versions, write_id=1, escape=b"\xff"):
    """A RowVersions spec (evolution.History.spec's layout) of (ddl, plan) versions: plan
    None is a direct version."""
    out = struct.pack(">IIH", len(versions), write_id, len(escape)) + escape
    for ddl, plan in versions:
        prog = program(parse_ddl(ddl))
        out += struct.pack(">I", len(prog)) + prog
        out += struct.pack(">BI", plan is None, len(plan or b"")) + (plan or b"")
    return out


_OLD = lambda i: struct.pack(">BI", evolution.SRC_OLD, i)  # noqa: E731
_COPY = bytes([evolution.OP_COPY])
_TO_BIGINT = bytes([evolution.OP_WIDEN, NODE_IDS["bigint"]])
_DEFAULT_HALF = struct.pack(">BI", evolution.SRC_DEFAULT, 8) + struct.pack(">d", 0.5)
_NOW = "b string, a bigint, c double NOT NULL"


def _fields(*sources):
    return bytes([evolution.OP_STRUCT]) + struct.pack(">I", len(sources)) + b"".join(sources)


@pytest.mark.parametrize("versions, write_id, escape", [
    # a plan that widens to a type other than the current field's (the fuzzer's
    # regress-plan-output-type: its upgraded values were bytes the current schema refuses)
    ([("a int, b string", _fields(_OLD(1) + _COPY, _OLD(0) + bytes([2, NODE_IDS["double"]]),
                                  _DEFAULT_HALF)), (_NOW, None)], 1, b"\xff"),
    # a default that is not one value of its field (4 bytes for a double)
    ([("a int, b string", _fields(_OLD(1) + _COPY, _OLD(0) + _TO_BIGINT,
                                  struct.pack(">BI", 2, 4) + bytes(4))), (_NOW, None)], 1, b"\xff"),
    # null for a NOT NULL field
    ([("a int, b string", _fields(_OLD(1) + _COPY, _OLD(0) + _TO_BIGINT,
                                  bytes([evolution.SRC_NULL]))), (_NOW, None)], 1, b"\xff"),
    # a nullable old field into a NOT NULL one
    ([("a int, b string, c double", _fields(_OLD(1) + _COPY, _OLD(0) + _TO_BIGINT,
                                            _OLD(2) + _COPY)), (_NOW, None)], 1, b"\xff"),
    # a copy of a field laid out otherwise (int bytes read as bigint)
    ([("a int, b string", _fields(_OLD(1) + _COPY, _OLD(0) + _COPY, _DEFAULT_HALF)),
      (_NOW, None)], 1, b"\xff"),
    # fewer fields than the current struct
    ([("a int, b string", _fields(_OLD(1) + _COPY, _OLD(0) + _TO_BIGINT)), (_NOW, None)], 1,
     b"\xff"),
    # a direct version whose bytes the current schema does not read
    ([("a int, b string", None), (_NOW, None)], 1, b"\xff"),
    # an escape other than version 0's (0xFF for a struct of two fields)
    ([("a int, b string", _fields(_OLD(1) + _COPY, _OLD(0) + _TO_BIGINT, _DEFAULT_HALF)),
      (_NOW, None)], 1, b"\xff\xfe"),
    # values written now marked as a version laid out otherwise
    ([("a int, b string", _fields(_OLD(1) + _COPY, _OLD(0) + _TO_BIGINT, _DEFAULT_HALF)),
      (_NOW, None)], 0, b"\xff"),
])
def test_the_native_reader_refuses_a_history_spec_its_schemas_do_not_fit(versions, write_id,
                                                                         escape):
    """RowVersions::Build checks every plan against both its schemas, the escape and the
    written version, so an upgraded value is always one the current schema accepts."""
    good = [versions[0][:1] + (_fields(_OLD(1) + _COPY, _OLD(0) + _TO_BIGINT, _DEFAULT_HALF),),
            (_NOW, None)]
    codec = _native.EvolvedRowCodec(parse_ddl(_NOW), _spec(good), None)
    if versions[0][0] == "a int, b string":
        old = _native.row_codec(parse_ddl("a int, b string")).encode_bytes((3, "x"))
        assert codec.decode_bytes(old) == ("x", 3, 0.5)
    with pytest.raises(CorruptionError, match="does not compile"):
        _native.EvolvedRowCodec(parse_ddl(_NOW), _spec(versions, write_id, escape), None)


def test_history_specs_compile_in_the_native_reader():
    """What History.spec writes, RowVersions::Build accepts (roots of every kind that can
    evolve, defaults carried through later widenings), and the C++ upgrade of a version-0
    value is what the Python plan makes of it."""
    eight = "b int, c int, d int, e int, f int, g int, h int"
    chains = [(["a int, b string", "b string, a bigint, c double"], (3, "x")),
              ([f"a tinyint, {eight}", f"a smallint, {eight}, i int NOT NULL",
                f"a bigint, {eight[7:]}, i bigint NOT NULL"], (1, 2, None, 4, 5, 6, 7, 8)),
              (["array<int>", "array<bigint>", "array<double>"], [1, None, -3]),
              (["map<string,struct<n: smallint>>", "map<string,struct<n: int, m string>>"],
               {"k": (2,), "j": None}),
              (["decimal(5,2)", "decimal(12,2)"], decimal.Decimal("-123.45"))]
    for chain, value in chains:
        history = evolution.History([evolution.Version(parse_ddl(chain[0]))])
        for ddl in chain[1:]:
            t = parse_ddl(ddl)
            history = evolution.History(history.versions + [evolution.Version(
                t, evolution.declarations(t, {}, {"i": 3} if "i int NOT" in ddl else {}, "t"))])
        codec = _native.EvolvedRowCodec(history.current, history.spec(), None)
        old = _native.row_codec(history.versions[0].schema).encode_bytes(value)
        assert codec.decode_bytes(old) == evolution._convert(history.plan_from(0), value,
                                                             history.current), chain


def test_a_marker_naming_no_version_is_corruption(make_backend, tmp_path):
    b = make_backend(key_type=int)
    b.get_state(ValueStateDescriptor("v", "a int"))
    [h] = _both_handles(b, tmp_path)[:1]
    d = ValueStateDescriptor("v", "a bigint")
    rb = _restore(tmp_path, [h], [d])
    try:
        s = rb.get_state(d)
        rb.set_current_key(1)
        codec = evolution.value_codec(rb.state_meta("v"))
        with pytest.raises(CorruptionError, match="not a valid encoding of any version"):
            codec.decode_bytes(b"\xff\x05" + bytes(9))
        assert codec.decode_bytes(b"\xff\x01" + bytes(9)) == (0,)
        assert codec.decode_bytes(b"\x00" + bytes(4)) == (0,)
    finally:
        rb.dispose()


# ---- the CLI ----------------------------------------------------------------------------------

def test_dump_and_meta_show_the_history(tmp_path, capsys):
    ck = str(tmp_path / "ck")
    d0 = [ValueStateDescriptor("v", "a int, b string")]
    p = StateStoreProvider(ck, "op", 0, 1, key_type=int, descriptors=d0,
                           local_dir=str(tmp_path / "l0"))
    s = p.get_store(0)
    st = s.get_state(d0[0])
    s.backend.set_current_key(1)
    st.update((1, "x"))
    s.commit()
    p.close()
    d1 = [ValueStateDescriptor("v", "b string, a bigint, c int NOT NULL",
                               field_defaults={"c": 42})]
    p = StateStoreProvider(ck, "op", 0, 1, key_type=int, descriptors=d1,
                           local_dir=str(tmp_path / "l1"))
    s = p.get_store(1)
    s.backend.set_current_key(2)
    s.get_state(d1[0]).update(("y", 5, 1))
    snap = s.backend.snapshot(str(tmp_path / "snap"), "s").result()
    s.commit()
    p.close()
    from stateengine.cli import main

    assert main(["dump", ck, "--operator", "op", "--state", "v"]) == 0
    out = capsys.readouterr().out
    rows = sorted((json.loads(line) for line in out.splitlines()), key=lambda r: r["key"])
    assert [(r["key"], r["schema_version"], r["value"]) for r in rows] == [
        (1, 0, {"b": "x", "a": 1, "c": 42}), (2, 1, {"b": "y", "a": 5, "c": 1})]
    assert main(["meta", os.path.join(str(tmp_path / "snap"), snap.file.path)]) == 0
    out = capsys.readouterr().out
    [state] = [x for x in json.loads(out)["states"] if x["name"] == "v"]
    assert state[HISTORY] == [
        {"version": 0, "schema": "struct<a:int,b:string>"},
        {"version": 1, "schema": "struct<b:string,a:bigint,c:int NOT NULL>",
         "added": [{"field": "c", "type": "int NOT NULL", "default": 42}], "dropped": [],
         "renamed": [], "widened": [{"field": "a", "from": "int", "to": "bigint"}]}]


# ---- checkpoints written before schema evolution ----------------------------------------------

@pytest.fixture(scope="module")
def before(tmp_path_factory):
    root = tmp_path_factory.mktemp("before")
    with tarfile.open(os.path.join(HERE, "data", "typed-before-evolution.tar.gz")) as t:
        t.extractall(root, filter="data")
    return root


def _read_all(backend, descriptors, keys):
    hs = [backend.get_state(d) for d in descriptors]
    backend.set_ttl_time(v1.TTL_TIME)
    out = {}
    for k in keys:
        backend.set_current_key(k)
        session, events, attrs, total, acc, recent = hs
        out[k] = {"session": session.value(), "events": events.get(),
                  "attrs": dict(attrs.items()), "total": total.get(),
                  "acc": acc.get(), "recent": recent.get()}
    return out


def test_checkpoints_written_before_evolution_restore_as_they_were(before, tmp_path):
    # The fixture was written under another directory (its handle records that root):
    # load_handle resolves it where it lies now, as for any copied checkpoint.
    handle = load_handle(str(before / "full"), "snap.handle.json")
    b = KeyedStateBackend.restore(str(tmp_path / "f"), [handle], key_type=int,
                                  descriptors=v1.descriptors())
    try:
        got = _read_all(b, v1.descriptors(), v1.KEYS)
    finally:
        b.dispose()
    for k in v1.KEYS:
        e = v1.expected(k)
        assert got[k] == dict(e, acc=e["acc"][0] / e["acc"][1]), k
    for p in (0, 1):
        prov = StateStoreProvider(str(before / "store"), "op", p, 2, key_type=int,
                                  descriptors=v1.descriptors(), local_dir=str(tmp_path / f"s{p}"))
        s = prov.get_store(2)
        assert HISTORY not in s.backend.state_meta("session")
        s.abort()
        prov.close()


def test_checkpoints_written_before_evolution_evolve(before, tmp_path):
    new = v1.descriptors(
        session="amount decimal(9,2), count double, label string, tags array<string>, "
                "score double, seen int NOT NULL",
        event="ts bigint, what string, n int",
        attr="n bigint", total="sum bigint, n bigint", acc="sum double, n bigint",
        recent="v bigint, w string",
        evolve={"session": ({"label": "last"}, {"seen": 0}), "events": ({"what": "kind"}, {})})
    # rescaled: the two partitions' versions into one backend
    prov = StateStoreProvider(str(before / "store"), "op", 0, 1, key_type=int, descriptors=new,
                              local_dir=str(tmp_path / "one"))
    s = prov.get_store(2)
    got = _read_all(s.backend, new, v1.KEYS)
    for k in v1.KEYS:
        e = v1.expected(k)
        count, last, tags, score, amount = e["session"]
        assert got[k] == {
            "session": (amount, float(count), last, tags, score, 0),
            "events": [(ts, kind, None) for ts, kind in e["events"]],
            "attrs": {u: (n,) for u, (n, _) in e["attrs"].items()},
            "total": e["total"], "acc": e["acc"][0] / e["acc"][1],
            "recent": [(v, None) for (v,) in e["recent"]]}, k
    s.commit()
    prov.close()
    # version 3 holds the history; every partition count restores it
    prov = StateStoreProvider(str(before / "store"), "op", 1, 3, key_type=int, descriptors=new,
                              local_dir=str(tmp_path / "three"))
    s = prov.get_store(3)
    assert [h["schema"] for h in s.backend.state_meta("session")[HISTORY]] == [
        parse_ddl(v1.SESSION).canonical(), parse_ddl(new[0].value_type).canonical()]
    s.abort()
    prov.close()
