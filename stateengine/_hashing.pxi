# Key groups of Python keys, computed by the same C++ code that routes state.

def spark_hash(key, key_codecs=None) -> int:
    """Spark SQL's ``hash(col, ...)`` of a key (a scalar or a tuple of columns).

    ``key_codecs`` picks the Spark column types; by default they follow the Python types the
    way Spark infers them (int -> bigint, float -> double, str -> string, bytes -> binary,
    bool -> boolean, numpy.int32 -> int, numpy.float32 -> float).
    """
    cdef string buf
    cdef int32_t h
    cdef CKeySchema schema
    codecs = infer_key_codecs(key) if key_codecs is None else tuple(key_codecs)
    cols = key if isinstance(key, tuple) else (key,)
    if len(cols) != len(codecs):
        raise _KeyTypeError(f"key {key!r} has {len(cols)} columns but the key type has {len(codecs)}")
    for c, v in zip(codecs, cols):
        encode_key_column(<CCodec><int>c, v, &buf)
    schema = CKeySchema(<vector[CCodec]>[<CCodec><int>c for c in codecs])
    if not schema.Hash(buf.data(), buf.size(), &h):
        raise _KeyTypeError(f"key {key!r} could not be hashed")
    return h


def key_group_for_hash(int32_t h, int32_t max_parallelism) -> int:
    return CKeyGroupForHash(h, max_parallelism)


def spark_hash_bytes(bytes data, int32_t seed=42) -> int:
    return CSparkHashBytes(PyBytes_AS_STRING(data), <size_t>PyBytes_GET_SIZE(data), seed)
