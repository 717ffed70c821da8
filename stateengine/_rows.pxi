# Typed (Spark schema) values: the struct codec of csrc/row_codec.h. A RowCodec is one schema
# compiled once into the C++ node table; the scalar encoder and decoder below walk that table
# (no dict lookups per value), and the batch paths hand whole Arrow columns to
# csrc/arrow_rows.h through the Arrow C Data Interface.

from cpython.tuple cimport PyTuple_New, PyTuple_SET_ITEM
from cpython.ref cimport Py_INCREF
from libc.stdint cimport uintptr_t, int8_t, int16_t, uint16_t
import datetime as _dt
import decimal as _decimal

from stateengine import sparktypes as _sparktypes

cdef object _Decimal = _decimal.Decimal
cdef object _DEC_CTX = _decimal.Context(prec=100)  # exact for every unscaled 38-digit value
cdef object _date = _dt.date
cdef object _datetime = _dt.datetime
cdef object _timedelta = _dt.timedelta
cdef object _UTC = _dt.timezone.utc
cdef object _EPOCH_UTC = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)
cdef object _EPOCH_NAIVE = _dt.datetime(1970, 1, 1)
cdef object _date_fromordinal = _dt.date.fromordinal
cdef int64_t _EPOCH_ORDINAL = 719163  # date(1970, 1, 1).toordinal()
cdef object _Mapping = __import__("collections.abc").abc.Mapping

_TYPE_NAMES = {kRowBigint: "bigint", kRowInt: "int", kRowSmallint: "smallint",
               kRowTinyint: "tinyint", kRowDouble: "double", kRowFloat: "float",
               kRowString: "string", kRowBinary: "binary", kRowBoolean: "boolean",
               kRowDate: "date", kRowTimestamp: "timestamp", kRowTimestampNtz: "timestamp_ntz",
               kRowArray: "array", kRowMap: "map", kRowStruct: "struct"}


class _FieldError(Exception):
    """Raised inside the scalar encoder: (depth of the path that failed, message)."""


cdef class RowCodec:
    """One Spark schema compiled for the struct codec: encodes and decodes its values as
    Python objects (tuples for structs, lists for arrays, dicts for maps, Decimal, date,
    datetime) and converts Arrow columns. Made once per schema (``row_codec``)."""
    cdef CRowSchema schema
    cdef const CRowNode* nodes
    cdef const uint32_t* kids
    cdef readonly object type
    cdef readonly str canonical
    cdef list _names      # per node: the field names of a struct, else None
    cdef list _tnames     # per node: its type as error messages name it
    cdef object _arrow
    # An evolved state's schema versions (EvolvedRowCodec; NULL otherwise) and the marker
    # written before each value, for the batch calls, which pass both to C++.
    cdef const CRowVersions* versions
    cdef string prefix

    def __init__(self, type):
        cdef bytes prog = _sparktypes.program(type)
        if not self.schema.Compile(PyBytes_AS_STRING(prog), <size_t>PyBytes_GET_SIZE(prog)):
            raise _sparktypes.SchemaError(f"schema {type} does not compile (nested too deep?)")
        self.nodes = self.schema.nodes()
        self.kids = self.schema.children()
        self.type = type
        self.canonical = type.canonical()
        self._names = []
        self._tnames = []
        self._collect(type)

    def _collect(self, t):
        """Per-node names in the program's preorder."""
        self._tnames.append(t.canonical() if not isinstance(t, _sparktypes.StructType)
                            else "struct")
        if isinstance(t, _sparktypes.StructType):
            self._names.append(tuple(t.names))
            for f in t.fields:
                self._collect(f.type)
        else:
            self._names.append(None)
            if isinstance(t, _sparktypes.ArrayType):
                self._collect(t.element)
            elif isinstance(t, _sparktypes.MapType):
                self._collect(t.key)
                self._collect(t.value)

    @property
    def arrow_type(self):
        """The Arrow type of this schema's values (sparktypes.to_arrow)."""
        if self._arrow is None:
            self._arrow = _sparktypes.to_arrow(self.type)
        return self._arrow

    def __repr__(self):
        return f"RowCodec({self.canonical})"

    # ---- scalar encoding ---------------------------------------------------------------

    cdef int encode(self, object v, string* out) except -1:
        """Appends the encoding of v; SerializationError naming the field that does not fit."""
        cdef int64_t path[40]
        try:
            return _row_encode(self, 0, v, out, path, 0)
        except _FieldError as e:
            depth, message = e.args
            if depth == 0:
                raise _SerializationError(f"value of schema {self.canonical}: {message}") from None
            where = _sparktypes.path_name(self.type, [path[i] for i in range(<int>depth)])
            raise _SerializationError(f"field '{where}': {message}") from None

    def encode_bytes(self, value) -> bytes:
        cdef string out
        self.encode(value, &out)
        return PyBytes_FromStringAndSize(out.data(), <Py_ssize_t>out.size())

    # ---- scalar decoding ---------------------------------------------------------------

    cdef object decode(self, const char* p, size_t n, size_t* used):
        """The value at p; used gets its length. The bytes are validated by the C++ walker
        first (every length, count, boolean, decimal and UTF-8 checked), so the decoder below
        only boxes."""
        cdef size_t pos = 0
        if not self.schema.Length(0, p, n, used):
            raise _CorruptionError(
                f"stored bytes ({n} bytes) are not a valid encoding of schema {self.canonical}; "
                f"the state was written with another schema or the data is corrupted")
        return _row_decode(self, 0, p, &pos, False)

    cdef object decode_whole(self, const char* p, size_t n):
        cdef size_t used = 0
        r = self.decode(p, n, &used)
        if used != n:
            raise _CorruptionError(
                f"stored bytes ({n} bytes) hold more than one value of schema {self.canonical}; "
                f"the data is corrupted")
        return r

    def decode_bytes(self, bytes data):
        return self.decode_whole(PyBytes_AS_STRING(data), <size_t>PyBytes_GET_SIZE(data))

    cdef cbool element_length(self, const char* p, size_t n, size_t* length):
        """Length of the stored value at p (a list element of a state with TTL)."""
        return self.schema.Length(0, p, n, length)

    def length(self, bytes data) -> int:
        """Length of the value data starts with (the codec's ElementLength), -1 if malformed."""
        cdef size_t n = 0
        if not self.element_length(PyBytes_AS_STRING(data), <size_t>PyBytes_GET_SIZE(data), &n):
            return -1
        return n


