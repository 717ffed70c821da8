# Python objects <-> the byte encodings of csrc/codec.h. The layouts live in C++; this file
# only unboxes and boxes Python objects, so scalars never pass through Python-level code.
# Nothing here unpickles on its own: a stored pickle goes to the reader's PickleGate, which
# refuses unless the reader opted in (allow_pickle=True).

from cpython.long cimport PyLong_AsLongLongAndOverflow, PyLong_FromLongLong
from cpython.float cimport PyFloat_AsDouble, PyFloat_FromDouble
from cpython.unicode cimport PyUnicode_AsUTF8AndSize
from cpython.bytes cimport PyBytes_FromStringAndSize, PyBytes_AS_STRING, PyBytes_GET_SIZE
from cpython.ref cimport PyObject, Py_DECREF

cdef object _np_integer = np.integer
cdef object _np_floating = np.floating
cdef object _np_bool = np.bool_
cdef object _np_float32 = np.float32
cdef object _np_int64 = np.int64
cdef object _np_small_ints = (np.int32, np.int16, np.int8, np.uint16, np.uint8)
cdef object _np_str = np.str_
cdef object _np_bytes = np.bytes_
cdef object _pickle_dumps = pickle.dumps
cdef object _pickle_loads = pickle.loads
cdef object _int_from_bytes = int.from_bytes
cdef object _SerializationError = errors.SerializationError
cdef object _KeyTypeError = errors.KeyTypeError
cdef object _CorruptionError = errors.CorruptionError
cdef object _PickleNotAllowedError = errors.PickleNotAllowedError

MAX_NESTING = kMaxAnyDepth

# What a reader does with a stored pickle (PickleGate.mode).
PICKLE_REFUSE = 0   # raise PickleNotAllowedError: the default everywhere
PICKLE_ALLOW = 1    # unpickle: only when the reader passed allow_pickle=True
PICKLE_OPAQUE = 2   # return the pickle's bytes as a PickledValue (stateengine dump)


cdef class PickledValue:
    """The bytes of a stored pickle that was not unpickled (``stateengine dump`` without
    ``--allow-pickle`` shows values this way)."""
    cdef readonly bytes data

    def __init__(self, bytes data):
        self.data = data

    def __eq__(self, other):
        return isinstance(other, PickledValue) and (<PickledValue>other).data == self.data

    def __hash__(self):
        return hash((PickledValue, self.data))

    def __repr__(self):
        return f"PickledValue({len(self.data)} bytes)"


cdef class PickleGate:
    """Whether one reader (a state handle, the timer service, a dump) may unpickle.

    Decoders consult it only on the pickle branch (a PICKLE-typed state, or an ANY value that
    an earlier version pickled), so it costs nothing on every other read. ``what`` names the
    data in the error ("state 'x'")."""
    cdef readonly int mode
    cdef readonly str what

    def __init__(self, int mode, str what):
        if mode not in (PICKLE_REFUSE, PICKLE_ALLOW, PICKLE_OPAQUE):
            raise ValueError(f"unknown pickle mode {mode}")
        self.mode = mode
        self.what = what


# Decoders take the reader's gate as a borrowed pointer (its owner, a state handle or the
# caller, keeps it alive): passing an object would cost a reference count on every read.
ctypedef PyObject* GateRef


cdef inline GateRef gate_ref(PickleGate gate):
    if gate is None:
        return <GateRef>NULL
    return <GateRef>gate


cdef object _unpickle(GateRef ref, const char* p, size_t n):
    cdef PickleGate gate = <PickleGate>ref if ref != NULL else None
    data = PyBytes_FromStringAndSize(p, <Py_ssize_t>n)
    if gate is not None and gate.mode == PICKLE_ALLOW:
        return _pickle_loads(data)
    if gate is not None and gate.mode == PICKLE_OPAQUE:
        return PickledValue(data)
    what = gate.what if gate is not None else "stored data"
    raise _PickleNotAllowedError(
        f"{what} holds a pickled value ({n} bytes), and unpickling runs code from the "
        f"checkpoint; it was not unpickled. If you trust where the checkpoint came from, open "
        f"the reader with allow_pickle=True (KeyedStateBackend, KeyedStateBackend.restore, "
        f"StateStoreProvider, the stateengine.spark functions, `stateengine dump "
        f"--allow-pickle`); values pickled by an earlier version are converted to the native "
        f"encoding when such a checkpoint is restored with allow_pickle=True")

