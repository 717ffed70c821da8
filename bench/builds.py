"""Which librocksdb the benchmarked extension links: the release wheel's by default.

``release`` (the default): the extension compiled from this worktree and linked statically
against the Release RocksDB that release wheels link (scripts/build-rocksdb.sh: Debian's
7.8.3 source, NDEBUG, RTTI, NPERF_CONTEXT; built on first use and cached under
~/.cache/stateengine), placed in bench/.build/release so the worktree's own build stays
Debian's. ``debian`` (``--rocksdb debian``): the in-place build (``python setup.py build_ext
--inplace``) against Debian's shared librocksdb 7.8.3, which is compiled without NDEBUG
(assertions and sync points on every call).

The benchmark process (and Spark's Python workers, through PYTHONPATH) import stateengine from
the chosen root; run.py re-executes itself with that root first on PYTHONPATH.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

BENCH = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(BENCH)
BUILD_ROCKSDB = os.path.join(REPO, "scripts", "build-rocksdb.sh")
RELEASE_ROOT = os.path.join(BENCH, ".build", "release")
RELEASE_TEMP = os.path.join(BENCH, ".build", "tmp-release")
CHILD_ENV = "STATEENGINE_BENCH_BUILD"
PREFIX_ENV = "STATEENGINE_BENCH_ROCKSDB"  # the prefix, handed to the restarted process


def release_prefix() -> str:
    """The release wheels' RocksDB: built (or found in its cache) by scripts/build-rocksdb.sh,
    which checks it (static, RTTI, NDEBUG, no perf context) and prints its prefix."""
    if not os.environ.get(PREFIX_ENV):
        print("bench: the Release RocksDB (scripts/build-rocksdb.sh; the first build takes "
              "long, later runs reuse its cache)", file=sys.stderr, flush=True)
        proc = subprocess.run([BUILD_ROCKSDB], stdout=subprocess.PIPE, text=True)
        if proc.returncode != 0:
            raise SystemExit(f"bench: {BUILD_ROCKSDB} failed (or use --rocksdb debian)")
        os.environ[PREFIX_ENV] = proc.stdout.strip().splitlines()[-1]
    return os.environ[PREFIX_ENV]


def choose(requested: str | None) -> str:
    return requested or "release"


def _setup(args: list[str], env: dict[str, str]) -> None:
    cmd = [sys.executable, "setup.py", "build_ext", "-q", *args]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout[-4000:] + proc.stderr[-4000:])
        raise SystemExit(f"bench: building the extension failed: {' '.join(cmd)}")


def prepare(build: str, rebuild: bool = False) -> str:
    """Builds what ``build`` needs if it is missing or stale; returns the import root."""
    force = ["--force"] if rebuild else []
    if build == "debian":
        _setup(["--inplace", *force], dict(os.environ))
        return REPO
    prefix = release_prefix()
    env = dict(os.environ, PKG_CONFIG_PATH=os.pathsep.join(
        p for p in (os.path.join(prefix, "lib", "pkgconfig"), os.environ.get("PKG_CONFIG_PATH"))
        if p))
    # setuptools does not see the static library as a dependency: a build against another
    # RocksDB (another cache key) is redone from scratch
    stamp = os.path.join(RELEASE_ROOT, ".rocksdb-prefix")
    try:
        with open(stamp) as f:
            same = f.read() == prefix
    except OSError:
        same = False
    if not same:
        force = ["--force"]
    _setup(["--build-lib", RELEASE_ROOT, "--build-temp", RELEASE_TEMP, *force], env)
    _link_python_sources()
    with open(stamp, "w") as f:
        f.write(prefix)
    return RELEASE_ROOT


def _link_python_sources() -> None:
    """bench/.build/release/stateengine holds the Release extension; everything else in it is
    a symlink to the worktree's package, so source edits need no copy step."""
    src = os.path.join(REPO, "stateengine")
    dst = os.path.join(RELEASE_ROOT, "stateengine")
    os.makedirs(dst, exist_ok=True)
    for name in os.listdir(src):
        if name.endswith(".so") or name == "__pycache__" or name.endswith(".cpp"):
            continue
        link = os.path.join(dst, name)
        if os.path.islink(link) or os.path.exists(link):
            if os.path.islink(link) and os.readlink(link) == os.path.join(src, name):
                continue
            if os.path.isdir(link) and not os.path.islink(link):
                shutil.rmtree(link)
            else:
                os.remove(link)
        os.symlink(os.path.join(src, name), link)


def use(requested: str | None, rebuild: bool, script: str) -> str:
    """The build this process runs on. The first call builds it and restarts ``script`` (with
    the same arguments) with its root first on PYTHONPATH, so the process and every Spark
    Python worker import the same build; in the restarted process it checks the import."""
    build = os.environ.get(CHILD_ENV)
    if build is None:
        build = choose(requested)
        root = prepare(build, rebuild)
        paths = [root] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
                          if p and os.path.abspath(p) not in (REPO, RELEASE_ROOT)]
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(paths), **{CHILD_ENV: build})
        env.setdefault("PYSPARK_PYTHON", sys.executable)
        env.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
        env["SPARK_LOCAL_IP"] = "127.0.0.1"  # loopback only
        # Spark starts its Python workers as `python -m pyspark.daemon` in this process's working
        # directory, and `-m` puts that directory first on sys.path: run from the repository,
        # the workers imported its in-place build (Debian's RocksDB) instead of the root above.
        env["PYTHONSAFEPATH"] = "1"
        # numpy's OpenBLAS threads spin after use; on 2 cores they steal time from every case
        env.setdefault("OPENBLAS_NUM_THREADS", "1")
        sys.stdout.flush()
        os.execve(sys.executable, [sys.executable, os.path.abspath(script), *sys.argv[1:]], env)
    import stateengine

    expected = REPO if build == "debian" else RELEASE_ROOT
    if not os.path.abspath(stateengine.__file__).startswith(expected + os.sep):
        raise SystemExit(f"bench: imported {stateengine.__file__}, expected a build under {expected}")
    return build


def check_workers(spark, build: str) -> str:
    """The extension Spark's Python workers import (a one-row job); raises SystemExit unless it
    is the build this process runs on."""
    import stateengine._native as native

    def where(frames):
        import pandas as pd

        import stateengine._native as worker_native

        for _ in frames:
            yield pd.DataFrame({"path": [worker_native.__file__]})

    path = spark.range(1).mapInPandas(where, "path string").collect()[0]["path"]
    if os.path.realpath(path) != os.path.realpath(native.__file__):
        raise SystemExit(f"bench: Spark's Python workers import {path}, this process "
                         f"{native.__file__} ({build})")
    return path


def describe(build: str) -> dict[str, str]:
    """What the imported extension links, for the results' machine block."""
    import stateengine._native as native

    info = {"build": build, "extension": os.path.relpath(native.__file__, REPO)}
    try:
        ldd = subprocess.run(["ldd", native.__file__], capture_output=True, text=True).stdout
    except OSError:
        ldd = ""
    shared = [line.split()[2] for line in ldd.splitlines() if "librocksdb" in line and "=>" in line]
    if build == "release":
        info["rocksdb"] = (f"7.8.3 Release, static, NPERF_CONTEXT, the release wheel's "
                           f"({os.path.basename(release_prefix())})")
    else:
        info["rocksdb"] = "7.8.3 Debian librocksdb (no NDEBUG: assertions on)"
    info["librocksdb_shared"] = shared[0] if shared else "none (static)"
    return info
