"""The engine's key group of a key equals Spark SQL's ``pmod(hash(cols...), maxP)``.

Each case builds a few thousand values of one Spark type, lets a real local SparkSession hash
them in one job, and compares bit for bit with ``stateengine.spark_hash``,
``stateengine.assign_key_group`` and a backend's ``set_current_key`` (whose fast paths for
bigint and string keys hash without the generic key codec).
"""

from __future__ import annotations

import math
import random
import struct

import numpy as np
import pytest

try:
    from pyspark.sql import functions as F
    from pyspark.sql import types as T
except ImportError:  # the `spark` fixture then fails every test here with the install hint
    F = T = None

import stateengine
from stateengine import assign_key_group, spark_hash

pytestmark = pytest.mark.spark

MAX_PARALLELISMS = (128, 32768)
N = 3000


def _spark_key_groups(spark, spark_types, rows):
    """[(hash, kg for each max parallelism)] for rows, computed by Spark in one job."""
    cols = [f"c{i}" for i in range(len(spark_types))]
    schema = T.StructType([T.StructField("i", T.IntegerType(), False)] +
                          [T.StructField(c, t, True) for c, t in zip(cols, spark_types)])
    df = spark.createDataFrame([(i, *row) for i, row in enumerate(rows)], schema)
    hashed = ", ".join(cols)
    out = df.select(
        "i", F.expr(f"hash({hashed})").alias("h"),
        *[F.expr(f"pmod(hash({hashed}), {m})").alias(f"kg{m}") for m in MAX_PARALLELISMS],
    ).collect()
    out.sort(key=lambda r: r.i)
    assert len(out) == len(rows)
    return [(r.h, *(r[f"kg{m}"] for m in MAX_PARALLELISMS)) for r in out]


def _check(spark, make_backend, spark_types, rows, to_key):
    """Compares Spark's hashes of rows with the engine's for the keys to_key(row)."""
    expected = _spark_key_groups(spark, spark_types, rows)
    keys = [to_key(row) for row in rows]
    backend = make_backend(max_parallelism=32768)
    mismatches = []
    for row, key, (h, *kgs) in zip(rows, keys, expected):
        ours = (spark_hash(key), *(assign_key_group(key, m) for m in MAX_PARALLELISMS))
        backend.set_current_key(key)
        if ours != (h, *kgs) or backend.get_current_key_group() != kgs[-1]:
            mismatches.append((row, (h, *kgs), ours, backend.get_current_key_group()))
    assert not mismatches, (f"{len(mismatches)} of {len(rows)} keys disagree with Spark; first: "
                            f"(row, spark (hash, kg128, kg32768), engine, backend kg32768) = "
                            f"{mismatches[:5]}")


def _rng(name: str) -> random.Random:
    return random.Random(f"spark-hash-{name}")


