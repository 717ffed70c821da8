"""Property test of schema evolution: random typed schemas evolve through random chains of
allowed changes (add, drop, reorder, rename, widen, relax NOT NULL; at any depth inside
structs, array elements and map values) while value, list and map states are written, taken
through full snapshots or incremental checkpoints and restored at another parallelism. A
plain Python model applies each change to every value it holds, eagerly, by the change's own
rule (no code of stateengine.evolution); the engine upgrades lazily, and every read, scalar
and batch, must equal the model. Before some steps a refused change (narrowing, a changed
type, NOT NULL without a default, nullable -> NOT NULL, a changed map key) is tried first: it
must raise one SchemaEvolutionError naming its path and leave every checkpoint file as it was.

The suite runs 12 examples; a longer campaign:
``STATEENGINE_EVOLUTION_EXAMPLES=500 python -m pytest tests/test_evolution_model.py``."""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from decimal import Decimal

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hs

from stateengine import (KeyedStateBackend, KeyGroupRange, ListStateDescriptor,
                         MapStateDescriptor, ValueStateDescriptor, assign_key_group)
from stateengine import sparktypes as T
from stateengine.errors import SchemaEvolutionError

EXAMPLES = int(os.environ.get("STATEENGINE_EVOLUTION_EXAMPLES", "12"))
MAX_P = 16
KEYS = list(range(12))
NAMES = [f"f{i}" for i in range(12)]
SCALARS = ["int", "bigint", "float", "double", "string", "decimal"]
WIDER = {"int": ["bigint", "double"], "bigint": ["double"], "float": ["double"]}


# ---- random types and values ----------------------------------------------------------------

def scalar(draw, name: str) -> T.DataType:
    if name == "decimal":
        return T.DecimalType(draw(hs.integers(4, 12)), 2)
    return T.AtomicType(name)


def data_type(draw, depth: int) -> T.DataType:
    kinds = ["scalar"] * 4 + (["struct", "array", "map"] if depth < 3 else [])
    kind = draw(hs.sampled_from(kinds))
    if kind == "scalar":
        return scalar(draw, draw(hs.sampled_from(SCALARS)))
    if kind == "array":
        return T.ArrayType(data_type(draw, depth + 1), True)
    if kind == "map":
        return T.MapType(T.STRING, data_type(draw, depth + 1), True)
    return struct(draw, depth + 1)


def struct(draw, depth: int) -> T.StructType:
    names = draw(hs.lists(hs.sampled_from(NAMES), min_size=1, max_size=4, unique=True))
    return T.StructType(tuple(T.StructField(n, data_type(draw, depth),
                                            draw(hs.integers(0, 3)) > 0) for n in names))


def value(draw, t: T.DataType, nullable: bool = True):
    if nullable and draw(hs.integers(0, 5)) == 0:
        return None
    if isinstance(t, T.StructType):
        return tuple(value(draw, f.type, f.nullable) for f in t.fields)
    if isinstance(t, T.ArrayType):
        return [value(draw, t.element, t.contains_null) for _ in range(draw(hs.integers(0, 3)))]
    if isinstance(t, T.MapType):
        ks = draw(hs.lists(hs.sampled_from("abcd"), max_size=3, unique=True))
        return {k: value(draw, t.value, t.value_contains_null) for k in ks}
    if isinstance(t, T.DecimalType):
        return Decimal(draw(hs.integers(-10 ** (t.precision - 1), 10 ** (t.precision - 1)))) \
            / 100
    name = t.name
    if name == "int":
        return draw(hs.integers(-2 ** 31, 2 ** 31 - 1))
    if name == "bigint":  # exact in a double, so bigint -> double widens without rounding
        return draw(hs.integers(-2 ** 53, 2 ** 53))
    if name == "float":  # exact in a float32
        return draw(hs.integers(-2 ** 20, 2 ** 20)) / 4
    if name == "double":
        return draw(hs.floats(allow_nan=False, allow_infinity=False, width=64))
    return draw(hs.text(max_size=4))


# ---- changes: each with its own rule for the values the model holds --------------------------
# A location is a path of steps from the root: ("f", i) a struct field, ("e",) an array's
# element, ("v",) a map's value. A change rewrites the type at a struct and maps every value.

