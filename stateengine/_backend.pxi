# NativeBackend: one RocksDB instance plus the composite-key builder of the current key.
# The Python class stateengine.backend.KeyedStateBackend subclasses it and adds registration,
# snapshots and the rest of the facade; everything per-access stays here.
#
# Thread model. Any thread may call into a backend; the GIL serializes the bindings except
# where a call releases it around RocksDB. Such a call is fenced: _enter() (GIL held) refuses
# it once close() began and counts it in _inflight, _leave() uncounts it when the GIL is back.
# close() marks the backend closed, asks running snapshot writes to stop, waits (GIL released)
# until no call is inside RocksDB, then StateDB::Close frees every pinned iterator (scan
# cursors, full snapshots) before RocksDB closes. Point calls that RocksDB answers without
# waiting hold the GIL from their closed check to their end, so they need no fence.

from posix.unistd cimport usleep

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


DEFAULT_BATCH_INGEST_MIN_KEYS = kDefaultBatchIngestMinKeys  # csrc/batch_ingest.h


def configure_batch_ingest(min_keys=DEFAULT_BATCH_INGEST_MIN_KEYS) -> int:
    """Batch puts (``put_many``, and the typed states of ``map_with_state``) of at least
    ``min_keys`` distinct keys are written as one table file and ingested into RocksDB, instead
    of going through the memtable; ``0`` sends every batch through the memtable. Returns the
    previous threshold. Process-wide, for puts from now on.

    The batch's keys are already sorted, which is all a table file needs, so ingesting saves
    the memtable insert of each key now and the flush of the same entries at the commit (a
    quarter of the state's CPU per key at 400k to 2M keys a batch). A put is ingested only as
    the first write since the column family's last flush and where its file lands as a
    flush's or a compaction's table would (level 0 over existing state, the last level into an
    empty one; never below a level holding tables); other puts go through the memtable. The
    same threshold applies to the key groups a rescaling restore copies from another
    partition's checkpoint (per column family). The environment variable
    ``STATEENGINE_BATCH_INGEST_MIN_KEYS`` sets it when stateengine is imported (in Spark, set
    it on the executors: ``spark.executorEnv.STATEENGINE_BATCH_INGEST_MIN_KEYS``)."""
    if isinstance(min_keys, bool) or not isinstance(min_keys, int) or min_keys < 0:
        raise ValueError(f"min_keys must be an int >= 0 (0: never ingest), got {min_keys!r}")
    return CSetBatchIngestMinKeys(min_keys)


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


