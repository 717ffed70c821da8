"""stateengine.spark never unpickles what a checkpoint holds unless the job passes
allow_pickle=True (tests/test_no_pickle.py plants the payloads and reads them through the
backend, the StateStore, timers and the CLI; this reads them through read_state, and checks
that jobs with pickle states need the flag). Each refused read is a failing Spark job, retried
by the session's task attempts, so one is enough here."""

from __future__ import annotations

import os

import pandas as pd
import pytest

from stateengine import (MixedTypesError, StateRegistrationError, StateStoreProvider,
                         ValueStateDescriptor)
from stateengine.spark import apply_with_state, bootstrap_state, map_with_state, read_state
from tests.test_no_pickle import DESCRIPTORS, plant

pytestmark = pytest.mark.spark


@pytest.fixture
def planted_store(tmp_path):
    marker = str(tmp_path / "MARKER")
    ck = str(tmp_path / "ck")
    with StateStoreProvider(ck, "op", 0, 1, key_type=int, descriptors=DESCRIPTORS,
                            local_dir=str(tmp_path / "local"), allow_pickle=True) as provider:
        store = provider.get_store(0)
        plant(store.backend, marker)
        store.commit()
    return ck, marker


def test_read_state_and_timers_never_unpickle(spark, planted_store):
    ck, marker = planted_store
    # a state declared int, whose namespace holds the pickle
    with pytest.raises(Exception, match="PickleNotAllowedError.*allow_pickle=True"):
        read_state(spark, ck, "vi", operator_id="op").collect()
    assert not os.path.exists(marker)


def test_pickle_states_in_spark_jobs_need_allow_pickle(spark, tmp_path):
    ck = str(tmp_path / "ck")
    seen = ValueStateDescriptor("seen", value_type="pickle")
    df = spark.createDataFrame(pd.DataFrame({"k": [1, 2]}))

    def remember(key, rows, ctx):
        ctx.state("seen").update(frozenset({key}))
        return None

    # refused on the driver, before any task runs
    with pytest.raises(StateRegistrationError, match='value_type="pickle".*allow_pickle=True'):
        apply_with_state(df, "k", remember, "k long", [seen], ck, 0, operator_id="op")
    with pytest.raises(StateRegistrationError, match='value_type="pickle"'):
        map_with_state(df, "k", lambda rows, ctx: None, "k long", [seen], ck, 0)
    with pytest.raises(StateRegistrationError, match='value_type="pickle"'):
        bootstrap_state(df, "k", seen, "k", ck)
    apply_with_state(df, "k", remember, "k long", [seen], ck, 0, num_partitions=1,
                     operator_id="op", allow_pickle=True).collect()
    # a frozenset has no Spark type: read_state says so and how to read it as text
    with pytest.raises(MixedTypesError, match='Python type frozenset.*value_type="json"'):
        read_state(spark, ck, "seen", operator_id="op", allow_pickle=True)
    rows = read_state(spark, ck, "seen", operator_id="op", allow_pickle=True,
                      value_type="json").collect()
    assert sorted((r.key, r.value) for r in rows) == [(1, '"frozenset({1})"'),
                                                      (2, '"frozenset({2})"')]