def structs_in(t: T.DataType, path=()):
    """(path, struct type) of every struct in t, the root first."""
    if isinstance(t, T.StructType):
        yield path, t
        for i, f in enumerate(t.fields):
            yield from structs_in(f.type, path + (("f", i),))
    elif isinstance(t, T.ArrayType):
        yield from structs_in(t.element, path + (("e",),))
    elif isinstance(t, T.MapType):
        yield from structs_in(t.value, path + (("v",),))


def replace(t: T.DataType, path, fn):
    """t with the node at path replaced by fn(node)."""
    if not path:
        return fn(t)
    step, rest = path[0], path[1:]
    if step[0] == "f":
        fields = list(t.fields)
        f = fields[step[1]]
        fields[step[1]] = T.StructField(f.name, replace(f.type, rest, fn), f.nullable)
        return T.StructType(tuple(fields))
    if step[0] == "e":
        return T.ArrayType(replace(t.element, rest, fn), t.contains_null)
    return T.MapType(t.key, replace(t.value, rest, fn), t.value_contains_null)


def apply(v, path, fn):
    """The value v with fn applied at every value the node at path holds."""
    if v is None:
        return None
    if not path:
        return fn(v)
    step, rest = path[0], path[1:]
    if step[0] == "f":
        out = list(v)
        out[step[1]] = apply(v[step[1]], rest, fn)
        return tuple(out)
    if step[0] == "e":
        return [apply(x, rest, fn) for x in v]
    return {k: apply(x, rest, fn) for k, x in v.items()}


def path_text(t: T.DataType, path) -> list[str]:
    out, node = [], t
    for step in path:
        if step[0] == "f":
            out.append(node.fields[step[1]].name)
            node = node.fields[step[1]].type
        elif step[0] == "e":
            out.append("element")
            node = node.element
        else:
            out.append("value")
            node = node.value
    return out


def leaves(t: T.DataType, path=()):
    if isinstance(t, T.StructType):
        for i, f in enumerate(t.fields):
            yield from leaves(f.type, path + (("f", i),))
    elif isinstance(t, T.ArrayType):
        yield from leaves(t.element, path + (("e",),))
    elif isinstance(t, T.MapType):
        yield from leaves(t.value, path + (("v",),))
    else:
        yield path, t


def allowed_change(draw, t: T.StructType):
    """(new type, renamed_from, field_defaults, model rule) of one random allowed change."""
    spots = list(structs_in(t))
    path, s = draw(hs.sampled_from(spots))
    where = path_text(t, path)
    kinds = ["add", "reorder", "rename", "widen", "relax"] + (["drop"] if len(s.fields) > 1 else [])
    kind = draw(hs.sampled_from(kinds))
    free = [n for n in NAMES if n not in s.names]
    fields = list(s.fields)
    if kind == "add" and free:
        ft = data_type(draw, len(path) + 2)
        nullable = draw(hs.booleans())
        default = None if nullable else value(draw, ft, False)
        pos = draw(hs.integers(0, len(fields)))
        name = draw(hs.sampled_from(free))
        fields.insert(pos, T.StructField(name, ft, nullable))
        new = replace(t, path, lambda _: T.StructType(tuple(fields)))
        defaults = {} if nullable else {".".join(where + [name]): default}
        return new, {}, defaults, lambda v: apply(v, path, lambda x: x[:pos] + (default,) + x[pos:])
    if kind == "drop":
        i = draw(hs.integers(0, len(fields) - 1))
        del fields[i]
        return (replace(t, path, lambda _: T.StructType(tuple(fields))), {}, {},
                lambda v: apply(v, path, lambda x: x[:i] + x[i + 1:]))
    if kind == "reorder":
        perm = draw(hs.permutations(range(len(fields))))
        new = replace(t, path, lambda _: T.StructType(tuple(fields[j] for j in perm)))
        return new, {}, {}, lambda v: apply(v, path, lambda x: tuple(x[j] for j in perm))
    if kind == "rename" and free:
        i = draw(hs.integers(0, len(fields) - 1))
        old, name = fields[i].name, draw(hs.sampled_from(free))
        fields[i] = T.StructField(name, fields[i].type, fields[i].nullable)
        new = replace(t, path, lambda _: T.StructType(tuple(fields)))
        return new, {".".join(where + [name]): old}, {}, lambda v: v
    if kind == "widen":
        spots = [(p, x) for p, x in leaves(t) if isinstance(x, T.DecimalType) or
                 (isinstance(x, T.AtomicType) and x.name in WIDER)]
        if spots:
            p, x = draw(hs.sampled_from(spots))
            if isinstance(x, T.DecimalType):
                to = T.DecimalType(min(38, x.precision + draw(hs.integers(1, 5))), x.scale)
                return replace(t, p, lambda _: to), {}, {}, lambda v: v
            to = T.AtomicType(draw(hs.sampled_from(WIDER[x.name])))
            conv = float if to.name == "double" else int
            return replace(t, p, lambda _: to), {}, {}, lambda v: apply(v, p, conv)
    if kind == "relax":
        strict = [i for i, f in enumerate(fields) if not f.nullable]
        if strict:
            i = draw(hs.sampled_from(strict))
            fields[i] = T.StructField(fields[i].name, fields[i].type, True)
            return replace(t, path, lambda _: T.StructType(tuple(fields))), {}, {}, lambda v: v
    return t, {}, {}, lambda v: v  # nothing to change there: the schema stays