def test_int_keys(spark, make_backend):
    rng = _rng("int")
    values = [0, 1, -1, 42, 2**31 - 1, -2**31, 2**15, -2**15 - 1]
    values += [rng.randint(-2**31, 2**31 - 1) for _ in range(N // 2)]
    values += [rng.randint(-1000, 1000) for _ in range(N // 2)]
    _check(spark, make_backend, [T.IntegerType()], [(v,) for v in values],
           lambda row: np.int32(row[0]))


def test_bigint_keys(spark, make_backend):
    rng = _rng("bigint")
    values = [0, 1, -1, 2**63 - 1, -2**63, 2**31, -2**31 - 1, 2**32, 2**53 + 1]
    values += [rng.randint(-2**63, 2**63 - 1) for _ in range(N // 2)]
    values += [rng.randint(-10**6, 10**6) for _ in range(N // 2)]
    _check(spark, make_backend, [T.LongType()], [(v,) for v in values], lambda row: row[0])


def _double_from_bits(bits: int) -> float:
    return struct.unpack(">d", bits.to_bytes(8, "big"))[0]


def test_double_keys(spark, make_backend):
    rng = _rng("double")
    values = [0.0, -0.0, math.nan, -math.nan, _double_from_bits(0x7FF0000000000001),
              _double_from_bits(0xFFF8000000000123), math.inf, -math.inf,
              5e-324, -5e-324, 2.225073858507201e-308, 2.2250738585072014e-308,
              1.7976931348623157e308, -1.7976931348623157e308, 1.0, -1.0, 0.1, 1e16]
    values += [_double_from_bits(rng.getrandbits(64)) for _ in range(N // 3)]
    values += [_double_from_bits(rng.getrandbits(52)) for _ in range(100)]  # subnormals
    values += [rng.uniform(-1e6, 1e6) for _ in range(N // 3)]
    values += [float(rng.randint(-1000, 1000)) for _ in range(N // 3)]
    _check(spark, make_backend, [T.DoubleType()], [(v,) for v in values], lambda row: row[0])


def test_float_keys(spark, make_backend):
    rng = _rng("float")
    values = [0.0, -0.0, math.nan, math.inf, -math.inf, 1.4e-45, 3.4028234663852886e38, 0.5]
    values += [struct.unpack(">f", rng.getrandbits(32).to_bytes(4, "big"))[0]
               for _ in range(N // 2)]
    values += [float(np.float32(rng.uniform(-1e4, 1e4))) for _ in range(N // 2)]
    _check(spark, make_backend, [T.FloatType()], [(v,) for v in values],
           lambda row: np.float32(row[0]))


# Code points of 1, 2, 3 and 4 UTF-8 bytes (no surrogates, which Spark strings cannot hold).
_ALPHABET = ("abcXYZ019 ,;\x00\x7f" "éßüÿĀ" "Ωжא" "€日本語ｶ" "\U0001F600\U0001F9E1\U00010348")


def _random_string(rng: random.Random, length: int) -> str:
    return "".join(rng.choice(_ALPHABET) for _ in range(length))


def test_string_keys(spark, make_backend):
    rng = _rng("string")
    values = ["", "a", "ab", "abc", "abcd", "abcde", "é", "日本語", "\U0001F600", "ÿÿÿ"]
    # Spark's hashUnsafeBytes mixes the bytes after the last full 4-byte word one by one
    # (sign-extended): byte lengths 0..9 cover every tail length twice.
    for length in range(10):
        values += ["".join(rng.choice("abcdefghij") for _ in range(length)) for _ in range(40)]
        values += [_random_string(rng, length) for _ in range(150)]
    values += [_random_string(rng, rng.randint(10, 60)) for _ in range(N - len(values))]
    _check(spark, make_backend, [T.StringType()], [(v,) for v in values], lambda row: row[0])


def test_binary_keys(spark, make_backend):
    rng = _rng("binary")
    values = [b"", b"\x00", b"\xff", b"\x80\x7f", b"abcd", b"\xff\xfe\xfd\xfc\xfb"]
    values += [rng.randbytes(rng.randint(0, 40)) for _ in range(N)]
    _check(spark, make_backend, [T.BinaryType()], [(bytearray(v),) for v in values],
           lambda row: bytes(row[0]))


def test_boolean_keys(spark, make_backend):
    values = [True, False] * 50
    _check(spark, make_backend, [T.BooleanType()], [(v,) for v in values], lambda row: row[0])


def test_two_column_bigint_string_keys(spark, make_backend):
    rng = _rng("bigint-string")
    rows = [(rng.randint(-2**63, 2**63 - 1) if i % 2 else rng.randint(-50, 50),
             _random_string(rng, rng.randint(0, 12))) for i in range(N)]
    _check(spark, make_backend, [T.LongType(), T.StringType()], rows, tuple)


def test_two_column_int_double_keys(spark, make_backend):
    rng = _rng("int-double")
    specials = [0.0, -0.0, math.nan, math.inf, 5e-324]
    rows = [(rng.randint(-2**31, 2**31 - 1),
             specials[i % 5] if i % 7 == 0 else _double_from_bits(rng.getrandbits(64)))
            for i in range(N)]
    _check(spark, make_backend, [T.IntegerType(), T.DoubleType()], rows,
           lambda row: (np.int32(row[0]), row[1]))


def test_two_column_string_binary_keys(spark, make_backend):
    rng = _rng("string-binary")
    rows = [(_random_string(rng, rng.randint(0, 9)), bytearray(rng.randbytes(rng.randint(0, 9))))
            for _ in range(N)]
    _check(spark, make_backend, [T.StringType(), T.BinaryType()], rows,
           lambda row: (row[0], bytes(row[1])))


def test_two_column_boolean_bigint_keys(spark, make_backend):
    rng = _rng("boolean-bigint")
    rows = [(rng.random() < 0.5, rng.randint(-2**63, 2**63 - 1)) for _ in range(N)]
    _check(spark, make_backend, [T.BooleanType(), T.LongType()], rows, tuple)


def test_explicit_key_type_matches_spark_column_type(spark):
    """key_type= picks the Spark type, whatever Python type the key value has."""
    rows = [(v,) for v in range(-500, 500)]
    as_int = _spark_key_groups(spark, [T.IntegerType()], rows)
    as_double = _spark_key_groups(spark, [T.DoubleType()], [(float(v),) for (v,) in rows])
    for (v,), (h_int, *_), (h_double, *_) in zip(rows, as_int, as_double):
        assert stateengine.spark_hash(v, key_type="int") == h_int
        assert stateengine.spark_hash(v, key_type=float) == h_double
