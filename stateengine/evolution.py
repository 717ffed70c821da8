"""Schema evolution of typed state: which changes of a value schema are allowed, the schema
history a state's meta keeps, and the upgrade programs the C++ reader (csrc/row_evolution.h)
runs on entries written under older versions.

A typed state's value schema (value states, list elements, map values, reducing values,
aggregating accumulators) may change when the state is registered over restored state:

* allowed: add a field (nullable, or with a default from the descriptor's ``field_defaults``;
  old entries read null or that default); drop a field; reorder fields (matched by name);
  rename one through the descriptor's ``renamed_from`` (a bare rename is a drop plus an add,
  and is logged as such); widen tinyint -> smallint -> int -> bigint, any of them -> double,
  float -> double, decimal(p, s) -> decimal(p' >= p, s); NOT NULL -> nullable; the same
  inside nested structs, array elements and map values;
* refused, all at once in one ``SchemaEvolutionError`` naming every offending path as
  ``old -> new``: narrowing, any other type change, nullable -> NOT NULL, a NOT NULL field
  added without a default, a changed map key type (inside values) and a changed map user key
  schema.

The meta keeps ``value_schema`` (the current schema) and, once it changed, the attribute
``value_schema_history`` (see docs/ARCHITECTURE.md, "Schema evolution"): every version's
schema with the renames and defaults its step declared. Entries are never rewritten when the
schema changes; each carries the id of the version it was written in (a marker whose escape
bytes no encoding of version 0 begins with, so version 0's entries, and every entry written
before this module existed, carry none).
"""

from __future__ import annotations

import base64
import logging
import re
import struct
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence, Union

from . import sparktypes as st
from .errors import CorruptionError, SchemaEvolutionError, StateRegistrationError

log = logging.getLogger("stateengine.evolution")

HISTORY = "value_schema_history"

# Integer widenings (by Spark type name); float -> double and decimal precision go apart.
_INT_RANK = {"tinyint": 0, "smallint": 1, "int": 2, "bigint": 3}


# ---- paths ---------------------------------------------------------------------------------

Path = tuple  # of str: struct field names, "element" (array), "value" (map)


def path_text(path: Sequence[str]) -> str:
    """A field path as errors, histories and declarations write it: names joined by '.',
    backquoted where a name is not a plain identifier (``a.`b.c`.element``)."""
    return ".".join(p if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", p)
                    else "`" + p.replace("`", "``") + "`" for p in path) or "value"


def parse_path(text: Any, what: str) -> Path:
    """The segments of a dotted path (backquotes quote a name; ``` `` ``` is a backquote)."""
    if not isinstance(text, str) or not text:
        raise StateRegistrationError(f"{what}: a field path is a non-empty string like "
                                     f"'address.zip', got {text!r:.80}")
    out, i, n = [], 0, len(text)
    while i < n:
        if text[i] == "`":
            j, name = i + 1, []
            while True:
                k = text.find("`", j)
                if k < 0:
                    raise StateRegistrationError(f"{what}: unclosed backquote in path {text!r}")
                name.append(text[j:k])
                if text[k + 1:k + 2] == "`":
                    name.append("`")
                    j = k + 2
                    continue
                i = k + 1
                break
            out.append("".join(name))
        else:
            k = text.find(".", i)
            k = n if k < 0 else k
            out.append(text[i:k])
            i = k
        if i < n:
            if text[i] != "." or i + 1 == n:
                raise StateRegistrationError(f"{what}: malformed field path {text!r}")
            i += 1
    if any(not s for s in out):
        raise StateRegistrationError(f"{what}: empty name in field path {text!r}")
    return tuple(out)


def type_at_path(t: st.DataType, path: Path, what: str) -> st.StructField:
    """The struct field a path names inside t (arrays step through "element", maps through
    "value"); StateRegistrationError if it names none."""
    node: st.DataType = t
    found: st.StructField | None = None
    for seg in path:
        if isinstance(node, st.ArrayType) and seg == "element":
            node, found = node.element, None
        elif isinstance(node, st.MapType) and seg == "value":
            node, found = node.value, None
        elif isinstance(node, st.StructType) and seg in node.names:
            found = node.fields[node.names.index(seg)]
            node = found.type
        else:
            found = None
            break
    if found is None:
        raise StateRegistrationError(
            f"{what}: '{path_text(path)}' does not name a struct field of {t} (step into an "
            f"array with 'element' and into a map's values with 'value')")
    return found


# ---- declarations --------------------------------------------------------------------------

