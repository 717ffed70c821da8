"""Builds the libFuzzer harnesses: csrc/*.cc and each tests/fuzz/native/<name>_fuzz.cc with
clang, AddressSanitizer, UndefinedBehaviorSanitizer (no recovery: any UB is a crash) and
libFuzzer's coverage, linked to the system librocksdb. Objects and binaries go to
build/fuzz/, rebuilt only when a source or the flags change."""

from __future__ import annotations

import glob
import hashlib
import os
import shlex
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
PROJECT = os.path.dirname(os.path.dirname(HERE))
OUT = os.path.join(PROJECT, "build", "fuzz")
SANITIZE = ["-fsanitize=address,undefined", "-fno-sanitize-recover=undefined"]
CFLAGS = ["-std=c++17", "-O1", "-g", "-fno-omit-frame-pointer", *SANITIZE]


def clang() -> str:
    """clang++ (Debian's clang, or clang-14 from libclang-rt-14-dev's toolchain)."""
    for name in ("clang++", "clang++-14"):
        path = shutil.which(name)
        if path:
            return path
    raise RuntimeError("clang++ is not installed: `apt-get install clang libclang-rt-14-dev` "
                       "(./run.sh installs them)")


def harnesses() -> list[str]:
    """Names of the native harnesses (tests/fuzz/native/<name>_fuzz.cc)."""
    return sorted(os.path.basename(p)[:-len("_fuzz.cc")]
                  for p in glob.glob(os.path.join(HERE, "native", "*_fuzz.cc")))


def _pkg(*args: str) -> list[str]:
    out = subprocess.run(["pkg-config", *args], check=True, capture_output=True, text=True)
    return shlex.split(out.stdout)


def _digest(*parts: bytes | str) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p if isinstance(p, bytes) else p.encode())
    return h.hexdigest()[:16]


def _headers() -> bytes:
    return b"".join(open(p, "rb").read() for p in sorted(glob.glob(os.path.join(PROJECT, "csrc", "*.h")))
                    + sorted(glob.glob(os.path.join(HERE, "native", "*.h"))))


def _compile(src: str, flags: list[str], obj_dir: str, headers: bytes) -> str:
    obj = os.path.join(obj_dir, f"{os.path.basename(src)}-{_digest(open(src, 'rb').read(), headers, ' '.join(flags))}.o")
    if not os.path.exists(obj):
        tmp = obj + ".tmp"
        subprocess.run([clang(), *flags, "-c", src, "-o", tmp], check=True, capture_output=True,
                       text=True)
        os.replace(tmp, obj)
    return obj


def build(names: list[str] | None = None, jobs: int = 2) -> dict[str, str]:
    """name -> path of each harness binary, built if missing or stale."""
    names = names or harnesses()
    obj_dir = os.path.join(OUT, "obj")
    os.makedirs(obj_dir, exist_ok=True)
    includes = ["-I", os.path.join(PROJECT, "csrc"), "-I", os.path.join(HERE, "native"),
                *_pkg("--cflags", "rocksdb")]
    flags = [*CFLAGS, "-fsanitize=fuzzer-no-link", *includes]
    headers = _headers()
    sources = sorted(glob.glob(os.path.join(PROJECT, "csrc", "*.cc")))
    with ThreadPoolExecutor(jobs) as pool:
        objs = list(pool.map(lambda s: _compile(s, flags, obj_dir, headers), sources))
        mains = list(pool.map(lambda n: _compile(os.path.join(HERE, "native", f"{n}_fuzz.cc"),
                                                 flags, obj_dir, headers), names))
    libs = _pkg("--libs", "rocksdb") + ["-lsnappy"]
    out = {}
    for name, main in zip(names, mains):
        binary = os.path.join(OUT, f"{name}_fuzz")
        stamp = _digest(*(os.path.basename(o) for o in objs), os.path.basename(main))
        if not (os.path.exists(binary) and open(binary + ".stamp").read() == stamp
                if os.path.exists(binary + ".stamp") else False):
            subprocess.run([clang(), *CFLAGS, "-fsanitize=fuzzer", main, *objs, *libs,
                            "-o", binary], check=True, capture_output=True, text=True)
            with open(binary + ".stamp", "w") as f:
                f.write(stamp)
        out[name] = binary
    return out


if __name__ == "__main__":
    for name, path in build().items():
        print(name, path)
