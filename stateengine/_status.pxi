# The one place where a C++ status becomes a Python exception.

cdef object _StorageError = errors.StorageError
cdef object _BackendClosedError = errors.BackendClosedError
cdef object _TtlTimeNotSetError = errors.TtlTimeNotSetError
cdef object _StateRegistrationError = errors.StateRegistrationError
cdef object _TtlTimeRangeError = errors.TtlTimeRangeError


cdef int check_status(const CStatus& st) except -1:
    if st.ok():
        return 0
    msg = st.ToString().decode("utf-8", "replace")
    if st.IsCorruption():
        raise _CorruptionError(msg)  # names the file and what was wrong
    if st.IsMemoryLimit():  # csrc/status_guard.h: an allocation failed, nothing was applied
        raise MemoryError(msg)
    if st.IsInvalidArgument() and "stateengine.ttl-range: " in msg:  # csrc/ttl.cc OutOfRange
        raise _TtlTimeRangeError(msg.split("stateengine.ttl-range: ", 1)[1])
    if st.IsInvalidArgument() and "stateengine.ttl: " in msg:  # csrc/ttl.cc AccessTime
        if "TTL time" in msg:
            raise _TtlTimeNotSetError(
                "a state with TTL was used before any TTL time was set; call "
                "backend.set_ttl_time(ms) first (stateengine.spark: pass batch_timestamp_ms=). "
                "TTL never reads the wall clock, so a replayed batch sees the same expiry")
        raise _StateRegistrationError(
            "a state with TTL was read before its descriptor was registered on this backend "
            "(get_state), so its TTL is unknown; register it first")
    raise _StorageError(f"RocksDB error: {msg}")
