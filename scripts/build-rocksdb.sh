#!/usr/bin/env bash
# Builds the RocksDB that release wheels and the benchmarks link: Debian's source package
# rocksdb 7.8.3-2 (the version Debian's librocksdb-dev ships, so the test suite, the wheel and
# the benchmarks all run one RocksDB version), with Debian's patches, as a static Release
# library, and writes a rocksdb.pc for setup.py. Prints the install prefix when done.
#
#   scripts/build-rocksdb.sh            build (or reuse) the cached copy, print its prefix
#   scripts/build-rocksdb.sh --key      print the cache key only
#
# Why not Debian's librocksdb: Debian configures RocksDB with CMAKE_BUILD_TYPE=None, so it runs
# assertions and sync points on every call (several times the instructions per Get, and an abort
# on some crafted files). What this build sets, and why:
# - Release (-O3, NDEBUG) and PORTABLE (no -march=native: the wheel runs on other machines).
# - RTTI stays on (CMake turns it off for Release): csrc/ subclasses rocksdb::MergeOperator,
#   which needs RocksDB's typeinfo symbols to link.
# - NPERF_CONTEXT compiles RocksDB's per-thread perf context out: in a library linked into a
#   Python extension every perf counter update is a __tls_get_addr call, ~10% of a cached point
#   lookup; stateengine never reads those counters.
# - snappy, lz4 and zstd (stateengine writes LZ4 blocks and frames snapshots with snappy);
#   rocksdb.pc links their static archives where the system has them, so the wheel needs no
#   shared compression library. zlib and bz2 are left out: stateengine never writes them.
# - -include cstdint: RocksDB 7.8 headers use uint64_t without it, which GCC >= 13 rejects
#   (a no-op on Debian 12's GCC 12).
#
# The source is fetched by URL and checked against the SHA-256 sums of Debian's signed .dsc (so
# this also runs where apt is not Debian's, e.g. a manylinux container). The build is cached
# under $STATEENGINE_CACHE (default ~/.cache/stateengine) in rocksdb-<version>-release-<key>,
# where the key hashes the version, the source sums, every build flag and the compiler, so a
# change of any of them builds a new copy and never reuses a stale one.
set -euo pipefail