cdef class EvolvedRowCodec(RowCodec):
    """The values of a typed state whose schema evolved (stateengine/evolution.py): encodes
    the current schema after its version marker, and decodes values of every version of the
    history, upgrading old ones in C++ first (csrc/row_evolution.h). One per history."""
    cdef unique_ptr[CRowVersions] _owned
    cdef string _scratch
    cdef readonly object history

    def __init__(self, type, bytes spec, history):
        RowCodec.__init__(self, type)
        self._owned.reset(new CRowVersions())
        if not self._owned.get().Build(PyBytes_AS_STRING(spec), <size_t>PyBytes_GET_SIZE(spec)):
            raise _CorruptionError(f"the schema history {history!r:.200} does not compile")
        self.versions = self._owned.get()
        self.prefix = self.versions.write_prefix()
        self.history = history

    def __repr__(self):
        return f"EvolvedRowCodec({self.canonical}, {self.versions.size()} versions)"

    cdef int encode(self, object v, string* out) except -1:
        out.append(self.prefix)
        return RowCodec.encode(self, v, out)

    cdef object decode(self, const char* p, size_t n, size_t* used):
        cdef size_t marker = self.prefix.size(), old_len = 0, got = 0
        cdef cbool upgraded = False
        if marker and n > marker and memcmp(p, self.prefix.data(), marker) == 0:
            # written now: the current schema after the marker (the common case first)
            r = RowCodec.decode(self, p + marker, n - marker, used)
            used[0] += marker
            return r
        if not self.versions.Read(p, n, False, &self._scratch, &marker, &upgraded, &old_len):
            raise _CorruptionError(
                f"stored bytes ({n} bytes) are not a valid encoding of any version of schema "
                f"history ending in {self.canonical}; the data is corrupted")
        if not upgraded:
            r = RowCodec.decode(self, p + marker, n - marker, used)
            used[0] += marker
            return r
        r = RowCodec.decode(self, self._scratch.data(), self._scratch.size(), &got)
        if got != self._scratch.size():
            raise _CorruptionError("an upgraded value does not decode whole")
        used[0] = marker + old_len
        return r

    cdef cbool element_length(self, const char* p, size_t n, size_t* length):
        return self.versions.Length(p, n, length)

    def stored_version(self, bytes data, str layout="value"):
        """The schema version a stored value was written in (layout "value"; "map": after
        the null flag, None for a null value) or of each element ("list")."""
        cdef const char* p = PyBytes_AS_STRING(data)
        cdef size_t n = <size_t>PyBytes_GET_SIZE(data), pos = 0, length = 0, marker = 0
        cdef uint32_t version = 0
        if layout == "map":
            if n == 0 or p[0] == 1:
                return None
            p += 1
            n -= 1
        if layout != "list":
            if not self.versions.Classify(p, n, &version, &marker):
                raise _CorruptionError("a stored value's version marker names no schema version")
            return version
        out = []
        while pos < n:
            if not self.versions.Classify(p + pos, n - pos, &version, &marker) or \
                    not self.versions.Length(p + pos, n - pos, &length):
                raise _CorruptionError("a stored list element is malformed")
            out.append(version)
            pos += length + 1  # and its ',' delimiter
        return out


