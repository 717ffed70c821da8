"""Checkpoints written before format 2 (tests/legacy_fixtures, made by the code of commit
3e49f5c with make_fixtures.py) restore with identical contents.

``primitive`` content holds no pickle and restores with the default settings. ``mixed`` content
holds what the old ANY codec pickled (tuples, lists, dicts, big ints as values, list elements,
map user keys, namespaces and timer namespaces), a ``value_type="pickle"`` state and a pickled
operator-state file: it restores only with ``allow_pickle=True``, which converts every pickle
the native codec can express, so point lookups by tuple user keys and namespaces find their
entries and a later checkpoint restores without the flag.
"""

from __future__ import annotations

import json
import os
import shutil

import pytest

from stateengine import KeyedStateBackend, PickleNotAllowedError, StateStoreProvider
from stateengine.checkpoint.handles import handle_from_dict
from tests.legacy_fixtures import contents

DATA = os.path.join(os.path.dirname(__file__), "legacy_fixtures", "data")
CASES = [("primitive", "full"), ("primitive", "store"), ("mixed", "full"),
         ("mixed", "incremental"), ("mixed", "store")]


@pytest.fixture(scope="module")
def fixtures(tmp_path_factory):
    """A copy of the fixtures whose handles and manifests name the copy's location (format-1
    manifests hold the absolute root they were written under)."""
    dest = str(tmp_path_factory.mktemp("legacy") / "data")
    shutil.copytree(DATA, dest)
    with open(os.path.join(dest, "fixture.json")) as f:
        old_root = json.load(f)["root"]
    for d, _, files in os.walk(dest):
        for name in files:
            if name.endswith(".json"):
                path = os.path.join(d, name)
                with open(path) as f:
                    text = f.read()
                with open(path, "w") as f:
                    f.write(text.replace(old_root, dest))
    return dest


def open_case(fixtures: str, kind: str, fmt: str, local: str, descriptors=None, **kw) -> tuple:
    """(backend, closer) of the fixture restored through the API its kind uses."""
    base = os.path.join(fixtures, kind, fmt)
    if fmt == "store":
        provider = StateStoreProvider(base, "op", 0, 1, key_type=str, local_dir=local,
                                      descriptors=descriptors or contents.descriptors(kind), **kw)
        try:
            store = provider.get_store(provider.latest_version())
        except BaseException:
            provider.close()
            raise
        return store.backend, provider.close
    with open(os.path.join(base, "handle.json")) as f:
        handle = handle_from_dict(json.load(f))
    backend = KeyedStateBackend.restore(os.path.join(local, "b"), [handle], **kw)
    return backend, backend.dispose


@pytest.mark.parametrize("kind,fmt", CASES)
def test_old_checkpoints_restore_with_identical_contents(fixtures, kind, fmt, tmp_path):
    kw = {"allow_pickle": True} if kind == "mixed" else {}
    backend, close = open_case(fixtures, kind, fmt, str(tmp_path), **kw)
    try:
        assert contents.typed(contents.read(backend, kind)) == contents.typed(contents.model(kind))
    finally:
        close()


@pytest.mark.parametrize("fmt", ["full", "incremental", "store"])
def test_pickles_in_old_checkpoints_need_allow_pickle(fixtures, fmt, tmp_path):
    plain = [d for d in contents.descriptors("mixed") if d.name != "blob"]
    with pytest.raises(PickleNotAllowedError, match="allow_pickle=True"):
        open_case(fixtures, "mixed", fmt, str(tmp_path), plain)


def test_restoring_with_allow_pickle_converts_once_for_good(fixtures, tmp_path):
    """After one restore with allow_pickle, a new checkpoint holds no pickle but the one of
    the pickle state: it restores without the flag and reads the same (all but that state)."""
    backend, close = open_case(fixtures, "mixed", "full", str(tmp_path / "a"), allow_pickle=True)
    try:
        report = backend.last_restore_stats["legacy"]
        n, model = len(contents.KEYS), contents.model("mixed")
        assert report["pages"]["converted_keys"] == 2 * n  # a tuple and a big int per key
        assert report["pages"]["converted_values"] == 2 * n
        assert report["windows"]["converted_keys"] == n    # a tuple namespace per key
        assert report["events"]["converted_values"] == n   # a list with pickled elements
        assert report["any"]["converted_values"] == n      # every value of 'mixed' was pickled
        assert report["__timers_event__"]["converted_keys"] == sum(
            isinstance(ns, tuple) for _, _, ns in model["__timers_event__"])
        assert "blob" not in report  # a pickle state is not the ANY codec's business
        handle = backend.checkpoint(2, tmp_path / "new").result()
        full = backend.snapshot(tmp_path / "new", "snap").result()
    finally:
        close()
    plain = [d for d in contents.descriptors("mixed") if d.name != "blob"]
    for h in (handle, full):
        b = KeyedStateBackend.restore(tmp_path / f"b-{h.kind}", [h])
        try:
            got = {d.name: {} for d in plain}
            handles = {d.name: b.get_state(d) for d in plain}
            for k in contents.KEYS:
                b.set_current_key(k)
                got["any"][k] = handles["any"].value()
                got["events"][k] = handles["events"].get()
                got["pages"][k] = {uk: handles["pages"].get(uk) for uk in model["pages"][k]}
                got["span"][k] = handles["span"].get()
            for name in ("any", "events", "pages", "span"):
                assert contents.typed(got[name]) == contents.typed(model[name])
            assert b.operator_state.get_list_state("offsets").get() == \
                model["__operator__"]["offsets"][1]
        finally:
            b.dispose()
