# Batch state access (csrc/batch_ops.h). Whole numpy / Arrow columns are handed to C++ as
# buffer views; C++ encodes, hashes, range-checks, sorts and writes one WriteBatch (or reads
# with sorted MultiGets) with the GIL released. Columns C++ cannot read directly (object arrays
# of non-str values, tuple keys, codecs without a native encoder) are encoded here first, one
# C-API call per element and no Python-level code, and passed on as bytes.
# Batch calls use the handle's current namespace and never touch the backend's current key.

from cpython.buffer cimport (PyObject_GetBuffer, PyBuffer_Release, PyBUF_C_CONTIGUOUS,
                             PyBUF_WRITABLE)
import sys

from stateengine import typed_columns as _typed_columns

cdef const char* _EMPTY = b""
cdef object _np_empty = np.empty
cdef object _np_ndarray = np.ndarray
cdef object _np_asc = np.ascontiguousarray
cdef object _np_int64_dtype = np.dtype(np.int64)
cdef object _np_float64_dtype = np.dtype(np.float64)
cdef object _np_bool_dtype = np.dtype(np.bool_)

cdef enum:
    MODE_VALUE = 0       # ValueState values: None deletes (update(None) semantics)
    MODE_MAP_VALUE = 1   # map values: Flink's null flag byte, None allowed
    MODE_ELEMENT = 2     # list elements: None refused
    MODE_NUMBER = 3      # native reducer operands: int/float only, None refused
    MODE_USER_KEY = 4    # map user keys


cdef object _arrow():
    """pyarrow if the caller has imported it: an Arrow array cannot exist otherwise."""
    return sys.modules.get("pyarrow")


cdef class _Column:
    """One column in the layout batch_ops.h reads. It owns the bytes it encoded and keeps the
    arrays alive whose buffers its view points into."""
    cdef CColumnView view
    cdef string buf
    cdef vector[int64_t] offs
    cdef vector[CSlice] slices
    cdef vector[uint8_t] nulls
    cdef object keep

    cdef void finish_encoded(self):
        self.view.kind = kColOffsets64
        self.view.size = self.offs.size() - 1
        self.view.data = self.buf.data()
        self.view.offsets64 = self.offs.data()
        self.view.encoded = True
        if not self.nulls.empty():
            self.view.is_null = self.nulls.data()


cdef class _Batch:
    """The composite keys of one batch call (sorted, grouped) and, after a read, its values."""
    cdef CKeyBatch kb
    cdef CBatchValues vals
    cdef Py_ssize_t n
    cdef object keys
    cdef string ns  # a copy of the handle's namespace, which another thread may replace


# ---- turning user input into columns ------------------------------------------------------

cdef object _source(object x):
    """A 1-D numpy array or Arrow array for x; other sequences become object arrays."""
    pa = _arrow()
    if pa is not None:
        if isinstance(x, pa.ChunkedArray):
            return x.combine_chunks()
        if isinstance(x, pa.Array):
            return x
    if isinstance(x, _np_ndarray):
        arr = x
    elif isinstance(x, (str, bytes, bytearray, dict)) or x is None:
        raise TypeError(f"batch calls take arrays (numpy, pyarrow, pandas, list), not "
                        f"{type(x).__name__}")
    elif hasattr(x, "__array__") and not isinstance(x, (list, tuple)):
        arr = np.asarray(x)  # pandas Series/Index and other array-likes
    else:
        seq = x if isinstance(x, (list, tuple)) else list(x)
        arr = _np_empty(len(seq), dtype=object)
        for i in range(len(seq)):  # element-wise: numpy would turn a list of tuples into 2-D
            arr[i] = seq[i]
    if arr.ndim != 1:
        raise ValueError(f"batch calls take 1-D arrays, got shape {arr.shape}")
    return arr


cdef list _objects(object src):
    """The rows of a column source as Python objects (for encoding them one by one)."""
    if isinstance(src, _np_ndarray):
        return src.tolist()
    return src.to_pylist()


cdef object _row_item(object src, Py_ssize_t row):
    item = src[row]
    return item.as_py() if hasattr(item, "as_py") else item


