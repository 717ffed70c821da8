"""Writes legacy-format1.tar.gz's checkpoints: format-1 documents, as stateengine wrote them
before checksummed documents (commit 3e49f5c). Kept to show how the fixture was made:

    git worktree add /tmp/old 3e49f5c && (cd /tmp/old && python setup.py build_ext --inplace)
    PYTHONPATH=/tmp/old python tests/data/make_legacy_format1.py out
    (cd out && tar --sort=name --owner=0 --group=0 --mtime=2026-01-01 -czf \
        ../tests/data/legacy-format1.tar.gz full incremental store)
"""
import json, os, sys, shutil, tempfile
import stateengine
from stateengine import (KeyedStateBackend, ListStateDescriptor, MapStateDescriptor,
                         StateStoreProvider, ValueStateDescriptor)
VALUE = ValueStateDescriptor("value", int)
WORDS = ListStateDescriptor("words", str, namespace_type=object)
ATTRS = MapStateDescriptor("attrs", str)
D = [VALUE, WORDS, ATTRS]

def fill(b, round_=1):
    value, words, attrs = (b.get_state(d) for d in D)
    for k in range(24):
        b.set_current_key(k)
        value.update(k * 7 + round_)
        words.set_current_namespace("w" if k % 2 else None)
        words.add_all([f"r{round_}", str(k)])
        if k % 3 == 0:
            attrs.put(f"a{k}", round_)
        if k % 4 == 0:
            b.timer_service.register_event_time_timer(100 + k + round_)
    b.operator_state.get_list_state("offsets").add_all([round_, 2, 3])

out = sys.argv[1]
scratch = tempfile.mkdtemp()
root = os.path.join(out, "full"); os.makedirs(root)
b = KeyedStateBackend(os.path.join(scratch, "a"), key_type=int); fill(b)
h = b.snapshot(root, "snap").result()
open(os.path.join(root, "snap.handle.json"), "w").write(json.dumps(h.to_dict(), indent=1))
root = os.path.join(out, "incremental"); os.makedirs(root)
h = b.checkpoint(1, root, private_dir="chk-1/files", manifest_path="chk-1/files.handle.json").result()
b.dispose()
root = os.path.join(out, "store"); os.makedirs(root)
prov = StateStoreProvider(root, "op", 0, 1, key_type=int, descriptors=D, local_dir=scratch)
for v in (0, 1):
    s = prov.get_store(v); fill(s.backend, v + 1); s.commit()
prov.catalog.mark_committed(2, 1)
prov.close()
shutil.rmtree(scratch)
