"""``stateengine``: look at checkpoint directories without Spark; clean a local directory.

    stateengine versions CHECKPOINT [--operator OP]      versions, partitions, sizes, damage
    stateengine verify   CHECKPOINT --operator OP [--version V | --all]
                                                         check every manifest, marker and file
    stateengine verify   CHECKPOINT --handle NAME.handle.json
                                                         the same for a snapshot or checkpoint
    stateengine dump     CHECKPOINT --operator OP --state NAME [--version V] [--limit N]
                         [--allow-pickle]                entries as JSON lines
    stateengine dump     CHECKPOINT --operator OP --timers [--version V] [--limit N]
                                                         event- and processing-time timers
    stateengine meta     SNAPSHOT_FILE                   the meta block of a full snapshot
    stateengine stats    CHECKPOINT [--operator OP] [--version V] [--json]
                                                         state metrics a version recorded
    stateengine catalog  CHECKPOINT [--operator OP] [--version V] [--json]
                                                         operators, keys, states, kinds,
                                                         schemas, TTL and versions
    stateengine sweep-local-dir [DIR] [--dry-run]
                                                         remove the working directories that
                                                         processes ended without closing
                                                         left in a local directory

CHECKPOINT is a directory or a pyarrow.fs URI (file://, hdfs://, s3://). Without --version the
newest version is used; if it is damaged that is an error, never a quiet fall back to an older one.
--key-file FILE (or $STATEENGINE_CHECKPOINT_KEY) authenticates manifests and files written
with that key. Exit status 1 means the checkpoint, operator or version is missing (the message
lists what exists) or damaged (the message names the file); 0 means all was read and checked.

Typed states (a Spark schema in the descriptor) print their values as JSON objects with the
schema's field names; decimals, dates and timestamps as text, binary as base64.

Nothing is unpickled unless you pass --allow-pickle (unpickling runs code from the checkpoint):
without it, ``dump`` prints a pickled value (a value_type="pickle" state, or a value an
earlier version pickled) as {"pickled": "<base64>", "bytes": N}; the same for a timer's
pickled namespace.

-v/--verbose logs more through the ``stateengine`` logger on stderr (-v info, -vv debug).
The version is --version N; the old ``-v N`` still works and warns on stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime as dt
import json
import logging
import os
import re
import shutil
import sys
import tempfile
from typing import Any, Iterator

from . import _native, evolution, sparktypes, workdirs
from .backend import KeyedStateBackend
from .checkpoint.documents import resolve_key
from .checkpoint.meta import HEADER, SnapshotMeta
from .checkpoint.storage import CheckpointStorage
from .checkpoint.versions import VersionCatalog
from .errors import CheckpointNotFoundError, CorruptionError, StateEngineError
from .keygroups import KeyGroupRange
from .metrics import operators
from .serializers import codec_name, to_json
from .store import default_local_dir
from .timers import EVENT_TIME_CF, PROCESSING_TIME_CF

_TIMER_KINDS = ((EVENT_TIME_CF, "event"), (PROCESSING_TIME_CF, "processing"))
_ANY_CODEC = 1  # timers' namespaces are encoded with the any-value codec


def _json(value: Any) -> Any:
    return to_json(value)


def _key(args: argparse.Namespace) -> bytes | None:
    if getattr(args, "key_file", None):
        with open(args.key_file, "rb") as f:
            return resolve_key(f.read().strip())
    return resolve_key(None)


def _storage(args: argparse.Namespace) -> CheckpointStorage:
    storage = CheckpointStorage(args.checkpoint)
    if not storage.is_dir(""):
        raise CheckpointNotFoundError(f"checkpoint directory {storage.location} does not exist")
    return storage


def _row_codec(schema: str | None) -> Any:
    return None if schema is None else _native.row_codec(sparktypes.parse_ddl(schema))


def _typed_json(row: Any, value: Any) -> Any:
    return sparktypes.to_json_value(row.type, value)


def _catalog(args: argparse.Namespace) -> VersionCatalog:
    storage = _storage(args)
    present = operators(storage)
    if args.operator not in present:
        raise CheckpointNotFoundError(
            f"{storage.location} has no operator '{args.operator}' (operators: "
            f"{', '.join(present) or 'none'})")
    return VersionCatalog(storage, args.operator, _key(args))


def _full_range(catalog: VersionCatalog) -> KeyGroupRange:
    props = catalog.properties()
    return KeyGroupRange.all(props["max_parallelism"] if props else 128)


def _version(args: argparse.Namespace, catalog: VersionCatalog) -> int:
    if args.version is not None:
        return args.version
    version = catalog.latest_version(_full_range(catalog))  # raises if the newest is damaged
    if version == 0:
        raise CheckpointNotFoundError(f"{catalog.describe()} has no committed version "
                                      f"(versions present: {catalog.version_dirs() or 'none'})")
    return version


def cmd_versions(args: argparse.Namespace) -> int:
    storage = _storage(args)
    present = operators(storage)
    if args.operator is not None and args.operator not in present:
        raise CheckpointNotFoundError(f"{storage.location} has no operator '{args.operator}' "
                                      f"(operators: {', '.join(present) or 'none'})")
    if not present:
        raise CheckpointNotFoundError(f"{storage.location} holds no operator state")
    damaged = 0
    for op in [args.operator] if args.operator else present:
        catalog = VersionCatalog(storage, op, _key(args))
        print(f"operator {op}")
        try:
            catalog.check_operator_dir()
            full = _full_range(catalog)
        except CorruptionError as e:
            print(f"  DAMAGED: {e}")
            damaged += 1
            continue
        statuses = [catalog.status(v, full) for v in catalog.version_dirs()]
        shared = catalog.shared_files()  # listed after the manifests were read (see below)
        for st in statuses:
            v = st.version
            gone = catalog.missing_shared(v, shared) if st.state == "complete" else []
            if gone:  # a version naming a file that is gone cannot be restored: not good
                st = dataclasses.replace(
                    st, state="damaged",
                    detail=f"its manifests name {len(gone)} shared file(s) that do not exist, "
                           f"e.g. {catalog.storage.describe(gone[0])}; it cannot be restored")
            if st.state == "damaged":
                damaged += 1
                print(f"  version {v:>6}: DAMAGED: {st.detail}")
            elif st.manifests == 0:
                print(f"  version {v:>6}: incomplete, no manifest (an unfinished commit)")
            else:
                what = "complete" if st.state == "complete" else "incomplete"
                marked = " (committed by driver)" if st.marked else ""
                print(f"  version {v:>6}: {st.manifests} manifest(s) for "
                      f"{list(st.partition_counts)} partition(s){marked}, {what}, "
                      f"{st.bytes_total / 1e6:.1f} MB")
    if damaged:
        print(f"stateengine: {damaged} damaged version(s) or operator(s) above", file=sys.stderr)
        return 1
    return 0


def _verify_version(catalog: VersionCatalog, version: int, scratch: str) -> tuple[int, int]:
    """(partitions, files) of version after checking its manifests, marker and every file."""
    handles = catalog.handles_for(version, _full_range(catalog))
    files = 0
    for h in handles:
        storage = CheckpointStorage(h.root)
        for ref in h.all_files():
            local = storage.open_verified(ref, scratch)
            if not storage.is_local:
                os.remove(local)
            files += 1
    return len(handles), files


def _verify_handle(args: argparse.Namespace) -> int:
    """A full snapshot's or an incremental checkpoint's handle and every file it names."""
    from .checkpoint.handles import read_handle

    storage = _storage(args)
    handle, _ = read_handle(storage, args.handle, _key(args))
    scratch = tempfile.mkdtemp(prefix="stateengine-verify-")
    try:
        files = handle.files() if handle.kind == "full" else handle.all_files()
        for ref in files:
            local = storage.open_verified(ref, scratch)
            if handle.kind == "full" and ref is handle.file:
                _check_snapshot_meta(handle, local, storage.describe(ref.path))
            if not storage.is_local:
                os.remove(local)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"{handle.kind} checkpoint {args.handle}: key groups {handle.key_group_range.start}.."
          f"{handle.key_group_range.end}, {len(files)} files verified")
    return 0


def _check_snapshot_meta(handle: Any, local: str, source: str) -> None:
    with open(local, "rb") as f:
        head = f.read(handle.meta_length)
    _, end = SnapshotMeta.decode(head, source)
    if end != handle.meta_length:
        raise CorruptionError(f"{source}: the meta block has {end} bytes but the handle "
                              f"recorded {handle.meta_length}")


def cmd_verify(args: argparse.Namespace) -> int:
    if args.handle is not None:
        return _verify_handle(args)
    if args.operator is None:
        raise ValueError("verify needs --operator OP (a StateStore's versions) or --handle PATH "
                         "(a snapshot's or checkpoint's handle file)")
    catalog = _catalog(args)
    catalog.properties()
    catalog.check_operator_dir()
    if args.all:
        versions = catalog.version_dirs()
        if not versions:
            raise CheckpointNotFoundError(f"{catalog.describe()} has no version")
    else:
        versions = [_version(args, catalog)]
    scratch = tempfile.mkdtemp(prefix="stateengine-verify-")
    failed = 0
    try:
        for v in versions:
            try:
                parts, files = _verify_version(catalog, v, scratch)
                print(f"version {v}: {parts} partition(s), {files} files verified")
            except StateEngineError as e:
                if not args.all:
                    raise
                if isinstance(e, CheckpointNotFoundError) and not isinstance(e, CorruptionError):
                    print(f"version {v}: incomplete ({e})")
                    continue
                failed += 1
                print(f"version {v}: DAMAGED: {e}")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if failed:
        print(f"stateengine: {failed} damaged version(s)", file=sys.stderr)
        return 1
    return 0


def _iso_time(ms: int) -> str | None:
    """A timer's timestamp (ms since the epoch) as ISO 8601 in UTC; None out of range."""
    try:
        return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).isoformat(
            timespec="milliseconds")
    except (OverflowError, OSError, ValueError):
        return None


