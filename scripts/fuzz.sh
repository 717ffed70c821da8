#!/usr/bin/env bash
# Coverage-guided fuzzing of the decoders (docs/reliability/fuzzing.md):
#
#   scripts/fuzz.sh --list                   the harnesses
#   scripts/fuzz.sh <harness> --hours N      one harness for N hours (at nice 19, one core)
#   scripts/fuzz.sh all --hours N            every harness in turn, 10-minute slices
#   scripts/fuzz.sh all --replay             every corpus input once
#   scripts/fuzz.sh --summary                CPU hours and findings so far (build/fuzz/log.jsonl)
#
# Needs clang and libclang-rt-14-dev (./run.sh installs them) and the project's .venv.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-.venv/bin/python}"
exec "$PY" -m tests.fuzz.run "$@"