cdef _Column _typed_column(object src):
    """A view of src's buffers if C++ can read them directly, else None."""
    cdef _Column col = _Column()
    cdef Py_ssize_t i, n
    cdef object item
    cdef const char* p
    cdef Py_ssize_t size
    pa = _arrow()
    if pa is not None and isinstance(src, pa.Array):
        if src.null_count:
            return None
        t = src.type
        types = pa.types
        if types.is_string(t) or types.is_binary(t) or types.is_large_string(t) or \
                types.is_large_binary(t):
            return _arrow_bytes_column(src, types.is_string(t) or types.is_large_string(t),
                                       types.is_large_string(t) or types.is_large_binary(t))
        if types.is_integer(t) or types.is_floating(t) or types.is_boolean(t):
            src = src.to_numpy(zero_copy_only=False)
        else:
            return None
    dt = src.dtype
    kind = dt.kind
    arr = src
    if kind == "i" or kind == "u":
        if dt is not _np_int64_dtype:
            if kind == "u" and dt.itemsize == 8 and len(src) and src.max() > 0x7FFFFFFFFFFFFFFF:
                return None  # the per-element path reports the overflow
            arr = src.astype(_np_int64_dtype)
        col.view.kind = kColInt64
    elif kind == "f":
        if dt is not _np_float64_dtype:
            arr = src.astype(_np_float64_dtype)
        col.view.kind = kColFloat64
    elif kind == "b":
        col.view.kind = kColBool
    elif kind == "U":
        if not dt.isnative:
            arr = src.astype(dt.newbyteorder("="))
        col.view.kind = kColUcs4
        col.view.width = arr.dtype.itemsize // 4
        col.view.text = True
    elif kind == "S":
        col.view.kind = kColFixedBytes
        col.view.width = arr.dtype.itemsize
    elif kind == "O":
        # str or bytes objects (all of one type) are read in place through their buffers.
        n = len(src)
        if n == 0:
            return None
        item = src[0]
        if type(item) is str:
            col.view.text = True
        elif type(item) is not bytes:
            return None
        col.slices.reserve(n)
        for item in src:
            if col.view.text:
                if type(item) is not str:
                    return None
                p = _AsUTF8AndSize(item, &size)
                if p == NULL:  # a lone surrogate: the per-row encoders raise the right error
                    PyErr_Clear()
                    return None
            else:
                if type(item) is not bytes:
                    return None
                p = PyBytes_AS_STRING(item)
                size = PyBytes_GET_SIZE(item)
            col.slices.push_back(CSlice(p, <size_t>size))
        col.view.kind = kColSlices
        col.view.slices = col.slices.data()
        col.view.size = n
        col.keep = src
        return col
    else:
        return None
    col.view.size = len(arr)
    if col.view.size:
        col.view.data = _contiguous_data(arr, col)
    else:
        col.keep = arr
    return col


cdef const char* _contiguous_data(object arr, _Column col) except NULL:
    """Address of arr's rows, copying them first if arr is strided; col keeps them alive.
    The buffer protocol costs a fraction of ndarray.ctypes, which matters for small batches."""
    cdef Py_buffer view
    cdef const char* p
    try:
        PyObject_GetBuffer(arr, &view, PyBUF_C_CONTIGUOUS)
    except (BufferError, ValueError):  # a strided view: copy its rows once
        arr = _np_asc(arr)
        PyObject_GetBuffer(arr, &view, PyBUF_C_CONTIGUOUS)
    p = <const char*>view.buf
    PyBuffer_Release(&view)
    col.keep = arr
    return p


cdef _Column _arrow_bytes_column(object a, bint text, bint large):
    cdef _Column col = _Column()
    cdef size_t offsets_addr
    cdef Py_ssize_t first = a.offset
    bufs = a.buffers()
    offsets, data = bufs[1], bufs[2]
    col.view.kind = kColOffsets64 if large else kColOffsets32
    col.view.size = len(a)
    col.view.text = text
    offsets_addr = offsets.address
    if large:
        col.view.offsets64 = (<const int64_t*>offsets_addr) + first
    else:
        col.view.offsets32 = (<const int32_t*>offsets_addr) + first
    if data is not None and data.size:
        col.view.data = <const char*><size_t>data.address
    else:
        col.view.data = _EMPTY  # all rows empty: Arrow may omit the data buffer
    col.keep = a
    return col


cdef _Column _key_column(NativeBackend be, object src):
    cdef _Column col
    cdef CCodec codec
    if not be._key_is_tuple and be._schema.columns().size() == 1:
        codec = be._schema.columns()[0]
        col = _typed_column(src)
        if col is not None and CCanEncodeColumn(col.view.kind, col.view.text, codec, True):
            return col
    col = _Column()  # tuple keys, object columns: the scalar key encoder, row by row
    col.offs.push_back(0)
    for key in _objects(src):
        be._encode_key(key, &col.buf)
        col.offs.push_back(<int64_t>col.buf.size())
    col.finish_encoded()
    col.keep = src
    return col


