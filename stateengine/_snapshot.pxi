# Bindings for full snapshots (sync + async parts), restore of key groups, incremental
# checkpoint primitives, checksums and timers. Policy (file names, handles, retention) lives
# in stateengine/checkpoint/; this file only moves bytes with the GIL released.

cdef object _SnapshotCancelledError = errors.SnapshotCancelledError


def crc32c(data, uint32_t crc=0) -> int:
    """CRC-32C (Castagnoli) of a bytes-like object, continuing from crc."""
    cdef const unsigned char[::1] view = memoryview(data).cast("B")
    if view.shape[0] == 0:
        return crc
    return CCrc32c(crc, <const char*>&view[0], <size_t>view.shape[0])


def file_crc32c(str path):
    """(crc32c, size) of a file, read with the GIL released."""
    cdef string p = path.encode("utf-8")
    cdef uint32_t crc = 0
    cdef uint64_t size = 0
    cdef string err
    cdef cbool ok
    with nogil:
        ok = CFileCrc32c(p, &crc, &size, &err)
    if not ok:
        raise FileNotFoundError(f"cannot read {path}: {err.decode('utf-8', 'replace')}")
    return crc, size


cdef class NativeFullSnapshot:
    """A full snapshot whose synchronous part (one pinned iterator per column family, all at
    one sequence number) is done; ``write`` is the asynchronous part."""
    cdef unique_ptr[CFullSnapshotWriter] _writer
    cdef NativeBackend _backend

    @staticmethod
    def take(NativeBackend backend, list columns, bint compress):
        """columns: (column family index, state id) pairs, in state id order."""
        cdef vector[CSnapshotColumn] cols
        cdef CSnapshotColumn c
        cdef NativeFullSnapshot snap = NativeFullSnapshot.__new__(NativeFullSnapshot)
        for cf, sid in columns:
            c.cf_index = cf
            c.state_id = sid
            cols.push_back(c)
        backend._check_open()  # the GIL is held from here to the end: close() cannot run
        snap._backend = backend
        snap._writer.reset(new CFullSnapshotWriter(
            backend._db.get(), cols, backend._prefix_bytes, backend._kg_start, backend._kg_end,
            compress))
        check_status(snap._writer.get().status())
        return snap

    def write(self, str path, bytes meta_block, bint durable=True):
        """Writes the stream; returns ([(key group, offset)], stats). Runs without the GIL.
        ``durable=False`` skips the fsync of a file that is only staged for an upload."""
        cdef string p = path.encode("utf-8")
        cdef string meta = meta_block
        cdef vector[CKeyGroupOffset] offsets
        cdef CSnapshotStats stats
        cdef CStatus st
        cdef NativeBackend be = self._backend
        if self._writer.get() == NULL:
            raise _SnapshotCancelledError("snapshot already released")
        if be._closed:
            raise _SnapshotCancelledError(
                "the backend was closed before the snapshot was written; take a new one")
        be._enter()
        with nogil:
            st = self._writer.get().Write(p, meta, durable, &offsets, &stats)
        be._leave()
        if st.IsIncomplete():
            raise _SnapshotCancelledError(
                "the backend was closed while the snapshot was written" if be._closed else
                "the snapshot was cancelled before it finished")
        check_status(st)
        return ([(o.key_group, o.offset) for o in offsets],
                {"entries": stats.entries, "raw_bytes": stats.raw_bytes,
                 "file_bytes": stats.file_bytes, "file_crc32c": stats.file_crc32c})

    def cancel(self):
        if self._writer.get() != NULL:
            self._writer.get().Cancel()

    def release(self):
        """Unpins the iterators (call only when no write is running)."""
        self._writer.reset()


def iterate_baseline(NativeBackend backend, list cf_indexes) -> dict:
    """Plain native pass over column families: the yardstick for snapshot speed."""
    cdef vector[int] cfs = cf_indexes
    cdef CSnapshotStats stats
    cdef CStatus st
    cdef CStateDB* db = backend._enter()
    with nogil:
        st = CIterateForBaseline(db, cfs, backend._prefix_bytes, backend._kg_start,
                                 backend._kg_end, &stats)
    backend._leave()
    check_status(st)
    return {"entries": stats.entries, "raw_bytes": stats.raw_bytes}