@dataclass(frozen=True)
class Declarations:
    """What a descriptor declares for evolving its value schema: ``renamed_from`` maps a field
    path of its schema to the field's name in the schema before; ``defaults`` maps a field
    path to the encoding of the value old entries read for it (added fields only)."""

    renamed_from: Mapping[Path, str] = field(default_factory=dict)
    defaults: Mapping[Path, bytes] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return not self.renamed_from and not self.defaults


NO_DECLARATIONS = Declarations()


def declarations(schema: st.DataType | None, renamed_from: Mapping[str, str] | None,
                 field_defaults: Mapping[str, Any] | None, state: str) -> Declarations:
    """Checks a descriptor's ``renamed_from`` / ``field_defaults`` against its value schema
    and encodes the defaults (StateRegistrationError naming what does not fit)."""
    if not renamed_from and not field_defaults:
        return NO_DECLARATIONS
    what = f"state '{state}'"
    if schema is None:
        raise StateRegistrationError(
            f"{what}: renamed_from and field_defaults apply to a typed value schema (a Spark "
            f"schema as value_type); this state has none")
    from . import _native

    renames: dict[Path, str] = {}
    for k, old in dict(renamed_from or {}).items():
        p = parse_path(k, f"{what} renamed_from")
        type_at_path(schema, p, f"{what} renamed_from")
        if not isinstance(old, str) or not old:
            raise StateRegistrationError(f"{what}: renamed_from['{k}'] must be the field's old "
                                         f"name (a non-empty str), got {old!r:.80}")
        renames[p] = old
    defaults: dict[Path, bytes] = {}
    for k, v in dict(field_defaults or {}).items():
        p = parse_path(k, f"{what} field_defaults")
        f = type_at_path(schema, p, f"{what} field_defaults")
        if v is None:
            if not f.nullable:
                raise StateRegistrationError(f"{what}: field_defaults['{k}'] is None but the "
                                             f"field is NOT NULL")
            continue  # a nullable field added without a default reads null anyway
        try:
            defaults[p] = _native.row_codec(f.type).encode_bytes(v)
        except Exception as e:  # SerializationError names what does not fit
            raise StateRegistrationError(f"{what}: field_defaults['{k}'] = {v!r:.80} does not "
                                         f"fit the field's type {f.type}: {e}") from None
    return Declarations(renames, defaults)


# ---- plans ---------------------------------------------------------------------------------
# A plan turns a value of an old type into the same value under a new type; it has the new
# type's shape. Copy: the bytes are the same (identical layout, or a change the new type's
# decoder reads as they are: decimal precision up, NOT NULL -> nullable).

@dataclass(frozen=True)
class Copy:
    pass


@dataclass(frozen=True)
class Widen:
    to: str  # an atomic type name: smallint, int, bigint, double


@dataclass(frozen=True)
class FromOld:
    index: int   # the old struct's field
    plan: "Plan"


@dataclass(frozen=True)
class Fill:
    default: bytes | None  # the encoding under the new field's type; None: null


@dataclass(frozen=True)
class StructPlan:
    fields: tuple  # per new field: FromOld | Fill


@dataclass(frozen=True)
class ArrayPlan:
    element: "Plan"


@dataclass(frozen=True)
class MapPlan:
    value: "Plan"


Plan = Union[Copy, Widen, StructPlan, ArrayPlan, MapPlan]
COPY = Copy()


@dataclass
class Report:
    """What a step from one schema to the next does (``describe``): the problems that refuse
    it, and the changes it makes, each naming field paths as text (``"items.element.price"``).

    ``problems``: ``(path, old, new, why)`` per offending path (empty: the change is
    allowed); ``added``: ``(path, type)``; ``dropped``: ``(path, old type)``; ``renamed``:
    ``(old path, new path)``; ``widened``: ``(path, old type, new type)``."""

    problems: list = field(default_factory=list)   # (path, old, new, why)
    added: list = field(default_factory=list)      # (path, new type)
    dropped: list = field(default_factory=list)    # (path, old type)
    renamed: list = field(default_factory=list)    # (old path, new path)
    widened: list = field(default_factory=list)    # (path, old type, new type)
    renamed_paths: set = field(default_factory=set)  # new Paths a declared rename matched
    added_paths: set = field(default_factory=set)    # new Paths of added fields


def _widening(old: st.DataType, new: st.DataType) -> Plan | None:
    if isinstance(old, st.DecimalType) and isinstance(new, st.DecimalType):
        return COPY if new.scale == old.scale and new.precision >= old.precision else None
    if not (isinstance(old, st.AtomicType) and isinstance(new, st.AtomicType)):
        return None
    if old.name in _INT_RANK and new.name in _INT_RANK:
        return Widen(new.name) if _INT_RANK[new.name] > _INT_RANK[old.name] else None
    if new.name == "double" and (old.name in _INT_RANK or old.name == "float"):
        return Widen("double")
    return None


