#!/usr/bin/env bash
# Tests the release wheel as a Spark worker gets it: installed into a clean virtualenv, on a
# machine without librocksdb-dev or a compiler, with no way back to this checkout.
#
#   scripts/test-wheel.sh [--wheel FILE] [--extras test,spark] [pytest arguments]
#
# Without --wheel it builds one first (scripts/build-wheel.sh wheelhouse/). Then:
#  1. a new virtualenv outside the checkout gets the wheel with its extras (default: test and
#     spark; `--extras test` leaves pyspark out, for the core tests only);
#  2. a copy of tests/ (with examples/, docs/, README.md and pyproject.toml, which the tests
#     read) goes beside it, without the stateengine package;
#  3. in a private mount namespace (unshare --mount, root only) Debian's librocksdb files, its
#     headers, every C/C++ compiler driver and cc1/cc1plus, clang, nvcc and pkg-config are hidden
#     behind bind mounts, and the checkout itself behind an empty tmpfs; the script proves each
#     is gone (a compile fails, dlopen of librocksdb fails, the checkout is empty);
#  4. pytest runs there with PYTHONPATH unset; scripts/wheel_check.py stops it unless
#     stateengine and its extension come from the virtualenv's site-packages, need no shared
#     librocksdb and carry no RocksDB sync points, and prints which files were imported.
# By default it runs the whole suite (the core tests, the Spark and Spark Connect tests and
# the cluster tests, which get this wheel through STATEENGINE_WHEELHOUSE) except
# tests/test_build.py and tests/test_bench_smoke.py, which compile from the source tree, and
# tests/test_wheel_install.py, which runs this script.
# Extra arguments go to pytest (e.g. `-m "not spark"`); with test paths among them (tests/x.py,
# tests/x.py::name) only those run.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$(pwd)"
log() { printf '[test-wheel] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

[ "$(id -u)" -eq 0 ] || die "needs root for its private mount namespace (unshare --mount)"
wheel="" extras="test,spark"
while [ $# -gt 0 ]; do
    case "$1" in
        --wheel) [ $# -ge 2 ] || die "--wheel needs a file"; wheel="$(realpath "$2")"; shift 2 ;;
        --extras) [ $# -ge 2 ] || die "--extras needs a list"; extras="$2"; shift 2 ;;
        *) break ;;
    esac
done
if [ -z "$wheel" ]; then
    wheel="$(scripts/build-wheel.sh wheelhouse | tail -1)"
fi
[ -f "$wheel" ] || die "no wheel at $wheel"

# the interpreter the wheel is for: the one behind .venv (or python3), never .venv itself
base="$(command -v python3)"
[ -x .venv/bin/python ] && base="$(.venv/bin/python -c 'import sys; print(sys._base_executable)')"
tag="$("$base" -c 'import sys; print("cp%d%d" % sys.version_info[:2])')"
case "$(basename "$wheel")" in *"-$tag-"*) ;; *) die "$wheel is not for $base ($tag)" ;; esac

work="$(mktemp -d /tmp/stateengine-wheel-test.XXXXXX)"
log "work directory $work"
"$base" -m venv "$work/venv"
log "pip install $(basename "$wheel")[$extras] into $work/venv"
(cd "$work" && env -u PYTHONPATH -u PYTHONHOME "$work/venv/bin/python" -m pip install -q \
    --disable-pip-version-check "$wheel[$extras]")
mkdir "$work/project" "$work/wheelhouse"
cp "$wheel" "$work/wheelhouse/"
for p in tests examples docs README.md pyproject.toml; do
    [ -e "$p" ] && cp -r "$p" "$work/project/"
done
cp scripts/wheel_check.py "$work/project/"
find "$work/project" -name __pycache__ -prune -exec rm -rf {} +

