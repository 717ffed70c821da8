"""pytest plugin of scripts/test-wheel.sh: the tests run against the installed wheel, or not at
all. At start-up it checks that ``stateengine`` (and its extension) import from the test
virtualenv's site-packages, not from a checkout, that the extension needs no shared librocksdb
or compression library, and that it carries no RocksDB sync points (a build without NDEBUG);
it prints what was imported."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig


def _needed(path: str) -> list[str]:
    out = subprocess.run(["readelf", "-d", path], capture_output=True, text=True, check=True)
    return [line.split("[", 1)[1].rstrip("]") for line in out.stdout.splitlines()
            if "(NEEDED)" in line]


def _check() -> str:
    import stateengine
    import stateengine._native as native

    site = os.path.realpath(sysconfig.get_paths()["purelib"])
    for name, path in (("stateengine", stateengine.__file__),
                       ("stateengine._native", native.__file__)):
        if not os.path.realpath(path).startswith(site + os.sep):
            raise SystemExit(f"test-wheel: {name} was imported from {path}, not from the wheel "
                             f"installed in {site}")
    needed = _needed(native.__file__)
    shared = [n for n in needed if any(k in n for k in ("rocksdb", "snappy", "lz4", "zstd"))]
    if shared:
        raise SystemExit(f"test-wheel: {native.__file__} needs shared {shared}")
    symbols = subprocess.run(["nm", native.__file__], capture_output=True, text=True).stdout
    if "_ZN7rocksdb9SyncPoint" in symbols:  # rocksdb::SyncPoint, compiled in without NDEBUG
        raise SystemExit(f"test-wheel: {native.__file__} carries RocksDB sync points (no NDEBUG)")
    return (f"stateengine {stateengine.__version__} from {os.path.dirname(stateengine.__file__)} "
            f"(python {sys.executable}); extension needs {', '.join(needed)}")


# printed (not a report header, which -q hides) so every run's log says what it tested
print(f"installed wheel: {_check()}", file=sys.stderr, flush=True)