def _nullable_text(t: st.DataType, nullable: bool) -> str:
    return f"{t}{'' if nullable else ' NOT NULL'}"


def _plan(old: st.DataType, new: st.DataType, path: Path, decl: Declarations,
          report: Report) -> Plan:
    if old == new:
        return COPY
    if isinstance(old, st.StructType) and isinstance(new, st.StructType):
        return _struct_plan(old, new, path, decl, report)
    if isinstance(old, st.ArrayType) and isinstance(new, st.ArrayType):
        sub = _plan(old.element, new.element, path + ("element",), decl, report)
        if old.contains_null and not new.contains_null:
            report.problems.append((path_text(path + ("element",)),
                                    _nullable_text(old.element, True),
                                    _nullable_text(new.element, False),
                                    "old entries may hold null elements"))
        return COPY if sub == COPY else ArrayPlan(sub)
    if isinstance(old, st.MapType) and isinstance(new, st.MapType):
        if old.key != new.key:
            report.problems.append((path_text(path + ("key",)), str(old.key), str(new.key),
                                    "map keys never change (equal keys must stay equal)"))
        sub = _plan(old.value, new.value, path + ("value",), decl, report)
        if old.value_contains_null and not new.value_contains_null:
            report.problems.append((path_text(path + ("value",)),
                                    _nullable_text(old.value, True),
                                    _nullable_text(new.value, False),
                                    "old entries may hold null values"))
        return COPY if sub == COPY else MapPlan(sub)
    w = _widening(old, new)
    if w is not None:
        report.widened.append((path_text(path), str(old), str(new)))
        return w
    why = "narrowing" if _widening(new, old) is not None else "type changed"
    report.problems.append((path_text(path), str(old), str(new), why))
    return COPY


def _struct_plan(old: st.StructType, new: st.StructType, path: Path, decl: Declarations,
                 report: Report) -> Plan:
    old_names = old.names
    used: dict[int, str] = {}
    sources: list[Any] = []
    for f in new.fields:
        fpath = path + (f.name,)
        j = old_names.index(f.name) if f.name in old_names else -1
        renamed = decl.renamed_from.get(fpath)
        if j < 0 and renamed is not None and renamed in old_names:
            j = old_names.index(renamed)
            report.renamed.append((path_text(path + (renamed,)), path_text(fpath)))
            report.renamed_paths.add(fpath)
        if j >= 0 and j in used:
            report.problems.append((path_text(fpath), path_text(path + (old_names[j],)),
                                    path_text(fpath),
                                    f"'{old_names[j]}' is already the source of "
                                    f"'{used[j]}'"))
            sources.append(Fill(None))
            continue
        if j >= 0:
            used[j] = f.name
            of = old.fields[j]
            sub = _plan(of.type, f.type, fpath, decl, report)
            if of.nullable and not f.nullable:
                report.problems.append((path_text(fpath), _nullable_text(of.type, True),
                                        _nullable_text(f.type, False),
                                        "old entries may hold null there"))
            sources.append(FromOld(j, sub))
            continue
        default = decl.defaults.get(fpath)
        if default is None and not f.nullable:
            report.problems.append((path_text(fpath), "(absent)", _nullable_text(f.type, False),
                                    "a NOT NULL field old entries lack; declare its value for "
                                    "them in field_defaults"))
        report.added.append((path_text(fpath), _nullable_text(f.type, f.nullable)))
        report.added_paths.add(fpath)
        sources.append(Fill(default))
    report.dropped.extend((path_text(path + (f.name,)), _nullable_text(f.type, f.nullable))
                          for j, f in enumerate(old.fields) if j not in used)
    if len(new.fields) == len(old.fields) and all(
            isinstance(s, FromOld) and s.index == i and s.plan == COPY
            for i, s in enumerate(sources)):
        return COPY  # same layout: only names (renames) or nullability relaxed
    return StructPlan(tuple(sources))


def describe(old: Any, new: Any, renamed_from: Mapping[str, str] | None = None,
             field_defaults: Mapping[str, Any] | None = None) -> Report:
    """What evolving values of schema ``old`` to schema ``new`` (DDL strings or pyspark
    types) does: ``problems`` (empty if it is allowed), fields added, dropped, renamed and
    widened."""
    o, n = st.to_schema(old), st.to_schema(new)
    report = Report()
    _plan(o, n, (), declarations(n, renamed_from, field_defaults, "(describe)"), report)
    return report


# ---- composing plans (an old version straight to the current one) -------------------------