VERSION=7.8.3
DEBIAN_REVISION=2
ORIG=rocksdb_${VERSION}.orig.tar.gz
ORIG_SHA256=b85408a374770897332bf15e51620a5f35720dd416a4749e3899057f9cfaf84d
DEBIAN=rocksdb_${VERSION}-${DEBIAN_REVISION}.debian.tar.xz
DEBIAN_SHA256=4ead930612734d2b79e8f5e72e51659004c5a47f8d6bb90dea8eb42fd6d88a02
# the pool while bookworm ships 7.8.3-2, then Debian's snapshot archive (which keeps it for good)
MIRRORS=(https://deb.debian.org/debian/pool/main/r/rocksdb
         https://snapshot.debian.org/archive/debian/20230108T000000Z/pool/main/r/rocksdb)
CXX_DEFINES="-DNPERF_CONTEXT -include cstdint"
CMAKE_FLAGS=(-DCMAKE_BUILD_TYPE=Release -DCMAKE_POSITION_INDEPENDENT_CODE=ON -DPORTABLE=ON
             -DFAIL_ON_WARNINGS=OFF -DUSE_RTTI=1
             -DWITH_SNAPPY=ON -DWITH_LZ4=ON -DWITH_ZSTD=ON -DWITH_ZLIB=OFF -DWITH_BZ2=OFF
             -DWITH_GFLAGS=OFF -DWITH_JEMALLOC=OFF -DWITH_LIBURING=OFF -DWITH_TESTS=OFF
             -DWITH_TOOLS=OFF -DWITH_CORE_TOOLS=OFF -DWITH_BENCHMARK_TOOLS=OFF
             -DWITH_ALL_TESTS=OFF -DROCKSDB_BUILD_SHARED=OFF)
CACHE="${STATEENGINE_CACHE:-$HOME/.cache/stateengine}"
CXX="${CXX:-c++}"

log() { printf '[build-rocksdb] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

cache_key() {
    { echo "$VERSION-$DEBIAN_REVISION $ORIG_SHA256 $DEBIAN_SHA256"
      echo "$CXX_DEFINES"; printf '%s\n' "${CMAKE_FLAGS[@]}"
      "$CXX" --version 2>/dev/null | head -1; "$CXX" -dumpmachine 2>/dev/null
    } | sha256sum | cut -c1-12
}

if [ "${1:-}" = "--key" ]; then cache_key; exit 0; fi
[ $# -eq 0 ] || die "usage: $0 [--key]"

PREFIX="$CACHE/rocksdb-$VERSION-release-$(cache_key)"
LIB="$PREFIX/lib/librocksdb.a"

# What a usable build is: RTTI (MergeOperator's typeinfo), no thread-local perf context (its TLS
# init function), no assertions (__assert_fail) and no sync points (SyncPoint, debug builds only).
check_build() {
    local syms
    syms="$(nm -g "$LIB" 2>/dev/null)" || return 1
    grep -qE ' [A-TV-Z] _ZTIN7rocksdb13MergeOperatorE$' <<<"$syms" || { log "no RTTI in $LIB"; return 1; }
    ! grep -q '_ZTHN7rocksdb12perf_contextE' <<<"$syms" || { log "$LIB has the perf context"; return 1; }
    ! grep -q ' U __assert_fail' <<<"$syms" || { log "$LIB has assertions (no NDEBUG)"; return 1; }
    ! grep -q 'SyncPoint' <<<"$syms" || { log "$LIB has sync points"; return 1; }
}

if [ -f "$PREFIX/lib/pkgconfig/rocksdb.pc" ] && check_build; then
    echo "$PREFIX"; exit 0
fi

# ---- tools and compression libraries ---------------------------------------------------
if command -v apt-get >/dev/null 2>&1 && command -v dpkg >/dev/null 2>&1; then
    need=()
    for pkg in liblz4-dev libzstd-dev libsnappy-dev; do
        dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
    done
    command -v cmake >/dev/null 2>&1 || need+=(cmake)
    command -v ninja >/dev/null 2>&1 || need+=(ninja-build)
    if [ ${#need[@]} -gt 0 ]; then
        SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
        log "apt-get install ${need[*]}"
        $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need[@]}" >&2
    fi
fi
for tool in cmake "$CXX" nm patch tar sha256sum; do
    command -v "$tool" >/dev/null 2>&1 || die "$tool is missing"
done
generator=(); command -v ninja >/dev/null 2>&1 && generator=(-G Ninja)

# ---- one build at a time per prefix ----------------------------------------------------------
mkdir -p "$CACHE/src"
exec 9>"$PREFIX.lock"
flock 9
if [ -f "$PREFIX/lib/pkgconfig/rocksdb.pc" ] && check_build 2>/dev/null; then
    echo "$PREFIX"; exit 0  # another run built it while this one waited
fi

# ---- the pinned source ------------------------------------------------------------------
fetch() {  # fetch FILE SHA256: into $CACHE/src, verified
    local file="$1" sum="$2" dest="$CACHE/src/$1" url
    if [ -f "$dest" ] && echo "$sum  $dest" | sha256sum -c --status; then return 0; fi
    for url in "${MIRRORS[@]}"; do
        log "downloading $url/$file"
        if curl -fsSL --retry 3 -o "$dest.part" "$url/$file" &&
           echo "$sum  $dest.part" | sha256sum -c --status; then
            mv "$dest.part" "$dest"; return 0
        fi
        log "$url/$file failed or does not match its SHA-256"
    done
    rm -f "$dest.part"
    die "cannot fetch $file with SHA-256 $sum"
}
fetch "$ORIG" "$ORIG_SHA256"
fetch "$DEBIAN" "$DEBIAN_SHA256"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
tar -C "$work" -xzf "$CACHE/src/$ORIG"
tar -C "$work/rocksdb-$VERSION" -xJf "$CACHE/src/$DEBIAN"
cd "$work/rocksdb-$VERSION"
# Debian's patches, in its series order (packaging, reproducibility and ports to other CPUs)
while read -r p; do
    case "$p" in ''|'#'*) continue ;; esac
    patch -s -p1 < "debian/patches/$p" >&2 || die "Debian patch $p does not apply"
done < debian/patches/series

log "building RocksDB $VERSION-$DEBIAN_REVISION (Release, static) into $PREFIX"
start=$(date +%s)
cmake -S . -B build "${generator[@]}" -DCMAKE_INSTALL_PREFIX="$PREFIX.tmp" \
    -DCMAKE_CXX_FLAGS="$CXX_DEFINES" "${CMAKE_FLAGS[@]}" >&2
cmake --build build -j"$(nproc)" --target rocksdb >&2
rm -rf "$PREFIX.tmp"
mkdir -p "$PREFIX.tmp/lib/pkgconfig" "$PREFIX.tmp/include"
cp build/librocksdb.a "$PREFIX.tmp/lib/"
cp -r include/rocksdb "$PREFIX.tmp/include/"
log "built in $(( $(date +%s) - start )) s"

# ---- rocksdb.pc -----------------------------------------------------------------------------
# A compression library's static archive where the compiler finds one (built with -fPIC, as
# Debian's are), else its shared library (auditwheel then copies it into the wheel).
link_flag() {
    local archive
    archive="$("$CXX" -print-file-name="lib$1.a")"
    if [ "$archive" != "lib$1.a" ] && [ -f "$archive" ]; then echo "-l:lib$1.a"; else echo "-l$1"; fi
}
# --exclude-libs: RocksDB's symbols stay inside the extension, so another library in the
# process that carries its own RocksDB (rocksdict, say) neither sees nor replaces them.
cat > "$PREFIX.tmp/lib/pkgconfig/rocksdb.pc" <<PC
prefix=$PREFIX
includedir=\${prefix}/include
libdir=\${prefix}/lib

Name: rocksdb
Description: RocksDB $VERSION (Debian $VERSION-$DEBIAN_REVISION source), Release static build for stateengine
Version: $VERSION
Cflags: -I\${includedir}
Libs: -L\${libdir} -l:librocksdb.a $(link_flag snappy) $(link_flag lz4) $(link_flag zstd) -lpthread -ldl -Wl,--exclude-libs,ALL
PC
rm -rf "$PREFIX"
mv "$PREFIX.tmp" "$PREFIX"
check_build || die "the build in $PREFIX is not the Release build this script asks for"
echo "$PREFIX"
