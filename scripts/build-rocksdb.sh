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
# - snappy, lz4 and zstd (stateengine writes LZ4 blocks and frames snapshots with snappy),
#   linked statically, so the wheel needs no shared compression library. zstd is built here
#   too, from Debian's libzstd 1.5.4+dfsg2-5 source with -fPIC and NDEBUG: Debian's libzstd.a
#   is not position-independent (its dictionary builder cannot go into a shared object).
#   rocksdb.pc links the system's snappy and lz4 archives where they exist (Debian's link fine
#   once --exclude-libs makes their symbols local), else their shared libraries (which
#   auditwheel then copies into the wheel). zlib and bz2 are left out: stateengine never
#   writes them.
# - -include cstdint: RocksDB 7.8 headers use uint64_t without it, which GCC >= 13 rejects
#   (fixed upstream in 8.0; a no-op on Debian 12's GCC 12).
#
# The sources are fetched by URL and checked against the SHA-256 sums that Debian's signed
# bookworm Sources index lists for them (so this also runs where apt is not Debian's, e.g. a
# manylinux container). The build is cached under $STATEENGINE_CACHE (default
# ~/.cache/stateengine) in rocksdb-<version>-release-<key>, where the key hashes the versions,
# the source sums, every build flag and the C++ compiler (zstd's C compiler, cc, is taken to be
# its sibling), so a change of any of them builds a new copy and never reuses a stale one.
set -euo pipefail

VERSION=7.8.3
DEBIAN_REVISION=2
ORIG=rocksdb_${VERSION}.orig.tar.gz
ORIG_SHA256=b85408a374770897332bf15e51620a5f35720dd416a4749e3899057f9cfaf84d
DEBIAN=rocksdb_${VERSION}-${DEBIAN_REVISION}.debian.tar.xz
DEBIAN_SHA256=4ead930612734d2b79e8f5e72e51659004c5a47f8d6bb90dea8eb42fd6d88a02
ZSTD_VERSION=1.5.4
ZSTD_ORIG=libzstd_${ZSTD_VERSION}+dfsg2.orig.tar.xz
ZSTD_ORIG_SHA256=8cf4bbb65e77ec348d052c8d6230eba66d435bddf64c8b5be2fcb16880c19953
ZSTD_DEBIAN=libzstd_${ZSTD_VERSION}+dfsg2-5.debian.tar.xz
ZSTD_DEBIAN_SHA256=82ce911445772861d0838bd4545f93bc50658bc7f3cefdb17a307dfb8ffca5d8
ZSTD_CFLAGS="-O3 -fPIC -DNDEBUG"
# the pool while bookworm ships them, then Debian's snapshot archive (which keeps them for good)
MIRRORS=(https://deb.debian.org/debian/pool/main
         https://snapshot.debian.org/archive/debian/20230601T000000Z/pool/main)
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
      echo "zstd $ZSTD_ORIG_SHA256 $ZSTD_DEBIAN_SHA256 $ZSTD_CFLAGS"
      echo "$CXX_DEFINES"; printf '%s\n' "${CMAKE_FLAGS[@]}"
      "$CXX" --version 2>/dev/null | head -1; "$CXX" -dumpmachine 2>/dev/null
    } | sha256sum | cut -c1-12
}

