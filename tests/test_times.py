"""Points in time as int milliseconds (stateengine.times.to_millis): what timers, watermarks
and processing times accept. Aware values are exact; naive ones are read in the zone the caller
names (Spark's session time zone in stateengine.spark) and refused without one."""

import datetime

import numpy as np
import pandas as pd
import pytest

from stateengine.times import time_zone, to_millis

UTC = datetime.timezone.utc
JULY_1_2024_UTC = 1_719_792_000_000


@pytest.mark.parametrize("value", [
    JULY_1_2024_UTC, np.int64(JULY_1_2024_UTC),
    datetime.datetime(2024, 7, 1, tzinfo=UTC),
    datetime.datetime(2024, 7, 1, 2, tzinfo=datetime.timezone(datetime.timedelta(hours=2))),
    pd.Timestamp("2024-07-01", tz="UTC"),
    pd.Timestamp("2024-06-30 20:00", tz="America/New_York"),
    np.datetime64("2024-07-01T00:00:00"),  # numpy counts from the epoch, without a zone
])
def test_aware_values_and_ints_are_exact(value):
    assert to_millis(value) == JULY_1_2024_UTC


@pytest.mark.parametrize("zone,hours", [("UTC", 0), ("Europe/Paris", 2), ("+02:00", 2),
                                        ("GMT-3", -3), ("UTC+05:30", 5.5), ("-0800", -8)])
def test_naive_values_are_read_in_the_given_zone(zone, hours):
    offset = int(hours * 3_600_000)
    for naive in (datetime.datetime(2024, 7, 1), pd.Timestamp("2024-07-01"),
                  np.datetime64("2024-07-01T00:00")):
        assert to_millis(naive, naive_zone=zone) == JULY_1_2024_UTC - offset


def test_sub_millisecond_parts_are_floored_like_spark():
    assert to_millis(pd.Timestamp("2024-07-01 00:00:00.0019999", tz="UTC")) == JULY_1_2024_UTC + 1
    assert to_millis(pd.Timestamp("1969-12-31 23:59:59.9995", tz="UTC")) == -1
    assert to_millis(datetime.datetime(1969, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC)) == -1


@pytest.mark.parametrize("value,error,message", [
    (datetime.datetime(2024, 7, 1), ValueError, "has no time zone"),
    (pd.Timestamp("2024-07-01"), ValueError, "has no time zone"),
    (pd.NaT, ValueError, "NaT"),
    (np.datetime64("NaT"), ValueError, "NaT"),
    (True, TypeError, "not a bool"),
    (1.5, TypeError, "got float"),
    ("2024-07-01", TypeError, "got str"),
    (datetime.date(2024, 7, 1), TypeError, "a date .* has no time of day"),
])
def test_what_names_no_instant_is_refused_with_the_reason(value, error, message):
    with pytest.raises(error, match=message):
        to_millis(value, "watermark")


def test_an_unknown_zone_is_refused():
    with pytest.raises(ValueError, match="neither a region id"):
        time_zone("Mars/Olympus")
