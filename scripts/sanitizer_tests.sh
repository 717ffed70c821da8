#!/usr/bin/env bash
# The core tests against a sanitizer build of stateengine._native (docs/reliability/fuzzing.md):
# the extension compiled by clang with AddressSanitizer + UndefinedBehaviorSanitizer (any UB
# aborts) and libFuzzer's coverage hooks (so atheris can also be run on it), into build/asan/;
# python runs with the ASan runtime preloaded; Python's own leaks are not reported.
#
#   scripts/sanitizer_tests.sh [pytest args]   the core test files (CORE below)
#   scripts/sanitizer_tests.sh tests/test_x.py [pytest args]
#
# build/asan/root holds the sanitized extension, symlinks to the rest of the package and to
# tests/, and the tests run from there, so every import (and every child process a test
# starts) gets the sanitized build.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT_DIR="$(pwd)"
PY="${PYTHON:-$ROOT_DIR/.venv/bin/python}"
CXX_BIN="$(command -v clang++ || command -v clang++-14)"
CC_BIN="$(command -v clang || command -v clang-14)"
ASAN_RT="$("$CXX_BIN" -print-file-name=libclang_rt.asan-x86_64.so)"
[ -f "$ASAN_RT" ] || { echo "no ASan runtime ($ASAN_RT): apt-get install libclang-rt-14-dev" >&2; exit 2; }
OUT="$ROOT_DIR/build/asan"
SAN="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fsanitize=fuzzer-no-link -shared-libasan -fno-omit-frame-pointer -g -O1"

CORE=(tests/test_keygroups.py tests/test_states.py tests/test_any_codec.py tests/test_typed_state.py
      tests/test_batch.py tests/test_layout.py tests/test_timers.py tests/test_ttl.py
      tests/test_operator_state.py tests/test_snapshot_roundtrip.py tests/test_snapshot_format.py
      tests/test_incremental.py tests/test_rescale.py tests/test_checkpoint_integrity.py
      tests/test_stored_entries.py tests/test_map_iteration.py tests/test_value_limits.py
      tests/test_untrusted_files.py)
# (not tests/test_fuzz.py: the libFuzzer harnesses carry their own sanitizers, which the
# preloaded runtime would clash with)

echo "[sanitizer] building stateengine._native with ASan+UBSan into $OUT" >&2
CC="$CC_BIN" CXX="$CXX_BIN" LDSHARED="$CXX_BIN -shared" CFLAGS="$SAN" LDFLAGS="$SAN" \
    "$PY" setup.py build_ext -q --build-lib "$OUT/root" --build-temp "$OUT/tmp" >"$OUT.log" 2>&1 ||
    { tail -40 "$OUT.log" >&2; exit 1; }
for name in "$ROOT_DIR"/stateengine/*; do
    base="$(basename "$name")"
    case "$base" in *.so|*.cpp|__pycache__) continue ;; esac
    ln -sfn "$name" "$OUT/root/stateengine/$base"
done
ln -sfn "$ROOT_DIR/tests" "$OUT/root/tests"
for f in pyproject.toml docs README.md examples bench; do ln -sfn "$ROOT_DIR/$f" "$OUT/root/$f"; done

# no test file among the arguments: the core files, with the arguments as pytest options
have_path=0
for arg in "$@"; do [ -e "${arg%%::*}" ] && have_path=1; done
# (the campaign tests limit their worker's address space, which ASan's shadow memory exceeds)
[ "$have_path" = 1 ] || set -- "${CORE[@]}" \
    --deselect tests/test_untrusted_files.py::test_crafted_campaign_small \
    --deselect tests/test_untrusted_files.py::test_campaign_crashes_are_corruption "$@"
cd "$OUT/root"
export LD_PRELOAD="$ASAN_RT"
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=0:abort_on_error=1:allocator_may_return_null=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
export PYSPARK_PYTHON="$PY" PYSPARK_DRIVER_PYTHON="$PY" SPARK_LOCAL_IP=127.0.0.1
"$PY" -c "import stateengine._native as n; assert n.__file__.startswith('$OUT'), n.__file__; print('[sanitizer] using', n.__file__)" >&2
exec "$PY" -m pytest -p no:cacheprovider "$@"