def _convert(plan: Plan, v: Any, new: st.DataType) -> Any:
    """A decoded Python value under plan, whose result has type new (defaults that a later
    step changes are carried on this way)."""
    from . import _native

    if v is None or plan == COPY:
        return v
    if isinstance(plan, Widen):
        return float(v) if plan.to == "double" else int(v)
    if isinstance(plan, ArrayPlan):
        return [_convert(plan.element, x, new.element) for x in v]
    if isinstance(plan, MapPlan):
        return {k: _convert(plan.value, x, new.value) for k, x in v.items()}
    assert isinstance(plan, StructPlan)
    return tuple(_convert(s.plan, v[s.index], f.type) if isinstance(s, FromOld) else
                 (None if s.default is None else _native.row_codec(f.type).decode_bytes(s.default))
                 for s, f in zip(plan.fields, new.fields))


def _normal(plan: Plan, x: st.DataType) -> Plan:
    """COPY for a plan that moves nothing (every field from its own place, unchanged)."""
    if isinstance(plan, (ArrayPlan, MapPlan)):
        return COPY if (plan.element if isinstance(plan, ArrayPlan) else plan.value) == COPY \
            else plan
    if isinstance(plan, StructPlan) and isinstance(x, st.StructType) and \
            len(plan.fields) == len(x.fields) and all(
                isinstance(s, FromOld) and s.index == i and s.plan == COPY
                for i, s in enumerate(plan.fields)):
        return COPY
    return plan


def _compose(a: Plan, b: Plan, x: st.DataType, y: st.DataType, z: st.DataType) -> Plan:
    """a: X -> Y, b: Y -> Z as one plan X -> Z."""
    from . import _native

    if a == COPY:
        return b
    if b == COPY:
        return a
    if isinstance(a, Widen) and isinstance(b, Widen):
        return Widen(b.to)
    if isinstance(a, ArrayPlan) and isinstance(b, ArrayPlan):
        return _normal(ArrayPlan(_compose(a.element, b.element, x.element, y.element,
                                          z.element)), x)
    if isinstance(a, MapPlan) and isinstance(b, MapPlan):
        return _normal(MapPlan(_compose(a.value, b.value, x.value, y.value, z.value)), x)
    assert isinstance(a, StructPlan) and isinstance(b, StructPlan)
    out: list[Any] = []
    for zf, s in zip(z.fields, b.fields):
        if isinstance(s, Fill):
            out.append(s)
            continue
        yf = y.fields[s.index]
        src = a.fields[s.index]
        if isinstance(src, FromOld):
            xf = x.fields[src.index]
            out.append(FromOld(src.index, _compose(src.plan, s.plan, xf.type, yf.type, zf.type)))
        elif src.default is None or s.plan == COPY:
            out.append(src)
        else:  # a default written under Y's field type, carried on to Z's
            value = _native.row_codec(yf.type).decode_bytes(src.default)
            out.append(Fill(_native.row_codec(zf.type).encode_bytes(
                _convert(s.plan, value, zf.type))))
    return _normal(StructPlan(tuple(out)), x)


# ---- the history --------------------------------------------------------------------------

@dataclass(frozen=True)
class Version:
    schema: st.DataType
    declared: Declarations = NO_DECLARATIONS  # of the step from the previous version