CODEC_NAMES = {
    kVoid: "void", kAny: "any", kI64: "bigint", kF64: "double", kStr: "string",
    kBytes: "binary", kBool: "boolean", kPickle: "pickle", kI32: "int", kF32: "float",
    kOrdI64: "ordered_bigint", kOrdF64: "ordered_double", kOrdStr: "ordered_string",
    kOrdBytes: "ordered_binary",
}


cdef extern from "Python.h":
    # The C-API call without Cython's error check: NULL (a UnicodeEncodeError set) for a str
    # holding a lone surrogate, which _utf8 turns into the caller's error class.
    const char* _AsUTF8AndSize "PyUnicode_AsUTF8AndSize"(object, Py_ssize_t*)
    # Likewise NULL for stored bytes that are not UTF-8, which _from_utf8 turns into a
    # CorruptionError without a try block on the hot path.
    PyObject* _DecodeUTF8 "PyUnicode_DecodeUTF8"(const char*, Py_ssize_t, const char*)


cdef inline const char* _utf8(str s, Py_ssize_t* n, object error) except NULL:
    """The UTF-8 of s (cached by CPython); error (SerializationError, KeyTypeError) if s holds
    a lone surrogate, which has no UTF-8 encoding."""
    cdef const char* p = _AsUTF8AndSize(s, n)
    if p == NULL:
        _not_utf8(s, error)
    return p


cdef int _not_utf8(str s, object error) except -1:
    PyErr_Clear()
    at = next((i for i, c in enumerate(s) if 0xD800 <= ord(c) <= 0xDFFF), -1)
    raise error(
        f"text {s!r:.80} holds a lone surrogate (at position {at}, as surrogateescape decoding "
        f"of undecodable bytes leaves them) and has no UTF-8 encoding; store such data as "
        f"bytes (s.encode('utf-8', 'surrogateescape')) or repair the text")


cdef inline int _put_str(str s, string* out) except -1:
    cdef Py_ssize_t n
    cdef const char* p = _utf8(s, &n, _SerializationError)
    CPutVarint(out, <uint64_t>n)
    out.append(p, <size_t>n)
    return 0


cdef inline int _put_blob(object b, string* out) except -1:
    cdef const unsigned char[::1] view
    if type(b) is bytes:
        CPutVarint(out, <uint64_t>PyBytes_GET_SIZE(b))
        out.append(PyBytes_AS_STRING(b), <size_t>PyBytes_GET_SIZE(b))
        return 0
    view = memoryview(b).cast("B")
    CPutVarint(out, <uint64_t>view.shape[0])
    if view.shape[0]:
        out.append(<const char*>&view[0], <size_t>view.shape[0])
    return 0


cdef inline int _as_int64(object v, int64_t* out) except -1:
    cdef int overflow = 0
    out[0] = PyLong_AsLongLongAndOverflow(v, &overflow)
    if overflow:
        raise _SerializationError(
            f"integer {v} does not fit in 64 bits; declare the state with value_type=object "
            f"(the default serializer stores integers of any size)")
    return 0


cdef int _put_pickle(object v, string* out) except -1:
    try:
        data = _pickle_dumps(v, protocol=5)
    except Exception as e:
        raise _SerializationError(
            f"value of type {type(v).__name__} cannot be pickled ({e}); store a picklable "
            f"value or convert it first") from e
    CPutVarint(out, <uint64_t>PyBytes_GET_SIZE(data))
    out.append(PyBytes_AS_STRING(data), <size_t>PyBytes_GET_SIZE(data))
    return 0