# Runs in the private mount namespace.
inside() {
    local root="$1" work="$2"; shift 2
    hide() {  # a file behind /dev/null, a directory behind an empty read-only tmpfs
        local target
        target="$(readlink -f "$1")" || return 0
        if [ -d "$target" ]; then mount -t tmpfs -o ro,size=4k hidden "$target"
        elif [ -e "$target" ]; then mount --bind /dev/null "$target"; fi
    }
    local f pkg
    for pkg in $(dpkg-query -W -f '${Package}\n' 'librocksdb*' 2>/dev/null); do
        for f in $(dpkg -L "$pkg" 2>/dev/null); do
            case "$f" in /usr/include/rocksdb/*|/usr/share/*) continue ;; esac
            if [ -f "$f" ] || [ -L "$f" ]; then hide "$f"; fi
        done
    done
    for f in /usr/lib/*/librocksdb* /usr/local/lib/librocksdb*; do [ -e "$f" ] && hide "$f"; done
    hide /usr/include/rocksdb
    for f in /usr/lib/gcc /usr/libexec/gcc /usr/lib/llvm-*; do [ -e "$f" ] && hide "$f"; done
    for f in /usr/bin/* /usr/local/bin/*; do
        case "${f##*/}" in
            cc|c++|c89*|c99*|cpp*|gcc*|g++*|clang*|*-linux-gnu-gcc*|*-linux-gnu-g++*) hide "$f" ;;
            *-linux-gnu-cpp*|nvcc|pkg-config|pkgconf|*-pkg-config|tcc|icc|icpx) hide "$f" ;;
        esac
    done
    hide "$root"
    export PATH="$work/venv/bin:/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"
    unset PYTHONPATH PYTHONHOME VIRTUAL_ENV PYSPARK_PYTHON PYSPARK_DRIVER_PYTHON
    unset PKG_CONFIG_PATH
    # the proofs
    local c
    for c in cc c++ gcc g++ clang clang++ pkg-config; do  # (a hidden file is /dev/null: exec fails)
        ! "$c" --version >/dev/null 2>&1 || { echo "test-wheel: $c still runs" >&2; return 1; }
    done
    echo 'int main(void) { return 0; }' > "$work/probe.c"
    for c in /usr/bin/cc /usr/bin/c++ /usr/bin/gcc /usr/bin/clang* /usr/local/bin/nvcc; do
        if [ -e "$c" ] && "$c" -c "$work/probe.c" -o "$work/probe.o" 2>/dev/null; then
            echo "test-wheel: $c still compiles" >&2; return 1
        fi
    done
    if python -c 'import ctypes, sys
for n in ("librocksdb.so", "librocksdb.so.7.8"):
    try: ctypes.CDLL(n)
    except OSError: continue
    sys.exit(n)'; then :; else echo "test-wheel: librocksdb still loads" >&2; return 1; fi
    [ -z "$(ls -A /usr/include/rocksdb 2>/dev/null)" ] || { echo "test-wheel: rocksdb headers" >&2; return 1; }
    [ -z "$(ls -A "$root")" ] || { echo "test-wheel: the checkout is visible" >&2; return 1; }
    echo "[test-wheel] hidden: librocksdb, /usr/include/rocksdb, compilers, pkg-config, $root" >&2
    cd "$work/project"
    local arg paths=(tests)
    for arg in "$@"; do
        if [ -e "${arg%%::*}" ]; then paths=(); break; fi
    done
    PYSPARK_PYTHON="$work/venv/bin/python" PYSPARK_DRIVER_PYTHON="$work/venv/bin/python" \
        SPARK_LOCAL_IP=127.0.0.1 STATEENGINE_WHEELHOUSE="$work/wheelhouse" \
        python -m pytest -p wheel_check "${paths[@]}" --ignore=tests/test_build.py \
        --ignore=tests/test_bench_smoke.py --ignore=tests/test_wheel_install.py "$@"
}

status=0
unshare --mount --propagation private -- bash -c "$(declare -f inside); inside \"\$@\"" \
    inside "$ROOT" "$work" "$@" || status=$?
if [ "$status" -eq 0 ]; then rm -rf "$work"; else log "kept $work (exit status $status)"; fi
exit "$status"
