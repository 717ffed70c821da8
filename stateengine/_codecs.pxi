# Python objects <-> the byte encodings of csrc/codec.h. The layouts live in C++; this file
# only unboxes and boxes Python objects, so scalars never pass through Python-level code.

from cpython.long cimport PyLong_AsLongLongAndOverflow, PyLong_FromLongLong
from cpython.float cimport PyFloat_AsDouble, PyFloat_FromDouble
from cpython.unicode cimport PyUnicode_DecodeUTF8, PyUnicode_AsUTF8AndSize
from cpython.bytes cimport PyBytes_FromStringAndSize, PyBytes_AS_STRING, PyBytes_GET_SIZE

cdef object _np_integer = np.integer
cdef object _np_floating = np.floating
cdef object _np_bool = np.bool_
cdef object _np_float32 = np.float32
cdef object _np_int64 = np.int64
cdef object _np_small_ints = (np.int32, np.int16, np.int8, np.uint16, np.uint8)
cdef object _pickle_dumps = pickle.dumps
cdef object _pickle_loads = pickle.loads
cdef object _SerializationError = errors.SerializationError
cdef object _KeyTypeError = errors.KeyTypeError
cdef object _CorruptionError = errors.CorruptionError

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
            f"integer {v} does not fit in 64 bits; use value_type=object to pickle it")
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
    cdef int64_t i
    cdef int overflow = 0
    cdef type t = type(v)
    if t is int:
        i = PyLong_AsLongLongAndOverflow(v, &overflow)
        if not overflow:
            out.push_back(<char>kTagInt)
            CPutBE64(out, <uint64_t>i)
            return 0
        out.push_back(<char>kTagPickle)
        return _put_pickle(v, out)
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
        if not overflow:
            out.push_back(<char>kTagInt)
            CPutBE64(out, <uint64_t>i)
            return 0
    elif isinstance(v, _np_floating):
        out.push_back(<char>kTagFloat)
        CPutBE64(out, CDoubleBits(<double>float(v)))
        return 0
    out.push_back(<char>kTagPickle)
    return _put_pickle(v, out)


cdef str _codec_name(CCodec codec):
    return CODEC_NAMES.get(codec, str(codec))


cdef int _type_error(CCodec codec, object v) except -1:
    raise _SerializationError(
        f"a value of type {type(v).__name__} ({v!r:.80}) cannot be encoded by the "
        f"'{_codec_name(codec)}' serializer; store a matching value or declare the state with "
        f"value_type=object")


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


cdef object _get_varstr(const char* p, size_t n, size_t* used):
    cdef uint64_t body
    cdef size_t head = CGetVarint(p, n, &body)
    if head == 0 or body > n - head:
        raise _CorruptionError("truncated length-prefixed string")
    used[0] = head + <size_t>body
    return PyUnicode_DecodeUTF8(p + head, <Py_ssize_t>body, "strict")


cdef object decode_value(CCodec codec, const char* p, size_t n, size_t* used):
    """Decodes the element that starts at p; stores its length in used."""
    cdef uint8_t tag
    cdef size_t inner = 0
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
            r = _get_varbytes(p + 1, n - 1, &inner)
            used[0] = inner + 1
            return _pickle_loads(r)
        return _corrupt(codec, n)
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
        return _pickle_loads(_get_varbytes(p, n, used))
    if codec == kBool:
        if n < 1:
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
        return PyUnicode_DecodeUTF8(p, <Py_ssize_t>n, "strict")
    if codec == kOrdBytes:
        used[0] = n
        return PyBytes_FromStringAndSize(p, <Py_ssize_t>n)
    if codec == kVoid:
        used[0] = 1
        return None
    return _corrupt(codec, n)


cdef object decode_whole(CCodec codec, const char* p, size_t n):
    """Decodes exactly one element spanning all n bytes."""
    cdef size_t used = 0
    r = decode_value(codec, p, n, &used)
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
        cols.append(decode_value(columns[0][i], p + pos, n - pos, &used))
        pos += used
    if pos != n:
        raise _CorruptionError("stored key does not match the backend's key type")
    return tuple(cols) if is_tuple else cols[0]


def encode_for_codec(int codec, value) -> bytes:
    """The bytes of value under a codec id (used by tests and the snapshot tooling)."""
    cdef string out
    encode_value(<CCodec>codec, value, &out)
    return PyBytes_FromStringAndSize(out.data(), <Py_ssize_t>out.size())


def decode_for_codec(int codec, bytes data):
    return decode_whole(<CCodec>codec, PyBytes_AS_STRING(data), <size_t>PyBytes_GET_SIZE(data))