def refused_change(draw, t: T.StructType):
    """(new type, path text) of one random change that must be refused, or None."""
    options = []
    for p, x in leaves(t):
        if isinstance(x, T.AtomicType) and x.name in ("bigint", "double"):
            options.append((replace(t, p, lambda _: T.AtomicType("int")), p))  # narrowing
        if isinstance(x, T.AtomicType) and x.name == "string":
            options.append((replace(t, p, lambda _: T.AtomicType("bigint")), p))  # changed
    for p, s in structs_in(t):
        free = [n for n in NAMES if n not in s.names]
        if free:
            f = T.StructField(free[0], T.AtomicType("int"), False)  # NOT NULL, no default
            options.append((replace(t, p, lambda x: T.StructType(x.fields + (f,))),
                            p + (("f", len(s.fields)),)))
        for i, f in enumerate(s.fields):
            if f.nullable:
                def tighten(x, i=i):
                    fs = list(x.fields)
                    fs[i] = T.StructField(fs[i].name, fs[i].type, False)
                    return T.StructType(tuple(fs))
                options.append((replace(t, p, tighten), p + (("f", i),)))
    if not options:
        return None
    new, p = draw(hs.sampled_from(options))
    return new, ".".join(["value", *path_text(new, p)])


# ---- the engine side ----------------------------------------------------------------------

def descriptors(t: T.DataType, renames=None, defaults=None):
    kw = {"renamed_from": renames or {}, "field_defaults": defaults or {}}
    ddl = t.canonical()
    return [ValueStateDescriptor("v", ddl, **kw), ListStateDescriptor("l", ddl, **kw),
            MapStateDescriptor("m", "string", ddl, **kw)]


def digest(root: str) -> dict[str, str]:
    """Every checkpoint file under root (snapshots and incremental checkpoints)."""
    out = {}
    for d, _, files in os.walk(root):
        if "/snap-" not in d + "/" and "/inc-" not in d + "/":
            continue
        for f in files:
            with open(os.path.join(d, f), "rb") as fh:
                out[os.path.join(d, f)] = hashlib.sha256(fh.read()).hexdigest()
    return out


def as_arrow_py(t: T.DataType, v):
    """A model value as pyarrow's to_pylist gives it back."""
    if v is None:
        return None
    if isinstance(t, T.StructType):
        return {f.name: as_arrow_py(f.type, x) for f, x in zip(t.fields, v)}
    if isinstance(t, T.ArrayType):
        return [as_arrow_py(t.element, x) for x in v]
    if isinstance(t, T.MapType):
        return [(k, as_arrow_py(t.value, x)) for k, x in v.items()]
    return v


