# NativeBackend: one RocksDB instance plus the composite-key builder of the current key.
# The Python class stateengine.backend.KeyedStateBackend subclasses it and adds registration,
# snapshots and the rest of the facade; everything per-access stays here.

cdef object _NoCurrentKeyError = errors.NoCurrentKeyError
cdef object _KeyGroupOutOfRangeError = errors.KeyGroupOutOfRangeError
cdef object _IllegalStoreStateError = errors.IllegalStoreStateError

cdef enum:
    SCAN_CHUNK = 1024


def configure_memory(size_t budget_bytes, double write_buffer_ratio=0.5):
    """Sets the process-wide budget shared by every backend's block cache and memtables."""
    if budget_bytes < (4 << 20):
        raise ValueError(f"memory budget {budget_bytes} is below the 4 MiB minimum")
    if not 0.05 <= write_buffer_ratio <= 0.9:
        raise ValueError(f"write_buffer_ratio must lie in [0.05, 0.9], got {write_buffer_ratio}")
    CMemoryBudget.Instance().Configure(budget_bytes, write_buffer_ratio)


def configure_bloom_filters(bint bottommost_level=False):
    """Whether backends opened from now on keep Bloom filters for their bottommost level.

    Off by default (RocksDB's ``optimize_filters_for_hits``): keyed state is mostly read for
    keys that exist, and those live in the last level, where a filter probe only adds a cache
    miss to every lookup. Lookups of absent keys are still filtered in every level above it.
    Turn it on for states mostly asked about keys they do not hold (deduplication of new
    events) once they outgrow memory, so such misses never read a data block.
    """
    CStateDB.SetBottommostFilters(bottommost_level)


def memory_usage() -> dict:
    """Bytes the shared budget holds now: ``cache`` (block cache charge, memtables included),
    ``memtables``, ``cache_blocks`` (resident bytes of cached blocks, which live in their own
    slabs) and ``cache_capacity`` (the budget minus the share kept for RocksDB's memory outside
    the cache)."""
    cdef CMemoryBudget* b = &CMemoryBudget.Instance()
    return {"budget": b.bytes(), "cache_capacity": b.cache_capacity(),
            "write_buffer_ratio": b.write_buffer_ratio(),
            "cache": b.CacheUsage(), "memtables": b.MemtableUsage(),
            "cache_blocks": b.CacheBlockBytes()}


cdef inline bytes _to_bytes(const string& s):
    return PyBytes_FromStringAndSize(s.data(), <Py_ssize_t>s.size())


