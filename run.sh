#!/usr/bin/env bash
# The README's quick start. Sets everything up on a fresh Debian/Ubuntu machine (system
# packages only if missing, a virtualenv in .venv, the package with its test and Spark extras),
# then runs one thing:
#
#   ./run.sh demo     the main job: a Structured Streaming query with keyed state on local[*]
#                     (extra arguments go to python -m stateengine.spark.demo)
#   ./run.sh test     the whole test suite on pyspark 4.3, then the Spark tests on the oldest
#                     supported Spark (3.5) in .venv-spark35; extra arguments go to the first
#                     pytest run only and skip the second (with no test path among them,
#                     pytest still collects all of tests/)
#   ./run.sh spark35  only the Spark tests on Spark 3.5 (extra arguments go to pytest)
set -euo pipefail

cd "$(dirname "$0")"
ROOT="$(pwd)"

log() { printf '[run.sh] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

usage() {
    sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
}

[ $# -ge 1 ] || usage
COMMAND="$1"
shift
case "$COMMAND" in demo|test|spark35) ;; *) usage ;; esac

SUDO=""
if [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1; then
    SUDO="sudo"
fi

APT_UPDATED=0
apt_install() {
    command -v apt-get >/dev/null 2>&1 ||
        die "missing system packages ($*) and no apt-get here; install them with your package manager"
    if [ "$APT_UPDATED" -eq 0 ]; then
        log "apt-get update"
        $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -q
        APT_UPDATED=1
    fi
    log "apt-get install -y $*"
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@"
}

PYTHON3="$(command -v python3 || true)"

# ---- system packages, only the missing ones ----------------------------------------------
missing=()
command -v pkg-config >/dev/null 2>&1 || missing+=(pkg-config)
if ! command -v pkg-config >/dev/null 2>&1 || ! pkg-config --exists rocksdb; then
    missing+=(librocksdb-dev)
fi
[ -e /usr/include/snappy.h ] || pkg-config --exists snappy 2>/dev/null || missing+=(libsnappy-dev)
command -v g++ >/dev/null 2>&1 || missing+=(g++)
[ -n "$PYTHON3" ] || missing+=(python3 python3-venv python3-dev)
if [ -n "$PYTHON3" ] && ! "$PYTHON3" - <<'PY'
import os, sys, sysconfig
sys.exit(0 if os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")) else 1)
PY
then
    missing+=(python3-dev)  # headers to compile the extension
fi
command -v java >/dev/null 2>&1 || missing+=(openjdk-17-jre-headless)  # Spark needs a JVM
if [ "$COMMAND" != demo ] && ! command -v javac >/dev/null 2>&1; then
    missing+=(openjdk-17-jdk-headless)  # javac: the tests build the Spark UI metrics jar
fi
if [ "$COMMAND" != demo ]; then
    # the fuzz harnesses of the suite (tests/test_fuzz.py): clang, libFuzzer, the sanitizers
    command -v clang++ >/dev/null 2>&1 || command -v clang++-14 >/dev/null 2>&1 || missing+=(clang)
    ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1 ||
        missing+=(libclang-rt-14-dev)
fi
if [ "$COMMAND" = test ]; then
    # the cluster tests build the release wheel: scripts/build-rocksdb.sh fetches Debian's
    # RocksDB source and compiles it static with these; the share-nothing cluster test wires
    # network namespaces with ip
    for tool in cmake:cmake ninja:ninja-build make:make curl:curl patch:patch xz:xz-utils ip:iproute2; do
        command -v "${tool%%:*}" >/dev/null 2>&1 || missing+=("${tool#*:}")
    done
    [ -e /usr/include/lz4.h ] || missing+=(liblz4-dev)
    [ -e /etc/ssl/certs/ca-certificates.crt ] || missing+=(ca-certificates)
fi
if [ ${#missing[@]} -gt 0 ]; then
    apt_install "${missing[@]}"
fi
PYTHON3="$(command -v python3)" || die "python3 is still missing after installing it"

# ---- virtualenv -----------------------------------------------------------------------------
VENV="$ROOT/.venv"
make_venv() { rm -rf "$VENV" && "$PYTHON3" -m venv "$VENV" >/dev/null 2>&1; }
if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -m pip --version >/dev/null 2>&1; then
    PY="$VENV/bin/python"
elif make_venv; then
    PY="$VENV/bin/python"
elif command -v apt-get >/dev/null 2>&1 &&
     apt_install "python3-venv" "python$("$PYTHON3" -c 'import sys; print("%d.%d" % sys.version_info[:2])')-venv" &&
     make_venv; then
    PY="$VENV/bin/python"
else
    rm -rf "$VENV"
    log "warning: cannot create a virtualenv; installing into $PYTHON3 itself"
    PY="$PYTHON3"
    export PIP_BREAK_SYSTEM_PACKAGES=1  # Debian marks its interpreter externally managed
    "$PY" -m pip --version >/dev/null 2>&1 || apt_install python3-pip
fi
log "python: $PY ($("$PY" --version 2>&1))"

# ---- the package (rebuilt when its native sources or build files change) ------------------
STAMP="$ROOT/build/.run-sh-installed"
sources_hash() {
    { cat setup.py pyproject.toml csrc/*.h csrc/*.cc stateengine/*.pyx stateengine/*.pxi \
          stateengine/includes/*.pxd; echo "$PY"; } 2>/dev/null | sha256sum | cut -d' ' -f1
}
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$(sources_hash)" ] &&
   (cd "$ROOT" && "$PY" -c "import stateengine._native" >/dev/null 2>&1); then
    log "stateengine is installed and up to date"
else
    log "pip install -e .[test,spark,bench] (builds the native extension)"
    "$PY" -m pip install --disable-pip-version-check -q -e ".[test,spark,bench]"
    (cd "$ROOT" && "$PY" -c "import stateengine._native") ||
        die "stateengine._native does not import after the build"
    mkdir -p "$(dirname "$STAMP")"
    sources_hash > "$STAMP"
fi

# Spark's Python workers and driver must use the interpreter that has stateengine, and Spark
# must bind to loopback only.
export PYSPARK_PYTHON="$PY"
export PYSPARK_DRIVER_PYTHON="$PY"
export SPARK_LOCAL_IP=127.0.0.1

# ---- the oldest supported Spark, in a virtualenv of its own --------------------------------
# pyspark 3.5 with the numpy/pandas/pyarrow it supports (numpy 1.x, pandas < 2.3, pyarrow < 18),
# and moto for the local S3 server of the object-storage tests (test_spark_s3, test_demo).
# stateengine comes from this checkout through a .pth file: the install above already built the
# native extension in place for this same interpreter, so it is not compiled a second time.
SPARK35_VENV="$ROOT/.venv-spark35"
SPARK35_REQS=("pyspark==3.5.*" "numpy>=1.26,<2" "pandas>=2.0,<2.3" "pyarrow>=15,<18"
              "pytest>=8" "pytest-timeout>=2.3" "moto[server]>=5.0")
# The Spark tests, less the two that need more than Spark 3.5's pip package offers or cost
# most and cover no Spark-version behaviour: Spark Connect (3.5's package ships no Connect
# server) and the standalone cluster (it builds the wheel and starts three JVMs; packaging
# does not depend on the Spark version).
# (-p no:warnings: Spark 3.5's own calls of deprecated pandas and distutils APIs warn hundreds
# of times.)
SPARK35_TESTS=(tests/test_spark_*.py tests/test_demo.py -m "not cluster and not connect"
               -p no:warnings)
spark35() {
    local py="$SPARK35_VENV/bin/python" stamp="$SPARK35_VENV/.stateengine-reqs"
    if [ ! -x "$py" ] || [ "$(cat "$stamp" 2>/dev/null)" != "${SPARK35_REQS[*]}" ]; then
        log "creating $SPARK35_VENV (${SPARK35_REQS[*]})"
        rm -rf "$SPARK35_VENV"
        "$PYTHON3" -m venv "$SPARK35_VENV" || return 1
        "$py" -m pip install --disable-pip-version-check -q "${SPARK35_REQS[@]}" || return 1
        echo "${SPARK35_REQS[*]}" > "$stamp"
    fi
    "$py" - "$ROOT" <<'PY' || return 1
import os, sys, sysconfig
with open(os.path.join(sysconfig.get_paths()["purelib"], "stateengine-checkout.pth"), "w") as f:
    f.write(sys.argv[1] + "\n")
PY
    (cd "$ROOT" && "$py" -c "import stateengine._native, pyspark; print('pyspark', pyspark.__version__)") ||
        { log "error: stateengine or pyspark does not import in $SPARK35_VENV"; return 1; }
    log "Spark tests on Spark 3.5 ($SPARK35_VENV)"
    PYSPARK_PYTHON="$py" PYSPARK_DRIVER_PYTHON="$py" "$py" -m pytest "${SPARK35_TESTS[@]}" "$@"
}

case "$COMMAND" in
    demo) exec "$PY" -m stateengine.spark.demo "$@" ;;
    spark35) spark35 "$@"; exit $? ;;
    test)
        if [ $# -gt 0 ]; then
            # test paths given (tests/test_x.py, tests/test_x.py::name): run only those
            for arg in "$@"; do
                if [ -e "${arg%%::*}" ]; then exec "$PY" -m pytest "$@"; fi
            done
            exec "$PY" -m pytest tests "$@"
        fi
        status=0
        "$PY" -m pytest tests || status=$?
        spark35 || status=$((status == 0 ? 1 : status))
        exit "$status"
        ;;
esac