_ROW_CODECS = {}


def row_codec(type) -> RowCodec:
    """The RowCodec of a sparktypes type (one per canonical schema, shared)."""
    key = type.canonical()
    c = _ROW_CODECS.get(key)
    if c is None:
        c = RowCodec(type)
        _ROW_CODECS[key] = c
    return c


cdef inline int _fail(int depth, str message) except -1:
    raise _FieldError(depth, message)


cdef inline int _expected(RowCodec c, uint32_t idx, object v, int depth) except -1:
    return _fail(depth, f"expected {c._tnames[idx]}, got {type(v).__name__} ({v!r:.60})")


cdef inline bint _is_intlike(object v):
    cdef type t = type(v)
    if t is int:
        return True
    if t is bool or isinstance(v, _np_bool):
        return False
    return isinstance(v, int) or isinstance(v, _np_integer)


cdef inline void _set_bit(string* out, size_t at, uint64_t i):
    (<char*>out.data())[at + (i >> 3)] |= <char>(1 << (i & 7))


cdef int _row_encode(RowCodec c, uint32_t idx, object v, string* out, int64_t* path,
                     int depth) except -1:
    cdef const CRowNode* node = &c.nodes[idx]
    cdef uint8_t t = node.type
    cdef int64_t i
    cdef int overflow = 0
    cdef double d
    cdef Py_ssize_t n
    cdef const char* p
    cdef size_t at
    cdef uint32_t k, child
    cdef uint64_t count, e
    if t <= kRowTinyint:  # bigint, int, smallint, tinyint
        if type(v) is int:
            i = PyLong_AsLongLongAndOverflow(v, &overflow)
        elif _is_intlike(v):
            i = PyLong_AsLongLongAndOverflow(int(v), &overflow)
        else:
            return _expected(c, idx, v, depth)
        if t == kRowBigint:
            if overflow:
                return _fail(depth, f"{v} is out of range for bigint")
            CPutBE64(out, <uint64_t>i)
        elif t == kRowInt:
            if overflow or i < -2147483648 or i > 2147483647:
                return _fail(depth, f"{v} is out of range for int")
            CPutBE32(out, <uint32_t><int32_t>i)
        elif t == kRowSmallint:
            if overflow or i < -32768 or i > 32767:
                return _fail(depth, f"{v} is out of range for smallint")
            out.push_back(<char>((<uint16_t><int16_t>i) >> 8))
            out.push_back(<char>(i & 0xFF))
        else:
            if overflow or i < -128 or i > 127:
                return _fail(depth, f"{v} is out of range for tinyint")
            out.push_back(<char><int8_t>i)
        return 0
    if t == kRowDouble or t == kRowFloat:
        if type(v) is float:
            d = PyFloat_AsDouble(v)
        elif _is_intlike(v) or (isinstance(v, (float, _np_floating))):
            d = <double>float(v)
        else:
            return _expected(c, idx, v, depth)
        if t == kRowDouble:
            CPutBE64(out, CDoubleBits(d))
        else:
            try:
                _put_f32(d, out, _FieldError)
            except _FieldError as f32_error:
                return _fail(depth, str(f32_error.args[0]))
        return 0
    if t == kRowString:
        if not isinstance(v, str):
            return _expected(c, idx, v, depth)
        p = _AsUTF8AndSize(v, &n)
        if p == NULL:
            PyErr_Clear()
            return _fail(depth, f"text {v!r:.60} holds a lone surrogate and has no UTF-8 "
                                f"encoding; store such data as binary or repair the text")
        CPutVarint(out, <uint64_t>n)
        out.append(p, <size_t>n)
        return 0
    if t == kRowBinary:
        if not isinstance(v, (bytes, bytearray, memoryview)):
            return _expected(c, idx, v, depth)
        return _put_blob(v, out)
    if t == kRowBoolean:
        if type(v) is bool or isinstance(v, _np_bool):
            out.push_back(<char>(1 if v else 0))
            return 0
        return _expected(c, idx, v, depth)
    if t == kRowStruct:
        return _encode_struct(c, idx, v, out, path, depth)
    if t == kRowArray:
        if not isinstance(v, (list, tuple, np.ndarray)):
            return _expected(c, idx, v, depth)
        child = c.kids[node.first_child]
        count = <uint64_t>len(v)
        CPutVarint(out, count)
        at = out.size()
        out.append(CBitmapBytes(count), 0)
        e = 0
        for item in v:
            if e >= count:
                return _fail(depth, "the array changed size while it was encoded")
            path[depth] = <int64_t>e
            if item is None:
                if not c.nodes[child].nullable:
                    return _fail(depth + 1, "is NOT NULL but got None")
                _set_bit(out, at, e)
            else:
                _row_encode(c, child, item, out, path, depth + 1)
            e += 1
        if e != count:
            return _fail(depth, "the array changed size while it was encoded")
        return 0
    if t == kRowMap:
        if not isinstance(v, _Mapping):
            return _expected(c, idx, v, depth)
        count = <uint64_t>len(v)
        CPutVarint(out, count)
        at = out.size()
        out.append(CBitmapBytes(count), 0)
        child = c.kids[node.first_child + 1]
        e = 0
        for key, item in v.items():
            if e >= count:
                return _fail(depth, "the map changed size while it was encoded")
            path[depth] = <int64_t>(2 * e)
            if key is None:
                return _fail(depth + 1, "map keys cannot be None")
            _row_encode(c, c.kids[node.first_child], key, out, path, depth + 1)
            path[depth] = <int64_t>(2 * e + 1)
            if item is None:
                if not c.nodes[child].nullable:
                    return _fail(depth + 1, "is NOT NULL but got None")
                _set_bit(out, at, e)
            else:
                _row_encode(c, child, item, out, path, depth + 1)
            e += 1
        if e != count:
            return _fail(depth, "the map changed size while it was encoded")
        return 0
    if t == kRowDecimal:
        return _encode_decimal(c, idx, v, out, depth)
    if t == kRowDate:
        if not isinstance(v, _date) or isinstance(v, _datetime):
            return _expected(c, idx, v, depth)
        i = <int64_t>v.toordinal() - _EPOCH_ORDINAL
        CPutBE32(out, <uint32_t><int32_t>i)
        return 0
    if t == kRowTimestamp or t == kRowTimestampNtz:
        if not isinstance(v, _datetime):
            return _expected(c, idx, v, depth)
        if v.tzinfo is not None and v.utcoffset() is not None:
            if t == kRowTimestampNtz:
                return _fail(depth, f"timestamp_ntz holds wall-clock times; got the time-zone "
                                    f"aware {v!r:.60} (pass a naive datetime)")
            delta = v - _EPOCH_UTC
        else:
            delta = v - _EPOCH_NAIVE  # naive: taken as UTC (docs/concepts/typed-state.md)
        i = (<int64_t>delta.days * 86400 + <int64_t>delta.seconds) * 1000000 + \
            <int64_t>delta.microseconds
        CPutBE64(out, <uint64_t>i)
        return 0
    raise _FieldError(depth, f"unsupported schema node {t}")