@contextlib.contextmanager
def _reading(handle: Any, args: argparse.Namespace) -> Iterator[KeyedStateBackend]:
    """A read-only backend over one handle's files (read with the command's --allow-pickle and
    checkpoint key), in a scratch directory removed after."""
    scratch = tempfile.mkdtemp(prefix="stateengine-dump-")
    try:
        backend = KeyedStateBackend.open_for_reading(os.path.join(scratch, "b"), [handle],
                                                     handle.key_group_range, args.allow_pickle,
                                                     _key(args))
        try:
            yield backend
        finally:
            backend.dispose()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _dump_timers(args: argparse.Namespace, version: int, handles: list[Any]) -> int:
    """Every timer of the version as a JSON line, event-time timers first, in time order
    within each key group. Namespaces that are pickles print as opaque bytes unless
    --allow-pickle."""
    mode = _native.PICKLE_ALLOW if args.allow_pickle else _native.PICKLE_OPAQUE
    gate = _native.PickleGate(mode, "a timer's namespace")
    printed = 0
    for h in handles:
        present = {m["name"] for m in h.states}
        kinds = [(cf, kind) for cf, kind in _TIMER_KINDS if cf in present]
        if not kinds:
            continue
        with _reading(h, args) as backend:
            for cf_name, kind in kinds:
                for raw_key, _ in _stored(backend, cf_name):
                    if args.limit is not None and printed >= args.limit:
                        return 0
                    kg, ts, key, ns = backend.parse_timer_key(raw_key)
                    row = _json({"timer": kind, "key_group": kg, "key": key,
                                 "namespace": _native.decode_for_codec(_ANY_CODEC, ns, gate),
                                 "timestamp": ts})
                    row["time"] = _iso_time(ts)
                    print(json.dumps(row, ensure_ascii=False))
                    printed += 1
    logging.getLogger("stateengine").info("version %d: %d timer(s) printed", version, printed)
    return 0