def restore_sections(NativeBackend backend, list files, list sections, str sst_dir) -> dict:
    """Restores full-snapshot sections into backend.

    files: (path, compressed, [column family per state id]) per snapshot file; sections:
    (file index, key group, offset, end, decode only) in ascending key-group order, where
    ``end`` (0: unchecked) is the byte at which the section must end and a decode-only
    section is read to its end but not restored. With sst_dir the entries go through SST
    files ingested at the end (for empty targets); with "" through write batches.
    """
    cdef vector[CSnapshotFile] fs
    cdef vector[CSectionRef] refs
    cdef CSnapshotFile f
    cdef CSectionRef r
    cdef CRestoreStats stats
    cdef CStatus st
    cdef string dir_ = sst_dir.encode("utf-8")
    cdef CStateDB* db
    for path, compressed, cfs in files:
        f.path = path.encode("utf-8")
        f.compressed = compressed
        f.cf_for_state = cfs
        fs.push_back(f)
    for fi, kg, off, end, decode_only in sections:
        r.file = fi
        r.key_group = kg
        r.offset = off
        r.end = end
        r.decode_only = decode_only
        refs.push_back(r)
    db = backend._enter()
    with nogil:
        st = CRestoreSections(db, backend._prefix_bytes, fs, refs, dir_, &stats)
    backend._leave()
    check_status(st)
    return {"entries": stats.entries, "raw_bytes": stats.raw_bytes, "key_groups": stats.key_groups}


def create_checkpoint(NativeBackend backend, str directory):
    cdef string d = directory.encode("utf-8")
    cdef CStatus st
    cdef CStateDB* db = backend._enter()
    with nogil:
        st = CCreateCheckpoint(db, d)
    backend._leave()
    check_status(st)


def created_table_files(NativeBackend backend) -> set:
    """Base names of the live SST files the backend's own RocksDB wrote (flushes,
    compactions): not those a restore placed."""
    cdef vector[string] names
    cdef CStateDB* db = backend._enter()
    names = db.CreatedTableFiles()
    backend._leave()
    return {n.decode("utf-8") for n in names}


def clip_to_range(NativeBackend backend):
    """Deletes every key group outside the backend's own range."""
    cdef CStatus st
    cdef CStateDB* db = backend._enter()
    with nogil:
        st = CClipToKeyGroupRange(db, backend._prefix_bytes, backend._kg_start,
                                  backend._kg_end, backend._max_parallelism)
    backend._leave()
    check_status(st)


def copy_key_groups(NativeBackend src, NativeBackend dst, list cf_map, int32_t kg_start,
                    int32_t kg_end) -> int:
    """Copies key groups [kg_start, kg_end] of src into dst: cf_map holds (src cf, dst cf)."""
    cdef vector[CIntPair] pairs
    cdef uint64_t n = 0
    cdef CStatus st
    cdef CStateDB* sdb
    cdef CStateDB* ddb
    for a, b in cf_map:
        pairs.push_back(CIntPair(a, b))
    sdb = src._enter()
    try:
        ddb = dst._enter()
    except BaseException:
        src._leave()
        raise
    with nogil:
        st = CCopyKeyGroupRange(sdb, ddb, pairs, dst._prefix_bytes, kg_start, kg_end, &n)
    dst._leave()
    src._leave()
    check_status(st)
    return n


# ---- timers --------------------------------------------------------------------------------

def timer_put(NativeBackend backend, int cf, int64_t timestamp, namespace, bint delete):
    """Registers (or deletes) a timer of the current key at timestamp in namespace."""
    cdef string ns, key
    cdef CStatus st
    cdef CStateDB* db
    backend.check_key()
    backend.check_writable()
    encode_value(kAny, namespace, &ns)
    backend.check_key()  # again: encoding may have run Python code (and let close() in)
    backend._builder.get().BuildTimerKey(timestamp, ns, True, &key)
    db = backend._enter()
    with nogil:
        if delete:
            st = db.Delete(cf, CSlice(key))
        else:
            st = db.Put(cf, CSlice(key), CSlice(b"", 0))
    backend._leave()
    check_status(st)