cdef int _encode_struct(RowCodec c, uint32_t idx, object v, string* out, int64_t* path,
                        int depth) except -1:
    cdef const CRowNode* node = &c.nodes[idx]
    cdef uint32_t nf = node.num_children, k, child
    cdef size_t at
    names = c._names[idx]
    if isinstance(v, (tuple, list)):  # tuples, pyspark Rows, namedtuples, lists
        if <uint32_t>len(v) != nf:
            return _fail(depth, f"expected a struct of {nf} fields ({', '.join(names)}), got "
                                f"a {type(v).__name__} of {len(v)} items")
        items = v
    elif isinstance(v, _Mapping):
        items = []
        for name in names:
            try:
                items.append(v[name])
            except KeyError:
                return _fail(depth, f"field {name!r} is missing from the {type(v).__name__} "
                                    f"(its keys: {', '.join(map(repr, v))})")
        if <uint32_t>len(v) != nf:
            extra = [k2 for k2 in v if k2 not in names]
            return _fail(depth, f"the {type(v).__name__} has keys that are not fields of the "
                                f"struct: {', '.join(map(repr, extra))}")
    else:
        return _fail(depth, f"expected a struct ({', '.join(names)}) as a tuple, Row or dict, "
                            f"got {type(v).__name__} ({v!r:.60})")
    at = out.size()
    out.append(CBitmapBytes(nf), 0)
    for k in range(nf):
        item = items[k]
        child = c.kids[node.first_child + k]
        path[depth] = k
        if item is None:
            if not c.nodes[child].nullable:
                return _fail(depth + 1, "is NOT NULL but got None")
            _set_bit(out, at, k)
        else:
            _row_encode(c, child, item, out, path, depth + 1)
    return 0