def _stored(backend: KeyedStateBackend, name: str) -> Iterator[tuple[bytes, bytes]]:
    """A column family's stored entries one by one, read a chunk at a time (dump --limit
    of a large state reads only what it prints)."""
    for chunk in backend.stored_entries(name):
        yield from chunk


def cmd_dump(args: argparse.Namespace) -> int:
    catalog = _catalog(args)
    version = _version(args, catalog)
    handles = catalog.handles_for(version, _full_range(catalog))
    if args.timers:
        return _dump_timers(args, version, handles)
    mode = _native.PICKLE_ALLOW if args.allow_pickle else _native.PICKLE_OPAQUE
    gate = _native.PickleGate(mode, f"state '{args.state}'")
    printed = 0
    for h in handles:
        meta = next((m for m in h.states if m["name"] == args.state), None)
        if meta is None:
            names = ", ".join(m["name"] for m in h.states if not m["name"].startswith("__"))
            raise StateEngineError(f"version {version} has no state '{args.state}' (states: {names})")
        has_uk = meta["kind"] in ("map", "sorted_map")
        value_row, uk_row = evolution.value_codec(meta), _row_codec(meta.get("user_key_schema"))
        # an evolved state: each entry says which schema version it was written in (its value
        # is shown in the current schema)
        evolved = meta.get(evolution.HISTORY) is not None
        layout = {"list": "list", "map": "map", "sorted_map": "map"}.get(meta["kind"], "value")
        with _reading(h, args) as backend:
            for raw_key, raw_value in _stored(backend, args.state):
                if args.limit is not None and printed >= args.limit:
                    return 0
                kg, key, ns, uk = backend.parse_state_key(raw_key, meta["namespace_codec"],
                                                          has_uk)
                row = _json({"key_group": kg, "key": key,
                             "namespace": _native.decode_for_codec(meta["namespace_codec"],
                                                                   ns, gate)})
                if has_uk:
                    row["user_key"] = (
                        _typed_json(uk_row, uk_row.decode_bytes(uk)) if uk_row else
                        _json(_native.decode_for_codec(meta["user_key_codec"], uk, gate)))
                if meta.get("ttl"):  # State TTL: the last access time(s) on their own
                    raw_value, row["last_access_ms"] = _native.split_ttl_value(
                        meta["kind"], meta["value_codec"], raw_value, value_row)
                if evolved:
                    row["schema_version"] = value_row.stored_version(raw_value, layout)
                value = _native.decode_stored_value(meta["kind"], meta["value_codec"],
                                                    raw_value, gate, value_row)
                if value_row is None:
                    row["value"] = _json(value)
                elif meta["kind"] == "list":
                    row["value"] = [_typed_json(value_row, e) for e in value]
                else:
                    row["value"] = _typed_json(value_row, value)
                print(json.dumps(row, ensure_ascii=False))
                printed += 1
    return 0