cdef int _put_any(object v, string* out) except -1:
    """The ANY encoding of v. The builtin scalars come first, in order of how common they are
    in state (this is every scalar update's path); containers after them. encode_value is its
    only caller, so the compiler inlines it there: keep it that way."""
    cdef int64_t i
    cdef int overflow = 0
    cdef type t = type(v)
    if t is int:
        i = PyLong_AsLongLongAndOverflow(v, &overflow)
        if not overflow:
            out.push_back(<char>kTagInt)
            CPutBE64(out, <uint64_t>i)
            return 0
        return _put_bigint(v, out)
    if t is float:
        out.push_back(<char>kTagFloat)
        CPutBE64(out, CDoubleBits(PyFloat_AsDouble(v)))
        return 0
    if t is str:
        out.push_back(<char>kTagStr)
        return _put_str(v, out)
    if v is None:
        out.push_back(<char>kTagNone)
        return 0
    if t is bool:
        out.push_back(<char>(kTagTrue if v else kTagFalse))
        return 0
    if t is bytes:
        out.push_back(<char>kTagBytes)
        return _put_blob(v, out)
    if isinstance(v, _np_bool):
        out.push_back(<char>(kTagTrue if v else kTagFalse))
        return 0
    if isinstance(v, _np_integer):
        i = PyLong_AsLongLongAndOverflow(int(v), &overflow)
        if overflow:
            return _put_bigint(int(v), out)
        out.push_back(<char>kTagInt)
        CPutBE64(out, <uint64_t>i)
        return 0
    if isinstance(v, _np_floating):
        out.push_back(<char>kTagFloat)
        CPutBE64(out, CDoubleBits(<double>float(v)))
        return 0
    return _put_composite(v, out, 0)


cdef int _put_bigint(object v, string* out) except -1:
    """An int outside int64: minimal big-endian two's complement (so equal ints, e.g. as
    namespaces or user keys, always have equal bytes)."""
    cdef Py_ssize_t size = (v.bit_length() + 8) // 8
    body = (<object>v).to_bytes(size, "big", signed=True)
    out.push_back(<char>kTagBigInt)
    CPutVarint(out, <uint64_t>size)
    out.append(PyBytes_AS_STRING(body), <size_t>size)
    return 0


cdef int _put_element(object v, string* out, int depth) except -1:
    """An element of a container: a container one level deeper, anything else as any value
    (only containers recurse, so the depth is counted here alone)."""
    cdef type t = type(v)
    if t is tuple or t is list or t is dict:
        return _put_composite(v, out, depth)
    return encode_value(kAny, v, out)


cdef int _put_composite(object v, string* out, int depth) except -1:
    """Tuples, lists and dicts (exact types, so a value decodes to the type it was) whose
    elements are ANY values themselves; numpy str_/bytes_ as str/bytes."""
    cdef type t = type(v)
    cdef size_t count_at, written = 0
    cdef Py_ssize_t size
    if t is tuple or t is list or t is dict:
        if depth >= kMaxAnyDepth:
            raise _SerializationError(
                f"the value nests tuples, lists or dicts more than {kMaxAnyDepth} deep (or "
                f"contains itself); flatten it or store a reference instead")
        size = len(v)
        out.push_back(<char>(kTagTuple if t is tuple else kTagList if t is list else kTagDict))
        CPutVarint(out, <uint64_t>size)
        if t is dict:
            for key, item in (<dict>v).items():
                _put_element(key, out, depth + 1)
                _put_element(item, out, depth + 1)
                written += 1
        else:
            for item in v:
                _put_element(item, out, depth + 1)
                written += 1
        if written != <size_t>size:
            raise _SerializationError(f"a {t.__name__} changed size while it was encoded")
        return 0
    if isinstance(v, _np_str):
        out.push_back(<char>kTagStr)
        return _put_str(str(v), out)
    if isinstance(v, _np_bytes):
        out.push_back(<char>kTagBytes)
        return _put_blob(bytes(v), out)
    raise _SerializationError(
        f"a value of type {t.__name__} ({v!r:.80}) cannot be stored by the default 'any' "
        f"serializer (as a value, or inside a tuple, list or dict), which holds None, bool, int, float, str, bytes, numpy scalars and tuples, "
        f"lists and dicts of them; convert it (to a tuple, dict, str...), or declare the state "
        f"with value_type=\"pickle\" (user_key_type=\"pickle\" for map keys) and open the "
        f"backend with allow_pickle=True")


cdef str _codec_name(CCodec codec):
    return CODEC_NAMES.get(codec, str(codec))


cdef int _type_error(CCodec codec, object v) except -1:
    e = _SerializationError(
        f"a value of type {type(v).__name__} ({v!r:.80}) cannot be encoded by the "
        f"'{_codec_name(codec)}' serializer; store a matching value or declare the state with "
        f"value_type=object")
    e._type_mismatch = True  # encode_user_key rewrites these to point at user_key_type
    raise e


