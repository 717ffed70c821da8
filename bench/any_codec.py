"""Scalar cost of the default ("any") serializer: value() and update() on one hot key, and
the codec alone (encode_for_codec / decode_for_codec, no RocksDB).

    python bench/any_codec.py                 # best of 7 runs of 200k calls per case
    PYTHONPATH=<other build> python bench/any_codec.py   # the same against another build

Primitive values (int, float, str, bool, bytes) must cost what they cost before containers
were encoded natively; the container rows show what a tuple, list or dict costs. Prints
ns/call; compare two builds back to back on a quiet machine (the state calls include a
RocksDB put/get, whose cost varies with load far more than the codec's).
"""

from __future__ import annotations

import os
import sys
import tempfile
import timeit

CASES = [
    ("int", 12345), ("float", 1.5), ("str", "hello world"), ("bool", True),
    ("bytes", b"\x00" * 16), ("tuple(3)", (1, "a", 2.5)), ("list(10)", list(range(10))),
    ("dict(3)", {"a": 1, "b": (2, 3), "c": [4.0]}), ("bigint", 2**100),
]


def main() -> None:
    from stateengine import KeyedStateBackend, ValueStateDescriptor, _native

    number, repeat = 200_000, 7
    backend = KeyedStateBackend(os.path.join(tempfile.mkdtemp(), "db"), key_type=int)
    backend.set_current_key(1)
    print(f"stateengine at {os.path.dirname(_native.__file__)}")
    print(f"{'value':<14}{'update() ns':>12}{'value() ns':>12}{'encode ns':>12}{'decode ns':>12}")
    for label, value in CASES:
        state = backend.get_state(ValueStateDescriptor(f"v-{label}"))
        try:
            state.update(value)
        except Exception as e:  # an older build may refuse a case; say so and go on
            print(f"{label:<14}{type(e).__name__}")
            continue
        upd = min(timeit.repeat(lambda: state.update(value), number=number, repeat=repeat))
        get = min(timeit.repeat(state.value, number=number, repeat=repeat))
        raw = _native.encode_for_codec(1, value)
        enc = min(timeit.repeat(lambda: _native.encode_for_codec(1, value), number=number,
                                repeat=repeat))
        dec = min(timeit.repeat(lambda: _native.decode_for_codec(1, raw), number=number,
                                repeat=repeat))
        print(f"{label:<14}" + "".join(f"{t / number * 1e9:>12.0f}" for t in (upd, get, enc, dec)))
    backend.dispose()


if __name__ == "__main__":
    sys.exit(main())
