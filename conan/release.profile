# Host profile of release wheels (cibuildwheel.toml): the detected default, Release, and
# RocksDB compiled without its thread-local perf context. stateengine never reads RocksDB's
# perf counters, and in a library linked into a Python extension every update of one is a
# __tls_get_addr call: ~10% of a cached point lookup (bench/build-release-rocksdb.sh does the
# same for the benchmarks).
include(default)

[settings]
build_type=Release

[conf]
rocksdb/*:tools.build:defines=["NPERF_CONTEXT"]