if [ "${1:-}" = "--key" ]; then cache_key; exit 0; fi
[ $# -eq 0 ] || die "usage: $0 [--key]"

PREFIX="$CACHE/rocksdb-$VERSION-release-$(cache_key)"
LIB="$PREFIX/lib/librocksdb.a"

# What a usable build is: RTTI (MergeOperator's typeinfo), no thread-local perf context (its TLS
# init function), no assertions (__assert_fail) and no sync points (rocksdb::SyncPoint, compiled
# in without NDEBUG only).
check_build() {
    local syms
    syms="$(nm -g "$LIB" 2>/dev/null)" || return 1
    grep -qE ' [A-TV-Z] _ZTIN7rocksdb13MergeOperatorE$' <<<"$syms" || { log "no RTTI in $LIB"; return 1; }
    ! grep -q '_ZTHN7rocksdb12perf_contextE' <<<"$syms" || { log "$LIB has the perf context"; return 1; }
    ! grep -q ' U __assert_fail' <<<"$syms" || { log "$LIB has assertions (no NDEBUG)"; return 1; }
    ! grep -q '_ZN7rocksdb9SyncPoint' <<<"$syms" || { log "$LIB has sync points"; return 1; }
}

if [ -f "$PREFIX/lib/pkgconfig/rocksdb.pc" ] && check_build; then
    echo "$PREFIX"; exit 0
fi

# ---- tools and compression libraries ---------------------------------------------------
if command -v apt-get >/dev/null 2>&1 && command -v dpkg >/dev/null 2>&1; then
    need=()
    for pkg in liblz4-dev libsnappy-dev; do
        dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
    done
    for tool in cmake:cmake ninja:ninja-build make:make curl:curl patch:patch xz:xz-utils nm:binutils; do
        command -v "${tool%%:*}" >/dev/null 2>&1 || need+=("${tool#*:}")
    done
    [ -e /etc/ssl/certs/ca-certificates.crt ] || need+=(ca-certificates)
    if [ ${#need[@]} -gt 0 ]; then
        SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
        log "apt-get install ${need[*]}"
        apt() { $SUDO env DEBIAN_FRONTEND=noninteractive apt-get "$@" >&2; }
        apt install -y -q "${need[@]}" || { apt update -q && apt install -y -q "${need[@]}"; }
    fi
fi
for tool in cmake make "$CXX" cc nm patch tar xz curl sha256sum flock; do
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
fetch() {  # fetch POOL_DIR FILE SHA256: into $CACHE/src, verified
    local dir="$1" file="$2" sum="$3" dest="$CACHE/src/$2" url
    if [ -f "$dest" ] && echo "$sum  $dest" | sha256sum -c --status; then return 0; fi
    for url in "${MIRRORS[@]}"; do
        url="$url/$dir"
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
fetch r/rocksdb "$ORIG" "$ORIG_SHA256"
fetch r/rocksdb "$DEBIAN" "$DEBIAN_SHA256"
fetch libz/libzstd "$ZSTD_ORIG" "$ZSTD_ORIG_SHA256"
fetch libz/libzstd "$ZSTD_DEBIAN" "$ZSTD_DEBIAN_SHA256"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
unpack() {  # unpack ORIG DEBIAN DIR: Debian's source package with its patches, in series order
    local dir="$work/$3" p
    mkdir "$dir"
    tar -C "$dir" --strip-components=1 -xf "$CACHE/src/$1"
    tar -C "$dir" -xJf "$CACHE/src/$2"
    while read -r p; do
        case "$p" in ''|'#'*) continue ;; esac
        (cd "$dir" && patch -s -p1 < "debian/patches/$p") >&2 || die "Debian patch $p does not apply"
    done < "$dir/debian/patches/series"
}
unpack "$ORIG" "$DEBIAN" rocksdb
unpack "$ZSTD_ORIG" "$ZSTD_DEBIAN" zstd
start=$(date +%s)

log "building zstd $ZSTD_VERSION (static, $ZSTD_CFLAGS)"
make -s -C "$work/zstd/lib" -j"$(nproc)" libzstd.a CFLAGS="$ZSTD_CFLAGS" >&2
mkdir -p "$work/zstd-install/lib" "$work/zstd-install/include"
cp "$work/zstd/lib/libzstd.a" "$work/zstd-install/lib/"
cp "$work"/zstd/lib/{zstd.h,zdict.h,zstd_errors.h} "$work/zstd-install/include/"

log "building RocksDB $VERSION-$DEBIAN_REVISION (Release, static) into $PREFIX"
cd "$work/rocksdb"
cmake -S . -B build "${generator[@]}" -DCMAKE_CXX_FLAGS="$CXX_DEFINES" "${CMAKE_FLAGS[@]}" \
    -Dzstd_INCLUDE_DIRS="$work/zstd-install/include" \
    -Dzstd_LIBRARIES="$work/zstd-install/lib/libzstd.a" >&2
cmake --build build -j"$(nproc)" --target rocksdb >&2
rm -rf "$PREFIX.tmp"
mkdir -p "$PREFIX.tmp/lib/pkgconfig" "$PREFIX.tmp/include"
cp build/librocksdb.a "$work/zstd-install/lib/libzstd.a" "$PREFIX.tmp/lib/"
cp -r include/rocksdb "$PREFIX.tmp/include/"
log "built in $(( $(date +%s) - start )) s"

# ---- rocksdb.pc -----------------------------------------------------------------------------
# A compression library's static archive where the compiler finds one, else its shared
# library (auditwheel then copies it into the wheel).
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
Libs: -L\${libdir} -l:librocksdb.a $(link_flag snappy) $(link_flag lz4) -l:libzstd.a -lpthread -ldl -Wl,--exclude-libs,ALL
PC
rm -rf "$PREFIX"
mv "$PREFIX.tmp" "$PREFIX"
check_build || die "the build in $PREFIX is not the Release build this script asks for"
echo "$PREFIX"