cdef _Column _value_column(NativeState s, object src, CCodec codec, int mode):
    cdef _Column col = _typed_column(src)
    cdef Py_ssize_t row = 0
    if col is not None:
        if mode == MODE_NUMBER:
            if CCanMergeNumbers(col.view.kind, codec):
                return col
        elif CCanEncodeColumn(col.view.kind, col.view.text, codec, False):
            return col
    col = _Column()
    col.offs.push_back(0)
    items = _objects(src)
    if mode == MODE_VALUE:
        col.nulls.resize(len(items), 0)
    for v in items:
        if v is None and mode == MODE_VALUE:
            col.nulls[row] = 1  # update(None) clears the value
        elif v is None and (mode == MODE_ELEMENT or mode == MODE_NUMBER):
            raise _NullElementError(
                f"state '{s.name}' does not accept None (row {row}); nothing was written")
        elif mode == MODE_MAP_VALUE:
            _encode_map_value(s, v, &col.buf)
        elif mode == MODE_NUMBER:
            _encode_number(s, v, &col.buf)
        elif mode == MODE_USER_KEY:
            encode_user_key(codec, v, &col.buf, s.name)
        else:
            encode_value(codec, v, &col.buf)
        col.offs.push_back(<int64_t>col.buf.size())
        row += 1
    col.finish_encoded()
    return col


cdef _Column _schema_column(NativeState s, RowCodec row, object values, int null_rows,
                            Py_ssize_t n, str what):
    """The encodings of a typed state's column (values or user keys): Arrow-convertible
    columns are encoded in C++ (typed_columns.conform, then encode_arrow_rows), rows of Python
    objects by the scalar encoder; everything is checked before anything is written."""
    cdef _Column col = _Column()
    cdef Py_ssize_t i
    label = f"state '{s.name}' {what}"
    arr, rows = _typed_columns.conform(row.type, values, label)
    size = len(arr) if arr is not None else len(rows)
    if size != n:
        raise ValueError(f"{n} keys but {size} {what}; pass one per key")
    if arr is not None:
        encode_arrow_rows(row, arr, null_rows, &col.buf, &col.offs, &col.nulls, label)
        col.finish_encoded()
        col.keep = arr
        return col
    col.offs.push_back(0)
    if null_rows == kNullRowsMark:
        col.nulls.resize(n, 0)
    for i in range(n):
        v = rows[i]
        if v is None:
            if null_rows == kNullRowsMark:
                col.nulls[i] = 1
            elif null_rows == kNullRowsMapFlag:
                col.buf.push_back(1)
            elif what == "values":
                raise _NullElementError(f"{label}: row {i} is None, which this state does not "
                                        f"accept; nothing was written")
            else:
                raise _SerializationError(f"{label}: row {i} is None; nothing was written")
        else:
            if null_rows == kNullRowsMapFlag:
                col.buf.push_back(0)
            try:
                row.encode(v, &col.buf)
            except _SerializationError as e:
                raise _SerializationError(f"{label}: row {i}: {e}; nothing was written") from None
        col.offs.push_back(<int64_t>col.buf.size())
    col.finish_encoded()
    return col


cdef list _typed_rows(NativeState s, RowCodec row, object values):
    """Typed values as Python objects (tuples for structs, as value() gives them), for the
    batch calls that hand each value to a Python function."""
    arr, rows = _typed_columns.conform(row.type, values, f"state '{s.name}' values")
    if arr is None:
        return rows
    return [None if b is None else row.decode_bytes(b) for b in encode_rows_from_arrow(row, arr)]


cdef tuple _rows_result(NativeState s, RowCodec row, _Batch b, int layout, object fill_value):
    """(pyarrow array with a row per key, found) for a typed state, decoded in C++."""
    cdef _ArrowOut out = _ArrowOut()
    cdef CRowError err
    cdef string fill
    cdef const string* fillp = NULL
    cdef cbool ok
    found = _np_empty(b.n, dtype=_np_bool_dtype)
    cdef uint8_t* fp = <uint8_t*>_output_data(found)
    if fill_value is not None:
        RowCodec.encode(row, fill_value, &fill)  # in the current schema, without a marker
        fillp = &fill
    with nogil:
        ok = CDecodeBatchToArrow(row.schema, row.versions, b.kb, b.vals, layout, fillp,
                                 &out.array, fp, &err)
    return decoded_array(row, out, err, ok, layout == kStoredList, f"state '{s.name}'"), found