class History:
    """The versions of a typed state's value schema, oldest first (index = version id)."""

    def __init__(self, versions: Sequence[Version]) -> None:
        self.versions = list(versions)
        self._plans: dict[int, Plan] = {}

    @property
    def current(self) -> st.DataType:
        return self.versions[-1].schema

    @property
    def evolved(self) -> bool:
        return len(self.versions) > 1

    @classmethod
    def of_meta(cls, meta: Mapping[str, Any], source: str = "state meta") -> "History | None":
        """The history of a meta (None for a state without a value schema); a malformed
        history is a CorruptionError (it sits behind the checkpoint's checksums)."""
        schema = meta.get("value_schema")
        if schema is None:
            if HISTORY in meta:
                raise CorruptionError(f"{source}: state '{meta.get('name')}' has a schema "
                                      f"history but no value schema")
            return None
        try:
            current = st.schema_from_canonical(schema, "value_schema")
            raw = meta.get(HISTORY)
            if raw is None:
                return cls([Version(current)])
            return cls._parse(raw, current)
        except (ValueError, StateRegistrationError) as e:
            raise CorruptionError(f"{source}: state '{meta.get('name')}' has a malformed "
                                  f"schema history ({e})") from None

    @classmethod
    def _parse(cls, raw: Any, current: st.DataType) -> "History":
        if not isinstance(raw, list) or len(raw) < 2:
            raise ValueError(f"{HISTORY} must list two or more versions")
        versions = []
        for i, item in enumerate(raw):
            if not isinstance(item, dict) or not isinstance(item.get("schema"), str):
                raise ValueError(f"version {i} is not an object with a schema")
            extra = set(item) - {"schema", "renamed_from", "defaults"}
            if extra or (i == 0 and len(item) != 1):
                raise ValueError(f"version {i} has unknown fields {sorted(extra)}")
            schema = st.schema_from_canonical(item["schema"], f"version {i} schema")
            renames = item.get("renamed_from", {})
            defaults = item.get("defaults", {})
            if not isinstance(renames, dict) or not isinstance(defaults, dict):
                raise ValueError(f"version {i}: renamed_from and defaults are objects")
            decl_r = {}
            for k, v in renames.items():
                p = parse_path(k, f"version {i}")
                type_at_path(schema, p, f"version {i}")
                if not isinstance(v, str) or not v:
                    raise ValueError(f"version {i}: renamed_from['{k}'] is not a name")
                decl_r[p] = v
            decl_d = {}
            for k, v in defaults.items():
                p = parse_path(k, f"version {i}")
                f = type_at_path(schema, p, f"version {i}")
                try:
                    blob = base64.b64decode(v, validate=True) if isinstance(v, str) else None
                except ValueError:
                    blob = None
                if blob is None or not _valid_encoding(f.type, blob):
                    raise ValueError(f"version {i}: the default of '{k}' is not an encoding of "
                                     f"{f.type}")
                decl_d[p] = blob
            versions.append(Version(schema, Declarations(decl_r, decl_d)))
        if versions[-1].schema.canonical() != current.canonical():
            raise ValueError("the last version's schema is not the value schema")
        history = cls(versions)
        if history.escape() is None:
            raise ValueError(f"version 0's schema {versions[0].schema} cannot carry version "
                             f"markers")
        for i in range(1, len(versions)):
            report = Report()
            _plan(versions[i - 1].schema, versions[i].schema, (), versions[i].declared, report)
            if report.problems:
                raise ValueError(f"the step to version {i} is not an allowed change "
                                 f"({_problem_lines(report.problems, '')})")
        return history

    def attribute(self) -> list[dict[str, Any]] | None:
        """``value_schema_history`` as the meta stores it (None: never evolved)."""
        if not self.evolved:
            return None
        out = []
        for v in self.versions:
            item: dict[str, Any] = {"schema": v.schema.canonical()}
            if v.declared.renamed_from:
                item["renamed_from"] = {path_text(p): n for p, n in v.declared.renamed_from.items()}
            if v.declared.defaults:
                item["defaults"] = {path_text(p): base64.b64encode(b).decode("ascii")
                                    for p, b in v.declared.defaults.items()}
            out.append(item)
        return out

    def escape(self) -> bytes | None:
        """The bytes no encoding of version 0's root begins with (None: no such bytes)."""
        return escape_of(self.versions[0].schema)

    def plan_from(self, version: int) -> Plan:
        """One plan from a version's values to the current schema's."""
        plan = self._plans.get(version)
        if plan is None:
            plan = COPY
            for i in range(version + 1, len(self.versions)):
                step = _plan(self.versions[i - 1].schema, self.versions[i].schema, (),
                             self.versions[i].declared, Report())
                plan = _compose(plan, step, self.versions[version].schema,
                                self.versions[i - 1].schema, self.versions[i].schema)
            self._plans[version] = plan
        return plan

    def write_id(self) -> int:
        """The version id written with current values: the oldest version whose values are
        laid out byte for byte like the current schema's (its marker is then shorter, or
        none at all for version 0)."""
        prog = st.program(self.current)
        for i, v in enumerate(self.versions):
            if st.program(v.schema) == prog and self.plan_from(i) == COPY:
                return i
        return len(self.versions) - 1

    def spec(self) -> bytes:
        """The history as csrc/row_evolution.h's RowVersions::Build reads it:
        ``u32 versions | u32 write id | u16 escape length | escape | per version: u32
        program length | program | u8 direct | u32 plan length | plan`` (direct: its values
        decode as the current schema's; the plan is then empty)."""
        esc = self.escape()
        assert esc is not None
        out = bytearray(struct.pack(">IIH", len(self.versions), self.write_id(), len(esc)))
        out += esc
        for i, v in enumerate(self.versions):
            prog = st.program(v.schema)
            plan = self.plan_from(i)
            body = b"" if plan == COPY else plan_program(plan, v.schema, self.current)
            out += struct.pack(">I", len(prog)) + prog
            out += struct.pack(">BI", plan == COPY, len(body)) + body
        return bytes(out)

    def __repr__(self) -> str:
        return f"History({[v.schema.canonical() for v in self.versions]})"


