# Native state handles. Each access builds its RocksDB key from the backend's cached
# [key group][key] prefix plus this handle's namespace, releases the GIL around RocksDB and
# boxes the result straight from the pinned bytes. The facade classes in stateengine/state.py
# subclass these and add documentation and the logic that needs Python callables.

from libcpp.utility cimport move

cdef object _NullElementError = errors.NullElementError
cdef object _deepcopy = copy.deepcopy
cdef tuple _IMMUTABLE_TYPES = (int, float, str, bytes, bool, type(None), frozenset, complex)

# Namespaced raw helpers use this sentinel to mean "the handle's current namespace".
cdef object _CURRENT = object()

cdef enum:  # what NativeState._blocking repeats
    OP_GET = 0
    OP_PUT = 1
    OP_MERGE = 2
    OP_DELETE = 3


cdef class NativeState:
    cdef NativeBackend _backend
    cdef int _cf
    cdef CCodec _value_codec
    cdef CCodec _ns_codec
    cdef bint _ns_variable
    cdef string _ns
    cdef object _namespace
    cdef string _val
    cdef string _scratch_ns
    cdef PickleGate _gate
    cdef GateRef _gate_ref  # _gate, borrowed, for the decoders
    cdef bint _ttl  # the state has TTL: StateDB stamps, checks and strips (csrc/ttl.h)
    cdef RowCodec _vrow     # the value schema of a typed state (kStruct), else None
    # The _Batch of the last get_many, its keys built and sorted: the next batch call takes it,
    # and KeyBatch::Build keeps what it holds if the keys are the same (get, then put).
    cdef object _keys_memo
    cdef readonly object descriptor
    """The descriptor this state was registered with."""
    cdef readonly str name
    """The state's name."""

    def _bind(self, NativeBackend backend, int cf, descriptor, int value_codec, int ns_codec):
        self._backend = backend
        self._cf = cf
        self.descriptor = descriptor
        self.name = descriptor.name
        self._value_codec = <CCodec>value_codec
        self._ns_codec = <CCodec>ns_codec
        self._ttl = getattr(descriptor, "ttl", None) is not None
        self._ns_variable = CIsVariableLengthCodec(self._ns_codec)
        self._gate = PickleGate(PICKLE_ALLOW if backend._allow_pickle else PICKLE_REFUSE,
                                f"state '{self.name}'")
        self._gate_ref = <GateRef>self._gate
        self._namespace = None
        self._ns.clear()
        encode_value(self._ns_codec, None, &self._ns)

    def _set_value_row(self, RowCodec row):
        self._vrow = row

    @property
    def column_family(self) -> int:
        """The index of this state's RocksDB column family in its backend."""
        return self._cf

    def set_current_namespace(self, namespace) -> None:
        """Selects the namespace (Flink: window) that following calls on this handle use."""
        cdef string ns
        if self._ns_codec == kVoid and namespace is not None:
            raise _SerializationError(
                f"state '{self.name}' was declared without namespaces; pass "
                f"namespace_type=object to its descriptor to use namespace {namespace!r:.60}")
        encode_value(self._ns_codec, namespace, &ns)
        self._ns = move(ns)
        self._namespace = namespace

    def get_current_namespace(self):
        """The namespace set by the last ``set_current_namespace`` (None: the default one)."""
        return self._namespace

    cdef const string* _key(self) except NULL:
        self._backend.check_key()
        return &self._backend._builder.get().Build(self._ns, self._ns_variable)

    cdef const string* _key_in(self, object namespace) except NULL:
        """Key of the current key in another namespace (for namespace merging)."""
        if namespace is _CURRENT:
            return self._key()
        self._scratch_ns.clear()
        if self._ns_codec == kVoid and namespace is not None:
            raise _SerializationError(f"state '{self.name}' has no namespaces")
        encode_value(self._ns_codec, namespace, &self._scratch_ns)
        self._backend.check_key()
        return &self._backend._builder.get().Build(self._scratch_ns, self._ns_variable)

    # Point calls first try RocksDB's non-waiting variant with the GIL held: a memtable or
    # block-cache hit costs less than releasing and retaking the GIL (about 50 ns of a 250 ns
    # value()). Only when RocksDB would read a file or stall a write (Status::Incomplete, nothing
    # done) is the call repeated with the GIL released.

    # The non-waiting call holds the GIL from the caller's closed check (in _key()) to its
    # end, so close() cannot run meanwhile; the blocking retry releases the GIL and is fenced
    # (_enter/_leave, see _backend.pxi). The retry first copies the key and value: they live
    # in buffers of the backend and the handle, which another thread may rewrite while this
    # one is inside RocksDB. Values are read into a pin of the caller's own, for the same
    # reason.

    cdef int _get(self, const string* key, CPinnableSlice* pin) except -1:
        """Looks key up into pin; 1 if found, 0 if not."""
        cdef CStatus st = self._backend._db.get().GetNoWait(
            self._cf, CSlice(key.data(), key.size()), pin)
        if st.IsIncomplete():
            st = self._blocking(OP_GET, key[0], b"", pin)
        if st.ok():
            self._backend._db.get().CountReads(1)
            return 1
        if st.IsNotFound():
            self._backend._db.get().CountReads(1)
            return 0
        return check_status(st)

    cdef int _put(self, const string* key, const string* value) except -1:
        cdef CStatus st
        self._backend.check_writable()
        st = self._backend._db.get().PutNoWait(self._cf, CSlice(key.data(), key.size()),
                                               CSlice(value.data(), value.size()))
        if st.IsIncomplete():
            st = self._blocking(OP_PUT, key[0], value[0], NULL)
        if st.ok():
            self._backend._db.get().CountWrites(1)
        return check_status(st)

    cdef int _merge(self, const string* key, const string* value) except -1:
        cdef CStatus st
        self._backend.check_writable()
        st = self._backend._db.get().MergeNoWait(self._cf, CSlice(key.data(), key.size()),
                                                 CSlice(value.data(), value.size()))
        if st.IsIncomplete():
            st = self._blocking(OP_MERGE, key[0], value[0], NULL)
        if st.ok():
            self._backend._db.get().CountWrites(1)
        return check_status(st)

    cdef int _delete(self, const string* key) except -1:
        cdef CStatus st
        self._backend.check_writable()
        st = self._backend._db.get().DeleteNoWait(self._cf, CSlice(key.data(), key.size()))
        if st.IsIncomplete():
            st = self._blocking(OP_DELETE, key[0], b"", NULL)
        if st.ok():
            self._backend._db.get().CountDeletes(1)
        return check_status(st)

    cdef CStatus _blocking(self, int op, string key, string value, CPinnableSlice* pin):
        """The call repeated with the GIL released, fenced against close(), on copies of key
        and value (taken as arguments by value)."""
        cdef CStatus st
        cdef CStateDB* db = self._backend._enter()
        with nogil:
            if op == OP_GET:
                st = db.Get(self._cf, CSlice(key), pin)
            elif op == OP_PUT:
                st = db.Put(self._cf, CSlice(key), CSlice(value))
            elif op == OP_MERGE:
                st = db.Merge(self._cf, CSlice(key), CSlice(value))
            else:
                st = db.Delete(self._cf, CSlice(key))
        self._backend._leave()
        return st

    def clear(self) -> None:
        """Removes the value of the current key and namespace."""
        self._delete(self._key())

    # Raw access in any namespace of the current key; namespace merging is built on these.
    def _raw_get_in(self, namespace=_CURRENT):
        cdef CPinnableSlice pin
        if self._get(self._key_in(namespace), &pin):
            return PyBytes_FromStringAndSize(pin.data(), <Py_ssize_t>pin.size())
        return None

    def _raw_put_in(self, bytes value, namespace=_CURRENT):
        cdef string v = value
        self._put(self._key_in(namespace), &v)

    def _raw_merge_in(self, bytes value, namespace=_CURRENT):
        cdef string v = value
        self._merge(self._key_in(namespace), &v)

    def _raw_delete_in(self, namespace=_CURRENT):
        self._delete(self._key_in(namespace))

    # Stored bytes in any namespace, TTL stamps included: list namespace merges keep each
    # element's last access time, as Flink's TTL list state does.
    def _stored_get_in(self, namespace=_CURRENT):
        cdef CPinnableSlice pin
        cdef CStatus st
        cdef string k = self._key_in(namespace)[0]
        cdef CStateDB* db = self._backend._enter()
        with nogil:
            st = db.RawGet(self._cf, CSlice(k), &pin)
        self._backend._leave()
        if st.IsNotFound():
            return None
        check_status(st)
        return PyBytes_FromStringAndSize(pin.data(), <Py_ssize_t>pin.size())

    def _stored_merge_in(self, bytes value, namespace=_CURRENT):
        cdef CStatus st
        cdef string k = self._key_in(namespace)[0]
        cdef string v = value
        cdef CStateDB* db
        self._backend.check_writable()
        db = self._backend._enter()
        with nogil:
            st = db.RawMerge(self._cf, CSlice(k), CSlice(v))
        self._backend._leave()
        check_status(st)

    def _encode(self, value) -> bytes:
        cdef string out
        _enc_value(self, value, &out)
        return PyBytes_FromStringAndSize(out.data(), <Py_ssize_t>out.size())

    def _decode(self, bytes data):
        return _dec_value(self, PyBytes_AS_STRING(data), <size_t>PyBytes_GET_SIZE(data))