def cmd_meta(args: argparse.Namespace) -> int:
    size = os.path.getsize(args.file)
    with open(args.file, "rb") as f:
        head = f.read(HEADER.size)
        if len(head) == HEADER.size:  # the block's own length, bounded by the file
            length = HEADER.unpack(head)[2]
            head += f.read(min(length, size - HEADER.size))
    meta, length = SnapshotMeta.decode(head, args.file)
    print(json.dumps({
        "meta_block_bytes": length, "max_parallelism": meta.max_parallelism,
        "key_columns": [codec_name(c) for c in meta.key_codecs or ()],
        "compressed": meta.compressed,
        "states": [_readable_state(s) for s in meta.states],
    }, indent=2))
    return 0


def _readable_state(s: dict[str, Any]) -> dict[str, Any]:
    """A state meta as ``meta`` prints it: codec names, and a schema history with its steps
    spelled out (the stored form, with defaults as base64 encodings, is in the file)."""
    out = dict(s, value_codec=codec_name(s["value_codec"]),
               namespace_codec=codec_name(s["namespace_codec"]),
               user_key_codec=codec_name(s["user_key_codec"]))
    if evolution.HISTORY in s:
        out[evolution.HISTORY] = evolution.readable_history(s)
    return out


def _stats_line(m: dict[str, Any]) -> str:
    return (f"keys {m.get('keys', 0)}, live {m.get('live_bytes', 0) / 1e6:.2f} MB in "
            f"{m.get('files', 0)} file(s), memory {m.get('memory_bytes', 0) / 1e6:.2f} MB, rows "
            f"read/written/deleted {m.get('rows_read', 0)}/{m.get('rows_written', 0)}/"
            f"{m.get('rows_deleted', 0)}, timers fired {m.get('timers_fired', 0)}, commit "
            f"{m.get('commit_ms', 0):.0f} ms, uploaded {m.get('bytes_uploaded', 0) / 1e6:.2f} MB "
            f"in {m.get('files_uploaded', 0)} file(s) ({m.get('files_reused', 0)} reused)")