def _valid_encoding(t: st.DataType, blob: bytes) -> bool:
    from . import _native

    return _native.row_codec(t).length(blob) == len(blob)


def escape_of(t: st.DataType) -> bytes | None:
    """Version markers' escape for version 0's root type t (ARCHITECTURE.md's table)."""
    if isinstance(t, st.StructType):
        n = len(t.fields)
        k = (n + 7) // 8
        if n % 8 == 0 and all(f.nullable for f in t.fields):
            return b"\xff" * k + b"\xfe"
        return b"\xff" * k
    if isinstance(t, (st.ArrayType, st.MapType)):
        return b"\x80\x00"
    if isinstance(t, st.DecimalType):
        return b"\xff"
    return None


# ---- the plan as the C++ upgrade program ---------------------------------------------------

OP_COPY, OP_WIDEN, OP_STRUCT, OP_ARRAY, OP_MAP = 1, 2, 3, 4, 5
SRC_OLD, SRC_NULL, SRC_DEFAULT = 0, 1, 2


def plan_program(plan: Plan, old: st.DataType, new: st.DataType) -> bytes:
    """plan in preorder over the new type: ``u8 op`` then COPY: nothing; WIDEN: ``u8`` the
    new RowType; STRUCT: ``u32 fields`` and per field ``u8 source`` (0: ``u32`` old field
    index, then its plan; 1: null; 2: ``u32 length`` and the default's encoding); ARRAY /
    MAP: the plan of the elements / values."""
    out = bytearray()

    def emit(p: Plan, n: st.DataType) -> None:
        if p == COPY:
            out.append(OP_COPY)
        elif isinstance(p, Widen):
            out.extend((OP_WIDEN, st.NODE_IDS[p.to]))
        elif isinstance(p, ArrayPlan):
            out.append(OP_ARRAY)
            emit(p.element, n.element)
        elif isinstance(p, MapPlan):
            out.append(OP_MAP)
            emit(p.value, n.value)
        else:
            out.append(OP_STRUCT)
            out.extend(struct.pack(">I", len(p.fields)))
            for f, s in zip(n.fields, p.fields):
                if isinstance(s, FromOld):
                    out.extend(struct.pack(">BI", SRC_OLD, s.index))
                    emit(s.plan, f.type)
                elif s.default is None:
                    out.append(SRC_NULL)
                else:
                    out.extend(struct.pack(">BI", SRC_DEFAULT, len(s.default)) + s.default)

    emit(plan, new)
    return bytes(out)


# ---- evolving a meta ----------------------------------------------------------------------

def _problem_lines(problems: Sequence[tuple], prefix: str) -> str:
    return "; ".join(f"{prefix}{p}: {o} -> {n} ({why})" for p, o, n, why in problems)


def problems_of(name: str, have: Mapping[str, Any], want: Mapping[str, Any],
                declared: Declarations) -> tuple[list[tuple[str, str, str, str]], Report | None]:
    """(offending paths, the value schema step's report) of registering meta ``want`` over
    stored meta ``have`` of the same kind and codecs; paths are prefixed ``value.`` /
    ``user_key.``."""
    problems: list[tuple[str, str, str, str]] = []
    if have.get("user_key_schema") != want.get("user_key_schema"):
        ho, wo = have.get("user_key_schema"), want.get("user_key_schema")
        why = "map user keys never change (their bytes are the RocksDB key)"
        lines: list[tuple[str, str, str]] = []
        if ho and wo:
            r = Report()
            _plan(st.parse_ddl(ho), st.parse_ddl(wo), (), NO_DECLARATIONS, r)
            lines = [(p, o, n) for p, o, n, _ in r.problems] + [(p, "(absent)", t) for p, t in r.added] \
                + [(p, t, "(absent)") for p, t in r.dropped] + [(p, o, n) for p, o, n in r.widened]
        if not lines:  # a typed key became untyped (or back), or only nullability changed
            lines = [("value", str(ho), str(wo))]
        problems += [("user_key" if p == "value" else f"user_key.{p}", o, n, why)
                     for p, o, n in lines]
    hv, wv = have.get("value_schema"), want.get("value_schema")
    report = None
    if hv != wv:
        if hv is None or wv is None:
            problems.append(("value", str(hv), str(wv), "a typed state stays typed"))
        else:
            old, new = st.parse_ddl(hv), st.parse_ddl(wv)
            report = Report()
            plan = _plan(old, new, (), declared, report)
            problems += [(_prefixed(p), o, n, why) for p, o, n, why in report.problems]
            if plan != COPY and escape_of(History.of_meta(have).versions[0].schema) is None:
                problems.append(("value", str(old), str(new),
                                 f"a top-level {old} cannot change; declare the value as a "
                                 f"struct to let it evolve"))
    return problems, report