cdef tuple _read_rows(NativeState s, RowCodec row, _Batch b, object fill_value):
    """_read and then _rows_result (kStoredValue), in one pass where the state allows it
    (ReadBatchToArrow: each value decoded as the read meets it, no copy of the values)."""
    cdef _ArrowOut out = _ArrowOut()
    cdef CRowError err
    cdef string fill
    cdef const string* fillp = NULL
    cdef cbool handled = False
    cdef CStatus st
    found = _np_empty(b.n, dtype=_np_bool_dtype)
    cdef uint8_t* fp = <uint8_t*>_output_data(found)
    if fill_value is not None:
        RowCodec.encode(row, fill_value, &fill)  # in the current schema, without a marker
        fillp = &fill
    cdef CStateDB* db = s._backend._enter()
    with nogil:
        st = CReadBatchToArrow(db, s._cf, row.schema, row.versions, b.kb, fillp, &out.array, fp,
                               &err, &handled)
    s._backend._leave()
    if not handled:
        _read(s, b)
        return _rows_result(s, row, b, kStoredValue, fill_value)
    if err.code == kRowOk:
        check_status(st)
    return decoded_array(row, out, err, err.code == kRowOk, False, f"state '{s.name}'"), found


cdef object _empty_rows(RowCodec row, bint list_of):
    pa = _pyarrow()
    return pa.array([], type=pa.list_(row.arrow_type) if list_of else row.arrow_type)


cdef int _refuse_nulls(NativeState s, object src) except -1:
    """COUNT ignores values but, like the scalar add(), refuses None."""
    pa = _arrow()
    if pa is not None and isinstance(src, pa.Array):
        if src.null_count:
            raise _NullElementError(f"state '{s.name}' does not accept None; nothing was written")
        return 0
    if src.dtype.kind == "O":
        for row, v in enumerate(src):
            if v is None:
                raise _NullElementError(
                    f"state '{s.name}' does not accept None (row {row}); nothing was written")
    return 0


# ---- building and checking batches ---------------------------------------------------------

cdef int _raise_batch_error(NativeState s, const CBatchError& err, object keys, object values,
                            str where) except -1:
    cdef NativeBackend be = s._backend
    cdef Py_ssize_t row = <Py_ssize_t>err.row
    src = keys if where == "key" else values
    what = _row_item(src, row) if src is not None and row < len(src) else None
    if err.code == kBatchKeyGroupOutOfRange:
        raise _KeyGroupOutOfRangeError(
            f"key {what!r:.80} (row {row}) belongs to key group {err.key_group}, outside this "
            f"backend's range [{be._kg_start}, {be._kg_end}] (max_parallelism "
            f"{be._max_parallelism}); nothing was written; route each key to the backend owning "
            f"its group (stateengine.spark does this)")
    if err.code == kBatchTooLarge:
        raise ValueError("a batch holds at most 2**32 - 1 rows; split it")
    if err.code == kBatchNoMemory:
        raise MemoryError(f"state '{s.name}': the batch's keys or values do not fit in memory; "
                          f"split it")
    if err.code == kBatchCorrupt:
        raise _CorruptionError(
            f"state '{s.name}': the stored value of row {row} is not a valid encoding of its "
            f"serializer")
    exc = _KeyTypeError if where == "key" else _SerializationError
    if err.code == kBatchValueOutOfRange:
        codec = (be._schema.columns()[0] if where == "key" else
                 (<NativeMapState>s)._uk_codec if where == "user key" else s._value_codec)
        raise exc(f"{where} {what!r:.80} (row {row}) does not fit the 32-bit "
                  f"'{_codec_name(codec)}' serializer; nothing was written")
    if err.code == kBatchInvalidText:
        raise exc(f"{where} {what!r:.80} (row {row}) is not valid Unicode text; nothing was "
                  f"written")
    raise exc(f"{where} {what!r:.80} (row {row}) cannot be encoded for state '{s.name}'; "
              f"nothing was written")


