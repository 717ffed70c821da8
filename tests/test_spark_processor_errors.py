"""A StatefulProcessor method that raises: the driver sees stateengine's UserFunctionError
naming the method, the operator, the key, the batch and the partition, for every method
(init, handleInputRows, handleExpiredTimer, handleInitialState, close) in both flavours;
output that does not fit the output schema says so; the failed task commits nothing. Each
case runs through stateengine.spark and through the local harness (``engine``), which must
report the same."""

from __future__ import annotations

import datetime as dt
import os

import pandas as pd
import pytest

from stateengine import UserFunctionError, assign_key_group, operator_for_key_group
from stateengine.spark import transform_with_state, transform_with_state_in_pandas
from stateengine.testing import ProcessorHarness

pytestmark = pytest.mark.spark

pytest.importorskip("pyspark.sql.streaming.stateful_processor",
                    reason="Spark's StatefulProcessor needs pyspark >= 4.0")

from pyspark.sql import Row  # noqa: E402
from pyspark.sql.streaming import StatefulProcessor  # noqa: E402

PARTS = 2
OUT = "user string, n long"
HEAD = "user function tests.test_spark_processor_errors.Failing."


def partition_of(key):
    return operator_for_key_group(assign_key_group(key, 128), PARTS, 128)


class Failing(StatefulProcessor):
    """Counts rows per user; raises in ``method`` for user 'b' (or, for init and close, in
    the tasks only: the driver's run of init must pass)."""

    def __init__(self, method: str, rows: bool = False) -> None:
        self.method = method
        self.rows = rows

    def _maybe_fail(self, method: str, user: str | None = None) -> None:
        if method != self.method:
            return
        if user is None and type(self.handle).__name__ == "_RecordingHandle":
            return  # init/close on the driver
        if user in (None, "b"):
            raise LookupError(f"{method} cannot handle {user}")

    def init(self, handle) -> None:
        self.handle = handle
        self.count = handle.getValueState("count", "n long")
        self._maybe_fail("init")

    def handleInputRows(self, key, rows, timerValues):
        (user,) = key
        self._maybe_fail("handleInputRows", user)
        n = sum(len(r) for r in rows) if not self.rows else sum(1 for _ in rows)
        old = self.count.get()
        total = (old[0] if old else 0) + n
        self.count.update((total,))
        self.handle.registerTimer(500)
        if self.rows:
            yield Row(user=user, n=total)
        else:
            yield pd.DataFrame({"user": [user], "n": [total]})

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo):
        self._maybe_fail("handleExpiredTimer", key[0])
        return iter(())

    def handleInitialState(self, key, initialState, timerValues) -> None:
        self._maybe_fail("handleInitialState", key[0])

    def close(self) -> None:
        self._maybe_fail("close")


ENGINES = ["spark", "harness"]


def run(spark, ck, processor, batch_id=0, flavour=transform_with_state_in_pandas,
        users=("a", "b"), out=OUT, initial=True, engine="spark"):
    """The rows of one batch through stateengine.spark (state in ``ck``) or the harness
    (its directory ``ck``, state in ``ck``/checkpoint)."""
    pdf = pd.DataFrame({"user": list(users)})
    seed = pd.DataFrame({"user": ["b"], "seed": [1]})
    if engine == "harness":
        with ProcessorHarness(processor, "user", out, time_mode="ProcessingTime",
                              flavour="pandas" if flavour is transform_with_state_in_pandas
                              else "row", initial_state=seed if initial else None,
                              num_partitions=PARTS, operator_id="tws", directory=ck) as h:
            return h.run_batch(pdf, processing_time=1000).rows
    kwargs = {}
    if initial:
        kwargs["initial_state"] = spark.createDataFrame(seed)
    return flavour(spark.createDataFrame(pdf), processor, "user", out, ck,
                   time_mode="ProcessingTime", batch_id=batch_id, processing_time=1000,
                   num_partitions=PARTS, operator_id="tws", **kwargs).collect()


def state_dir(ck, engine):
    return os.path.join(ck, "checkpoint") if engine == "harness" else ck


def error_text(info):
    """What the driver shows of an error: Spark's text of the worker's exception, or the
    harness's exception as Python prints it (its type, then its message)."""
    return f"{info.typename}: {info.value}"


