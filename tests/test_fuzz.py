"""Coverage-guided fuzzing in the suite (tests/fuzz, docs/reliability/fuzzing.md): every
harness replays its corpus (seeds and the inputs of past findings) and then fuzzes for a few
seconds; the hours-long runs are `scripts/fuzz.sh`. Below, each bug the fuzzers found, as a
plain regression test of the public entry point it came through."""

from __future__ import annotations

import datetime as dt
import os
import struct

import pytest

from stateengine import (CorruptionError, KeyedStateBackend, ListStateDescriptor,
                         ValueStateDescriptor, _native)
from stateengine.sparktypes import parse_ddl
from tests.fuzz import run

# Seconds each harness fuzzes in the suite: 9 harnesses, well under a minute in all.
SECONDS = 3


@pytest.fixture(scope="module")
def built():
    from tests.fuzz.build import build

    return build()  # compiled once (cached in build/fuzz/ while the sources do not change)


@pytest.mark.parametrize("harness", run.all_harnesses())
def test_harness_replays_corpus_and_fuzzes(built, harness, tmp_path, monkeypatch):
    monkeypatch.setattr(run, "OUT", str(tmp_path))
    monkeypatch.setattr(run, "LOG", str(tmp_path / "log.jsonl"))
    proc = run.replay(harness)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert len(os.listdir(os.path.join(run.SEEDS, harness))) >= 1
    record = run.fuzz(harness, SECONDS)
    assert record["exit"] == 0 and record["findings"] == [], record.get("tail", record)
    runs = [int(s.split()[1]) for s in record["stats"] if s.startswith("Done ")]
    assert runs and runs[0] > 50, record["stats"]  # it did run inputs


def test_every_decoder_has_a_harness():
    assert set(run.all_harnesses()) == {
        "snapshot_reader", "codec", "row_codec", "composite_key",          # libFuzzer, ASan+UBSan
        "row_evolution",
        "any_codec_py", "keys_py", "operator_state_py", "documents_py"}   # atheris


# ---- what the fuzzers found ------------------------------------------------------------------

def test_overlong_varints_are_corruption():
    """row_codec (regress-overlong-varint-count): a count or length written in more bytes than
    needed decoded as the same value, so two byte strings read as one value."""
    assert _native.decode_for_codec(4, b"\x01a") == "a"
    for codec, data in ((4, b"\x81\x00a"), (5, b"\x80\x00"), (1, b"\x03\x81\x00a"),
                        (1, b"\x09\x80\x00")):
        with pytest.raises(CorruptionError):
            _native.decode_for_codec(codec, data)
        assert _native.element_length(codec, data) == -1
    c = _native.row_codec(parse_ddl("a array<int>"))
    assert c.decode_bytes(b"\x00\x00") == ([],)
    with pytest.raises(CorruptionError):
        c.decode_bytes(b"\x00\x80\x00")
    with pytest.raises(CorruptionError):
        _native.decode_rows_to_arrow(c, [b"\x00\x80\x00"], "value")
    ten = b"\xff" * 9 + b"\x02"  # a 10th byte beyond 64 bits
    assert _native.element_length(5, ten) == -1


@pytest.mark.parametrize("codec, good, bad", [(6, b"\x01", b"\x0a"), (6, b"\x00", b"\xff"),
                                              (0, b"\x00", b"!")])
def test_boolean_and_void_bytes_are_their_own(codec, good, bad):
    """any_codec_py (regress-boolean-byte-not-0-or-1, regress-void-byte-not-0): any byte read
    as True (BOOLEAN) or None (VOID)."""
    assert _native.encode_for_codec(codec, _native.decode_for_codec(codec, good)) == good
    with pytest.raises(CorruptionError):
        _native.decode_for_codec(codec, bad)
    assert _native.element_length(codec, bad) == -1


