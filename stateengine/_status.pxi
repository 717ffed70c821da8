# The one place where a C++ status becomes a Python exception.

cdef object _StorageError = errors.StorageError
cdef object _BackendClosedError = errors.BackendClosedError


cdef int check_status(const CStatus& st) except -1:
    if st.ok():
        return 0
    msg = st.ToString().decode("utf-8", "replace")
    if st.IsCorruption():
        raise _CorruptionError(msg)  # names the file and what was wrong
    if st.IsMemoryLimit():  # csrc/status_guard.h: an allocation failed, nothing was applied
        raise MemoryError(msg)
    raise _StorageError(f"RocksDB error: {msg}")