def _prefixed(p: str) -> str:
    return "value" if p == "value" else f"value.{p}"


def refusal(problems: Sequence[tuple[str, str, str, str]], states: Sequence[str] = ()) -> \
        SchemaEvolutionError:
    """One error listing every problem (each ``(where, old, new, why)``)."""
    lines = "\n".join(f"  {w}: {o} -> {n} ({why})" for w, o, n, why in problems)
    what = (f"state '{states[0]}'" if len(states) == 1 else
            f"states {', '.join(repr(s) for s in states)}" if states else "the state")
    return SchemaEvolutionError(
        f"{what} cannot evolve from the stored schema to the declared one; nothing was read or "
        f"written. Offending paths (old -> new):\n{lines}\nAllowed: adding nullable fields (or "
        f"NOT NULL ones with field_defaults), dropping, reordering, renaming with renamed_from, "
        f"widening int -> bigint -> double, float -> double, decimal precision up.", problems)


def evolve_meta(name: str, have: Mapping[str, Any], want: Mapping[str, Any],
                declared: Declarations) -> dict[str, Any]:
    """The meta a state registered with ``want`` has over stored ``have`` (same kind and
    codecs): ``have`` itself when the schemas agree, else ``want`` with the history extended
    by one version; SchemaEvolutionError if the change is not allowed."""
    if have.get("value_schema") == want.get("value_schema") and \
            have.get("user_key_schema") == want.get("user_key_schema"):
        out = dict(want)
        if HISTORY in have:
            out[HISTORY] = have[HISTORY]
        return out
    problems, report = problems_of(name, have, want, declared)
    if problems:
        raise refusal([(f"{name} {w}", o, n, why) for w, o, n, why in problems], [name])
    history = History.of_meta(have, f"state '{name}'")
    assert history is not None and report is not None
    new = History(history.versions + [Version(st.parse_ddl(want["value_schema"]),
                                              _relevant(declared, report))])
    _log_step(name, len(new.versions) - 1, report)
    out = dict(want)
    out[HISTORY] = new.attribute()
    return out


def _relevant(declared: Declarations, report: Report) -> Declarations:
    """The declarations the step used (so the history records what it did, nothing more)."""
    return Declarations(
        {p: v for p, v in declared.renamed_from.items() if p in report.renamed_paths},
        {p: b for p, b in declared.defaults.items() if p in report.added_paths})


def _log_step(name: str, version: int, report: Report) -> None:
    parts = []
    if report.added:
        parts.append(f"added {', '.join(p for p, _ in report.added)}")
    if report.dropped:
        parts.append(f"dropped {', '.join(p for p, _ in report.dropped)} (no longer read)")
    if report.renamed:
        parts.append("renamed " + ", ".join(f"{o} to {n}" for o, n in report.renamed))
    if report.widened:
        parts.append("widened " + ", ".join(f"{p} ({o} -> {n})" for p, o, n in report.widened))
    hint = ""
    if report.added and report.dropped:
        hint = (" If an added field is a dropped one renamed, declare renamed_from={'<new "
                "path>': '<old name>'} on the descriptor before any entry is written under the "
                "new schema, or the old values are lost.")
    log.warning("state '%s' evolves to schema version %d: %s.%s", name, version,
                "; ".join(parts) or "field names or nullability changed", hint)


def merge_histories(a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, Any] | None:
    """The meta of a state restored from two handles whose metas are a and b, when they differ
    only in schema history and one history is the start of the other (the longer wins: its
    entries may carry its later versions' markers); None if they differ otherwise."""
    def versions(m: Mapping[str, Any]) -> list[Any]:
        return m.get(HISTORY) or [{"schema": m.get("value_schema")}]

    rest = ("value_schema", HISTORY)
    if {k: v for k, v in a.items() if k not in rest} != \
            {k: v for k, v in b.items() if k not in rest}:
        return None
    va, vb = versions(a), versions(b)
    short, longer = (va, b) if len(va) <= len(vb) else (vb, a)
    if versions(longer)[:len(short)] != short:
        return None
    return dict(longer)


# ---- codecs --------------------------------------------------------------------------------

_CODECS: dict[str, Any] = {}