cdef int encode_user_key(CCodec codec, object v, string* out, str state) except -1:
    """encode_value for a map's user key: its errors name the user key, and a type mismatch
    points at the descriptor's user_key_type (not value_type)."""
    try:
        return encode_value(codec, v, out)
    except _SerializationError as e:
        if getattr(e, "_type_mismatch", False):
            raise _SerializationError(
                f"map state '{state}': a user key of type {type(v).__name__} ({v!r:.80}) "
                f"cannot be encoded by the '{_codec_name(codec)}' serializer of its "
                f"user_key_type; use user keys of that type or declare the descriptor with "
                f"another user_key_type (object accepts any supported key)") from None
        raise _SerializationError(f"map state '{state}', user key {v!r:.80}: {e}") from None


cdef int encode_value(CCodec codec, object v, string* out) except -1:
    """Appends the encoding of v under codec to out; raises SerializationError."""
    cdef int64_t i
    cdef double d
    cdef const char* p
    cdef Py_ssize_t n
    if codec == kAny:
        return _put_any(v, out)
    if codec == kI64 or codec == kI32 or codec == kOrdI64:
        if type(v) is bool or not (isinstance(v, int) or isinstance(v, _np_integer)):
            return _type_error(codec, v)
        _as_int64(int(v), &i)
        if codec == kI64:
            CPutBE64(out, <uint64_t>i)
        elif codec == kOrdI64:
            CPutBE64(out, COrderedI64(i))
        else:
            if i < -2147483648 or i > 2147483647:
                raise _SerializationError(f"integer {v} does not fit in the 32-bit 'int' serializer")
            CPutBE32(out, <uint32_t><int32_t>i)
        return 0
    if codec == kF64 or codec == kF32 or codec == kOrdF64:
        if type(v) is bool or not (isinstance(v, (float, int)) or isinstance(v, (_np_floating, _np_integer))):
            return _type_error(codec, v)
        d = <double>float(v)
        if codec == kF64:
            CPutBE64(out, CDoubleBits(d))
        elif codec == kOrdF64:
            CPutBE64(out, COrderedF64(d))
        else:
            _put_f32(d, out, _SerializationError)
        return 0
    if codec == kStr:
        if type(v) is not str:
            if not isinstance(v, str):
                return _type_error(codec, v)
            v = str(v)
        return _put_str(v, out)
    if codec == kBytes:
        if not isinstance(v, (bytes, bytearray, memoryview)):
            return _type_error(codec, v)
        return _put_blob(v, out)
    if codec == kBool:
        if not (type(v) is bool or isinstance(v, _np_bool)):
            return _type_error(codec, v)
        out.push_back(<char>(1 if v else 0))
        return 0
    if codec == kPickle:
        return _put_pickle(v, out)
    if codec == kOrdStr:
        if not isinstance(v, str):
            return _type_error(codec, v)
        p = _utf8(str(v), &n, _SerializationError)
        out.append(p, <size_t>n)
        return 0
    if codec == kOrdBytes:
        if not isinstance(v, (bytes, bytearray, memoryview)):
            return _type_error(codec, v)
        b = bytes(v)
        out.append(PyBytes_AS_STRING(b), <size_t>PyBytes_GET_SIZE(b))
        return 0
    if codec == kVoid:
        if v is not None:
            return _type_error(codec, v)
        out.push_back(0)
        return 0
    raise _SerializationError(f"unknown serializer id {codec}")


cdef inline int _put_f32(double d, string* out, object error) except -1:
    cdef float f = <float>d
    cdef uint32_t bits
    if isinf(f) and not isinf(d) and not isnan(d):  # a finite double beyond float32's range
        raise error(
            f"{d!r} is outside the range of the 32-bit 'float' serializer (its largest finite "
            f"value is 3.4028235e+38); declare the state with float (64 bits) or scale the value")
    memcpy(&bits, &f, 4)
    CPutBE32(out, bits)
    return 0


cdef inline double _get_f32(const char* p):
    cdef uint32_t bits = CGetBE32(p)
    cdef float f
    memcpy(&f, &bits, 4)
    return f


cdef object _corrupt(CCodec codec, size_t n):
    raise _CorruptionError(
        f"stored bytes ({n} bytes) are not a valid '{_codec_name(codec)}' encoding; the state "
        f"was written with another serializer or the data is corrupted")