cdef list _POW10 = [10 ** k for k in range(40)]


cdef int _encode_decimal(RowCodec c, uint32_t idx, object v, string* out, int depth) except -1:
    cdef const CRowNode* node = &c.nodes[idx]
    cdef int scale = node.scale, precision = node.precision
    cdef object u
    if isinstance(v, _Decimal):
        if not v.is_finite():
            return _fail(depth, f"{v} is not a finite decimal")
        q = v.scaleb(scale, _DEC_CTX)
        if q != q.to_integral_value(context=_DEC_CTX):
            return _fail(depth, f"{v} has more than {scale} digits after the point for "
                                f"decimal({precision},{scale}); round it first")
        u = int(q)
    elif _is_intlike(v):
        u = int(v) * _POW10[scale]
    else:
        return _expected(c, idx, v, depth)
    if abs(u) >= _POW10[precision]:
        return _fail(depth, f"{v} has more than {precision - scale} digits before the point "
                            f"for decimal({precision},{scale})")
    size = ((~u if u < 0 else u).bit_length() + 8) // 8  # minimal two's complement
    body = (<object>u).to_bytes(size, "big", signed=True)
    out.push_back(<char>size)
    out.append(PyBytes_AS_STRING(body), <size_t>size)
    return 0


cdef object _row_decode(RowCodec c, uint32_t idx, const char* p, size_t* pos, bint key):
    """The value of node idx at p + pos (already validated); advances pos. key: inside a
    map key, where arrays become tuples (dict keys must be hashable)."""
    cdef const CRowNode* node = &c.nodes[idx]
    cdef uint8_t t = node.type
    cdef const char* q = p + pos[0]
    cdef uint64_t body = 0, count = 0, e
    cdef size_t head, bitmap
    cdef uint32_t k, nf
    cdef int64_t v64
    cdef int32_t v32
    if t == kRowBigint:
        pos[0] += 8
        return PyLong_FromLongLong(<int64_t>CGetBE64(q))
    if t == kRowDouble:
        pos[0] += 8
        return PyFloat_FromDouble(CBitsDouble(CGetBE64(q)))
    if t == kRowString or t == kRowBinary:
        head = CGetVarint(q, 10, &body)
        pos[0] += head + <size_t>body
        if t == kRowString:
            return _from_utf8(q + head, <Py_ssize_t>body)
        return PyBytes_FromStringAndSize(q + head, <Py_ssize_t>body)
    if t == kRowInt:
        pos[0] += 4
        return PyLong_FromLongLong(<int32_t>CGetBE32(q))
    if t == kRowFloat:
        pos[0] += 4
        return PyFloat_FromDouble(_get_f32(q))
    if t == kRowBoolean:
        pos[0] += 1
        return q[0] != 0
    if t == kRowSmallint:
        pos[0] += 2
        return <int16_t>((<uint8_t>q[0] << 8) | <uint8_t>q[1])
    if t == kRowTinyint:
        pos[0] += 1
        return <int8_t>q[0]
    if t == kRowStruct:
        nf = node.num_children
        bitmap = CBitmapBytes(nf)
        pos[0] += bitmap
        r = PyTuple_New(nf)
        for k in range(nf):
            if (<uint8_t>q[k >> 3] >> (k & 7)) & 1:
                item = None
            else:
                item = _row_decode(c, c.kids[node.first_child + k], p, pos, key)
            Py_INCREF(item)
            PyTuple_SET_ITEM(r, k, item)
        return r
    if t == kRowArray or t == kRowMap:
        head = CGetVarint(q, 10, &count)
        bitmap = CBitmapBytes(count)
        bits = q + head
        pos[0] += head + bitmap
        if t == kRowArray:
            items = []
            for e in range(count):
                if (<uint8_t>bits[e >> 3] >> (e & 7)) & 1:
                    items.append(None)
                else:
                    items.append(_row_decode(c, c.kids[node.first_child], p, pos, key))
            return tuple(items) if key else items
        d = {}
        for e in range(count):
            mk = _row_decode(c, c.kids[node.first_child], p, pos, True)
            if (<uint8_t>bits[e >> 3] >> (e & 7)) & 1:
                mv = None
            else:
                mv = _row_decode(c, c.kids[node.first_child + 1], p, pos, key)
            d[mk] = mv
        if <uint64_t>len(d) != count:
            raise _CorruptionError("a stored map repeats a key; the value is corrupted")
        return d
    if t == kRowDecimal:
        head = <uint8_t>q[0]
        pos[0] += 1 + head
        u = _int_from_bytes(PyBytes_FromStringAndSize(q + 1, <Py_ssize_t>head), "big",
                            signed=True)
        return _Decimal(u).scaleb(-<int>node.scale, _DEC_CTX)
    if t == kRowDate:
        v32 = <int32_t>CGetBE32(q)
        pos[0] += 4
        if v32 < kMinDateDays or v32 > kMaxDateDays:
            raise _CorruptionError(f"a stored date ({v32} days) lies outside years 1..9999; "
                                   f"the value is corrupted")
        return _date_fromordinal(v32 + _EPOCH_ORDINAL)
    if t == kRowTimestamp or t == kRowTimestampNtz:
        v64 = <int64_t>CGetBE64(q)
        pos[0] += 8
        if v64 < kMinTimestampMicros or v64 > kMaxTimestampMicros:
            raise _CorruptionError(f"a stored timestamp ({v64} us) lies outside years "
                                   f"1..9999; the value is corrupted")
        return (_EPOCH_UTC if t == kRowTimestamp else _EPOCH_NAIVE) + \
            _timedelta(microseconds=v64)
    raise _CorruptionError(f"unsupported schema node {t}")


