"""Documents that are each intact but contradict one another: every single structured edit of
every checkpoint document, resealed with a correct checksum and no key, then loaded.

A keyless checkpoint cannot tell a document a buggy writer, a half-finished tool or an
operator's hand edit resealed from one it wrote itself: the checksum only proves that the
document is what its last writer meant. What restore can do is compare what the checkpoint
says twice (a handle's key-group offsets against the snapshot's sections, a manifest's key
codecs against ``_operator.json``, its state metas against RocksDB's OPTIONS file, ...). This
campaign measures how much of that holds: for the three small checkpoints of
tests/campaigns/checkpoints.py (full snapshot, incremental checkpoint, two StateStore
versions), each document (``snap.handle.json``, the checkpoint's manifest, ``_operator.json``,
both versions' manifests, the commit marker) gets every edit of ``mutations.document_edits``
(a field or entry dropped, a number, string or type changed, one bit of a key name flipped),
is resealed (``documents.seal`` without a key) and loaded the way users load it, in the
corruption campaign's worker process (RLIMIT_AS 2 GiB, compared with the pristine state as raw
RocksDB bytes, metas, key layout and operator state). Edits of ``checksum``/``format``/``hmac``
are left out: resealing rewrites them.

Outcomes: ``identical`` (the edit changes nothing restored: a figure, a timestamp),
``corruption`` (CorruptionError), ``error`` (another specific StateEngineError),
``different`` (loaded, other state: what remains undetectable without a key, grouped by field
in the report; every class must be one of ``UNDETECTABLE``), ``raw``/``crash``/``timeout``
(never acceptable). docs/reliability/cross-checks.md lists each remaining ``different`` class
and why only a key detects it.

    python -m tests.campaigns.crosschecks                       # every edit (full size)
    python -m tests.campaigns.crosschecks --key secret          # the same with an HMAC key
    python -m tests.campaigns.crosschecks --sample 60 --seed 7  # what the test suite runs
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import sys
import tempfile
import time
from collections import Counter, defaultdict
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
PROJECT = os.path.dirname(os.path.dirname(HERE))
# Resealing rewrites these: an edit of one is no edit of the resealed document.
_SEAL_FIELDS = ("checksum", "format", "hmac")
OPERATOR_DOC = "op/_operator.json"


# The edits a keyless reader cannot tell from what a writer wrote, by field class, and why
# (docs/reliability/cross-checks.md explains each; with a checkpoint key every edit fails).
UNDETECTABLE = {
    "full handle key_group_range[*]":
        "a range widened or narrowed over key groups that hold no entries: a snapshot has "
        "sections only for non-empty key groups, so nothing else records which empty ones it "
        "covered",
    "checkpoint manifest key_group_range[*]":
        "as for a full handle: RocksDB holds entries, not the empty key groups around them "
        "(StateStore manifests are checked against their partition's key groups)",
    "checkpoint manifest key_codecs[*]":
        "a key codec exchanged for one that reads the same bytes (bigint and double are both "
        "8 bytes): a standalone checkpoint records its key type only in its manifest "
        "(StateStore versions are checked against _operator.json)",
    "checkpoint manifest key_is_tuple":
        "one key column stored the same way as a 1-tuple: only the manifest says which "
        "(StateStore versions: _operator.json)",
    "checkpoint manifest states[*].namespace_codec":
        "void and the default serializer store the default namespace as the same byte",
    "checkpoint manifest states[*].value_codec":
        "a value codec exchanged for one that decodes the same bytes (bigint/double, "
        "string/binary): nothing but the meta records which it was",
    "checkpoint manifest states[*].user_key_codec":
        "as for value codecs (string/binary user keys are the same bytes)",
}


def field_class(rel: str, path: tuple) -> str:
    """The edited field with entry indices and key-group numbers folded: ``manifest
    states[*].value_codec``, ``handle offsets.<kg>``."""
    name = rel.rsplit("/", 1)[-1]
    if name == "_operator.json":
        doc = "_operator.json"
    elif name == "_COMMITTED.json":
        doc = "_COMMITTED.json"
    elif name == "snap.handle.json":
        doc = "full handle"
    elif rel.startswith("op/"):
        doc = "store manifest"
    else:
        doc = "checkpoint manifest"
    out = ""
    for p in path:
        if isinstance(p, int):
            out += "[*]"
        elif re.fullmatch(r"\d+", p):
            out += ".<kg>"
        else:
            out += ("." if out else "") + p
    return f"{doc} {out or '(whole)'}"


def edits_of(pristine_dir: str, kind: str, rel: str) -> list[tuple[str, str, bytes]]:
    """(field class, description, resealed bytes) of every edit of one document."""
    from stateengine.checkpoint import documents
    from tests.campaigns.mutations import document_edits

    data = open(os.path.join(pristine_dir, kind, rel), "rb").read()
    out, seen = [], set()
    for path, what, new_doc in document_edits(json.loads(data)):
        if path and path[0] in _SEAL_FIELDS:
            continue
        if not isinstance(new_doc, dict):
            continue  # the whole document replaced by a list: no document to seal
        try:
            new = documents.dumps(documents.seal(new_doc, None))
        except ValueError:  # a value JSON cannot hold (never produced by document_edits)
            continue
        if new == data or new in seen:
            continue
        seen.add(new)
        out.append((field_class(rel, path), what, new))
    return out


def versions_for(kind: str, rel: str) -> list[int | None]:
    """The versions a reader loads after rel changed (None: the latest)."""
    if kind != "store":
        return [None]
    if rel == OPERATOR_DOC:
        return [None, 1]  # the operator's properties decide every version's restore
    return [1] if rel.startswith("op/v1/") else [None]


class CrossCheckCampaign:
    def __init__(self, workdir: str, timeout: float = 120.0) -> None:
        sys.path.insert(0, PROJECT)
        from tests.campaigns.corruption import Campaign

        # the corruption campaign builds the checkpoints, their pristine dumps and the worker
        self.base = Campaign(workdir, seed=0, timeout=timeout)
        self.timeout = timeout
        self.cases: list[tuple[str, str, str, str, bytes, int | None]] = []
        for kind, files in self.base.files.items():
            for rel, ftype in files:
                if ftype != "doc":
                    continue
                for cls, what, new in edits_of(self.base.pristine_dir, kind, rel):
                    for version in versions_for(kind, rel):
                        self.cases.append((kind, rel, cls, what, new, version))

    def run(self, sample: int | None = None, seed: int = 1, progress: bool = False) -> dict:
        from tests.campaigns.mutations import rewrite

        cases = self.cases
        if sample is not None and sample < len(cases):
            cases = random.Random(seed).sample(cases, sample)
        outcomes: Counter = Counter()
        by_field: dict[str, Counter] = defaultdict(Counter)
        examples: dict[str, dict[str, str]] = defaultdict(dict)
        unnamed: list[dict] = []
        different: list[dict] = []
        bad: list[dict] = []
        started = time.monotonic()
        try:
            for i, (kind, rel, cls, what, new, version) in enumerate(cases):
                path = os.path.join(self.base.workdir, "work", kind, rel)
                rewrite(path, new)
                try:
                    got, detail = self.base.worker.load(kind, version, self.timeout)
                finally:
                    self.base._undo(kind, [rel])
                got = "different" if got == "wrong" else got
                outcomes[got] += 1
                by_field[cls][got] += 1
                examples[cls].setdefault(got, f"{what} (v{version or 'latest'}): {detail[:300]}")
                if got == "corruption" and os.path.basename(rel) not in detail:
                    unnamed.append({"document": rel, "edit": what, "detail": detail[:300]})
                if got == "different":
                    different.append({"field": cls, "document": rel, "edit": what,
                                      "version": version, "detail": detail[:200]})
                if got in ("raw", "crash", "timeout"):
                    bad.append({"kind": kind, "document": rel, "edit": what,
                                "version": version, "class": got, "detail": detail})
                if progress and (i + 1) % 250 == 0:
                    print(f"{i + 1}/{len(cases)} edits, {dict(outcomes)}, "
                          f"{time.monotonic() - started:.0f} s", file=sys.stderr, flush=True)
        finally:
            self.base.worker.kill()
        fields = {cls: dict(c) for cls, c in sorted(by_field.items()) if c.get("different")}
        return {"edits": len(cases), "of": len(self.cases), "outcomes": dict(outcomes),
                "unexpected_different": sorted(set(fields) - set(UNDETECTABLE)),
                "different_by_field": fields,
                "different_examples": {cls: examples[cls]["different"] for cls in fields},
                "different": different,
                "by_field": {cls: dict(c) for cls, c in sorted(by_field.items())},
                "corruption_not_naming_the_document": unnamed,
                "seconds": round(time.monotonic() - started, 1), "bad": bad}


def run(sample: int | None = None, seed: int = 1, workdir: str | None = None,
        progress: bool = False, timeout: float = 120.0, key: str | None = None) -> dict:
    """``key``: build the checkpoints with this checkpoint key and load them with it (through
    ``$STATEENGINE_CHECKPOINT_KEY``, which the worker inherits); the edits are still
    resealed without it, as by anyone who does not hold the key."""
    from stateengine.checkpoint.documents import KEY_ENV

    own = workdir is None
    workdir = workdir or tempfile.mkdtemp(prefix="stateengine-crosschecks-")
    saved = os.environ.get(KEY_ENV)
    if key is not None:
        os.environ[KEY_ENV] = key
    try:
        report = CrossCheckCampaign(workdir, timeout).run(sample, seed, progress)
        report["seed"] = seed
        report["key"] = key is not None
        return report
    finally:
        if key is not None:
            if saved is None:
                os.environ.pop(KEY_ENV, None)
            else:
                os.environ[KEY_ENV] = saved
        if own:
            shutil.rmtree(workdir, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sample", type=int, default=None,
                   help="edits drawn at random (default: every edit)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--timeout", type=float, default=120.0, help="seconds per load")
    p.add_argument("--json", metavar="FILE", help="also write the report to FILE")
    p.add_argument("--key", help="write and read the checkpoints with this checkpoint key "
                                 "(the edits are resealed without it): every edit must fail")
    args = p.parse_args(argv)
    report = run(args.sample, args.seed, progress=True, timeout=args.timeout, key=args.key)
    text = json.dumps(report, indent=1, default=str)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text + "\n")
    print(text)
    return 1 if report["bad"] or report["unexpected_different"] else 0


if __name__ == "__main__":
    sys.exit(main())
