# Entries written before snapshot format 2, when the ANY codec pickled every value that was
# not a primitive (tag 7). A pickled namespace or map user key is a different RocksDB key than
# the native encoding the same value has now, so a point lookup would miss it: restore finds
# such entries and, if the reader allows pickle, rewrites them in the native encoding
# (stateengine/checkpoint/legacy.py decides when). Runs once per restore of an old checkpoint.

cdef enum:
    LEGACY_VALUE = 0   # value, reducing, aggregating: the value is one element
    LEGACY_LIST = 1    # elements joined by ','
    LEGACY_MAP = 2     # null flag byte, then the value
    LEGACY_NONE = 3    # timers: no value


cdef inline bint _is_pickle(const char* p, size_t n):
    return n > 0 and <uint8_t>p[0] == kTagPickle


cdef bint _list_has_pickle(const char* p, size_t n):
    cdef size_t pos = 0, used = 0
    while pos < n:
        if <uint8_t>p[pos] == kTagPickle:
            return True
        if not CElementLength(kAny, p + pos, n - pos, &used):
            return False  # malformed: reading it reports corruption, converting leaves it
        pos += used + 1
    return False


cdef bint _value_has_pickle(int layout, const char* p, size_t n):
    if layout == LEGACY_VALUE:
        return _is_pickle(p, n)
    if layout == LEGACY_MAP:
        return n > 1 and p[0] == 0 and _is_pickle(p + 1, n - 1)
    if layout == LEGACY_LIST:
        return _list_has_pickle(p, n)
    return False


cdef bytes _native_or_same(const char* p, size_t n, PickleGate gate):
    """The native ANY encoding of the element at p if it is a pickle of a value ANY can
    store now, else the element's bytes unchanged."""
    cdef string out
    cdef size_t used = 0
    if not _is_pickle(p, n):
        return PyBytes_FromStringAndSize(p, <Py_ssize_t>n)
    value = decode_whole(kAny, p, n, gate_ref(gate))
    try:
        encode_value(kAny, value, &out)
    except _SerializationError:  # an arbitrary object: it stays a pickle
        return PyBytes_FromStringAndSize(p, <Py_ssize_t>n)
    return PyBytes_FromStringAndSize(out.data(), <Py_ssize_t>out.size())


cdef bytes _convert_value(int layout, const char* p, size_t n, PickleGate gate):
    cdef size_t pos = 0, used = 0
    if layout == LEGACY_VALUE:
        return _native_or_same(p, n, gate)
    if layout == LEGACY_MAP:
        return b"\x00" + _native_or_same(p + 1, n - 1, gate)
    parts = []
    while pos < n:
        if not CElementLength(kAny, p + pos, n - pos, &used):
            raise _CorruptionError("a stored list element is malformed")
        parts.append(_native_or_same(p + pos, used, gate))
        pos += used + 1
    return b",".join(parts)


def convert_legacy_entries(NativeBackend backend, int cf, str kind, int ns_codec,
                           int uk_codec, int value_codec, PickleGate gate, bint convert) -> dict:
    """Counts (and with ``convert`` rewrites natively) the entries of one column family whose
    namespace, user key or value is a pickle; pickles are decoded through ``gate``.

    Returns {"pickled_keys", "pickled_values", "converted_keys", "converted_values"}: keys
    count namespaces and user keys (a timer's namespace included)."""
    cdef bint timers = kind == "timers"
    cdef bint has_uk = kind == "map" or kind == "sorted_map"
    cdef int layout = (LEGACY_NONE if timers or value_codec != kAny else
                       LEGACY_LIST if kind == "list" else LEGACY_MAP if has_uk else LEGACY_VALUE)
    cdef bint any_ns = ns_codec == kAny
    cdef bint any_uk = has_uk and uk_codec == kAny
    cdef CParsedKey pk
    cdef int64_t ts = 0
    cdef const char* p
    cdef const char* v
    cdef size_t n, vn
    cdef bint ns_pickled, uk_pickled, val_pickled
    cdef string new_key
    cdef bytes lower = b""
    cdef unique_ptr[CCompositeKeyBuilder] builder
    counts = {"pickled_keys": 0, "pickled_values": 0, "converted_keys": 0,
              "converted_values": 0}
    if not backend._has_schema or not (any_ns or any_uk or layout != LEGACY_NONE):
        return counts
    builder.reset(new CCompositeKeyBuilder(backend._prefix_bytes,
                                           backend._schema.variable_length()))
    while True:
        chunk = backend._raw_scan(cf, lower, b"", SCAN_CHUNK, False)
        for raw, value in chunk:
            p = PyBytes_AS_STRING(raw)
            n = <size_t>PyBytes_GET_SIZE(raw)
            v = PyBytes_AS_STRING(value)
            vn = <size_t>PyBytes_GET_SIZE(value)
            if timers:
                ok = CParseTimerKey(p, n, backend._prefix_bytes, backend._schema, &ts, &pk)
            else:
                ok = CParseStateKey(p, n, backend._prefix_bytes, backend._schema,
                                    <CCodec>ns_codec, has_uk, &pk)
            if not ok:
                raise _CorruptionError(f"stored key {raw[:40]!r} does not fit the state layout")
            ns_pickled = any_ns and _is_pickle(p + pk.ns_off, pk.ns_len)
            uk_pickled = any_uk and _is_pickle(p + pk.user_key_off, pk.user_key_len)
            val_pickled = _value_has_pickle(layout, v, vn)
            if not (ns_pickled or uk_pickled or val_pickled):
                continue
            counts["pickled_keys"] += ns_pickled + uk_pickled
            counts["pickled_values"] += val_pickled
            if not convert:
                continue
            new_value = _convert_value(layout, v, vn, gate) if val_pickled else value
            key = raw
            if ns_pickled or uk_pickled:
                ns = _native_or_same(p + pk.ns_off, pk.ns_len, gate)
                builder.get().SetKey(pk.key_group, p + pk.key_off, pk.key_len)
                if timers:
                    builder.get().BuildTimerKey(ts, ns, True, &new_key)
                    key = new_key
                else:
                    uk = (_native_or_same(p + pk.user_key_off, pk.user_key_len, gate)
                          if uk_pickled else raw[pk.user_key_off:])
                    key = builder.get().BuildWithUserKey(ns, CIsVariableLengthCodec(<CCodec>ns_codec),
                                                         PyBytes_AS_STRING(uk),
                                                         <size_t>PyBytes_GET_SIZE(uk))
                if key != raw and backend._raw_get(cf, key) is not None:
                    key = raw  # the native key exists already (e.g. "a" and a pickled str_)
                if key != raw:
                    counts["converted_keys"] += ns_pickled + uk_pickled
            if key == raw and new_value == value:
                continue
            counts["converted_values"] += new_value != value
            if key != raw:
                backend._raw_delete(cf, raw)
            backend._raw_put(cf, key, new_value)
        if len(chunk) < SCAN_CHUNK:
            return counts
        lower = chunk[len(chunk) - 1][0] + b"\x00"
