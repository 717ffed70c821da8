"""Every byte that decides what is restored is covered.

For a small checkpoint of each kind (full snapshot, incremental checkpoint, two StateStore
versions), every single-bit flip of every document (handles, manifests, ``_operator.json``,
``_COMMITTED.json``), every structured edit of them (a field or entry dropped, a number, a
string or a type changed, one bit of a key name flipped), and sampled bit flips, truncations
and removals of every binary file (snapshot, SSTs, MANIFEST, CURRENT, OPTIONS, operator
state) must end in one of two ways when a reader loads the checkpoint as users do: exactly the
same state as before (compared as raw RocksDB bytes of every column family, metas, key layout
and operator state) or a CorruptionError naming the damaged file; never other state, never
another exception. ``stateengine verify`` must exit 1 for damage it is shown.

Binary files are sampled: each is covered by a CRC-32C in its handle, which detects every
single-bit error and every burst up to 32 bits, so a sample demonstrates the wiring, not a
probability. Documents are flipped at every bit.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import random
from collections import Counter

import pytest

from stateengine.checkpoint.storage import forget_verifications
from stateengine.cli import main as cli
from tests.campaigns.checkpoints import KINDS, StoreVersions, build_all, outcome
from tests.campaigns.mutations import flipped, resealed, rewrite, structured_edits


class Subject:
    """One pristine checkpoint and its loaders."""

    def __init__(self, name: str, root: str, scratch: str) -> None:
        self.name, self.kind, self.root, self.scratch = name, KINDS[name], root, scratch
        self.pristine = {None: self.kind.load(root, scratch)}
        if name == "store":
            self.pristine[1] = self.kind.load(root, scratch, version=1)
            self._v2_files = {f["path"] for f in self._manifest_files("op/v2/p00000-of-00001.json")}

    def _manifest_files(self, rel: str) -> list[dict]:
        doc = json.loads(open(os.path.join(self.root, rel), "rb").read())
        return doc["shared"] + doc["private"] + [doc["operator_state"]["file"]]

    def version_for(self, rel: str) -> int | None:
        """The version whose reader reads rel (the store's version-1-only files are read
        only by a reader that asks for version 1)."""
        if self.name != "store":
            return None
        if rel.startswith("op/shared/"):
            return None if rel in self._v2_files else 1
        return StoreVersions.version_read_for(rel)

    def check(self, rel: str) -> tuple[str, str]:
        forget_verifications()  # each case verifies from scratch
        version = self.version_for(rel)
        if self.name == "store":
            load = lambda: self.kind.load(self.root, self.scratch, version=version)  # noqa: E731
        else:
            load = lambda: self.kind.load(self.root, self.scratch)  # noqa: E731
        return outcome(load, self.pristine[version])

    def verify_exit(self) -> int:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            return cli(self.kind.verify_args(self.root))


@pytest.fixture(scope="module")
def subjects(tmp_path_factory):
    base = str(tmp_path_factory.mktemp("integrity"))
    roots = build_all(base)
    scratch = os.path.join(base, "scratch")
    return {name: Subject(name, root, scratch) for name, root in roots.items()}


def _judge(subject: Subject, rel: str, what: str, results: Counter, failures: list,
           check_cli: bool) -> None:
    cls, detail = subject.check(rel)
    results[cls] += 1
    if cls == "corruption":
        if rel not in detail and os.path.basename(rel) not in detail:
            failures.append(f"{rel}: {what}: the error does not name the file: {detail}")
        elif check_cli and subject.verify_exit() != 1:
            failures.append(f"{rel}: {what}: stateengine verify did not exit 1")
    elif cls != "identical":
        failures.append(f"{rel}: {what}: {cls}: {detail}")


@pytest.mark.parametrize("kind", list(KINDS))
def test_every_bit_of_every_document(subjects, kind):
    subject = subjects[kind]
    results: Counter = Counter()
    failures: list[str] = []
    for rel in subject.kind.documents(subject.root):
        path = os.path.join(subject.root, rel)
        data = open(path, "rb").read()
        for bit in range(len(data) * 8):
            rewrite(path, flipped(data, bit))
            try:
                _judge(subject, rel, f"bit {bit}", results, failures, check_cli=bit % 61 == 0)
            finally:
                rewrite(path, data)
    assert not failures, f"{len(failures)} bad outcomes ({dict(results)}), e.g.\n" + \
        "\n".join(failures[:20])
    assert results["corruption"] > 0
    assert subject.check("-") == ("identical", ""), "the pristine checkpoint still loads"


@pytest.mark.parametrize("kind", list(KINDS))
def test_every_structured_edit_of_every_document(subjects, kind):
    subject = subjects[kind]
    results: Counter = Counter()
    failures: list[str] = []
    for rel in subject.kind.documents(subject.root):
        path = os.path.join(subject.root, rel)
        data = open(path, "rb").read()
        for i, (what, new) in enumerate(structured_edits(data)):
            rewrite(path, new)
            try:
                _judge(subject, rel, what, results, failures, check_cli=i % 17 == 0)
            finally:
                rewrite(path, data)
    assert not failures, f"{len(failures)} bad outcomes ({dict(results)}), e.g.\n" + \
        "\n".join(failures[:20])
    assert results["identical"] == 0, "an edit the checksum covers was accepted"


@pytest.mark.parametrize("kind", list(KINDS))
def test_binary_files_sampled_flips_truncations_and_removal(subjects, kind):
    subject = subjects[kind]
    rng = random.Random(f"binary-{kind}")
    results: Counter = Counter()
    failures: list[str] = []
    for rel in subject.kind.binaries(subject.root):
        path = os.path.join(subject.root, rel)
        data = open(path, "rb").read()
        bits = {0, len(data) * 8 - 1} | {rng.randrange(len(data) * 8) for _ in range(12)}
        cases = [(f"bit {b}", flipped(data, b)) for b in sorted(bits)]
        cases += [("truncated to half", data[:len(data) // 2]), ("emptied", b""),
                  ("one byte appended", data + b"\0")]
        for i, (what, new) in enumerate(cases):
            rewrite(path, new)
            try:
                _judge(subject, rel, what, results, failures, check_cli=i == 0)
            finally:
                rewrite(path, data)
        os.rename(path, path + ".gone")
        try:
            _judge(subject, rel, "removed", results, failures, check_cli=True)
        finally:
            os.rename(path + ".gone", path)
    assert not failures, "\n".join(failures[:20])
    assert results["identical"] == 0


def test_renamed_files_and_directories_are_damage(subjects):
    """A bit flip in a file or directory name: a manifest or version that would vanish from
    the listing (and let an older version pass for the latest) is reported instead."""
    subject = subjects["store"]
    failures: list[str] = []
    results: Counter = Counter()
    renames = ["op/v2/p00000-of-00001.json", "op/v2", "op/v2/_COMMITTED.json",
               "op/_operator.json", "op/shared"]
    v2_private = next(n for n in os.listdir(os.path.join(subject.root, "op/v2"))
                      if "-" in n and not n.endswith(".json"))
    renames.append(f"op/v2/{v2_private}")
    for rel in renames:
        head, name = os.path.split(rel)
        for bit in range(7):
            new_name = chr(ord(name[-1]) ^ (1 << bit))
            if new_name in "/\0":
                continue
            src = os.path.join(subject.root, rel)
            dst = os.path.join(subject.root, head, name[:-1] + new_name)
            if os.path.exists(dst):
                continue
            os.rename(src, dst)
            try:
                cls, detail = subject.check(rel)
                results[cls] += 1
                if cls not in ("corruption",) or name[:-1] not in detail:
                    failures.append(f"{rel} -> {os.path.basename(dst)}: {cls}: {detail[:300]}")
            finally:
                os.rename(dst, src)
    assert not failures, "\n".join(failures)


# ---- semantics behind a valid checksum ----------------------------------------------------------

def _reseal_cases(subject: Subject) -> list[tuple[str, str, object]]:
    """(document, what, change) of edits that keep a valid checksum but describe nothing a
    writer of this build produces: each must still be refused by field validation."""
    def set_path(path, value):
        def change(doc):
            node = doc
            for p in path[:-1]:
                node = node[p]
            node[path[-1]] = value
        return change

    if subject.name == "full":
        doc = "snap.handle.json"
        h = json.loads(open(os.path.join(subject.root, doc), "rb").read())
        first_kg = sorted(h["offsets"], key=int)[0]
        kgs = sorted(h["offsets"], key=int)
        return [
            (doc, "key-group range beyond max parallelism", set_path(["key_group_range"], [0, 128])),
            (doc, "inverted key-group range", set_path(["key_group_range"], [5, 2])),
            (doc, "offset beyond the file", set_path(["offsets", first_kg], h["file"]["size"] + 5)),
            (doc, "offset inside the meta block", set_path(["offsets", first_kg], 3)),
            (doc, "offsets not increasing", set_path(["offsets", kgs[1]], h["offsets"][kgs[0]])),
            (doc, "offset of a group outside the range", set_path(["offsets", "999"], 100)),
            (doc, "negative size", set_path(["file", "size"], -1)),
            (doc, "meta length beyond the file", set_path(["meta_length"], 1 << 40)),
            (doc, "path leaving the root", set_path(["file", "path"], "../snap")),
            (doc, "absolute path", set_path(["file", "path"], "/etc/passwd")),
            (doc, "empty path component", set_path(["file", "path"], "a//snap")),
            (doc, "backslash in a path", set_path(["file", "path"], "..\\snap")),
            (doc, "NUL in a path", set_path(["file", "path"], "snap\x00")),
            (doc, "max parallelism 0", set_path(["max_parallelism"], 0)),
            (doc, "crc out of range", set_path(["file", "crc32c"], 1 << 33)),
            (doc, "operator index beyond parallelism",
             set_path(["operator_state", "operator_index"], 3)),
            (doc, "unknown kind", set_path(["kind"], "fulll")),
        ]
    if subject.name == "incremental":
        doc = subject.kind.manifest(subject.root)
        m = json.loads(open(os.path.join(subject.root, doc), "rb").read())
        current = next(i for i, f in enumerate(m["private"]) if f["local_name"] == "CURRENT")
        return [
            (doc, "unknown value codec", set_path(["states", 0, "value_codec"], 99)),
            (doc, "unknown state kind", set_path(["states", 0, "kind"], "heap")),
            (doc, "unknown key codec", set_path(["key_codecs"], [1])),
            (doc, "two key columns but no tuple", set_path(["key_codecs"], [2, 2])),
            (doc, "CURRENT dropped", lambda d: d["private"].pop(current)),
            (doc, "local name with a slash", set_path(["private", current, "local_name"], "../CURRENT")),
            (doc, "two files under one local name",
             set_path(["private", current, "local_name"], m["shared"][0]["local_name"])),
            (doc, "an SST among the private files",
             set_path(["private", current, "local_name"], "000999.sst")),
            (doc, "state name 'default'", set_path(["states", 0, "name"], "default")),
            (doc, "duplicate state names", set_path(["states", 1, "name"], m["states"][0]["name"])),
            (doc, "malformed sha256", set_path(["shared", 0, "sha256"], "xyz")),
            (doc, "unknown field of a file", set_path(["shared", 0, "owner"], "me")),
            (doc, "shared path leaving the root", set_path(["shared", 0, "path"], "../../x.sst")),
        ]
    v2 = "op/v2/p00000-of-00001.json"
    return [
        (v2, "manifest of another partition", set_path(["partition"], 1)),
        (v2, "manifest of another version", set_path(["version"], 3)),
        (v2, "manifest of another operator", set_path(["operator"], "other")),
        (v2, "key groups of another partition", set_path(["key_group_range"], [0, 63])),
        (v2, "shared file outside the operator", set_path(["shared", 0, "path"], "elsewhere/x.sst")),
        ("op/v2/_COMMITTED.json", "marker of another version", set_path(["version"], 7)),
        ("op/v2/_COMMITTED.json", "marker of zero partitions", set_path(["num_partitions"], 0)),
        ("op/_operator.json", "max parallelism out of range", set_path(["max_parallelism"], 1 << 20)),
        ("op/_operator.json", "unknown key codec", set_path(["key_codecs"], [77])),
    ]


@pytest.mark.parametrize("kind", list(KINDS))
def test_fields_are_validated_behind_a_valid_checksum(subjects, kind):
    subject = subjects[kind]
    failures = []
    for rel, what, change in _reseal_cases(subject):
        path = os.path.join(subject.root, rel)
        data = open(path, "rb").read()
        rewrite(path, resealed(data, change))
        try:
            cls, detail = subject.check(rel)
            if cls != "corruption" or (rel not in detail and os.path.basename(rel) not in detail):
                failures.append(f"{what}: {cls}: {detail[:300]}")
        finally:
            rewrite(path, data)
    assert not failures, "\n".join(failures)