# A typed state's values go through its RowCodec; one pointer test on every other state.
cdef inline int _enc_value(NativeState s, object v, string* out) except -1:
    if s._vrow is None:
        return encode_value(s._value_codec, v, out)
    return s._vrow.encode(v, out)


cdef inline object _dec_value(NativeState s, const char* p, size_t n):
    if s._vrow is None:
        return decode_whole(s._value_codec, p, n, s._gate_ref)
    return s._vrow.decode_whole(p, n)


cdef class NativeValueState(NativeState):
    cdef object _default
    cdef bint _copy_default

    def _set_default(self, default):
        self._default = default
        self._copy_default = not isinstance(default, _IMMUTABLE_TYPES)

    def value(self):
        """The value of the current key and namespace, or the descriptor's default."""
        cdef CPinnableSlice pin
        if self._get(self._key(), &pin):
            return _dec_value(self, pin.data(), pin.size())
        return _deepcopy(self._default) if self._copy_default else self._default

    def update(self, value) -> None:
        """Sets the value; update(None) clears it, as in Flink."""
        if value is None:
            self._delete(self._key())
            return
        self._val.clear()
        _enc_value(self, value, &self._val)
        self._put(self._key(), &self._val)


cdef int _encode_list(NativeState s, object values, string* out) except -1:
    """Joins the encodings of values with ','; refuses None before anything is written."""
    cdef Py_ssize_t i = 0
    if isinstance(values, (str, bytes, dict)) or values is None:
        raise _SerializationError(
            f"list state '{s.name}' takes an iterable of elements, got {type(values).__name__}")
    for v in values:
        if v is None:
            raise _NullElementError(
                f"list state '{s.name}' does not accept None elements (element {i} is None); "
                f"nothing was written")
        if i:
            out.push_back(b',')
        _enc_value(s, v, out)
        i += 1
    return 0


