"""Restoring checkpoints written before format 2, whose default serializer pickled values.

Until snapshot format 2 the ANY codec (values, namespaces, map user keys and timer namespaces
of the default serializer) pickled everything that was not a primitive: tuples, lists, dicts,
ints beyond 64 bits, numpy strings. Today those values have a native encoding, so a pickled
namespace or user key is another RocksDB key than the one the same value encodes to now: a
point lookup (``get``, ``contains``, ``set_current_namespace``, deleting a timer) would miss
it. Restoring such a checkpoint therefore scans its keyed state once:

- with ``allow_pickle=True`` every pickle that holds a value ANY can store natively is
  rewritten natively (key and value), so the state reads and compares as if written today; an
  arbitrary object stays a pickle (readable only with ``allow_pickle``, and never equal to a
  key the native encoder could produce);
- without it nothing is unpickled: a pickled namespace, user key or timer namespace fails the
  restore with ``PickleNotAllowedError`` (it could not be found again), while pickled values
  stay as stored and raise that error when read.

A checkpoint is old when its full snapshot's meta block has format version 1 or its
incremental manifest has no ``value_format`` 2 (checkpoint/handles.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .. import _native
from ..errors import PickleNotAllowedError
from ..serializers import Codec

if TYPE_CHECKING:
    from .interface import RestoreTarget


def is_legacy(handle: Any, restore_stats: dict | None) -> bool:
    """Whether a restored handle may hold pickles of the old ANY codec."""
    if handle.kind == "full":
        return bool(restore_stats and restore_stats.get("legacy_format"))
    return handle.value_format < 2


def convert_legacy(backend: "RestoreTarget", allow_pickle: bool) -> dict[str, Any]:
    """Converts (or, without allow_pickle, checks) every state of a backend restored from an
    old checkpoint; returns counts per state that held pickles. It reads the backend through
    its checkpoint contract (column families and their metas, checkpoint/interface.py) and
    hands the backend object to the native converter."""
    mode = _native.PICKLE_ALLOW if allow_pickle else _native.PICKLE_REFUSE
    report: dict[str, Any] = {}
    for name, cf in backend.column_families():
        meta = backend.state_meta(name)
        if Codec.ANY not in (meta["namespace_codec"], meta["user_key_codec"],
                             meta["value_codec"]):
            continue
        what = "timers" if meta["kind"] == "timers" else f"state '{name}'"
        counts = _native.convert_legacy_entries(
            backend, cf, meta["kind"], meta["namespace_codec"],
            meta["user_key_codec"], meta["value_codec"], _native.PickleGate(mode, what),
            allow_pickle)
        if counts["pickled_keys"] or counts["pickled_values"]:
            report[name] = counts
    refused = {n: c["pickled_keys"] for n, c in report.items()
               if c["pickled_keys"] and not allow_pickle}
    if refused:
        listed = ", ".join(f"'{n}' ({k})" for n, k in refused.items())
        raise PickleNotAllowedError(
            f"the checkpoint was written before format 2 and holds namespaces or map user keys "
            f"that were pickled (per state: {listed}); they cannot be looked up again without "
            f"converting them, which means unpickling, which runs code from the checkpoint. "
            f"Restore once with allow_pickle=True if you trust the checkpoint: they are then "
            f"rewritten in the native encoding and later checkpoints need no pickle")
    return report
