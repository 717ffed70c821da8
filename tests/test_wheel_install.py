"""The release wheel on a machine without librocksdb-dev or a compiler, in small:
scripts/test-wheel.sh installs the wheel (``wheel`` fixture: static Release RocksDB) into a
clean virtualenv and runs a few core tests in a private mount namespace where Debian's
librocksdb, its headers, the compilers and pkg-config are hidden and the checkout is empty.
The whole suite against the wheel (core, Spark, Connect and cluster tests) is the same script
without test paths: docs/operations/building-wheels.md."""

from __future__ import annotations

import os
import subprocess

import pytest

pytestmark = [pytest.mark.slow]

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.timeout(1800)
def test_wheel_passes_core_tests_without_librocksdb_or_a_compiler(wheel):
    if os.geteuid() != 0:
        pytest.skip("scripts/test-wheel.sh needs root for its private mount namespace")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    proc = subprocess.run(
        [os.path.join(ROOT, "scripts", "test-wheel.sh"), "--wheel", wheel, "--extras", "test",
         "tests/test_states.py", "tests/test_layout.py", "tests/test_snapshot_roundtrip.py",
         "-q", "-p", "no:cacheprovider"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=1700)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    assert f"hidden: librocksdb, /usr/include/rocksdb, compilers, pkg-config, {ROOT}" in out
    header = next(line for line in out.splitlines() if line.startswith("installed wheel:"))
    # imported from the test virtualenv, needing no librocksdb (static) beside libstdc++
    assert "/stateengine-wheel-test." in header and "/site-packages/stateengine" in header, header
    assert "rocksdb" not in header.split("extension needs", 1)[1], header
    assert " passed" in out and " failed" not in out
