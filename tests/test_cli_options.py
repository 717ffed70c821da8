"""The stateengine command's options: help text everywhere, -v means --verbose, --version N
picks the version (the old -v N still works and warns), and ``dump --timers``."""

from __future__ import annotations

import argparse
import json
import logging
import os
import pickle
import struct

import pytest

from stateengine import StateStoreProvider, ValueStateDescriptor
from stateengine.cli import build_parser, main

COUNT = ValueStateDescriptor("count", value_type=int, default=0)


def parsers(parser, path=("stateengine",)):
    """(command path, parser) of the parser and, recursively, of every subcommand."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from parsers(sub, path + (name,))


def test_every_subcommand_and_option_has_help_text():
    seen = []
    for path, parser in parsers(build_parser()):
        seen.append(" ".join(path))
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            if isinstance(action, argparse._SubParsersAction):
                assert action.help, path
                for choice in action._choices_actions:  # each subcommand's line in the list
                    assert choice.help and choice.help.strip(), (path, choice.dest)
                continue
            assert action.help and action.help.strip(), (path, action.option_strings or
                                                         action.dest)
    assert {"stateengine", "stateengine versions", "stateengine verify", "stateengine dump",
            "stateengine meta"} <= set(seen)


def test_v_is_verbose_everywhere_and_version_is_spelled_out():
    for path, parser in parsers(build_parser()):
        for action in parser._actions:
            if "-v" in action.option_strings:
                assert isinstance(action, argparse._CountAction), path
                assert "--verbose" in action.option_strings, path
            if "--version" in action.option_strings:
                assert action.type is int and "-v" not in action.option_strings, path


def commit(ck, local, timers=(), users=("u1", "u2")):
    provider = StateStoreProvider(ck, "op", 0, 1, key_type=type(users[0]), local_dir=local,
                                  descriptors=[COUNT])
    version = 0
    for batch in range(2):
        store = provider.get_store(version)
        count = store.get_state(COUNT)
        for user in users:
            store.backend.set_current_key(user)
            count.update(count.value() + 1)
        for kind, user, ts, ns in timers if batch == 1 else ():
            store.backend.set_current_key(user)
            service = store.backend.timer_service
            (service.register_event_time_timer if kind == "event" else
             service.register_processing_time_timer)(ts, ns)
        version = store.commit()
    provider.close()


@pytest.fixture
def reset_logging():
    logger = logging.getLogger("stateengine")
    level, handlers = logger.level, list(logger.handlers)
    yield logger
    logger.setLevel(level)
    logger.handlers[:] = handlers


def test_old_v_n_form_still_picks_the_version_and_warns(tmp_path, capsys, reset_logging):
    ck = str(tmp_path / "ck")
    commit(ck, str(tmp_path / "l"))
    for argv in (["-v", "1"], ["-v1"]):
        assert main(["dump", ck, "--operator", "op", "--state", "count", *argv]) == 0
        out, err = capsys.readouterr()
        assert sorted(json.loads(line)["value"] for line in out.splitlines()) == [1, 1]
        assert "deprecated" in err and "--version 1" in err
    assert main(["dump", ck, "--operator", "op", "--state", "count", "--version", "2"]) == 0
    out, err = capsys.readouterr()
    assert sorted(json.loads(line)["value"] for line in out.splitlines()) == [2, 2]
    assert err == ""


def test_verbose_counts_and_vv_logs_debug_through_the_stateengine_logger(tmp_path, capsys,
                                                                        reset_logging):
    ck = str(tmp_path / "ck")
    commit(ck, str(tmp_path / "l"))
    assert main(["verify", ck, "--operator", "op", "-v"]) == 0
    assert reset_logging.level == logging.INFO
    assert "DEBUG" not in capsys.readouterr().err
    assert main(["-v", "verify", ck, "--operator", "op", "-v", "--version", "1"]) == 0
    assert reset_logging.level == logging.DEBUG
    captured = capsys.readouterr()
    assert "version 1: 1 partition(s)" in captured.out
    assert "DEBUG stateengine: stateengine verify" in captured.err
    with pytest.raises(SystemExit):  # -v takes no number after other flags are parsed
        build_parser().parse_args(["dump", ck, "--operator", "op", "--state", "count",
                                   "--version"])


class Payload:
    """Unpickling this creates ``path``: proof that code from the checkpoint ran."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def test_dump_timers_lists_both_kinds_as_json_and_never_unpickles_by_default(tmp_path, capsys):
    ck, marker = str(tmp_path / "ck"), str(tmp_path / "marker")
    payload = pickle.dumps(Payload(marker), protocol=5)
    assert len(payload) < 0x80  # its length is one varint byte
    commit(ck, str(tmp_path / "l"), users=(1, 2), timers=[
        ("event", 1, 1_700_000_000_000, None),
        ("event", 2, 5, "window-a"),
        ("processing", 1, 1_700_000_001_500, 7)])
    # a pickled namespace as a format-1 writer stored it (the old any-codec tag 7), planted
    # raw: key [key group][timestamp, sign bit flipped][int key][namespace]
    provider = StateStoreProvider(ck, "op", 0, 1, key_type=int, local_dir=str(tmp_path / "p"),
                                  descriptors=[COUNT])
    store = provider.get_store(2)
    backend = store.backend
    cf = backend.timer_service._cf("__timers_processing__")
    stamp = struct.pack(">Q", 9 ^ (1 << 63))
    backend._raw_put(cf, bytes([backend.key_group_of(2)]) + stamp + struct.pack(">q", 2) +
                     b"\x07" + bytes([len(payload)]) + payload, b"")
    store.commit()
    provider.close()
    assert not os.path.exists(marker)

    assert main(["dump", ck, "--operator", "op", "--timers"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert not os.path.exists(marker)
    plain = [r for r in rows if not isinstance(r["namespace"], dict)]
    assert sorted((r["timer"], r["key"], r["namespace"], r["timestamp"], r["time"])
                  for r in plain) == [
        ("event", 1, None, 1_700_000_000_000, "2023-11-14T22:13:20.000+00:00"),
        ("event", 2, "window-a", 5, "1970-01-01T00:00:00.005+00:00"),
        ("processing", 1, 7, 1_700_000_001_500, "2023-11-14T22:13:21.500+00:00")]
    (opaque,) = [r for r in rows if isinstance(r["namespace"], dict)]
    assert opaque["timer"] == "processing" and opaque["key"] == 2
    assert opaque["namespace"]["bytes"] == len(payload) and "pickled" in opaque["namespace"]
    assert all(isinstance(r["key_group"], int) and 0 <= r["key_group"] < 128 for r in rows)

    assert main(["dump", ck, "--operator", "op", "--timers", "--limit", "2"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 2
    # the control: with --allow-pickle the payload is live
    assert main(["dump", ck, "--operator", "op", "--timers", "--allow-pickle"]) == 0
    capsys.readouterr()
    assert os.path.exists(marker)


def test_dump_needs_a_state_or_timers(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["dump", str(tmp_path), "--operator", "op"])
    assert "one of the arguments --state --timers is required" in capsys.readouterr().err
