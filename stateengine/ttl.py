"""State time-to-live: Flink's ``StateTtlConfig`` (PyFlink's names), passed as ``ttl=`` to a
state descriptor.

An entry of a state with TTL (a value, each list element, each map entry) expires ``ttl_ms``
after its last access: its creation and every write, and every read too under
``UpdateType.OnReadAndWrite``. Time is whatever the caller last gave the backend with
``set_ttl_time(ms)`` (in ``stateengine.spark``: the batch timestamp), never the wall clock, so
a replayed batch sees the same expiry. Expired entries are never returned under
``StateVisibility.NeverReturnExpired``; reads remove what they find expired, full snapshots
leave it out, and a RocksDB compaction filter (C++, csrc/ttl.h) purges it in the background.

Only whether a state has TTL is stored with it (its ``"ttl"`` attribute): the duration and the
update and visibility settings are configuration of the running job and may change between
runs, as in Flink. Turning TTL on or off for existing state is refused.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from enum import Enum
from typing import Any

from .errors import StateRegistrationError


class UpdateType(str, Enum):
    """When an entry's last access time moves (Flink's ``StateTtlConfig.UpdateType``)."""

    OnCreateAndWrite = "OnCreateAndWrite"  # creation and every write
    OnReadAndWrite = "OnReadAndWrite"      # also every read (a read then writes the entry)


class StateVisibility(str, Enum):
    """Whether a read returns an expired entry that is still stored (Flink's names)."""

    NeverReturnExpired = "NeverReturnExpired"
    ReturnExpiredIfNotCleanedUp = "ReturnExpiredIfNotCleanedUp"


def _millis(ttl: Any) -> int:
    if isinstance(ttl, datetime.timedelta):
        ms = ttl // datetime.timedelta(milliseconds=1)
    elif isinstance(ttl, int) and not isinstance(ttl, bool):
        ms = ttl
    else:
        raise StateRegistrationError(
            f"a TTL is an int of milliseconds or a datetime.timedelta, got {ttl!r:.60}")
    if ms <= 0:
        raise StateRegistrationError(f"a TTL must be at least 1 ms, got {ttl!r:.60}")
    return int(ms)


@dataclass(frozen=True)
class StateTtlConfig:
    """TTL settings of one state: ``StateTtlConfig(ttl_ms=60_000)`` or, with Flink's builder,
    ``StateTtlConfig.new_builder(timedelta(minutes=1)).set_update_type(
    StateTtlConfig.UpdateType.OnReadAndWrite).build()``.

    Background cleanup always runs in the RocksDB compaction filter
    (``cleanup_in_rocksdb_compact_filter()`` is accepted for Flink's builder chains); files that
    no compaction touches go through it at least every 30 days (RocksDB's periodic compaction,
    Flink's default).
    """

    ttl_ms: int
    update_type: UpdateType = UpdateType.OnCreateAndWrite
    state_visibility: StateVisibility = StateVisibility.NeverReturnExpired

    UpdateType = UpdateType
    StateVisibility = StateVisibility

    def __post_init__(self) -> None:
        object.__setattr__(self, "ttl_ms", _millis(self.ttl_ms))
        try:
            object.__setattr__(self, "update_type", UpdateType(self.update_type))
            object.__setattr__(self, "state_visibility", StateVisibility(self.state_visibility))
        except ValueError as e:
            raise StateRegistrationError(
                f"{e}; use StateTtlConfig.UpdateType.OnCreateAndWrite / OnReadAndWrite and "
                f"StateTtlConfig.StateVisibility.NeverReturnExpired / "
                f"ReturnExpiredIfNotCleanedUp") from None

    @property
    def update_on_read(self) -> bool:
        """Whether reads restart an entry's TTL too (``OnReadAndWrite``)."""
        return self.update_type is UpdateType.OnReadAndWrite

    @property
    def return_expired(self) -> bool:
        """Whether an expired entry not yet cleaned up is still returned, once
        (``ReturnExpiredIfNotCleanedUp``)."""
        return self.state_visibility is StateVisibility.ReturnExpiredIfNotCleanedUp

    @staticmethod
    def new_builder(ttl: int | datetime.timedelta) -> "StateTtlConfigBuilder":
        """Flink's builder: ``ttl`` in milliseconds or as a ``timedelta``."""
        return StateTtlConfigBuilder(_millis(ttl))

    def __repr__(self) -> str:
        return (f"StateTtlConfig(ttl_ms={self.ttl_ms}, update_type={self.update_type.value}, "
                f"state_visibility={self.state_visibility.value})")


class StateTtlConfigBuilder:
    """What ``StateTtlConfig.new_builder(ttl)`` returns; every setter returns the builder."""

    def __init__(self, ttl_ms: int) -> None:
        self._ttl_ms = ttl_ms
        self._update = UpdateType.OnCreateAndWrite
        self._visibility = StateVisibility.NeverReturnExpired

    def set_ttl(self, ttl: int | datetime.timedelta) -> "StateTtlConfigBuilder":
        self._ttl_ms = _millis(ttl)
        return self

    def set_update_type(self, update_type: UpdateType) -> "StateTtlConfigBuilder":
        self._update = update_type
        return self

    def update_ttl_on_create_and_write(self) -> "StateTtlConfigBuilder":
        return self.set_update_type(UpdateType.OnCreateAndWrite)

    def update_ttl_on_read_and_write(self) -> "StateTtlConfigBuilder":
        return self.set_update_type(UpdateType.OnReadAndWrite)

    def set_state_visibility(self, visibility: StateVisibility) -> "StateTtlConfigBuilder":
        self._visibility = visibility
        return self

    def never_return_expired(self) -> "StateTtlConfigBuilder":
        return self.set_state_visibility(StateVisibility.NeverReturnExpired)

    def return_expired_if_not_cleaned_up(self) -> "StateTtlConfigBuilder":
        return self.set_state_visibility(StateVisibility.ReturnExpiredIfNotCleanedUp)

    def cleanup_in_rocksdb_compact_filter(self, *_: Any, **__: Any) -> "StateTtlConfigBuilder":
        """Accepted for Flink's builder chains: the compaction filter always runs, reading the
        time the caller last set (no query interval is needed: it is an atomic read)."""
        return self

    def build(self) -> StateTtlConfig:
        return StateTtlConfig(self._ttl_ms, self._update, self._visibility)


def check_ttl(name: str, ttl: Any) -> StateTtlConfig | None:
    """A descriptor's ``ttl=`` argument as a StateTtlConfig (None: no TTL)."""
    if ttl is None or isinstance(ttl, StateTtlConfig):
        return ttl
    raise StateRegistrationError(
        f"state '{name}': ttl= takes a stateengine.StateTtlConfig (e.g. "
        f"StateTtlConfig(ttl_ms=60_000)), got {type(ttl).__name__}")
