"""Cross-checks: where a checkpoint says the same thing twice, restore compares the two.

Each document is edited, resealed with a correct checksum and no key (what a buggy writer, a
half-finished tool or a hand edit produces), and loaded the way users load it. Each case below
restored silently as other state before (or as a misleading error); now it is a
CorruptionError naming both documents (or the document and the file it contradicts), nothing
is left behind, and the checkpoint restores exactly once the edit is undone.
tests/campaigns/crosschecks.py applies every single edit to every document.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re

import pytest

from stateengine import (CorruptionError, IncompatibleStateError, KeyedStateBackend,
                         KeyGroupRange, ListStateDescriptor, MapStateDescriptor,
                         ReducingStateDescriptor, SortedMapStateDescriptor, StateStoreProvider,
                         StateTtlConfig, ValueStateDescriptor, aggregates, load_handle)
from stateengine.aggregates import COUNT
from stateengine.checkpoint.crosscheck import expected_options, parse_options
from stateengine.checkpoint import untrusted
from stateengine.checkpoint.storage import forget_verifications
from stateengine.cli import main as cli
from stateengine.descriptors import AggregatingStateDescriptor
from stateengine.reducers import MAX, MIN, SUM
from tests.campaigns.checkpoints import KINDS, build_all, outcome
from tests.campaigns.mutations import resealed, rewrite

STORE_V2 = "op/v2/p00000-of-00001.json"
OPERATOR = "op/_operator.json"


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    base = str(tmp_path_factory.mktemp("crosschecks"))
    roots = build_all(base)
    scratch = os.path.join(base, "scratch")
    pristine = {(k, v): KINDS[k].load(roots[k], scratch, **({"version": v} if k == "store"
                                                            else {}))
                for k, v in (("full", None), ("incremental", None), ("store", None),
                             ("store", 1))}
    return roots, scratch, pristine


@contextlib.contextmanager
def edited(root: str, rel: str, change):
    """rel resealed after change(doc), restored afterwards."""
    path = os.path.join(root, rel)
    data = open(path, "rb").read()
    rewrite(path, resealed(data, change))
    try:
        yield json.loads(data)
    finally:
        rewrite(path, data)
        forget_verifications()


def load(built, kind: str, version: int | None = None) -> tuple[str, str]:
    roots, scratch, pristine = built
    forget_verifications()
    k = KINDS[kind]
    if kind == "store":
        got = outcome(lambda: k.load(roots[kind], scratch, version=version),
                      pristine[(kind, version)])
    else:
        got = outcome(lambda: k.load(roots[kind], scratch), pristine[(kind, None)])
    # (the memo of checked tables is shared by every load in the directory, not left by one)
    assert not [n for n in os.listdir(scratch) if n != untrusted.MEMO_DIR
                and os.listdir(os.path.join(scratch, n))] \
        if os.path.isdir(scratch) else True, "a failed restore left files behind"
    return got


def refused(built, kind, *names, version=None, match=None) -> str:
    """Loads kind: a CorruptionError naming every one of names (file base names)."""
    cls, detail = load(built, kind, version)
    assert cls == "corruption", (cls, detail)
    for name in names:
        assert name in detail, (name, detail)
    if match:
        assert re.search(match, detail), detail
    return detail


def intact(built, kind, version=None):
    assert load(built, kind, version) == ("identical", "")


# ---- the cases ---------------------------------------------------------------------------

def test_a_lost_key_group_offset_is_found(built):
    """A full snapshot's handle whose offsets lose an entry restored without that key group's
    state: the sections must tile the file, so the section before it does not end where the
    next recorded one begins."""
    roots = built[0]
    h = json.load(open(os.path.join(roots["full"], "snap.handle.json")))
    kgs = sorted(h["offsets"], key=int)
    for lost in (kgs[len(kgs) // 2], kgs[-1]):
        with edited(roots["full"], "snap.handle.json", lambda d: d["offsets"].pop(lost)):
            refused(built, "full", "snap.handle.json", "/snap:", match="do not tile")
    with edited(roots["full"], "snap.handle.json", lambda d: d["offsets"].pop(kgs[0])):
        refused(built, "full", "snap.handle.json", match="first key-group section")
    with edited(roots["full"], "snap.handle.json", lambda d: d.update(offsets={})):
        refused(built, "full", "snap.handle.json", match="records no key-group section")
    intact(built, "full")


def test_a_lost_offset_is_found_by_a_restore_of_a_range_starting_there(built, tmp_path):
    """Rescaling reads only its key groups: the last section before them is decoded (not
    restored) to check where it ends, so a lost offset at the start of the range is found."""
    root = built[0]["full"]
    h = json.load(open(os.path.join(root, "snap.handle.json")))
    kgs = sorted(map(int, h["offsets"]))
    lost = kgs[len(kgs) // 2]
    rng = KeyGroupRange(lost, 127)
    with edited(root, "snap.handle.json", lambda d: d["offsets"].pop(str(lost))):
        with pytest.raises(CorruptionError, match="do not tile") as e:
            KeyedStateBackend.restore(str(tmp_path / "r"), [load_handle(root, "snap.handle.json")],
                                      rng)
        assert "snap.handle.json" in str(e.value)
        assert not os.path.exists(tmp_path / "r")
        # a range that does not need the lost group, nor begins right after it, restores
        later = kgs[kgs.index(lost) + 2]
        ok = KeyedStateBackend.restore(str(tmp_path / "ok"),
                                       [load_handle(root, "snap.handle.json")],
                                       KeyGroupRange(later, 127))
        ok.dispose()
    r = KeyedStateBackend.restore(str(tmp_path / "r"), [load_handle(root, "snap.handle.json")], rng)
    assert r.last_restore_stats["key_groups"] == len([k for k in kgs if k >= lost])
    r.dispose()


def test_first_version_at_a_committed_version_is_refused(built):
    """_operator.json's first_version set to a committed version made that version restore as
    empty state while latest_version() still named it."""
    root = built[0]["store"]
    for first, version in ((2, None), (1, 1), (3, None)):
        with edited(root, OPERATOR, lambda d: d.update(first_version=first)):
            refused(built, "store", "_operator.json", "p00000-of-00001.json", version=version,
                    match=f"began, empty, at version {first}")
            out = io.StringIO()
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
                assert cli(["verify", root, "--operator", "op", "--all"]) == 1
                assert cli(["versions", root]) == 1
            assert "DAMAGED" in out.getvalue()
    with edited(root, OPERATOR, lambda d: d.update(first_version=1)):
        intact(built, "store")  # version 2 is after the first version: still what it was
    intact(built, "store", 1)


@pytest.mark.parametrize("kind,rel", [("full", "snap.handle.json"), ("incremental", None),
                                      ("store", STORE_V2)])
def test_operator_state_dropped_from_a_handle_is_refused(built, kind, rel):
    """operator_state set to null silently dropped operator state (source offsets): handles
    now record its size a second time (stats.operator_state_bytes)."""
    root = built[0][kind]
    rel = rel or KINDS["incremental"].manifest(root)
    with edited(root, rel, lambda d: d.update(operator_state=None)):
        refused(built, kind, os.path.basename(rel),
                match=r"stats record \d+ bytes of operator state but the handle names no "
                      r"operator state")
    with edited(root, rel, lambda d: d["stats"].update(operator_state_bytes=0)):
        refused(built, kind, os.path.basename(rel), match="bytes of operator state")
    intact(built, kind)


@pytest.mark.parametrize("change,what", [
    (lambda d: d.update(key_codecs=[4]), r"key codecs \[4\] but .*_operator.json records \[2\]"),
    (lambda d: d.update(key_codecs=[3]), r"key codecs \[3\]"),  # same width: only the doc knows
    (lambda d: d.update(key_is_tuple=True), "key_is_tuple True but"),
])
def test_a_manifest_contradicting_the_operator_document_is_refused(built, change, what):
    """key_codecs or key_is_tuple changed in a manifest, contradicting _operator.json, was an
    IncompatibleStateError blaming the reader ("the key type changed") or, without a key
    type, other keys."""
    root = built[0]["store"]
    with edited(root, STORE_V2, change):
        refused(built, "store", "p00000-of-00001.json", "_operator.json", match=what)
    intact(built, "store")


# ---- the other redundancies ------------------------------------------------------------------------

def test_the_operator_document_against_the_manifests(built, tmp_path):
    root = built[0]["store"]
    with edited(root, OPERATOR, lambda d: d.update(max_parallelism=256)):
        refused(built, "store", "_operator.json", "p00000-of-00001.json",
                match="records max_parallelism 128 but .* records 256")
    with edited(root, OPERATOR, lambda d: d.update(key_codecs=[4])):
        refused(built, "store", "_operator.json", "p00000-of-00001.json")
    # the two documents agree and the caller differs: the caller's mistake, as before
    with pytest.raises(IncompatibleStateError, match="was written with max_parallelism 128"):
        StateStoreProvider(root, "op", 0, 1, max_parallelism=256, local_dir=str(tmp_path))


@pytest.mark.parametrize("change,match", [
    (lambda d: d.update(checkpoint_id=7), "checkpoint id 7 for version 2"),
    (lambda d: d["operator_state"].update(parallelism=2, operator_index=1),
     "instance 1 of 2, not partition 0 of 1"),
    (lambda d: d["metrics"].update(files_reused=d["metrics"]["files_reused"] + 1),
     "metrics record files_reused"),
    (lambda d: d["stats"].update(bytes_total=d["stats"]["bytes_total"] + 1),
     r"stats record \d+ bytes in all but the files listed hold"),
    (lambda d: d["stats"].update(files_uploaded=d["stats"]["files_uploaded"] + 1),
     "files uploaded and"),
    (lambda d: d["states"][0].update(merge=1), "only they merge by appending"),
    (lambda d: d["states"][0].update(user_key_codec=4), "has user key codec 4 but no user keys"),
    (lambda d: d["states"][0].update(native_op=1), "native function 1"),
    (lambda d: next(s for s in d["states"] if s["kind"] == "timers").update(namespace_codec=2),
     "timer column family '__timers_event__'"),
])
def test_a_store_manifest_against_itself_and_its_place(built, change, match):
    root = built[0]["store"]
    with edited(root, STORE_V2, change):
        refused(built, "store", "p00000-of-00001.json", match=match)


def test_a_full_handle_against_its_snapshot(built, tmp_path):
    root = built[0]["full"]
    with edited(root, "snap.handle.json", lambda d: d.update(max_parallelism=256)):
        refused(built, "full", "snap.handle.json", "/snap ",
                match=r"max_parallelism 128 \(its meta block\) but .* records 256")
    with edited(root, "snap.handle.json", lambda d: d["stats"].update(file_bytes=1)):
        refused(built, "full", "snap.handle.json", match="stats record a snapshot of 1 bytes")
    with edited(root, "snap.handle.json",
                lambda d: d["stats"].update(entries=d["stats"]["entries"] + 1)):
        refused(built, "full", "snap.handle.json", match=r"restored \d+ entries but the handle")
        # only a restore that reads every section can compare the totals
        part = KeyedStateBackend.restore(str(tmp_path / "p"),
                                         [load_handle(root, "snap.handle.json")],
                                         KeyGroupRange(0, 63))
        part.dispose()
    with edited(root, "snap.handle.json",
                lambda d: d["operator_state"].update(parallelism=2, operator_index=1)):
        refused(built, "full", "snap.handle.json", "snap.opstate",
                match="holds the operator state of instance 0 of 1 but .* records instance 1 "
                      "of 2")
    intact(built, "full")


def test_a_manifest_against_its_data(built):
    """The first and last entry of every column family must fit the manifest's key layout,
    key groups and codecs."""
    root = built[0]["incremental"]
    rel = KINDS["incremental"].manifest(root)
    name = os.path.basename(rel)
    h = json.load(open(os.path.join(root, rel)))
    with edited(root, rel, lambda d: d.update(key_group_range=[0, 63])):
        refused(built, "incremental", name, match=r"records key groups 0\.\.63 but its data "
                                                  r"holds an entry of .* in key group")
    with edited(root, rel, lambda d: d.update(key_codecs=[4])):
        refused(built, "incremental", name, match="do not decode that way")
    with edited(root, rel, lambda d: d.update(key_codecs=None)):
        refused(built, "incremental", name, match="records no key type")
    words = next(i for i, s in enumerate(h["states"]) if s["name"] == "words")
    with edited(root, rel, lambda d: d["states"][words].update(value_codec=2)):
        refused(built, "incremental", name, match="state 'words' as list .* value codec 2")
    attrs = next(i for i, s in enumerate(h["states"]) if s["name"] == "attrs")
    with edited(root, rel, lambda d: d["states"][attrs].update(user_key_codec=2)):
        refused(built, "incremental", name, match="user key codec 2")
    intact(built, "incremental")


def _options_checkpoint(tmp_path, descriptors, fill):
    b = KeyedStateBackend(str(tmp_path / "b"), key_type=int)
    handles = [b.get_state(d) for d in descriptors]
    b.set_ttl_time(1_000)
    b.set_current_key(1)
    fill(handles)
    root = str(tmp_path / "ck")
    h = b.checkpoint(1, root).result()
    b.close()
    return root, h.manifest


def test_state_metas_against_rocksdbs_options_file(tmp_path):
    """RocksDB's OPTIONS file records each column family's merge operator (list append, or a
    native function over a value codec) and TTL compaction filter: a manifest changing a
    state's merge kind, native function, numeric codec or TTL flag contradicts it."""
    ttl = StateTtlConfig(60_000)
    descs = [ValueStateDescriptor("v", int, ttl=ttl), ReducingStateDescriptor("r", SUM, int),
             ListStateDescriptor("l", int)]
    root, rel = _options_checkpoint(tmp_path, descs, lambda hs: (
        hs[0].update(1), hs[1].add(2), hs[2].add(3)))
    name = os.path.basename(rel)

    def restore():
        forget_verifications()
        b = KeyedStateBackend.restore(str(tmp_path / "r"), [load_handle(root, rel)])
        b.dispose()

    for i, change, match in [
            (0, lambda s: s.pop("ttl"), "compaction_filter_factory nullptr, but RocksDB's options"),
            # with TTL a native reducer folds in C++: RocksDB would have no merge operator
            (1, lambda s: s.update(ttl=True), "merge_operator nullptr, but RocksDB's options .* "
                                              "record stateengine.Numeric.1.2"),
            (2, lambda s: s.update(ttl=True), "compaction_filter_factory "
                                              "stateengine.TtlCompactionFilterFactory"),
            (1, lambda s: s.update(native_op=2), "merge_operator stateengine.Numeric.2.2"),
            (1, lambda s: s.update(value_codec=3), "merge_operator stateengine.Numeric.1.3")]:
        with edited(root, rel, lambda d: change(d["states"][i])):
            with pytest.raises(CorruptionError, match=match) as e:
                restore()
            assert name in str(e.value) and "OPTIONS-" in str(e.value)
            assert not os.path.exists(tmp_path / "r")
    restore()