# ---- Arrow columns ----------------------------------------------------------------------

cdef class _ArrowIn:
    """An array pyarrow exported (Arrow C Data Interface); released when dropped."""
    cdef ArrowArray array
    cdef ArrowSchema schema
    cdef object source  # the pyarrow array the buffers belong to

    def __dealloc__(self):
        if self.array.release != NULL:
            self.array.release(&self.array)
        if self.schema.release != NULL:
            self.schema.release(&self.schema)


cdef class _ArrowOut:
    """An array C++ built, until pyarrow imports it (which moves it out); released if not."""
    cdef ArrowArray array

    def __dealloc__(self):
        if self.array.release != NULL:
            self.array.release(&self.array)


cdef object _pyarrow():
    import pyarrow
    return pyarrow


cdef _ArrowIn _export(object arr):
    cdef _ArrowIn x = _ArrowIn()
    arr._export_to_c(<uintptr_t>&x.array, <uintptr_t>&x.schema)
    x.source = arr
    return x


cdef object _import(_ArrowOut out, object arrow_type):
    return _pyarrow().Array._import_from_c(<uintptr_t>&out.array, arrow_type)


cdef str _row_error_text(RowCodec c, const CRowError& err):
    cdef size_t i
    path = [err.path[i] for i in range(err.path.size())]
    where = _sparktypes.path_name(c.type, path)
    expected = _sparktypes.type_at(c.type, path)
    if err.code == kRowArrowType:
        return (f"the Arrow column for '{where}' does not have the schema's type {expected} "
                f"(Arrow {_sparktypes.to_arrow(expected)})")
    if err.code == kRowNull:
        return f"field '{where}' is NOT NULL (or a map key) but row {err.row} holds a null there"
    if err.code == kRowOutOfRange:
        return (f"field '{where}' of row {err.row} is out of range for {expected} (dates and "
                f"timestamps span years 1..9999, decimals their precision)")
    if err.code == kRowInvalidText:
        return f"field '{where}' of row {err.row} is not valid UTF-8"
    if err.code == kRowNullRow:
        return f"row {err.row} is null"
    return f"row {err.row} cannot be encoded (error {err.code})"


