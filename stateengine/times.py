"""Points in time as int milliseconds since the epoch, the unit of timers and watermarks.

Timers, watermarks and processing times are int milliseconds everywhere inside stateengine.
``to_millis`` also takes what Python and Spark users hold: ``datetime.datetime``,
``pandas.Timestamp`` (what a Spark timestamp column becomes in pandas) and
``numpy.datetime64``. A value with a time zone is exact. A value without one (a naive
``datetime`` or ``Timestamp``) is read in the time zone the caller names, which is Spark's
session time zone (``spark.sql.session.timeZone``) in ``stateengine.spark``: that is how Spark
itself reads a timestamp without a zone, and the zone in which it hands timestamp columns to
pandas. Without a zone to read it in, a naive value is refused rather than guessed.
"""

from __future__ import annotations

import datetime
import functools
import re
from typing import Any

_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
_MS = datetime.timedelta(milliseconds=1)
_OFFSET = re.compile(r"^(?:UTC|GMT|UT)?([+-])(\d{1,2})(?::?(\d{2}))?(?::?(\d{2}))?$")
_ACCEPTED = "int milliseconds since the epoch, datetime, pandas.Timestamp or numpy.datetime64"


@functools.lru_cache(maxsize=64)
def time_zone(name: str) -> datetime.tzinfo:
    """A tzinfo for a Spark session time zone: a region id ("Europe/Paris", "UTC") or an
    offset ("+01:00", "-0530", "GMT+8", "UTC-03:00")."""
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    if name.upper() in ("UTC", "Z", "GMT", "UT"):
        return datetime.timezone.utc
    m = _OFFSET.match(name.strip())
    if m:
        sign, hours, minutes, seconds = m.groups()
        delta = datetime.timedelta(hours=int(hours), minutes=int(minutes or 0),
                                   seconds=int(seconds or 0))
        return datetime.timezone(-delta if sign == "-" else delta)
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"time zone {name!r} is neither a region id (such as 'Europe/Paris') "
                         f"nor an offset (such as '+01:00'); set spark.sql.session.timeZone "
                         f"to one of those") from None


def to_millis(value: Any, what: str = "time", naive_zone: str | None = None) -> int:
    """``value`` as int milliseconds since the epoch (``what`` names it in errors).

    ints (Python or numpy) pass unchanged; aware datetimes and Timestamps are exact; naive
    ones are read in ``naive_zone`` (refused if None); sub-millisecond parts are floored, as
    Spark floors a timestamp's microseconds to milliseconds."""
    if type(value) is int:  # the common case first: no imports, no isinstance chain
        return value
    if isinstance(value, bool):
        raise TypeError(f"{what} must be {_ACCEPTED}, not a bool")
    if isinstance(value, int):
        return int(value)
    if type(value).__name__ == "NaTType":  # pandas' missing time (a datetime subclass)
        raise ValueError(f"{what} is NaT (not a time); give a point in time")
    if isinstance(value, datetime.datetime):
        return _datetime_millis(value, what, naive_zone)
    module = type(value).__module__
    if module.startswith("numpy"):
        import numpy as np

        if isinstance(value, np.integer):
            return int(value)
        if isinstance(value, np.datetime64):
            if np.isnat(value):
                raise ValueError(f"{what} is NaT (not a time); give a point in time")
            # numpy datetimes count from the epoch without a zone, as Spark's TIMESTAMP_NTZ
            # does; in a Spark session they are read like other naive values
            ms = int(value.astype("datetime64[ms]").astype(np.int64))
            if naive_zone is None:
                return ms
            return _datetime_millis(_EPOCH.replace(tzinfo=None) + ms * _MS, what, naive_zone)
    if isinstance(value, datetime.date):
        raise TypeError(f"{what} must be {_ACCEPTED}; a date ({value}) has no time of day: "
                        f"use datetime.datetime(...) at the time you mean")
    raise TypeError(f"{what} must be {_ACCEPTED}, got {type(value).__name__}")


def _datetime_millis(value: datetime.datetime, what: str, naive_zone: str | None) -> int:
    if value.tzinfo is None or value.tzinfo.utcoffset(value) is None:
        if naive_zone is None:
            raise ValueError(
                f"{what} {value} has no time zone, so it names no single instant; give an "
                f"aware value (e.g. .replace(tzinfo=datetime.timezone.utc) or "
                f"pandas.Timestamp(..., tz='UTC')) or int milliseconds since the epoch")
        value = value.replace(tzinfo=time_zone(naive_zone))
    return int((value - _EPOCH) // _MS)  # exact integer arithmetic, pandas' nanoseconds too