cdef _Batch _build(NativeState s, object keys, object user_keys, CCodec uk_codec):
    """Encodes, hashes, range-checks and sorts the keys of a batch (GIL released)."""
    cdef NativeBackend be = s._backend
    cdef _Batch b
    if s._keys_memo is not None:
        b = <_Batch>s._keys_memo  # taken, so no other call (or thread) shares it
        s._keys_memo = None
    else:
        b = _Batch()
    cdef _Column kcol, ucol = None
    cdef const CColumnView* uview = NULL
    cdef CBatchTarget target
    cdef CBatchError err
    cdef cbool ok
    usrc = None
    be._check_open()
    b.keys = _source(keys)
    b.n = len(b.keys)
    if b.n == 0:
        return b
    if not be._has_schema:
        be._on_first_key(_row_item(b.keys, 0))  # the first key decides, as in set_current_key
    kcol = _key_column(be, b.keys)
    if user_keys is not None and isinstance(s, NativeMapState) and \
            (<NativeMapState>s)._ukrow is not None:
        ucol = _schema_column(s, (<NativeMapState>s)._ukrow, user_keys, kNullRowsRefuse, b.n,
                              "user keys")
        uview = &ucol.view
    elif user_keys is not None:
        usrc = _source(user_keys)
        if len(usrc) != b.n:
            raise ValueError(f"{b.n} keys but {len(usrc)} user keys; pass one user key per key")
        ucol = _value_column(s, usrc, uk_codec, MODE_USER_KEY)
        uview = &ucol.view
    target.schema = &be._schema
    target.prefix_bytes = be._prefix_bytes
    target.max_parallelism = be._max_parallelism
    target.kg_start = be._kg_start
    target.kg_end = be._kg_end
    b.ns = s._ns
    target.ns = &b.ns
    target.ns_variable = s._ns_variable
    with nogil:
        ok = b.kb.Build(target, kcol.view, uview, uk_codec, &err)
    if not ok:
        _raise_batch_error(s, err, b.keys, usrc, "user key" if err.user_key else "key")
    return b


cdef object _keep_keys(NativeState s, _Batch b, object result):
    """Keeps b's built keys (not its values) for the state's next batch call; returns result."""
    b.vals.Release()
    b.keys = None
    s._keys_memo = b
    return result


cdef object _values_source(_Batch b, object values):
    src = _source(values)
    if len(src) != b.n:
        raise ValueError(f"{b.n} keys but {len(src)} values; pass one value per key")
    return src


BATCH_READ_MODES = ("auto", "point", "scan", "runs")


def _set_batch_read_mode(str mode) -> str:
    """How batch reads fetch keys, process-wide: "auto" (dense batches walked table file by
    table file where that returns what one merged iterator returns, else with that iterator;
    MultiGet the others), "point", "scan" (the merged iterator) or "runs" (file by file where
    it may, else the merged iterator), forced, for tests and measurements. Returns the
    previous mode."""
    if mode not in BATCH_READ_MODES:
        raise ValueError(f"batch read mode {mode!r}: one of {', '.join(BATCH_READ_MODES)}")
    return BATCH_READ_MODES[CSetBatchReadMode(BATCH_READ_MODES.index(mode))]


def _batch_read_counts() -> dict:
    """How many batch reads this process made each way: point (MultiGets), scan (the merged
    iterator) and runs (table file by table file)."""
    cdef uint64_t counts[3]
    CBatchReadCounts(counts)
    return {"point": counts[0], "scan": counts[1], "runs": counts[2]}


cdef int _read(NativeState s, _Batch b, bint write_back=True) except -1:
    """Reads the batch's distinct keys; write_back=False for the read of a read-modify-write
    (a state with TTL then neither cleans up nor restamps what it reads)."""
    cdef CStatus st
    cdef CStateDB* db = s._backend._enter()
    with nogil:
        st = CBatchGet(db, s._cf, b.kb, &b.vals, write_back)
    s._backend._leave()
    return check_status(st)


cdef int _write_status(NativeState s, const CStatus& st, const CBatchError& err, _Batch b,
                       object values) except -1:
    if err.code != kBatchOk:
        return _raise_batch_error(s, err, b.keys, values, "value")
    return check_status(st)


cdef tuple _typed_result(NativeState s, _Batch b, bint map_values, object fill):
    """(values, found) as int64/float64 arrays, decoded in C++, for BIGINT/DOUBLE states."""
    cdef CBatchError err
    cdef cbool ok
    cdef int64_t ifill = 0
    cdef double dfill = 0.0
    cdef CCodec codec = s._value_codec
    found = _np_empty(b.n, dtype=_np_bool_dtype)
    cdef uint8_t* fp = <uint8_t*>_output_data(found)
    cdef char* op
    if codec == kI64:
        out = _np_empty(b.n, dtype=_np_int64_dtype)
        op = _output_data(out)
        if type(fill) is int and -2**63 <= fill < 2**63:
            ifill = fill
        with nogil:
            ok = CScatterInt64(b.kb, b.vals, codec, map_values, ifill, <int64_t*>op, fp, &err)
    else:
        out = _np_empty(b.n, dtype=_np_float64_dtype)
        op = _output_data(out)
        if isinstance(fill, (int, float)) and type(fill) is not bool:
            dfill = <double>float(fill)
        with nogil:
            ok = CScatterFloat64(b.kb, b.vals, codec, map_values, dfill, <double*>op, fp, &err)
    if not ok:
        _raise_batch_error(s, err, b.keys, None, "key")
    return out, found


