"""Seeded corruption fuzzer: damages checkpoint files at random and loads them in a child
process under a memory limit, classifying every outcome.

Each case damages one file of one of three small checkpoints (full snapshot, incremental
checkpoint, two StateStore versions; tests/campaigns/checkpoints.py) in one of these ways:

  flip        1 to 3 random bits
  truncate    cut at a random length (0 included)
  splice      a run of bytes from another checkpoint file written over or into it
  edit        a structured edit of a JSON document (field or entry dropped, value or type
              changed, one bit of a key name flipped), checksum left as it was
  remove      the file deleted
  append      random bytes appended
  resealed    binary damage *behind a valid checksum*: bytes flipped, a 4-byte field set to a
              hostile length (1 GiB) or a run zeroed, and the file's size and CRC-32C in its
              handle recomputed and the handle resealed, as if the damage had happened before
              the checksums were taken; only the formats' own checks (snappy CRCs, lengths,
              RocksDB's block checksums) can catch it

Then a worker process (RLIMIT_AS 2 GiB, so an allocation storm or abort is counted, not
survived by luck) loads the checkpoint the way users do and compares everything it holds with
the pristine state. Outcomes: ``identical`` (same state), ``corruption`` (CorruptionError),
``error`` (another specific StateEngineError: a removed handle or version is
CheckpointNotFoundError), ``wrong`` (loaded, different state), ``raw`` (any other exception),
``crash`` (the worker died), ``timeout``. The target is 0 wrong, 0 raw, 0 crash, 0 timeout.

``resealed`` cases are counted apart: their bytes are, by construction, what the handle says
the file holds, so a format without checks of its own (the operator-state file, RocksDB's
OPTIONS file) can restore them as different state; they must still never crash, hang or
raise a raw exception, and they are what drives the native decoders through garbage.

    python -m tests.campaigns.corruption --cases 20000 --seed 1    # full size
    python -m tests.campaigns.corruption --cases 100 --seed 7      # what the test suite runs
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
PROJECT = os.path.dirname(os.path.dirname(HERE))
MEMORY_LIMIT = 2 << 30
HOSTILE_LENGTH = (1 << 30).to_bytes(4, "big")
MODES = {"flip": 30, "truncate": 12, "splice": 12, "edit": 20, "remove": 4, "append": 4,
         "resealed": 18}


# ---- the worker (child process) --------------------------------------------------------------

def worker(workdir: str, memory_limit: int) -> None:
    """Loads checkpoints on request: one JSON line in ({"kind", "version"}), one out."""
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (memory_limit, memory_limit))
    sys.path.insert(0, PROJECT)
    from stateengine import configure_memory
    from stateengine.checkpoint.storage import forget_verifications
    from tests.campaigns.checkpoints import KINDS, outcome

    configure_memory(16 << 20)  # a normal restore's memory, far below the limit
    pristine = json.load(open(os.path.join(workdir, "pristine.json")))
    scratch = os.path.join(workdir, f"scratch-{os.getpid()}")
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        req = json.loads(line)
        kind = KINDS[req["kind"]]
        root = os.path.join(workdir, "work", req["kind"])
        forget_verifications()
        if req["kind"] == "store":
            load = lambda: _plain(kind.load(root, scratch, version=req["version"]))  # noqa: E731
        else:
            load = lambda: _plain(kind.load(root, scratch))  # noqa: E731
        cls, detail = outcome(load, pristine[f"{req['kind']}:{req['version']}"])
        shutil.rmtree(scratch, ignore_errors=True)
        print(json.dumps({"class": cls, "detail": detail[:500]}), flush=True)


def _plain(d: Any) -> Any:
    """A dump as JSON would give it back (bytes as hex), so the parent can store it."""
    return json.loads(json.dumps(d, default=lambda b: b.hex() if isinstance(b, bytes) else str(b)))


class Worker:
    def __init__(self, workdir: str, memory_limit: int) -> None:
        self.workdir, self.memory_limit = workdir, memory_limit
        self.proc: subprocess.Popen | None = None
        self.starts = 0

    def start(self) -> None:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            filter(None, [PROJECT, os.environ.get("PYTHONPATH")])))
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.campaigns.corruption", "--worker", self.workdir,
             "--memory-limit", str(self.memory_limit)], cwd=PROJECT, env=env,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.starts += 1
        line = self.proc.stdout.readline()
        if not line or not json.loads(line).get("ready"):
            raise RuntimeError(f"the worker did not start: {self.proc.stderr.read()[-2000:]}")

    def load(self, kind: str, version: int | None, timeout: float) -> tuple[str, str]:
        if self.proc is None or self.proc.poll() is not None:
            self.start()
        import selectors

        self.proc.stdin.write(json.dumps({"kind": kind, "version": version}) + "\n")
        self.proc.stdin.flush()
        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdout, selectors.EVENT_READ)
        ready = sel.select(timeout)
        sel.close()
        if not ready:
            self.kill()
            return "timeout", f"no answer within {timeout} s"
        line = self.proc.stdout.readline()
        if not line:
            code = self.proc.wait(30)
            err = self.proc.stderr.read()[-1500:]
            self.proc = None
            what = f"signal {signal.Signals(-code).name}" if code < 0 else f"exit status {code}"
            return "crash", f"the worker died ({what}): {err}"
        answer = json.loads(line)
        return answer["class"], answer["detail"]

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)
        self.proc = None


# ---- the parent -------------------------------------------------------------------------------

class Campaign:
    def __init__(self, workdir: str, seed: int, memory_limit: int = MEMORY_LIMIT,
                 timeout: float = 120.0) -> None:
        sys.path.insert(0, PROJECT)
        from tests.campaigns.checkpoints import KINDS, build_all

        self.kinds = KINDS
        self.workdir, self.rng, self.timeout = workdir, random.Random(seed), timeout
        pristine_dir = os.path.join(workdir, "pristine")
        build_all(pristine_dir)
        self.pristine_dir = pristine_dir
        shutil.copytree(pristine_dir, os.path.join(workdir, "work"),
                        ignore=shutil.ignore_patterns("scratch*"))
        self.files: dict[str, list[tuple[str, str]]] = {}  # kind -> [(rel, "doc"/"bin")]
        for name, kind in KINDS.items():
            root = os.path.join(pristine_dir, name)
            self.files[name] = [(r, "doc") for r in kind.documents(root)] + \
                               [(r, "bin") for r in kind.binaries(root)]
        self._pristine_dumps()
        self.worker = Worker(workdir, memory_limit)
        self.results: Counter = Counter()
        self.by_mode: dict[str, Counter] = {m: Counter() for m in MODES}
        self.unnamed = 0
        self.resealed_wrong: Counter = Counter()
        self.unnamed_by_mode: Counter = Counter()
        self.unnamed_examples: list[dict] = []
        self.bad: list[dict] = []

    def _pristine_dumps(self) -> None:
        from tests.campaigns.checkpoints import StoreVersions

        scratch = os.path.join(self.workdir, "scratch-pristine")
        dumps = {}
        for name, kind in self.kinds.items():
            root = os.path.join(self.workdir, "work", name)
            for version in ((None, 1) if name == "store" else (None,)):
                got = kind.load(root, scratch, version=version) if name == "store" else \
                    kind.load(root, scratch)
                dumps[f"{name}:{version}"] = _plain(got)
        shutil.rmtree(scratch, ignore_errors=True)
        with open(os.path.join(self.workdir, "pristine.json"), "w") as f:
            json.dump(dumps, f)
        self._version_for = StoreVersions.version_read_for

    def _store_version(self, rel: str) -> int | None:
        if rel.startswith("op/shared/"):  # SSTs version 2 also lists are read by the latest
            v2 = json.load(open(os.path.join(self.pristine_dir, "store",
                                             "op/v2/p00000-of-00001.json")))
            return None if rel in {f["path"] for f in v2["shared"]} else 1
        return self._version_for(rel)

    # ---- damage ----------------------------------------------------------------------------

    def _damage(self, kind: str, rel: str, ftype: str, mode: str) -> tuple[str, list[str]]:
        """Applies one damage; returns (description, files touched)."""
        from tests.campaigns import mutations

        rng = self.rng
        root = os.path.join(self.workdir, "work", kind)
        path = os.path.join(root, rel)
        data = open(path, "rb").read()
        if mode == "flip":
            new = data
            bits = [rng.randrange(len(data) * 8) for _ in range(rng.randint(1, 3))] if data else []
            for b in bits:
                new = mutations.flipped(new, b)
            mutations.rewrite(path, new)
            return f"flip bits {bits}", [rel]
        if mode == "truncate":
            n = rng.randrange(len(data)) if data else 0
            mutations.rewrite(path, data[:n])
            return f"truncate to {n}", [rel]
        if mode == "splice":
            other_kind = rng.choice(list(self.files))
            other_rel, _ = rng.choice(self.files[other_kind])
            donor = open(os.path.join(self.pristine_dir, other_kind, other_rel), "rb").read()
            mutations.rewrite(path, mutations.splice(data, donor, rng))
            return f"splice from {other_kind}/{other_rel}", [rel]
        if mode == "edit":
            edits = mutations.structured_edits(data, limit=1, rng=rng)
            what, new = edits[0]
            mutations.rewrite(path, new)
            return what, [rel]
        if mode == "remove":
            os.remove(path)
            return "removed", [rel]
        if mode == "append":
            mutations.rewrite(path, data + rng.randbytes(rng.randint(1, 64)))
            return "append", [rel]
        return self._resealed(kind, root, rel, data)

    def _resealed(self, kind: str, root: str, rel: str, data: bytes) -> tuple[str, list[str]]:
        from stateengine import _native
        from tests.campaigns import mutations

        rng = self.rng
        new = bytearray(data)
        how = rng.choice(["flip", "hostile-length", "zero"])
        if how == "flip" or len(data) < 8:
            for _ in range(rng.randint(1, 4)):
                b = rng.randrange(len(new) * 8)
                new[b // 8] ^= 1 << (b % 8)
        elif how == "hostile-length":
            at = rng.randrange(len(new) - 3)
            new[at:at + 4] = HOSTILE_LENGTH
        else:
            at = rng.randrange(len(new))
            n = rng.randint(1, 64)
            new[at:at + n] = bytes(len(new[at:at + n]))
        new = bytes(new)
        mutations.rewrite(os.path.join(root, rel), new)
        crc, size = _native.crc32c(new), len(new)
        touched = [rel]
        for doc_rel in self._documents_naming(kind, rel):
            doc_path = os.path.join(root, doc_rel)

            def change(doc: dict) -> None:
                for ref in _file_refs(doc):
                    if ref["path"] == rel:
                        ref["crc32c"], ref["size"] = crc, size
            mutations.rewrite(doc_path, mutations.resealed(open(doc_path, "rb").read(), change))
            touched.append(doc_rel)
        return f"resealed {how}", touched

    def _documents_naming(self, kind: str, rel: str) -> list[str]:
        out = []
        for doc_rel, ftype in self.files[kind]:
            if ftype == "doc":
                doc = json.load(open(os.path.join(self.pristine_dir, kind, doc_rel)))
                if any(ref.get("path") == rel for ref in _file_refs(doc)):
                    out.append(doc_rel)
        return out

    def _undo(self, kind: str, touched: list[str]) -> None:
        for rel in touched:
            shutil.copyfile(os.path.join(self.pristine_dir, kind, rel),
                            os.path.join(self.workdir, "work", kind, rel))

    # ---- running ---------------------------------------------------------------------------

    def case(self, i: int) -> None:
        rng = self.rng
        kind = rng.choice(list(self.files))
        mode = rng.choices(list(MODES), weights=list(MODES.values()))[0]
        candidates = [(r, t) for r, t in self.files[kind]
                      if (mode != "edit" or t == "doc") and (mode != "resealed" or t == "bin")]
        rel, ftype = rng.choice(candidates)
        what, touched = self._damage(kind, rel, ftype, mode)
        version = self._store_version(rel) if kind == "store" else None
        try:
            cls, detail = self.worker.load(kind, version, self.timeout)
        finally:
            self._undo(kind, touched)
        self.results[cls] += 1
        self.by_mode[mode][cls] += 1
        named = cls != "corruption" or any(os.path.basename(t) in detail or t in detail
                                          for t in touched)
        if not named:
            self.unnamed += 1
            self.unnamed_by_mode[mode] += 1
            if len(self.unnamed_examples) < 20:
                self.unnamed_examples.append({"mode": mode, "file": rel, "detail": detail[:300]})
        if cls == "wrong" and mode == "resealed":
            self.resealed_wrong[_file_kind(rel)] += 1
        acceptable = {"identical", "corruption", "error"} | ({"wrong"} if mode == "resealed" else set())
        if cls not in acceptable:
            self.bad.append({"case": i, "kind": kind, "file": rel, "mode": mode, "damage": what,
                             "class": cls, "detail": detail})

    def run(self, cases: int, progress: bool = False) -> dict:
        started = time.monotonic()
        try:
            for i in range(cases):
                self.case(i)
                if progress and (i + 1) % 500 == 0:
                    print(f"{i + 1} cases, {dict(self.results)}, {time.monotonic() - started:.0f} s",
                          file=sys.stderr, flush=True)
        finally:
            self.worker.kill()
        damage = Counter()
        for m, c in self.by_mode.items():
            if m != "resealed":
                damage.update(c)
        return {"cases": cases, "outcomes": dict(self.results),
                "outcomes_of_damage": dict(damage),
                "outcomes_behind_valid_checksums": dict(self.by_mode["resealed"]),
                "wrong_behind_valid_checksums_by_file": dict(self.resealed_wrong),
                "by_mode": {m: dict(c) for m, c in self.by_mode.items() if c},
                "corruption_not_naming_the_file": self.unnamed,
                "not_naming_by_mode": dict(self.unnamed_by_mode),
                "not_naming_examples": self.unnamed_examples,
                "worker_starts": self.worker.starts,
                "seconds": round(time.monotonic() - started, 1), "bad": self.bad}


def _file_kind(rel: str) -> str:
    name = rel.rsplit("/", 1)[-1]
    for prefix in ("MANIFEST", "OPTIONS", "CURRENT", "operator-state"):
        if name.startswith(prefix):
            return prefix
    if name.endswith(".sst"):
        return "sst"
    return "operator-state" if name.endswith(".opstate") else "snapshot"


def _file_refs(doc: dict) -> list[dict]:
    refs = list(doc.get("shared", [])) + list(doc.get("private", []))
    if isinstance(doc.get("file"), dict):
        refs.append(doc["file"])
    if isinstance(doc.get("operator_state"), dict):
        refs.append(doc["operator_state"]["file"])
    return refs


def run(cases: int, seed: int, workdir: str | None = None, progress: bool = False,
        memory_limit: int = MEMORY_LIMIT, timeout: float = 120.0) -> dict:
    own = workdir is None
    workdir = workdir or tempfile.mkdtemp(prefix="stateengine-corruption-")
    try:
        report = Campaign(workdir, seed, memory_limit, timeout).run(cases, progress)
        report["seed"] = seed
        return report
    finally:
        if own:
            shutil.rmtree(workdir, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cases", type=int, default=1000)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--memory-limit", type=int, default=MEMORY_LIMIT)
    p.add_argument("--timeout", type=float, default=120.0, help="seconds per load")
    p.add_argument("--worker", metavar="WORKDIR", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        worker(args.worker, args.memory_limit)
        return 0
    report = run(args.cases, args.seed, progress=True, memory_limit=args.memory_limit,
                 timeout=args.timeout)
    print(json.dumps(report, indent=1))
    return 1 if report["bad"] else 0


if __name__ == "__main__":
    sys.exit(main())