cdef object _get_varbytes(const char* p, size_t n, size_t* used):
    cdef uint64_t body
    cdef size_t head = CGetVarint(p, n, &body)
    if head == 0 or body > n - head:
        raise _CorruptionError("truncated length-prefixed element")
    used[0] = head + <size_t>body
    return PyBytes_FromStringAndSize(p + head, <Py_ssize_t>body)


cdef inline object _from_utf8(const char* p, Py_ssize_t n):
    cdef PyObject* r = _DecodeUTF8(p, n, "strict")
    if r == NULL:
        PyErr_Clear()
        raise _CorruptionError("a stored string is not valid UTF-8; the data is corrupted")
    s = <object>r
    Py_DECREF(s)  # <object> took a reference of its own
    return s


cdef object _get_varstr(const char* p, size_t n, size_t* used):
    cdef uint64_t body
    cdef size_t head = CGetVarint(p, n, &body)
    if head == 0 or body > n - head:
        raise _CorruptionError("truncated length-prefixed string")
    used[0] = head + <size_t>body
    return _from_utf8(p + head, <Py_ssize_t>body)


cdef object decode_value(CCodec codec, const char* p, size_t n, size_t* used, GateRef gate):
    """Decodes the element that starts at p; stores its length in used. A pickle (PICKLE
    codec, or an ANY value an earlier version pickled) goes to gate."""
    cdef uint8_t tag
    cdef size_t inner = 0
    cdef uint64_t body
    cdef size_t head
    if codec == kAny:
        if n < 1:
            return _corrupt(codec, n)
        tag = <uint8_t>p[0]
        if tag == kTagInt:
            if n < 9:
                return _corrupt(codec, n)
            used[0] = 9
            return PyLong_FromLongLong(<int64_t>CGetBE64(p + 1))
        if tag == kTagFloat:
            if n < 9:
                return _corrupt(codec, n)
            used[0] = 9
            return PyFloat_FromDouble(CBitsDouble(CGetBE64(p + 1)))
        if tag == kTagStr:
            r = _get_varstr(p + 1, n - 1, &inner)
            used[0] = inner + 1
            return r
        if tag == kTagNone:
            used[0] = 1
            return None
        if tag == kTagTrue or tag == kTagFalse:
            used[0] = 1
            return tag == kTagTrue
        if tag == kTagBytes:
            r = _get_varbytes(p + 1, n - 1, &inner)
            used[0] = inner + 1
            return r
        if tag == kTagPickle:
            head = CGetVarint(p + 1, n - 1, &body)
            if head == 0 or body > n - 1 - head:
                raise _CorruptionError("truncated length-prefixed element")
            used[0] = 1 + head + <size_t>body
            return _unpickle(gate, p + 1 + head, <size_t>body)
        return _get_composite(tag, p, n, used, 0)
    if codec == kI64 or codec == kOrdI64:
        if n < 8:
            return _corrupt(codec, n)
        used[0] = 8
        if codec == kI64:
            return PyLong_FromLongLong(<int64_t>CGetBE64(p))
        return PyLong_FromLongLong(CFromOrderedI64(CGetBE64(p)))
    if codec == kF64 or codec == kOrdF64:
        if n < 8:
            return _corrupt(codec, n)
        used[0] = 8
        if codec == kF64:
            return PyFloat_FromDouble(CBitsDouble(CGetBE64(p)))
        return PyFloat_FromDouble(CFromOrderedF64(CGetBE64(p)))
    if codec == kStr:
        return _get_varstr(p, n, used)
    if codec == kBytes:
        return _get_varbytes(p, n, used)
    if codec == kPickle:
        head = CGetVarint(p, n, &body)
        if head == 0 or body > n - head:
            raise _CorruptionError("truncated length-prefixed element")
        used[0] = head + <size_t>body
        return _unpickle(gate, p + head, <size_t>body)
    if codec == kBool:
        if n < 1 or <unsigned char>p[0] > 1:  # only 0/1 are written: equal values, equal bytes
            return _corrupt(codec, n)
        used[0] = 1
        return p[0] != 0
    if codec == kI32:
        if n < 4:
            return _corrupt(codec, n)
        used[0] = 4
        return PyLong_FromLongLong(<int32_t>CGetBE32(p))
    if codec == kF32:
        if n < 4:
            return _corrupt(codec, n)
        used[0] = 4
        return PyFloat_FromDouble(_get_f32(p))
    if codec == kOrdStr:
        used[0] = n
        return _from_utf8(p, <Py_ssize_t>n)
    if codec == kOrdBytes:
        used[0] = n
        return PyBytes_FromStringAndSize(p, <Py_ssize_t>n)
    if codec == kVoid:
        if n < 1 or p[0] != 0:  # the one byte VOID writes
            return _corrupt(codec, n)
        used[0] = 1
        return None
    return _corrupt(codec, n)


