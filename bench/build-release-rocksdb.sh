#!/usr/bin/env bash
# Builds RocksDB 7.8.3 -- Debian's own source package, the version librocksdb-dev ships -- as a
# Release static library (NDEBUG, -O2, snappy/lz4/zstd/zlib/bz2) into PREFIX and writes a
# rocksdb.pc there. Why: Debian configures RocksDB with CMAKE_BUILD_TYPE=None and tests on, so
# its librocksdb runs assertions and sync points on every call (several times the instructions
# per Get); release wheels link a Release RocksDB (conanfile.txt), and benchmarks should measure
# that. Used by bench/run.py --rocksdb release; CI and development keep Debian's library.
# RTTI stays on (CMake turns it off for Release): csrc/ subclasses rocksdb::MergeOperator, which
# needs RocksDB's typeinfo symbols to link, as conanfile.txt's use_rtti=True says for wheels.
# NPERF_CONTEXT compiles RocksDB's per-thread perf context out, as conan/release.profile does
# for wheels: in a library linked into a Python extension every perf counter update is a
# __tls_get_addr call, ~10% of a cached point lookup; stateengine never reads those counters.
#   bench/build-release-rocksdb.sh [PREFIX]   (prints PREFIX when done)
set -euo pipefail
PREFIX="${1:-$HOME/.cache/stateengine/rocksdb-7.8.3-release}"
symbols() { nm -g --defined-only "$PREFIX/lib/librocksdb.a" 2>/dev/null; }
has_rtti() { symbols | grep _ZTIN7rocksdb13MergeOperatorE >/dev/null; }
# a thread-local perf context has a TLS init function
has_perf_context() { symbols | grep _ZTHN7rocksdb12perf_contextE >/dev/null; }
if [ -f "$PREFIX/lib/pkgconfig/rocksdb.pc" ] && [ -f "$PREFIX/lib/librocksdb.a" ]; then
    if has_rtti && ! has_perf_context; then echo "$PREFIX"; exit 0; fi
    echo "$PREFIX holds a RocksDB built without RTTI or with the perf context; rebuilding it" >&2
    rm -rf "$PREFIX"
fi
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
need=()
for pkg in liblz4-dev libzstd-dev zlib1g-dev libbz2-dev libsnappy-dev ninja-build; do
    dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
command -v cmake >/dev/null 2>&1 || need+=(cmake)
if [ ${#need[@]} -gt 0 ]; then $SUDO apt-get install -y -q "${need[@]}" >&2; fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cd "$work"
# Debian's source package: enable deb-src for this download only.
src_list=/etc/apt/sources.list.d/stateengine-deb-src.sources
sed 's/^Types: deb$/Types: deb-src/' /etc/apt/sources.list.d/debian.sources | $SUDO tee "$src_list" >/dev/null
$SUDO apt-get update -q >&2
apt-get source --download-only rocksdb=7.8.3-2 >&2
$SUDO rm -f "$src_list"
tar xzf rocksdb_7.8.3.orig.tar.gz
cd rocksdb-7.8.3
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX="$PREFIX" \
    -DCMAKE_CXX_FLAGS=-DNPERF_CONTEXT \
    -DCMAKE_POSITION_INDEPENDENT_CODE=ON -DPORTABLE=ON -DFAIL_ON_WARNINGS=OFF -DUSE_RTTI=1 \
    -DWITH_SNAPPY=ON -DWITH_LZ4=ON -DWITH_ZSTD=ON -DWITH_ZLIB=ON -DWITH_BZ2=ON \
    -DWITH_GFLAGS=OFF -DWITH_TESTS=OFF -DWITH_TOOLS=OFF -DWITH_CORE_TOOLS=OFF \
    -DWITH_BENCHMARK_TOOLS=OFF -DWITH_ALL_TESTS=OFF -DROCKSDB_BUILD_SHARED=OFF >&2
cmake --build build -j"$(nproc)" --target rocksdb >&2
cmake --install build >&2 || { mkdir -p "$PREFIX/lib" "$PREFIX/include";
    cp build/librocksdb.a "$PREFIX/lib/"; cp -r include/rocksdb "$PREFIX/include/"; }
mkdir -p "$PREFIX/lib/pkgconfig"
cat > "$PREFIX/lib/pkgconfig/rocksdb.pc" <<PC
prefix=$PREFIX
includedir=\${prefix}/include
libdir=\${prefix}/lib

Name: rocksdb
Description: RocksDB 7.8.3, Release static build from Debian's source (stateengine bench)
Version: 7.8.3
Cflags: -I\${includedir}
Libs: -L\${libdir} -l:librocksdb.a -lsnappy -llz4 -lzstd -lz -lbz2 -lpthread -ldl
PC
echo "$PREFIX"