class World:
    """The engine's backends at one parallelism and the model."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.n = 0
        self.backends: list[KeyedStateBackend] = []
        self.values: dict = {}
        self.lists: dict = {}
        self.maps: dict = {}

    def owner(self, k) -> KeyedStateBackend:
        kg = assign_key_group(k, MAX_P)
        return next(b for b in self.backends if b.key_group_range.contains(kg))

    def path(self, what: str) -> str:
        self.n += 1
        return os.path.join(self.root, f"{what}-{self.n}")

    def open(self, p: int, handles, ds):
        for b in self.backends:
            b.dispose()
        self.backends = []
        for i in range(p):
            r = KeyGroupRange.for_operator(i, p, MAX_P)
            if handles:
                b = KeyedStateBackend.restore(self.path("b"), handles, key_group_range=r,
                                              key_type=int, descriptors=ds)
            else:
                b = KeyedStateBackend(self.path("b"), MAX_P, r, key_type=int)
            for d in ds:
                b.get_state(d)
            self.backends.append(b)

    def handles(self, full: bool):
        out = []
        for i, b in enumerate(self.backends):
            if full:
                out.append(b.snapshot(self.path("snap"), "s").result())
            else:
                out.append(b.checkpoint(self.n, self.path("inc")).result())
        return out

    def write(self, draw, t, ds):
        for _ in range(draw(hs.integers(1, 8))):
            k = draw(hs.sampled_from(KEYS))
            b = self.owner(k)
            b.set_current_key(k)
            v, l, m = (b.get_state(d) for d in ds)
            op = draw(hs.sampled_from(["put", "add", "mput", "del"]))
            if op == "put":
                x = value(draw, t, False)
                v.update(x)
                self.values[k] = x
            elif op == "add":
                x = value(draw, t, False)
                l.add(x)
                self.lists.setdefault(k, []).append(x)
            elif op == "mput":
                uk, x = draw(hs.sampled_from("xyz")), value(draw, t)
                m.put(uk, x)
                self.maps.setdefault(k, {})[uk] = x
            else:
                v.update(None)
                self.values.pop(k, None)
        # the batch calls write the same bytes; one batch per backend
        if draw(hs.booleans()):
            for b in self.backends:
                ks = [k for k in KEYS if b.key_group_range.contains(assign_key_group(k, MAX_P))]
                if not ks:
                    continue
                xs = [value(draw, t, False) for _ in ks]
                b.get_state(ds[0]).put_many(ks, xs)
                self.values.update(zip(ks, xs))

    def check(self, t, ds):
        arrow_t = T.to_arrow(t)
        for b in self.backends:
            ks = [k for k in KEYS if b.key_group_range.contains(assign_key_group(k, MAX_P))]
            v, l, m = (b.get_state(d) for d in ds)
            for k in ks:
                b.set_current_key(k)
                assert v.value() == self.values.get(k), k
                assert l.get() == self.lists.get(k, []), k
                assert dict(m.items()) == self.maps.get(k, {}), k
            if ks:
                got, found = v.get_many(ks)
                assert got.to_pylist() == [as_arrow_py(t, self.values.get(k)) for k in ks]
                assert found.tolist() == [k in self.values for k in ks]
                assert l.get_many(ks).to_pylist() == [
                    [as_arrow_py(t, x) for x in self.lists.get(k, [])] for k in ks]
                assert got.type == arrow_t


@settings(max_examples=EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(hs.data())
def test_random_schemas_evolve_through_random_allowed_chains(data):
    draw = data.draw
    root = tempfile.mkdtemp(prefix="se-evolve-")
    world = World(root)
    try:
        t = struct(draw, 1)
        ds = descriptors(t)
        world.open(draw(hs.integers(1, 3)), None, ds)
        for _ in range(draw(hs.integers(1, 4))):
            world.write(draw, t, ds)
            world.check(t, ds)
            handles = world.handles(draw(hs.booleans()))
            if draw(hs.integers(0, 2)) == 0:
                refused = refused_change(draw, t)
                if refused is not None:
                    bad, where = refused
                    before = digest(root)
                    try:
                        World(tempfile.mkdtemp(dir=root)).open(1, handles, descriptors(bad))
                    except SchemaEvolutionError as e:
                        assert any(where in w for w, *_ in e.problems), (where, e.problems)
                    else:
                        raise AssertionError(f"{t} -> {bad} was not refused")
                    assert digest(root) == before
            new, renames, defaults, rule = allowed_change(draw, t)
            world.values = {k: rule(x) for k, x in world.values.items()}
            world.lists = {k: [rule(x) for x in xs] for k, xs in world.lists.items()}
            world.maps = {k: {u: rule(x) for u, x in m.items()} for k, m in world.maps.items()}
            t, ds = new, descriptors(new, renames, defaults)
            world.open(draw(hs.integers(1, 3)), handles, ds)
            world.check(t, ds)
        world.write(draw, t, ds)
        world.check(t, ds)
    finally:
        for b in world.backends:
            b.dispose()
        shutil.rmtree(root, ignore_errors=True)
