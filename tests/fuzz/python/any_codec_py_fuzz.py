"""atheris harness: the Python-side value decoders of every codec (_codecs.pxi decode_whole:
the ANY codec's tags, containers and big ints; fixed-width, varint-prefixed and ordered
codecs), no pickle gate (pickles must be refused, never unpickled).

Input: u8 codec id | bytes. Oracles: only stateengine errors (CorruptionError,
PickleNotAllowedError) escape; a value decoded from bytes encodes back to the same bytes
(decoder accepts => canonical), except where a codec documents a normalization."""

from __future__ import annotations

import math

from harness import check, instrumented, main

with instrumented():
    from stateengine import _native
    from stateengine.errors import CorruptionError, PickleNotAllowedError

CODECS = 15


def normalized(codec: int, value: object) -> bool:
    """Values whose bytes do not survive the trip through Python: NaN payloads and -0.0 of the
    ordered double codec (ordered codecs sort by value), and float32 NaNs (FLOAT), whose
    signaling bit the conversion to a Python float (a double) sets."""
    if not isinstance(value, float):
        return False
    return (codec == 11 and (math.isnan(value) or value == 0.0)) or \
        (codec == 9 and math.isnan(value))


def test_one_input(data: bytes) -> None:
    if not data:
        return
    codec, body = data[0] % (CODECS + 1), data[1:]
    try:
        value = _native.decode_for_codec(codec, body)
    except (CorruptionError, PickleNotAllowedError):
        return
    except ValueError as e:  # an unknown codec id is the caller's error, said so
        check(codec >= CODECS and "codec" in str(e), f"ValueError {e} for codec {codec}")
        return
    if codec == 14 or normalized(codec, value):
        return
    again = _native.encode_for_codec(codec, value)
    check(again == body, f"codec {codec}: {body!r} decodes to {value!r}, which encodes as "
                         f"{again!r}")


if __name__ == "__main__":
    main(test_one_input)