cdef int encode_arrow_rows(RowCodec c, object arr, int null_rows, string* data,
                           vector[int64_t]* offsets, vector[uint8_t]* nulls,
                           str what) except -1:
    """Encodes every row of a pyarrow array of the schema's Arrow type (C++, GIL released);
    SerializationError (NullElementError for a null row) naming the row and field."""
    cdef _ArrowIn x = _export(arr)
    cdef CRowError err
    cdef cbool ok
    with nogil:
        ok = CEncodeArrowRows(c.schema, &x.schema, &x.array, null_rows, c.prefix, data, offsets,
                              nulls, &err)
    if ok:
        return 0
    if err.code == kRowNoMemory:
        raise MemoryError("the batch's values do not fit in memory; split it")
    if err.code == kRowNullRow and null_rows == kNullRowsRefuse and what.endswith("values"):
        raise errors.NullElementError(f"{what}: {_row_error_text(c, err)}; nothing was written")
    raise _SerializationError(f"{what}: {_row_error_text(c, err)}; nothing was written")


cdef object decoded_array(RowCodec c, _ArrowOut out, const CRowError& err, bint ok,
                          bint list_of, str what, object arrow_type=None):
    if not ok:
        if err.code == kRowNoMemory:
            raise MemoryError(f"{what}: the values do not fit in memory; read fewer rows")
        if err.code == kRowTooLarge:
            raise ValueError(f"{what}: the values exceed Arrow's 2 GiB per column; read fewer rows")
        raise _CorruptionError(
            f"{what}: the stored value of row {err.row} is not a valid encoding of schema "
            f"{c.canonical}")
    t = c.arrow_type if arrow_type is None else arrow_type
    if list_of:
        t = _pyarrow().list_(t)
    return _import(out, t)


def decode_rows_to_arrow(RowCodec c, list values, str layout, str what="state",
                         arrow_type=None):
    """One pyarrow array with the stored values (bytes) of a typed state: layout "value",
    "map" (null flag + value) or "list" (a list per value). ``arrow_type`` may replace the
    schema's Arrow type by one of the same layout (other nullability flags)."""
    cdef vector[CSlice] slices
    cdef _ArrowOut out = _ArrowOut()
    cdef CRowError err
    cdef cbool ok
    cdef int mode = (kStoredList if layout == "list" else
                     kStoredMapValue if layout == "map" else kStoredValue)
    for v in values:
        slices.push_back(CSlice(PyBytes_AS_STRING(v), <size_t>PyBytes_GET_SIZE(v)))
    with nogil:
        ok = CDecodeSlicesToArrow(c.schema, c.versions, slices, mode, &out.array, &err)
    return decoded_array(c, out, err, ok, mode == kStoredList, what, arrow_type)


def encode_rows_from_arrow(RowCodec c, arr) -> list:
    """The encodings of every row of a pyarrow array (tests compare them with the scalar
    encoder's bytes); null rows are None."""
    cdef string data
    cdef vector[int64_t] offs
    cdef vector[uint8_t] nulls
    cdef size_t i
    encode_arrow_rows(c, arr, kNullRowsMark, &data, &offs, &nulls, "rows")
    return [None if nulls[i] else PyBytes_FromStringAndSize(data.data() + offs[i],
                                                             <Py_ssize_t>(offs[i + 1] - offs[i]))
            for i in range(offs.size() - 1)]
