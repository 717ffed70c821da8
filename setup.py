"""Builds stateengine._native: csrc/*.cc (C++17) + the Cython bindings, linked to librocksdb.

librocksdb is located with ``pkg-config rocksdb`` only, so the static Release build of release
wheels (scripts/build-rocksdb.sh writes its ``rocksdb.pc``) and Debian's ``librocksdb-dev`` are
found the same way. Set PKG_CONFIG_PATH to point at other ``.pc`` files.
"""

from __future__ import annotations

import glob
import os
import shlex
import subprocess
import sys

from setuptools import Extension, setup

MIN_ROCKSDB = (7, 0)
INSTALL_HINT = (
    "install it with `apt-get install librocksdb-dev libsnappy-dev pkg-config` (Debian/Ubuntu), "
    "or build the wheels' static RocksDB with scripts/build-rocksdb.sh and set "
    "PKG_CONFIG_PATH=<the prefix it prints>/lib/pkgconfig"
)


class RocksDBNotFound(SystemExit):
    """The one build error for a missing or unusable librocksdb."""


def _pkg_config(package: str, *args: str) -> str:
    try:
        out = subprocess.run(["pkg-config", *args, package], check=True, capture_output=True,
                             text=True)
    except FileNotFoundError as e:
        raise RocksDBNotFound(f"stateengine build error: pkg-config is not installed; {INSTALL_HINT}") from e
    except subprocess.CalledProcessError as e:
        raise RocksDBNotFound(
            f"stateengine build error: `pkg-config {' '.join(args)} {package}` failed "
            f"({e.stderr.strip() or 'package not found'}); librocksdb is missing; {INSTALL_HINT}"
        ) from e
    return out.stdout.strip()


def rocksdb_build_flags(package: str = "rocksdb") -> dict[str, list[str]]:
    """Compiler and linker flags for librocksdb (plus snappy for snapshot framing)."""
    version = _pkg_config(package, "--modversion")
    try:
        parts = tuple(int(p) for p in version.split(".")[:2])
    except ValueError:
        raise RocksDBNotFound(f"stateengine build error: unreadable rocksdb version {version!r}; {INSTALL_HINT}")
    if parts < MIN_ROCKSDB:
        raise RocksDBNotFound(
            f"stateengine build error: librocksdb {version} is too old (need >= "
            f"{'.'.join(map(str, MIN_ROCKSDB))}); {INSTALL_HINT}")
    cflags = shlex.split(_pkg_config(package, "--cflags"))
    libs = shlex.split(_pkg_config(package, "--libs"))
    if not any("snappy" in f for f in libs):  # a static rocksdb.pc links snappy's archive itself
        try:
            libs += shlex.split(_pkg_config("snappy", "--libs"))
        except RocksDBNotFound:
            libs.append("-lsnappy")  # Debian's libsnappy-dev ships a .pc file, older systems may not
    return {
        "include_dirs": [f[2:] for f in cflags if f.startswith("-I")],
        "extra_compile_args": [f for f in cflags if not f.startswith("-I")],
        "library_dirs": [f[2:] for f in libs if f.startswith("-L")],
        "libraries": [f[2:] for f in libs if f.startswith("-l")],
        "extra_link_args": [f for f in libs if not f.startswith(("-L", "-l"))],
    }


def _extension() -> Extension:
    flags = rocksdb_build_flags(os.environ.get("STATEENGINE_ROCKSDB_PC", "rocksdb"))
    return Extension(
        "stateengine._native",
        sources=["stateengine/_native.pyx", *sorted(glob.glob("csrc/*.cc"))],
        include_dirs=["csrc", *flags["include_dirs"]],
        library_dirs=flags["library_dirs"],
        libraries=flags["libraries"],
        language="c++",
        extra_compile_args=["-std=c++17", "-O2", "-g0", "-fvisibility=hidden",
                            "-Wno-unused-function", *flags["extra_compile_args"]],
        extra_link_args=flags["extra_link_args"],
    )


if __name__ == "__main__":
    from Cython.Build import cythonize

    setup(
        ext_modules=cythonize(
            [_extension()],
            compiler_directives={"language_level": "3"},
            include_path=["stateengine"],
        ),
    )