cdef list decode_list(CCodec codec, RowCodec row, const char* p, size_t n, GateRef gate):
    cdef size_t pos = 0, used = 0
    cdef list out = []
    while pos < n:
        if row is None:
            out.append(decode_value(codec, p + pos, n - pos, &used, gate))
        else:
            out.append(row.decode(p + pos, n - pos, &used))
        pos += used
        if pos < n:
            if p[pos] != b',':
                raise _CorruptionError(
                    f"list element ended at byte {pos} without the ',' delimiter; the list was "
                    f"written with another serializer or is corrupted")
            pos += 1
            if pos == n:
                raise _CorruptionError("list ends with a dangling ',' delimiter")
    return out


cdef class NativeListState(NativeState):

    def get(self) -> list:
        """The elements of the current key and namespace ([] if none)."""
        cdef CPinnableSlice pin
        if self._get(self._key(), &pin):
            return decode_list(self._value_codec, self._vrow, pin.data(), pin.size(),
                               self._gate_ref)
        return []

    def add(self, value) -> None:
        """Appends one element through the merge operator (no read)."""
        if value is None:
            raise _NullElementError(
                f"list state '{self.name}' does not accept None elements; nothing was written")
        self._val.clear()
        _enc_value(self, value, &self._val)
        self._merge(self._key(), &self._val)

    def add_all(self, values) -> None:
        """Appends all elements in one merge; a None anywhere rejects the whole call."""
        self._val.clear()
        _encode_list(self, values, &self._val)
        if self._val.size():
            self._merge(self._key(), &self._val)

    def update(self, values) -> None:
        """Replaces the list; an empty list clears it."""
        self._val.clear()
        _encode_list(self, values, &self._val)
        if self._val.size():
            self._put(self._key(), &self._val)
        else:
            self._delete(self._key())

    def _decode_raw(self, bytes data) -> list:
        return decode_list(self._value_codec, self._vrow, PyBytes_AS_STRING(data),
                           <size_t>PyBytes_GET_SIZE(data), self._gate_ref)