cdef char* _output_data(object arr) except NULL:
    """Address of a fresh (contiguous, writable) numpy array that the caller keeps alive."""
    cdef Py_buffer view
    cdef char* p
    PyObject_GetBuffer(arr, &view, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE)
    p = <char*>view.buf
    PyBuffer_Release(&view)
    return p


cdef inline const char* _group_data(_Batch b, uint32_t g, size_t* n):
    n[0] = b.vals.offsets[g + 1] - b.vals.offsets[g]
    return b.vals.data.data() + b.vals.offsets[g]


cdef tuple _empty_result(NativeState s, bint typed):
    if typed:
        dtype = np.int64 if s._value_codec == kI64 else np.float64
        return _np_empty(0, dtype=dtype), _np_empty(0, dtype=np.bool_)
    return _np_empty(0, dtype=object), _np_empty(0, dtype=np.bool_)


cdef inline bint _typed_codec(CCodec codec):
    return codec == kI64 or codec == kF64


# ---- value state ---------------------------------------------------------------------------

def _value_get_many(NativeValueState s, keys):
    cdef _Batch b = _build(s, keys, None, kVoid)
    cdef Py_ssize_t row
    cdef uint32_t g
    cdef size_t n
    cdef const char* p
    typed = _typed_codec(s._value_codec)
    if s._vrow is not None:
        if b.n == 0:
            return _empty_rows(s._vrow, False), _np_empty(0, dtype=np.bool_)
        return _keep_keys(s, b, _read_rows(s, s._vrow, b, s._default))
    if b.n == 0:
        return _empty_result(s, typed)
    _read(s, b)
    if typed:
        return _keep_keys(s, b, _typed_result(s, b, False, s._default))
    out = _np_empty(b.n, dtype=object)
    found = _np_empty(b.n, dtype=np.bool_)
    cdef object[::1] ov = out
    cdef uint8_t[::1] fv = found.view(np.uint8)
    cdef const uint32_t* group_of = b.kb.group_of().data()
    for row in range(b.n):
        g = group_of[row]
        fv[row] = b.vals.found[g]
        if fv[row]:
            p = _group_data(b, g, &n)
            ov[row] = decode_whole(s._value_codec, p, n, s._gate_ref)
        else:
            ov[row] = _deepcopy(s._default) if s._copy_default else s._default
    return out, found


def _value_put_many(NativeValueState s, keys, values):
    cdef _Batch b
    cdef CStatus st
    cdef CBatchError err
    cdef CStateDB* db
    s._backend.check_writable()  # a committed/aborted StateStore refuses writes
    b = _build(s, keys, None, kVoid)
    cdef _Column col
    if s._vrow is not None:
        col = _schema_column(s, s._vrow, values, kNullRowsMark, b.n, "values")
        if b.n == 0:
            return
        src = None
    else:
        if b.n == 0:
            _values_source(b, values)
            return
        src = _values_source(b, values)
        col = _value_column(s, src, s._value_codec, MODE_VALUE)
    db = s._backend._enter()
    with nogil:
        st = CBatchPut(db, s._cf, b.kb, col.view, s._value_codec, False, False, &err)
    s._backend._leave()
    _write_status(s, st, err, b, src)


# ---- list state ----------------------------------------------------------------------------

def _list_add_many(NativeListState s, keys, values):
    cdef _Batch b
    cdef CStatus st
    cdef CBatchError err
    cdef CStateDB* db
    s._backend.check_writable()  # a committed/aborted StateStore refuses writes
    b = _build(s, keys, None, kVoid)
    cdef _Column col
    if s._vrow is not None:
        col = _schema_column(s, s._vrow, values, kNullRowsRefuse, b.n, "values")
        src = None
    else:
        src = _values_source(b, values)
    if b.n == 0:
        return
    if s._vrow is None:
        col = _value_column(s, src, s._value_codec, MODE_ELEMENT)
    db = s._backend._enter()
    with nogil:
        st = CBatchMergeList(db, s._cf, b.kb, col.view, s._value_codec, &err)
    s._backend._leave()
    _write_status(s, st, err, b, src)