def cmd_stats(args: argparse.Namespace) -> int:
    from .metrics import version_metrics

    stats = version_metrics(_storage(args), args.version, args.operator, _key(args))
    if args.json:
        print(json.dumps(stats.to_dict(), indent=2, sort_keys=True))
        return 0
    print(f"operator {stats.operator} version {stats.version} "
          f"({stats.num_partitions} partition(s))")
    for p, m in sorted(stats.partitions.items()):
        if m is None:
            print(f"  partition {p:>5}: no metrics (written before commits recorded them)")
        else:
            print(f"  partition {p:>5}: {_stats_line(m)}; load {m.get('load')} "
                  f"{m.get('load_ms', 0):.0f} ms")
    totals = stats.totals
    print(f"  total          : {_stats_line(totals)}; block cache "
          f"{totals['block_cache_bytes'] / 1e6:.2f} MB; loads {totals['loads']}")
    return 0


def cmd_catalog(args: argparse.Namespace) -> int:
    from .catalog import checkpoint_catalog, format_catalog

    entries = checkpoint_catalog(_storage(args), args.operator, args.version, _key(args))
    if args.json:
        print(json.dumps([e.to_dict() for e in entries], indent=2, sort_keys=True))
    else:
        print(format_catalog(entries))
    damaged = [e.name for e in entries if e.damage]
    if damaged:
        print(f"stateengine: operator(s) {', '.join(damaged)} could not be read (above)",
              file=sys.stderr)
        return 1
    return 0


def cmd_sweep_local_dir(args: argparse.Namespace) -> int:
    root = args.dir or default_local_dir()
    if not os.path.isdir(root):
        raise FileNotFoundError(f"local directory {root} does not exist")
    report = workdirs.sweep_local_dir(root, dry_run=args.dry_run)
    verb = "would remove" if args.dry_run else "removed"
    for e in report.entries:
        size = f"  {e.bytes / 1e6:.1f} MB" if e.removed else ""
        print(f"{verb if e.removed else 'kept'}  {e.name}{size}  ({e.reason})")
    print(report.summary())
    if report.failed:
        print(f"stateengine: {len(report.failed)} working directory(ies) could not be "
              f"inspected or removed (above)", file=sys.stderr)
        return 1
    return 0


def cmd_ui_jar(args: argparse.Namespace) -> int:
    from .spark.ui_metrics import UiJarError, ui_jar

    try:
        print(ui_jar(args.cache_dir))
    except UiJarError as e:
        print(f"stateengine: {e}", file=sys.stderr)
        return 2
    return 0