cdef int _encode_number(NativeState s, object value, string* out) except -1:
    """Numeric operand for the native merge operators: int or float only."""
    cdef int64_t i
    cdef double d
    cdef int overflow = 0
    cdef bint is_int
    cdef type t = type(value)
    if t is int or (isinstance(value, (int, _np_integer)) and t is not bool and not isinstance(value, _np_bool)):
        i = PyLong_AsLongLongAndOverflow(int(value), &overflow)
        if overflow:
            raise _SerializationError(
                f"state '{s.name}' uses a native reducer over 64-bit integers; {value} does not fit")
        is_int = True
    elif t is float or isinstance(value, (float, _np_floating)):
        d = <double>float(value)
        is_int = False
    else:
        raise _SerializationError(
            f"state '{s.name}' uses a native numeric reducer, which takes int or float values, "
            f"not {type(value).__name__}; use a Python reduce function for other types")
    if s._value_codec == kI64:
        if not is_int:
            raise _SerializationError(f"state '{s.name}' holds integers (value_type=int); got {value!r}")
        CPutBE64(out, <uint64_t>i)
    elif s._value_codec == kF64:
        CPutBE64(out, CDoubleBits(<double>i if is_int else d))
    elif is_int:
        out.push_back(<char>kTagInt)
        CPutBE64(out, <uint64_t>i)
    else:
        out.push_back(<char>kTagFloat)
        CPutBE64(out, CDoubleBits(d))
    return 0


cdef class NativeReducingState(NativeState):
    cdef object _reduce
    cdef bint _native

    def _set_function(self, reduce_function, bint native):
        self._reduce = reduce_function
        self._native = native

    def get(self):
        """The reduced value of the current key and namespace, or None."""
        cdef CPinnableSlice pin
        if self._get(self._key(), &pin):
            return _dec_value(self, pin.data(), pin.size())
        return None

    def add(self, value) -> None:
        """Folds value into the state: a merge for native reducers, else read-modify-write."""
        cdef const string* key
        cdef CPinnableSlice pin
        if value is None:
            raise _NullElementError(f"reducing state '{self.name}' does not accept None")
        self._val.clear()
        if self._native:
            _encode_number(self, value, &self._val)
            self._merge(self._key(), &self._val)
            return
        key = self._key()
        if self._get(key, &pin):
            current = _dec_value(self, pin.data(), pin.size())
            value = self._reduce(current, value)
            key = self._key()  # the reduce function may have touched other state
        _enc_value(self, value, &self._val)
        self._put(key, &self._val)

    def _encode_operand(self, value) -> bytes:
        cdef string out
        _encode_number(self, value, &out)
        return PyBytes_FromStringAndSize(out.data(), <Py_ssize_t>out.size())


cdef class NativeAggregatingState(NativeState):
    cdef object _fn
    cdef bint _native

    def _set_function(self, aggregate_function, bint native):
        self._fn = aggregate_function
        self._native = native

    def get(self):
        """The aggregate's result for the current key and namespace, or None."""
        cdef CPinnableSlice pin
        if self._get(self._key(), &pin):
            acc = _dec_value(self, pin.data(), pin.size())
            return self._fn.get_result(acc)
        return None

    def add(self, value) -> None:
        """Adds value to the accumulator (AggregateFunction.add): a merge for native
        aggregates, else read-modify-write."""
        cdef const string* key
        cdef CPinnableSlice pin
        if value is None:
            raise _NullElementError(f"aggregating state '{self.name}' does not accept None")
        self._val.clear()
        if self._native:
            _encode_number(self, self._fn.native_operand(value), &self._val)
            self._merge(self._key(), &self._val)
            return
        key = self._key()
        if self._get(key, &pin):
            acc = _dec_value(self, pin.data(), pin.size())
        else:
            acc = self._fn.create_accumulator()
        acc = self._fn.add(value, acc)
        _enc_value(self, acc, &self._val)
        self._put(self._key(), &self._val)

    def _encode_operand(self, value) -> bytes:
        cdef string out
        _encode_number(self, value, &out)
        return PyBytes_FromStringAndSize(out.data(), <Py_ssize_t>out.size())


# ---- map state --------------------------------------------------------------------------

cdef enum:
    ENTRIES = 0
    KEYS = 1
    VALUES = 2


cdef int _encode_map_value(NativeState s, object value, string* out) except -1:
    """Flink's layout: a null flag byte, then the value if there is one."""
    if value is None:
        out.push_back(1)
        return 0
    out.push_back(0)
    return _enc_value(s, value, out)


