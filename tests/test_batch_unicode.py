"""Batch and scalar calls store every string under the same bytes, whatever its characters.

Keys, map user keys and values drawn from all of Unicode (astral plane, combining marks, NUL,
right-to-left text; lone surrogates, which have no UTF-8, are tested in test_value_limits)
are written through the batch calls from each column layout (numpy 'U', object arrays,
pyarrow string and large_string arrays, lists) and through the scalar calls: both backends
must hold identical RocksDB bytes, and each path must read what the other wrote.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stateengine import KeyedStateBackend, MapStateDescriptor, ValueStateDescriptor

TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
ROWS = st.lists(st.tuples(TEXT, TEXT, TEXT), min_size=1, max_size=30)
LAYOUTS = {
    "numpy-U": lambda xs: np.array(xs, dtype=str),
    "object": lambda xs: np.array(xs, dtype=object),
    "arrow-string": lambda xs: pa.array(xs, pa.string()),
    "arrow-large": lambda xs: pa.array(xs, pa.large_string()),
    "list": list,
}


def as_held(column) -> list[str]:
    """The strings a column holds (numpy 'U' drops trailing NULs when it stores them)."""
    return column.to_pylist() if isinstance(column, pa.Array) else list(map(str, column))


def contents(b, *states):
    return [b._raw_scan(s.column_family) for s in states]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(rows=ROWS, layout=st.sampled_from(sorted(LAYOUTS)), typed=st.booleans(),
       inferred=st.booleans())
def test_batch_and_scalar_store_the_same_bytes_for_any_text(tmp_path_factory, rows, layout,
                                                             typed, inferred):
    root = tmp_path_factory.mktemp("u")
    make = LAYOUTS[layout]
    keys, uks, vals = (make([r[i] for r in rows]) for i in range(3))
    held = list(zip(as_held(keys), as_held(uks), as_held(vals)))
    vtype = str if typed else None  # the strict 'string' serializer or the tagged default
    descs = (ValueStateDescriptor("v", vtype), MapStateDescriptor("m", str if typed else None,
                                                                  vtype))
    key_type = None if inferred else str  # None: the first key decides, on either path
    batch = KeyedStateBackend(root / "batch", key_type=key_type)
    scalar = KeyedStateBackend(root / "scalar", key_type=key_type)
    bv, bm = (batch.get_state(d) for d in descs)
    sv, sm = (scalar.get_state(d) for d in descs)
    try:
        bv.put_many(keys, vals)
        bm.put_many(keys, uks, vals)
        for k, u, v in held:
            scalar.set_current_key(k)
            sv.update(v)
            sm.put(u, v)
        assert contents(batch, bv, bm) == contents(scalar, sv, sm)
        # each path reads what the other wrote
        got, found = sv.get_many(keys)
        assert found.all()
        last = {k: v for k, _, v in held}
        assert list(got) == [last[k] for k, _, _ in held]
        for k, u, v in held:
            batch.set_current_key(k)
            assert bv.value() == last[k]
            assert bm.get(u) == {(k2, u2): v2 for k2, u2, v2 in held}[(k, u)]
        mgot, mfound = sm.get_many(keys, uks)
        assert mfound.all()
        assert sorted(batch.get_keys("v")) == sorted(last)
    finally:
        batch.close()
        scalar.close()