def first_line(text, head=HEAD):
    lines = [line for line in text.splitlines() if head in line]
    assert lines, text[-3000:]
    return lines[0][lines[0].index(head):]


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("method,keyed", [("handleInputRows", True),
                                          ("handleExpiredTimer", True),
                                          ("handleInitialState", True),
                                          ("init", False), ("close", False)])
def test_each_method_is_named_with_its_key_batch_and_partition(spark, tmp_path, method, keyed,
                                                               engine):
    ck = str(tmp_path / "ck")
    with pytest.raises(Exception) as info:
        run(spark, ck, Failing(method), engine=engine)
    where = (f"key 'b', batch 0, partition {partition_of('b')}" if keyed else "batch 0, partition ")
    line = first_line(str(info.value))
    user = "b" if keyed else "None"
    assert line.startswith(f"{HEAD}{method} raised LookupError: {method} cannot handle {user} "
                           f"(operator 'tws', {where}"), line
    assert "self._maybe_fail(" in str(info.value)  # the method's own traceback
    if keyed:  # the failed partition committed nothing
        name = f"p{partition_of('b'):05d}-of-{PARTS:05d}.json"
        assert name not in os.listdir(os.path.join(state_dir(ck, engine), "tws", "v1"))


@pytest.mark.parametrize("engine", ENGINES)
def test_init_failing_on_the_driver_raises_there(spark, tmp_path, engine):
    class DriverFails(Failing):
        def init(self, handle):
            raise RuntimeError("no config")

    with pytest.raises(UserFunctionError) as info:
        run(spark, str(tmp_path / "ck"), DriverFails("none"), engine=engine)
    assert str(info.value).splitlines()[0].endswith(
        "DriverFails.init raised RuntimeError: no config (operator 'tws', on the driver)")


@pytest.mark.parametrize("engine", ENGINES)
def test_row_flavour_errors_wrong_rows_and_timestamp_output(spark, tmp_path, engine):
    with pytest.raises(Exception) as info:
        run(spark, str(tmp_path / "a"), Failing("handleInputRows", rows=True),
            flavour=transform_with_state, initial=False, engine=engine)
    assert first_line(str(info.value)).startswith(
        f"{HEAD}handleInputRows raised LookupError: handleInputRows cannot handle b "
        f"(operator 'tws', key 'b', batch 0")

    class OneField(Failing):
        def handleInputRows(self, key, rows, timerValues):
            yield Row(user=key[0])

    with pytest.raises(Exception) as info:
        run(spark, str(tmp_path / "b"), OneField("none", rows=True), flavour=transform_with_state,
            initial=False, engine=engine)
    line = first_line(error_text(info), "OutputSchemaError: ")
    assert "OneField.handleInputRows does not fit the output schema (operator 'tws', key" in line
    assert line.endswith("expected rows of struct<user:string,n:bigint>, got a Row with fields "
                         "[user]")

    class Stamped(Failing):
        def handleInputRows(self, key, rows, timerValues):
            yield Row(user=key[0], at=dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc))

    rows = run(spark, str(tmp_path / "c"), Stamped("none", rows=True),
               flavour=transform_with_state, out="user string, at timestamp", initial=False,
               engine=engine)
    got = {r.user: r.at.replace(tzinfo=None) for r in rows}
    zone = spark.conf.get("spark.sql.session.timeZone")
    assert zone == "UTC" and got == {u: dt.datetime(2024, 1, 2, 3, 4, 5) for u in "ab"}


@pytest.mark.parametrize("engine", ENGINES)
def test_pandas_frames_of_the_wrong_shape(spark, tmp_path, engine):
    class Renamed(Failing):
        def handleInputRows(self, key, rows, timerValues):
            yield pd.DataFrame({"user": [key[0]], "count": [1]})

    with pytest.raises(Exception) as info:
        run(spark, str(tmp_path / "ck"), Renamed("none"), initial=False, engine=engine)
    line = first_line(error_text(info), "OutputSchemaError: ")
    assert line.endswith("expected a DataFrame with the columns of struct<user:string,n:bigint>, "
                         "got columns [user, count] (missing n; unexpected count)")