cdef object _decode_map_value(CCodec codec, RowCodec row, const char* p, size_t n, GateRef gate):
    if n == 0:
        raise _CorruptionError("map value without its null flag byte")
    if p[0] == 1:
        return None
    if row is not None:
        return row.decode_whole(p + 1, n - 1)
    return decode_whole(codec, p + 1, n - 1, gate)


cdef inline object _dec_uk(NativeMapState s, const char* p, size_t n):
    if s._ukrow is None:
        return decode_whole(s._uk_codec, p, n, s._gate_ref)
    return s._ukrow.decode_whole(p, n)


cdef class NativeMapState(NativeState):
    cdef CCodec _uk_codec
    cdef RowCodec _ukrow  # the user key schema of a typed map, else None
    cdef string _uk

    def _set_user_key_codec(self, int codec, RowCodec row=None):
        self._uk_codec = <CCodec>codec
        self._ukrow = row

    cdef const string* _entry_key(self, object user_key) except NULL:
        self._uk.clear()
        if self._ukrow is None:
            encode_user_key(self._uk_codec, user_key, &self._uk, self.name)
        else:
            try:
                self._ukrow.encode(user_key, &self._uk)
            except _SerializationError as e:  # name the user key and its user_key_type
                raise _SerializationError(
                    f"map state '{self.name}': user key {user_key!r:.80} does not fit its "
                    f"user_key_type {self._ukrow.canonical} ({e}); pass user keys of that "
                    f"schema or declare the descriptor with another user_key_type") from None
        self._backend.check_key()
        return &self._backend._builder.get().BuildWithUserKey(
            self._ns, self._ns_variable, self._uk.data(), self._uk.size())

    cdef bytes _prefix(self):
        cdef const string* k = self._key()
        return PyBytes_FromStringAndSize(k.data(), <Py_ssize_t>k.size())

    def get(self, user_key):
        """The value under user_key, or None."""
        cdef CPinnableSlice pin
        if self._get(self._entry_key(user_key), &pin):
            return _decode_map_value(self._value_codec, self._vrow, pin.data(), pin.size(),
                                     self._gate_ref)
        return None

    def put(self, user_key, value) -> None:
        """Maps user_key to value for the current key and namespace."""
        self._val.clear()
        _encode_map_value(self, value, &self._val)
        self._put(self._entry_key(user_key), &self._val)

    def put_all(self, mapping) -> None:
        """Puts every (user key, value) of a dict or iterable of pairs in one atomic batch."""
        cdef vector[string] keys
        cdef vector[string] vals
        cdef string v
        cdef CStatus st
        cdef CStateDB* db
        items = mapping.items() if hasattr(mapping, "items") else mapping
        for uk, value in items:
            v.clear()
            _encode_map_value(self, value, &v)
            keys.push_back(self._entry_key(uk)[0])
            vals.push_back(v)
        if keys.empty():
            return
        self._backend.check_writable()
        db = self._backend._enter()
        with nogil:
            st = db.PutMany(self._cf, keys, vals)
        self._backend._leave()
        check_status(st)

    def contains(self, user_key) -> bool:
        """Whether the map of the current key and namespace has user_key."""
        cdef CPinnableSlice pin
        return self._get(self._entry_key(user_key), &pin) == 1

    def remove(self, user_key) -> None:
        """Removes user_key's entry (nothing happens if there is none)."""
        self._delete(self._entry_key(user_key))

    def clear(self) -> None:
        """Removes every entry of the current key and namespace."""
        cdef CStatus st
        cdef string prefix = self._key()[0]
        cdef CStateDB* db
        self._backend.check_writable()
        db = self._backend._enter()
        with nogil:
            st = db.DeletePrefix(self._cf, prefix)
        self._backend._leave()
        check_status(st)

    def is_empty(self) -> bool:
        """Whether the map of the current key and namespace has no entry."""
        prefix = self._prefix()
        if self._ttl:  # what reads see: expired entries do not count (NeverReturnExpired)
            return not self._backend._new_cursor(self._cf, prefix, _successor(prefix),
                                                 False).fill(1)
        return not self._backend._raw_scan(self._cf, prefix, _successor(prefix), 1, False)

    # Iteration sees the map as it is when keys()/values()/entries() (or head/tail/sub) is
    # called: the entries come from one RocksDB iterator pinned at that moment, so puts and
    # removes during the iteration neither appear in it nor end or lengthen it (like
    # iterating over list(d.items()), where a dict would raise instead).

    def entries(self):
        """(user key, value) pairs in stored order, as the map is at this call; fetched
        lazily in chunks; changes made while iterating are not seen."""
        prefix = self._prefix()
        return self._iter(prefix, prefix, _successor(prefix), False, ENTRIES)

    def items(self):
        """The same as entries(), as a dict names it."""
        return self.entries()

    def keys(self):
        """User keys in stored order, as the map is at this call (see entries())."""
        prefix = self._prefix()
        return self._iter(prefix, prefix, _successor(prefix), False, KEYS)

    def values(self):
        """Values in user-key order, as the map is at this call (see entries())."""
        prefix = self._prefix()
        return self._iter(prefix, prefix, _successor(prefix), False, VALUES)

    def __iter__(self):
        return self.keys()

    def _iter(self, bytes prefix, bytes lower, bytes upper, bint reverse, int what):
        cursor = self._backend._new_cursor(self._cf, lower, upper, reverse, True)
        return self._drain(cursor, len(prefix), what)

    def _drain(self, _ScanCursor cursor, size_t plen, int what):
        cdef CCodec vc = self._value_codec
        cdef RowCodec vrow = self._vrow
        cdef GateRef gate = self._gate_ref
        cdef NativeBackend be = self._backend
        cdef const CKeyValue* kv
        cdef size_t i
        while cursor.fill(SCAN_CHUNK):
            for i in range(cursor.buf.size()):
                if be._closed:
                    be._check_open()
                kv = &cursor.buf[i]
                if what == VALUES:
                    yield _decode_map_value(vc, vrow, kv.value.data(), kv.value.size(), gate)
                    continue
                if kv.key.size() < plen:
                    raise _CorruptionError("a map entry's key is shorter than its prefix")
                uk = _dec_uk(self, kv.key.data() + plen, kv.key.size() - plen)
                if what == KEYS:
                    yield uk
                else:
                    yield (uk, _decode_map_value(vc, vrow, kv.value.data(), kv.value.size(), gate))

    cdef object _one_entry(self, bint last):
        cdef bytes prefix = self._prefix()
        cdef _ScanCursor cursor
        if self._ttl:  # a read of the entry: skips, cleans up and restamps as reads do
            cursor = self._backend._new_cursor(self._cf, prefix, _successor(prefix), last, True)
            if not cursor.fill(1):
                return None
            k = _to_bytes(cursor.buf[0].key)
            v = _to_bytes(cursor.buf[0].value)
        else:
            chunk = self._backend._raw_scan(self._cf, prefix, _successor(prefix), 1, last)
            if not chunk:
                return None
            k, v = chunk[0]
        return (_dec_uk(self, PyBytes_AS_STRING(k) + len(prefix),
                        <size_t>(PyBytes_GET_SIZE(k) - len(prefix))),
                _decode_map_value(self._value_codec, self._vrow, PyBytes_AS_STRING(v),
                                  <size_t>PyBytes_GET_SIZE(v), self._gate_ref))