_VERBOSE_HELP = "log more on stderr through the stateengine logger (-v info, -vv debug)"
_OLD_VERSION_FORM = re.compile(r"^-v(\d+)$")


def build_parser() -> argparse.ArgumentParser:
    """The command's parser: every subcommand and option carries help text."""
    p = argparse.ArgumentParser(prog="stateengine", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-v", "--verbose", action="count", default=0, dest="verbose_main",
                   help=_VERBOSE_HELP)
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND",
                           help="what to do (stateengine COMMAND -h for its options)")
    helps = {"versions": "list every operator's versions: partitions, size, damage",
             "verify": "check a version's (or every version's) manifests, marker and files",
             "dump": "print a version's entries of one state, or its timers, as JSON lines"}
    for name, fn in (("versions", cmd_versions), ("verify", cmd_verify), ("dump", cmd_dump)):
        sp = sub.add_parser(name, help=helps[name], description=helps[name])
        sp.add_argument("checkpoint", help="checkpoint directory or pyarrow.fs URI (file://, "
                                           "hdfs://, s3://)")
        sp.add_argument("--operator", required=name == "dump", default=None,
                        help="operator id (its directory under CHECKPOINT)"
                             + ("" if name == "dump" else "; default: every operator"))
        sp.add_argument("--key-file", default=None,
                        help="file holding the checkpoint key (default: "
                             "$STATEENGINE_CHECKPOINT_KEY)")
        sp.add_argument("-v", "--verbose", action="count", default=0, help=_VERBOSE_HELP)
        if name != "versions":
            sp.add_argument("--version", type=int, default=None, metavar="N",
                            help="the version to read (default: the newest; a damaged "
                                 "newest version is an error). The old form -v N still "
                                 "works, with a warning")
        if name == "verify":
            sp.add_argument("--all", action="store_true", help="verify every version")
            sp.add_argument("--handle", default=None,
                            help="verify the snapshot or checkpoint whose handle (e.g. "
                                 "NAME.handle.json) lies at this path under CHECKPOINT")
        if name == "dump":
            what = sp.add_mutually_exclusive_group(required=True)
            what.add_argument("--state", help="name of the state whose entries to print")
            what.add_argument("--timers", action="store_true",
                              help="print the timers (kind, key group, key, namespace, "
                                   "timestamp, time in ISO 8601 UTC) instead of a state")
            sp.add_argument("--limit", type=int, default=None, metavar="N",
                            help="print at most N lines")
            sp.add_argument("--allow-pickle", action="store_true",
                            help="unpickle pickled values (runs code from the checkpoint: only "
                                 "for checkpoints you trust); without it they print as "
                                 "{\"pickled\": base64, \"bytes\": n}")
        sp.set_defaults(fn=fn)
    sp = sub.add_parser("stats", help="state metrics a stored version recorded",
                        description="print the state metrics a stored version recorded")
    sp.add_argument("checkpoint", help="checkpoint directory or pyarrow.fs URI")
    sp.add_argument("--operator", default=None,
                    help="operator id (default: the checkpoint's only operator)")
    sp.add_argument("--version", type=int, default=None,
                    help="version to read (default: the newest; batch N commits version N+1)")
    sp.add_argument("--key-file", default=None,
                    help="file holding the checkpoint key (default: $STATEENGINE_CHECKPOINT_KEY)")
    sp.add_argument("--json", action="store_true",
                    help="print partitions, totals and Spark-style sums as JSON")
    sp.set_defaults(fn=cmd_stats)
    sp = sub.add_parser("catalog", help="what a checkpoint holds, from its own metadata",
                        description="list every operator of a checkpoint root with its key "
                                    "(column names and types), versions and partitions, and "
                                    "its states: kind, types or schemas, TTL, attributes")
    sp.add_argument("checkpoint", help="checkpoint directory or pyarrow.fs URI")
    sp.add_argument("--operator", default=None, help="only this operator (default: every one)")
    sp.add_argument("--version", type=int, default=None,
                    help="describe version N (default: each operator's newest)")
    sp.add_argument("--key-file", default=None,
                    help="file holding the checkpoint key (default: $STATEENGINE_CHECKPOINT_KEY)")
    sp.add_argument("--json", action="store_true", help="print the catalog as JSON")
    sp.add_argument("-v", "--verbose", action="count", default=0, help=_VERBOSE_HELP)
    sp.set_defaults(fn=cmd_catalog)
    sp = sub.add_parser("meta", help="print the meta block of a full snapshot file as JSON",
                        description="print the meta block of a full snapshot file as JSON")
    sp.add_argument("file", help="a full snapshot's data file (local path)")
    sp.add_argument("-v", "--verbose", action="count", default=0, help=_VERBOSE_HELP)
    sp.set_defaults(fn=cmd_meta)
    sp = sub.add_parser("sweep-local-dir",
                        help="remove stale working directories from a local directory",
                        description="remove the working directories in a local directory "
                                    "that processes which ended without closing their "
                                    "providers left behind (owner gone and database not "
                                    "open); print what was removed and kept, and why")
    sp.add_argument("dir", nargs="?", default=None,
                    help="the local directory (default: $STATEENGINE_LOCAL_DIR, else "
                         "<tmp>/stateengine-scratch-<uid>)")
    sp.add_argument("--dry-run", action="store_true",
                    help="print what would be removed without removing anything")
    sp.add_argument("-v", "--verbose", action="count", default=0, help=_VERBOSE_HELP)
    sp.set_defaults(fn=cmd_sweep_local_dir)
    sp = sub.add_parser("ui-jar", help="print the path of the jar that shows state metrics in "
                                       "the Spark UI (built with javac on first use)",
                        description="print the path of the jar that shows state metrics in the "
                                    "Spark UI (for spark.jars or --jars; stateengine/spark/"
                                    "ui_metrics.py); built with the JDK's javac on first use")
    sp.add_argument("--cache-dir", default=None,
                    help="where the built jar is kept (default: ~/.cache/stateengine)")
    sp.set_defaults(fn=cmd_ui_jar)
    return p


