"""Key groups: the unit in which keyed state is distributed and rescaled (Flink's model).

A job has ``max_parallelism`` key groups. A key's group is Spark SQL's
``pmod(hash(key columns...), max_parallelism)``, so Spark can route rows with plain SQL, and
operator ``i`` of ``p`` owns the contiguous range Flink would give it.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any, Iterator

from . import _native

DEFAULT_MAX_PARALLELISM = 128
MAX_MAX_PARALLELISM = 32768


def check_max_parallelism(max_parallelism: int) -> int:
    try:  # any integer type (numpy included), but not bool or float
        value = operator.index(max_parallelism) if not isinstance(max_parallelism, bool) else None
    except TypeError:
        value = None
    if value is None or not 1 <= value <= MAX_MAX_PARALLELISM:
        raise ValueError(
            f"max_parallelism must be an int in [1, {MAX_MAX_PARALLELISM}], got {max_parallelism!r}")
    return value


@dataclass(frozen=True)
class KeyGroupRange:
    """Key groups ``start..end``, both inclusive (empty when ``end < start``), as in Flink."""

    start: int
    end: int

    def __post_init__(self) -> None:
        if self.start < 0 or self.end < self.start - 1:
            raise ValueError(f"invalid key group range [{self.start}, {self.end}]")

    @classmethod
    def for_operator(cls, operator_index: int, parallelism: int,
                     max_parallelism: int = DEFAULT_MAX_PARALLELISM) -> "KeyGroupRange":
        """The range operator ``operator_index`` of ``parallelism`` owns (Flink's arithmetic)."""
        check_max_parallelism(max_parallelism)
        if not 0 < parallelism <= max_parallelism:
            raise ValueError(
                f"parallelism {parallelism} must lie in [1, max_parallelism={max_parallelism}]")
        if not 0 <= operator_index < parallelism:
            raise ValueError(f"operator index {operator_index} outside [0, {parallelism})")
        start = (operator_index * max_parallelism + parallelism - 1) // parallelism
        end = ((operator_index + 1) * max_parallelism - 1) // parallelism
        return cls(start, end)

    @classmethod
    def all(cls, max_parallelism: int = DEFAULT_MAX_PARALLELISM) -> "KeyGroupRange":
        """Every key group, 0 to max_parallelism - 1."""
        return cls(0, check_max_parallelism(max_parallelism) - 1)

    def contains(self, key_group: int) -> bool:
        """Whether key_group lies in the range (also ``key_group in range``)."""
        return self.start <= key_group <= self.end

    __contains__ = contains

    def __len__(self) -> int:
        return self.end - self.start + 1

    def __iter__(self) -> Iterator[int]:
        return iter(range(self.start, self.end + 1))

    def intersection(self, other: "KeyGroupRange") -> "KeyGroupRange":
        """The key groups in both ranges (an empty range when they do not overlap)."""
        start, end = max(self.start, other.start), min(self.end, other.end)
        return KeyGroupRange(start, end) if start <= end else KeyGroupRange(start, start - 1)

    def is_empty(self) -> bool:
        """Whether the range holds no key group."""
        return self.end < self.start

    def __str__(self) -> str:
        return f"KeyGroupRange{{start={self.start}, end={self.end}}}"


def operator_for_key_group(key_group: int, parallelism: int, max_parallelism: int) -> int:
    """Index of the operator owning ``key_group`` (the inverse of ``for_operator``)."""
    return key_group * parallelism // max_parallelism


def spark_hash(key: Any, key_type: Any = None) -> int:
    """Spark SQL ``hash(cols...)`` of a key; ``key_type`` picks Spark column types (see
    ``stateengine.serializers.key_codecs``), else they follow the Python types."""
    from .serializers import key_codecs

    codecs = None if key_type is None else key_codecs(key_type)[0]
    return _native.spark_hash(key, codecs)


def assign_key_group(key: Any, max_parallelism: int = DEFAULT_MAX_PARALLELISM,
                     key_type: Any = None) -> int:
    """The key group of ``key``: ``pmod(hash(key), max_parallelism)`` as Spark computes it."""
    return _native.key_group_for_hash(spark_hash(key, key_type),
                                      check_max_parallelism(max_parallelism))


def key_group_prefix_bytes(max_parallelism: int) -> int:
    """Bytes of key-group prefix in every RocksDB key: 1 up to 128 key groups, else 2."""
    return 1 if check_max_parallelism(max_parallelism) <= 128 else 2