cdef bytes _successor(bytes prefix):
    cdef string s = prefix
    cdef string r = CPrefixSuccessor(s)
    return PyBytes_FromStringAndSize(r.data(), <Py_ssize_t>r.size())


cdef class NativeSortedMapState(NativeMapState):
    """Map state whose user keys iterate in value order (order-preserving encodings)."""

    cdef bytes _bound(self, bytes prefix, object user_key):
        cdef string out
        encode_user_key(self._uk_codec, user_key, &out, self.name)
        return prefix + PyBytes_FromStringAndSize(out.data(), <Py_ssize_t>out.size())

    def first_entry(self):
        """The entry with the smallest user key, or None."""
        return self._one_entry(False)

    def last_entry(self):
        """The entry with the largest user key, or None."""
        return self._one_entry(True)

    def head(self, to_key):
        """Entries with user key < to_key, in order, as the map is at this call."""
        prefix = self._prefix()
        return self._iter(prefix, prefix, self._bound(prefix, to_key), False, ENTRIES)

    def tail(self, from_key):
        """Entries with user key >= from_key, in order, as the map is at this call."""
        prefix = self._prefix()
        return self._iter(prefix, self._bound(prefix, from_key), _successor(prefix), False, ENTRIES)

    def sub(self, from_key, to_key):
        """Entries with from_key <= user key < to_key, in order, as the map is at this call."""
        prefix = self._prefix()
        return self._iter(prefix, self._bound(prefix, from_key), self._bound(prefix, to_key),
                          False, ENTRIES)