def _modern_argv(argv: list[str]) -> list[str]:
    """argv with the old ``-v N`` (or ``-vN``) version form rewritten to ``--version N``,
    with a deprecation warning on stderr: ``-v`` alone now means --verbose."""
    out: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        old = _OLD_VERSION_FORM.match(arg)
        if arg == "-v" and i + 1 < len(argv) and re.fullmatch(r"\d+", argv[i + 1]):
            old_form, number, i = f"-v {argv[i + 1]}", argv[i + 1], i + 2
        elif old:
            old_form, number, i = arg, old.group(1), i + 1
        else:
            out.append(arg)
            i += 1
            continue
        print(f"stateengine: '{old_form}' is deprecated: the version is --version {number} "
              f"(-v now means --verbose)", file=sys.stderr)
        out += ["--version", number]
    return out


def _configure_logging(verbosity: int) -> None:
    """-v: info, -vv: debug, on stderr, for the stateengine logger only."""
    if verbosity <= 0:
        return
    logger = logging.getLogger("stateengine")
    logger.setLevel(logging.DEBUG if verbosity > 1 else logging.INFO)
    for h in logger.handlers:
        if getattr(h, "_stateengine_cli", False):  # main() called again in this process
            h.setStream(sys.stderr)
            return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    handler._stateengine_cli = True  # type: ignore[attr-defined]
    logger.addHandler(handler)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(_modern_argv(list(sys.argv[1:] if argv is None else argv)))
    # a subcommand without its own -v (added later, say) still gets the top-level one
    _configure_logging(args.verbose_main + getattr(args, "verbose", 0))
    logging.getLogger("stateengine").debug("stateengine %s: %s", args.command, vars(args))
    try:
        return args.fn(args)
    except (StateEngineError, OSError, ValueError) as e:
        print(f"stateengine: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
