"""The driver's check of declared state schemas against a checkpoint (schema evolution).

Every Spark entry point that declares states (``apply_with_state``, ``map_with_state``, the
StatefulProcessor runners, ``bootstrap_state``) calls ``check_evolution`` before any task
starts: the metas of the version the tasks will load are read from its manifests, and a
schema that cannot evolve (stateengine/evolution.py) or changed key types fail the job here,
with one ``SchemaEvolutionError`` naming every offending path of every state, instead of in
every task after the restore.
"""

from __future__ import annotations

from typing import Any, Sequence

from ..checkpoint.storage import CheckpointStorage
from ..checkpoint.versions import VersionCatalog
from ..descriptors import StateDescriptor
from ..evolution import check_descriptors, merge_histories
from ..keygroups import KeyGroupRange
from ..serializers import codec_name


def stored_metas(checkpoint: str, operator_id: str, max_parallelism: int,
                 version: int | None = None) -> tuple[dict[str, dict], Any]:
    """(state name -> meta, key codecs) of ``version`` (default: the latest committed) of an
    operator's checkpoint; empty when it has none. Schema histories of the version's handles
    are merged (the longest wins)."""
    catalog = VersionCatalog(CheckpointStorage(checkpoint), operator_id)
    full = KeyGroupRange.all(max_parallelism)
    v = catalog.latest_version(full) if version is None else version
    if not v:
        return {}, None
    metas: dict[str, dict] = {}
    key_codecs = None
    for h in catalog.handles_for(v, full):
        key_codecs = key_codecs or h.key_codecs
        for m in h.states:
            seen = metas.get(m["name"])
            metas[m["name"]] = m if seen is None else (merge_histories(seen, m) or seen)
    return metas, key_codecs


def check_evolution(checkpoint: str, operator_id: str, max_parallelism: int,
                    descriptors: Sequence[StateDescriptor], key_codecs: Sequence[int],
                    version: int | None = None) -> None:
    """Raises one SchemaEvolutionError if any declared state's schema cannot evolve from the
    checkpoint's, or if the grouping key's types changed."""
    metas, stored_keys = stored_metas(checkpoint, operator_id, max_parallelism, version)
    if not metas:
        return
    extra = []
    if stored_keys and list(stored_keys) != list(key_codecs):
        extra.append(("key", ", ".join(codec_name(c) for c in stored_keys),
                      ", ".join(codec_name(c) for c in key_codecs),
                      "the grouping key's types never change: its bytes, order and key groups "
                      "would"))
    check_descriptors(metas, descriptors, extra)