def test_expected_options_are_what_rocksdb_records(tmp_path):
    """expected_options (Python) against the OPTIONS file RocksDB writes (C++): every kind,
    merge kind and native function, with and without TTL."""
    ttl = StateTtlConfig(60_000)
    descs = []
    for t in (None, ttl):
        sfx = "_ttl" if t else ""
        descs += [ValueStateDescriptor("v" + sfx, int, ttl=t),
                  ListStateDescriptor("l" + sfx, str, ttl=t),
                  MapStateDescriptor("m" + sfx, str, int, ttl=t),
                  SortedMapStateDescriptor("s" + sfx, int, int, ttl=t),
                  ReducingStateDescriptor("rp" + sfx, lambda a, b: a + b, int, ttl=t),
                  AggregatingStateDescriptor("count" + sfx, COUNT, int, ttl=t),
                  AggregatingStateDescriptor("asum" + sfx, aggregates.SUM, float, ttl=t)]
        descs += [ReducingStateDescriptor(f"r{op.op}{sfx}", op, int, ttl=t)
                  for op in (SUM, MIN, MAX)]
    root, rel = _options_checkpoint(tmp_path, descs, lambda hs: None)
    h = load_handle(root, rel)
    opt = next(f for f in h.private if f.local_name.startswith("OPTIONS-"))
    options = parse_options(open(os.path.join(root, opt.path), "rb").read())
    for meta in h.states:
        merge, ttl_filter = expected_options(meta)
        assert options[meta["name"]] == {"merge_operator": merge,
                                         "compaction_filter_factory": ttl_filter}, meta