def test_dates_beyond_year_9999_are_corruption_in_the_batch_decoder():
    """row_codec (regress-date-beyond-9999): the scalar decoder refused a stored date outside
    years 1..9999, the validator and the Arrow decoder (batch reads, read_state) took it."""
    c = _native.row_codec(parse_ddl("d date, t timestamp"))
    good = c.encode_bytes((dt.date(9999, 12, 31), dt.datetime(1, 1, 1, tzinfo=dt.timezone.utc)))
    assert c.length(good) == len(good)
    assert _native.decode_rows_to_arrow(c, [good], "value").to_pylist()[0]["d"] == dt.date(9999, 12, 31)
    late = good[:1] + struct.pack(">i", 2932897) + good[5:]      # 10000-01-01
    early = good[:5] + struct.pack(">q", -62135596800000001)     # before 0001-01-01
    for bad in (late, early):
        with pytest.raises(CorruptionError):
            c.decode_bytes(bad)
        with pytest.raises(CorruptionError):
            _native.decode_rows_to_arrow(c, [bad], "value")
        assert c.length(bad) == -1


def test_length_suffixes_of_ambiguous_keys_are_checked(tmp_path):
    """composite_key (regress-wrong-length-suffix): where key and namespace are both
    variable-length, the parser skipped the suffix bytes without reading them, so another
    suffix named the same (key, namespace)."""
    b = KeyedStateBackend(str(tmp_path / "b"), key_type=str)
    try:
        words = b.get_state(ListStateDescriptor("words", str, namespace_type=object))
        b.set_current_key("k")
        words.set_current_namespace("n")
        words.add("x")
        ns_codec = b.state_meta("words")["namespace_codec"]
        (raw, _), = b._raw_scan(b.column_family("words"))
        kg, key, ns, uk = b.parse_state_key(raw, ns_codec, False)
        assert key == "k" and _native.decode_for_codec(1, ns) == "n" and uk == b""
        # [kg][key 02 01 'k'][key length 2][ns 03 01 'n'][ns length 3]
        assert raw[-1] == 3 and raw[1 + 2] == 2
        for at in (3, len(raw) - 1):
            bad = raw[:at] + bytes([raw[at] + 1]) + raw[at + 1:]
            with pytest.raises(CorruptionError):
                b.parse_state_key(bad, ns_codec, False)
    finally:
        b.dispose()


def test_key_group_beyond_max_parallelism_is_corruption(tmp_path):
    """keys_py (regress-key-group-beyond-max-parallelism): parse_state_key returned key group
    167 of a backend with 128."""
    b = KeyedStateBackend(str(tmp_path / "b"), key_type=int)
    try:
        value = b.get_state(ValueStateDescriptor("v", int))
        b.set_current_key(5)
        value.update(1)
        (raw, _), = b._raw_scan(b.column_family("v"))
        assert b.parse_state_key(raw, 0, False)[1] == 5
        with pytest.raises(CorruptionError):
            b.parse_state_key(bytes([167]) + raw[1:], 0, False)
        b.timer_service.register_event_time_timer(10)
        (timer, _), = b._raw_scan(b.column_family("__timers_event__"))
        assert b.parse_timer_key(timer)[1] == 10
        with pytest.raises(CorruptionError):
            b.parse_timer_key(bytes([200]) + timer[1:])
    finally:
        b.dispose()


def test_upgrade_plans_fit_the_current_schema():
    """row_evolution (regress-plan-output-type): RowVersions::Build compiled an upgrade plan
    against the old version's schema only, so a default (4 bytes, an int's) under a current
    field of another type (bigint) made upgraded values the current schema cannot read."""
    from stateengine import evolution

    with open(os.path.join(run.SEEDS, "row_evolution", "regress-plan-output-type"), "rb") as f:
        data = f.read()
    spec = data[2:2 + struct.unpack(">H", data[:2])[0]]
    with pytest.raises(CorruptionError, match="does not compile"):
        _native.EvolvedRowCodec(parse_ddl("l array<struct<x: double, y: bigint>>"), spec, None)
    # the history it was made from, as History.spec writes it, compiles and upgrades
    old = parse_ddl("l array<struct<x: int>>")
    new = parse_ddl("l array<struct<x: double, y: int NOT NULL>>")
    history = evolution.History([evolution.Version(old), evolution.Version(
        new, evolution.declarations(new, {}, {"l.element.y": 7}, "test"))])
    codec = _native.EvolvedRowCodec(new, history.spec(), None)
    assert codec.decode_bytes(_native.row_codec(old).encode_bytes(([(1,), None],))) == \
        ([(1.0, 7), None],)
