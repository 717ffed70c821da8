"""Which librocksdb the benchmarked extension links, and building the private Release copy.

``debian``: the in-place build (``python setup.py build_ext --inplace``) against Debian's
shared librocksdb 7.8.3, which is compiled without NDEBUG (assertions and sync points on every
call). ``release``: the same sources linked statically against a Release build of that
RocksDB (bench/build-release-rocksdb.sh), placed in bench/.build/release so the worktree's own
build stays Debian's; release wheels link a Release RocksDB, so headline numbers use it.

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
DEFAULT_PREFIX = os.path.expanduser("~/.cache/stateengine/rocksdb-7.8.3-release")
RELEASE_ROOT = os.path.join(BENCH, ".build", "release")
RELEASE_TEMP = os.path.join(BENCH, ".build", "tmp-release")
CHILD_ENV = "STATEENGINE_BENCH_BUILD"


def release_prefix() -> str:
    return os.environ.get("STATEENGINE_RELEASE_ROCKSDB", DEFAULT_PREFIX)


def release_available(prefix: str) -> bool:
    lib = os.path.join(prefix, "lib", "librocksdb.a")
    if not (os.path.isfile(lib) and os.path.isfile(os.path.join(prefix, "lib", "pkgconfig",
                                                                  "rocksdb.pc"))):
        return False
    # csrc/ subclasses rocksdb::MergeOperator: a librocksdb without RTTI cannot be linked;
    # a thread-local perf context (its TLS init symbol) means a build older than NPERF_CONTEXT
    nm = subprocess.run(["nm", "-g", "--defined-only", lib], capture_output=True, text=True)
    return ("_ZTIN7rocksdb13MergeOperatorE" in nm.stdout
            and "_ZTHN7rocksdb12perf_contextE" not in nm.stdout)


def choose(requested: str | None) -> str:
    if requested:
        return requested
    return "release" if release_available(release_prefix()) else "debian"


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
    if not release_available(prefix):
        raise SystemExit(f"bench: no usable Release RocksDB (static, with RTTI, NPERF_CONTEXT) under {prefix}; "
                         f"build it with "
                         f"bench/build-release-rocksdb.sh {prefix} (or use --rocksdb debian)")
    env = dict(os.environ, PKG_CONFIG_PATH=os.pathsep.join(
        p for p in (os.path.join(prefix, "lib", "pkgconfig"), os.environ.get("PKG_CONFIG_PATH"))
        if p))
    if not force and _older_than(os.path.join(prefix, "lib", "librocksdb.a")):
        force = ["--force"]  # setuptools does not see the static library as a dependency
    _setup(["--build-lib", RELEASE_ROOT, "--build-temp", RELEASE_TEMP, *force], env)
    _link_python_sources()
    return RELEASE_ROOT


def _older_than(path: str) -> bool:
    """Whether the Release extension is missing or older than path."""
    import glob

    built = glob.glob(os.path.join(RELEASE_ROOT, "stateengine", "_native*.so"))
    return not built or min(os.path.getmtime(b) for b in built) < os.path.getmtime(path)


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
        # numpy's OpenBLAS threads spin after use; on 2 cores they steal time from every case
        env.setdefault("OPENBLAS_NUM_THREADS", "1")
        sys.stdout.flush()
        os.execve(sys.executable, [sys.executable, os.path.abspath(script), *sys.argv[1:]], env)
    import stateengine

    expected = REPO if build == "debian" else RELEASE_ROOT
    if not os.path.abspath(stateengine.__file__).startswith(expected + os.sep):
        raise SystemExit(f"bench: imported {stateengine.__file__}, expected a build under {expected}")
    return build


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
        info["rocksdb"] = f"7.8.3 Release, static, NPERF_CONTEXT ({release_prefix()})"
    else:
        info["rocksdb"] = "7.8.3 Debian librocksdb (no NDEBUG: assertions on)"
    info["librocksdb_shared"] = shared[0] if shared else "none (static)"
    return info