def value_codec(meta: Mapping[str, Any], source: str = "state meta",
                schema: st.DataType | None = None) -> Any:
    """The RowCodec that reads and writes the values of a typed state with this meta (None
    for other states): the shared codec of its schema (``schema``: the meta's value schema,
    already parsed), or, once the schema evolved, an EvolvedRowCodec of its history (one per
    history, shared: a history is parsed and checked once per process)."""
    from . import _native

    if meta.get("value_schema") is None:
        History.of_meta(meta, source)  # CorruptionError for a history without a schema
        return None
    if HISTORY not in meta:
        if schema is None:
            try:
                schema = st.schema_from_canonical(meta["value_schema"], "value_schema")
            except ValueError as e:
                raise CorruptionError(f"{source}: {e}") from None
        return _native.row_codec(schema)
    key = repr((meta["value_schema"], meta[HISTORY]))
    codec = _CODECS.get(key)
    if codec is None:
        history = History.of_meta(meta, source)
        assert history is not None
        codec = _native.EvolvedRowCodec(history.current, history.spec(), history.attribute())
        _CODECS[key] = codec
    return codec


def versions_spec(meta: Mapping[str, Any]) -> bytes:
    """History.spec of an evolved state's meta, else b"" (the TTL configuration's argument)."""
    history = History.of_meta(meta)
    return history.spec() if history is not None and history.evolved else b""


def _fixed_problems(have: Mapping[str, Any], want: Mapping[str, Any]) -> list[tuple]:
    """What a descriptor changes that no state may: its kind, serializers, functions, TTL."""
    from .serializers import codec_name

    out = []
    if have.get("kind") != want.get("kind"):
        out.append(("kind", str(have.get("kind")), str(want.get("kind")),
                    "a state's kind never changes"))
    for field_, where in (("value_codec", "value"), ("user_key_codec", "user_key")):
        if have.get(field_) != want.get(field_):
            out.append((where, codec_name(have[field_]), codec_name(want[field_]),
                        "a state's serializers never change (user keys are the RocksDB key)"))
    for field_ in ("merge", "native_op"):
        if have.get(field_) != want.get(field_):
            out.append((field_, str(have.get(field_)), str(want.get(field_)),
                        "a state's function kind never changes"))
    if bool(have.get("ttl")) != bool(want.get("ttl")):
        out.append(("ttl", str(bool(have.get("ttl"))), str(bool(want.get("ttl"))),
                    "TTL cannot be turned on or off for existing state"))
    return out


def check_descriptors(stored: Mapping[str, Mapping[str, Any]], descriptors: Sequence[Any],
                      extra: Sequence[tuple[str, str, str, str]] = (),
                      fixed: bool = True) -> None:
    """Raises one SchemaEvolutionError listing every offending path of every descriptor whose
    schemas cannot evolve from its stored meta, and the ``extra`` problems (e.g. the key
    types). ``fixed``: a changed kind, serializer, function or TTL setting is listed too;
    else such descriptors are left to registration, which refuses them by its own error."""
    problems = list(extra)
    names = []
    for d in descriptors:
        have = stored.get(d.name)
        if have is None:
            continue
        want = d.meta()
        found = _fixed_problems(have, want)
        if found and not fixed:
            continue
        if not found:
            found, _ = problems_of(d.name, have, want, d.evolution)
        if found:
            names.append(d.name)
            problems += [(f"{d.name} {w}", o, n, why) for w, o, n, why in found]
    if problems:
        raise refusal(problems, names)


def readable_history(meta: Mapping[str, Any]) -> list[dict[str, Any]] | None:
    """A state's schema history for people (``stateengine meta`` / ``dump``): per version its
    id, schema, and what its step did (added with defaults as JSON values, dropped, renamed,
    widened); None for a state that never evolved."""
    from . import _native

    history = History.of_meta(meta)
    if history is None or not history.evolved:
        return None
    out = []
    for i, v in enumerate(history.versions):
        item: dict[str, Any] = {"version": i, "schema": v.schema.canonical()}
        if i:
            r = Report()
            _plan(history.versions[i - 1].schema, v.schema, (), v.declared, r)
            defaults = {path_text(p): st.to_json_value(
                type_at_path(v.schema, p, "").type,
                _native.row_codec(type_at_path(v.schema, p, "").type).decode_bytes(b))
                for p, b in v.declared.defaults.items()}
            item["added"] = [{"field": p, "type": t, **({"default": defaults[p]}
                                                         if p in defaults else {})}
                             for p, t in r.added]
            item["dropped"] = [p for p, _ in r.dropped]
            item["renamed"] = [{"from": o, "to": n} for o, n in r.renamed]
            item["widened"] = [{"field": p, "from": o, "to": n} for p, o, n in r.widened]
        out.append(item)
    return out
