"""atheris harness: operator state files (stateengine/operator_state.py, format 3 and 2; a
format 1 pickle must be refused without allow_pickle, never unpickled).

Input: a file; a format 3 file gets its trailing CRC-32C recomputed first, so the fuzzer
reaches the body instead of stopping at the checksum. Oracles: only CorruptionError or
PickleNotAllowedError escape; a file that restores writes back a file that restores to the
same lists (the same bytes)."""

from __future__ import annotations

import struct

from harness import check, instrumented, main

with instrumented():
    from stateengine import _native
    from stateengine.errors import CorruptionError, PickleNotAllowedError
    from stateengine.operator_state import MAGIC, OperatorStateBackend


def test_one_input(data: bytes) -> None:
    if data[:4] == MAGIC and len(data) >= 10 and struct.unpack_from(">H", data, 4)[0] == 3:
        data = data[:-4] + struct.pack(">I", _native.crc32c(data[:-4])) if len(data) >= 22 else data
    try:
        b = OperatorStateBackend.restore([data], 0, 1, source="fuzz")
    except (CorruptionError, PickleNotAllowedError):
        return
    written = b.snapshot_bytes()
    again = OperatorStateBackend.restore([written], 0, 1, source="again")
    # compared as bytes: NaN elements are equal as bytes, not as floats
    check(again.snapshot_bytes() == written, "written back, the operator state reads differently")


if __name__ == "__main__":
    main(test_one_input)