def _cache_slabs_mapped() -> int:
    """Slabs the block allocator has mapped in this process (tests)."""
    return CMemoryBudget.Instance().CacheSlabsMapped()


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
    cdef bint _closing
    cdef int _inflight  # calls inside RocksDB without the GIL (changed with the GIL held)
    cdef int32_t _max_parallelism
    cdef int32_t _kg_start
    cdef int32_t _kg_end
    cdef int _prefix_bytes
    cdef string _keybuf
    cdef object _current_key
    cdef tuple _key_codecs
    cdef object _sealed  # None, or why writes are refused (a committed/aborted StateStore)
    cdef public bint _allow_pickle  # readers of this backend may unpickle (PickleGate)

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
        for name, merge_kind, numeric_op, numeric_codec, ttl_layout in cf_specs:
            specs.push_back(CMakeColumnFamilySpec(name.encode("utf-8"), merge_kind, numeric_op,
                                                  numeric_codec, ttl_layout))
        with nogil:
            st = CStateDB.Open(cpath, specs, &self._db, create_if_missing)
        check_status(st)
        self._max_parallelism = max_parallelism
        self._kg_start = kg_start
        self._kg_end = kg_end
        self._prefix_bytes = CKeyGroupPrefixBytes(max_parallelism)
        self._closed = False

    def _native_close(self):
        """Closes RocksDB once no other thread is inside it (see _native_begin_close)."""
        if self._native_begin_close():
            self._native_finish_close()
        else:
            self._native_wait_closed()

    def _native_begin_close(self) -> bool:
        """Refuses every later call and iterator step (BackendClosedError) and asks running
        snapshot writes to stop. True for the caller that began closing, which must call
        _native_finish_close(); False if the backend was closed or is closing already."""
        if self._closed:
            return False
        self._closed = True
        self._closing = True
        self._current_key = None
        self._db.get().CancelPinned()  # running snapshot writes stop at their next check
        return True

    def _native_finish_close(self):
        """Waits (GIL released) until no call is inside RocksDB, then frees pinned iterators
        and snapshots and closes RocksDB."""
        cdef CStatus st
        cdef CStateDB* db = self._db.get()
        if not self._closing or db == NULL:
            return
        try:
            while self._inflight > 0:
                with nogil:
                    usleep(100)
            with nogil:
                st = db.Close()
            self._db.reset()
        finally:
            self._closing = False
        check_status(st)

    def _native_wait_closed(self):
        """Returns once a close begun by another thread has finished."""
        while self._closing:
            with nogil:
                usleep(1000)

    cdef inline CStateDB* _enter(self) except NULL:
        """The database for a call that releases the GIL; pair with _leave() and let nothing
        raise in between."""
        if self._closed:
            self._check_open()
        self._inflight += 1
        return self._db.get()

    cdef inline void _leave(self) noexcept:
        self._inflight -= 1

    cdef _ScanCursor _new_cursor(self, int cf, bytes lower, bytes upper, bint reverse,
                                 bint access=False):
        """A cursor over [lower, upper) of column family cf as it is now. In a state with TTL
        it yields what reads see; ``access`` makes it a state read (csrc/scan_cursor.h)."""
        cdef _ScanCursor c = _ScanCursor.__new__(_ScanCursor)
        cdef string lo = lower, hi = upper
        self._check_open()
        c._backend = self
        c._c.reset(new CScanCursor(self._db.get(), cf, lo, hi, reverse, access))
        return c

    @property
    def closed(self) -> bool:
        """Whether ``close()`` (or ``dispose()``) began; every call raises
        BackendClosedError from then on."""
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
        cdef CStateDB* db = self._enter()
        with nogil:
            n = db.EstimateNumKeys()
        self._leave()
        return n

    def _native_metrics(self) -> dict:
        """RocksDB's figures for this backend (see csrc/db_metrics.h); no data is scanned."""
        cdef CDbMetrics m
        cdef CStatus st
        cdef CStateDB* db = self._enter()
        try:
            with nogil:
                st = CCollectDbMetrics(db, &m)
        finally:
            self._leave()
        check_status(st)
        return {"estimated_keys": m.estimated_keys, "state_keys": m.state_keys,
                "timers": m.timers, "live_sst_bytes": m.live_sst_bytes,
                "sst_files": m.sst_files, "memtable_bytes": m.memtable_bytes,
                "table_reader_bytes": m.table_reader_bytes, "pinned_bytes": m.pinned_bytes,
                "pending_compaction_bytes": m.pending_compaction_bytes,
                "block_cache_bytes": m.block_cache_bytes, "rows_read": m.rows_read,
                "rows_written": m.rows_written, "rows_deleted": m.rows_deleted}

    def _native_files_per_level(self) -> list:
        """The number of SST files in each level, L0 first (the LSM's shape; for tests)."""
        cdef vector[uint64_t] levels
        cdef CStateDB* db = self._enter()
        try:
            with nogil:
                levels = CFilesPerLevel(db)
        finally:
            self._leave()
        return [n for n in levels]

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
        if self._has_schema:
            # Set once: batch calls on other threads read the schema without the GIL. Two
            # threads may both see a backend without keys and infer the same schema.
            if codecs == self._key_codecs and is_tuple == self._key_is_tuple:
                return
            have = ", ".join(_codec_name(c) for c in self._key_codecs)
            want = ", ".join(_codec_name(c) for c in codecs)
            raise _KeyTypeError(f"the backend's keys are ({have}); they cannot become ({want})")
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
        """The codec ids of the key columns, or None while the key type is not fixed."""
        return self._key_codecs if self._has_schema else None

    @property
    def key_is_tuple(self) -> bool:
        """Whether keys are tuples (several key columns)."""
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
            p = _utf8(key, &n, _KeyTypeError)
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
        try:
            return self._encode_key_columns(key, out)
        except _SerializationError as e:  # text without a UTF-8 encoding
            raise _KeyTypeError(f"key {key!r:.80} cannot be a key: {e}") from None

    cdef int _encode_key_columns(self, object key, string* out) except -1:
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
        """The key group of the current key (NoCurrentKeyError before set_current_key)."""
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

    def _native_create_cf(self, str name, int merge_kind, int numeric_op, int numeric_codec,
                          int ttl_layout=0) -> int:
        cdef int index = -1
        cdef CStatus st
        cdef CColumnFamilySpec spec = CMakeColumnFamilySpec(name.encode("utf-8"), merge_kind,
                                                            numeric_op, numeric_codec, ttl_layout)
        cdef CStateDB* db = self._enter()
        with nogil:
            st = db.CreateColumnFamily(spec, &index)
        self._leave()
        check_status(st)
        return index

    # ---- State TTL (csrc/ttl.h) ---------------------------------------------------------------

    def set_ttl_time(self, int64_t timestamp_ms) -> None:
        """The time, in milliseconds, that states with TTL use from now on: writes stamp
        entries with it, reads check expiry against it, and the compaction filter purges what
        expired by it. TTL never reads the wall clock; pass processing time, or in a
        micro-batch the batch's timestamp so that a replay sees the same expiry."""
        if timestamp_ms == kTtlTimeUnset:
            raise ValueError(f"{timestamp_ms} is reserved (it means 'no time set')")
        self._check_open()
        self._db.get().SetTtlTime(timestamp_ms)

    @property
    def ttl_time(self):
        """The last time given to set_ttl_time (None before the first)."""
        self._check_open()
        cdef int64_t t = self._db.get().ttl_time()
        return None if t == kTtlTimeUnset else t

    def _native_configure_ttl(self, int cf, int64_t ttl_ms, bint update_on_read,
                              bint return_expired, bytes row_program=b"", bytes row_versions=b""):
        """row_program: the compiled value schema of a typed state (sparktypes.program);
        row_versions: its schema history (evolution.History.spec) if it evolved."""
        cdef string program = row_program
        cdef string versions = row_versions
        self._check_open()
        check_status(self._db.get().ConfigureTtl(cf, ttl_ms, update_on_read, return_expired,
                                                 program, versions))

    def _native_find_cf(self, str name) -> int:
        self._check_open()
        return self._db.get().FindColumnFamily(name.encode("utf-8"))

    def _native_count(self, int cf, bytes lower=b"", bytes upper=b"") -> int:
        cdef uint64_t n = 0
        cdef CStatus st
        cdef string lo = lower, hi = upper
        cdef CStateDB* db = self._enter()
        with nogil:
            st = db.Count(cf, lo, hi, &n)
        self._leave()
        check_status(st)
        return n

    def _native_flush(self):
        cdef CStatus st
        cdef CStateDB* db = self._enter()
        with nogil:
            st = db.Flush()
        self._leave()
        check_status(st)

    def _native_compact(self, int target_level=-1):
        cdef CStatus st
        cdef CStateDB* db = self._enter()
        with nogil:
            st = db.CompactAll(target_level)
        self._leave()
        check_status(st)

    def _native_delete_range(self, int cf, bytes begin, bytes end):
        cdef CStatus st
        cdef string b = begin, e = end
        cdef CStateDB* db = self._enter()
        with nogil:
            st = db.DeleteRange(cf, CSlice(b), CSlice(e))
        self._leave()
        check_status(st)

    # ---- raw access (tests, snapshot tooling, state readers): stored bytes, TTL stamps too ----

    def _raw_scan(self, int cf, bytes lower=b"", bytes upper=b"", size_t limit=0,
                  bint reverse=False) -> list:
        """Raw (key, value) pairs of a column family with lower <= key < upper."""
        cdef vector[CKeyValue] out
        cdef CStatus st
        cdef string lo = lower, hi = upper
        cdef CStateDB* db = self._enter()
        with nogil:
            st = db.Scan(cf, lo, hi, limit, reverse, &out)
        self._leave()
        check_status(st)
        return [(_to_bytes(kv.key), _to_bytes(kv.value)) for kv in out]

    def _raw_get(self, int cf, bytes key):
        cdef CPinnableSlice pin
        cdef CStatus st
        cdef string k = key
        cdef CStateDB* db = self._enter()
        with nogil:
            st = db.RawGet(cf, CSlice(k), &pin)
        self._leave()
        if st.IsNotFound():
            return None
        check_status(st)
        return PyBytes_FromStringAndSize(pin.data(), <Py_ssize_t>pin.size())

    def _raw_put(self, int cf, bytes key, bytes value):
        cdef CStatus st
        cdef string k = key, v = value
        cdef CStateDB* db = self._enter()
        with nogil:
            st = db.RawPut(cf, CSlice(k), CSlice(v))
        self._leave()
        check_status(st)

    def _raw_merge(self, int cf, bytes key, bytes value):
        cdef CStatus st
        cdef string k = key, v = value
        cdef CStateDB* db = self._enter()
        with nogil:
            st = db.RawMerge(cf, CSlice(k), CSlice(v))
        self._leave()
        check_status(st)

    def _raw_delete(self, int cf, bytes key):
        cdef CStatus st
        cdef string k = key
        cdef CStateDB* db = self._enter()
        with nogil:
            st = db.Delete(cf, CSlice(k))
        self._leave()
        check_status(st)

    def _parse_state_key(self, bytes raw, int ns_codec, bint has_user_key):
        """(key group, key, namespace bytes, user key bytes) of a raw state key."""
        cdef CParsedKey pk
        cdef const char* p = PyBytes_AS_STRING(raw)
        if not self._has_schema:
            raise _NoCurrentKeyError("the backend has no key type yet")
        if not CParseStateKey(p, <size_t>len(raw), self._prefix_bytes, self._schema,
                              <CCodec>ns_codec, has_user_key, &pk) or \
                pk.key_group >= self._max_parallelism:
            raise _CorruptionError(f"stored key {raw[:40]!r} does not fit the state layout")
        return (pk.key_group, decode_key(self._schema, self._key_is_tuple, p + pk.key_off, pk.key_len),
                raw[pk.ns_off:pk.ns_off + pk.ns_len], raw[pk.user_key_off:])

    def _parse_timer_key(self, bytes raw):
        """(key group, timestamp, key, namespace bytes) of a raw timer key (``dump --timers``)."""
        cdef CParsedKey pk
        cdef int64_t ts = 0
        cdef const char* p = PyBytes_AS_STRING(raw)
        if not self._has_schema:
            raise _NoCurrentKeyError("the backend has no key type yet")
        if not CParseTimerKey(p, <size_t>len(raw), self._prefix_bytes, self._schema, &ts, &pk) or \
                pk.key_group >= self._max_parallelism:
            raise _CorruptionError(f"stored timer key {raw[:40]!r} does not fit the timer layout")
        return (pk.key_group, ts,
                decode_key(self._schema, self._key_is_tuple, p + pk.key_off, pk.key_len),
                raw[pk.ns_off:pk.ns_off + pk.ns_len])

    def _native_iter_keys(self, int cf, int ns_codec, bytes ns, bint has_user_key):
        """Each key that has an entry in namespace ns, once, in storage order, as the state
        is at this call (writes during the iteration are not seen)."""
        if not self._has_schema:
            return iter(())
        return self._drain_keys(self._new_cursor(cf, b"", b"", False), ns_codec, ns,
                                has_user_key)

    def _drain_keys(self, _ScanCursor cursor, int ns_codec, bytes ns, bint has_user_key):
        cdef CParsedKey pk
        cdef const CKeyValue* kv
        cdef const char* p
        cdef size_t i, n
        cdef string last_key
        cdef bint have_last = False
        cdef string want = ns
        while cursor.fill(SCAN_CHUNK):
            for i in range(cursor.buf.size()):
                if self._closed:
                    self._check_open()
                kv = &cursor.buf[i]
                p = kv.key.data()
                n = kv.key.size()
                if not CParseStateKey(p, n, self._prefix_bytes, self._schema, <CCodec>ns_codec,
                                      has_user_key, &pk):
                    raise _CorruptionError(
                        f"stored key {PyBytes_FromStringAndSize(p, min(n, 40))!r} does not fit "
                        f"the state layout")
                if pk.ns_len != want.size() or (pk.ns_len and
                        memcmp(p + pk.ns_off, want.data(), pk.ns_len) != 0):
                    continue
                if have_last and last_key.size() == pk.key_off + pk.key_len and \
                        memcmp(last_key.data(), p, pk.key_off + pk.key_len) == 0:
                    continue
                last_key.assign(p, pk.key_off + pk.key_len)
                have_last = True
                yield decode_key(self._schema, self._key_is_tuple, p + pk.key_off, pk.key_len)


cdef class _ScanCursor:
    """Entries of a column-family range as they were when the cursor was created (a pinned
    RocksDB iterator, csrc/scan_cursor.h), handed over a chunk at a time with the GIL
    released. Dropping the cursor, exhausting it or closing the backend frees the iterator."""
    cdef unique_ptr[CScanCursor] _c
    cdef NativeBackend _backend
    cdef vector[CKeyValue] buf
    cdef bint _done

    cdef bint fill(self, size_t limit) except -1:
        """Replaces buf with the next (up to limit) entries; False once there are none."""
        cdef CStatus st
        cdef cbool done = False
        cdef CStateDB* db
        self.buf.clear()
        if self._done:
            return False
        db = self._backend._enter()  # BackendClosedError once close() began
        with nogil:
            st = self._c.get().Next(limit, &self.buf, &done)
        self._backend._leave()
        if done or not st.ok():
            self._done = True
            self._c.get().Release()  # unpin memtables and files now, not when collected
        check_status(st)
        return not self.buf.empty()
