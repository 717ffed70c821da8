"""State as DataFrames: read any state of a committed version (like Spark's state data source
and Flink's State Processor API) and bootstrap state from a DataFrame.

``read_state`` returns one row per stored entry with columns ``key`` (or ``key_0``..), then
``namespace`` (null for the default namespace), ``user_key`` (map states) and ``value``, each
with a proper Spark type, never text standing for a value:

* typed states (a Spark schema in the descriptor) read as that schema: a struct schema is one
  struct column, as in Spark's state data source; ``flatten=True`` gives one column per field
  instead (list states: one row per element);
* states with a primitive serializer (``value_type=int``, ``str``...) as that type;
* the default serializer ("any") has no declared type: a first pass over the state infers one
  (see ``stateengine.spark.infer``: ints bigint, floats double, tuples structs ``_1``, ``_2``...,
  lists arrays, dicts maps or records). A state whose values have no single type raises
  ``MixedTypesError``; pass ``value_type=`` (and ``user_key_type=``, ``namespace_type=``) with a
  Spark type (DDL or pyspark DataType) to read it as that type, which also skips the inference
  pass, or ``"json"`` for JSON text. List states give arrays of their element type.

A state with TTL gets a ``last_access_ms`` column (bigint; for a list state an array, one per
element): what is stored, which includes entries that expired but were not cleaned up yet (the
duration is configuration, not stored): keep the rows with ``last_access_ms + ttl_ms > now`` to
see what the job would see at ``now``.

Nothing is unpickled unless ``allow_pickle=True``: a pickled value (a ``value_type="pickle"``
state, or a value a version before format 2 pickled) otherwise fails the read with
``PickleNotAllowedError``.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import uuid
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

import pandas as pd
from pyspark.sql import DataFrame, SparkSession

from .. import _native, evolution, sparktypes
from ..backend import KeyedStateBackend
from ..catalog import SPARK_TYPES as _SPARK_TYPES
from ..catalog import default_key_names
from ..checkpoint.handles import handle_from_dict
from ..checkpoint.storage import CheckpointStorage
from ..checkpoint.versions import VersionCatalog
from ..descriptors import StateDescriptor, StateKind, check_no_pickle
from ..errors import IncompatibleStateError, MixedTypesError, UnknownStateError
from ..keygroups import DEFAULT_MAX_PARALLELISM, KeyGroupRange
from ..serializers import Codec, to_json
from . import infer
from .evolution_check import check_evolution
from .routing import PID_COL, check_no_null_keys, check_partition, default_num_partitions, \
    key_codecs_for, key_columns, partition_rows, route
from .runtime import TaskConfig, guarded, ttl_clock
from .workers import check_workers

_UNTYPED = (Codec.ANY, Codec.PICKLE)
_CHUNK = 4096
_BATCH_ROWS = 16_384
JSON = "json"
RECORDED = "recorded"  # read_state(key_names=): the names the manifests recorded


def _json(value: Any) -> str | None:
    if value is None:
        return None
    return json.dumps(to_json(value), ensure_ascii=False)


@dataclass
class _Column:
    """How one output column (namespace, user key, value) is produced from stored bytes."""

    name: str
    codec: int
    mode: str                 # "typed", "primitive", "convert", "json", "null"
    schema: str | None = None  # canonical Spark type of one element (typed, primitive, convert)
    param: str = ""           # the read_state argument that overrides it

    def element_type(self) -> sparktypes.DataType:
        return sparktypes.STRING if self.schema is None else sparktypes.parse_ddl(self.schema)


def _plan(meta: dict, column: str, override: Any, param: str) -> _Column:
    """How column is read: its declared type, an override, or inference (mode "infer")."""
    codec = meta[f"{column}_codec"] if column != "namespace" else meta["namespace_codec"]
    schema_attr = meta.get("value_schema" if column == "value" else "user_key_schema")
    if column == "namespace" and codec == Codec.VOID:
        if override is not None:
            raise ValueError(f"state '{meta['name']}' has no namespaces; drop {param}=")
        return _Column(column, codec, "null", param=param)
    if codec not in _UNTYPED:
        if override is not None:
            raise ValueError(
                f"state '{meta['name']}' declares its {column.replace('_', ' ')} type "
                f"({schema_attr or _SPARK_TYPES.get(Codec(codec), Codec(codec).name.lower())}); "
                f"{param}= is for states of the default serializer, drop it")
        if codec == Codec.STRUCT:
            return _Column(column, codec, "typed", schema_attr, param)
        return _Column(column, codec, "primitive", _SPARK_TYPES[Codec(codec)], param)
    if isinstance(override, str) and override.strip().lower() == JSON:
        return _Column(column, codec, "json", param=param)
    if override is not None:
        return _Column(column, codec, "convert", sparktypes.to_schema(override).canonical(), param)
    return _Column(column, codec, "infer", param=param)


def _agreed_meta(handles: list[dict], meta: dict, version: int) -> dict:
    """The state's meta as every handle of the version has it; of schema histories, the
    longest (a handle's entries may carry the markers of its later versions)."""
    for h in handles[1:]:
        other = next((m for m in h["states"] if m["name"] == meta["name"]), None)
        if other is None or other == meta:
            continue
        merged = evolution.merge_histories(meta, other)
        if merged is None:
            raise IncompatibleStateError(
                f"the handles of version {version} disagree on state '{meta['name']}': "
                f"{meta} and {other}")
        meta = merged
    return meta


def _version_handles(storage: CheckpointStorage, operator_id: str,
                     version: int | None, max_parallelism: int) -> tuple[int, list[dict]]:
    catalog = VersionCatalog(storage, operator_id)
    full = KeyGroupRange.all(max_parallelism)
    v = catalog.latest_version(full) if version is None else version
    if v == 0:
        return 0, []
    return v, [h.to_dict() for h in catalog.handles_for(v, full)]


def _entries(handle_json: str, meta: dict, allow_pickle: bool,
             with_stamps: bool = False) -> Iterator[list[tuple]]:
    """Chunks of (key, namespace bytes, user key bytes, value bytes) of one handle's state.
    Values of a state with TTL come without their last-access stamps (csrc/ttl.h), which
    ``with_stamps`` appends to each tuple (an int, or a list of ints for a list state)."""
    name = meta["name"]
    ttl = bool(meta.get("ttl"))
    row = evolution.value_codec(meta) if ttl else None  # measures typed list elements
    has_uk = meta["kind"] in (StateKind.MAP.value, StateKind.SORTED_MAP.value)
    handle = handle_from_dict(json.loads(handle_json))
    if all(m["name"] != name for m in handle.states):
        return  # a partition whose job never registered the state holds none of it
    scratch = os.path.join(tempfile.gettempdir(), "stateengine-reader", uuid.uuid4().hex)
    backend = KeyedStateBackend.open_for_reading(scratch, [handle], handle.key_group_range,
                                                 allow_pickle)
    try:
        for chunk in backend.stored_entries(name, _CHUNK):
            rows = []
            for raw_key, raw_value in chunk:
                _, key, ns, uk = backend.parse_state_key(raw_key, meta["namespace_codec"], has_uk)
                if not ttl:
                    rows.append((key, ns, uk, raw_value))
                    continue
                value, stamps = _native.split_ttl_value(meta["kind"], meta["value_codec"],
                                                        raw_value, row)
                rows.append((key, ns, uk, value, stamps) if with_stamps else (key, ns, uk, value))
            if rows:
                yield rows
    finally:
        backend.dispose()
        shutil.rmtree(scratch, ignore_errors=True)


class _Decoder:
    """Turns the stored bytes of one column into Python values and Arrow arrays (in tasks)."""

    def __init__(self, meta: dict, col: _Column, allow_pickle: bool) -> None:
        self.meta = meta
        self.col = col
        self.kind = meta["kind"]
        self.list_values = col.name == "value" and self.kind == StateKind.LIST.value
        self.gate = _native.PickleGate(_native.PICKLE_ALLOW if allow_pickle else
                                       _native.PICKLE_REFUSE, f"state '{meta['name']}'")
        # a typed value's codec knows the state's schema history: entries of older versions
        # are upgraded to the current schema as they are decoded
        self.row = (evolution.value_codec(meta) if col.mode == "typed" and col.name == "value"
                    else _native.row_codec(col.element_type())
                    if col.mode in ("typed", "convert") else None)

    def python(self, raw: bytes) -> Any:
        """The stored value as the default decoders give it."""
        if self.col.name == "value":
            return _native.decode_stored_value(self.kind, self.col.codec, raw, self.gate)
        return _native.decode_for_codec(self.col.codec, raw, self.gate)

    def arrow(self, raws: list[bytes], keys: list[Any]) -> Any:
        import pyarrow as pa

        col = self.col
        n = len(raws)
        if col.mode == "null":
            return pa.nulls(n, pa.string())
        layout = ("list" if self.list_values else
                  "map" if col.name == "value" and self.kind in ("map", "sorted_map") else "value")
        if col.mode == "typed":
            return _native.decode_rows_to_arrow(self.row, raws, layout, f"state '{self.meta['name']}'",
                                                sparktypes.to_arrow(self.row.type, nullable=True))
        values = [self.python(r) for r in raws]
        if col.mode == "json":
            values = [[_json(e) for e in v] for v in values] if self.list_values else \
                [_json(v) for v in values]
            return pa.array(values, _arrow_of(col, self.list_values))
        if col.mode == "primitive":
            return pa.array(values, _arrow_of(col, self.list_values))
        # "convert": Python values through the row codec of the column's Spark type.
        t = self.row.type
        shaping = infer.needs_shaping(t)
        encoded = []
        for key, v in zip(keys, values):
            try:
                if self.list_values:
                    encoded.append(b",".join(self.row.encode_bytes(infer.shape(e, t) if shaping else e)
                                             for e in v))
                elif v is None:
                    encoded.append(b"\x01")
                else:
                    encoded.append(b"\x00" + self.row.encode_bytes(infer.shape(v, t) if shaping else v))
            except (TypeError, ValueError) as e:
                raise MixedTypesError(
                    f"state '{self.meta['name']}', key {key!r}: the {col.name.replace('_', ' ')} "
                    f"{v!r:.80} is not of type {t} ({e}); pass {col.param}= with a type that "
                    f"fits every value, or {col.param}=\"json\"") from None
        return _native.decode_rows_to_arrow(self.row, encoded, "list" if self.list_values else "map",
                                            f"state '{self.meta['name']}'",
                                            sparktypes.to_arrow(t, nullable=True))


def _arrow_of(col: _Column, as_list: bool) -> Any:
    import pyarrow as pa

    t = sparktypes.to_arrow(col.element_type(), nullable=True)
    return pa.list_(t) if as_list else t


def _spark_type(col: _Column, as_list: bool) -> str:
    ddl = col.element_type().ddl()
    return f"array<{ddl}>" if as_list else ddl


def _infer_columns(spark: SparkSession, handles: list[dict], meta: dict,
                   columns: list[_Column], allow_pickle: bool) -> None:
    """Fills in the Spark type of every column in mode "infer" with one pass over the state:
    each task infers the types of its partition's values, the driver merges them."""
    todo = [c for c in columns if c.mode == "infer"]
    if not todo:
        return
    meta_json = json.dumps(meta)
    names = [c.name for c in todo]

    def run(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa

        m = json.loads(meta_json)
        cols = [c for c in _columns_of(m, {}) if c.name in names]
        for rb in batches:
            for handle_json in rb.column(0).to_pylist():
                found = {c.name: None for c in cols}
                decoders = {c.name: _Decoder(m, c, allow_pickle) for c in cols}
                for rows in _entries(handle_json, m, allow_pickle):
                    for _key, ns, uk, raw in rows:
                        for c in cols:
                            raw_col = {"namespace": ns, "user_key": uk, "value": raw}[c.name]
                            v = decoders[c.name].python(raw_col)
                            if c.name == "value" and m["kind"] == "list":
                                for e in v:
                                    found[c.name] = infer.merge(found[c.name], infer.of(e))
                            else:
                                found[c.name] = infer.merge(found[c.name], infer.of(v))
                yield pa.RecordBatch.from_pydict(
                    {"column": list(found), "type": [json.dumps(infer.to_json(t))
                                                     for t in found.values()]})

    seeds = spark.createDataFrame([(json.dumps(h),) for h in handles], "handle string")
    parts = seeds.repartition(len(handles)).mapInArrow(run, "column string, type string").collect()
    merged: dict[str, Any] = {n: None for n in names}
    for r in parts:
        merged[r["column"]] = infer.merge(merged[r["column"]], infer.from_json(json.loads(r["type"])))
    for c in todo:
        try:
            t = infer.finish(merged[c.name])
        except MixedTypesError as e:
            what = "elements" if c.name == "value" and meta["kind"] == "list" else \
                c.name.replace("_", " ") + "s"
            raise MixedTypesError(
                f"state '{meta['name']}' holds {what} that no single Spark type holds ({e}); "
                f"pass {c.param}= with a Spark type that every one of them fits (a DDL string "
                f"or a pyspark DataType), or {c.param}=\"json\" to read them as JSON text") from None
        c.mode, c.schema = "convert", t.canonical()


def _columns_of(meta: dict, overrides: dict[str, Any]) -> list[_Column]:
    has_uk = meta["kind"] in (StateKind.MAP.value, StateKind.SORTED_MAP.value)
    cols = [_plan(meta, "namespace", overrides.get("namespace"), "namespace_type")]
    if not has_uk and overrides.get("user_key") is not None:
        raise ValueError(f"state '{meta['name']}' is a {meta['kind']} state, which has no user "
                         f"keys; drop user_key_type=")
    if has_uk:
        cols.append(_plan(meta, "user_key", overrides.get("user_key"), "user_key_type"))
    cols.append(_plan(meta, "value", overrides.get("value"), "value_type"))
    return cols


CATALOG_SCHEMA = (
    "operator string, version bigint, state string, kind string, key_columns array<string>, "
    "key_types array<string>, namespace_type string, user_key_type string, value_type string, "
    "ttl boolean, ttl_ms bigint, function string, internal boolean, "
    "schema_history array<string>, attributes string, "
    "first_version bigint, versions array<bigint>, partitions int, migrated_from string, "
    "damage string")


def catalog_frame(spark: SparkSession, checkpoint: str, version: int | None = None) -> DataFrame:
    """``stateengine.catalog.checkpoint_catalog`` as a DataFrame (``CATALOG_SCHEMA``): one row
    per state of every operator (an operator without states or that could not be read: one
    row with a null state), attributes and origin as JSON text."""
    from ..catalog import checkpoint_catalog

    rows = []
    for op in checkpoint_catalog(checkpoint, version=version):
        common = dict(operator=op.name, version=op.version, key_columns=op.key_names,
                      key_types=op.key_types, first_version=op.first_version,
                      versions=op.versions, partitions=op.num_partitions,
                      migrated_from=json.dumps(op.migrated_from) if op.migrated_from else None,
                      damage=op.damage)
        for st in op.states or [None]:
            row = dict.fromkeys(("state", "kind", "namespace_type", "user_key_type",
                                 "value_type", "ttl", "ttl_ms", "function", "internal",
                                 "schema_history", "attributes"))
            if st is not None:
                row.update(state=st.name, kind=st.kind, namespace_type=st.namespace_type,
                           user_key_type=st.user_key_type, value_type=st.value_type,
                           ttl=st.ttl, ttl_ms=st.ttl_ms, function=st.function,
                           internal=st.internal,
                           schema_history=[h["schema"] for h in st.schema_history],
                           attributes=json.dumps(st.attributes, sort_keys=True))
            row.update(common)
            rows.append(row)
    names = [f.split(" ")[0] for f in CATALOG_SCHEMA.split(", ")]
    return spark.createDataFrame([tuple(r[n] for n in names) for r in rows], CATALOG_SCHEMA)


def _key_names_of(storage: CheckpointStorage, operator_id: str, version: int,
                  n: int) -> list[str]:
    """The key column names the version's manifests recorded, else key / key_N."""
    from ..catalog import recorded_key_names

    catalog = VersionCatalog(storage, operator_id)
    for _, _, doc in catalog.manifests(version):
        names = recorded_key_names(doc, n, f"{catalog.describe()} version {version}")
        if names:
            return names
    return default_key_names(n)


def read_state(spark: SparkSession, checkpoint: str, state_name: str | None = None,
               operator_id: str = "default", version: int | None = None,
               max_parallelism: int = DEFAULT_MAX_PARALLELISM,
               key_names: Sequence[str] | str | None = None, value_type: Any = None,
               user_key_type: Any = None, namespace_type: Any = None,
               flatten: bool = False, allow_pickle: bool = False) -> DataFrame:
    """The entries of ``state_name`` at ``version`` (default: the latest) as a DataFrame
    with typed columns (see the module docstring).

    A struct value is one struct column ``value`` (as in Spark's state data source), and a
    struct user key one column ``user_key``; ``flatten=True`` gives one column per field
    instead (named by the fields; a name that clashes with another column is a ValueError),
    and a list state one row per element (``explode``) with the element's fields as columns.

    ``value_type``, ``user_key_type`` and ``namespace_type`` apply to states of the default
    serializer: a Spark type (DDL string such as ``"bigint"`` or ``"a long, b string"``, or a
    pyspark DataType) to read the values as (dicts with text keys fill structs by field name,
    tuples by position), or ``"json"`` for JSON text; without them the type is inferred.
    ``allow_pickle`` unpickles pickled values (only for checkpoints you trust).

    Key columns are named ``key`` (``key_0``, ``key_1``... for several), or ``key_names``;
    ``key_names="recorded"`` names them as the job that committed the version recorded them
    (the grouping columns of stateengine.spark's operators; ``key``... for versions written
    before names were recorded). Without ``state_name`` the result lists what the checkpoint
    holds instead, from its own metadata (``catalog_frame``: every operator and state)."""
    if state_name is None:
        return catalog_frame(spark, checkpoint, version)
    storage = CheckpointStorage(checkpoint)
    v, handles = _version_handles(storage, operator_id, version, max_parallelism)
    if not handles:
        raise UnknownStateError(f"operator '{operator_id}' in {storage.location} has no committed "
                                f"version yet")
    metas: dict[str, dict] = {}
    for h in handles:  # a partition may hold a state another never registered
        for m in h["states"]:
            metas.setdefault(m["name"], m)
    meta = metas.get(state_name)
    if meta is not None:
        meta = _agreed_meta(handles, meta, v)
    if meta is None:
        known = ", ".join(sorted(n for n in metas if not n.startswith("__"))) or "none"
        raise UnknownStateError(f"version {v} of operator '{operator_id}' has no state "
                                f"'{state_name}' (states: {known})")
    key_codecs = next((h["key_codecs"] for h in handles if h["key_codecs"]), None) or \
        [Codec.BIGINT]
    if isinstance(key_names, str) and key_names == RECORDED:
        names = _key_names_of(storage, operator_id, v, len(key_codecs))
    elif isinstance(key_names, str):
        raise ValueError(f"key_names is a list of column names or \"{RECORDED}\", got "
                         f"{key_names!r}")
    else:
        names = list(key_names) if key_names else default_key_names(len(key_codecs))
    kind = meta["kind"]
    columns = _columns_of(meta, {"namespace": namespace_type, "user_key": user_key_type,
                                 "value": value_type})
    _infer_columns(spark, handles, meta, columns, allow_pickle)
    key_cols = [_Column(n, c, "primitive", _SPARK_TYPES[Codec(c)]) for n, c in zip(names, key_codecs)]
    fields = [f"`{c.name}` {_spark_type(c, False)}" for c in key_cols]
    fields += [f"{c.name} {_spark_type(c, c.name == 'value' and kind == 'list')}" for c in columns]
    has_ttl = bool(meta.get("ttl"))
    if has_ttl:
        fields.append("last_access_ms array<bigint>" if kind == "list" else "last_access_ms bigint")
    schema = ", ".join(fields)
    meta_json = json.dumps(meta)
    plan = [(c.name, c.codec, c.mode, c.schema, c.param) for c in columns]
    key_plan = [(c.name, c.codec, c.mode, c.schema) for c in key_cols]
    multi_key = len(key_codecs) > 1

    def run(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa

        m = json.loads(meta_json)
        cols = [_Column(*p) for p in plan]
        decoders = [_Decoder(m, c, allow_pickle) for c in cols]
        key_types = [_arrow_of(_Column(*p), False) for p in key_plan]
        out_names = [p[0] for p in key_plan] + [c.name for c in cols]
        if has_ttl:
            out_names.append("last_access_ms")
            stamp_type = pa.list_(pa.int64()) if kind == "list" else pa.int64()
        for rb in batches:
            for handle_json in rb.column(0).to_pylist():
                for rows in _entries(handle_json, m, allow_pickle, has_ttl):
                    keys = [r[0] for r in rows]
                    key_columns_ = list(zip(*keys)) if multi_key else [keys]
                    arrays = [pa.array(list(kc), t) for kc, t in zip(key_columns_, key_types)]
                    for c, dec in zip(cols, decoders):
                        raws = [r[{"namespace": 1, "user_key": 2, "value": 3}[c.name]] for r in rows]
                        arrays.append(dec.arrow(raws, keys))
                    if has_ttl:
                        arrays.append(pa.array([r[4] for r in rows], stamp_type))
                    yield pa.RecordBatch.from_arrays(arrays, names=out_names)

    check_workers(spark)
    seeds = spark.createDataFrame([(json.dumps(h),) for h in handles], "handle string")
    df = seeds.repartition(len(handles)).mapInArrow(run, schema)
    return _flattened(df, meta, names, columns) if flatten else df


def _quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _flattened(df: DataFrame, meta: dict, key_names: list[str],
               columns: list[_Column]) -> DataFrame:
    """read_state(flatten=True): struct user keys and values as one column per field, list
    states one row per element. SQL text only, so Connect sessions take the same path."""
    if meta["kind"] == StateKind.LIST.value and "last_access_ms" in df.columns:
        # TTL: each element with its own last access (arrays_zip names the fields after them)
        rest = [_quoted(n) for n in df.columns if n not in ("value", "last_access_ms")]
        df = df.selectExpr(*rest, "inline(arrays_zip(value, last_access_ms))")
    elif meta["kind"] == StateKind.LIST.value:
        rest = [_quoted(n) for n in df.columns if n != "value"]
        df = df.selectExpr(*rest, "explode(value) AS value")
    exprs: list[str] = []
    seen: dict[str, str] = {}
    for name in df.columns:
        col = next((c for c in columns if c.name == name), None)
        t = col.element_type() if col is not None and col.name != "namespace" else None
        if isinstance(t, sparktypes.StructType):
            exprs.append(f"{_quoted(name)}.*")
            out = [(f, f"a field of the {name.replace('_', ' ')}") for f in t.names]
        else:
            exprs.append(_quoted(name))
            out = [(name, "a key column" if name in key_names else f"the {name} column")]
        for n, where in out:
            if n.lower() in seen:  # Spark resolves column names case-insensitively
                raise ValueError(
                    f"read_state(flatten=True) of state '{meta['name']}' would give two columns "
                    f"named '{n}' ({seen[n.lower()]} and {where}); read it with flatten=False "
                    f"and select the fields under other names (\"value.{n} AS value_{n}\"), or "
                    f"pass key_names=")
            seen[n.lower()] = where
    return df.selectExpr(*exprs)


def bootstrap_state(df: DataFrame, key: str | Sequence[str], descriptor: StateDescriptor,
                    value: str | Sequence[str] | None, checkpoint: str,
                    operator_id: str = "default", user_key: str | Sequence[str] | None = None,
                    namespace: str | None = None, version: int = 0,
                    num_partitions: int | None = None,
                    max_parallelism: int = DEFAULT_MAX_PARALLELISM,
                    allow_pickle: bool = False, batch_timestamp_ms: Any = None) -> int:
    """Writes one state from a DataFrame and commits it; returns the new version.

    Each row sets the state of its key: value states take the ``value`` column (the last row
    of a key wins), list states append it, map states put ``user_key`` -> ``value``, reducing and
    aggregating states add it. The state at ``version`` is loaded first (0: empty), so several
    states can be bootstrapped one after another, each call adding a version.

    For a typed state (a Spark schema in the descriptor) ``value`` names one column of that
    type (a struct column for a struct schema), or several columns that are the struct's
    fields (matched by name; ``None``: the columns named like the schema's fields); map user
    keys of a struct schema likewise (so ``read_state``'s output, flattened or not, bootstraps
    the same state again; flattened, a null value becomes a struct of null fields). An
    aggregating state's ``value`` is the one column of inputs its function adds. Typed states
    are written through the batch calls over Arrow columns, without a Python loop per row; a
    value that does not fit the schema fails the job naming the field, and nothing is committed.

    A descriptor with TTL needs ``batch_timestamp_ms``: the time its entries are written at
    (their last access).
    """
    if not allow_pickle:
        check_no_pickle(descriptor)
    clock = ttl_clock([descriptor], batch_timestamp_ms, version, None, None,
                      df.sparkSession.conf.get("spark.sql.session.timeZone"))
    cols = key_columns(key)
    kind = descriptor.kind
    if kind in (StateKind.MAP, StateKind.SORTED_MAP) and not user_key:
        raise ValueError(f"bootstrapping map state '{descriptor.name}' needs user_key=<column>")
    typed = descriptor.value_schema is not None or descriptor.user_key_schema is not None
    if kind is StateKind.AGGREGATING and not isinstance(value, str):
        raise ValueError(f"aggregating state '{descriptor.name}': value= names the one column "
                         f"of inputs the aggregate function adds (its accumulator schema is not "
                         f"what a row holds)")
    value_cols = [value] if not typed or kind is StateKind.AGGREGATING else \
        _typed_columns(descriptor.value_schema, value, "value")
    uk_cols = (_typed_columns(descriptor.user_key_schema, user_key, "user_key") if typed
               else [user_key]) if user_key else []
    if not typed and not isinstance(value, str):
        raise ValueError(f"state '{descriptor.name}' is not typed: value must name one column")
    extra = [c for c in (*value_cols, *uk_cols, namespace) if c]
    n = num_partitions or default_num_partitions(df.sparkSession, max_parallelism)
    cfg = TaskConfig(checkpoint=CheckpointStorage(checkpoint).uri, operator_id=operator_id,
                     num_partitions=n, max_parallelism=max_parallelism, key_cols=cols,
                     key_codecs=key_codecs_for(df, cols), descriptors=[descriptor],
                     batch_id=version, output_cols=["partition", "rows"],
                     allow_pickle=allow_pickle, ttl_time_ms=clock)
    if version:
        check_evolution(cfg.checkpoint, operator_id, max_parallelism, [descriptor],
                        cfg.key_codecs, version)
    needed = list(dict.fromkeys([*cols, *extra]))  # a column may serve twice (key and user key)
    routed = route(df.select(*needed), cols, n, max_parallelism)
    check_workers(df.sparkSession)
    if typed:
        _bootstrap_typed(routed, cfg, descriptor, cols, value_cols, uk_cols, namespace)
    else:
        _bootstrap_rows(routed, cfg, descriptor, cols, value, user_key, namespace)
    VersionCatalog(CheckpointStorage(checkpoint), operator_id).mark_committed(version + 1, n)
    return version + 1


def _typed_columns(schema: sparktypes.DataType | None, given: Any, what: str) -> list[str]:
    """The DataFrame columns that hold a typed value (or user key): one named column, the
    named fields, or (None) the schema's own field names."""
    if isinstance(given, str):
        return [given]
    if given is None:
        if not isinstance(schema, sparktypes.StructType):
            raise ValueError(f"{what}= must name the column holding the values")
        return schema.names
    return list(given)


def _bootstrap_rows(routed: DataFrame, cfg: TaskConfig, descriptor: StateDescriptor,
                    cols: list[str], value: str, user_key: str | None,
                    namespace: str | None) -> None:
    kind = descriptor.kind

    def body(task, batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        state = task.handles[descriptor.name]
        backend = task.backend
        written = 0
        for pdf in batches:
            pdf = partition_rows(pdf, task.partition_id)
            if not len(pdf):
                continue
            check_no_null_keys(pdf, cols)
            keys = list(zip(*[pdf[c].tolist() for c in cols])) if len(cols) > 1 else pdf[cols[0]].tolist()
            values = pdf[value].tolist()
            uks = pdf[user_key].tolist() if user_key else None
            nss = pdf[namespace].tolist() if namespace else None
            for i, k in enumerate(keys):
                backend.set_current_key(k)
                if nss is not None:
                    state.set_current_namespace(nss[i])
                if kind is StateKind.VALUE:
                    state.update(values[i])
                elif kind in (StateKind.MAP, StateKind.SORTED_MAP):
                    state.put(uks[i], values[i])
                else:
                    state.add(values[i])
            written += len(keys)
        yield pd.DataFrame({"partition": [task.partition_id], "rows": [written]})

    def run(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        yield from guarded(cfg, lambda task: body(task, batches))

    routed.mapInPandas(run, "partition int, rows long").collect()


def _bootstrap_typed(routed: DataFrame, cfg: TaskConfig, descriptor: StateDescriptor,
                     cols: list[str], value_cols: list[str], uk_cols: list[str],
                     namespace: str | None) -> None:
    """Typed states: every Arrow batch Spark hands over goes to the batch calls whole (per
    namespace), encoded in C++ over its Arrow buffers."""
    kind = descriptor.kind

    def columns_of(rb: Any, names: list[str], schema: Any) -> Any:
        if len(names) == 1 and not (isinstance(schema, sparktypes.StructType) and
                                    names == schema.names):
            return rb.column(rb.schema.get_field_index(names[0]))
        return {n: rb.column(rb.schema.get_field_index(n)) for n in names}

    def body(task, batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa
        import pyarrow.compute as pc

        state = task.handles[descriptor.name]
        written = 0
        for rb in batches:
            if not rb.num_rows:
                continue
            pids = rb.column(rb.schema.get_field_index(PID_COL))
            if not pc.all(pc.equal(pids, task.partition_id)).as_py():
                check_partition(pd.DataFrame({PID_COL: pids.to_numpy()}), task.partition_id)
            key_arrays = [rb.column(rb.schema.get_field_index(c)) for c in cols]
            if any(a.null_count for a in key_arrays):
                check_no_null_keys(pd.DataFrame({c: a.to_pandas() for c, a in zip(cols, key_arrays)}), cols)
            keys = key_arrays[0] if len(cols) == 1 else list(zip(*[a.to_pylist() for a in key_arrays]))
            groups = [(None, None)]
            if namespace:  # one batch call per namespace, rows in input order
                rows_of: dict[Any, list[int]] = {}
                for i, ns in enumerate(rb.column(rb.schema.get_field_index(namespace)).to_pylist()):
                    rows_of.setdefault(ns, []).append(i)
                groups = [(ns, pa.array(rows, pa.int64())) for ns, rows in rows_of.items()]
            for ns, take in groups:
                part = rb if take is None else rb.take(take)
                k = keys if take is None else (part.column(rb.schema.get_field_index(cols[0]))
                                               if len(cols) == 1 else [keys[i] for i in take.to_pylist()])
                state.set_current_namespace(ns)
                values = columns_of(part, value_cols, None if kind is StateKind.AGGREGATING
                                    else descriptor.value_schema)
                if kind is StateKind.VALUE:
                    state.put_many(k, values)
                elif kind is StateKind.LIST:
                    state.add_many(k, values)
                elif kind in (StateKind.MAP, StateKind.SORTED_MAP):
                    state.put_many(k, columns_of(part, uk_cols, descriptor.user_key_schema), values)
                else:
                    state.add_many(k, values)
            written += rb.num_rows
        yield pa.RecordBatch.from_pydict({"partition": pa.array([task.partition_id], pa.int32()),
                                          "rows": pa.array([written], pa.int64())})

    def run(batches: Iterator[Any]) -> Iterator[Any]:
        yield from guarded(cfg, lambda task: body(task, batches))

    routed.mapInArrow(run, "partition int, rows long").collect()
