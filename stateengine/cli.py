"""``stateengine``: look at checkpoint directories without Spark.

    stateengine versions CHECKPOINT [--operator OP]      versions, partitions, sizes
    stateengine verify   CHECKPOINT --operator OP [-v V] check every file's size and CRC-32C
    stateengine dump     CHECKPOINT --operator OP --state NAME [-v V] [--limit N]
                         [--allow-pickle]                entries as JSON lines
    stateengine meta     SNAPSHOT_FILE                   the meta block of a full snapshot

CHECKPOINT is a directory or a pyarrow.fs URI (file://, hdfs://, s3://). Exit status 1 means
the checkpoint is missing or damaged; the message names the file.

Nothing is unpickled unless you pass --allow-pickle (unpickling runs code from the checkpoint):
without it, ``dump`` prints a pickled value (a value_type="pickle" state, or a value an
earlier version pickled) as {"pickled": "<base64>", "bytes": N}.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from typing import Any

from . import _native
from .backend import KeyedStateBackend
from .checkpoint.meta import SnapshotMeta
from .checkpoint.storage import CheckpointStorage
from .checkpoint.versions import VersionCatalog
from .errors import StateEngineError
from .keygroups import KeyGroupRange
from .serializers import codec_name, to_json


def _json(value: Any) -> Any:
    return to_json(value)


def _catalog(args: argparse.Namespace) -> VersionCatalog:
    return VersionCatalog(CheckpointStorage(args.checkpoint), args.operator)


def _handles(args: argparse.Namespace) -> tuple[int, list]:
    catalog = _catalog(args)
    rel = f"{args.operator}/_operator.json"
    max_p = (json.loads(catalog.storage.read_bytes(rel))["max_parallelism"]
             if catalog.storage.exists(rel) else 128)
    full = KeyGroupRange.all(max_p)
    version = args.version if args.version is not None else catalog.latest_version(full)
    if version == 0:
        raise StateEngineError(f"{catalog.describe()} has no committed version")
    return version, catalog.handles_for(version, full)


def cmd_versions(args: argparse.Namespace) -> int:
    storage = CheckpointStorage(args.checkpoint)
    operators = [args.operator] if args.operator else sorted(
        i.base_name for i in storage.list_dir("") if i.type.name == "Directory")
    for op in operators:
        catalog = VersionCatalog(storage, op)
        versions = catalog.versions()
        if not versions:
            continue
        print(f"operator {op}")
        for v in versions:
            parts = catalog.manifests(v)
            size = sum(d.get("stats", {}).get("bytes_total", 0) for _, _, d in parts)
            ns = sorted({n for _, n, _ in parts})
            marker = catalog.committed_partitions(v)
            print(f"  version {v:>6}: {len(parts)} manifest(s) for {ns} partition(s)"
                  f"{' (committed by driver)' if marker else ''}, {size / 1e6:.1f} MB")
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    version, handles = _handles(args)
    files = 0
    scratch = tempfile.mkdtemp(prefix="stateengine-verify-")
    try:
        for h in handles:
            storage = CheckpointStorage(h.root)
            refs = list(h.files()) + ([h.operator_state.file] if h.operator_state else [])
            for ref in refs:
                local = storage.open_verified(ref, scratch)
                if not storage.is_local:
                    os.remove(local)
                files += 1
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"version {version}: {len(handles)} partition(s), {files} files verified")
    return 0


def cmd_dump(args: argparse.Namespace) -> int:
    version, handles = _handles(args)
    mode = _native.PICKLE_ALLOW if args.allow_pickle else _native.PICKLE_OPAQUE
    gate = _native.PickleGate(mode, f"state '{args.state}'")
    printed = 0
    for h in handles:
        meta = next((m for m in h.states if m["name"] == args.state), None)
        if meta is None:
            names = ", ".join(m["name"] for m in h.states if not m["name"].startswith("__"))
            raise StateEngineError(f"version {version} has no state '{args.state}' (states: {names})")
        has_uk = meta["kind"] in ("map", "sorted_map")
        scratch = tempfile.mkdtemp(prefix="stateengine-dump-")
        backend = KeyedStateBackend.open_for_reading(os.path.join(scratch, "b"), [h],
                                                     h.key_group_range, args.allow_pickle)
        try:
            for raw_key, raw_value in backend._raw_scan(backend._cf_index[args.state]):
                if args.limit is not None and printed >= args.limit:
                    return 0
                kg, key, ns, uk = backend._parse_state_key(raw_key, meta["namespace_codec"], has_uk)
                row = {"key_group": kg, "key": key,
                       "namespace": _native.decode_for_codec(meta["namespace_codec"], ns, gate)}
                if has_uk:
                    row["user_key"] = _native.decode_for_codec(meta["user_key_codec"], uk, gate)
                if meta.get("ttl"):  # State TTL: show the last access time(s) on their own
                    raw_value, row["last_access_ms"] = _native.split_ttl_value(
                        meta["kind"], meta["value_codec"], raw_value)
                row["value"] = _native.decode_stored_value(meta["kind"], meta["value_codec"],
                                                           raw_value, gate)
                print(json.dumps(_json(row)))
                printed += 1
        finally:
            backend.dispose()
            shutil.rmtree(scratch, ignore_errors=True)
    return 0


def cmd_meta(args: argparse.Namespace) -> int:
    with open(args.file, "rb") as f:
        head = f.read(1 << 20)
    meta, length = SnapshotMeta.decode(head, args.file)
    print(json.dumps({
        "meta_block_bytes": length, "max_parallelism": meta.max_parallelism,
        "key_columns": [codec_name(c) for c in meta.key_codecs or ()],
        "compressed": meta.compressed,
        "states": [dict(s, value_codec=codec_name(s["value_codec"]),
                        namespace_codec=codec_name(s["namespace_codec"]),
                        user_key_codec=codec_name(s["user_key_codec"])) for s in meta.states],
    }, indent=2))
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="stateengine", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    for name, fn in (("versions", cmd_versions), ("verify", cmd_verify), ("dump", cmd_dump)):
        sp = sub.add_parser(name)
        sp.add_argument("checkpoint")
        sp.add_argument("--operator", required=name != "versions", default=None)
        if name != "versions":
            sp.add_argument("-v", "--version", type=int, default=None)
        if name == "dump":
            sp.add_argument("--state", required=True)
            sp.add_argument("--limit", type=int, default=None)
            sp.add_argument("--allow-pickle", action="store_true",
                            help="unpickle pickled values (runs code from the checkpoint: only "
                                 "for checkpoints you trust); without it they print as "
                                 "{\"pickled\": base64, \"bytes\": n}")
        sp.set_defaults(fn=fn)
    sp = sub.add_parser("meta")
    sp.add_argument("file")
    sp.set_defaults(fn=cmd_meta)
    args = p.parse_args(argv)
    try:
        return args.fn(args)
    except (StateEngineError, OSError) as e:
        print(f"stateengine: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