cdef class NativeBackend:
    cdef unique_ptr[CStateDB] _db
    cdef unique_ptr[CCompositeKeyBuilder] _builder
    cdef CKeySchema _schema
    cdef bint _has_schema
    cdef bint _key_is_tuple
    cdef bint _single_i64
    cdef bint _single_str
    cdef bint _closed
    cdef int32_t _max_parallelism
    cdef int32_t _kg_start
    cdef int32_t _kg_end
    cdef int _prefix_bytes
    cdef string _keybuf
    cdef object _current_key
    cdef tuple _key_codecs
    cdef object _sealed  # None, or why writes are refused (a committed/aborted StateStore)

    def __cinit__(self):
        self._closed = True

    # ---- lifecycle ------------------------------------------------------------------------

    def _native_open(self, str path, int max_parallelism, int kg_start, int kg_end,
                     list cf_specs, bint create_if_missing=True):
        """Opens RocksDB at path; without create_if_missing the database and every column
        family of cf_specs must already exist there (a restored directory)."""
        cdef vector[CColumnFamilySpec] specs
        cdef string cpath = path.encode("utf-8")
        cdef CStatus st
        for name, merge_kind, numeric_op, numeric_codec in cf_specs:
            specs.push_back(CMakeColumnFamilySpec(name.encode("utf-8"), merge_kind, numeric_op,
                                                  numeric_codec))
        with nogil:
            st = CStateDB.Open(cpath, specs, &self._db, create_if_missing)
        check_status(st)
        self._max_parallelism = max_parallelism
        self._kg_start = kg_start
        self._kg_end = kg_end
        self._prefix_bytes = CKeyGroupPrefixBytes(max_parallelism)
        self._closed = False

    def _native_close(self):
        cdef CStatus st
        if self._closed:
            return
        self._closed = True
        self._current_key = None
        with nogil:
            st = self._db.get().Close()
        self._db.reset()
        check_status(st)

    @property
    def closed(self) -> bool:
        return self._closed

    def _ensure_open(self) -> None:
        """Raises BackendClosedError after close(), for facade calls that would otherwise not
        reach RocksDB (cached handles, lazy iterators)."""
        self._check_open()

    cdef inline int _check_open(self) except -1:
        if self._closed:
            raise _BackendClosedError(
                "the backend is closed; open a new KeyedStateBackend (or restore one) to use state")
        return 0

    cdef inline int check_writable(self) except -1:
        if self._sealed is not None:
            raise _IllegalStoreStateError(self._sealed)
        return 0

    def _seal(self, str reason):
        """Refuses every later write with IllegalStoreStateError(reason); reads still work."""
        self._sealed = reason

    def _unseal(self):
        self._sealed = None

    def _native_estimate_keys(self) -> int:
        cdef uint64_t n = 0
        self._check_open()
        with nogil:
            n = self._db.get().EstimateNumKeys()
        return n

    cdef inline int check_key(self) except -1:
        if self._closed:
            self._check_open()
        if not self._has_schema or not self._builder.get().has_key():
            raise _NoCurrentKeyError(
                "keyed state was accessed before set_current_key(); set the key of the element "
                "being processed first")
        return 0

    # ---- key schema and current key -------------------------------------------------------

    def _native_set_key_codecs(self, tuple codecs, bint is_tuple):
        cdef vector[CCodec] cols
        for c in codecs:
            cols.push_back(<CCodec><int>c)
        self._schema = CKeySchema(cols)
        self._builder.reset(new CCompositeKeyBuilder(self._prefix_bytes,
                                                     self._schema.variable_length()))
        self._key_codecs = codecs
        self._key_is_tuple = is_tuple
        self._single_i64 = not is_tuple and cols.size() == 1 and cols[0] == kI64
        self._single_str = not is_tuple and cols.size() == 1 and cols[0] == kStr
        self._has_schema = True

    @property
    def key_codecs(self):
        return self._key_codecs if self._has_schema else None

    @property
    def key_is_tuple(self) -> bool:
        return self._key_is_tuple

    def _on_first_key(self, key):  # overridden by the facade
        self._native_set_key_codecs(infer_key_codecs(key), isinstance(key, tuple))

    def set_current_key(self, key):
        """Makes key the key that every state handle of this backend reads and writes."""
        cdef int64_t i
        cdef int overflow = 0
        cdef int32_t h = 0
        cdef int32_t kg
        cdef Py_ssize_t n
        cdef const char* p
        if self._closed:
            self._check_open()
        self._keybuf.clear()
        if self._single_i64 and type(key) is int:
            i = PyLong_AsLongLongAndOverflow(key, &overflow)
            if overflow:
                raise _KeyTypeError(f"key {key} does not fit in a 64-bit bigint key")
            CPutBE64(&self._keybuf, <uint64_t>i)
            h = CSparkHashLong(i, kSparkHashSeed)
        elif self._single_str and type(key) is str:
            p = PyUnicode_AsUTF8AndSize(key, &n)
            CPutVarint(&self._keybuf, <uint64_t>n)
            self._keybuf.append(p, <size_t>n)
            h = CSparkHashBytes(p, <size_t>n, kSparkHashSeed)
        else:
            if not self._has_schema:
                self._on_first_key(key)
            self._encode_key(key, &self._keybuf)
            if not self._schema.Hash(self._keybuf.data(), self._keybuf.size(), &h):
                raise _KeyTypeError(f"key {key!r:.80} could not be hashed")
        kg = CKeyGroupForHash(h, self._max_parallelism)
        if kg < self._kg_start or kg > self._kg_end:
            raise _KeyGroupOutOfRangeError(
                f"key {key!r:.80} belongs to key group {kg}, outside this backend's range "
                f"[{self._kg_start}, {self._kg_end}] (max_parallelism {self._max_parallelism}); "
                f"route each key to the backend owning its group (stateengine.spark does this)")
        self._builder.get().SetKey(kg, self._keybuf.data(), self._keybuf.size())
        self._current_key = key

    cdef int _encode_key(self, object key, string* out) except -1:
        cdef const vector[CCodec]* cols = &self._schema.columns()
        cdef size_t i
        if self._key_is_tuple:
            if type(key) is not tuple or len(key) != cols.size():
                raise _KeyTypeError(
                    f"key {key!r:.80} does not match the backend's key type, a tuple of "
                    f"{cols.size()} columns ({', '.join(_codec_name(c) for c in self._key_codecs)})")
            for i in range(cols.size()):
                encode_key_column(cols[0][i], key[i], out)
        else:
            if type(key) is tuple:
                raise _KeyTypeError(
                    f"key {key!r:.80} is a tuple but the backend's keys are single "
                    f"'{_codec_name(cols[0][0])}' values")
            encode_key_column(cols[0][0], key, out)
        return 0

    def get_current_key(self):
        """The key set by the last successful set_current_key (None before the first)."""
        return self._current_key

    def get_current_key_group(self) -> int:
        self.check_key()
        return self._builder.get().key_group()

    def key_group_of(self, key) -> int:
        """The key group of key under this backend's key type and max parallelism."""
        cdef string buf
        cdef int32_t h
        if not self._has_schema:
            return CKeyGroupForHash(spark_hash(key), self._max_parallelism)
        self._encode_key(key, &buf)
        if not self._schema.Hash(buf.data(), buf.size(), &h):
            raise _KeyTypeError(f"key {key!r:.80} could not be hashed")
        return CKeyGroupForHash(h, self._max_parallelism)

    # ---- column families ------------------------------------------------------------------

    def _native_create_cf(self, str name, int merge_kind, int numeric_op, int numeric_codec) -> int:
        cdef int index = -1
        cdef CStatus st
        cdef CColumnFamilySpec spec = CMakeColumnFamilySpec(name.encode("utf-8"), merge_kind,
                                                            numeric_op, numeric_codec)
        self._check_open()
        with nogil:
            st = self._db.get().CreateColumnFamily(spec, &index)
        check_status(st)
        return index

    def _native_find_cf(self, str name) -> int:
        self._check_open()
        return self._db.get().FindColumnFamily(name.encode("utf-8"))

    def _native_count(self, int cf, bytes lower=b"", bytes upper=b"") -> int:
        cdef uint64_t n = 0
        cdef CStatus st
        cdef string lo = lower, hi = upper
        self._check_open()
        with nogil:
            st = self._db.get().Count(cf, lo, hi, &n)
        check_status(st)
        return n

    def _native_flush(self):
        cdef CStatus st
        self._check_open()
        with nogil:
            st = self._db.get().Flush()
        check_status(st)

    def _native_compact(self):
        cdef CStatus st
        self._check_open()
        with nogil:
            st = self._db.get().CompactAll()
        check_status(st)

    def _native_delete_range(self, int cf, bytes begin, bytes end):
        cdef CStatus st
        cdef string b = begin, e = end
        self._check_open()
        with nogil:
            st = self._db.get().DeleteRange(cf, CSlice(b), CSlice(e))
        check_status(st)

    # ---- raw access (tests, snapshot tooling, state readers) --------------------------------

    def _raw_scan(self, int cf, bytes lower=b"", bytes upper=b"", size_t limit=0,
                  bint reverse=False) -> list:
        """Raw (key, value) pairs of a column family with lower <= key < upper."""
        cdef vector[CKeyValue] out
        cdef CStatus st
        cdef string lo = lower, hi = upper
        self._check_open()
        with nogil:
            st = self._db.get().Scan(cf, lo, hi, limit, reverse, &out)
        check_status(st)
        return [(_to_bytes(kv.key), _to_bytes(kv.value)) for kv in out]

    def _raw_get(self, int cf, bytes key):
        cdef CPinnableSlice pin
        cdef CStatus st
        cdef string k = key
        self._check_open()
        with nogil:
            st = self._db.get().Get(cf, CSlice(k), &pin)
        if st.IsNotFound():
            return None
        check_status(st)
        return PyBytes_FromStringAndSize(pin.data(), <Py_ssize_t>pin.size())

    def _raw_put(self, int cf, bytes key, bytes value):
        cdef CStatus st
        cdef string k = key, v = value
        self._check_open()
        with nogil:
            st = self._db.get().Put(cf, CSlice(k), CSlice(v))
        check_status(st)

    def _raw_merge(self, int cf, bytes key, bytes value):
        cdef CStatus st
        cdef string k = key, v = value
        self._check_open()
        with nogil:
            st = self._db.get().Merge(cf, CSlice(k), CSlice(v))
        check_status(st)

    def _raw_delete(self, int cf, bytes key):
        cdef CStatus st
        cdef string k = key
        self._check_open()
        with nogil:
            st = self._db.get().Delete(cf, CSlice(k))
        check_status(st)

    def _parse_state_key(self, bytes raw, int ns_codec, bint has_user_key):
        """(key group, key, namespace bytes, user key bytes) of a raw state key."""
        cdef CParsedKey pk
        cdef const char* p = PyBytes_AS_STRING(raw)
        if not self._has_schema:
            raise _NoCurrentKeyError("the backend has no key type yet")
        if not CParseStateKey(p, <size_t>len(raw), self._prefix_bytes, self._schema,
                              <CCodec>ns_codec, has_user_key, &pk):
            raise _CorruptionError(f"stored key {raw[:40]!r} does not fit the state layout")
        return (pk.key_group, decode_key(self._schema, self._key_is_tuple, p + pk.key_off, pk.key_len),
                raw[pk.ns_off:pk.ns_off + pk.ns_len], raw[pk.user_key_off:])

    def _native_iter_keys(self, int cf, int ns_codec, bytes ns, bint has_user_key):
        """Yields each key that has an entry in namespace ns, once, in storage order."""
        cdef CParsedKey pk
        cdef const char* p
        cdef size_t n
        cdef bytes lower = b""
        cdef bytes last_key = None
        if not self._has_schema:
            return
        while True:
            chunk = self._raw_scan(cf, lower, b"", SCAN_CHUNK, False)
            for raw, _ in chunk:
                p = PyBytes_AS_STRING(raw)
                n = <size_t>PyBytes_GET_SIZE(raw)
                if not CParseStateKey(p, n, self._prefix_bytes, self._schema, <CCodec>ns_codec,
                                      has_user_key, &pk):
                    raise _CorruptionError(f"stored key {raw[:40]!r} does not fit the state layout")
                if raw[pk.ns_off:pk.ns_off + pk.ns_len] != ns:
                    continue
                key_bytes = raw[:pk.key_off + pk.key_len]
                if key_bytes == last_key:
                    continue
                last_key = key_bytes
                yield decode_key(self._schema, self._key_is_tuple, p + pk.key_off, pk.key_len)
            if len(chunk) < SCAN_CHUNK:
                return
            lower = chunk[len(chunk) - 1][0] + b"\x00"
