# The one place where a C++ status becomes a Python exception.

cdef object _StorageError = errors.StorageError
cdef object _BackendClosedError = errors.BackendClosedError


cdef int check_status(const CStatus& st) except -1:
    if st.ok():
        return 0
    msg = st.ToString().decode("utf-8", "replace")
    if st.IsCorruption():
        raise _CorruptionError(f"RocksDB reported corruption: {msg}")
    raise _StorageError(f"RocksDB error: {msg}")
