"""Writes typed-before-evolution.tar.gz: typed states of every kind (value, list, map,
reducing, aggregating, a list with TTL) as stateengine wrote them before schema evolution
(commit 5ae7088, value schemas fixed for life): a StateStore checkpoint of operator "op" at
two partitions (versions 1 and 2; incremental) and a full snapshot of one backend. Run with
that commit's build:

    git worktree add /tmp/old 5ae7088 && (cd /tmp/old && python setup.py build_ext --inplace)
    PYTHONPATH=/tmp/old:tests/data python tests/data/make_typed_before_evolution.py out
    (cd out && tar --sort=name --owner=0 --group=0 --mtime=2026-01-01 -czf \
        ../tests/data/typed-before-evolution.tar.gz store full)
"""
import json, os, shutil, sys, tempfile

from stateengine import KeyedStateBackend, KeyGroupRange, StateStoreProvider
from stateengine.keygroups import assign_key_group

import typed_state_v1 as v1


def fill(backend, part):
    """part 0 writes half of every state's contents, part 1 the rest (two versions)."""
    hs = [backend.get_state(d) for d in v1.descriptors()]
    session, events, attrs, total, acc, recent = hs
    backend.set_ttl_time(v1.TTL_TIME)
    for k in v1.KEYS:
        if not backend.key_group_range.contains(assign_key_group(k, backend.max_parallelism)):
            continue
        backend.set_current_key(k)
        e = v1.expected(k)
        if part == 0:
            session.update((k, "old", [], 0.0, 0))
            events.add(e["events"][0])
            attrs.put("a", e["attrs"]["a"])
            total.add((k, 1))
            acc.add(float(k))
            recent.add(e["recent"][0])
        else:
            session.update(e["session"])
            events.add(e["events"][1])
            if "b" in e["attrs"]:
                attrs.put("b", e["attrs"]["b"])
            total.add((2 * k, 1))
            acc.add(float(k))
            recent.add(e["recent"][1])


out = sys.argv[1]
scratch = tempfile.mkdtemp()
root = os.path.join(out, "store")
os.makedirs(root)
for p in (0, 1):
    prov = StateStoreProvider(root, "op", p, 2, key_type=int, descriptors=v1.descriptors(),
                              local_dir=os.path.join(scratch, f"p{p}"))
    for v in (0, 1):
        s = prov.get_store(v)
        fill(s.backend, v)
        s.commit()
    prov.close()
for v in (1, 2):
    StateStoreProvider(root, "op", 0, 2, key_type=int).catalog.mark_committed(v, 2)
root = os.path.join(out, "full")
os.makedirs(root)
b = KeyedStateBackend(os.path.join(scratch, "full"), key_type=int)
fill(b, 0)
fill(b, 1)
h = b.snapshot(root, "snap").result()
with open(os.path.join(root, "snap.handle.json"), "w") as f:
    f.write(json.dumps(h.to_dict(), indent=1))
b.dispose()
shutil.rmtree(scratch)