def _list_get_many(NativeListState s, keys):
    cdef _Batch b = _build(s, keys, None, kVoid)
    cdef Py_ssize_t row
    cdef uint32_t g
    cdef size_t n
    cdef const char* p
    cdef list out = []
    if s._vrow is not None:
        if b.n == 0:
            return _empty_rows(s._vrow, True)
        _read(s, b)
        return _rows_result(s, s._vrow, b, kStoredList, None)[0]
    if b.n == 0:
        return out
    _read(s, b)
    cdef const uint32_t* group_of = b.kb.group_of().data()
    for row in range(b.n):
        g = group_of[row]
        if b.vals.found[g]:
            p = _group_data(b, g, &n)
            out.append(decode_list(s._value_codec, None, p, n, s._gate_ref))
        else:
            out.append([])
    return out


# ---- reducing and aggregating state --------------------------------------------------------

def _merging_add_many(NativeState s, keys, values, bint native, int op, bint count,
                      bint aggregating, fn):
    """add() for every (key, value) row. Native functions: one pre-reduced merge per distinct
    key. Python functions: one read of the distinct keys, the function applied row by row in
    input order, one put per distinct key (nothing is written if the function raises)."""
    cdef _Batch b
    cdef CStatus st
    cdef CBatchError err
    cdef CStateDB* db
    s._backend.check_writable()  # a committed/aborted StateStore refuses writes
    b = _build(s, keys, None, kVoid)
    cdef _Column col
    if s._vrow is not None and not aggregating:
        # a reduce function gets the values as value() returns them; an aggregate's inputs
        # are not of the accumulator's schema, so they pass as they are
        values = _typed_rows(s, s._vrow, values)
    src = _values_source(b, values)
    if b.n == 0:
        return
    if native:
        if count:
            _refuse_nulls(s, src)
            col = _Column()
            col.view.size = b.n
        else:
            col = _value_column(s, src, s._value_codec, MODE_NUMBER)
        db = s._backend._enter()
        with nogil:
            st = CBatchMergeNumbers(db, s._cf, b.kb, col.view, s._value_codec, <CNumericOp>op,
                                    count, &err)
        s._backend._leave()
        return _write_status(s, st, err, b, src)
    _fold_with_python(s, b, src, aggregating, fn)


cdef int _fold_with_python(NativeState s, _Batch b, object src, bint aggregating,
                           object fn) except -1:
    cdef _Column col = _Column()
    cdef size_t g, i, n
    cdef const char* p
    cdef CStatus st
    cdef CBatchError err
    cdef CStateDB* db
    cdef bint have
    items = _objects(src)
    for row, v in enumerate(items):
        if v is None:
            raise _NullElementError(
                f"state '{s.name}' does not accept None (row {row}); nothing was written")
    _read(s, b, False)
    cdef const uint32_t* order = b.kb.order().data()
    cdef const uint32_t* start = b.kb.group_start().data()
    col.offs.push_back(0)
    for g in range(b.kb.groups()):
        have = b.vals.found[g]
        if have:
            p = _group_data(b, <uint32_t>g, &n)
            acc = _dec_value(s, p, n)
        elif aggregating:
            acc = fn.create_accumulator()
        else:
            acc = None
        for i in range(start[g], start[g + 1]):
            v = items[order[i]]
            if aggregating:
                acc = fn.add(v, acc)
            else:
                acc = fn(acc, v) if have else v
                have = True
        _enc_value(s, acc, &col.buf)
        col.offs.push_back(<int64_t>col.buf.size())
    col.finish_encoded()
    db = s._backend._enter()
    with nogil:
        st = CBatchPut(db, s._cf, b.kb, col.view, s._value_codec, False, True, &err)
    s._backend._leave()
    return _write_status(s, st, err, b, src)


