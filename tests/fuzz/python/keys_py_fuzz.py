"""atheris harness: RocksDB state keys read back in Python (KeyedStateBackend.parse_state_key,
parse_timer_key: the native split, then the key columns decoded by _codecs.pxi), for backends
of an int, a string and an (int, string) key.

Input: u8 backend and layout | u8 namespace codec | raw key. Oracles: only CorruptionError
escapes; a key that parses encodes back to its own bytes."""

from __future__ import annotations

import atexit
import shutil
import tempfile

from harness import check, instrumented, main

with instrumented():
    from stateengine import KeyedStateBackend, _native
    from stateengine.errors import CorruptionError

_DIR = tempfile.mkdtemp(prefix="fuzz-keys-")
atexit.register(shutil.rmtree, _DIR, True)
BACKENDS = []
for i, key in enumerate((1, "k", (1, "k"))):
    b = KeyedStateBackend(f"{_DIR}/{i}", key_type=type(key) if not isinstance(key, tuple) else None)
    b.set_current_key(key)  # fixes the key schema
    BACKENDS.append(b)
NAMESPACE_CODECS = (0, 1, 2, 3, 4, 5, 6, 8)


def test_one_input(data: bytes) -> None:
    if len(data) < 2:
        return
    b = BACKENDS[data[0] % 3]
    timer = bool(data[0] & 4)
    ns_codec = NAMESPACE_CODECS[data[1] % len(NAMESPACE_CODECS)]
    raw = data[2:]
    try:
        if timer:
            kg, _ts, key, ns = b.parse_timer_key(raw)
        else:
            kg, key, ns, uk = b.parse_state_key(raw, ns_codec, bool(data[0] & 8))
    except CorruptionError:
        return
    check(0 <= kg < b.max_parallelism, f"key group {kg}")
    cols = key if isinstance(key, tuple) else (key,)
    encoded = b"".join(_native.encode_for_codec(c, v) for c, v in zip(b.key_codecs, cols))
    check(encoded in raw, f"{raw!r} parses to key {key!r}, whose bytes {encoded!r} it lacks")


if __name__ == "__main__":
    main(test_one_input)