cdef object _get_element(const char* p, size_t n, size_t* used, int depth):
    """One element of a container: any ANY tag but a pickle (containers never held one)."""
    if n < 1:
        return _corrupt(kAny, n)
    cdef uint8_t tag = <uint8_t>p[0]
    if tag >= kTagBigInt:
        return _get_composite(tag, p, n, used, depth)
    if tag == kTagPickle:
        raise _CorruptionError("a pickle inside a tuple, list or dict; the stored value is "
                               "corrupted")
    return decode_value(kAny, p, n, used, NULL)


cdef object _get_composite(uint8_t tag, const char* p, size_t n, size_t* used, int depth):
    """Big ints and containers. Every count and length is checked against the bytes left
    before anything is allocated, and nesting stops at kMaxAnyDepth (as ElementLength)."""
    cdef uint64_t count
    cdef size_t head, pos, left, item = 0, i
    cdef int overflow = 0
    if tag != kTagBigInt and tag != kTagTuple and tag != kTagList and tag != kTagDict:
        return _corrupt(kAny, n)
    head = CGetVarint(p + 1, n - 1, &count)
    if head == 0:
        return _corrupt(kAny, n)
    pos = 1 + head
    left = n - pos
    if tag == kTagBigInt:
        if count < 9 or count > left:
            return _corrupt(kAny, n)
        v = _int_from_bytes(PyBytes_FromStringAndSize(p + pos, <Py_ssize_t>count), "big",
                            signed=True)
        PyLong_AsLongLongAndOverflow(v, &overflow)
        if not overflow or (v.bit_length() + 8) // 8 != <Py_ssize_t>count:
            raise _CorruptionError("a big integer is not in its canonical encoding; the "
                                   "stored value is corrupted")
        used[0] = pos + <size_t>count
        return v
    if depth >= kMaxAnyDepth:
        raise _CorruptionError(f"stored containers nest deeper than {kMaxAnyDepth} levels; "
                               f"the stored value is corrupted")
    if count > (left // 2 if tag == kTagDict else left):  # each element takes a byte at least
        return _corrupt(kAny, n)
    if tag == kTagDict:
        d = {}
        for i in range(<size_t>count):
            k = _get_element(p + pos, n - pos, &item, depth + 1)
            pos += item
            v = _get_element(p + pos, n - pos, &item, depth + 1)
            pos += item
            try:
                d[k] = v
            except TypeError:
                raise _CorruptionError(f"a stored dict has an unhashable key of type "
                                       f"{type(k).__name__}; the value is corrupted") from None
        if <size_t>len(d) != count:
            raise _CorruptionError("a stored dict repeats a key; the value is corrupted")
        used[0] = pos
        return d
    items = []  # grows with what decodes, never with what a count claims
    for i in range(<size_t>count):
        items.append(_get_element(p + pos, n - pos, &item, depth + 1))
        pos += item
    used[0] = pos
    return tuple(items) if tag == kTagTuple else items


cdef object decode_whole(CCodec codec, const char* p, size_t n, GateRef gate):
    """Decodes exactly one element spanning all n bytes."""
    cdef size_t used = 0
    r = decode_value(codec, p, n, &used, gate)
    if used != n:
        return _corrupt(codec, n)
    return r


# ---- keys --------------------------------------------------------------------------------

cdef int encode_key_column(CCodec codec, object v, string* out) except -1:
    """Appends one key column; keys compare by value, so floats are normalized."""
    cdef int64_t i
    cdef int overflow = 0
    cdef double d
    cdef type t = type(v)
    if codec == kI64 or codec == kI32:
        if t is bool or not (t is int or isinstance(v, int) or isinstance(v, _np_integer)):
            return _key_error(codec, v)
        i = PyLong_AsLongLongAndOverflow(int(v), &overflow)
        if overflow:
            raise _KeyTypeError(f"key {v} does not fit in a 64-bit bigint key")
        if codec == kI64:
            CPutBE64(out, <uint64_t>i)
        else:
            if i < -2147483648 or i > 2147483647:
                raise _KeyTypeError(f"key {v} does not fit in a 32-bit int key")
            CPutBE32(out, <uint32_t><int32_t>i)
        return 0
    if codec == kStr:
        if t is not str:
            if not isinstance(v, str):  # numpy.str_ and other str subclasses are strings too
                return _key_error(codec, v)
            v = str(v)
        return _put_str(v, out)
    if codec == kF64 or codec == kF32:
        if t is bool or not (isinstance(v, (float, int)) or isinstance(v, (_np_floating, _np_integer))):
            return _key_error(codec, v)
        d = CNormalizeKeyDouble(<double>float(v))
        if codec == kF64:
            CPutBE64(out, CDoubleBits(d))
        else:
            _put_f32(d, out, _KeyTypeError)
        return 0
    if codec == kBytes:
        if not isinstance(v, (bytes, bytearray, memoryview)):
            return _key_error(codec, v)
        return _put_blob(v, out)
    if codec == kBool:
        if not (t is bool or isinstance(v, _np_bool)):
            return _key_error(codec, v)
        out.push_back(<char>(1 if v else 0))
        return 0
    return _key_error(codec, v)


cdef int _key_error(CCodec codec, object v) except -1:
    raise _KeyTypeError(
        f"key {v!r:.80} of type {type(v).__name__} does not match the backend's key column type "
        f"'{_codec_name(codec)}'; every key of a backend has the same type (set key_type= on the "
        f"backend to choose it)")


def infer_key_codecs(key):
    """The key column codecs Spark would use for this Python key (as a tuple)."""
    if isinstance(key, tuple):
        if not key:
            raise _KeyTypeError("an empty tuple is not a key")
        return tuple(_infer_column(c) for c in key)
    return (_infer_column(key),)


cdef CCodec _infer_column(object v) except 255:
    cdef type t = type(v)
    if t is bool or isinstance(v, _np_bool):
        return kBool
    if t is int or isinstance(v, _np_int64):
        return kI64
    if isinstance(v, _np_small_ints):
        return kI32
    if t is float or isinstance(v, float):
        return kF64
    if isinstance(v, _np_float32):
        return kF32
    if t is str or isinstance(v, str):
        return kStr
    if isinstance(v, (bytes, bytearray, memoryview)):
        return kBytes
    if isinstance(v, int) or isinstance(v, _np_integer):
        return kI64
    if v is None:
        raise _KeyTypeError("None is not a key (Spark's hash() skips nulls, so null keys have no "
                            "key group); filter null keys out or map them to a sentinel")
    raise _KeyTypeError(
        f"keys of type {type(v).__name__} are not supported; use int, str, bytes, float, bool "
        f"or a tuple of them")


cdef object decode_key(const CKeySchema& schema, bint is_tuple, const char* p, size_t n):
    cdef size_t pos = 0, used = 0, i
    cdef const vector[CCodec]* columns = &schema.columns()
    cols = []
    for i in range(columns.size()):
        cols.append(decode_value(columns[0][i], p + pos, n - pos, &used, NULL))
        pos += used
    if pos != n:
        raise _CorruptionError("stored key does not match the backend's key type")
    return tuple(cols) if is_tuple else cols[0]


def encode_for_codec(int codec, value) -> bytes:
    """The bytes of value under a codec id (used by tests and the snapshot tooling)."""
    cdef string out
    encode_value(<CCodec>codec, value, &out)
    return PyBytes_FromStringAndSize(out.data(), <Py_ssize_t>out.size())


def decode_for_codec(int codec, bytes data, PickleGate gate=None):
    """The value data encodes under a codec id; a pickle goes to gate (None refuses it)."""
    return decode_whole(<CCodec>codec, PyBytes_AS_STRING(data), <size_t>PyBytes_GET_SIZE(data),
                        gate_ref(gate))


def element_length(int codec, bytes data) -> int:
    """Length of the element data starts with (csrc ElementLength), or -1 if malformed."""
    cdef size_t n = 0
    if not CElementLength(<CCodec>codec, PyBytes_AS_STRING(data), <size_t>PyBytes_GET_SIZE(data), &n):
        return -1
    return n