def _merging_get_many(NativeState s, keys, bint typed, fn):
    """(values, found): typed arrays for native functions over BIGINT/DOUBLE, else objects
    (None where nothing is stored; fn.get_result applied for aggregates)."""
    cdef _Batch b = _build(s, keys, None, kVoid)
    cdef Py_ssize_t row
    cdef uint32_t g
    cdef size_t n
    cdef const char* p
    typed = typed and _typed_codec(s._value_codec)
    if s._vrow is not None and fn is None:
        if b.n == 0:
            return _empty_rows(s._vrow, False), _np_empty(0, dtype=np.bool_)
        return _read_rows(s, s._vrow, b, None)
    if b.n == 0:
        return _empty_result(s, typed)
    _read(s, b)
    if typed:
        return _typed_result(s, b, False, 0)
    out = _np_empty(b.n, dtype=object)
    found = _np_empty(b.n, dtype=np.bool_)
    cdef object[::1] ov = out
    cdef uint8_t[::1] fv = found.view(np.uint8)
    cdef const uint32_t* group_of = b.kb.group_of().data()
    for row in range(b.n):
        g = group_of[row]
        fv[row] = b.vals.found[g]
        if fv[row]:
            p = _group_data(b, g, &n)
            acc = _dec_value(s, p, n)
            ov[row] = acc if fn is None else fn.get_result(acc)
        else:
            ov[row] = None
    return out, found


# ---- map state -----------------------------------------------------------------------------

def _map_put_many(NativeMapState s, keys, user_keys, values):
    cdef _Batch b
    cdef CStatus st
    cdef CBatchError err
    cdef CStateDB* db
    s._backend.check_writable()  # a committed/aborted StateStore refuses writes
    b = _build(s, keys, user_keys, s._uk_codec)
    cdef _Column col
    if s._vrow is not None:
        col = _schema_column(s, s._vrow, values, kNullRowsMapFlag, b.n, "values")
        src = None
    else:
        src = _values_source(b, values)
    if b.n == 0:
        return
    if s._vrow is None:
        col = _value_column(s, src, s._value_codec, MODE_MAP_VALUE)
    db = s._backend._enter()
    with nogil:
        st = CBatchPut(db, s._cf, b.kb, col.view, s._value_codec, True, False, &err)
    s._backend._leave()
    _write_status(s, st, err, b, src)


def _map_get_many(NativeMapState s, keys, user_keys):
    cdef _Batch b = _build(s, keys, user_keys, s._uk_codec)
    cdef Py_ssize_t row
    cdef uint32_t g
    cdef size_t n
    cdef const char* p
    typed = _typed_codec(s._value_codec)
    if s._vrow is not None:
        if b.n == 0:
            return _empty_rows(s._vrow, False), _np_empty(0, dtype=np.bool_)
        _read(s, b)
        return _rows_result(s, s._vrow, b, kStoredMapValue, None)
    if b.n == 0:
        return _empty_result(s, typed)
    _read(s, b)
    if typed:
        return _typed_result(s, b, True, 0)
    out = _np_empty(b.n, dtype=object)
    found = _np_empty(b.n, dtype=np.bool_)
    cdef object[::1] ov = out
    cdef uint8_t[::1] fv = found.view(np.uint8)
    cdef const uint32_t* group_of = b.kb.group_of().data()
    for row in range(b.n):
        g = group_of[row]
        fv[row] = b.vals.found[g]
        if fv[row]:
            p = _group_data(b, g, &n)
            ov[row] = _decode_map_value(s._value_codec, None, p, n, s._gate_ref)
        else:
            ov[row] = None
    return out, found


# ---- the bare RocksDB cost of a batch (csrc/rocksdb_floor.h), for bench/ -------------------

_FLOOR_OPS = {"point_get": 0, "multiget": 1, "point_put": 2, "write_batch": 3}


def _rocksdb_floor(NativeState s, keys, str op) -> float:
    """Seconds RocksDB alone takes for ``op`` over the composite keys of ``keys`` in this
    handle's namespace: ``point_get`` / ``point_put`` one call per row in input order (a scalar
    loop without Python), ``multiget`` / ``write_batch`` one sorted call per batch (what the
    batch calls do). Puts rewrite the stored values, so the state is unchanged. Benchmarks
    only: it says how much of a state call is RocksDB's and how much batching can gain."""
    cdef int code = _FLOOR_OPS.get(op, -1)
    cdef double seconds = 0.0
    cdef CStatus st
    cdef CStateDB* db
    if code < 0:
        raise ValueError(f"unknown floor operation {op!r}; one of {sorted(_FLOOR_OPS)}")
    if code >= 2:
        s._backend.check_writable()
    cdef _Batch b = _build(s, keys, None, kVoid)
    if b.n == 0:
        return 0.0
    db = s._backend._enter()
    with nogil:
        st = CMeasureFloor(db, s._cf, b.kb, code, &seconds)
    s._backend._leave()
    check_status(st)
    return seconds