def timer_pop_due(NativeBackend backend, int cf, int64_t max_timestamp, size_t limit) -> list:
    """Removes and returns due timers as (timestamp, key, namespace), in time order. If a
    timer cannot be decoded (corrupted, or a pickled namespace without allow_pickle), the
    popped timers are put back before the error propagates: nothing is lost."""
    cdef vector[string] keys
    cdef CStatus st
    cdef CParsedKey pk
    cdef int64_t ts
    cdef size_t used
    cdef const char* p
    cdef PickleGate gate
    cdef CStateDB* db
    backend._check_open()
    backend.check_writable()  # firing deletes the timers: a write like any other
    if not backend._has_schema:
        return []
    db = backend._enter()
    with nogil:
        st = CPopDueTimers(db, cf, backend._prefix_bytes, backend._kg_start,
                           backend._kg_end, max_timestamp, limit, &keys)
    backend._leave()
    check_status(st)
    gate = PickleGate(PICKLE_ALLOW if backend._allow_pickle else PICKLE_REFUSE,
                      "a timer's namespace")
    out = []
    try:
        for k in keys:
            p = k.data()
            if not CParseTimerKey(p, k.size(), backend._prefix_bytes, backend._schema, &ts, &pk):
                raise _CorruptionError("a stored timer key does not fit the timer layout")
            out.append((ts, decode_key(backend._schema, backend._key_is_tuple, p + pk.key_off,
                                       pk.key_len),
                        decode_value(kAny, p + pk.ns_off, pk.ns_len, &used, gate_ref(gate))))
    except BaseException:
        for k in keys:
            backend._raw_put(cf, k, b"")
        raise
    return out


def timer_next_timestamp(NativeBackend backend, int cf):
    cdef cbool found = False
    cdef int64_t ts = 0
    cdef CStatus st
    cdef CStateDB* db = backend._enter()
    with nogil:
        st = CNextTimerTimestamp(db, cf, backend._prefix_bytes, backend._kg_start,
                                 backend._kg_end, &found, &ts)
    backend._leave()
    check_status(st)
    return ts if found else None


# ---- decoding stored values for state readers --------------------------------------------

def decode_stored_value(str kind, int codec, bytes data, PickleGate gate=None,
                        RowCodec row=None):
    """The Python value of a stored RocksDB value of a state of the given kind; a pickle goes
    to gate (None refuses it); row decodes the values of a typed state."""
    cdef const char* p = PyBytes_AS_STRING(data)
    cdef size_t n = <size_t>PyBytes_GET_SIZE(data)
    if kind == "list":
        return decode_list(<CCodec>codec, row, p, n, gate_ref(gate))
    if kind == "map" or kind == "sorted_map":
        return _decode_map_value(<CCodec>codec, row, p, n, gate_ref(gate))
    if row is not None:
        return row.decode_whole(p, n)
    return decode_whole(<CCodec>codec, p, n, gate_ref(gate))


def split_ttl_value(str kind, int codec, bytes data, RowCodec row=None):
    """(the value as a state without TTL stores it, last access ms) of a stored value of a
    state with TTL (csrc/ttl.h layouts); for a list the stamps are a list, one per element
    (``row``: the schema of a typed state, which measures its elements). For tools that read
    stored entries (``stateengine dump``, ``read_state``)."""
    cdef const char* p = PyBytes_AS_STRING(data)
    cdef size_t n = <size_t>PyBytes_GET_SIZE(data)
    cdef size_t pos = 0, length = 0, at
    cdef string out
    cdef list stamps
    if kind == "list":
        stamps = []
        while pos < n:
            if n - pos < 8:
                raise _CorruptionError("a list element of a state with TTL lacks its timestamp")
            stamps.append(<int64_t>CGetBE64(p + pos))
            pos += 8
            if row is not None:
                if not row.element_length(p + pos, n - pos, &length):
                    raise _CorruptionError("a list element of a state with TTL is malformed")
            elif not CElementLength(<CCodec>codec, p + pos, n - pos, &length):
                raise _CorruptionError("a list element of a state with TTL is malformed")
            if not out.empty():
                out.push_back(b',')
            out.append(p + pos, length)
            pos += length
            if pos < n:
                if p[pos] != b',' or pos + 1 == n:
                    raise _CorruptionError("list elements of a state with TTL are not joined by ','")
                pos += 1
        return PyBytes_FromStringAndSize(out.data(), <Py_ssize_t>out.size()), stamps
    at = 1 if kind == "map" or kind == "sorted_map" else 0
    if n < at + 8:
        raise _CorruptionError("a value of a state with TTL is shorter than its timestamp")
    return data[:at] + data[at + 8:], <int64_t>CGetBE64(p + at)