def test_a_commit_marker_with_a_huge_partition_count_is_corruption_not_memory(built):
    root = built[0]["store"]
    with edited(root, "op/v2/_COMMITTED.json", lambda d: d.update(num_partitions=1 << 40)):
        refused(built, "store", "_COMMITTED.json",
                match=r"marked committed by 1099511627776 partition\(s\)")


def test_a_typed_states_schema_against_its_data(tmp_path):
    """The schema of a typed state (a meta attribute) decodes the first and last entry: a
    schema changed in the manifest to one the stored rows do not fit is refused."""
    d = ValueStateDescriptor("profile", value_type="struct<name:string,visits:bigint>")
    root, rel = _options_checkpoint(tmp_path, [d], lambda hs: hs[0].update(("ann", 3)))
    with edited(root, rel, lambda doc: doc["states"][0].update(
            value_schema="struct<name:string,visits:bigint,since:date>")):
        with pytest.raises(CorruptionError, match="state 'profile' as value") as e:
            KeyedStateBackend.restore(str(tmp_path / "r"), [load_handle(root, rel)])
        assert os.path.basename(rel) in str(e.value)
    r = KeyedStateBackend.restore(str(tmp_path / "r"), [load_handle(root, rel)], descriptors=[d])
    r.set_current_key(1)
    assert tuple(r.get_state(d).value()) == ("ann", 3)
    r.close()
